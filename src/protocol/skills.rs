//! Agent Skills on the socket (proto-docs/skills.md): `list_skills`, `get_skill`,
//! `read_skill_file` and the `skills_changed` notification.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Where a skill was found, in search order (the first definition of a name wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SkillSource {
    /// A folder of config `skills.paths`.
    Config,
    /// `<workspace>/.toolhost/skills`.
    WorkspaceToolhost,
    /// `<workspace>/.agents/skills` (Codex and the cross-client convention).
    WorkspaceAgents,
    /// `<workspace>/.claude/skills` (Claude Code).
    WorkspaceClaude,
    /// `$XDG_CONFIG_HOME/toolhost/skills`.
    UserToolhost,
    /// `~/.agents/skills`.
    UserAgents,
    /// `~/.claude/skills`.
    UserClaude,
    /// An MCP server that serves the skills extension (its name is in `server`).
    Mcp,
}

impl SkillSource {
    /// A workspace's folder (what the workspace-trust gate judges), not the user's own.
    pub fn is_workspace(self) -> bool {
        matches!(
            self,
            SkillSource::WorkspaceToolhost
                | SkillSource::WorkspaceAgents
                | SkillSource::WorkspaceClaude
        )
    }
}

/// One skill as listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SkillEntry {
    /// A skill of an MCP server is named like its tools: `mcp_<server>_<name>`.
    pub name: String,
    pub description: String,
    /// The skill's folder; for a skill of an MCP server, the `skill://mcp_<server>/…/SKILL.md`
    /// URI the host serves its instructions under.
    pub path: String,
    pub source: SkillSource,
    /// The MCP server the skill comes from (`source: mcp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// `sha256:` of its `SKILL.md` and file list; changes with any edit.
    pub etag: String,
    /// The front matter as written, every field (YAML as JSON): `get_skill`, and
    /// `list_skills` with `manifest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontmatter: Option<Map<String, Value>>,
    /// Every file with its `sha256:` digest (`list_skills` with `manifest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<Vec<SkillFile>>,
}

/// `list_skills`: whose skills, and how much of each.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSkillsParams {
    /// List the skills this session sees (its workspace's own come first); by default the
    /// daemon workspace's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Add each skill's `frontmatter` and `manifest` (what the MCP skills extension
    /// serves); the digests are computed once per version of a skill.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manifest: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListSkillsResult {
    /// In search order.
    pub skills: Vec<SkillEntry>,
    /// Changes whenever the list or any skill changes.
    pub etag: String,
}

/// A file of a skill, relative to its folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SkillFile {
    pub path: String,
    pub size: u64,
    /// `sha256:` and 64 lowercase hex digits of the file's bytes (a manifest: `get_skill`
    /// and `list_skills` with `manifest`). A file over `read_skill_file`'s cap has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillNameParams {
    #[schemars(length(min = 1))]
    pub name: String,
    /// Look the skill up among those this session sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Give each file its `digest` (the skills extension's manifest).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manifest: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetSkillResult {
    #[serde(flatten)]
    pub skill: SkillEntry,
    /// The whole `SKILL.md`, front matter included.
    pub text: String,
    /// Every file of the skill, `SKILL.md` included, sorted by path.
    pub files: Vec<SkillFile>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadSkillFileParams {
    #[schemars(length(min = 1))]
    pub name: String,
    /// Relative to the skill's folder (e.g. `scripts/run.sh`); it may not lead out of it.
    #[schemars(length(min = 1))]
    pub path: String,
    /// Look the skill up among those this session sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReadSkillFileResult {
    pub name: String,
    pub path: String,
    pub size: u64,
    /// The content, when it is UTF-8 text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The content in standard base64, when it is not text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
}

/// Sent once per change of the skill set (a skill added, edited or removed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SkillsChanged {
    /// The new [`ListSkillsResult::etag`] of the daemon workspace's skills.
    pub etag: String,
    pub count: usize,
    /// The session workspaces whose own skills changed (their sessions' `list_skills`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workspaces: Vec<String>,
}
