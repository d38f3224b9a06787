//! Public names of MCP tools (and prompts): `mcp_<server>_<tool>`, or the tool's own name
//! for a server configured with `"prefix": false`; always within `^[a-zA-Z0-9_-]{1,64}$`.

use sha2::{Digest, Sha256};

/// Longest public tool name (OpenAI's function-name limit).
pub const MAX_NAME: usize = 64;

/// The public name of `tool` on `server`; `prefixed` is the server's `prefix` setting.
///
/// Prefixed, a tool whose name already starts with the server's name and `_` or `-` does
/// not repeat it (`git` + `git_status` is `mcp_git_status`, not `mcp_git_git_status`).
/// Characters outside `[a-zA-Z0-9_-]` become `_`; a name longer than 64 keeps its first 55
/// characters plus `_` and 8 hex digits of a hash of the full unsanitised name, so the
/// result is stable across restarts and distinct tools stay distinct. The name depends on
/// nothing but these three arguments, so pins and quarantine keyed by it stay put.
pub fn public_name(server: &str, prefixed: bool, tool: &str) -> String {
    let raw = if prefixed {
        let own = tool
            .strip_prefix(server)
            .and_then(|rest| rest.strip_prefix(['_', '-']))
            .filter(|rest| !rest.is_empty())
            .unwrap_or(tool);
        format!("mcp_{server}_{own}")
    } else {
        tool.to_owned()
    };
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
    if !clean.is_empty() && clean.len() <= MAX_NAME {
        return clean;
    }
    let hash = hex::encode(&Sha256::digest(raw.as_bytes())[..4]);
    let keep = clean.len().min(MAX_NAME - 9);
    format!("{}_{hash}", &clean[..keep])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_kept_and_sanitised() {
        assert_eq!(public_name("fs", true, "read"), "mcp_fs_read");
        assert_eq!(
            public_name("gh", true, "search.issues v2"),
            "mcp_gh_search_issues_v2"
        );
    }

    #[test]
    fn a_doubled_server_name_is_dropped() {
        assert_eq!(public_name("git", true, "git_status"), "mcp_git_status");
        assert_eq!(public_name("git", true, "git-log"), "mcp_git_log");
        // Only a whole leading word, and never down to nothing.
        assert_eq!(public_name("git", true, "github_pr"), "mcp_git_github_pr");
        assert_eq!(public_name("git", true, "git"), "mcp_git_git");
        assert_eq!(public_name("git", true, "git_"), "mcp_git_git_");
    }

    #[test]
    fn unprefixed_names_are_the_tools_own() {
        assert_eq!(public_name("git", false, "git_status"), "git_status");
        assert_eq!(public_name("gh", false, "search issues"), "search_issues");
        let empty = public_name("gh", false, "");
        assert!(empty.starts_with('_') && empty.len() == 9, "{empty}");
    }

    #[test]
    fn long_names_get_a_stable_hash_suffix() {
        let long = "x".repeat(80);
        for prefixed in [true, false] {
            let a = public_name("srv", prefixed, &long);
            assert_eq!(a.len(), 64);
            assert_eq!(a, public_name("srv", prefixed, &long));
            assert_ne!(a, public_name("srv", prefixed, &format!("{long}y")));
            assert!(a
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
        }
    }
}
