//! The skills methods (proto-docs/skills.md): every answer reads the catalog in force,
//! built when the folders last changed; only `read_skill_file` touches the disk.

use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use serde::Serialize;

use super::{forward, Api, Error};
use crate::protocol::*;
use crate::skills::{catalog, Catalog, Skill};

/// The most of one skill file `read_skill_file` returns.
pub const MAX_SKILL_FILE_BYTES: u64 = 1024 * 1024;

/// The `list_skills` answer, written as the catalog serialised it.
struct ListAnswer(Arc<Catalog>);

impl Serialize for ListAnswer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.list_json().serialize(s)
    }
}

fn skill(catalog: &Catalog, name: &str) -> Result<Arc<Skill>, Error> {
    catalog
        .get(name)
        .cloned()
        .ok_or_else(|| Error::InvalidParams(format!("no skill named '{name}'")))
}

pub(super) fn register(api: &mut Api) -> anyhow::Result<()> {
    api.method_as::<EmptyParams, ListSkillsResult, _, _, _>(
        method::LIST_SKILLS,
        "The skills found, in search order: name, description, folder, where it was found, etag.",
        |host, _: EmptyParams| async move { Ok(ListAnswer(host.skills().catalog())) },
    )?;
    api.method(
        method::GET_SKILL,
        "One skill: its SKILL.md text and the list of its files.",
        |host, p: SkillNameParams| async move {
            let s = skill(&host.skills().catalog(), &p.name)?;
            Ok(GetSkillResult {
                skill: catalog::entry(&s),
                text: s.text.clone(),
                files: s.files.clone(),
            })
        },
    )?;
    api.method(
        method::READ_SKILL_FILE,
        "One file of a skill, by its path inside the skill's folder (never outside it; at most 1 MiB); text, or base64 when it is not UTF-8.",
        |host, p: ReadSkillFileParams| async move {
            let s = skill(&host.skills().catalog(), &p.name)?;
            let dir = s.dir.clone();
            let rel = p.path.clone();
            let bytes = tokio::task::spawn_blocking(move || {
                crate::safe_read::read_beneath(&dir, Path::new(&rel), MAX_SKILL_FILE_BYTES)
            })
            .await
            .map_err(Error::server)?
            .map_err(|e| Error::InvalidParams(format!("{} {e}", p.path)))?;
            let size = bytes.len() as u64;
            let (text, base64) = match String::from_utf8(bytes) {
                Ok(t) => (Some(t), None),
                Err(e) => (
                    None,
                    Some(base64::engine::general_purpose::STANDARD.encode(e.into_bytes())),
                ),
            };
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
            Ok(forward(host.skills().subscribe(), method::SKILLS_CHANGED))
        },
    )
}
