//! Fleet mode: many daemons, one control plane in PostgreSQL (proto-docs/fleet.md).
//!
//! A daemon whose `store` is `postgres` is one member of a fleet: it registers itself and
//! writes a heartbeat ([`members`]), shares the approval queue ([`queue`]: entries are
//! rows, a decision is a conditional UPDATE so exactly one wins fleet-wide, and
//! `LISTEN/NOTIFY` wakes the member holding the call), and writes its audit records to one
//! table. Every write that can wait goes through one ordered, bounded outbox
//! ([`outbox`]), so a database that goes away costs no acknowledged record: the member
//! keeps serving local work, reports `degraded`, and writes the backlog when it returns.
//!
//! The crates: `tokio-postgres` and its pool `deadpool-postgres`; LISTEN runs on one
//! connection of its own (a pooled connection drops notifications).

mod budgets;
mod members;
mod outbox;
mod pins;
mod queue;
mod schema;
mod store;
mod tokens;

pub use tokens::User;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::mpsc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::approvals::{Approvals, Deciders};
use crate::audit::AuditLog;
use crate::config::{self, Config};
use crate::lock;
use crate::protocol::{FleetHealth, FleetServer, FleetStatusResult};

/// How long one exchange with the database may take before it counts as a failure.
const DB_TIMEOUT: Duration = Duration::from_secs(3);

/// What the member's tasks need of the daemon (handed in: the host holds the fleet, so the
/// fleet does not reach back into the host).
#[derive(Clone)]
pub struct Context {
    pub approvals: Arc<Approvals>,
    pub tracker: TaskTracker,
    pub shutdown: CancellationToken,
    /// The member's MCP servers and their states, for each heartbeat.
    pub servers: Arc<dyn Fn() -> Vec<FleetServer> + Send + Sync>,
    /// Has the catalog read the fleet's pins again (another member changed them); blocks
    /// on the database, so it is called on a blocking thread.
    pub pins_changed: Arc<dyn Fn() + Send + Sync>,
}

/// This daemon's membership of a fleet; cheap to clone.
#[derive(Clone)]
pub struct Fleet(Arc<Inner>);

struct Inner {
    member: String,
    cfg: config::Fleet,
    /// `fleet.approver_role`, as the approval queue applies it.
    deciders: Option<Deciders>,
    /// Where this member listens (its row says so).
    listeners: Vec<String>,
    pool: Pool,
    /// Connections in each pool (the session store has a pool of its own, see [`store`]).
    pool_size: usize,
    /// For the LISTEN connection.
    pg: tokio_postgres::Config,
    schema_version: i32,
    /// Seals MRTR `requestState`s: the same for every member (see
    /// [`schema::request_state_key`]).
    request_state_key: Vec<u8>,
    /// The last failure while the database is unreachable.
    down: Mutex<Option<String>>,
    outbox: mpsc::UnboundedSender<outbox::Op>,
    outbox_rx: Mutex<Option<mpsc::UnboundedReceiver<outbox::Op>>>,
    queued: AtomicUsize,
    dropped: AtomicU64,
    /// Writes are being dropped (the outbox is full): the first drop of a run logs.
    dropping: AtomicBool,
    /// The users' live tokens (SHA-256 → user and roles), this member's copy ([`tokens`]).
    users: arc_swap::ArcSwap<tokens::Users>,
    /// Numbers this member's audit records (with the member id, their key in the table,
    /// so a batch written twice after a lost acknowledgement is stored once).
    audit_seq: AtomicU64,
}

/// A database error as one line: the server's message when it sent one (never the
/// password: neither the driver nor the server prints it).
fn pg_error(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        s.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    s
}

fn pool_error(e: &deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(e) => pg_error(e),
        other => other.to_string(),
    }
}

/// Whether the server refused the login (SQLSTATE class 28: a wrong password, an unknown
/// user, no `pg_hba.conf` entry) or asked for a password the URL does not give: the step
/// that failed is authentication, not reaching the server.
fn refused_login(e: &deadpool_postgres::PoolError) -> bool {
    let deadpool_postgres::PoolError::Backend(e) = e else {
        return false;
    };
    match e.as_db_error() {
        Some(db) => db.code().code().starts_with("28"),
        // The driver's own refusal to answer a password challenge it has nothing for.
        None => pg_error(e).contains("password missing"),
    }
}

/// `host:port (user U, database D)` of a parsed config: what an error names.
fn describe(pg: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host as H;
    let hosts: Vec<String> = pg
        .get_hosts()
        .iter()
        .map(|h| match h {
            H::Tcp(name) => name.clone(),
            H::Unix(path) => path.display().to_string(),
        })
        .collect();
    let port = pg.get_ports().first().copied().unwrap_or(5432);
    format!(
        "{}:{port} (user {}, database {})",
        if hosts.is_empty() {
            "localhost".to_owned()
        } else {
            hosts.join(",")
        },
        pg.get_user().unwrap_or("?"),
        pg.get_dbname().unwrap_or("default")
    )
}

/// A pool of `size` connections to `pg`, each exchange bounded by [`DB_TIMEOUT`].
fn new_pool(pg: &tokio_postgres::Config, size: usize) -> anyhow::Result<Pool> {
    let manager = Manager::from_config(
        pg.clone(),
        tokio_postgres::NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(DB_TIMEOUT))
        .create_timeout(Some(DB_TIMEOUT))
        .recycle_timeout(Some(DB_TIMEOUT))
        .build()
        .map_err(|e| anyhow::anyhow!("fleet store: cannot build the pool: {e}"))
}

fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(s.as_bytes()))
}

impl Fleet {
    /// Joins the fleet `config` names (`None` for a sled store): connects, migrates the
    /// schema, checks the fleet's key and registers this member. Each failure names the
    /// host and the step, never the password.
    /// `tcp` is the daemon's bound TCP listener: without `fleet.internal_url`, other
    /// members reach this one there (unless it is bound to every interface, which names
    /// no address to reach).
    pub async fn open(
        config: &Config,
        listeners: Vec<String>,
        tcp: Option<std::net::SocketAddr>,
    ) -> anyhow::Result<Option<Fleet>> {
        let config::Store::Postgres { url, pool } = &config.store else {
            return Ok(None);
        };
        let mut cfg = config
            .fleet
            .clone()
            .context("a postgres store needs the `fleet` section")?;
        if cfg.internal_url.is_none() {
            cfg.internal_url = tcp
                .filter(|a| !a.ip().is_unspecified())
                .map(|a| format!("http://{a}"));
        }
        let mut pg: tokio_postgres::Config = url.parse().map_err(|e| {
            anyhow::anyhow!(
                "store.url {} cannot be parsed: {e}",
                config::redacted_url(url)
            )
        })?;
        pg.connect_timeout(DB_TIMEOUT);
        pg.application_name("toolhost");
        let at = describe(&pg);
        let pool_size = *pool;
        let pool = new_pool(&pg, pool_size)?;
        let mut client = pool.get().await.map_err(|e| {
            anyhow::anyhow!(
                "fleet store: cannot connect to PostgreSQL at {at}: {}{}",
                if refused_login(&e) {
                    "authentication failed (the user or the password of store.url): "
                } else {
                    ""
                },
                pool_error(&e)
            )
        })?;
        let schema_version = schema::migrate(&mut client, &sha256_hex(&cfg.key))
            .await
            .with_context(|| format!("fleet store at {at}"))?;
        let request_state_key = schema::request_state_key(&client)
            .await
            .with_context(|| format!("fleet store at {at}"))?;
        let member = format!("m-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        members::register(&client, &member, &cfg, &listeners)
            .await
            .with_context(|| format!("fleet store at {at}: registering this member"))?;
        drop(client);
        tracing::info!(%member, store = %at, schema_version, "joined the fleet");
        let (tx, rx) = mpsc::unbounded_channel();
        let deciders = cfg.approver_role.clone().map(|role| Deciders {
            role,
            operator: cfg.operator_approves,
        });
        let fleet = Some(Fleet(Arc::new(Inner {
            member,
            deciders,
            cfg,
            listeners,
            pool,
            pool_size,
            pg,
            schema_version,
            request_state_key,
            down: Mutex::new(None),
            outbox: tx,
            outbox_rx: Mutex::new(Some(rx)),
            queued: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            dropping: AtomicBool::new(false),
            audit_seq: AtomicU64::new(0),
            users: arc_swap::ArcSwap::default(),
        })));
        if let Some(f) = &fleet {
            tokens::reload(f).await.map_err(|e| {
                anyhow::anyhow!("fleet store at {at}: reading the users' tokens: {e}")
            })?;
        }
        Ok(fleet)
    }

    pub fn member(&self) -> &str {
        &self.0.member
    }

    /// The fleet's key for sealing MRTR `requestState`s.
    pub fn request_state_key(&self) -> &[u8] {
        &self.0.request_state_key
    }

    /// Where member `id` takes requests handed over by other members: its `internal_url`
    /// while it is live; `Err` says why not (gone, lost, no address, or the database
    /// cannot say).
    pub async fn reach(&self, id: &str) -> Result<String, String> {
        members::reach(self, id).await
    }

    /// The stores of this fleet, one connection pool for both: the session store
    /// (sessions, `/mcp` sessions, frontend identities, guard counters), for the host's
    /// `Sessions`, and the catalog's pins, for the registry.
    pub fn stores(
        &self,
    ) -> anyhow::Result<(
        Arc<dyn crate::session::SessionStore>,
        Arc<dyn crate::catalog::pins::Shared>,
    )> {
        let store = Arc::new(store::PgStore::open(self)?);
        Ok((store.clone(), store))
    }

    /// Hands the daemon's approval queue and audit log their shared side.
    pub fn attach(&self, approvals: &Approvals, audit: &AuditLog) {
        approvals.share(Arc::new(queue::SharedQueue(self.clone())));
        audit.share(Arc::new(outbox::SharedAudit(self.clone())));
    }

    /// Starts the member's tasks: heartbeat and lost-member sweep, the LISTEN connection,
    /// the outbox writer.
    pub fn start(&self, cx: Context) {
        if let Some(rx) = lock(&self.0.outbox_rx).take() {
            // Not on the host's tracker: it outlives the shutdown token, to write the
            // last calls' records (see [`Fleet::stop`]).
            tokio::spawn(outbox::write_loop(self.clone(), rx));
        }
        cx.tracker
            .spawn(members::heartbeat_loop(self.clone(), cx.clone()));
        cx.tracker
            .spawn(queue::listen_loop(self.clone(), cx.clone()));
    }

    /// At shutdown: writes what is queued (at most `grace`), then leaves the fleet.
    pub async fn stop(&self, grace: Duration) {
        let (ack, done) = tokio::sync::oneshot::channel();
        if self.0.outbox.send(outbox::Op::Stop(ack)).is_ok() {
            let _ = tokio::time::timeout(grace, done).await;
        }
        if let Err(e) = members::leave(self).await {
            tracing::warn!(error = %e, "fleet store: cannot remove this member");
        }
    }

    /// A client of the pool, within [`DB_TIMEOUT`]; a failure is noted as the database
    /// being unreachable.
    async fn client(&self) -> Result<deadpool_postgres::Object, String> {
        match self.0.pool.get().await {
            Ok(c) => Ok(c),
            Err(e) => Err(self.failed(pool_error(&e))),
        }
    }

    /// Records a failed exchange; returns its message.
    fn failed(&self, why: String) -> String {
        let mut down = lock(&self.0.down);
        if down.is_none() {
            tracing::warn!(error = %why, "fleet store unreachable: serving local work, queueing writes");
        }
        *down = Some(why.clone());
        why
    }

    /// Records a working exchange.
    fn reached(&self) {
        if lock(&self.0.down).take().is_some() {
            tracing::info!("fleet store reachable again");
        }
    }

    /// Charges a call's daily counts against the fleet's counters, all or none, in one
    /// transaction of one atomic statement each: `Ok(Ok(used))`, each counter's fleet-wide
    /// count after the charge, or `Ok(Err((n, used)))` when charge `n` would take its
    /// counter (now at `used`) over its limit. So a budget of N calls allows exactly N,
    /// whichever members they come to.
    pub async fn charge(
        &self,
        charges: &[crate::guards::DailyCharge],
    ) -> Result<Result<Vec<u64>, (usize, u64)>, String> {
        self.bounded(budgets::charge(self, charges)).await
    }

    /// The user (and the token's roles) whose live token `token` is (a TCP request's
    /// bearer), by this member's copy of the fleet's tokens.
    pub fn user_of(&self, token: &str) -> Option<Arc<User>> {
        self.0.users.load().get(&sha256_hex(token)).cloned()
    }

    /// `fleet.token_create`: a new token for `user` carrying `roles`, valid on every
    /// member at once.
    pub async fn token_create(
        &self,
        user: &str,
        roles: &[String],
    ) -> Result<crate::protocol::FleetTokenCreated, String> {
        self.bounded(tokens::create(self, user, roles)).await
    }

    /// `fleet.token_revoke`: refused by every member from now on.
    pub async fn token_revoke(
        &self,
        id: &str,
    ) -> Result<crate::protocol::FleetTokenRevokeResult, String> {
        self.bounded(tokens::revoke(self, id)).await
    }

    /// `fleet.token_list`: every token made, revoked ones too (never the token itself).
    pub async fn token_list(&self) -> Result<Vec<crate::protocol::FleetToken>, String> {
        self.bounded(tokens::list(self)).await
    }

    /// Reads the users' tokens again (a member changed them).
    async fn reload_users(&self) {
        if let Err(e) = self.bounded(tokens::reload(self)).await {
            tracing::warn!(error = %e, "cannot read the users' tokens; keeping the last copy");
        }
    }

    /// `f` within [`DB_TIMEOUT`], its failure noted as the database being unreachable.
    async fn bounded<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        let r = tokio::time::timeout(DB_TIMEOUT, f)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {} ms", DB_TIMEOUT.as_millis())));
        match &r {
            Ok(_) => self.reached(),
            Err(e) => {
                self.failed(e.clone());
            }
        }
        r
    }

    /// The store's health, for `host.health`.
    pub fn health(&self) -> FleetHealth {
        let error = lock(&self.0.down).clone();
        FleetHealth {
            member: self.0.member.clone(),
            reachable: error.is_none(),
            error,
            queued: self.0.queued.load(Ordering::Relaxed),
            dropped: self.0.dropped.load(Ordering::Relaxed),
            schema_version: self.0.schema_version,
        }
    }

    /// `fleet.status`: every member, judged by the database's clock.
    pub async fn status(&self) -> FleetStatusResult {
        let members = match members::list(self).await {
            Ok(m) => {
                self.reached();
                m
            }
            Err(e) => {
                self.failed(e);
                Vec::new()
            }
        };
        FleetStatusResult {
            member: self.0.member.clone(),
            database: self.health(),
            members,
        }
    }
}
