//! The skills of MCP servers that serve the skills extension (`io.modelcontextprotocol/skills`,
//! SEP-2640), read on our client side and served to the host's frontends beside its own
//! skills (proto-docs/skills.md, "Skills of MCP servers").
//!
//! - **Listed, never prefetched.** A server that declares the extension is asked
//!   `skills/list` with its resources (when it connects, after `resources/list_changed`),
//!   bounded like its other lists and kept with them across restarts. An entry that breaks
//!   the extension's rules (rmcp's `Skill::validate`: URI, name, manifest, digests), is not
//!   a `skill://` URI or passes its limits ([`MAX_FILES`], [`MAX_BYTES`]) is left out with
//!   a warning. No file of a skill is read before a frontend loads it.
//! - **Named by origin.** A skill is named like the server's tools, `mcp_<server>_<name>`;
//!   its files are served under `skill://mcp_<server>/` and the server's own URI after its
//!   `skill://` ([`served`]), so the segment before `SKILL.md` stays the front matter's
//!   `name`, as the extension requires, and no URI of the host's own skills (whose names
//!   have no `_`) is ever one of them. The server's own URIs of its skills' files are not
//!   relayed as plain resources (`surface.rs`): those bytes would pass unverified.
//! - **Verified on every read.** A file is served only after the skill's `SKILL.md` is read
//!   and checked: size, then digest against the listed entry, then its front matter parsed
//!   and compared field by field with the entry's; then the file itself against its own
//!   entry. A mismatch is refused ([`Refused`], `-32009`), and nothing more of the skill is
//!   read. A `dynamic` skill has no digests to check: only its front matter is compared.

use base64::Engine as _;
use rmcp::model::{
    PaginatedRequestParams, ReadResourceRequestParams, ResourceContents as McpContents, Skill,
    SkillIntegrityError, SkillResources,
};
use rmcp::service::Peer;
use rmcp::RoleClient;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::listing::{self, Bounds, ListError, Listing};
use super::naming::public_name;
use super::relay::{relay, Serves};
use super::McpManager;
use crate::error::Error;
use crate::protocol::{SkillEntry, SkillFile, SkillSource};

/// The most files one skill may list (the extension's limit).
pub const MAX_FILES: usize = 512;
/// The most bytes one skill's files may add up to (the extension's limit).
pub const MAX_BYTES: u64 = 16 * 1024 * 1024;
const SCHEME: &str = "skill://";
const SKILL_MD: &str = "SKILL.md";

/// One skill of a server, as it listed it, checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listed {
    /// Its catalog name, `mcp_<server>_<name>`.
    pub name: String,
    pub server: String,
    pub skill: Skill,
}

/// The URI the host serves file `uri` (a `skill://` URI) of a skill of `server` under.
pub fn served(server: &str, uri: &str) -> String {
    format!(
        "{SCHEME}mcp_{server}/{}",
        uri.strip_prefix(SCHEME).unwrap_or(uri)
    )
}

/// `(server, the server's own URI)` of a URI [`served`] made; `None` for any other.
fn upstream(uri: &str) -> Option<(&str, String)> {
    let rest = uri.strip_prefix(SCHEME)?.strip_prefix("mcp_")?;
    let (server, path) = rest.split_once('/')?;
    Some((server, format!("{SCHEME}{path}")))
}

impl Listed {
    /// The server's URI of the skill's folder: its `SKILL.md` URI without the file name.
    fn root(&self) -> &str {
        let uri = &self.skill.uri;
        uri.strip_suffix(SKILL_MD).unwrap_or(uri)
    }

    /// The server's URI of the file at `path` in the skill's folder.
    pub fn file_uri(&self, path: &str) -> String {
        format!("{}{path}", self.root())
    }

    /// The URI the host serves the file at `path` in the skill's folder under.
    pub fn served_file(&self, path: &str) -> String {
        served(&self.server, &self.file_uri(path))
    }

    /// Whether the server's URI `uri` is a file of this skill (its folder's).
    pub fn contains(&self, uri: &str) -> bool {
        uri.starts_with(self.root())
    }

    /// The skill as the skills methods list it; with `manifest`, its files too.
    pub fn entry(&self, manifest: bool) -> SkillEntry {
        let frontmatter = match serde_json::to_value(&self.skill.frontmatter) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let listed = serde_json::to_vec(&self.skill).unwrap_or_default();
        SkillEntry {
            name: self.name.clone(),
            description: self.skill.frontmatter.description.clone(),
            path: self.served_file(SKILL_MD),
            source: SkillSource::Mcp,
            server: Some(self.server.clone()),
            etag: rmcp::model::sha256_digest(&listed),
            frontmatter: Some(frontmatter),
            manifest: manifest.then(|| self.files()),
        }
    }

    /// The files of its manifest, by their paths in the skill's folder (none: `dynamic`).
    pub fn files(&self) -> Vec<SkillFile> {
        let SkillResources::Files(files) = &self.skill.resources else {
            return Vec::new();
        };
        let root = self.root();
        files
            .iter()
            .filter_map(|f| {
                Some(SkillFile {
                    path: f.uri.strip_prefix(root)?.to_owned(),
                    size: f.size,
                    digest: Some(f.digest.clone()),
                })
            })
            .collect()
    }

    /// Checks the bytes of the server's file `uri` against its manifest entry.
    fn verify(&self, uri: &str, bytes: &[u8]) -> Result<(), Refused> {
        let SkillResources::Files(files) = &self.skill.resources else {
            return Ok(());
        };
        match files.iter().find(|f| f.uri == uri) {
            Some(entry) => Ok(entry.verify(bytes)?),
            None => Err(Refused::Unlisted(uri.to_owned())),
        }
    }

    /// Checks the bytes of `SKILL.md`: size and digest, then its front matter, every field
    /// of it and of the listed entry's, for equality.
    fn verify_skill_md(&self, bytes: &[u8]) -> Result<(), Refused> {
        let uri = &self.skill.uri;
        self.verify(uri, bytes)?;
        let differs = |why: String| Refused::Frontmatter {
            uri: uri.clone(),
            why,
        };
        let text = std::str::from_utf8(bytes).map_err(|_| differs("is not UTF-8".into()))?;
        let (front, _) = crate::front_matter::split(text)
            .ok_or_else(|| differs("is missing (no opening and closing `---`)".into()))?;
        let Value::Object(read) = crate::front_matter::parse(front).map_err(differs)? else {
            return Err(differs("is not a mapping".into()));
        };
        let listed = match serde_json::to_value(&self.skill.frontmatter) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        match read
            .keys()
            .chain(listed.keys())
            .find(|k| read.get(*k) != listed.get(*k))
        {
            Some(field) => Err(differs(format!(
                "field `{field}` is not what skills/list said"
            ))),
            None => Ok(()),
        }
    }
}

/// Why a file of a server's skill is not served.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("{0}")]
    Integrity(#[from] SkillIntegrityError),
    #[error("{uri}: the front matter {why}")]
    Frontmatter { uri: String, why: String },
    #[error("{0} is not in the skill's manifest")]
    Unlisted(String),
}

/// Every skill `server` lists, checked (none when it does not declare the extension).
pub async fn list(
    server: &str,
    prefixed: bool,
    peer: &Peer<RoleClient>,
    bounds: Bounds,
) -> Result<Vec<Listed>, ListError> {
    let declared = peer.peer_info();
    if !declared.is_some_and(|i| i.capabilities.supports_skills()) {
        return Ok(Vec::new());
    }
    let skills = listing::list_pages(Listing::Skills, bounds, |cursor| async move {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let listed = peer.list_skills(Some(params)).await?;
        Ok((listed.skills, listed.next_cursor))
    })
    .await?;
    let admitted = skills.into_iter().filter_map(|skill| {
        admit(server, prefixed, skill)
            .map_err(|e| tracing::warn!(%server, error = %e, "a skill was left out"))
            .ok()
    });
    Ok(admitted.collect())
}

/// `skill` as one of ours, or why it breaks the extension's rules or limits.
fn admit(server: &str, prefixed: bool, skill: Skill) -> Result<Listed, String> {
    skill.validate().map_err(|e| e.to_string())?;
    if !skill.uri.starts_with(SCHEME) {
        return Err(format!("{} is not a skill:// URI", skill.uri));
    }
    if let SkillResources::Files(files) = &skill.resources {
        let bytes = files.iter().fold(0u64, |n, f| n.saturating_add(f.size));
        if files.len() > MAX_FILES || bytes > MAX_BYTES {
            return Err(format!(
                "{} lists {} files of {bytes} bytes, over the extension's {MAX_FILES} files or {MAX_BYTES} bytes",
                skill.uri,
                files.len()
            ));
        }
    }
    Ok(Listed {
        name: public_name(server, prefixed, skill.name()),
        server: server.to_owned(),
        skill,
    })
}

impl McpManager {
    /// The servers' skills a view is served, in config order.
    pub fn skills(&self, serves: Serves<'_>) -> Vec<Listed> {
        let catalog = self.surface();
        let visible = catalog
            .skills
            .values()
            .filter(|s| serves(&s.name, &s.server));
        visible.cloned().collect()
    }

    /// A server's skill by its catalog name, when the view is served it.
    pub fn skill(&self, name: &str, serves: Serves<'_>) -> Option<Listed> {
        let catalog = self.surface();
        let found = catalog.skills.get(name).filter(|s| serves(name, &s.server));
        found.cloned()
    }

    /// The server's skill whose file a URI the host serves ([`served`]) names, and the
    /// server's own URI of that file; `None`: no such file of a skill the view is served.
    pub fn skill_of_uri(&self, uri: &str, serves: Serves<'_>) -> Option<(Listed, String)> {
        let (server, own) = upstream(uri)?;
        let catalog = self.surface();
        let skill = catalog
            .skills
            .values()
            .find(|s| s.server == server && s.contains(&own))
            .filter(|s| serves(&s.name, &s.server))?;
        Some((skill.clone(), own))
    }

    /// The bytes of file `uri` (the server's own URI) of `skill`, verified, after its
    /// `SKILL.md` verified ([`Refused`] otherwise, and nothing more read).
    pub async fn read_skill(&self, skill: &Listed, uri: &str) -> Result<Vec<u8>, Error> {
        let refused = |e: Refused| Error::SkillRefused(format!("skill {}: {e}", skill.name));
        let is_listed = match &skill.skill.resources {
            SkillResources::Files(files) => files.iter().any(|f| f.uri == uri),
            _ => skill.contains(uri),
        };
        if !is_listed {
            return Err(Error::ResourceNotFound(format!(
                "{}: no such file of skill {}",
                served(&skill.server, uri),
                skill.name
            )));
        }
        let skill_md = self.fetch(&skill.server, &skill.skill.uri).await?;
        skill.verify_skill_md(&skill_md).map_err(refused)?;
        if uri == skill.skill.uri {
            return Ok(skill_md);
        }
        let bytes = self.fetch(&skill.server, uri).await?;
        skill.verify(uri, &bytes).map_err(refused)?;
        Ok(bytes)
    }

    /// The bytes `resources/read` of `uri` answers on `server` (text as UTF-8, a blob
    /// decoded), under the server's `timeout_ms`.
    async fn fetch(&self, server: &str, uri: &str) -> Result<Vec<u8>, Error> {
        let (server, peer, _in_use) = self.owner(server).await?;
        let read = peer.read_resource(ReadResourceRequestParams::new(uri));
        let answer = relay(&server, read).await?;
        match answer.contents.into_iter().next() {
            Some(McpContents::TextResourceContents { text, .. }) => Ok(text.into_bytes()),
            Some(McpContents::BlobResourceContents { blob, .. }) => {
                base64::engine::general_purpose::STANDARD
                    .decode(blob)
                    .map_err(|e| Error::SkillRefused(format!("{uri}: its blob: {e}")))
            }
            _ => Err(Error::SkillRefused(format!(
                "MCP server '{}' answered no contents for {uri}",
                server.name()
            ))),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use rmcp::model::{SkillFrontmatter, SkillResource};

    const MD: &str = "---\nname: pdf\ndescription: PDFs\n---\nbody\n";

    fn listed(text: &str) -> Listed {
        let uri = "skill://pdf/SKILL.md";
        let files = vec![SkillResource::from_bytes(uri, text.as_bytes())];
        let skill = Skill::new(
            uri,
            SkillFrontmatter::new("pdf", "PDFs"),
            SkillResources::Files(files),
        );
        admit("srv", true, skill).unwrap()
    }

    #[test]
    fn uris_name_their_server_and_map_back() {
        let s = listed(MD);
        assert_eq!(s.name, "mcp_srv_pdf");
        let entry = s.entry(true);
        assert_eq!(entry.path, "skill://mcp_srv/pdf/SKILL.md");
        assert_eq!(entry.manifest.unwrap()[0].path, "SKILL.md");
        assert_eq!(
            upstream("skill://mcp_srv/pdf/a/b.md"),
            Some(("srv", "skill://pdf/a/b.md".to_owned()))
        );
        assert_eq!(upstream("skill://pdf/SKILL.md"), None);
    }

    #[test]
    fn skill_md_is_checked_by_size_digest_and_front_matter() {
        assert!(listed(MD).verify_skill_md(MD.as_bytes()).is_ok());
        let tampered = MD.replace("body", "evil");
        let e = listed(MD).verify_skill_md(tampered.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("digest"), "{e}");
        let e = listed(MD).verify_skill_md(b"short").unwrap_err();
        assert!(e.to_string().contains("bytes"), "{e}");
        // Digest and size right (the entry lists these bytes), the front matter not.
        let other = MD.replace("PDFs", "Exfiltrate");
        let e = listed(&other)
            .verify_skill_md(other.as_bytes())
            .unwrap_err();
        assert!(e.to_string().contains("field `description`"), "{e}");
    }
}
