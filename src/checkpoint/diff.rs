//! An entry's changes as text: line counts for the timeline, unified diffs on request.

use similar::{ChangeTag, TextDiff};

use super::store::{Change, Objects};
use super::tree::Item;

/// Text files up to this size get line counts in the timeline.
const COUNT_MAX_BYTES: u64 = 1 << 20;

/// The text of an item, when it is a text file (or a link: its target).
fn text(objects: &Objects, item: Option<&Item>, max: u64) -> Option<Option<String>> {
    match item {
        None => Some(None),
        Some(Item::File { id, size, .. }) if *size <= max => {
            let bytes = objects.get(id).ok()?;
            if bytes.contains(&0) {
                return None;
            }
            String::from_utf8(bytes).ok().map(Some)
        }
        _ => None,
    }
}

/// Fills in a change's added and removed line counts (text files only).
pub fn count_lines(objects: &Objects, change: &mut Change) {
    let (Some(old), Some(new)) = (
        text(objects, change.before.as_ref(), COUNT_MAX_BYTES),
        text(objects, change.after.as_ref(), COUNT_MAX_BYTES),
    ) else {
        return;
    };
    let (old, new) = (old.unwrap_or_default(), new.unwrap_or_default());
    let diff = TextDiff::from_lines(&old, &new);
    let (mut plus, mut minus) = (0, 0);
    for c in diff.iter_all_changes() {
        match c.tag() {
            ChangeTag::Insert => plus += 1,
            ChangeTag::Delete => minus += 1,
            ChangeTag::Equal => {}
        }
    }
    change.plus = Some(plus);
    change.minus = Some(minus);
}

/// One change as a unified diff (`a/` before, `b/` after; `/dev/null` for a side that
/// does not exist). What is not text is described in a line instead.
pub fn unified(objects: &Objects, change: &Change, out: &mut String) {
    let path = change.path.shown();
    let old_name = match change.before {
        Some(_) => format!("a/{path}"),
        None => "/dev/null".to_owned(),
    };
    let new_name = match change.after {
        Some(_) => format!("b/{path}"),
        None => "/dev/null".to_owned(),
    };
    let describe = |item: Option<&Item>| match item {
        None => "nothing".to_owned(),
        Some(Item::Symlink { id }) => match objects.get(id) {
            Ok(t) => format!("a symbolic link to {}", String::from_utf8_lossy(&t)),
            Err(_) => "a symbolic link".to_owned(),
        },
        Some(Item::Large { size, .. }) => format!("a large file of {size} bytes"),
        Some(other) => format!("a {}", other.kind()),
    };
    let texts = (
        text(objects, change.before.as_ref(), u64::MAX),
        text(objects, change.after.as_ref(), u64::MAX),
    );
    match texts {
        (Some(old), Some(new)) => {
            let (old, new) = (old.unwrap_or_default(), new.unwrap_or_default());
            let text = crate::text_diff::unified(&old, &new, &old_name, &new_name);
            if text.is_empty() {
                // Only the mode changed.
                out.push_str(&format!("--- {old_name}\n+++ {new_name}\n(mode changed)\n"));
            } else {
                out.push_str(&text);
            }
        }
        _ => out.push_str(&format!(
            "--- {old_name}\n+++ {new_name}\n{path}: {} became {}\n",
            describe(change.before.as_ref()),
            describe(change.after.as_ref()),
        )),
    }
}
