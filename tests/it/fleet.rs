//! Fleet mode (issue 45): several real daemons on one throw-away PostgreSQL
//! (`common::postgres`): members and their heartbeats, the shared approval queue (a call
//! waiting on one member decided on another, first decision wins fleet-wide), the audit
//! trail in one table, a lost member's waiting calls withdrawn, the database going away
//! and coming back, and the start-up refusals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::approvals::{caller, outcome};
use crate::common::postgres::Postgres;
use crate::common::{eventually, toolhost, Daemon};
use serde_json::{json, Value};

pub(crate) const KEY: &str = "fleet-key-for-the-tests-0123456789abcdef";

pub(crate) fn config(pg: &Postgres, mode: &str) -> Value {
    json!({
        "store": {"kind": "postgres", "url": pg.url(), "pool": 2},
        "fleet": {"key": KEY, "heartbeat_ms": 200, "lost_after_ms": 1500},
        "approval": {"mode": mode, "wait_s": 60},
    })
}

async fn member(pg: &Postgres, mode: &str) -> Daemon {
    Daemon::start_with(Some(config(pg, mode))).await
}

/// This daemon's member id.
pub(crate) async fn member_id(d: &Daemon) -> String {
    let s = d.call("fleet.status", json!({})).await;
    s["result"]["member"]
        .as_str()
        .expect("fleet.status")
        .to_owned()
}

/// The id of the approval entry of `call_id`, once `d` lists it (fleet-wide).
pub(crate) async fn entry_on(d: &Daemon, call_id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = d.call("approvals.list", json!({})).await;
        let id = r["result"]["pending"]
            .as_array()
            .and_then(|p| p.iter().find(|e| e["call_id"] == call_id))
            .map(|e| e["id"].as_str().unwrap().to_owned());
        if let Some(id) = id {
            return id;
        }
        assert!(
            Instant::now() < deadline,
            "{call_id} never in the fleet's queue: {r}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn decide(d: &Daemon, id: &str, decision: &str) -> Value {
    d.call("approvals.decide", json!({"id": id, "decision": decision}))
        .await
}

#[tokio::test]
async fn three_members_share_one_queue_and_one_audit_trail() {
    let pg = Postgres::start();
    let a = member(&pg, "strict").await;
    let b = member(&pg, "strict").await;
    let c = member(&pg, "strict").await;
    let (ma, mb, mc) = (
        member_id(&a).await,
        member_id(&b).await,
        member_id(&c).await,
    );
    assert!(
        ma != mb && mb != mc && ma.starts_with("m-"),
        "{ma} {mb} {mc}"
    );
    eventually(10, "three live members on every member", || async {
        let s = b.call("fleet.status", json!({})).await;
        let members = s["result"]["members"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        members.len() == 3 && members.iter().all(|m| m["state"] == "live")
    })
    .await;
    let out = toolhost(c.dir.path())
        .arg("--socket")
        .arg(c.socket())
        .arg("fleet")
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for m in [&ma, &mb, &mc] {
        assert!(text.contains(m.as_str()), "{text}");
    }
    assert!(
        text.contains(&format!("{mc} (this)")) && text.contains("live"),
        "{text}"
    );

    // A call waiting on A is allowed from C, and runs on A.
    let mut call = caller(&a, "fa1", "touch ran-on-a", None, json!([])).await;
    let id = entry_on(&c, "fa1").await;
    assert!(id.starts_with(&format!("ap-{ma}-")), "{id}");
    let asked = Instant::now();
    let r = decide(&c, &id, "allow_once").await;
    assert_eq!(r["result"]["outcome"], "allow_once", "{r}");
    assert_eq!(r["result"]["by"]["member"], mc.as_str(), "{r}");
    assert_eq!(outcome(&mut call).await["ok"], true);
    let fan_out = asked.elapsed();
    eprintln!("approval fan-out, decision on C to result on A: {fan_out:?}");
    assert!(a.workspace().join("ran-on-a").exists());

    // A deny from B comes first: it wins, and C's allow is refused naming it.
    let mut call = caller(&a, "fa2", "touch never", None, json!([])).await;
    let id = entry_on(&b, "fa2").await;
    let r = decide(&b, &id, "deny").await;
    assert_eq!(r["result"]["outcome"], "deny", "{r}");
    let late = decide(&c, &id, "allow_once").await;
    let message = late["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("already decided: deny") && message.contains(&format!("on {mb}")),
        "{late}"
    );
    let denied = outcome(&mut call).await;
    assert_eq!(denied["ok"], false, "{denied}");
    assert!(!a.workspace().join("never").exists());
    assert_eq!(
        a.call("approvals.list", json!({})).await["result"]["pending"],
        json!([])
    );

    // Every call is in the one audit table once, with the member that ran it, and says
    // who decided where.
    let b_call = b.call(
        "invoke",
        json!({"name": "read_file", "arguments": {"path": "missing"}, "call_id": "fb1"}),
    );
    let _ = b_call.await;
    eventually(10, "the three calls in the audit table", || async {
        pg.sql("SELECT count(*) FROM toolhost_audit WHERE call_id IN ('fa1', 'fa2', 'fb1')")
            .trim()
            == "3"
    })
    .await;
    let rows = pg.sql(
        "SELECT call_id, member, record->'approval_decision'->'by'->>'member'
           FROM toolhost_audit WHERE call_id IN ('fa1', 'fa2', 'fb1') ORDER BY call_id",
    );
    assert_eq!(
        rows.lines().collect::<Vec<_>>(),
        vec![
            format!("fa1|{ma}|{mc}"),
            format!("fa2|{ma}|{mb}"),
            format!("fb1|{mb}|"),
        ],
        "{rows}"
    );
}

#[tokio::test]
async fn a_lost_member_is_shown_lost_and_its_waiting_calls_are_withdrawn() {
    let pg = Postgres::start();
    let mut a = member(&pg, "strict").await;
    let b = member(&pg, "strict").await;
    let ma = member_id(&a).await;
    let _call = caller(&a, "lost1", "touch x", None, json!([])).await;
    let id = entry_on(&b, "lost1").await;
    a.kill9().await;
    let killed = Instant::now();
    eventually(10, "A shown lost on B", || async {
        let s = b.call("fleet.status", json!({})).await;
        s["result"]["members"].as_array().is_some_and(|m| {
            m.iter()
                .any(|m| m["id"] == ma.as_str() && m["state"] == "lost")
        })
    })
    .await;
    eprintln!("member shown lost {:?} after kill -9", killed.elapsed());
    eventually(10, "A's waiting call withdrawn", || async {
        b.call("approvals.list", json!({})).await["result"]["pending"] == json!([])
    })
    .await;
    let reason = pg.sql(&format!(
        "SELECT verdict->>'outcome', verdict->>'reason' FROM toolhost_approvals WHERE id = '{id}'"
    ));
    assert!(
        reason.starts_with("withdrawn|member ")
            && reason.contains(&ma)
            && reason.contains("was lost"),
        "{reason}"
    );
    let late = decide(&b, &id, "allow_once").await;
    let message = late["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("already decided: withdrawn"), "{late}");
    // `toolhost fleet` says so, and exits 1.
    let out = toolhost(b.dir.path())
        .arg("--socket")
        .arg(b.socket())
        .arg("fleet")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("LOST"),
        "{out:?}"
    );
}

/// A member's config for many [`local_call`]s: the same call over and over is the point,
/// so the default loop guard is off.
fn repeating(pg: &Postgres) -> Value {
    let mut cfg = config(pg, "auto");
    cfg["guards"] = json!([{"name": "default-loop", "enabled": false}]);
    cfg
}

/// One `read_file` call on `d` that needs no shared state; it must succeed.
async fn local_call(d: &Daemon, call_id: &str) {
    let r = d
        .call(
            "invoke",
            json!({"name": "read_file", "arguments": {"path": "f.txt"}, "call_id": call_id}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], true, "{r}");
}

/// How many audit rows of call ids `LIKE pattern` the table holds: (rows, distinct ids).
fn audit_rows(pg: &Postgres, pattern: &str) -> (u64, u64) {
    let counts = pg.sql(&format!(
        "SELECT count(*), count(DISTINCT call_id) FROM toolhost_audit WHERE call_id LIKE '{pattern}'"
    ));
    let (rows, ids) = counts.trim().split_once('|').unwrap();
    (rows.parse().unwrap(), ids.parse().unwrap())
}

/// The window: PostgreSQL away for the full 10 s.
const AWAY: Duration = Duration::from_secs(10);

#[tokio::test]
async fn the_database_going_away_degrades_a_member_and_it_recovers_losing_nothing() {
    let pg = Postgres::start();
    let a = Daemon::start_with(Some(repeating(&pg))).await;
    std::fs::write(a.workspace().join("f.txt"), "hello").unwrap();
    assert_eq!(a.health().await["status"], "ok");
    pg.down();
    let away = Instant::now();
    // Local work goes on for the whole window, health saying `degraded` all along (once
    // the member has noticed); the audit records of these calls wait in the outbox.
    local_call(&a, "down0").await;
    eventually(10, "degraded health", || async {
        let h = a.health().await;
        h["status"] == "degraded" && h["fleet"]["reachable"] == false
    })
    .await;
    let mut served = 1;
    while away.elapsed() < AWAY {
        local_call(&a, &format!("down{served}")).await;
        served += 1;
        let h = a.health().await;
        assert_eq!(h["status"], "degraded", "{h}");
        assert_eq!(h["fleet"]["queued"], served, "{h}");
        assert!(
            !h["fleet"]["error"].as_str().unwrap_or_default().is_empty(),
            "{h}"
        );
    }
    eprintln!(
        "{served} calls served with the database away for {:?}",
        away.elapsed()
    );
    pg.up();
    eventually(20, "healthy again", || async {
        let h = a.health().await;
        h["status"] == "ok" && h["fleet"]["queued"] == 0
    })
    .await;
    // Every queued record written once: nothing lost, nothing doubled.
    assert_eq!(audit_rows(&pg, "down%"), (served, served));
    assert_eq!(a.health().await["fleet"]["dropped"], 0);
    // The member shows live again.
    let s = a.call("fleet.status", json!({})).await;
    assert_eq!(s["result"]["members"][0]["state"], "live", "{s}");
}

#[tokio::test]
async fn a_full_outbox_drops_and_counts_writes_logs_once_and_the_member_serves_on() {
    let pg = Postgres::start();
    let mut cfg = repeating(&pg);
    cfg["fleet"]["max_queued"] = json!(3);
    let a = Daemon::start_with(Some(cfg)).await;
    std::fs::write(a.workspace().join("f.txt"), "hello").unwrap();
    assert_eq!(a.health().await["fleet"]["queued"], 0);
    pg.down();
    for n in 0..10 {
        local_call(&a, &format!("full{n}")).await;
    }
    let h = a.health().await;
    assert_eq!(h["status"], "degraded", "{h}");
    assert_eq!(
        (&h["fleet"]["queued"], &h["fleet"]["dropped"]),
        (&json!(3), &json!(7)),
        "{h}"
    );
    let full = |log: &str| log.matches("outbox full").count();
    assert_eq!(full(&a.log()), 1, "{}", a.log());
    pg.up();
    eventually(20, "the queued three written", || async {
        let h = a.health().await;
        h["status"] == "ok" && h["fleet"]["queued"] == 0
    })
    .await;
    // The first three were kept and written once; the drops stay counted.
    assert_eq!(audit_rows(&pg, "full%"), (3, 3));
    assert_eq!(
        pg.sql("SELECT string_agg(call_id, ',' ORDER BY call_id) FROM toolhost_audit WHERE call_id LIKE 'full%'")
            .trim(),
        "full0,full1,full2"
    );
    assert_eq!(a.health().await["fleet"]["dropped"], 7);
    eventually(10, "the room logged once", || async {
        a.log().matches("outbox has room again").count() == 1
    })
    .await;
    assert_eq!(full(&a.log()), 1, "{}", a.log());
}

/// The machine's clock (and the database's, and this test's members' without a skew).
fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since_epoch.as_millis()).unwrap()
}

/// libfaketime's preload library (Debian's `libfaketime`, installed by tests/run.sh).
fn faketime_lib() -> String {
    let lib = std::fs::read_dir("/usr/lib")
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path().join("faketime/libfaketime.so.1")))
        .find(|p| p.exists());
    lib.expect("this test needs libfaketime, which is not installed: run tests/run.sh")
        .display()
        .to_string()
}

/// A member whose wall clock is `offset` (libfaketime's `FAKETIME`: "-10m") off the
/// machine's and the database's. Its monotonic clock is left alone, so tokio's timers
/// (its heartbeat) run as they should.
async fn skewed_member(cfg: &Value, offset: &str) -> Daemon {
    let mut d = Daemon::unstarted();
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    let lib = faketime_lib();
    d.spawn(&[
        ("LD_PRELOAD", lib.as_str()),
        ("FAKETIME", offset),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ])
    .await;
    d
}

#[tokio::test]
async fn members_whose_clocks_are_minutes_off_are_judged_by_the_databases_clock() {
    let pg = Postgres::start();
    // A heartbeat late by more than a second on a loaded machine is no loss here.
    let lost_after = 3_000;
    let mut cfg = config(&pg, "auto");
    cfg["fleet"]["lost_after_ms"] = json!(lost_after);
    let normal = Daemon::start_with(Some(cfg.clone())).await;
    let mut strict = cfg.clone();
    strict["approval"]["mode"] = json!("strict");
    let behind = skewed_member(&strict, "-10m").await;
    let mut ahead = skewed_member(&cfg, "+10m").await;
    let ids = [
        member_id(&normal).await,
        member_id(&behind).await,
        member_id(&ahead).await,
    ];
    // The clocks are skewed: each audit record carries its member's time, its row the
    // database's time of writing.
    for (d, call_id) in [(&normal, "skew0"), (&behind, "skew1"), (&ahead, "skew2")] {
        let _ = d
            .call(
                "invoke",
                json!({"name": "read_file", "arguments": {"path": "missing"}, "call_id": call_id}),
            )
            .await;
    }
    eventually(10, "the three records written", || async {
        audit_rows(&pg, "skew%").0 == 3
    })
    .await;
    let minutes_off = pg.sql(
        "SELECT string_agg(round((time_ms - extract(epoch FROM written) * 1000) / 60000)::text,
                           ',' ORDER BY call_id)
           FROM toolhost_audit WHERE call_id LIKE 'skew%'",
    );
    assert_eq!(minutes_off.trim(), "0,-10,10");

    // Over twice `lost_after_ms`, every member (asked on each) shows all three live, with
    // heartbeat ages under `lost_after_ms`.
    let watch = Instant::now();
    let mut looks = 0;
    while watch.elapsed() < Duration::from_millis(2 * lost_after) {
        for d in [&normal, &behind, &ahead] {
            let s = d.call("fleet.status", json!({})).await;
            let members = s["result"]["members"].as_array().unwrap();
            assert_eq!(members.len(), 3, "{s}");
            for m in members {
                let age = m["heartbeat_age_ms"].as_u64().unwrap();
                assert!(m["state"] == "live" && age < lost_after, "{s}");
            }
            looks += 1;
        }
    }
    eprintln!("{looks} looks at fleet.status over {:?}", watch.elapsed());

    // A call waiting on the member behind shows on the others as just begun with its
    // full wait left, on each lister's own clock (the one ahead: 10 minutes ahead).
    let _waiting = caller(&behind, "skew-wait", "touch never", None, json!([])).await;
    entry_on(&normal, "skew-wait").await;
    for (d, ahead_ms) in [(&normal, 0), (&ahead, 600_000)] {
        let r = d.call("approvals.list", json!({})).await;
        let e = r["result"]["pending"]
            .as_array()
            .and_then(|p| p.iter().find(|e| e["call_id"] == "skew-wait"))
            .unwrap_or_else(|| panic!("{r}"));
        let since = e["since_ms"].as_i64().unwrap();
        let waiting_ms = now_ms() + ahead_ms - since;
        assert!(waiting_ms.abs() < 30_000, "waiting {waiting_ms} ms: {r}");
        let wait = e["deadline_ms"].as_i64().unwrap() - since;
        assert_eq!(wait, 60_000, "{r}");
    }

    // The one ahead, killed, is lost on time (its last heartbeat is not in the future).
    ahead.kill9().await;
    let killed = Instant::now();
    eventually(10, "the killed member shown lost", || async {
        let s = normal.call("fleet.status", json!({})).await;
        s["result"]["members"].as_array().is_some_and(|m| {
            m.iter().any(|m| {
                m["id"] == ids[2].as_str()
                    && m["state"] == "lost"
                    && m["heartbeat_age_ms"].as_u64().unwrap() >= lost_after
            })
        })
    })
    .await;
    eprintln!(
        "skewed member shown lost {:?} after kill -9",
        killed.elapsed()
    );
    let s = behind.call("fleet.status", json!({})).await;
    let states: Vec<_> = s["result"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_str().unwrap(), m["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        vec![
            (ids[0].as_str(), "live"),
            (ids[1].as_str(), "live"),
            (ids[2].as_str(), "lost")
        ],
        "{s}"
    );
}

/// Starts a daemon with `cfg` that must refuse to start; its stderr.
pub(crate) async fn refused(cfg: Value) -> String {
    refused_with(cfg, &[]).await
}

/// [`refused`] with `env` added to the daemon's environment.
async fn refused_with(cfg: Value, env: &[(&str, &str)]) -> String {
    let mut d = Daemon::unstarted();
    std::fs::write(d.config_path(), serde_json::to_string(&cfg).unwrap()).unwrap();
    let mut cmd = d.command();
    cmd.envs(env.iter().copied());
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("a refused start ends")
        .unwrap();
    d.child = None;
    assert!(!out.status.success(), "started: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn bad_starts_are_refused_with_the_step_and_never_the_password() {
    let pg = Postgres::start();
    // No such database: the host and the step are named, the password is not.
    let mut cfg = config(&pg, "auto");
    cfg["store"]["url"] = json!(format!("{} password=s3cret-pw dbname=nosuch", pg.url()));
    let err = refused(cfg).await;
    assert!(
        err.contains("cannot connect to PostgreSQL at")
            && err.contains(&pg.sock().display().to_string())
            && err.contains("nosuch"),
        "{err}"
    );
    assert!(!err.contains("s3cret-pw"), "{err}");

    // The first member creates the schema; another fleet's key is refused.
    let a = member(&pg, "auto").await;
    let mut other = config(&pg, "auto");
    other["fleet"]["key"] = json!("another-fleets-key-0123456789abcdef");
    let err = refused(other).await;
    assert!(err.contains("belongs to another fleet"), "{err}");
    assert!(!err.contains("another-fleets-key"), "{err}");

    // A newer schema than this binary knows is refused with both versions.
    pg.sql("INSERT INTO toolhost_schema (version) VALUES (999)");
    let err = refused(config(&pg, "auto")).await;
    assert!(
        err.contains("schema is version 999") && err.contains("up to 4"),
        "{err}"
    );
    drop(a);

    // A postgres store needs the fleet section.
    let err = refused(json!({"store": {"kind": "postgres", "url": pg.url()}})).await;
    assert!(err.contains("add a `fleet` section"), "{err}");
}

/// The password of the tests' SCRAM login.
const PASSWORD: &str = "pw-Wq8ZTn3cK5rV";

#[tokio::test]
async fn a_password_logs_in_from_the_environment_or_the_secrets_file_and_a_wrong_one_is_refused_unprinted(
) {
    let pg = Postgres::start_with_passwords();
    pg.add_login("fleetpw", PASSWORD);
    let mut cfg = config(&pg, "auto");
    cfg["store"]["url"] = json!(format!(
        "{} password=${{FLEET_PG_PASSWORD}}",
        pg.tcp_url("fleetpw")
    ));

    // From the environment.
    let mut a = Daemon::unstarted();
    std::fs::write(a.config_path(), cfg.to_string()).unwrap();
    a.spawn(&[("FLEET_PG_PASSWORD", PASSWORD)]).await;
    // From the secrets file beside config.json.
    let mut b = Daemon::unstarted();
    std::fs::write(b.config_path(), cfg.to_string()).unwrap();
    let secrets = b.dir.path().join("secrets.env");
    std::fs::write(&secrets, format!("FLEET_PG_PASSWORD={PASSWORD}\n")).unwrap();
    std::fs::set_permissions(
        &secrets,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    b.spawn(&[]).await;
    eventually(
        10,
        "both members live, over TCP with the password",
        || async {
            let s = b.call("fleet.status", json!({})).await;
            s["result"]["members"]
                .as_array()
                .is_some_and(|m| m.len() == 2 && m.iter().all(|m| m["state"] == "live"))
        },
    )
    .await;
    let logins = pg.sql(
        "SELECT count(*) FROM pg_stat_activity WHERE usename = 'fleetpw' AND client_addr IS NOT NULL",
    );
    assert_ne!(logins.trim(), "0", "no TCP login of the role");

    // A wrong password, and none: refused at start, naming the host and the step.
    let at = format!("127.0.0.1:{} (user fleetpw, database fleetpw)", pg.port);
    let mut none = cfg.clone();
    none["store"]["url"] = json!(pg.tcp_url("fleetpw"));
    let wrong = [("FLEET_PG_PASSWORD", "wrong-Hx4Ld9Qe")];
    for (cfg, env) in [(cfg.clone(), &wrong[..]), (none, &[])] {
        let err = refused_with(cfg, env).await;
        assert!(
            err.contains(&format!(
                "cannot connect to PostgreSQL at {at}: authentication failed"
            )),
            "{err}"
        );
        assert!(
            !err.contains("wrong-Hx4Ld9Qe") && !err.contains(PASSWORD),
            "{err}"
        );
    }

    // The right password is nowhere the members show or write: not in their logs, their
    // health, or any file of theirs (the secrets file aside).
    for d in [&a, &b] {
        assert!(!d.log().contains(PASSWORD), "{}", d.log());
        let h = d.health().await;
        assert_eq!(h["status"], "ok", "{h}");
        assert!(!h.to_string().contains(PASSWORD), "{h}");
        let every_file = ignore::WalkBuilder::new(d.dir.path())
            .standard_filters(false)
            .build();
        for file in every_file
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_some_and(|t| t.is_file()) && e.path() != secrets)
        {
            let bytes = std::fs::read(file.path()).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(PASSWORD),
                "{}",
                file.path().display()
            );
        }
    }
}
