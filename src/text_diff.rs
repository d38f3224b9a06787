//! Unified diffs of text, as `diff -u` prints them: one rule for every diff the host shows
//! (checkpoints, a quarantined tool's definition, a waiting workspace item's files).

use similar::TextDiff;

/// `old` against `new` as a unified diff with three lines of context under the header
/// `--- old_name` / `+++ new_name`; empty when the texts are equal. Always ends in a
/// newline when not empty.
pub fn unified(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    let mut text = TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(old_name, new_name)
        .to_string();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_the_changed_line_and_keeps_context() {
        let d = unified("a\nb\nc\n", "a\nB\nc\n", "a/x", "b/x");
        assert_eq!(d, "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n");
    }

    #[test]
    fn equal_texts_have_no_diff_and_a_missing_last_newline_gets_one() {
        assert_eq!(unified("same", "same", "a", "b"), "");
        assert!(unified("x", "y", "a", "b").ends_with('\n'));
    }
}
