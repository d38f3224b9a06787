//! The operator page's undo timeline (proto-docs/checkpoints.md#the-operator-page), in a
//! real browser (chromium through chromedriver, as `ui.rs`): a project's entries with
//! tool, frontend and files, an outside change, an entry's diff on click, and a restore
//! behind a confirmation (`checkpoint.restore`, a dry run first), conflicts named.
//! Screenshot: `target/ui-screenshots/operator-page-timeline.png`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::ui::{click, log_in, screenshot_dir, shown, tcp_daemon, text_of, Driver};

use common::Daemon;
use serde_json::{json, Value};

async fn invoke(d: &Daemon, call_id: &str, name: &str, args: Value) {
    let r = d
        .call(
            "invoke",
            json!({"name": name, "arguments": args, "call_id": call_id}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], true, "{name}: {r}");
}

async fn id_of(d: &Daemon, call_id: &str) -> String {
    let t = d.call("checkpoint.list", json!({})).await;
    let entries = t["result"]["entries"].as_array().unwrap();
    entries
        .iter()
        .find(|e| e["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no entry of {call_id}: {t}"))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn read(d: &Daemon, rel: &str) -> String {
    std::fs::read_to_string(d.workspace().join(rel)).unwrap_or_else(|e| format!("<{e}>"))
}

#[tokio::test]
async fn an_operator_reads_the_timeline_and_restores_from_the_page() {
    let (d, addr) = tcp_daemon(json!({"checkpoint": {"enabled": true}})).await;
    std::fs::write(d.workspace().join("a.txt"), "original\n").unwrap();
    invoke(
        &d,
        "sock-1",
        "write_file",
        json!({"path": "a.txt", "content": "by socket\n"}),
    )
    .await;
    // An editor's change between calls, then a bash call.
    std::fs::write(d.workspace().join("c.txt"), "edited\n").unwrap();
    invoke(&d, "bash-2", "bash", json!({"command": "echo b > b.txt"})).await;
    let (one, two) = (id_of(&d, "sock-1").await, id_of(&d, "bash-2").await);

    let driver = Driver::start().await;
    let b = driver.browser().await;
    log_in(&b, &addr).await;

    // The entries: tool, frontend's call, files; the outside change as its own entry.
    let text = text_of(&b, &format!(r#"tr[data-checkpoint="{one}"]"#)).await;
    assert!(
        text.contains("write_file") && text.contains("a.txt") && text.contains("+1 -1"),
        "{text}"
    );
    let text = text_of(&b, r#"tr[data-kind="outside"]"#).await;
    assert!(
        text.contains("outside the host") && text.contains("c.txt"),
        "{text}"
    );
    shown(&b, &format!(r#"tr[data-checkpoint="{two}"]"#)).await;

    // Its diff on click.
    click(&b, &format!(r#"tr[data-checkpoint="{one}"]"#)).await;
    let text = text_of(
        &b,
        &format!(r#"tr[data-checkpoint="{one}"] + tr.detail pre.diff"#),
    )
    .await;
    assert!(
        text.contains("-original") && text.contains("+by socket"),
        "{text}"
    );

    // Restore, behind its confirmation: nothing happens before it is confirmed.
    click(
        &b,
        &format!(r#"tr[data-checkpoint="{one}"] button.restore"#),
    )
    .await;
    let card = text_of(&b, &format!(r#"[data-restore="{one}"]"#)).await;
    assert!(card.contains("a.txt"), "{card}");
    assert_eq!(
        read(&d, "a.txt"),
        "by socket\n",
        "not before the confirmation"
    );
    click(
        &b,
        &format!(r#"[data-restore="{one}"] button.confirm-restore"#),
    )
    .await;
    shown(&b, r#"tr[data-kind="restore"]"#).await;
    assert_eq!(read(&d, "a.txt"), "original\n");
    assert_eq!(read(&d, "b.txt"), "b\n", "the other entry's file stays");

    // A file changed again since: the confirmation names the conflict and the change.
    invoke(
        &d,
        "sock-3",
        "write_file",
        json!({"path": "b.txt", "content": "changed\n"}),
    )
    .await;
    let three = id_of(&d, "sock-3").await;
    shown(&b, &format!(r#"tr[data-checkpoint="{three}"]"#)).await;
    click(
        &b,
        &format!(r#"tr[data-checkpoint="{two}"] button.restore"#),
    )
    .await;
    let text = text_of(&b, &format!(r#"[data-restore="{two}"] .conflicts li"#)).await;
    assert!(
        text.contains("b.txt") && text.contains(&three) && text.contains("write_file"),
        "{text}"
    );
    std::fs::create_dir_all(screenshot_dir()).unwrap();
    let png = b.screenshot().await.unwrap();
    std::fs::write(screenshot_dir().join("operator-page-timeline.png"), png).unwrap();
    click(
        &b,
        &format!(r#"[data-restore="{two}"] button.confirm-restore"#),
    )
    .await;
    common::eventually(20, "b.txt to be removed", || async {
        !d.workspace().join("b.txt").exists()
    })
    .await;
    b.close().await.unwrap();
}
