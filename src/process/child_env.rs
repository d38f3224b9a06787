//! The environment every child starts with: the allow-list, then the daemon variables that
//! config `env_passthrough` names (names or `*`/`?` globs), then config `env`.
//!
//! The top-level settings are process-wide (set at start and on every reload), because
//! every spawn — `bash`, custom tools, stdio MCP servers — goes through [`apply`] and none
//! of those paths carries the config. A stdio server adds its own patterns on top.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use tokio::process::Command;

use super::ENV_ALLOW_LIST;

/// The top-level `env` and `env_passthrough` in force.
#[derive(Debug, Default)]
struct Shared {
    env: BTreeMap<String, String>,
    passthrough: Vec<String>,
}

fn shared() -> &'static ArcSwap<Shared> {
    static SHARED: OnceLock<ArcSwap<Shared>> = OnceLock::new();
    SHARED.get_or_init(|| ArcSwap::from_pointee(Shared::default()))
}

/// Sets the top-level `env` and `env_passthrough` for children started from now on.
pub fn configure(env: &BTreeMap<String, String>, passthrough: &[String]) {
    shared().store(Arc::new(Shared {
        env: env.clone(),
        passthrough: passthrough.to_vec(),
    }));
}

/// Clears `cmd`'s environment and sets: the allow-list, the daemon's variables matching
/// the top-level patterns and then `extra_passthrough`, then the top-level `env`. The
/// caller adds its own variables afterwards (they win).
pub fn apply(cmd: &mut Command, extra_passthrough: &[String]) {
    cmd.env_clear();
    for key in ENV_ALLOW_LIST {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    let cfg = shared().load();
    let patterns: Vec<&str> = cfg
        .passthrough
        .iter()
        .chain(extra_passthrough)
        .map(String::as_str)
        .collect();
    if !patterns.is_empty() {
        for (name, value) in passed(std::env::vars_os(), &patterns) {
            cmd.env(name, value);
        }
    }
    cmd.envs(&cfg.env);
}

/// The variables of `vars` whose (UTF-8) name matches one of `patterns`.
fn passed(
    vars: impl Iterator<Item = (OsString, OsString)>,
    patterns: &[&str],
) -> Vec<(OsString, OsString)> {
    vars.filter(|(name, _)| {
        name.to_str()
            .is_some_and(|n| patterns.iter().any(|p| glob(p.as_bytes(), n.as_bytes())))
    })
    .collect()
}

/// Whole-string glob match: `*` is any run of bytes, `?` one byte, the rest literal.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was, and the text position it is currently matched up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        let yes = [
            ("HTTPS_PROXY", "HTTPS_PROXY"),
            ("*_PROXY", "HTTP_PROXY"),
            ("*_PROXY", "NO_PROXY"),
            ("NODE_*", "NODE_EXTRA_CA_CERTS"),
            ("GO?ATH", "GOPATH"),
            ("*", "ANY"),
            ("A*B*C", "AxxBxxC"),
        ];
        for (p, t) in yes {
            assert!(glob(p.as_bytes(), t.as_bytes()), "{p} should match {t}");
        }
        let no = [
            ("*_PROXY", "HTTP_PROXY_X"),
            ("HTTPS_PROXY", "https_proxy"),
            ("NODE_*", "XNODE_A"),
            ("GO?ATH", "GOATH"),
            ("A*B*C", "AxxBxx"),
        ];
        for (p, t) in no {
            assert!(
                !glob(p.as_bytes(), t.as_bytes()),
                "{p} should not match {t}"
            );
        }
    }

    #[test]
    fn only_matching_variables_pass() {
        let vars = [
            ("HTTP_PROXY", "h"),
            ("NO_PROXY", "n"),
            ("SECRET_TOKEN", "s"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let got = passed(vars.into_iter(), &["*_PROXY"]);
        assert_eq!(
            got,
            vec![
                ("HTTP_PROXY".into(), "h".into()),
                ("NO_PROXY".into(), "n".into())
            ]
        );
    }
}
