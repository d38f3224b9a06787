//! Skill folders as the skills tests write them, and what the daemon says of them.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Writes `root/<dir>/SKILL.md` (atomically, last, as an editor or `cp` ends up) with this
/// front matter and body, after the extra `files`.
pub fn write_skill(
    root: &Path,
    dir: &str,
    front: &str,
    body: &str,
    files: &[(&str, &str)],
) -> PathBuf {
    let to = root.join(dir);
    for (rel, text) in files {
        let f = to.join(rel);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, text).unwrap();
    }
    std::fs::create_dir_all(&to).unwrap();
    let tmp = to.join(".SKILL.md.tmp");
    std::fs::write(&tmp, format!("---\n{front}---\n{body}")).unwrap();
    std::fs::rename(tmp, to.join("SKILL.md")).unwrap();
    to
}

pub fn front(name: &str, description: &str) -> String {
    format!("name: {name}\ndescription: {description}\n")
}

/// The names of a `list_skills` result, in its order.
pub fn skill_names(list: &Value) -> Vec<String> {
    list["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}
