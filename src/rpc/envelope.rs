//! The JSON-RPC 2.0 envelope, checked at the edge before any method runs.
//!
//! Any string or number is an id (jsonrpsee's `Id` held only u64, string or null, so a
//! request with id `-5`, `1.5` or 2^64 used to pass as a notification, run nothing and get
//! no reply). Every framing passes each message through here: every entry is checked
//! against the spec, and the client's id token is kept as sent, to be written back byte
//! for byte; a notification's reply is dropped. Which entries owe a reply is decided here,
//! so the connection knows exactly when it has answered everything.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::protocol::codes::{INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR};

/// More entries than this in one batch are refused as a whole.
pub(crate) const MAX_BATCH: usize = 1000;

/// One request to run.
#[derive(Debug)]
pub(crate) struct Call {
    pub method: String,
    /// The params as sent (an object or an array); `None` when absent or `null`.
    params: Option<Box<RawValue>>,
    /// The client's id token as sent; `None` for a notification (its reply is dropped).
    pub id: Option<Box<RawValue>>,
}

/// One entry of a message after checking.
#[derive(Debug)]
pub(crate) enum Item {
    Call(Call),
    /// Answered at once (an invalid entry); the final reply text.
    Reply(String),
    /// A malformed notification: nothing runs and nothing is answered.
    Ignore,
}

/// A whole message (one line, one WebSocket text, one HTTP body).
#[derive(Debug)]
pub(crate) enum Message {
    Single(Item),
    Batch(Vec<Item>),
}

impl Message {
    /// Whether the client is owed a reply for this message (false only when every entry is a
    /// well-formed notification).
    pub fn owes_reply(&self) -> bool {
        let owes = |i: &Item| match i {
            Item::Call(c) => c.id.is_some(),
            Item::Reply(_) => true,
            Item::Ignore => false,
        };
        match self {
            Message::Single(i) => owes(i),
            Message::Batch(items) => items.iter().any(owes),
        }
    }
}

/// An error reply with `id` (a raw JSON token; `null` when unknown).
pub(crate) fn error_reply(id: Option<&RawValue>, code: i32, message: &str) -> String {
    let id = id.map_or("null", RawValue::get);
    let message = serde_json::to_string(message).unwrap_or_else(|_| "\"\"".to_owned());
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{message}}}}}"#)
}

/// An error reply with `id` for a method's error (its `data` kept).
pub(crate) fn error_object_reply(
    id: &RawValue,
    error: &jsonrpsee::types::ErrorObjectOwned,
) -> String {
    match serde_json::to_string(error) {
        Ok(error) => format!(r#"{{"jsonrpc":"2.0","id":{},"error":{error}}}"#, id.get()),
        Err(_) => error_reply(Some(id), error.code(), error.message()),
    }
}

/// Checks one message. Never fails: what cannot run becomes an error reply.
pub(crate) fn parse(text: &str) -> Message {
    let text = text.trim_matches(|c: char| c.is_ascii_whitespace());
    if text.starts_with('[') {
        let entries: Vec<&RawValue> = match serde_json::from_str(text) {
            Ok(e) => e,
            Err(e) => return Message::Single(Item::Reply(parse_error(&e))),
        };
        if entries.is_empty() {
            return invalid(None, "Invalid request: a batch must not be empty");
        }
        if entries.len() > MAX_BATCH {
            return invalid(
                None,
                &format!("Invalid request: a batch holds at most {MAX_BATCH} requests"),
            );
        }
        return Message::Batch(entries.into_iter().map(entry).collect());
    }
    // A well-formed request object is read in one pass; anything else takes the checks
    // below, which tell a parse error from an invalid request.
    if text.starts_with('{') {
        if let Ok(fields) = serde_json::from_str::<Fields>(text) {
            return Message::Single(checked(fields));
        }
    }
    match serde_json::from_str::<&RawValue>(text) {
        Ok(v) => Message::Single(entry(v)),
        Err(e) => Message::Single(Item::Reply(parse_error(&e))),
    }
}

fn parse_error(e: &serde_json::Error) -> String {
    error_reply(None, PARSE_ERROR, &format!("Parse error: {e}"))
}

fn invalid(id: Option<&RawValue>, msg: &str) -> Message {
    Message::Single(Item::Reply(error_reply(id, INVALID_REQUEST, msg)))
}

/// Deserialises a present field as its raw token, so `"id": null` is told from no `id`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    params: Option<&'a RawValue>,
}

/// Checks one request object (a single message or one batch entry).
fn entry(raw: &RawValue) -> Item {
    let reply =
        |id: Option<&RawValue>, code: i32, msg: &str| Item::Reply(error_reply(id, code, msg));
    if !raw.get().starts_with('{') {
        return reply(None, INVALID_REQUEST, "Invalid request: not an object");
    }
    match serde_json::from_str(raw.get()) {
        Ok(f) => checked(f),
        Err(e) => reply(None, INVALID_REQUEST, &format!("Invalid request: {e}")),
    }
}

/// Checks the fields of one request object.
fn checked(f: Fields) -> Item {
    let reply =
        |id: Option<&RawValue>, code: i32, msg: &str| Item::Reply(error_reply(id, code, msg));
    // Any string or number is an id; null is tolerated (and answered with null).
    let id = match f.id {
        None => None,
        Some(id) => match id.get().as_bytes().first() {
            Some(b'"' | b'-' | b'0'..=b'9' | b'n') => Some(id),
            _ => {
                return reply(
                    None,
                    INVALID_REQUEST,
                    "Invalid request: the id must be a string, a number or null",
                )
            }
        },
    };
    if f.jsonrpc.map(RawValue::get) != Some(r#""2.0""#) {
        return reply(
            id,
            INVALID_REQUEST,
            r#"Invalid request: "jsonrpc" must be "2.0""#,
        );
    }
    let method = match f.method.map(|m| serde_json::from_str::<String>(m.get())) {
        Some(Ok(m)) => m,
        _ => {
            return reply(
                id,
                INVALID_REQUEST,
                r#"Invalid request: "method" must be a string"#,
            )
        }
    };
    let params = match f.params {
        None => None,
        Some(p) if p.get() == "null" => None,
        Some(p) if p.get().starts_with('{') || p.get().starts_with('[') => Some(p),
        Some(_) => {
            if id.is_none() {
                // A notification never gets a reply, not even an error.
                return Item::Ignore;
            }
            return reply(
                id,
                INVALID_PARAMS,
                r#"Invalid params: "params" must be an object or an array"#,
            );
        }
    };
    Item::Call(Call {
        method,
        params: params.map(RawValue::to_owned),
        id: id.map(RawValue::to_owned),
    })
}

impl Call {
    /// The params as sent (an object or an array); `None` when absent or `null`.
    pub fn params(&self) -> Option<&str> {
        self.params.as_deref().map(RawValue::get)
    }
}

/// A result reply with `id` (a raw JSON token), `result` serialised straight into it, with
/// room left for a newline (the newline framing adds one without copying the reply).
pub(crate) fn result_reply(
    id: &RawValue,
    result: &impl serde::Serialize,
) -> Result<String, serde_json::Error> {
    let mut reply = Vec::with_capacity(256);
    reply.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    reply.extend_from_slice(id.get().as_bytes());
    reply.extend_from_slice(br#","result":"#);
    serde_json::to_writer(&mut reply, result)?;
    reply.push(b'}');
    reply.reserve_exact(1);
    // serde_json writes UTF-8 only; a failure here would be a bug in it, reported as one.
    String::from_utf8(reply).map_err(serde::ser::Error::custom)
}

/// Joins the replies of a batch; `None` when nothing is owed (all notifications).
pub(crate) fn join_batch(replies: Vec<String>) -> Option<String> {
    let replies: Vec<String> = replies.into_iter().filter(|r| !r.is_empty()).collect();
    if replies.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(replies.iter().map(|r| r.len() + 1).sum::<usize>() + 1);
    out.push('[');
    out.push_str(&replies.join(","));
    out.push(']');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn call(text: &str) -> Call {
        match parse(text) {
            Message::Single(Item::Call(c)) => c,
            other => panic!("not a call: {other:?}"),
        }
    }

    fn reply(text: &str) -> Value {
        match parse(text) {
            Message::Single(Item::Reply(r)) => serde_json::from_str(&r).unwrap(),
            other => panic!("not a reply: {other:?}"),
        }
    }

    #[test]
    fn any_number_or_string_id_is_kept_byte_for_byte() {
        for id in [
            "-5",
            "1.5",
            "18446744073709551616",
            "1e400",
            "0",
            r#""a\"b""#,
            "null",
        ] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m","params":{{"a":1}}}}"#);
            let c = call(&text);
            assert_eq!(c.id.as_deref().map(RawValue::get), Some(id));
            assert_eq!(c.method, "m");
            assert_eq!(c.params(), Some(r#"{"a":1}"#));
            let out = result_reply(c.id.as_deref().unwrap(), &7).unwrap();
            assert_eq!(out, format!(r#"{{"jsonrpc":"2.0","id":{id},"result":7}}"#));
        }
    }

    #[test]
    fn invalid_ids_get_invalid_request_with_a_null_id() {
        for id in ["true", "{}", "[1]", "false"] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#);
            assert_eq!(
                reply(&text),
                json!({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request: the id must be a string, a number or null"}})
            );
        }
    }

    #[test]
    fn notifications_run_and_owe_nothing() {
        let m = parse(r#"{"jsonrpc":"2.0","method":"cancel","params":{"call_id":"x"}}"#);
        assert!(!m.owes_reply());
        let Message::Single(Item::Call(c)) = m else {
            panic!("not a call")
        };
        assert!(c.id.is_none());
        let m = parse(r#"[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]"#);
        assert!(!m.owes_reply());
        let m = parse(r#"[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":1,"method":"b"}]"#);
        assert!(m.owes_reply());
    }

    #[test]
    fn malformed_envelopes_owe_an_error() {
        for (text, code, id) in [
            (r#"{"jsonrpc":"1.0","id":3,"method":"m"}"#, -32600, json!(3)),
            (r#"{"id":3,"method":"m"}"#, -32600, json!(3)),
            (r#"{"jsonrpc":"2.0","id":3}"#, -32600, json!(3)),
            (r#"{"jsonrpc":"2.0","id":3,"method":5}"#, -32600, json!(3)),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"m","params":5}"#,
                -32602,
                json!(3),
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"id":4,"method":"m"}"#,
                -32600,
                Value::Null,
            ),
            ("5", -32600, Value::Null),
            ("[]", -32600, Value::Null),
            ("{nope", -32700, Value::Null),
            // Read in one pass when well formed; anything after the object is still a
            // parse error, not a request.
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"m"} x"#,
                -32700,
                Value::Null,
            ),
        ] {
            let m = parse(text);
            assert!(m.owes_reply(), "{text}");
            let r = reply(text);
            assert_eq!(r["error"]["code"], code, "{text}: {r}");
            assert_eq!(r["id"], id, "{text}: {r}");
        }
    }

    #[test]
    fn params_null_is_no_params() {
        let c = call(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":null}"#);
        assert_eq!(c.params(), None);
    }

    #[test]
    fn deep_nesting_is_checked_without_recursion() {
        // serde_json skips a raw value without recursing, so this cannot overflow the stack;
        // the inner entry is not an object.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let Message::Batch(items) = parse(&deep) else {
            panic!("not a batch")
        };
        let [Item::Reply(r)] = &items[..] else {
            panic!("{items:?}")
        };
        assert_eq!(
            serde_json::from_str::<Value>(r).unwrap()["error"]["code"],
            -32600
        );
        // Deep params pass through untouched (the method's own parser has a depth limit).
        let params = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        let c = call(&format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{params}}}"#
        ));
        assert_eq!(c.params(), Some(params.as_str()));
    }

    #[test]
    fn batches_join_only_owed_replies() {
        assert_eq!(join_batch(vec![String::new(), String::new()]), None);
        assert_eq!(
            join_batch(vec!["1".into(), String::new(), "2".into()]).as_deref(),
            Some("[1,2]")
        );
    }
}
