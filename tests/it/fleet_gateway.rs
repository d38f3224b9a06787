//! Fleet mode's gateway (issue 45): daemons on one PostgreSQL behind a real HAProxy, round
//! robin with no affinity. A 2026-07-28 client's MRTR retry (`input_required` → retry with
//! `requestState`) that lands on another member than the one holding its call is handed to
//! the holder (its `internal_url` is in the members table, the state is sealed with the
//! fleet's key from the database) and answered there; if the holder is gone, the retry is
//! refused with a clear error, and the call never runs twice. A member killed with `kill -9`
//! under load: the others keep answering, it shows lost, its waiting approval is withdrawn,
//! and no call is answered (or audited) twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use crate::common::haproxy::Haproxy;
use crate::common::postgres::Postgres;
use crate::common::{self, eventually, http, new_era, Daemon};
use crate::fleet_sessions::{fleet_config, mcp, reply_in, TOKEN};
use serde_json::{json, Value};

/// A member named `name` on `pg`, listening on TCP (its `internal_url` is that address),
/// with the custom tool `ask`: it notes each start in `runs` (one line: the member's name),
/// asks one elicitation question, and returns the answer and the member it ran on.
pub async fn member(pg: &Postgres, name: &str, runs: &Path) -> Daemon {
    let mut d = Daemon::unstarted();
    let mut cfg = fleet_config(pg, d.dir.path());
    let tools = d.dir.path().join("tools");
    let question = json!({"input_request": {"id": "name", "kind": "elicitation",
        "params": {"message": "your name?",
                   "requestedSchema": {"type": "object", "properties": {}}}}});
    common::write_tool(
        &tools,
        "ask",
        json!({"name": "ask", "description": "asks a name", "command": ["./run.sh"],
               "approval": "read_only", "asks": true, "timeout_ms": 60000}),
        &format!(
            "read args\necho {name} >> {runs}\necho '{question}'\nread answer\n\
             printf '{{\"result\": {{\"ran_on\": \"{name}\", \"answer\": %s}}}}\\n' \"$answer\"",
            runs = runs.display()
        ),
    );
    cfg["custom_tools"] = json!({"paths": [tools]});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[]).await;
    d
}

/// `tools/call` params of a new-era client that answers elicitation; `retry` merged in.
fn call(name: &str, retry: Value) -> Value {
    let mut params = json!({"name": name, "arguments": {},
        "_meta": new_era::meta("fleet-gateway-test", json!({"elicitation": {}}))});
    for (k, v) in retry.as_object().unwrap() {
        params[k] = v.clone();
    }
    params
}

/// One new-era `tools/call` POST through the gateway: the answer's JSON-RPC message and the
/// member (HAProxy's server name) the request landed on.
pub async fn post(gw: &Haproxy, params: Value) -> (Value, String) {
    let tcp = tokio::net::TcpStream::connect(&gw.addr).await.unwrap();
    let name = params["name"].as_str().unwrap_or_default().to_owned();
    let bearer = format!("Bearer {TOKEN}");
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Accept", "application/json, text/event-stream"),
        ("Content-Type", "application/json"),
        ("MCP-Protocol-Version", new_era::NEW),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", name.as_str()),
    ];
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    let answer = http::exchange(tcp, "POST", "/mcp", &headers, &body.to_string()).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let message = reply_in(&answer.body).unwrap_or_else(|| panic!("no answer: {}", answer.body));
    (message, answer.header("x-served-by").unwrap_or_default())
}

/// The `requestState` of an `input_required` answer asking one question, and that
/// question's key.
fn state_of(answer: &Value) -> (String, String) {
    assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");
    let requests = answer["result"]["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{answer}");
    let key = requests.keys().next().unwrap().clone();
    let state = answer["result"]["requestState"].as_str().unwrap();
    (state.to_owned(), key)
}

/// A call of `ask` through the gateway, answered `who` in its retry.
struct Asked {
    /// The member the call landed on (HAProxy's name: m0, m1, m2 for a, b, c).
    on: String,
    retried_on: String,
    /// The retry's params (its `requestState` is used up).
    retry: Value,
}

/// Calls `ask`, retries with `who` as the answer, and checks the call ended with that
/// answer on the member it first landed on (wherever the retry landed).
async fn ask_and_answer(gw: &Haproxy, who: &str) -> Asked {
    let (first, on) = post(gw, call("ask", json!({}))).await;
    let (state, key) = state_of(&first);
    let answer = json!({key: {"action": "accept", "content": {"who": who}}});
    let retry = call(
        "ask",
        json!({"inputResponses": answer, "requestState": state}),
    );
    let (done, retried_on) = post(gw, retry.clone()).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    let result: Value = serde_json::from_str(text).unwrap();
    let holder = ["a", "b", "c"][on[1..].parse::<usize>().unwrap()];
    assert_eq!(
        result["ran_on"], holder,
        "asked on {on}, retried on {retried_on}: {done}"
    );
    assert_eq!(
        result["answer"]["input_response"]["result"]["content"]["who"], who,
        "{done}"
    );
    Asked {
        on,
        retried_on,
        retry,
    }
}

fn runs(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Members a, b and c (see [`member`]) and their TCP addresses.
async fn three_members(pg: &Postgres, runs: &Path) -> (Vec<Daemon>, [String; 3]) {
    let mut members = Vec::new();
    let mut addrs = Vec::new();
    for name in ["a", "b", "c"] {
        let m = member(pg, name, runs).await;
        addrs.push(m.tcp_addr().await);
        members.push(m);
    }
    (members, addrs.try_into().unwrap())
}

#[tokio::test]
async fn an_mrtr_retry_on_another_replica_is_handed_to_the_one_holding_the_call() {
    let (pg, shared) = (Postgres::start(), tempfile::tempdir().unwrap());
    let ran = shared.path().join("runs");
    let (_members, addrs) = three_members(&pg, &ran).await;
    let gw = Haproxy::start(&addrs, TOKEN).await;

    // Three calls in a row, each retried: round robin puts every retry on another member
    // than its first request's.
    for round in 0..3 {
        let asked = ask_and_answer(&gw, &format!("ada-{round}")).await;
        assert_ne!(asked.on, asked.retried_on, "round {round}: round robin");
        // The same state again, wherever it lands: refused, nothing runs again.
        let (again, _) = post(&gw, asked.retry).await;
        assert_eq!(again["error"]["code"], -32602, "{again}");
    }
    assert_eq!(runs(&ran).len(), 3, "each call ran once: {:?}", runs(&ran));
}

#[tokio::test]
async fn an_mrtr_retry_whose_holder_is_gone_is_refused_and_never_runs_twice() {
    let pg = Postgres::start();
    let shared = tempfile::tempdir().unwrap();
    let ran = shared.path().join("runs");
    let mut members = [member(&pg, "a", &ran).await, member(&pg, "b", &ran).await];
    let addrs = [members[0].tcp_addr().await, members[1].tcp_addr().await];
    let gw = Haproxy::start(&addrs, TOKEN).await;

    // The first request lands on one member, which holds the call; that one is killed.
    let (first, asked_on) = post(&gw, call("ask", json!({}))).await;
    let holder = asked_on[1..].parse::<usize>().unwrap();
    let other = format!("m{}", 1 - holder);
    let (state, key) = state_of(&first);
    assert_eq!(runs(&ran), [["a", "b"][holder]]);
    members[holder].kill9().await;
    let answer = json!({key: {"action": "accept", "content": {"who": "ada"}}});
    let retry = call(
        "ask",
        json!({"inputResponses": answer, "requestState": state}),
    );
    // Still in the table (its heartbeat not yet old), but unreachable.
    let (refused, on) = post(&gw, retry.clone()).await;
    assert_eq!(on, other);
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        message.contains("held by another member") && message.contains("cannot be reached"),
        "{refused}"
    );
    // Once a is lost by the database's clock the refusal says so.
    common::eventually(20, "a refusal naming the lost member", || async {
        let (r, _) = post(&gw, retry.clone()).await;
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("is lost"))
    })
    .await;
    assert_eq!(runs(&ran), [["a", "b"][holder]], "the call never ran again");
}

#[tokio::test]
async fn the_shipped_haproxy_config_keeps_a_session_on_one_member_and_spreads_the_rest() {
    let (pg, shared) = (Postgres::start(), tempfile::tempdir().unwrap());
    let ran = shared.path().join("runs");
    let (_members, addrs) = three_members(&pg, &ran).await;
    let gw = Haproxy::deployed(&addrs).await;

    // A 2025-11-25 client: every request after `initialize` carries its Mcp-Session-Id,
    // and HAProxy keeps them on one member.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "through-deployed-haproxy", "version": "1"}}});
    let (answer, _, _) = mcp(&gw, None, init).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let session = answer.header("mcp-session-id").unwrap();
    let mut served = Vec::new();
    for n in 0..6 {
        let call = json!({"jsonrpc": "2.0", "id": 10 + n, "method": "tools/list"});
        let (answer, reply, by) = mcp(&gw, Some(&session), call).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert!(reply["result"]["tools"].is_array(), "{reply}");
        served.push(by);
    }
    assert!(served.iter().all(|s| *s == served[0]), "{served:?}");

    // 2026-07-28 requests carry none: spread over the members (HAProxy's fallback of a
    // hash balance with no header), and an MRTR retry on another member than its call's is
    // handed over: each call answered by the member it ran on.
    let mut landed = std::collections::BTreeSet::new();
    let mut handed_over = 0;
    for round in 0..6 {
        let asked = ask_and_answer(&gw, &format!("ada-{round}")).await;
        handed_over += usize::from(asked.on != asked.retried_on);
        landed.extend([asked.on, asked.retried_on]);
    }
    assert!(
        landed.len() >= 2 && handed_over > 0,
        "{landed:?}, {handed_over} handed over"
    );
    assert_eq!(runs(&ran).len(), 6, "{:?}", runs(&ran));
}

/// One JSON-RPC `invoke` of `read_file f.txt` as `call_id` through the gateway: whether it
/// answered `ok`, and the member (HAProxy's server name) that answered.
async fn read_through(gw: &Haproxy, call_id: &str) -> (bool, String) {
    let tcp = tokio::net::TcpStream::connect(&gw.addr).await.unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "invoke",
        "params": {"name": "read_file", "arguments": {"path": "f.txt"}, "call_id": call_id}});
    let answer = http::exchange(
        tcp,
        "POST",
        "/",
        &[("Content-Type", "application/json")],
        &body.to_string(),
    )
    .await;
    let ok = serde_json::from_str::<Value>(&answer.body)
        .is_ok_and(|v| v["result"]["result"]["ok"] == true);
    (ok, answer.header("x-served-by").unwrap_or_default())
}

#[tokio::test]
async fn a_replica_killed_during_load_leaves_the_others_answering_and_no_call_answered_twice() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    let pg = Postgres::start();
    let mut members = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..3 {
        let m = Daemon::start_in(|dir| {
            let mut cfg = crate::fleet_sessions::fleet_config(&pg, dir);
            cfg["approval"] = json!({"mode": "strict", "wait_s": 60});
            // The clients repeat one call hundreds of times: the built-in loop breaker
            // stays, but wide.
            cfg["guards"] =
                json!([{"name": "default-loop", "loop": {"calls": 1_000_000, "window_s": 60}}]);
            cfg
        })
        .await;
        std::fs::write(m.workspace().join("f.txt"), "hello").unwrap();
        addrs.push(m.tcp_addr().await);
        members.push(m);
    }
    let mut ids = Vec::new();
    for m in &members {
        ids.push(crate::fleet::member_id(m).await);
    }
    let gw = Arc::new(Haproxy::start(&addrs, TOKEN).await);
    // A call of A's waits for approval, seen fleet-wide.
    let _held =
        crate::approvals::caller(&members[0], "held-on-a", "touch never", None, json!([])).await;
    let held = crate::fleet::entry_on(&members[1], "held-on-a").await;

    // Four clients call through the gateway, each call with its own id, until stopped.
    // `dead`: set once A is reaped; each call notes whether it started before that.
    let (stop, answered, dead) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let log: Arc<Mutex<Vec<(String, bool, String)>>> = Arc::default();
    let failed_after_death: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut clients = Vec::new();
    for c in 0..4 {
        let (gw, stop, answered, log) = (gw.clone(), stop.clone(), answered.clone(), log.clone());
        let (dead, failed_after_death) = (dead.clone(), failed_after_death.clone());
        clients.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let id = format!("load-{c}-{n}");
                let after_death = dead.load(Ordering::Relaxed);
                let (ok, by) = read_through(&gw, &id).await;
                if !ok && after_death {
                    failed_after_death.lock().unwrap().push(id.clone());
                }
                answered.fetch_add(usize::from(ok), Ordering::Relaxed);
                log.lock().unwrap().push((id, ok, by));
            }
        }));
    }
    eventually(30, "calls answered by all three", || async {
        let log = log.lock().unwrap();
        ["m0", "m1", "m2"]
            .iter()
            .all(|m| log.iter().any(|(_, ok, by)| *ok && by == m))
    })
    .await;
    members[0].kill9().await;
    dead.store(true, Ordering::Relaxed);
    let at_kill = log.lock().unwrap().len();

    // The others keep answering (a request refused by the dead member is sent on to the
    // next), A shows lost and its waiting call is withdrawn.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (n, ok, summary) = {
            let log = log.lock().unwrap();
            let after = &log[at_kill..];
            let mut summary = std::collections::BTreeMap::new();
            for (_, ok, by) in after {
                *summary.entry((by.clone(), *ok)).or_insert(0) += 1;
            }
            (
                after.len(),
                after.iter().filter(|(_, ok, _)| *ok).count(),
                summary,
            )
        };
        if ok >= 60 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "after the kill: {n} calls, {ok} ok: {summary:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    eventually(20, "A lost and its approval withdrawn", || async {
        let s = members[1].call("fleet.status", json!({})).await;
        let lost = s["result"]["members"].as_array().is_some_and(|m| {
            m.iter()
                .any(|m| m["id"] == ids[0].as_str() && m["state"] == "lost")
        });
        lost && pg
            .sql(&format!(
                "SELECT verdict->>'outcome' FROM toolhost_approvals WHERE id = '{held}'"
            ))
            .trim()
            == "withdrawn"
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let log = log.lock().unwrap().clone();
    let late: Vec<_> = log[at_kill..].iter().filter(|(_, ok, _)| *ok).collect();
    assert!(
        late.iter().all(|(_, _, by)| by != "m0"),
        "an answer from the killed member after the kill"
    );
    let failed = log.iter().filter(|(_, ok, _)| !ok).count();
    eprintln!(
        "{} calls, {} answered, {failed} failed (in flight on the killed member)",
        log.len(),
        answered.load(Ordering::Relaxed)
    );
    // Only calls A had taken before it was gone may fail (the one each client had in
    // flight, or one more sent to it while it was dying): none sent once it was reaped,
    // since the gateway sends a refused request on to the next member.
    let after_death = failed_after_death.lock().unwrap().clone();
    assert!(
        after_death.is_empty(),
        "calls started after A was reaped failed: {after_death:?}"
    );
    assert!(
        failed <= 8,
        "more failures than calls A can have taken: {failed}"
    );

    // No call was answered twice: each call id is in the audit table at most once, and
    // every call the survivors answered is there once, with the member that answered.
    let twice = pg.sql("SELECT call_id FROM toolhost_audit WHERE call_id LIKE 'load-%' GROUP BY call_id HAVING count(*) > 1");
    assert!(twice.trim().is_empty(), "audited twice: {twice}");
    let expected: Vec<String> = {
        let mut v: Vec<String> = late
            .iter()
            .map(|(id, _, by)| format!("{id}|{}", ids[by[1..].parse::<usize>().unwrap()]))
            .collect();
        v.sort();
        v
    };
    eventually(20, "the survivors' calls in the audit table", || async {
        let rows = pg.sql(&format!(
            "SELECT call_id || '|' || member FROM toolhost_audit WHERE call_id LIKE 'load-%' AND member <> '{}' ORDER BY 1",
            ids[0]
        ));
        let rows: Vec<&str> = rows.lines().collect();
        expected.iter().all(|e| rows.contains(&e.as_str()))
    })
    .await;
}
