//! `read_file`: a window of numbered lines of a text file.

use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read, Seek};
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::super::paths::{open_workspace, resolve_target, Root};
use super::super::{int_arg, object_schema, run_blocking, stopped, str_arg};
use super::{is_binary, open_regular, BINARY_SNIFF_BYTES};
use crate::catalog::ToolSpec;
use crate::protocol::ApprovalClass;
use crate::protocol::ToolOutput;
use crate::registry::{CallContext, Tool, ToolError, ToolResult};

/// `read_file`: lines returned when `limit` is not given.
pub const READ_DEFAULT_LIMIT: u64 = 2000;
/// `read_file`: the largest `limit` accepted.
pub const READ_MAX_LIMIT: u64 = 10_000;
/// `read_file`: lines longer than this many bytes are clipped in the output.
pub const READ_MAX_LINE_BYTES: usize = 2000;
/// `read_file`: the output stops after about this many bytes (well under the host's output
/// cap, so paging through a spilled output never spills again).
pub const READ_MAX_BYTES: usize = 256 * 1024;

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
    let root = open_workspace(workspace)?;
    // The outputs directory is opened only for an absolute path outside the workspace (and
    // may not exist yet, when nothing has been spilled).
    let extras: Vec<Root> = if Path::new(raw).is_absolute() {
        Root::open(outputs_dir).into_iter().collect()
    } else {
        Vec::new()
    };
    let target = resolve_target(&root, &extras, raw)?;
    let name = target.shown.as_str();
    let mut file = open_regular(
        target.root(&root, &extras),
        &target,
        "read",
        "; use list_dir to see what it contains",
    )?;
    let mut head = Vec::with_capacity(BINARY_SNIFF_BYTES);
    (&mut file)
        .take(BINARY_SNIFF_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(|e| target.error("read", &e))?;
    if is_binary(&head) {
        return Err(ToolError::failed(format!(
            "{name} is a binary file (it contains NUL bytes); read_file only reads text"
        )));
    }
    file.rewind().map_err(|e| target.error("read", &e))?;
    let mut reader = BufReader::with_capacity(16 * 1024, file);

    let last_wanted = offset.saturating_add(limit - 1);
    let mut content = String::new();
    let mut buf = Vec::new();
    let mut line_no: u64 = 0;
    let mut end_line = offset - 1;
    let mut clipped = 0u64;
    let mut budget_hit = false;
    while let Some(len) = next_line(&mut reader, &mut buf, READ_MAX_LINE_BYTES)
        .map_err(|e| target.error("read", &e))?
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
    let mut out = Map::new();
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
    Ok(ToolOutput::from_fields(out))
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;

    use serde_json::{json, Value};

    use super::*;

    use crate::tools::fs::test_support::{assert_escape, read_tool, Ws};

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
}
