//! `search_files`: a regex search over the workspace's text files.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use futures::future::BoxFuture;
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::super::paths::{open_workspace, resolve_target, shown_rel, Root};
use super::super::{
    bool_arg, clip_str, int_arg, object_schema, opt_str_arg, run_blocking, stopped, str_arg,
};
use super::{is_binary, not_regular, open_node, Node};
use crate::catalog::ToolSpec;
use crate::protocol::ApprovalClass;
use crate::protocol::ToolOutput;
use crate::registry::{CallContext, Tool, ToolError, ToolResult};

/// `search_files`: default and largest `max_results`.
pub const SEARCH_DEFAULT_MAX_RESULTS: u64 = 100;
pub const SEARCH_MAX_RESULTS: u64 = 1000;
/// `search_files`: matched lines longer than this many bytes are clipped.
pub const SEARCH_MAX_LINE_BYTES: usize = 500;
/// `search_files`: larger files are skipped (and counted).
pub const SEARCH_MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Regex search over the workspace's text files.
pub struct SearchFiles {
    spec: ToolSpec,
}

impl Default for SearchFiles {
    fn default() -> Self {
        Self::new()
    }
}

impl SearchFiles {
    pub fn new() -> Self {
        let description = format!(
            "- Searches the text files of the workspace for a regular expression (Rust regex syntax, matched per line), like ripgrep.\n\
             - Use it to find definitions, usages and strings; narrow it with path and glob (e.g. \"*.rs\").\n\
             - Skips files ignored by .gitignore/.ignore, hidden files and directories (.git included), binary files and files over {} MiB.\n\
             - Returns matches: one \"path:line: text\" per line, paths relative to the workspace; plus match_count, files_with_matches, files_searched.\n\
             - Stops after max_results matches (truncated: true when more exist); matched lines longer than {SEARCH_MAX_LINE_BYTES} bytes are clipped.",
            SEARCH_MAX_FILE_BYTES / (1024 * 1024)
        );
        let parameters = object_schema(
            json!({
                "pattern": {
                    "type": "string",
                    "description": "Regular expression to search for (Rust regex syntax; escape literal characters like ( or .).",
                    "minLength": 1
                },
                "path": {
                    "type": "string",
                    "description": "Directory (or file) to search: relative to the workspace, or absolute inside it.",
                    "default": "."
                },
                "glob": {
                    "type": "string",
                    "description": "Only search files matching this glob, relative to path; a glob without \"/\" matches file names at any depth (e.g. \"*.rs\", \"src/**/*.ts\")."
                },
                "max_results": {
                    "type": "integer",
                    "description": "Maximum number of matching lines to return.",
                    "minimum": 1,
                    "maximum": SEARCH_MAX_RESULTS,
                    "default": SEARCH_DEFAULT_MAX_RESULTS
                },
                "case_insensitive": {
                    "type": "boolean",
                    "description": "Match letters regardless of case.",
                    "default": false
                }
            }),
            &["pattern"],
        );
        SearchFiles {
            spec: ToolSpec::builtin(
                "search_files",
                &description,
                parameters,
                ApprovalClass::ReadOnly,
            ),
        }
    }
}

struct SearchArgs {
    regex: regex::Regex,
    path: String,
    glob: Option<String>,
    max_results: usize,
}

impl Tool for SearchFiles {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async move {
            let pattern = str_arg(&args, "pattern")?;
            if pattern.is_empty() {
                return Err(ToolError::invalid("pattern must not be empty"));
            }
            let case_insensitive = bool_arg(&args, "case_insensitive", false)?;
            let regex = regex::RegexBuilder::new(pattern)
                .case_insensitive(case_insensitive)
                .build()
                .map_err(|e| {
                    ToolError::invalid(format!(
                        "invalid regex in arguments.pattern {pattern:?}: {e}"
                    ))
                })?;
            let max_results = int_arg(
                &args,
                "max_results",
                SEARCH_DEFAULT_MAX_RESULTS,
                1,
                SEARCH_MAX_RESULTS,
            )?;
            let search = SearchArgs {
                regex,
                path: opt_str_arg(&args, "path")?.unwrap_or(".").to_owned(),
                glob: opt_str_arg(&args, "glob")?
                    .filter(|g| !g.is_empty())
                    .map(str::to_owned),
                max_results: usize::try_from(max_results).unwrap_or(usize::MAX),
            };
            run_blocking(&ctx.cancel, move |stop| {
                search_files(&ctx.workspace, &search, stop)
            })
            .await
        })
    }
}

fn search_files(workspace: &Path, args: &SearchArgs, stop: &CancellationToken) -> ToolResult {
    let root = open_workspace(workspace)?;
    let target = resolve_target(&root, &[], &args.path)?;
    let name = target.shown.as_str();
    let node = open_node(&root.dir, target.rel_path()).map_err(|e| target.error("search", &e))?;
    let glob_base = match node {
        Node::Dir => target.rel.clone(),
        _ => target
            .rel
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
    };
    let glob = match &args.glob {
        None => None,
        Some(g) => {
            let invalid =
                |e| ToolError::invalid(format!("invalid glob in arguments.glob {g:?}: {e}"));
            let mut b = GitignoreBuilder::new(root.path.join(&glob_base));
            b.add_line(None, g).map_err(invalid)?;
            Some((glob_base, b.build().map_err(invalid)?))
        }
    };
    let mut walk = Walk {
        ws: &root,
        args,
        glob,
        lines: Vec::new(),
        files_searched: 0,
        files_with_matches: 0,
        skipped_binary: 0,
        skipped_large: 0,
        unreadable: 0,
        truncated: false,
    };
    match node {
        Node::File(f) => walk.search_file(f, &target.rel),
        Node::Special(kind) => return Err(not_regular(name, kind)),
        Node::Dir => walk.walk(&target.rel, stop)?,
    }
    let Walk {
        lines,
        files_searched,
        files_with_matches,
        skipped_binary,
        skipped_large,
        unreadable,
        truncated,
        ..
    } = walk;
    let mut out = Map::new();
    out.insert("path".into(), json!(name));
    out.insert("matches".into(), json!(lines.join("\n")));
    out.insert("match_count".into(), json!(lines.len()));
    out.insert("files_with_matches".into(), json!(files_with_matches));
    out.insert("files_searched".into(), json!(files_searched));
    out.insert("truncated".into(), json!(truncated));
    let mut notes = Vec::new();
    if lines.is_empty() {
        notes.push("no matches".to_owned());
    }
    if truncated {
        notes.push(format!(
            "stopped after {} matches; narrow pattern, path or glob, or raise max_results (up to {SEARCH_MAX_RESULTS})",
            args.max_results
        ));
    }
    if skipped_binary > 0 {
        notes.push(format!("{skipped_binary} binary files skipped"));
    }
    if skipped_large > 0 {
        notes.push(format!(
            "{skipped_large} files over {} MiB skipped",
            SEARCH_MAX_FILE_BYTES / (1024 * 1024)
        ));
    }
    if unreadable > 0 {
        notes.push(format!("{unreadable} entries could not be read"));
    }
    if !notes.is_empty() {
        out.insert("note".into(), json!(notes.join("; ")));
    }
    Ok(ToolOutput::from_fields(out))
}

/// Ignore files read per directory; later ones take precedence (as in ripgrep).
const IGNORE_FILES: [&str; 2] = [".gitignore", ".ignore"];
/// Ignore files larger than this are read only this far.
const IGNORE_FILE_MAX_BYTES: u64 = 1024 * 1024;

/// A step of the depth-first walk, kept on an explicit stack so a deep tree cannot overflow
/// the thread's stack and only one directory is open at a time.
enum Step {
    Dir(PathBuf),
    File(PathBuf),
    /// Leaving a directory whose ignore rules were pushed.
    PopRules,
}

/// A search walk over the workspace. Every directory and file is opened beneath the workspace
/// handle by its workspace-relative path, so a directory swapped for a symlink mid-walk cannot
/// lead the search (or its ignore-file reads) outside, and FIFOs are never opened blocking.
///
/// Ignore rules: `.gitignore` and `.ignore` of each directory from the workspace root down,
/// deeper ones first; hidden entries are skipped. Git's global excludes and `.git/info/exclude`
/// are not read.
struct Walk<'a> {
    ws: &'a Root,
    args: &'a SearchArgs,
    /// The glob, relative to its base directory (workspace-relative).
    glob: Option<(PathBuf, Gitignore)>,
    lines: Vec<String>,
    files_searched: u64,
    files_with_matches: u64,
    skipped_binary: u64,
    skipped_large: u64,
    unreadable: u64,
    truncated: bool,
}

impl Walk<'_> {
    fn walk(&mut self, start: &Path, stop: &CancellationToken) -> Result<(), ToolError> {
        // The rules of the directories above the start apply too.
        let mut rules: Vec<(PathBuf, Gitignore)> = Vec::new();
        let mut above = PathBuf::new();
        for part in start.iter() {
            if let Some(r) = self.rules(&above) {
                rules.push((above.clone(), r));
            }
            above.push(part);
        }
        let mut stack = vec![Step::Dir(start.to_path_buf())];
        while let Some(step) = stack.pop() {
            if self.truncated {
                break;
            }
            if stop.is_cancelled() {
                return Err(stopped());
            }
            let rel = match step {
                Step::PopRules => {
                    rules.pop();
                    continue;
                }
                Step::File(rel) => {
                    match open_node(&self.ws.dir, &rel) {
                        Ok(Node::File(f)) => self.search_file(f, &rel),
                        // Swapped for something else since it was listed.
                        Ok(Node::Dir | Node::Special(_)) => {}
                        Err(_) => self.unreadable += 1,
                    }
                    continue;
                }
                Step::Dir(rel) => rel,
            };
            let listed = self
                .ws
                .dir
                .open_dir(dot_if_empty(&rel))
                .and_then(|d| d.entries());
            let Ok(listed) = listed else {
                self.unreadable += 1;
                continue;
            };
            let mut children: Vec<(std::ffi::OsString, cap_std::fs::FileType)> = listed
                .filter_map(Result::ok)
                .filter_map(|e| e.file_type().ok().map(|t| (e.file_name(), t)))
                .filter(|(n, _)| !n.as_encoded_bytes().starts_with(b"."))
                .collect();
            children.sort_by(|a, b| a.0.cmp(&b.0));
            if let Some(r) = self.rules(&rel) {
                rules.push((rel.clone(), r));
                stack.push(Step::PopRules);
            }
            // Reversed, so the stack pops them in name order.
            for (child, kind) in children.into_iter().rev() {
                // Symlinks are not followed; FIFOs and devices are not searched.
                if !kind.is_dir() && !kind.is_file() {
                    continue;
                }
                let is_dir = kind.is_dir();
                let path = rel.join(child);
                let ignored = rules
                    .iter()
                    .rev()
                    .map(|(base, r)| r.matched(path.strip_prefix(base).unwrap_or(&path), is_dir))
                    .find(|m| !m.is_none())
                    .is_some_and(|m| m.is_ignore());
                if !ignored {
                    stack.push(if is_dir {
                        Step::Dir(path)
                    } else {
                        Step::File(path)
                    });
                }
            }
        }
        Ok(())
    }

    /// The ignore rules of the directory `rel`, if it has any ignore file.
    fn rules(&self, rel: &Path) -> Option<Gitignore> {
        let mut b = GitignoreBuilder::new(self.ws.path.join(rel));
        let mut any = false;
        for name in IGNORE_FILES {
            let Ok(Node::File(f)) = open_node(&self.ws.dir, &rel.join(name)) else {
                continue;
            };
            let mut text = Vec::new();
            if f.take(IGNORE_FILE_MAX_BYTES)
                .read_to_end(&mut text)
                .is_err()
            {
                continue;
            }
            for line in String::from_utf8_lossy(&text).lines() {
                // A bad line is skipped, as git does.
                let _ = b.add_line(None, line);
            }
            any = true;
        }
        any.then(|| b.build().ok()).flatten()
    }

    /// Searches one opened file; `rel` is its workspace-relative path.
    fn search_file(&mut self, file: std::fs::File, rel: &Path) {
        if let Some((base, matcher)) = &self.glob {
            let r = rel.strip_prefix(base).unwrap_or(rel);
            if !matcher.matched(r, false).is_ignore() {
                return;
            }
        }
        match file.metadata() {
            Ok(m) if m.len() > SEARCH_MAX_FILE_BYTES => {
                self.skipped_large += 1;
                return;
            }
            Ok(_) => {}
            Err(_) => {
                self.unreadable += 1;
                return;
            }
        }
        let mut bytes = Vec::new();
        // `take` also bounds a file that grows while it is read.
        if file
            .take(SEARCH_MAX_FILE_BYTES)
            .read_to_end(&mut bytes)
            .is_err()
        {
            self.unreadable += 1;
            return;
        }
        if is_binary(&bytes) {
            self.skipped_binary += 1;
            return;
        }
        self.files_searched += 1;
        let text = String::from_utf8_lossy(&bytes);
        let shown = shown_rel(rel);
        let mut matched_here = false;
        for (i, line) in text.lines().enumerate() {
            if !self.args.regex.is_match(line) {
                continue;
            }
            if self.lines.len() >= self.args.max_results {
                self.truncated = true;
                return;
            }
            if !matched_here {
                matched_here = true;
                self.files_with_matches += 1;
            }
            let kept = clip_str(line, SEARCH_MAX_LINE_BYTES);
            let more = if kept.len() < line.len() {
                " …[clipped]"
            } else {
                ""
            };
            self.lines.push(format!("{shown}:{}: {kept}{more}", i + 1));
        }
    }
}

fn dot_if_empty(rel: &Path) -> &Path {
    if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    }
}

#[cfg(test)]
mod tests {

    use serde_json::json;

    use super::*;
    use crate::protocol::ErrorKind;
    use crate::tools::fs::test_support::{assert_escape, Ws};

    // search_files

    #[tokio::test]
    async fn search_files_finds_matches_respecting_gitignore() {
        let ws = Ws::new();
        ws.write(".gitignore", "target/\n*.log\n");
        ws.write("src/main.rs", "fn main() {\n    let needle = 1;\n}\n");
        ws.write("src/lib.rs", "// Needle in docs\n");
        ws.write("target/out.rs", "needle\n");
        ws.write("debug.log", "needle\n");
        ws.write(".hidden/x.rs", "needle\n");
        ws.write("img.bin", b"needle\0");
        let r = ws
            .call(&SearchFiles::new(), json!({"pattern": "needle"}))
            .await
            .unwrap();
        assert_eq!(r["matches"], "src/main.rs:2:     let needle = 1;");
        assert_eq!(r["match_count"], 1);
        assert_eq!(r["files_with_matches"], 1);
        assert_eq!(r["truncated"], false);
        assert_eq!(r["note"], "1 binary files skipped");
        let r = ws
            .call(
                &SearchFiles::new(),
                json!({"pattern": "needle", "case_insensitive": true}),
            )
            .await
            .unwrap();
        assert_eq!(
            r["matches"],
            "src/lib.rs:1: // Needle in docs\nsrc/main.rs:2:     let needle = 1;"
        );
    }

    #[tokio::test]
    async fn search_files_glob_path_and_max_results() {
        let ws = Ws::new();
        ws.write("a/x.rs", "hit\nhit\n");
        ws.write("a/x.txt", "hit\n");
        ws.write("b/y.rs", "hit\n");
        let s = SearchFiles::new();
        let r = ws
            .call(&s, json!({"pattern": "hit", "glob": "*.rs"}))
            .await
            .unwrap();
        assert_eq!(r["matches"], "a/x.rs:1: hit\na/x.rs:2: hit\nb/y.rs:1: hit");
        let r = ws
            .call(&s, json!({"pattern": "hit", "path": "a"}))
            .await
            .unwrap();
        assert_eq!(r["matches"], "a/x.rs:1: hit\na/x.rs:2: hit\na/x.txt:1: hit");
        let r = ws
            .call(&s, json!({"pattern": "hit", "max_results": 2}))
            .await
            .unwrap();
        assert_eq!(r["match_count"], 2);
        assert_eq!(r["truncated"], true);
        assert!(r["note"]
            .as_str()
            .unwrap()
            .starts_with("stopped after 2 matches"));
    }

    #[tokio::test]
    async fn search_files_invalid_regex_is_invalid_arguments() {
        let ws = Ws::new();
        let e = ws
            .call(&SearchFiles::new(), json!({"pattern": "fn ("}))
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArguments);
        assert!(
            e.message
                .starts_with("invalid regex in arguments.pattern \"fn (\""),
            "{}",
            e.message
        );
        assert_escape(
            ws.call(&SearchFiles::new(), json!({"pattern": "x", "path": "/"}))
                .await,
            "/",
        );
    }

    #[tokio::test]
    async fn search_files_applies_nested_ignore_files_deepest_first() {
        let ws = Ws::new();
        ws.write(".gitignore", "*.gen\n");
        ws.write("a/.gitignore", "!keep.gen\n");
        ws.write("a/.ignore", "skip.rs\n");
        ws.write("a/keep.gen", "hit\n");
        ws.write("a/drop.gen", "hit\n");
        ws.write("a/skip.rs", "hit\n");
        ws.write("a/ok.rs", "hit\n");
        ws.write("b/x.gen", "hit\n");
        let s = SearchFiles::new();
        let r = ws.call(&s, json!({"pattern": "hit"})).await.unwrap();
        assert_eq!(r["matches"], "a/keep.gen:1: hit\na/ok.rs:1: hit");
        // Rules above the searched directory apply too.
        let r = ws
            .call(&s, json!({"pattern": "hit", "path": "b"}))
            .await
            .unwrap();
        assert_eq!(r["matches"], "");
        assert_eq!(r["note"], "no matches");
    }
}
