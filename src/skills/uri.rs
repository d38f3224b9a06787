//! Skills as MCP resources: `skill://<name>/<path>` names one file of a skill
//! (`skill://<name>/SKILL.md` its instructions). A name is plain (lowercase letters,
//! digits, hyphens); each segment of the path is percent-encoded, so any file name has
//! exactly one URI.

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};

use super::skill::{Skill, SKILL_FILE};
use crate::protocol::ResourceEntry;

pub const SCHEME: &str = "skill://";
/// The `server` of a skill's resources: the host itself, not one of its MCP servers.
pub const SERVER: &str = "toolhost";

/// What a path segment may not hold literally: what RFC 3986 never allows unencoded, and
/// the delimiters of a URI (`%`, `/`, `?`, `#`).
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'<')
    .add(b'>')
    .add(b'\\')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}')
    .add(b'%')
    .add(b'/')
    .add(b'?')
    .add(b'#');

/// The URI of file `path` (relative, `/`-separated) of skill `name`.
pub fn of(name: &str, path: &str) -> String {
    let mut uri = format!("{SCHEME}{name}");
    for segment in path.split('/') {
        uri.push('/');
        uri.extend(utf8_percent_encode(segment, SEGMENT));
    }
    uri
}

/// `(skill name, file path)` of a `skill://` URI; `None` for any other URI.
pub fn parse(uri: &str) -> Option<(&str, String)> {
    let rest = uri.strip_prefix(SCHEME)?;
    let (name, path) = rest.split_once('/')?;
    if name.is_empty() || path.is_empty() || path.contains(['?', '#']) {
        return None;
    }
    let mut segments = Vec::new();
    for s in path.split('/') {
        segments.push(percent_decode_str(s).decode_utf8().ok()?.into_owned());
    }
    Some((name, segments.join("/")))
}

/// Every file of `skill` as a resource, `SKILL.md` first (it carries the description).
pub fn resources(skill: &Skill) -> impl Iterator<Item = ResourceEntry> + '_ {
    let main = skill.files.iter().filter(|f| f.path == SKILL_FILE);
    let rest = skill.files.iter().filter(|f| f.path != SKILL_FILE);
    main.chain(rest).map(|f| {
        let is_main = f.path == SKILL_FILE;
        ResourceEntry {
            uri: of(&skill.name, &f.path),
            name: if is_main {
                skill.name.clone()
            } else {
                format!("{}/{}", skill.name, f.path)
            },
            title: None,
            description: is_main.then(|| skill.description.clone()),
            mime_type: mime_type(&f.path).map(str::to_owned),
            size: Some(f.size),
            annotations: None,
            server: SERVER.to_owned(),
        }
    })
}

/// The MIME type of a skill file by its extension, for the few kinds skills hold.
pub fn mime_type(path: &str) -> Option<&'static str> {
    let ext = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "md" => "text/markdown",
        "txt" => "text/plain",
        "json" => "application/json",
        "yaml" | "yml" => "application/yaml",
        "py" => "text/x-python",
        "sh" => "text/x-shellscript",
        "js" | "mjs" => "text/javascript",
        "ts" => "text/x-typescript",
        "html" => "text/html",
        "csv" => "text/csv",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "svg" => "image/svg+xml",
        "pdf" => "application/pdf",
        _ => return None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn uris_encode_each_segment_and_parse_back() {
        assert_eq!(of("pdf", "SKILL.md"), "skill://pdf/SKILL.md");
        let odd = of("pdf", "scripts/my notes#1%.md");
        assert_eq!(odd, "skill://pdf/scripts/my%20notes%231%25.md");
        assert_eq!(
            parse(&odd).unwrap(),
            ("pdf", "scripts/my notes#1%.md".into())
        );
        assert_eq!(parse("skill://pdf/SKILL.md").unwrap().1, "SKILL.md");
        for bad in [
            "file:///x",
            "skill://pdf",
            "skill:///SKILL.md",
            "skill://a/b?c",
        ] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }
}
