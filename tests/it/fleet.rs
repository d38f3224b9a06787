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

#[tokio::test]
async fn the_database_going_away_degrades_a_member_and_it_recovers_losing_nothing() {
    let pg = Postgres::start();
    let a = member(&pg, "auto").await;
    std::fs::write(a.workspace().join("f.txt"), "hello").unwrap();
    assert_eq!(a.health().await["status"], "ok");
    pg.down();
    // Local work goes on; the audit records of these calls wait in the outbox.
    for n in 0..5 {
        let r = a
            .call(
                "invoke",
                json!({"name": "read_file", "arguments": {"path": "f.txt"}, "call_id": format!("down{n}")}),
            )
            .await;
        assert_eq!(r["result"]["result"]["ok"], true, "{r}");
    }
    eventually(10, "degraded health", || async {
        let h = a.health().await;
        h["status"] == "degraded" && h["fleet"]["reachable"] == false
    })
    .await;
    let h = a.health().await;
    assert!(h["fleet"]["queued"].as_u64().unwrap() >= 5, "{h}");
    assert!(
        !h["fleet"]["error"].as_str().unwrap_or_default().is_empty(),
        "{h}"
    );
    pg.up();
    eventually(20, "healthy again", || async {
        let h = a.health().await;
        h["status"] == "ok" && h["fleet"]["queued"] == 0
    })
    .await;
    assert_eq!(
        pg.sql("SELECT count(DISTINCT call_id) FROM toolhost_audit WHERE call_id LIKE 'down%'")
            .trim(),
        "5"
    );
    assert_eq!(
        pg.sql("SELECT count(*) FROM toolhost_audit WHERE call_id LIKE 'down%'")
            .trim(),
        "5"
    );
    // The member shows live again.
    let s = a.call("fleet.status", json!({})).await;
    assert_eq!(s["result"]["members"][0]["state"], "live", "{s}");
}

/// Starts a daemon with `cfg` that must refuse to start; its stderr.
pub(crate) async fn refused(cfg: Value) -> String {
    let mut d = Daemon::unstarted();
    std::fs::write(d.config_path(), serde_json::to_string(&cfg).unwrap()).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(30), d.command().output())
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
