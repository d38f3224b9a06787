//! Profiles: the one rule of what a named profile serves. Listing, search and calls under
//! a profile (and the facade's prompt and resource lists) all ask
//! [`ProfileView::allows_tool`] or [`ProfileView::allows_item`] of [`Config::view`], so the
//! views cannot drift apart.

use std::collections::BTreeMap;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use super::{Config, Profile};
use crate::protocol::ApprovalClass;

/// What one frontend is served, compiled once per listing or call: everything (no
/// profile), what a profile selects, or nothing (its profile is gone from config.json, so
/// it fails closed rather than open).
pub enum ProfileView<'a> {
    /// Everything; `code_mode`: whether the code tool is served (config `code_mode.enabled`),
    /// `code_only`: whether it alone is listed (`code_mode.only`).
    All {
        code_mode: bool,
        code_only: bool,
    },
    Only(Matcher<'a>),
    Nothing,
}

/// A profile with its name patterns compiled.
pub struct Matcher<'a> {
    profile: &'a Profile,
    tools: GlobSet,
    exclude: GlobSet,
    /// Whether the code tool is served (the profile's `code_mode`, else the config's).
    code_mode: bool,
    /// Whether the code tools alone are listed (`"only"`, else `code_mode.only`).
    code_only: bool,
}

impl Profile {
    pub fn matcher(&self) -> Matcher<'_> {
        Matcher {
            profile: self,
            tools: name_patterns(&self.tools),
            exclude: name_patterns(&self.exclude),
            code_mode: self.code_mode.is_some_and(|c| c.enabled()),
            code_only: self.code_mode.and_then(|c| c.only()).unwrap_or(false),
        }
    }
}

impl ProfileView<'_> {
    /// Whether the tool `name` (its public name) of MCP server `server` (`None` for
    /// built-in and custom tools), whose approval class in force is `approval`, is served.
    pub fn allows_tool(
        &self,
        name: &str,
        server: Option<&str>,
        approval: Option<ApprovalClass>,
    ) -> bool {
        match self {
            ProfileView::All { .. } => true,
            ProfileView::Nothing => false,
            ProfileView::Only(m) => {
                let classes = &m.profile.approval;
                (classes.is_empty() || approval.is_some_and(|c| classes.contains(&c)))
                    && m.selects(name, server)
            }
        }
    }

    /// Whether a prompt or resource `name` (a prompt's public name, a resource's URI) of
    /// `server` is served: selected by `servers` or `tools`, not `exclude`d (approval
    /// classes are a property of tools only).
    pub fn allows_item(&self, name: &str, server: Option<&str>) -> bool {
        match self {
            ProfileView::All { .. } => true,
            ProfileView::Nothing => false,
            ProfileView::Only(m) => m.selects(name, server),
        }
    }

    /// Whether the code tool (proto-docs/code-mode.md) is served.
    pub fn code_mode(&self) -> bool {
        match self {
            ProfileView::All { code_mode, .. } => *code_mode,
            ProfileView::Nothing => false,
            ProfileView::Only(m) => m.code_mode,
        }
    }

    /// Whether the code tools are served and nothing else is listed (`code_mode.only`): the
    /// other tools stay served, callable from programs and by name.
    pub fn code_only(&self) -> bool {
        self.code_mode()
            && match self {
                ProfileView::All { code_only, .. } => *code_only,
                ProfileView::Nothing => false,
                ProfileView::Only(m) => m.code_only,
            }
    }
}

impl Matcher<'_> {
    fn selects(&self, name: &str, server: Option<&str>) -> bool {
        let p = self.profile;
        let everything = p.servers.is_empty() && p.tools.is_empty();
        let selected = everything
            || server.is_some_and(|s| p.servers.iter().any(|x| x == s))
            || self.tools.is_match(name);
        selected && !self.exclude.is_match(name)
    }
}

/// No profile by that name in config.json; the message lists the ones there are.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("unknown profile '{name}'; config.json {defined}")]
pub struct UnknownProfile {
    pub name: String,
    defined: String,
}

impl Config {
    /// What a frontend under `profile` is served now (profile edits apply at once).
    pub fn view(&self, profile: Option<&str>) -> ProfileView<'_> {
        match profile {
            None => ProfileView::All {
                code_mode: self.code_mode.enabled,
                code_only: self.code_mode.only,
            },
            Some(name) => self.profiles.get(name).map_or(ProfileView::Nothing, |p| {
                let mut m = p.matcher();
                m.code_mode = p.code_mode.map_or(self.code_mode.enabled, |c| c.enabled());
                m.code_only = p
                    .code_mode
                    .and_then(|c| c.only())
                    .unwrap_or(self.code_mode.only);
                ProfileView::Only(m)
            }),
        }
    }

    /// What a session is served: its profile's view, with code mode as the session's meta
    /// `{"code_mode": {"enabled": …, "only": …}}` says, over its profile and config (like
    /// the checkpoint switch). The code tools must be registered for it to turn them on
    /// ([`Config::code_mode_anywhere`]).
    pub fn session_view(
        &self,
        profile: Option<&str>,
        meta: &serde_json::Map<String, serde_json::Value>,
    ) -> ProfileView<'_> {
        let mut view = self.view(profile);
        let switch = |key: &str| {
            meta.get("code_mode")
                .and_then(|c| c.get(key))
                .and_then(serde_json::Value::as_bool)
        };
        let (mode, only) = match &mut view {
            ProfileView::All {
                code_mode,
                code_only,
            } => (code_mode, code_only),
            ProfileView::Only(m) => (&mut m.code_mode, &mut m.code_only),
            ProfileView::Nothing => return view,
        };
        if let Some(on) = switch("enabled") {
            *mode = on;
        }
        if let Some(on) = switch("only") {
            *only = on;
        }
        view
    }

    /// Whether any view serves the code tool: only then is it registered at all, so with
    /// code mode off no listing, search or count has it to filter out.
    pub fn code_mode_anywhere(&self) -> bool {
        self.code_mode.enabled
            || self
                .profiles
                .values()
                .any(|p| p.code_mode.is_some_and(|c| c.enabled()))
    }

    /// Whether some view has checkpoints on (config, or a profile): the checkpoint tools are
    /// registered then, like the code tools with code mode.
    pub fn checkpoint_anywhere(&self) -> bool {
        self.checkpoint.enabled
            || self
                .profiles
                .values()
                .any(|p| p.checkpoint.is_some_and(|c| c.enabled))
    }

    /// The profile `name`, or why there is none.
    pub fn profile(&self, name: &str) -> Result<&Profile, UnknownProfile> {
        self.profiles.get(name).ok_or_else(|| UnknownProfile {
            name: name.to_owned(),
            defined: defined(&self.profiles),
        })
    }
}

fn defined(profiles: &BTreeMap<String, Profile>) -> String {
    if profiles.is_empty() {
        "defines no profiles".to_owned()
    } else {
        let names: Vec<&str> = profiles.keys().map(String::as_str).collect();
        format!("defines: {}", names.join(", "))
    }
}

/// How a profile's name pattern is read: a glob over the whole name, case-sensitive (the
/// same reading as `env_passthrough`). Config validation refuses a pattern that does not
/// compile, so one that gets here anyway only matches nothing.
pub(crate) fn name_glob(pattern: &str) -> Result<globset::Glob, globset::Error> {
    GlobBuilder::new(pattern).literal_separator(false).build()
}

fn name_patterns(patterns: &[String]) -> GlobSet {
    if patterns.is_empty() {
        return GlobSet::empty();
    }
    let mut set = GlobSetBuilder::new();
    for g in patterns.iter().filter_map(|p| name_glob(p).ok()) {
        set.add(g);
    }
    set.build().unwrap_or_else(|_| GlobSet::empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(v: serde_json::Value) -> Profile {
        serde_json::from_value(v).unwrap_or_default()
    }

    #[test]
    fn an_empty_profile_serves_everything_and_a_missing_one_nothing() {
        let p = Profile::default();
        let v = ProfileView::Only(p.matcher());
        assert!(v.allows_tool("bash", None, None));
        assert!(v.allows_item("mcp_git_status", Some("git")));
        let c = Config::default();
        assert!(c.view(None).allows_tool("bash", None, None));
        assert!(!c.view(Some("gone")).allows_tool("bash", None, None));
    }

    #[test]
    fn servers_and_tools_select_exclude_and_approval_restrict() {
        let p = profile(serde_json::json!({
            "servers": ["git"], "tools": ["read_*", "grep"],
            "exclude": ["mcp_git_push"], "approval": ["read_only", "write"],
        }));
        let p = ProfileView::Only(p.matcher());
        let ro = Some(ApprovalClass::ReadOnly);
        assert!(p.allows_tool("mcp_git_status", Some("git"), ro));
        assert!(p.allows_tool("read_file", None, ro));
        assert!(!p.allows_tool("mcp_gh_issue", Some("gh"), ro));
        assert!(!p.allows_tool("mcp_git_push", Some("git"), ro));
        assert!(!p.allows_tool("read_file", None, Some(ApprovalClass::Command)));
        assert!(!p.allows_tool("read_file", None, None));
        // Prompts and resources have no class.
        assert!(p.allows_item("mcp_git_commit_message", Some("git")));
    }

    #[test]
    fn an_unknown_profile_names_the_defined_ones() {
        let mut c = Config::default();
        assert_eq!(
            c.profile("x").unwrap_err().to_string(),
            "unknown profile 'x'; config.json defines no profiles"
        );
        c.profiles.insert("editor".into(), Profile::default());
        c.profiles.insert("cli".into(), Profile::default());
        assert_eq!(
            c.profile("x").unwrap_err().to_string(),
            "unknown profile 'x'; config.json defines: cli, editor"
        );
    }
}
