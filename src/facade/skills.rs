//! The MCP skills extension (`io.modelcontextprotocol/skills`, SEP-2640): `skills/list`
//! and `skills/get`, answered from the host's `list_skills` (with manifests) and
//! `get_skill` in this connection's session. Declaring the extension commits the server to
//! both methods for every client (the suite's `sep-2640-capability-commits-to-methods`),
//! whether or not the client declared it too. rmcp routes the two methods to
//! [`rmcp::ServerHandler`] once `get_info` declares the extension, and checks every entry
//! it returns against the extension's rules. A skill's files are its `skill://`
//! resources, read with `resources/read` like any other. An MCP server's skill is served
//! under the URI the host gives it (`skill://mcp_<server>/…`, its entry's `path`), with
//! its front matter as its server listed it, so its `name` stays the last segment.

use rmcp::model::{
    GetSkillRequestParams, GetSkillResult, ListSkillsResult, PaginatedRequestParams, Skill,
    SkillFrontmatter, SkillResource, SkillResources,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use super::{era, host_error, surface::page, Facade};
use crate::protocol::{self, method, SkillSource};
use crate::skills::{skill::SKILL_FILE, uri};

/// One skill as the extension lists it: the front matter verbatim, and every file as a
/// `skill://` URI with its digest and size (a file without a digest, over the read cap,
/// cannot be read through `resources/read` either and is left out).
fn skill(entry: &protocol::SkillEntry, files: &[protocol::SkillFile]) -> Skill {
    let mut extra = entry.frontmatter.clone().unwrap_or_default();
    let listed_name = extra.remove("name");
    let name = match (entry.source, &listed_name) {
        (SkillSource::Mcp, Some(Value::String(name))) => name,
        _ => &entry.name,
    };
    let mut frontmatter = SkillFrontmatter::new(name, &entry.description);
    extra.remove("description");
    frontmatter.extra = extra;
    let uri_of = |path: &str| match entry.source {
        SkillSource::Mcp => format!("{}{path}", entry.path.trim_end_matches(SKILL_FILE)),
        _ => uri::of(&entry.name, path),
    };
    let files = files.iter().filter_map(|f| {
        let digest = f.digest.as_ref()?;
        Some(SkillResource::new(uri_of(&f.path), digest, f.size))
    });
    Skill::new(
        uri_of(SKILL_FILE),
        frontmatter,
        SkillResources::Files(files.collect()),
    )
}

impl Facade {
    /// Every skill this connection's session is served, with its manifest.
    async fn skill_entries(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<protocol::ListSkillsResult, ErrorData> {
        self.ready(ctx, false).await?;
        let params = protocol::ListSkillsParams {
            session_id: self.session_id(),
            manifest: true,
        };
        self.client()
            .await?
            .call(method::LIST_SKILLS, &params)
            .await
            .map_err(host_error)
    }

    pub(super) async fn skills_page(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ListSkillsResult, ErrorData> {
        let list = self.skill_entries(ctx).await?;
        let skills: Vec<Skill> = list
            .skills
            .iter()
            .map(|s| skill(s, s.manifest.as_deref().unwrap_or_default()))
            .collect();
        let (items, next) = page(&skills, request.and_then(|r| r.cursor), self.page_size)?;
        let mut result = ListSkillsResult::with_all_items(items);
        result.next_cursor = next;
        era::stamp_cached(ctx, &mut result, era::LIST_TTL_MS, self.shaped());
        Ok(result)
    }

    pub(super) async fn skill(
        &self,
        request: GetSkillRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<GetSkillResult, ErrorData> {
        self.ready(ctx, false).await?;
        let unknown = || ErrorData::invalid_params(format!("no skill at {}", request.uri), None);
        let name = match uri::parse(&request.uri) {
            Some((name, path)) if path == SKILL_FILE => name.to_owned(),
            // An MCP server's skill: by the URI the listing gives it.
            Some(_) => {
                let listed = self.skill_entries(ctx).await?;
                let found = listed
                    .skills
                    .iter()
                    .find(|s| s.source == SkillSource::Mcp && s.path == request.uri);
                let found = found.ok_or_else(unknown)?;
                let files = found.manifest.as_deref().unwrap_or_default();
                let mut result = GetSkillResult::new(skill(found, files));
                era::stamp_cached(ctx, &mut result, era::LIST_TTL_MS, self.shaped());
                return Ok(result);
            }
            None => return Err(unknown()),
        };
        let params = protocol::SkillNameParams {
            name,
            session_id: self.session_id(),
            manifest: true,
        };
        let found: protocol::GetSkillResult = self
            .client()
            .await?
            .call(method::GET_SKILL, &params)
            .await
            .map_err(host_error)?;
        let mut result = GetSkillResult::new(skill(&found.skill, &found.files));
        era::stamp_cached(ctx, &mut result, era::LIST_TTL_MS, self.shaped());
        Ok(result)
    }
}
