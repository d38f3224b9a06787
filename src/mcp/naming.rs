//! Public names of MCP tools: `mcp_<server>_<tool>`, sanitised to `^[a-zA-Z0-9_-]{1,64}$`.

use sha2::{Digest, Sha256};

/// Longest public tool name (OpenAI's function-name limit).
pub const MAX_NAME: usize = 64;

/// The public name of `tool` on `server`. Characters outside `[a-zA-Z0-9_-]` become `_`;
/// a name longer than 64 keeps its first 55 characters plus `_` and 8 hex digits of a hash
/// of the full original name, so the result is stable across restarts and distinct tools
/// stay distinct.
pub fn public_name(server: &str, tool: &str) -> String {
    let raw = format!("mcp_{server}_{tool}");
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= MAX_NAME {
        return clean;
    }
    let hash = hex::encode(&Sha256::digest(raw.as_bytes())[..4]);
    format!("{}_{hash}", &clean[..MAX_NAME - 9])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_kept_and_sanitised() {
        assert_eq!(public_name("fs", "read"), "mcp_fs_read");
        assert_eq!(
            public_name("gh", "search.issues v2"),
            "mcp_gh_search_issues_v2"
        );
    }

    #[test]
    fn long_names_get_a_stable_hash_suffix() {
        let long = "x".repeat(80);
        let a = public_name("srv", &long);
        assert_eq!(a.len(), 64);
        assert_eq!(a, public_name("srv", &long));
        assert_ne!(a, public_name("srv", &format!("{long}y")));
        assert!(a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
    }
}
