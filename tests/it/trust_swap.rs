//! A file swapped between its approval and its loading is never served (#46, the trust
//! gate as part of the source kind): an approved workspace skill is parsed from exactly the
//! bytes whose digest was approved. A sandboxed `bash` can write the workspace, so a
//! project could swap an approved SKILL.md for another between the check and the read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common;

use common::skills::{front, write_skill};
use common::{eventually, Daemon};
use serde_json::{json, Value};

const APPROVED: &str = "The approved release steps.";
const SWAPPED: &str = "Swapped in after the approval, never approved by anyone at all.";

/// The descriptions of the daemon's skills.
async fn descriptions(d: &Daemon) -> Vec<String> {
    let r = d.call("list_skills", json!({})).await;
    r["result"]["skills"]
        .as_array()
        .unwrap_or_else(|| panic!("list_skills: {r}"))
        .iter()
        .map(|s| s["description"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Replaces `target` by a file of `text`, atomically, from a folder outside the skill's.
fn put(scratch: &Path, target: &Path, text: &str) {
    let tmp = scratch.join("SKILL.md.next");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, target).unwrap();
}

#[tokio::test]
async fn a_skill_swapped_between_approval_and_load_is_never_served() {
    let mut d = Daemon::unstarted();
    let skills = d.workspace().join(".agents/skills");
    let dir = write_skill(
        &skills,
        "release",
        &front("release", APPROVED),
        "Steps.",
        &[],
    );
    d.spawn(&[]).await;
    eventually(10, "the project's skill waiting for approval", || async {
        d.trust_waiting().await == [".agents/skills/release"]
    })
    .await;
    d.trust(&[OsStr::new("approve"), dir.as_os_str()]).await;
    eventually(10, "the approved skill served", || async {
        descriptions(&d).await == [APPROVED]
    })
    .await;

    // A writer swaps SKILL.md between the approved text and another as fast as it can; the
    // folder watch rescans all along.
    let scratch = d.workspace().join(".agents/scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let approved = format!("---\n{}---\nSteps.", front("release", APPROVED));
    let swapped = format!("---\n{}---\nOther steps.", front("release", SWAPPED));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, target, scratch) = (stop.clone(), dir.join("SKILL.md"), scratch.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                put(&scratch, &target, &swapped);
                put(&scratch, &target, &approved);
                swaps += 1;
            }
            swaps
        })
    };
    let until = Instant::now() + Duration::from_secs(6);
    let mut seen: Vec<Value> = Vec::new();
    while Instant::now() < until {
        for desc in descriptions(&d).await {
            if !seen.contains(&json!(desc)) {
                seen.push(json!(desc));
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = writer.join().unwrap();
    assert!(swaps > 100, "the writer swapped the file ({swaps} times)");
    assert!(
        !seen.contains(&json!(SWAPPED)),
        "an unapproved SKILL.md was served: {seen:?}"
    );
    // The approved text is in place again: it is served (the swap did not lose it).
    eventually(10, "the approved skill served again", || async {
        descriptions(&d).await == [APPROVED]
    })
    .await;
}
