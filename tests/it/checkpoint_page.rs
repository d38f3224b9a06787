//! A restore made from the operator page is recorded as the page's, not under the
//! browser's `User-Agent` (proto-docs/checkpoints.md#the-operator-page): the timeline says
//! "operator page", as it names any other frontend.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::http::unix;
use crate::common::Daemon;
use serde_json::{json, Value};

const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) Chrome/140.0 Safari/537.36";

#[tokio::test]
async fn a_restore_from_the_page_is_the_pages() {
    let d = Daemon::start_with(Some(json!({"checkpoint": {"enabled": true}}))).await;
    std::fs::write(d.workspace().join("a.txt"), "original\n").unwrap();
    let r = d
        .call(
            "invoke",
            json!({"name": "write_file", "call_id": "w-1",
                   "arguments": {"path": "a.txt", "content": "changed\n"}}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], true, "{r}");
    let list = d.call("checkpoint.list", json!({})).await;
    let entry = list["result"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["call_id"] == "w-1")
        .unwrap_or_else(|| panic!("no entry of w-1: {list}"))["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // The page: a token, then the restore as the page sends it, from a browser.
    let login = unix(
        &d.socket(),
        "POST",
        "/ui/login",
        &[("User-Agent", BROWSER)],
        "",
    )
    .await;
    assert_eq!(login.status, 200, "{}", login.body);
    let page: Value = serde_json::from_str(&login.body).unwrap();
    let page = page["page_token"].as_str().unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "checkpoint.restore",
                      "params": {"id": entry}})
    .to_string();
    let headers = [("X-Toolhost-Page", page), ("User-Agent", BROWSER)];
    let done = unix(&d.socket(), "POST", "/ui/rpc", &headers, &body).await;
    assert_eq!(done.status, 200, "{}", done.body);
    let done: Value = serde_json::from_str(&done.body).unwrap();
    assert!(done["error"].is_null(), "{done}");
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("a.txt")).unwrap(),
        "original\n"
    );

    let list = d.call("checkpoint.list", json!({})).await;
    let entries = list["result"]["entries"].as_array().unwrap();
    let restore = entries
        .iter()
        .find(|e| e["tool"] == "checkpoint.restore")
        .unwrap_or_else(|| panic!("no restore entry: {list}"));
    assert_eq!(restore["frontend"], "operator page", "{restore}");
    // And the filter finds it under that name.
    let by_page = d
        .call("checkpoint.list", json!({"frontend": "operator page"}))
        .await;
    let ids: Vec<&Value> = by_page["result"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["id"])
        .collect();
    assert_eq!(ids, vec![&restore["id"]], "{by_page}");
}
