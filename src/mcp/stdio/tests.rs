//! Tests of the stdio transport and its direct calls.

use std::time::Duration;

use super::*;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// A transport on in-memory pipes: (transport, the server's stdout, the server's stdin).
fn pipes() -> (
    StdioTransport<tokio::io::DuplexStream>,
    tokio::io::DuplexStream,
    BufReader<tokio::io::DuplexStream>,
) {
    let (stdout_theirs, stdout_ours) = tokio::io::duplex(1 << 16);
    let (stdin_ours, stdin_theirs) = tokio::io::duplex(1 << 16);
    (
        StdioTransport::new(stdout_ours, stdin_ours),
        stdout_theirs,
        BufReader::new(stdin_theirs),
    )
}

/// A transport on 16-byte pipes, so a long message cannot be written in one go:
/// (transport, the server's stdout, the server's stdin).
fn narrow_pipes() -> (
    StdioTransport<tokio::io::DuplexStream>,
    tokio::io::DuplexStream,
    tokio::io::DuplexStream,
) {
    let (stdout_ours, stdout_theirs) = tokio::io::duplex(16);
    let (stdin_ours, stdin_theirs) = tokio::io::duplex(16);
    (
        StdioTransport::new(stdout_ours, stdin_ours),
        stdout_theirs,
        stdin_theirs,
    )
}

/// Every line a transport with a `limit` of 100 bytes reads from `input`.
async fn lines_read(input: &[u8]) -> Vec<String> {
    let mut t = StdioTransport::new(input, tokio::io::sink());
    t.limit = 100;
    let mut lines = Vec::new();
    while t.read_line().await.unwrap() {
        lines.push(String::from_utf8(std::mem::take(&mut t.line)).unwrap());
    }
    lines
}

#[tokio::test]
async fn short_lines_are_read_as_they_are() {
    let lines = lines_read(b"{\"id\":1,\"result\":{}}\n{\"id\":2}\n").await;
    assert_eq!(lines, ["{\"id\":1,\"result\":{}}\n", "{\"id\":2}\n"]);
}

#[tokio::test]
async fn an_oversized_line_is_read_as_an_error_for_its_id() {
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"{}\"}}\n{{\"id\":8}}\n",
        "x".repeat(500)
    );
    let lines = lines_read(big.as_bytes()).await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    let err: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(err["id"], 7);
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("was 536 bytes, over the limit of 100"),
        "{message}"
    );
    assert_eq!(lines[1], "{\"id\":8}\n");
}

#[tokio::test]
async fn an_id_after_the_result_is_found_at_the_end_and_no_id_drops_the_line() {
    let big = format!(
        "{{\"result\":\"{}\",\"jsonrpc\":\"2.0\",\"id\":\"th-9\"}}\n{}\n{{\"id\":3}}\n",
        "x".repeat(5000),
        "y".repeat(300)
    );
    let lines = lines_read(big.as_bytes()).await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    let err: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(err["id"], "th-9");
    assert_eq!(lines[1], "{\"id\":3}\n");
}

async fn read_json(r: &mut BufReader<tokio::io::DuplexStream>) -> Value {
    let mut line = String::new();
    r.read_line(&mut line).await.unwrap();
    serde_json::from_str(&line).unwrap()
}

#[tokio::test]
async fn a_direct_call_gets_its_answer_and_rmcp_the_rest() {
    let (mut t, mut server_out, mut server_in) = pipes();
    let direct = t.direct();
    let args = json!({"text": "hi"}).as_object().unwrap().clone();
    let call = direct
        .call("echo", &args, &Map::new(), &serde_json::Value::Null)
        .await
        .unwrap();
    let request = read_json(&mut server_in).await;
    assert_eq!(request["method"], "tools/call");
    assert_eq!(request["id"], &*call.id);
    assert_eq!(request["params"]["_meta"]["progressToken"], &*call.id);
    assert_eq!(request["params"]["arguments"]["text"], "hi");
    let answer = json!({"jsonrpc": "2.0", "id": &*call.id, "result": {"content": []}});
    let note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    server_out
        .write_all(format!("{answer}\n{note}\n").as_bytes())
        .await
        .unwrap();
    // The answer goes to the call; rmcp sees only the notification.
    let m = t.receive().await.unwrap();
    assert!(
        matches!(m, rmcp::model::JsonRpcMessage::Notification(_)),
        "{m:?}"
    );
    assert_eq!(
        call.answer.await.unwrap().unwrap().get(),
        r#"{"content":[]}"#
    );
}

#[tokio::test]
async fn a_result_is_handed_over_in_its_line_wherever_it_lies() {
    let (mut t, mut server_out, _server_in) = pipes();
    let direct = t.direct();
    let first = direct
        .call("echo", &Map::new(), &Map::new(), &serde_json::Value::Null)
        .await
        .unwrap();
    let second = direct
        .call("echo", &Map::new(), &Map::new(), &serde_json::Value::Null)
        .await
        .unwrap();
    // Spaces around the line, the result before the id, members after it, text escaped.
    let result = r#"{"content":[{"type":"text","text":"\u00e9 \"x\""}]}"#;
    let a = format!(
        r#"  {{"jsonrpc":"2.0","result": {result} ,"id":"{}","extra":1}}  "#,
        first.id
    );
    let b = json!({"jsonrpc": "2.0", "id": &*second.id, "result": {"n": "\u{e9}"}});
    let note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    server_out
        .write_all(format!("{a}\n{b}\n{note}\n").as_bytes())
        .await
        .unwrap();
    let _ = t.receive().await;
    assert_eq!(first.answer.await.unwrap().unwrap().get(), result);
    assert_eq!(
        second.answer.await.unwrap().unwrap().get(),
        "{\"n\":\"\u{e9}\"}"
    );
}

#[tokio::test]
async fn a_null_result_reaches_the_call_instead_of_being_dropped() {
    let (mut t, mut server_out, _server_in) = pipes();
    let direct = t.direct();
    let call = direct
        .call("echo", &Map::new(), &Map::new(), &serde_json::Value::Null)
        .await
        .unwrap();
    let answer = json!({"jsonrpc": "2.0", "id": &*call.id, "result": null});
    let note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    server_out
        .write_all(format!("{answer}\n{note}\n").as_bytes())
        .await
        .unwrap();
    let _ = t.receive().await;
    assert_eq!(call.answer.await.unwrap().unwrap().get(), "null");
}

#[tokio::test]
async fn an_error_answer_fails_the_call_and_a_closed_server_every_waiting_one() {
    let (mut t, mut server_out, mut server_in) = pipes();
    let direct = t.direct();
    let one = direct
        .call("a", &Map::new(), &Map::new(), &serde_json::Value::Null)
        .await
        .unwrap();
    let two = direct
        .call("b", &Map::new(), &Map::new(), &serde_json::Value::Null)
        .await
        .unwrap();
    let _ = read_json(&mut server_in).await;
    let error = json!({"jsonrpc": "2.0", "id": &*one.id, "error": {"code": -32602, "message": "no such tool"}});
    server_out
        .write_all(format!("{error}\n").as_bytes())
        .await
        .unwrap();
    drop(server_out);
    assert!(t.receive().await.is_none());
    let e = one.answer.await.unwrap().unwrap_err();
    assert_eq!(e.message, "no such tool");
    assert!(
        two.answer.await.is_err(),
        "a waiting call fails when the server goes"
    );
    assert!(direct
        .call("c", &Map::new(), &Map::new(), &serde_json::Value::Null)
        .await
        .is_err());
}

#[tokio::test]
async fn a_write_given_up_half_way_is_finished_by_the_next_writer() {
    let (t, _stdout_theirs, mut stdin_theirs) = narrow_pipes();
    let out = t.direct.out.clone();
    let first = json!({"n": 1, "pad": "x".repeat(100)});
    out.queue(&first).unwrap();
    // The first writer writes what fits, then is dropped while it waits for room.
    let given_up = tokio::time::timeout(Duration::from_millis(50), out.flush()).await;
    assert!(given_up.is_err(), "the pipe is full, the writer waits");
    let second = json!({"n": 2});
    out.queue(&second).unwrap();
    let reader = tokio::spawn(async move {
        let mut all = Vec::new();
        let mut buf = [0u8; 64];
        while !all.ends_with(b"{\"n\":2}\n") {
            let n = stdin_theirs.read(&mut buf).await.unwrap();
            all.extend_from_slice(&buf[..n]);
        }
        String::from_utf8(all).unwrap()
    });
    out.flush().await.unwrap();
    let written = reader.await.unwrap();
    assert_eq!(written, format!("{first}\n{second}\n"));
}

#[tokio::test]
async fn a_call_given_up_before_its_request_is_written_is_cancelled_behind_it() {
    let (t, _stdout_theirs, stdin_theirs) = narrow_pipes();
    let direct = t.direct();
    let args = json!({"pad": "x".repeat(100)}).as_object().unwrap().clone();
    let given_up = tokio::time::timeout(
        Duration::from_millis(50),
        direct.call("slow", &args, &Map::new(), &serde_json::Value::Null),
    )
    .await;
    assert!(
        given_up.is_err(),
        "the pipe is full, the call waits to send"
    );
    assert!(!direct.waiting(), "the abandoned call waits for no answer");
    let flusher = tokio::spawn({
        let out = t.direct.out.clone();
        async move { out.flush().await }
    });
    let mut server_in = BufReader::new(stdin_theirs);
    let request = read_json(&mut server_in).await;
    assert_eq!(request["method"], "tools/call");
    let cancel = read_json(&mut server_in).await;
    assert_eq!(cancel["method"], "notifications/cancelled");
    assert_eq!(cancel["params"]["requestId"], request["id"]);
    flusher.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_server_that_reads_nothing_refuses_calls_once_its_queue_is_full() {
    let (t, _stdout_theirs, _stdin_theirs) = narrow_pipes();
    let direct = t.direct();
    let big = json!({"pad": "x".repeat(MAX_QUEUED)})
        .as_object()
        .unwrap()
        .clone();
    // The first call is queued (and waits for room); the next is refused at once.
    let waiting = tokio::time::timeout(
        Duration::from_millis(50),
        direct.call("a", &big, &Map::new(), &serde_json::Value::Null),
    )
    .await;
    assert!(waiting.is_err());
    let refused = tokio::time::timeout(
        Duration::from_secs(5),
        direct.call("b", &Map::new(), &Map::new(), &serde_json::Value::Null),
    )
    .await
    .expect("refused at once, not queued behind the first")
    .err()
    .unwrap();
    assert_ne!(refused.kind(), std::io::ErrorKind::BrokenPipe);
    assert!(refused.to_string().contains("has not read"), "{refused}");
}

#[tokio::test]
async fn a_probe_unanswered_in_time_is_refused_for_rmcp_and_its_late_answer_dropped() {
    let (t, mut server_out, mut server_in) = pipes();
    let mut t = t.probe_bound(Duration::from_millis(50));
    let discover = rmcp::model::ClientJsonRpcMessage::request(
        rmcp::model::ClientRequest::DiscoverRequest(rmcp::model::DiscoverRequest::new(
            rmcp::model::DiscoverRequestParams {},
        )),
        RequestId::Number(0),
    );
    t.send(discover).await.unwrap();
    assert_eq!(read_json(&mut server_in).await["method"], "server/discover");
    // Nothing comes: past the bound rmcp hears method-not-found for its probe.
    let refused = t.receive().await.unwrap();
    let JsonRpcMessage::Error(e) = refused else {
        panic!("{refused:?}")
    };
    assert_eq!(e.id, Some(RequestId::Number(0)));
    assert_eq!(e.error.code, ErrorCode::METHOD_NOT_FOUND);
    // The server's late answer is not rmcp's to see; what follows it is.
    let late = json!({"jsonrpc": "2.0", "id": 0, "result": {"supportedVersions": []}});
    let next = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
    server_out
        .write_all(format!("{late}\n{next}\n").as_bytes())
        .await
        .unwrap();
    let m = t.receive().await.unwrap();
    assert!(
        matches!(&m, JsonRpcMessage::Response(r) if r.id == RequestId::Number(1)),
        "{m:?}"
    );
}

#[tokio::test]
async fn a_direct_call_carries_the_era_meta_and_a_retrys_params() {
    let (t, _server_out, mut server_in) = pipes();
    let direct = t.direct();
    let era = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
    direct.set_era_meta(era.as_object().unwrap().clone());
    let retry = json!({"inputResponses": {"a": {"action": "decline"}}, "requestState": " s "});
    let capabilities = json!({"roots": {}, "elicitation": {"form": {}}});
    let call = direct
        .call(
            "echo",
            &Map::new(),
            retry.as_object().unwrap(),
            &capabilities,
        )
        .await
        .unwrap();
    let request = read_json(&mut server_in).await;
    assert_eq!(request["params"]["_meta"]["progressToken"], &*call.id);
    assert_eq!(
        request["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    assert_eq!(
        request["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"],
        capabilities
    );
    assert_eq!(request["params"]["requestState"], " s ");
    assert_eq!(request["params"]["inputResponses"], retry["inputResponses"]);
}

#[tokio::test]
async fn a_probe_answered_with_no_discover_result_is_a_refusal_for_rmcp() {
    let (mut t, mut server_out, mut server_in) = pipes();
    let discover = rmcp::model::ClientJsonRpcMessage::request(
        rmcp::model::ClientRequest::DiscoverRequest(rmcp::model::DiscoverRequest::new(
            rmcp::model::DiscoverRequestParams {},
        )),
        RequestId::Number(0),
    );
    t.send(discover).await.unwrap();
    let _ = read_json(&mut server_in).await;
    let empty = json!({"jsonrpc": "2.0", "id": 0, "result": {}});
    server_out
        .write_all(format!("{empty}\n").as_bytes())
        .await
        .unwrap();
    let m = t.receive().await.unwrap();
    let JsonRpcMessage::Error(e) = m else {
        panic!("{m:?}")
    };
    assert_eq!(e.error.code, ErrorCode::METHOD_NOT_FOUND);
}
