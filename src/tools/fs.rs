//! File tools: `read_file`, `write_file`, `patch_file`, `list_dir`, `search_files`.
//!
//! Each tool parses its arguments on the async side, then does all file work in one blocking
//! closure under [`run_blocking`]. Writes are atomic (a temporary file in the same directory,
//! renamed over the target) and keep an existing file's permissions.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::fs::{self, File, Permissions};
use std::io::{self, BufRead, BufReader, Read, Seek, Write as _};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::paths::{extra_root, resolve, shown, workspace_root};
use super::{
    bool_arg, clip_str, int_arg, object_schema, opt_str_arg, run_blocking, stopped, str_arg,
};
use crate::approval::ApprovalClass;
use crate::registry::{CallContext, Tool, ToolError, ToolOk, ToolResult, ToolSpec};

/// `read_file`: lines returned when `limit` is not given.
pub const READ_DEFAULT_LIMIT: u64 = 2000;
/// `read_file`: the largest `limit` accepted.
pub const READ_MAX_LIMIT: u64 = 10_000;
/// `read_file`: lines longer than this many bytes are clipped in the output.
pub const READ_MAX_LINE_BYTES: usize = 2000;
/// `read_file`: the output stops after about this many bytes (well under the host's output
/// cap, so paging through a spilled output never spills again).
pub const READ_MAX_BYTES: usize = 256 * 1024;
/// Files with a NUL byte in their first this many bytes are binary.
pub const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// `list_dir`: default and largest `depth`.
pub const LIST_DEFAULT_DEPTH: u64 = 2;
pub const LIST_MAX_DEPTH: u64 = 10;
/// `list_dir`: at most this many entries are listed.
pub const LIST_MAX_ENTRIES: usize = 1000;

/// `search_files`: default and largest `max_results`.
pub const SEARCH_DEFAULT_MAX_RESULTS: u64 = 100;
pub const SEARCH_MAX_RESULTS: u64 = 1000;
/// `search_files`: matched lines longer than this many bytes are clipped.
pub const SEARCH_MAX_LINE_BYTES: usize = 500;
/// `search_files`: larger files are skipped (and counted).
pub const SEARCH_MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Turns an I/O error on `path` into a readable tool error.
fn io_error(action: &str, path: &str, e: &io::Error) -> ToolError {
    match e.kind() {
        io::ErrorKind::NotFound => {
            ToolError::failed(format!("cannot {action} {path}: no such file or directory"))
        }
        io::ErrorKind::PermissionDenied => {
            ToolError::failed(format!("cannot {action} {path}: permission denied"))
        }
        _ => ToolError::failed(format!("cannot {action} {path}: {e}")),
    }
}

fn is_binary(head: &[u8]) -> bool {
    head[..head.len().min(BINARY_SNIFF_BYTES)].contains(&0)
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, flushed, then
/// renamed over the target. `keep` is the existing file's permissions (new files get 0666
/// minus the umask, like any editor's).
fn atomic_write(path: &Path, bytes: &[u8], keep: Option<Permissions>) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path has no parent directory",
        )
    })?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!(".{}.", clip_str(&name, 100));
    let mut tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .permissions(
            keep.clone()
                .unwrap_or_else(|| Permissions::from_mode(0o666)),
        )
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    if let Some(p) = keep {
        // The umask applied at creation may have narrowed the mode; restore it exactly.
        tmp.as_file().set_permissions(p)?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// read_file

/// Reads a text file with line numbers, a window of lines at a time.
pub struct ReadFile {
    spec: ToolSpec,
    /// Spilled outputs live here; absolute paths under it are readable too.
    outputs_dir: PathBuf,
}

impl ReadFile {
    pub fn new(outputs_dir: &Path) -> Self {
        let description = format!(
            "- Reads a UTF-8 text file in the workspace and returns its lines numbered like `cat -n` (\"     1\\tfirst line\").\n\
             - Use it before editing a file with patch_file, and to page through a long output saved at a `full_output_path`.\n\
             - Returns content, total_lines, start_line, end_line, and truncated; when truncated is true, call again with offset = next_offset.\n\
             - Reads at most {READ_DEFAULT_LIMIT} lines by default (limit up to {READ_MAX_LIMIT}) and about {} KiB per call; lines longer than {READ_MAX_LINE_BYTES} bytes are clipped and counted in clipped_lines.\n\
             - Refuses binary files (a NUL byte in the first {} KiB, or invalid UTF-8) and paths outside the workspace.",
            READ_MAX_BYTES / 1024,
            BINARY_SNIFF_BYTES / 1024
        );
        let parameters = object_schema(
            json!({
                "path": {
                    "type": "string",
                    "description": "File to read: relative to the workspace, or absolute inside it (or a full_output_path)."
                },
                "offset": {
                    "type": "integer",
                    "description": "1-based line number to start reading at.",
                    "minimum": 1,
                    "default": 1
                },
                "limit": {
                    "type": "integer",
                    "description": "Maximum number of lines to return.",
                    "minimum": 1,
                    "maximum": READ_MAX_LIMIT,
                    "default": READ_DEFAULT_LIMIT
                }
            }),
            &["path"],
        );
        ReadFile {
            spec: ToolSpec::builtin(
                "read_file",
                &description,
                parameters,
                ApprovalClass::ReadOnly,
            ),
            outputs_dir: outputs_dir.to_path_buf(),
        }
    }
}

/// Largest file `read_file` reads on the calling task instead of the blocking pool.
const INLINE_READ_MAX: u64 = 64 * 1024;

impl Tool for ReadFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async move {
            let path = str_arg(&args, "path")?.to_owned();
            let offset = int_arg(&args, "offset", 1, 1, u64::MAX)?;
            let limit = int_arg(&args, "limit", READ_DEFAULT_LIMIT, 1, READ_MAX_LIMIT)?;
            // A small file is read inline: the hop to the blocking pool and back would cost
            // more than the read itself. Big files (and odd paths) go to the pool.
            let small = std::fs::metadata(ctx.workspace.join(&path))
                .is_ok_and(|m| m.is_file() && m.len() <= INLINE_READ_MAX);
            if small {
                return read_file(
                    &ctx.workspace,
                    &self.outputs_dir,
                    &path,
                    offset,
                    limit,
                    &ctx.cancel,
                );
            }
            let outputs_dir = self.outputs_dir.clone();
            run_blocking(&ctx.cancel, move |stop| {
                read_file(&ctx.workspace, &outputs_dir, &path, offset, limit, stop)
            })
            .await
        })
    }
}

/// Reads the next line of `r` into `buf`, keeping at most `keep` bytes of it (without the
/// newline). Returns the line's full length in bytes, or `None` at the end of the file.
fn next_line<R: BufRead>(r: &mut R, buf: &mut Vec<u8>, keep: usize) -> io::Result<Option<usize>> {
    buf.clear();
    let mut total = 0;
    let mut any = false;
    loop {
        let avail = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            return Ok(any.then_some(total));
        }
        any = true;
        let (chunk_len, done) = match avail.iter().position(|b| *b == b'\n') {
            Some(i) => (i, true),
            None => (avail.len(), false),
        };
        let room = keep.saturating_sub(buf.len()).min(chunk_len);
        buf.extend_from_slice(&avail[..room]);
        total += chunk_len;
        r.consume(chunk_len + usize::from(done));
        if done {
            return Ok(Some(total));
        }
    }
}

fn read_file(
    workspace: &Path,
    outputs_dir: &Path,
    raw: &str,
    offset: u64,
    limit: u64,
    stop: &CancellationToken,
) -> ToolResult {
    let root = workspace_root(workspace)?;
    let abs = resolve(&root, &[extra_root(outputs_dir)], raw)?;
    let name = shown(&root, &abs);
    let meta = fs::metadata(&abs).map_err(|e| io_error("read", &name, &e))?;
    if meta.is_dir() {
        return Err(ToolError::failed(format!(
            "{name} is a directory; use list_dir to see what it contains"
        )));
    }
    let mut file = File::open(&abs).map_err(|e| io_error("read", &name, &e))?;
    let mut head = Vec::with_capacity(BINARY_SNIFF_BYTES);
    (&mut file)
        .take(BINARY_SNIFF_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(|e| io_error("read", &name, &e))?;
    if is_binary(&head) {
        return Err(ToolError::failed(format!(
            "{name} is a binary file (it contains NUL bytes); read_file only reads text"
        )));
    }
    file.rewind().map_err(|e| io_error("read", &name, &e))?;
    let mut reader = BufReader::with_capacity(16 * 1024, file);

    let last_wanted = offset.saturating_add(limit - 1);
    let mut content = String::new();
    let mut buf = Vec::new();
    let mut line_no: u64 = 0;
    let mut end_line = offset - 1;
    let mut clipped = 0u64;
    let mut budget_hit = false;
    while let Some(len) = next_line(&mut reader, &mut buf, READ_MAX_LINE_BYTES)
        .map_err(|e| io_error("read", &name, &e))?
    {
        line_no += 1;
        if line_no.is_multiple_of(4096) && stop.is_cancelled() {
            return Err(stopped());
        }
        let was_clipped = len > buf.len();
        let text = match std::str::from_utf8(&buf) {
            Ok(t) => t,
            // A clipped line may end inside a character: keep the valid prefix.
            Err(e) if was_clipped && e.error_len().is_none() => {
                std::str::from_utf8(&buf[..e.valid_up_to()]).unwrap_or_default()
            }
            Err(_) => {
                return Err(ToolError::failed(format!(
                    "{name} is not a UTF-8 text file (invalid UTF-8 on line {line_no}); read_file only reads text"
                )))
            }
        };
        if line_no < offset || line_no > last_wanted || budget_hit {
            continue;
        }
        let _ = write!(content, "{line_no:>6}\t{text}");
        if was_clipped {
            clipped += 1;
            let _ = write!(content, " …[line clipped: {len} bytes in total]");
        }
        content.push('\n');
        end_line = line_no;
        budget_hit = content.len() >= READ_MAX_BYTES;
    }
    let total_lines = line_no;
    if offset > total_lines && !(offset == 1 && total_lines == 0) {
        return Err(ToolError::failed(format!(
            "offset {offset} is past the end of {name}, which has {total_lines} lines"
        )));
    }
    let truncated = end_line < total_lines;
    let mut out = ToolOk::new();
    out.insert("path".into(), json!(name));
    out.insert("content".into(), json!(content));
    out.insert("total_lines".into(), json!(total_lines));
    out.insert("start_line".into(), json!(offset));
    out.insert("end_line".into(), json!(end_line));
    out.insert("truncated".into(), json!(truncated));
    let mut notes = Vec::new();
    if total_lines == 0 {
        notes.push("the file is empty".to_owned());
    }
    if truncated {
        out.insert("next_offset".into(), json!(end_line + 1));
        notes.push(format!(
            "showing lines {offset}-{end_line} of {total_lines}; call read_file with offset={} to continue",
            end_line + 1
        ));
    }
    if clipped > 0 {
        out.insert("clipped_lines".into(), json!(clipped));
        notes.push(format!(
            "{clipped} lines longer than {READ_MAX_LINE_BYTES} bytes were clipped"
        ));
    }
    if !notes.is_empty() {
        out.insert("note".into(), json!(notes.join("; ")));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// write_file

/// Creates or replaces a file with the given content.
pub struct WriteFile {
    spec: ToolSpec,
}

impl Default for WriteFile {
    fn default() -> Self {
        Self::new()
    }
}

impl WriteFile {
    pub fn new() -> Self {
        let description = "- Creates a file, or replaces an existing file's whole content, in the workspace.\n\
             - Creates missing parent directories; the write is atomic and keeps an existing file's permissions.\n\
             - Prefer patch_file for changing part of an existing file.\n\
             - Returns path, bytes_written and created (false when an existing file was replaced).";
        let parameters = object_schema(
            json!({
                "path": {
                    "type": "string",
                    "description": "File to write: relative to the workspace, or absolute inside it."
                },
                "content": {
                    "type": "string",
                    "description": "The complete new content of the file."
                }
            }),
            &["path", "content"],
        );
        WriteFile {
            spec: ToolSpec::builtin("write_file", description, parameters, ApprovalClass::Write),
        }
    }
}

impl Tool for WriteFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async move {
            let path = str_arg(&args, "path")?.to_owned();
            let content = str_arg(&args, "content")?.to_owned();
            run_blocking(&ctx.cancel, move |_| {
                write_file(&ctx.workspace, &path, &content)
            })
            .await
        })
    }
}

fn write_file(workspace: &Path, raw: &str, content: &str) -> ToolResult {
    let root = workspace_root(workspace)?;
    let abs = resolve(&root, &[], raw)?;
    let name = shown(&root, &abs);
    let keep = match fs::metadata(&abs) {
        Ok(m) if m.is_dir() => {
            return Err(ToolError::failed(format!(
                "{name} is a directory; give the path of a file"
            )))
        }
        Ok(m) => Some(m.permissions()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_error("write", &name, &e)),
    };
    if let Some(parent) = abs.parent() {
        fs::create_dir_all(parent).map_err(|e| {
            ToolError::failed(format!(
                "cannot create the parent directories of {name}: {e}"
            ))
        })?;
    }
    let created = keep.is_none();
    atomic_write(&abs, content.as_bytes(), keep).map_err(|e| io_error("write", &name, &e))?;
    let mut out = ToolOk::new();
    out.insert("path".into(), json!(name));
    out.insert("bytes_written".into(), json!(content.len()));
    out.insert("created".into(), json!(created));
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// patch_file

/// Replaces an exact string in a file.
pub struct PatchFile {
    spec: ToolSpec,
}

impl Default for PatchFile {
    fn default() -> Self {
        Self::new()
    }
}

impl PatchFile {
    pub fn new() -> Self {
        let description = "- Edits a text file in the workspace by replacing an exact string: old_string becomes new_string.\n\
             - old_string must match the file exactly (whitespace and indentation included) and exactly once; include enough surrounding lines to make it unique, or set replace_all to change every occurrence.\n\
             - Read the file with read_file first; do not include the line-number prefixes in old_string.\n\
             - The write is atomic and keeps the file's permissions. Returns path, replacements and first_line (the line where the first replacement starts).";
        let parameters = object_schema(
            json!({
                "path": {
                    "type": "string",
                    "description": "File to edit: relative to the workspace, or absolute inside it."
                },
                "old_string": {
                    "type": "string",
                    "description": "The exact text to replace; must not be empty.",
                    "minLength": 1
                },
                "new_string": {
                    "type": "string",
                    "description": "The replacement text; must differ from old_string (may be empty to delete)."
                },
                "replace_all": {
                    "type": "boolean",
                    "description": "Replace every occurrence instead of requiring exactly one.",
                    "default": false
                }
            }),
            &["path", "old_string", "new_string"],
        );
        PatchFile {
            spec: ToolSpec::builtin("patch_file", description, parameters, ApprovalClass::Write),
        }
    }
}

impl Tool for PatchFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async move {
            let path = str_arg(&args, "path")?.to_owned();
            let old = str_arg(&args, "old_string")?.to_owned();
            let new = str_arg(&args, "new_string")?.to_owned();
            let replace_all = bool_arg(&args, "replace_all", false)?;
            if old.is_empty() {
                return Err(ToolError::invalid("old_string must not be empty"));
            }
            if old == new {
                return Err(ToolError::invalid(
                    "old_string and new_string are identical; nothing to change",
                ));
            }
            run_blocking(&ctx.cancel, move |_| {
                patch_file(&ctx.workspace, &path, &old, &new, replace_all)
            })
            .await
        })
    }
}

fn patch_file(workspace: &Path, raw: &str, old: &str, new: &str, replace_all: bool) -> ToolResult {
    let root = workspace_root(workspace)?;
    let abs = resolve(&root, &[], raw)?;
    let name = shown(&root, &abs);
    let meta = fs::metadata(&abs).map_err(|e| io_error("patch", &name, &e))?;
    if meta.is_dir() {
        return Err(ToolError::failed(format!(
            "{name} is a directory, not a file"
        )));
    }
    let bytes = fs::read(&abs).map_err(|e| io_error("patch", &name, &e))?;
    if is_binary(&bytes) {
        return Err(ToolError::failed(format!(
            "{name} is a binary file; patch_file only edits text"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        ToolError::failed(format!(
            "{name} is not valid UTF-8; patch_file only edits text"
        ))
    })?;
    let count = text.matches(old).count();
    if count == 0 {
        let hint = if text.contains("\r\n") && old.contains('\n') && !old.contains("\r\n") {
            " (the file has CRLF line endings; old_string must contain \\r\\n)"
        } else {
            ""
        };
        return Err(ToolError::failed(format!(
            "old_string not found in {name}{hint}"
        )));
    }
    if count > 1 && !replace_all {
        return Err(ToolError::failed(format!(
            "old_string matches {count} times in {name}; add more context or set replace_all"
        ))
        .with_field("matches", count));
    }
    let first_line = text
        .find(old)
        .map_or(1, |i| text[..i].matches('\n').count() + 1);
    let patched = if replace_all {
        text.replace(old, new)
    } else {
        text.replacen(old, new, 1)
    };
    atomic_write(&abs, patched.as_bytes(), Some(meta.permissions()))
        .map_err(|e| io_error("write", &name, &e))?;
    let mut out = ToolOk::new();
    out.insert("path".into(), json!(name));
    out.insert("replacements".into(), json!(count));
    out.insert("first_line".into(), json!(first_line));
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// list_dir

/// Lists a directory tree, depth-limited.
pub struct ListDir {
    spec: ToolSpec,
}

impl Default for ListDir {
    fn default() -> Self {
        Self::new()
    }
}

impl ListDir {
    pub fn new() -> Self {
        let description = format!(
            "- Lists files and directories under a directory of the workspace, recursively up to depth levels (depth 1 = direct entries only).\n\
             - Use it to explore a project's layout; use search_files to find text inside files.\n\
             - Returns entries: one path per line, relative to the workspace and sorted; directories end with \"/\", symbolic links show \"-> target\" and are not followed; .git is skipped.\n\
             - Lists at most {LIST_MAX_ENTRIES} entries (truncated: true when more exist; list a subdirectory or lower depth)."
        );
        let parameters = object_schema(
            json!({
                "path": {
                    "type": "string",
                    "description": "Directory to list: relative to the workspace, or absolute inside it.",
                    "default": "."
                },
                "depth": {
                    "type": "integer",
                    "description": "How many levels to descend; 1 lists only the directory's own entries.",
                    "minimum": 1,
                    "maximum": LIST_MAX_DEPTH,
                    "default": LIST_DEFAULT_DEPTH
                }
            }),
            &[],
        );
        ListDir {
            spec: ToolSpec::builtin(
                "list_dir",
                &description,
                parameters,
                ApprovalClass::ReadOnly,
            ),
        }
    }
}

impl Tool for ListDir {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async move {
            let path = opt_str_arg(&args, "path")?.unwrap_or(".").to_owned();
            let depth = int_arg(&args, "depth", LIST_DEFAULT_DEPTH, 1, LIST_MAX_DEPTH)?;
            run_blocking(&ctx.cancel, move |stop| {
                list_dir(&ctx.workspace, &path, depth, LIST_MAX_ENTRIES, stop)
            })
            .await
        })
    }
}

fn list_dir(
    workspace: &Path,
    raw: &str,
    depth: u64,
    max_entries: usize,
    stop: &CancellationToken,
) -> ToolResult {
    let root = workspace_root(workspace)?;
    let abs = resolve(&root, &[], raw)?;
    let name = shown(&root, &abs);
    let meta = fs::metadata(&abs).map_err(|e| io_error("list", &name, &e))?;
    if !meta.is_dir() {
        return Err(ToolError::failed(format!(
            "{name} is not a directory; use read_file to read a file"
        )));
    }
    // Breadth first, so a truncated listing still shows the upper levels completely; sorted
    // by path components afterwards, which gives tree order.
    let mut entries: Vec<(PathBuf, String)> = Vec::new();
    let mut queue = VecDeque::from([(abs.clone(), 1u64)]);
    let mut truncated = false;
    let mut unreadable = 0u64;
    'walk: while let Some((dir, level)) = queue.pop_front() {
        if stop.is_cancelled() {
            return Err(stopped());
        }
        let read = match fs::read_dir(&dir) {
            Ok(r) => r,
            Err(e) if dir == abs => return Err(io_error("list", &name, &e)),
            Err(_) => {
                unreadable += 1;
                continue;
            }
        };
        let mut children: Vec<(std::ffi::OsString, fs::FileType)> = read
            .filter_map(Result::ok)
            .filter_map(|e| e.file_type().ok().map(|t| (e.file_name(), t)))
            .filter(|(n, _)| n != ".git")
            .collect();
        children.sort_by(|a, b| a.0.cmp(&b.0));
        for (child, kind) in children {
            if entries.len() >= max_entries {
                truncated = true;
                break 'walk;
            }
            let path = dir.join(&child);
            let rel = shown(&root, &path);
            let line = if kind.is_dir() {
                format!("{rel}/")
            } else if kind.is_symlink() {
                match fs::read_link(&path) {
                    Ok(target) => format!("{rel} -> {}", target.display()),
                    Err(_) => rel,
                }
            } else {
                rel
            };
            if kind.is_dir() && level < depth {
                queue.push_back((path.clone(), level + 1));
            }
            entries.push((path, line));
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let listing: Vec<String> = entries.into_iter().map(|(_, l)| l).collect();
    let mut out = ToolOk::new();
    out.insert("path".into(), json!(name));
    out.insert("depth".into(), json!(depth));
    out.insert("count".into(), json!(listing.len()));
    out.insert("entries".into(), json!(listing.join("\n")));
    out.insert("truncated".into(), json!(truncated));
    let mut notes = Vec::new();
    if listing.is_empty() {
        notes.push("the directory is empty".to_owned());
    }
    if truncated {
        notes.push(format!(
            "stopped at {max_entries} entries; list a subdirectory or use a smaller depth"
        ));
    }
    if unreadable > 0 {
        notes.push(format!("{unreadable} subdirectories could not be read"));
    }
    if !notes.is_empty() {
        out.insert("note".into(), json!(notes.join("; ")));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// search_files

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
    use std::os::unix::fs::symlink;

    use serde_json::json;

    use super::*;
    use crate::protocol::ErrorKind;
    use crate::tools::test_support::{args, ctx};

    struct Ws {
        _dir: tempfile::TempDir,
        root: PathBuf,
    }

    impl Ws {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let root = fs::canonicalize(dir.path()).unwrap();
            Ws { _dir: dir, root }
        }
        fn write(&self, rel: &str, content: impl AsRef<[u8]>) {
            let p = self.root.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, content).unwrap();
        }
        fn read(&self, rel: &str) -> String {
            fs::read_to_string(self.root.join(rel)).unwrap()
        }
        async fn call(&self, tool: &dyn Tool, a: Value) -> ToolResult {
            tool.call(args(a), ctx(&self.root)).await
        }
    }

    fn read_tool() -> ReadFile {
        ReadFile::new(Path::new("/nonexistent/outputs"))
    }

    fn assert_escape(r: ToolResult, raw: &str) {
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArguments, "{}", e.message);
        assert!(
            e.message
                .starts_with(&format!("path escapes the workspace: {raw} ")),
            "{}",
            e.message
        );
    }

    // read_file

    #[tokio::test]
    async fn read_file_numbers_lines_and_pages() {
        let ws = Ws::new();
        ws.write("a.txt", "one\ntwo\nthree\nfour\n");
        let r = ws
            .call(&read_tool(), json!({"path": "a.txt"}))
            .await
            .unwrap();
        assert_eq!(
            Value::Object(r),
            json!({"path": "a.txt", "content": "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n",
                   "total_lines": 4, "start_line": 1, "end_line": 4, "truncated": false})
        );
        let r = ws
            .call(
                &read_tool(),
                json!({"path": "a.txt", "offset": 2, "limit": 2}),
            )
            .await
            .unwrap();
        assert_eq!(r["content"], "     2\ttwo\n     3\tthree\n");
        assert_eq!(
            (r["start_line"].clone(), r["end_line"].clone()),
            (json!(2), json!(3))
        );
        assert_eq!(r["truncated"], true);
        assert_eq!(r["next_offset"], 4);
        assert!(r["note"].as_str().unwrap().contains("offset=4"));
    }

    #[tokio::test]
    async fn read_file_without_final_newline_and_empty_file() {
        let ws = Ws::new();
        ws.write("a.txt", "x\ny");
        ws.write("empty.txt", "");
        let r = ws
            .call(&read_tool(), json!({"path": "a.txt"}))
            .await
            .unwrap();
        assert_eq!(r["content"], "     1\tx\n     2\ty\n");
        assert_eq!(r["total_lines"], 2);
        let r = ws
            .call(&read_tool(), json!({"path": "empty.txt"}))
            .await
            .unwrap();
        assert_eq!(r["content"], "");
        assert_eq!(r["total_lines"], 0);
        assert_eq!(r["note"], "the file is empty");
    }

    #[tokio::test]
    async fn read_file_offset_past_end_fails() {
        let ws = Ws::new();
        ws.write("a.txt", "x\n");
        let e = ws
            .call(&read_tool(), json!({"path": "a.txt", "offset": 5}))
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "offset 5 is past the end of a.txt, which has 1 lines"
        );
    }

    #[tokio::test]
    async fn read_file_clips_long_lines() {
        let ws = Ws::new();
        ws.write("long.txt", format!("{}\nshort\n", "é".repeat(3000)));
        let r = ws
            .call(&read_tool(), json!({"path": "long.txt"}))
            .await
            .unwrap();
        let content = r["content"].as_str().unwrap();
        let first = content.lines().next().unwrap();
        assert!(
            first.ends_with(" …[line clipped: 6000 bytes in total]"),
            "{first}"
        );
        assert!(first.len() < READ_MAX_LINE_BYTES + 100);
        assert!(content.ends_with("     2\tshort\n"));
        assert_eq!(r["clipped_lines"], 1);
    }

    #[tokio::test]
    async fn read_file_refuses_binary_and_invalid_utf8() {
        let ws = Ws::new();
        ws.write("bin.dat", b"abc\0def");
        ws.write("latin1.txt", b"caf\xe9\n");
        let e = ws
            .call(&read_tool(), json!({"path": "bin.dat"}))
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "bin.dat is a binary file (it contains NUL bytes); read_file only reads text"
        );
        let e = ws
            .call(&read_tool(), json!({"path": "latin1.txt"}))
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "latin1.txt is not a UTF-8 text file (invalid UTF-8 on line 1); read_file only reads text"
        );
    }

    #[tokio::test]
    async fn read_file_refuses_escapes() {
        let ws = Ws::new();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret.txt"), "s").unwrap();
        symlink(outside.path().join("secret.txt"), ws.root.join("link.txt")).unwrap();
        let abs = outside.path().join("secret.txt").display().to_string();
        assert_escape(
            ws.call(&read_tool(), json!({"path": "../x.txt"})).await,
            "../x.txt",
        );
        assert_escape(ws.call(&read_tool(), json!({"path": abs})).await, &abs);
        assert_escape(
            ws.call(&read_tool(), json!({"path": "link.txt"})).await,
            "link.txt",
        );
    }

    #[tokio::test]
    async fn read_file_reads_spilled_outputs_by_absolute_path() {
        let ws = Ws::new();
        let outputs = tempfile::tempdir().unwrap();
        let spilled = outputs.path().join("call_1.txt");
        fs::write(&spilled, "big\noutput\n").unwrap();
        let tool = ReadFile::new(outputs.path());
        let r = ws
            .call(
                &tool,
                json!({"path": spilled.display().to_string(), "offset": 2}),
            )
            .await
            .unwrap();
        assert_eq!(r["content"], "     2\toutput\n");
    }

    #[tokio::test]
    async fn read_file_names_missing_files_and_directories() {
        let ws = Ws::new();
        fs::create_dir(ws.root.join("d")).unwrap();
        let e = ws
            .call(&read_tool(), json!({"path": "nope.txt"}))
            .await
            .unwrap_err();
        assert_eq!(e.message, "cannot read nope.txt: no such file or directory");
        let e = ws
            .call(&read_tool(), json!({"path": "d"}))
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "d is a directory; use list_dir to see what it contains"
        );
    }

    // write_file

    #[tokio::test]
    async fn write_file_creates_parents_then_replaces_keeping_permissions() {
        let ws = Ws::new();
        let r = ws
            .call(
                &WriteFile::new(),
                json!({"path": "a/b/c.sh", "content": "echo 1\n"}),
            )
            .await
            .unwrap();
        assert_eq!(
            Value::Object(r),
            json!({"path": "a/b/c.sh", "bytes_written": 7, "created": true})
        );
        assert_eq!(ws.read("a/b/c.sh"), "echo 1\n");
        fs::set_permissions(ws.root.join("a/b/c.sh"), Permissions::from_mode(0o751)).unwrap();
        let r = ws
            .call(
                &WriteFile::new(),
                json!({"path": "a/b/c.sh", "content": "echo 22\n"}),
            )
            .await
            .unwrap();
        assert_eq!(r["created"], false);
        assert_eq!(ws.read("a/b/c.sh"), "echo 22\n");
        let mode = fs::metadata(ws.root.join("a/b/c.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o751);
        // No temporary files are left behind.
        let names: Vec<_> = fs::read_dir(ws.root.join("a/b"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["c.sh"]);
    }

    #[tokio::test]
    async fn write_file_new_files_are_not_private() {
        let ws = Ws::new();
        ws.call(&WriteFile::new(), json!({"path": "n.txt", "content": ""}))
            .await
            .unwrap();
        let mode = fs::metadata(ws.root.join("n.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o600, 0o600);
        assert_ne!(
            mode & 0o044,
            0,
            "new files get 0666 minus the umask, not tempfile's 0600"
        );
    }

    #[tokio::test]
    async fn write_file_refuses_escapes_and_directories() {
        let ws = Ws::new();
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path(), ws.root.join("out")).unwrap();
        let abs = outside.path().join("x.txt").display().to_string();
        let w = WriteFile::new();
        assert_escape(
            ws.call(&w, json!({"path": "../x.txt", "content": "x"}))
                .await,
            "../x.txt",
        );
        assert_escape(
            ws.call(&w, json!({"path": "new/../../x.txt", "content": "x"}))
                .await,
            "new/../../x.txt",
        );
        assert_escape(
            ws.call(&w, json!({"path": abs, "content": "x"})).await,
            &abs,
        );
        assert_escape(
            ws.call(&w, json!({"path": "out/x.txt", "content": "x"}))
                .await,
            "out/x.txt",
        );
        assert!(fs::read_dir(outside.path()).unwrap().next().is_none());
        let e = ws
            .call(&w, json!({"path": ".", "content": "x"}))
            .await
            .unwrap_err();
        assert_eq!(e.message, ". is a directory; give the path of a file");
    }

    // patch_file

    #[tokio::test]
    async fn patch_file_replaces_one_exact_match() {
        let ws = Ws::new();
        ws.write("m.rs", "fn a() {}\nfn b() {}\n");
        let r = ws
            .call(
                &PatchFile::new(),
                json!({"path": "m.rs", "old_string": "fn b() {}", "new_string": "fn c() {}"}),
            )
            .await
            .unwrap();
        assert_eq!(
            Value::Object(r),
            json!({"path": "m.rs", "replacements": 1, "first_line": 2})
        );
        assert_eq!(ws.read("m.rs"), "fn a() {}\nfn c() {}\n");
    }

    #[tokio::test]
    async fn patch_file_zero_and_multiple_matches_fail_clearly() {
        let ws = Ws::new();
        ws.write("m.txt", "x = 1\nx = 1\n");
        let p = PatchFile::new();
        let e = ws
            .call(
                &p,
                json!({"path": "m.txt", "old_string": "y", "new_string": "z"}),
            )
            .await
            .unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (ErrorKind::Failed, "old_string not found in m.txt")
        );
        let e = ws
            .call(
                &p,
                json!({"path": "m.txt", "old_string": "x = 1", "new_string": "x = 2"}),
            )
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "old_string matches 2 times in m.txt; add more context or set replace_all"
        );
        assert_eq!(ws.read("m.txt"), "x = 1\nx = 1\n");
        let r = ws
            .call(&p, json!({"path": "m.txt", "old_string": "x = 1", "new_string": "x = 2", "replace_all": true}))
            .await
            .unwrap();
        assert_eq!(r["replacements"], 2);
        assert_eq!(ws.read("m.txt"), "x = 2\nx = 2\n");
    }

    #[tokio::test]
    async fn patch_file_rejects_empty_and_identical_strings() {
        let ws = Ws::new();
        ws.write("m.txt", "abc");
        let p = PatchFile::new();
        let e = ws
            .call(
                &p,
                json!({"path": "m.txt", "old_string": "", "new_string": "z"}),
            )
            .await
            .unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (ErrorKind::InvalidArguments, "old_string must not be empty")
        );
        let e = ws
            .call(
                &p,
                json!({"path": "m.txt", "old_string": "a", "new_string": "a"}),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArguments);
    }

    #[tokio::test]
    async fn patch_file_hints_at_crlf_and_refuses_escapes() {
        let ws = Ws::new();
        ws.write("w.txt", "a\r\nb\r\n");
        let p = PatchFile::new();
        let e = ws
            .call(
                &p,
                json!({"path": "w.txt", "old_string": "a\nb", "new_string": "c"}),
            )
            .await
            .unwrap_err();
        assert!(e.message.contains("CRLF"), "{}", e.message);
        assert_escape(
            ws.call(
                &p,
                json!({"path": "/etc/hostname", "old_string": "a", "new_string": "b"}),
            )
            .await,
            "/etc/hostname",
        );
    }

    // list_dir

    #[tokio::test]
    async fn list_dir_sorts_marks_dirs_skips_git_and_limits_depth() {
        let ws = Ws::new();
        ws.write("b.txt", "");
        ws.write("a/z.txt", "");
        ws.write("a/deep/x.txt", "");
        ws.write("a-b.txt", "");
        ws.write(".git/HEAD", "");
        ws.write(".env", "");
        symlink("b.txt", ws.root.join("l")).unwrap();
        let r = ws.call(&ListDir::new(), json!({})).await.unwrap();
        assert_eq!(
            Value::Object(r),
            json!({"path": ".", "depth": 2, "count": 7, "truncated": false,
                   "entries": ".env\na/\na/deep/\na/z.txt\na-b.txt\nb.txt\nl -> b.txt"})
        );
        let r = ws
            .call(&ListDir::new(), json!({"path": "a", "depth": 1}))
            .await
            .unwrap();
        assert_eq!(r["entries"], "a/deep/\na/z.txt");
    }

    #[tokio::test]
    async fn list_dir_truncates_breadth_first() {
        let ws = Ws::new();
        ws.write("sub/inner.txt", "");
        for i in 0..5 {
            ws.write(&format!("f{i}.txt"), "");
        }
        let r = list_dir(&ws.root, ".", 2, 4, &CancellationToken::new()).unwrap();
        assert_eq!(r["entries"], "f0.txt\nf1.txt\nf2.txt\nf3.txt");
        assert_eq!(r["truncated"], true);
        assert!(r["note"]
            .as_str()
            .unwrap()
            .starts_with("stopped at 4 entries"));
    }

    #[tokio::test]
    async fn list_dir_refuses_files_and_escapes() {
        let ws = Ws::new();
        ws.write("f.txt", "");
        let e = ws
            .call(&ListDir::new(), json!({"path": "f.txt"}))
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "f.txt is not a directory; use read_file to read a file"
        );
        assert_escape(ws.call(&ListDir::new(), json!({"path": ".."})).await, "..");
    }

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
