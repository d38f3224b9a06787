//! `search_files`: a regex search over the workspace's text files.

use std::fs::{self};
use std::path::Path;

use futures::future::BoxFuture;
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::super::paths::{resolve, shown, workspace_root};
use super::super::{
    bool_arg, clip_str, int_arg, object_schema, opt_str_arg, run_blocking, stopped, str_arg,
};
use super::{io_error, is_binary};
use crate::approval::ApprovalClass;
use crate::registry::{CallContext, Tool, ToolError, ToolOk, ToolResult, ToolSpec};

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
    let root = workspace_root(workspace)?;
    let abs = resolve(&root, &[], &args.path)?;
    let name = shown(&root, &abs);
    let meta = fs::metadata(&abs).map_err(|e| io_error("search", &name, &e))?;
    let glob = match &args.glob {
        None => None,
        Some(g) => {
            let base = if meta.is_dir() {
                abs.as_path()
            } else {
                abs.parent().unwrap_or(&abs)
            };
            let mut b = ignore::gitignore::GitignoreBuilder::new(base);
            b.add_line(None, g).map_err(|e| {
                ToolError::invalid(format!("invalid glob in arguments.glob {g:?}: {e}"))
            })?;
            Some((
                base.to_path_buf(),
                b.build().map_err(|e| {
                    ToolError::invalid(format!("invalid glob in arguments.glob {g:?}: {e}"))
                })?,
            ))
        }
    };
    let walker = ignore::WalkBuilder::new(&abs)
        .hidden(true)
        .git_ignore(true)
        // Respect .gitignore even in a workspace that is not (yet) a git repository.
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .build();

    let mut lines: Vec<String> = Vec::new();
    let mut files_searched = 0u64;
    let mut files_with_matches = 0u64;
    let mut skipped_binary = 0u64;
    let mut skipped_large = 0u64;
    let mut unreadable = 0u64;
    let mut truncated = false;
    'walk: for entry in walker {
        if stop.is_cancelled() {
            return Err(stopped());
        }
        let Ok(entry) = entry else {
            unreadable += 1;
            continue;
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        if let Some((base, matcher)) = &glob {
            let rel = path.strip_prefix(base).unwrap_or(path);
            if !matcher.matched(rel, false).is_ignore() {
                continue;
            }
        }
        match entry.metadata() {
            Ok(m) if m.len() > SEARCH_MAX_FILE_BYTES => {
                skipped_large += 1;
                continue;
            }
            Ok(_) => {}
            Err(_) => {
                unreadable += 1;
                continue;
            }
        }
        let Ok(bytes) = fs::read(path) else {
            unreadable += 1;
            continue;
        };
        if is_binary(&bytes) {
            skipped_binary += 1;
            continue;
        }
        files_searched += 1;
        let text = String::from_utf8_lossy(&bytes);
        let rel = shown(&root, path);
        let mut matched_here = false;
        for (i, line) in text.lines().enumerate() {
            if !args.regex.is_match(line) {
                continue;
            }
            if lines.len() >= args.max_results {
                truncated = true;
                break 'walk;
            }
            if !matched_here {
                matched_here = true;
                files_with_matches += 1;
            }
            let kept = clip_str(line, SEARCH_MAX_LINE_BYTES);
            let more = if kept.len() < line.len() {
                " …[clipped]"
            } else {
                ""
            };
            lines.push(format!("{rel}:{}: {kept}{more}", i + 1));
        }
    }
    let mut out = ToolOk::new();
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
    Ok(out)
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
}
