//! The skills methods (proto-docs/skills.md): every answer reads a catalog in force,
//! built when the folders last changed — the daemon workspace's, or the one of the
//! session's workspace named by `session_id`; only file reads (and a manifest's first
//! digests) touch the disk. The skills of MCP servers (`mcp::skills`) follow the host's
//! own, in the caller's view like their other prompts and resources; their files are read
//! from their servers, verified. Skills as MCP resources (`skill://`) are read here too
//! ([`read_resource`], for `surface.rs`).

use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use serde::Serialize;
use serde_json::value::RawValue;

use super::surface::View;
use super::{Api, Error, Sink};
use crate::host::Host;
use crate::mcp::skills::Listed;
use crate::mcp::surface::Event;
use crate::protocol::*;
use crate::rpc::subscription;
use crate::skills::skill::SKILL_FILE;
use crate::skills::{catalog, uri, Catalog, Skill};

/// A `list_skills` answer, written as the catalog serialised it.
struct Serialised(Arc<Catalog>, fn(&Catalog) -> &RawValue);

/// A `list_skills` answer: the host's own as serialised, or with the MCP servers' after.
#[derive(Serialize)]
#[serde(untagged)]
enum Listing {
    Own(Serialised),
    With(ListSkillsResult),
}

/// The MCP servers' skills the caller is served whose names none of `own` has.
async fn upstream(
    host: &Host,
    session_id: Option<&str>,
    own: &Catalog,
) -> Result<Vec<Listed>, Error> {
    let view = View::of(host, None, session_id.map(str::to_owned)).await?;
    let serves = view.serves();
    Ok(unshadowed(host, &serves, own))
}

/// The MCP servers' skills `serves` lets through whose names none of `own` has (the host's
/// own skill wins a name).
fn unshadowed(
    host: &Host,
    serves: &(dyn Fn(&str, &str) -> bool + Sync),
    own: &Catalog,
) -> Vec<Listed> {
    let mut skills = host.mcp().skills(serves);
    skills.retain(|s| own.get(&s.name).is_none());
    skills
}

/// An MCP server's skill by name, unless the caller's catalog has one of that name.
async fn upstream_named(
    host: &Host,
    session_id: Option<&str>,
    own: &Catalog,
    name: &str,
) -> Result<Listed, Error> {
    let mut skills = upstream(host, session_id, own).await?;
    skills.retain(|s| s.name == name);
    skills
        .pop()
        .ok_or_else(|| Error::InvalidParams(format!("no skill named '{name}'")))
}

/// The etag of a listing of the host's own skills (etag `own`) followed by `upstream`.
fn with_upstream_etag(own: &str, upstream: &[Listed]) -> String {
    if upstream.is_empty() {
        return own.to_owned();
    }
    let mut etags = own.to_owned();
    for s in upstream {
        etags.push_str(&s.entry(false).etag);
    }
    crate::skills::skill::sha256(etags.as_bytes())
}

/// `skills_changed`: a change of the host's own skills, or of an MCP server's, with the
/// etag and count of the daemon workspace's `list_skills` (its MCP servers' skills too).
fn skills_changes(host: &Host) -> subscription::Stream {
    let mut own = host.skills().subscribe();
    let mut servers = host.mcp().surface_events();
    let host = host.clone();
    subscription::stream(move |sink: Sink| async move {
        let now = |workspaces: Vec<String>| {
            let catalog = host.skills().catalog();
            let config = host.config();
            let view = config.view(None);
            let upstream = unshadowed(
                &host,
                &|name, server| view.allows_item(name, Some(server)),
                &catalog,
            );
            SkillsChanged {
                etag: with_upstream_etag(catalog.etag(), &upstream),
                count: catalog.len() + upstream.len(),
                workspaces,
            }
        };
        tokio::join!(
            subscription::relay(&mut own, &sink, "skills", |c| Some(now(c.workspaces))),
            subscription::relay(&mut servers, &sink, "MCP surface", |e| match e {
                Event::Skills => Some(now(Vec::new())),
                _ => None,
            }),
        );
    })
}

impl Serialize for Serialised {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (self.1)(&self.0).serialize(s)
    }
}

/// The catalog the caller sees: its session's workspace's, else the daemon workspace's.
pub(super) async fn catalog_for(
    host: &Host,
    session_id: Option<&str>,
) -> Result<Arc<Catalog>, Error> {
    Ok(match session_id {
        None => host.skills().catalog(),
        Some(id) => {
            let session = host.sessions().get(id).await?;
            host.skills().catalog_in(Path::new(&session.workspace))
        }
    })
}

fn skill(catalog: &Catalog, name: &str) -> Result<Arc<Skill>, Error> {
    catalog
        .get(name)
        .cloned()
        .ok_or_else(|| Error::InvalidParams(format!("no skill named '{name}'")))
}

/// Runs `f` on the blocking pool (it reads files).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Error> {
    tokio::task::spawn_blocking(f).await.map_err(Error::server)
}

/// One file of `s`, through [`Skill::read`]: confined to the skill's folder and capped.
async fn read(s: Arc<Skill>, rel: String) -> Result<Vec<u8>, Error> {
    blocking(move || {
        s.read(&rel)
            .map_err(|e| Error::InvalidParams(format!("{rel} {e}")))
    })
    .await?
}

/// `read_resource` of a `skill://` URI the caller sees (`Ok(None)`: not a skill's, the
/// MCP servers' to answer).
pub(super) async fn read_resource(
    host: &Host,
    resource: &str,
    session_id: Option<&str>,
    serves: impl Fn(&str, &str) -> bool + Sync,
) -> Result<Option<ReadResourceResult>, Error> {
    let Some((name, rel)) = uri::parse(resource) else {
        return Ok(None);
    };
    if let Some((skill, own)) = host.mcp().skill_of_uri(resource, &serves) {
        let bytes = host.mcp().read_skill(&skill, &own).await?;
        return Ok(Some(resource_result(resource, &rel, bytes)));
    }
    let catalog = catalog_for(host, session_id).await?;
    let Some(s) = catalog.get(name).filter(|_| serves(resource, uri::SERVER)) else {
        return Ok(None);
    };
    let listed = s.files.iter().any(|f| f.path == rel);
    let bytes = match listed {
        true => read(s.clone(), rel.clone()).await,
        false => Err(Error::InvalidParams(format!("no file {rel}"))),
    }
    .map_err(|e| Error::ResourceNotFound(format!("resource {resource}: {e}")))?;
    Ok(Some(resource_result(resource, &rel, bytes)))
}

/// A skill's file `rel`, read, as `resource`.
fn resource_result(resource: &str, rel: &str, bytes: Vec<u8>) -> ReadResourceResult {
    let (text, blob) = text_or_base64(bytes);
    ReadResourceResult {
        contents: vec![ResourceContents {
            uri: resource.to_owned(),
            mime_type: uri::mime_type(rel).map(str::to_owned),
            text,
            blob,
            meta: None,
        }],
        input_required: None,
    }
}

/// The skills of the caller's catalog as resources, for `list_resources`.
pub(super) async fn resources(
    host: &Host,
    session_id: Option<&str>,
    serves: impl Fn(&str, &str) -> bool + Sync,
) -> Result<Vec<ResourceEntry>, Error> {
    let catalog = catalog_for(host, session_id).await?;
    let own = catalog.skills().iter().flat_map(|s| uri::resources(s));
    let mut resources: Vec<ResourceEntry> = own.filter(|r| serves(&r.uri, &r.server)).collect();
    let theirs = host.mcp().skills(&serves);
    let theirs = theirs.iter().filter(|s| catalog.get(&s.name).is_none());
    resources.extend(theirs.flat_map(upstream_resources));
    Ok(resources)
}

/// The files of an MCP server's skill as resources under the URIs the host serves them
/// at, `SKILL.md` first, as the host's own skills are listed.
fn upstream_resources(s: &Listed) -> Vec<ResourceEntry> {
    let mut files = s.files();
    files.sort_by_key(|f| f.path != SKILL_FILE);
    let entry = |f: SkillFile| {
        let is_main = f.path == SKILL_FILE;
        ResourceEntry {
            uri: s.served_file(&f.path),
            name: match is_main {
                true => s.name.clone(),
                false => format!("{}/{}", s.name, f.path),
            },
            title: None,
            description: is_main.then(|| s.skill.frontmatter.description.clone()),
            mime_type: uri::mime_type(&f.path).map(str::to_owned),
            size: Some(f.size),
            annotations: None,
            server: s.server.clone(),
        }
    };
    files.into_iter().map(entry).collect()
}

/// `(text, None)` for UTF-8, else `(None, base64)`.
fn text_or_base64(bytes: Vec<u8>) -> (Option<String>, Option<String>) {
    match String::from_utf8(bytes) {
        Ok(t) => (Some(t), None),
        Err(e) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(e.into_bytes())),
        ),
    }
}

pub(super) fn register(api: &mut Api) -> anyhow::Result<()> {
    api.method_as::<ListSkillsParams, ListSkillsResult, _, _, _>(
        method::LIST_SKILLS,
        "The skills found, in search order: name, description, folder, where it was found, etag; with `manifest`, each one's front matter and files with their digests too.",
        |host, p: ListSkillsParams| async move {
            let session = p.session_id.as_deref();
            let catalog = catalog_for(&host, session).await?;
            let upstream = upstream(&host, session, &catalog).await?;
            let own = if !p.manifest {
                Serialised(catalog, Catalog::list_json)
            } else {
                let catalog = match catalog.has_manifest_json() {
                    true => catalog,
                    false => blocking(move || {
                        catalog.manifest_json();
                        catalog
                    })
                    .await?,
                };
                Serialised(catalog, Catalog::manifest_json)
            };
            if upstream.is_empty() {
                return Ok(Listing::Own(own));
            }
            let mut list: ListSkillsResult =
                serde_json::from_str((own.1)(&own.0).get()).map_err(Error::server)?;
            list.etag = with_upstream_etag(&list.etag, &upstream);
            list.skills
                .extend(upstream.iter().map(|s| s.entry(p.manifest)));
            Ok(Listing::With(list))
        },
    )?;
    api.method(
        method::GET_SKILL,
        "One skill: its SKILL.md text, its front matter and the list of its files (with `manifest`, each with its digest).",
        |host, p: SkillNameParams| async move {
            let session = p.session_id.as_deref();
            let catalog = catalog_for(&host, session).await?;
            if catalog.get(&p.name).is_none() {
                let s = upstream_named(&host, session, &catalog, &p.name).await?;
                let text = host.mcp().read_skill(&s, &s.skill.uri).await?;
                return Ok(GetSkillResult {
                    skill: s.entry(false),
                    // Verified: its front matter parsed, so it is UTF-8.
                    text: String::from_utf8_lossy(&text).into_owned(),
                    files: s.files(),
                });
            }
            let s = skill(&catalog, &p.name)?;
            let s = match !p.manifest || s.has_manifest() {
                true => s,
                false => blocking(move || {
                    s.manifest();
                    s
                })
                .await?,
            };
            Ok(GetSkillResult {
                skill: SkillEntry {
                    frontmatter: Some(s.frontmatter.clone()),
                    ..catalog::entry(&s)
                },
                text: s.text.clone(),
                files: match p.manifest {
                    true => s.manifest().to_vec(),
                    false => s.files.clone(),
                },
            })
        },
    )?;
    api.method(
        method::READ_SKILL_FILE,
        "One file of a skill, by its path inside the skill's folder (never outside it; at most 1 MiB); text, or base64 when it is not UTF-8.",
        |host, p: ReadSkillFileParams| async move {
            let session = p.session_id.as_deref();
            let catalog = catalog_for(&host, session).await?;
            let bytes = match catalog.get(&p.name) {
                Some(s) => read(s.clone(), p.path.clone()).await?,
                None => {
                    let s = upstream_named(&host, session, &catalog, &p.name).await?;
                    host.mcp().read_skill(&s, &s.file_uri(&p.path)).await?
                }
            };
            let size = bytes.len() as u64;
            let (text, base64) = text_or_base64(bytes);
            Ok(ReadSkillFileResult {
                name: p.name,
                path: p.path,
                size,
                text,
                base64,
            })
        },
    )?;
    api.subscription::<EmptyParams, SkillsChanged, _, _>(
        [
            method::SUBSCRIBE_SKILLS_CHANGED,
            method::SKILLS_CHANGED,
            method::UNSUBSCRIBE_SKILLS_CHANGED,
        ],
        "A notification whenever a skill is added, edited or removed. WebSocket and newline framing only.",
        |host, _: EmptyParams| async move {
            // Subscribed before the reply goes out: no change after it is missed.
            Ok(skills_changes(&host))
        },
    )
}
