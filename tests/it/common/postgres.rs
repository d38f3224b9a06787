//! A throw-away PostgreSQL for the fleet tests: Debian's server binaries
//! (`/usr/lib/postgresql/<N>/bin`, installed by tests/run.sh), a cluster in a temp dir,
//! listening only on a Unix socket in that dir (no TCP port to collide on), trusted, with
//! fsync off for speed (see below); or ([`Postgres::start_with_passwords`]) also on a free
//! loopback port where every login needs its password (SCRAM). `initdb` refuses root, so as root the cluster runs as the
//! `postgres` user the package creates. Stopped (immediately) when dropped.
//!
//! Durability is off only where a crash of the server (not of the machine) cannot lose a
//! commit: `fsync=off` (what the server wrote survives in the page cache). Never
//! `synchronous_commit=off`: [`Postgres::down`] is a crash, and recovery would drop the
//! commits still in the WAL buffers (the fleet's schema, created a moment before).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Postgres {
    pub dir: tempfile::TempDir,
    bin: PathBuf,
    /// The port names the socket file (`.s.PGSQL.<port>`); nothing listens on TCP unless
    /// `tcp`.
    pub port: u16,
    /// Listens on 127.0.0.1:`port` too, with `scram-sha-256` for every TCP login (the
    /// socket stays trusted, for [`Postgres::sql`]).
    tcp: bool,
}

/// The newest installed server's binaries.
fn bin_dir() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is not installed (tests/run.sh installs Debian's postgresql)")
        .filter_map(|e| Some(e.ok()?.path().join("bin")))
        .filter(|p| p.join("initdb").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("no initdb under /usr/lib/postgresql/*/bin")
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

impl Postgres {
    /// Creates and starts a cluster (about 2 s).
    pub fn start() -> Postgres {
        Self::create(20_000 + (std::process::id() % 20_000) as u16, false)
    }

    /// A cluster that also listens on a free loopback port, where a login needs its
    /// password ([`Postgres::add_login`], [`Postgres::tcp_url`]).
    pub fn start_with_passwords() -> Postgres {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        Self::create(port, true)
    }

    fn create(port: u16, tcp: bool) -> Postgres {
        let dir = tempfile::tempdir().unwrap();
        let pg = Postgres {
            bin: bin_dir(),
            port,
            dir,
            tcp,
        };
        std::fs::create_dir_all(pg.sock()).unwrap();
        if is_root() {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(pg.dir.path())
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown to the postgres user");
        }
        pg.run(
            "initdb",
            &[
                "-D",
                &pg.data().display().to_string(),
                "-U",
                "toolhost",
                "--auth-local=trust",
                if tcp {
                    "--auth-host=scram-sha-256"
                } else {
                    "--auth-host=trust"
                },
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ],
        );
        pg.up();
        pg
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn sock(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    /// Runs one of the server's programs, as the `postgres` user when root.
    fn run(&self, program: &str, args: &[&str]) -> String {
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(self.bin.join(program));
            c
        } else {
            Command::new(self.bin.join(program))
        };
        let out = cmd
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts the server (again).
    pub fn up(&self) {
        let options = format!(
            "-c listen_addresses='{}' -p {} -k {} -c fsync=off -c full_page_writes=off",
            if self.tcp { "127.0.0.1" } else { "" },
            self.port,
            self.sock().display()
        );
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data().display().to_string(),
                "-l",
                &self.dir.path().join("pg.log").display().to_string(),
                "-w",
                "-o",
                &options,
                "start",
            ],
        );
    }

    /// Stops the server at once (as a crash would), dropping every connection.
    pub fn down(&self) {
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data().display().to_string(),
                "-m",
                "immediate",
                "stop",
            ],
        );
    }

    /// The connection string a daemon's `store.url` takes.
    pub fn url(&self) -> String {
        format!(
            "host={} port={} user=toolhost dbname=postgres",
            self.sock().display(),
            self.port
        )
    }

    /// A role `user` that logs in with `password`, owning a database of the same name.
    pub fn add_login(&self, user: &str, password: &str) {
        self.sql(&format!("CREATE ROLE {user} LOGIN PASSWORD '{password}'"));
        self.sql(&format!("CREATE DATABASE {user} OWNER {user}"));
    }

    /// The connection string of `user`'s database over TCP, without a password.
    pub fn tcp_url(&self, user: &str) -> String {
        assert!(self.tcp, "a cluster of start_with_passwords");
        format!(
            "host=127.0.0.1 port={} user={user} dbname={user}",
            self.port
        )
    }

    /// Runs `sql` with psql; its rows, one a line, fields split by `|`.
    pub fn sql(&self, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-At", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(self.sock())
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "toolhost",
                "-d",
                "postgres",
                "-c",
                sql,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pg.log")).unwrap_or_default()
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.data().display().to_string();
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"));
            c
        } else {
            Command::new(self.bin.join("pg_ctl"))
        };
        let _ = cmd
            .args(["-D", &data, "-m", "immediate", "stop"])
            .current_dir(self.dir.path())
            .output();
    }
}
