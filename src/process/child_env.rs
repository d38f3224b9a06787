//! The environment every child starts with: the allow-list, then the daemon variables that
//! config `env_passthrough` names (names or glob patterns), then config `env`.
//!
//! The top-level settings are a [`Policy`] per daemon, held by its
//! [`Processes`](super::Processes) and replaced on every reload; every spawn — `bash`,
//! custom tools, stdio MCP servers — builds its environment through it. A stdio server adds
//! its own patterns on top. The patterns arrive compiled: config owns their syntax and
//! checks them when it loads (`config::env_patterns`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use globset::GlobSet;
use tokio::process::Command;

use super::ENV_ALLOW_LIST;

/// The top-level `env` and `env_passthrough` of one daemon's config.
#[derive(Debug, Default)]
pub struct Policy {
    env: BTreeMap<String, String>,
    passthrough: GlobSet,
}

impl Policy {
    pub fn new(env: BTreeMap<String, String>, passthrough: GlobSet) -> Policy {
        Policy { env, passthrough }
    }

    /// Clears `cmd`'s environment and sets [`Policy::vars`]. The caller adds its own
    /// variables afterwards (they win).
    pub(super) fn apply(&self, cmd: &mut Command, extra_passthrough: &GlobSet) {
        cmd.env_clear();
        cmd.envs(self.vars(extra_passthrough));
    }

    /// A child's environment before its own variables, in order (a later one wins): the
    /// allow-list, the daemon's variables matching the top-level patterns or
    /// `extra_passthrough`, then the top-level `env`.
    pub(super) fn vars(&self, extra_passthrough: &GlobSet) -> Vec<(OsString, OsString)> {
        let mut vars: Vec<(OsString, OsString)> = ENV_ALLOW_LIST
            .iter()
            .filter_map(|key| Some((OsString::from(key), std::env::var_os(key)?)))
            .collect();
        let sets = [&self.passthrough, extra_passthrough];
        if sets.iter().any(|s| !s.is_empty()) {
            vars.extend(passed(std::env::vars_os(), &sets));
        }
        vars.extend(self.env.iter().map(|(k, v)| (k.into(), v.into())));
        vars
    }

    /// The whole environment of a child started without a `Command`: [`Policy::vars`],
    /// then `own` (a later variable replaces an earlier one of the same name).
    pub(super) fn environment(
        &self,
        own: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        let vars = self.vars(&GlobSet::empty()).into_iter().chain(own);
        vars.collect::<BTreeMap<_, _>>().into_iter().collect()
    }
}

/// The variables of `vars` whose name matches a pattern of one of `sets`.
fn passed(
    vars: impl Iterator<Item = (OsString, OsString)>,
    sets: &[&GlobSet],
) -> Vec<(OsString, OsString)> {
    vars.filter(|(name, _)| sets.iter().any(|s| s.is_match(Path::new(name))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(patterns: &[&str]) -> GlobSet {
        let mut b = globset::GlobSetBuilder::new();
        for p in patterns {
            b.add(globset::Glob::new(p).unwrap());
        }
        b.build().unwrap()
    }

    #[test]
    fn only_matching_variables_pass() {
        let vars = [
            ("HTTP_PROXY", "h"),
            ("NO_PROXY", "n"),
            ("SECRET_TOKEN", "s"),
            ("GOPATH", "g"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let got = passed(vars.into_iter(), &[&set(&["*_PROXY"]), &set(&["GO?ATH"])]);
        assert_eq!(
            got,
            vec![
                ("HTTP_PROXY".into(), "h".into()),
                ("NO_PROXY".into(), "n".into()),
                ("GOPATH".into(), "g".into())
            ]
        );
    }
}
