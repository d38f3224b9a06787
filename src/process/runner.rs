//! One way to run a program for a call: `bash` and custom tool programs both go through
//! [`run`]. The program gets its own process group, a scrubbed environment plus the given
//! variables, the given bytes on stdin (then end of file), and its stdout/stderr are read
//! concurrently, kept within a cap and handed to a [`Sink`] as they arrive. When the run
//! ends — exit, timeout, cancel, or the future being dropped — the whole group and every
//! escaped process carrying the run's cookie is killed (see the module invariant).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitStatus;
use std::time::Duration;

use futures::{Stream as FutStream, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::bounded_lines::read_line_bounded;

/// What to run and how.
#[derive(Debug, Clone)]
pub struct Spec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub cwd: PathBuf,
    /// Added on top of the allow-listed part of the daemon's environment.
    pub env: Vec<(OsString, OsString)>,
    /// Written to stdin, then end of file; `None` gives the program a closed stdin.
    pub stdin: Option<Vec<u8>>,
    /// Kill the group after this long.
    pub timeout: Option<Duration>,
    /// Bytes kept of each of stdout and stderr for the [`Outcome`] (half head, half tail).
    pub output_cap: usize,
    /// `Some(max)`: stdout goes to the sink one line at a time (at most `max` bytes of each
    /// line are kept; the rest is dropped), for programs that speak JSON lines. `None`: in
    /// chunks as read.
    pub stdout_lines: Option<usize>,
    /// After the program exits, how long background processes may hold its pipes open.
    pub exit_grace: Duration,
    /// The Landlock ruleset the program restricts itself with before exec (and its
    /// `TMPDIR`), prepared by [`crate::sandbox::plan`].
    pub confine: Option<crate::sandbox::Confinement>,
}

impl Spec {
    pub fn new(program: impl Into<PathBuf>, cwd: impl Into<PathBuf>) -> Self {
        Spec {
            program: program.into(),
            args: Vec::new(),
            cwd: cwd.into(),
            env: Vec::new(),
            stdin: None,
            timeout: None,
            output_cap: 4 * 1024 * 1024,
            stdout_lines: None,
            exit_grace: Duration::from_millis(200),
            confine: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Receives output as it arrives. `next_flush`/`flush` let a sink batch what it received
/// and be woken at a time of its choosing (bash streams at most every 100 ms).
pub trait Sink: Send {
    fn output(&mut self, stream: Stream, data: &[u8]);
    /// The sink has the run's answer (a custom tool's first `result` line): the run ends
    /// at once with [`End::Answered`], and the program is ended the way a cancel ends it.
    fn answered(&self) -> bool {
        false
    }
    fn next_flush(&self) -> Option<Instant> {
        None
    }
    fn flush(&mut self) {}
    /// More input for the program, written to its stdin after [`Spec::stdin`] as it comes;
    /// stdin is closed once the feed ends. Taken once, when the program starts; `None`
    /// (the default) closes stdin after [`Spec::stdin`].
    fn stdin_feed(&mut self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>> {
        None
    }
}

/// A sink that only keeps the capped copies in the [`Outcome`].
pub struct Discard;
impl Sink for Discard {
    fn output(&mut self, _: Stream, _: &[u8]) {}
}

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The program exited and its pipes closed.
    Exited(ExitStatus),
    /// The program exited but background processes held its pipes past the exit grace.
    ExitedPipesHeld(ExitStatus),
    TimedOut,
    Cancelled,
    /// The sink had its answer while the program still ran ([`Sink::answered`]).
    Answered,
}

/// The end of a run with the capped output.
#[derive(Debug)]
pub struct Outcome {
    pub end: End,
    pub stdout: Capture,
    pub stderr: Capture,
}

/// A capped copy of one stream: its beginning and its end; the middle is counted and dropped.
#[derive(Debug)]
pub struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    /// Bytes kept at each end.
    half: usize,
    total: u64,
}

impl Capture {
    pub fn new(cap: usize) -> Self {
        Capture {
            head: Vec::new(),
            tail: VecDeque::new(),
            half: cap / 2,
            total: 0,
        }
    }

    pub fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        let to_head = self.half.saturating_sub(self.head.len()).min(data.len());
        self.head.extend_from_slice(&data[..to_head]);
        self.tail.extend(&data[to_head..]);
        if self.tail.len() > self.half {
            let excess = self.tail.len() - self.half;
            self.tail.drain(..excess);
        }
    }

    /// Bytes seen in all.
    #[cfg(test)]
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes seen but not kept.
    pub fn dropped(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// What was kept, with a marker where the middle was dropped.
    pub fn text(&self) -> String {
        let dropped = self.dropped();
        if dropped == 0 {
            let mut all = self.head.clone();
            all.extend(self.tail.iter());
            return String::from_utf8_lossy(&all).into_owned();
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        format!(
            "{}\n…[{dropped} bytes omitted]…\n{}",
            String::from_utf8_lossy(&self.head),
            String::from_utf8_lossy(&tail)
        )
    }

    /// The last `n` lines kept (for error messages: "exit 1: <stderr tail>").
    pub fn tail_lines(&self, n: usize) -> String {
        let mut kept: Vec<u8> = self.head.clone();
        if self.dropped() > 0 {
            kept.clear();
        }
        kept.extend(self.tail.iter());
        let text = String::from_utf8_lossy(&kept);
        let text = text.trim_end_matches('\n');
        let mut lines: Vec<&str> = text.rsplit('\n').take(n).collect();
        lines.reverse();
        lines.join("\n")
    }
}

type Reader = Pin<Box<dyn FutStream<Item = Vec<u8>> + Send>>;

/// Chunks as they are read (cancel-safe: the stream keeps its own state between polls).
fn chunks<R: AsyncRead + Unpin + Send + 'static>(r: R) -> Reader {
    Box::pin(futures::stream::unfold(
        (r, vec![0u8; 64 * 1024]),
        |(mut r, mut buf)| async move {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => None,
                Ok(n) => Some((buf[..n].to_vec(), (r, buf))),
            }
        },
    ))
}

/// Whole lines through the shared bounded line reader.
fn lines<R: AsyncRead + Unpin + Send + 'static>(r: R, max: usize) -> Reader {
    Box::pin(futures::stream::unfold(
        (BufReader::new(r), Vec::new()),
        move |(mut r, mut buf)| async move {
            match read_line_bounded(&mut r, max, &mut buf).await {
                Ok(0) | Err(_) => None,
                Ok(_) => Some((buf.clone(), (r, buf))),
            }
        },
    ))
}

/// Runs `spec` to its end as a child of `processes`. Errors only when the program cannot be
/// started or waited for; a non-zero exit, a timeout and a cancel are [`End`]s with the
/// output so far.
pub async fn run(
    processes: &super::Processes,
    spec: Spec,
    cancel: &CancellationToken,
    sink: &mut (dyn Sink + Send),
) -> io::Result<Outcome> {
    let mut env = spec.env;
    if let Some(c) = &spec.confine {
        env.push(("TMPDIR".into(), c.tmpdir().into()));
    }
    let program = super::launch::Program {
        program: spec.program,
        args: spec.args,
        cwd: spec.cwd,
        env,
        piped_stdin: spec.stdin.is_some(),
        confine: spec.confine,
    };
    let ((mut child, pipes), guard) = processes.launch(program).await?;
    let super::launch::Pipes {
        stdin: stdin_pipe,
        stdout,
        stderr,
    } = pipes;
    let mut out_stream = match spec.stdout_lines {
        Some(max) => lines(stdout, max),
        None => chunks(stdout),
    };
    let mut err_stream = chunks(stderr);
    // Stdin is written alongside the reads, so a program that answers before reading all
    // of its input cannot deadlock us. A program that never reads it just gets EPIPE.
    let input = spec.stdin.unwrap_or_default();
    let mut feed = sink.stdin_feed();
    let mut write_stdin = std::pin::pin!(async move {
        if let Some(mut pipe) = stdin_pipe {
            let mut written = pipe.write_all(&input).await;
            while let (Ok(()), Some(more)) = (&written, feed.as_mut()) {
                match more.recv().await {
                    Some(bytes) => written = pipe.write_all(&bytes).await,
                    None => break,
                }
            }
            let _ = pipe.shutdown().await;
        }
    });
    let mut stdin_done = false;

    let mut out = Capture::new(spec.output_cap);
    let mut err = Capture::new(spec.output_cap);
    let (mut out_open, mut err_open) = (true, true);
    let mut status: Option<ExitStatus> = None;
    let mut exited_at: Option<Instant> = None;
    let deadline = spec.timeout.map(|t| Instant::now() + t);
    let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);

    let end = loop {
        if let Some(s) = status {
            if !out_open && !err_open {
                break End::Exited(s);
            }
        }
        let grace_end = exited_at.map(|t| t + spec.exit_grace);
        let flush_at = sink.next_flush();
        // Biased, in this order: a cancel or the deadline always ends the run, and output
        // that is ready is always read before the exit grace can end it — a loop starved
        // past the grace (a loaded machine) would otherwise end with the output still in
        // the pipe, as if background processes held it.
        tokio::select! {
            biased;
            () = cancel.cancelled() => break End::Cancelled,
            () = tokio::time::sleep_until(deadline.unwrap_or(far)), if deadline.is_some() => break End::TimedOut,
            () = tokio::time::sleep_until(flush_at.unwrap_or(far)), if flush_at.is_some() => sink.flush(),
            () = &mut write_stdin, if !stdin_done => stdin_done = true,
            chunk = out_stream.next(), if out_open => match chunk {
                None => out_open = false,
                Some(data) => {
                    out.push(&data);
                    sink.output(Stream::Stdout, &data);
                    if sink.answered() {
                        break End::Answered;
                    }
                }
            },
            chunk = err_stream.next(), if err_open => match chunk {
                None => err_open = false,
                Some(data) => {
                    err.push(&data);
                    sink.output(Stream::Stderr, &data);
                }
            },
            r = child.wait(), if status.is_none() => {
                status = Some(r?);
                exited_at = Some(Instant::now());
            },
            () = tokio::time::sleep_until(grace_end.unwrap_or(far)), if grace_end.is_some() => {
                if let Some(s) = status {
                    break End::ExitedPipesHeld(s);
                }
            },
        }
    };

    match (status, end) {
        (None, End::Answered) => {
            // The answer does not wait for the program. Most programs exit right after their
            // answer: given the exit grace to do so, their group then ends without a /proc
            // scan (see `GroupGuard`). One still running after it gets the TERM and its grace
            // like every member of its group; the leader is reaped in the background.
            let grace = spec.exit_grace;
            tokio::spawn(async move {
                let exited = tokio::time::timeout(grace, child.wait()).await.is_ok();
                drop(guard);
                if !exited {
                    let _ = child.wait().await;
                }
            });
        }
        // Whatever else happened, the group goes now: SIGTERM to every member at once
        // (SIGKILL follows from the guard's thread for anything that ignores it).
        (Some(_), _) => drop(guard),
        (None, _) => {
            drop(guard);
            // Reap the leader promptly so its group is really gone when we return.
            child.start_kill();
            let _ = tokio::time::timeout(Duration::from_millis(500), child.wait()).await;
        }
    }
    Ok(Outcome {
        end,
        stdout: out,
        stderr: err,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;
    use crate::process::Processes;

    /// Records every delivery, to check order and framing.
    #[derive(Default)]
    struct Record(Vec<(Stream, String)>);
    impl Sink for Record {
        fn output(&mut self, stream: Stream, data: &[u8]) {
            self.0
                .push((stream, String::from_utf8_lossy(data).into_owned()));
        }
    }

    fn sh(script: &str) -> Spec {
        let mut spec = Spec::new("sh", std::env::temp_dir());
        spec.args = vec!["-c".into(), script.into()];
        spec
    }

    /// Runs `spec` to its end with a daemon-less `Processes` and no cancellation.
    async fn finish(spec: Spec, sink: &mut (dyn Sink + Send)) -> Outcome {
        run(&Processes::default(), spec, &CancellationToken::new(), sink)
            .await
            .unwrap()
    }

    fn code(end: End) -> Option<i32> {
        match end {
            End::Exited(s) | End::ExitedPipesHeld(s) => s.code(),
            _ => None,
        }
    }

    #[tokio::test]
    async fn stdin_is_delivered_then_eof_and_lines_stream_in_order() {
        let mut spec = sh("while read -r l; do echo \"got $l\"; done; echo end");
        spec.stdin = Some(b"{\"a\":1}\nsecond".to_vec());
        spec.stdout_lines = Some(1024);
        let mut rec = Record::default();
        let o = finish(spec, &mut rec).await;
        assert_eq!(code(o.end), Some(0));
        // `read` returns false on the unterminated last line, so it is not echoed.
        assert_eq!(
            rec.0,
            vec![
                (Stream::Stdout, "got {\"a\":1}\n".to_owned()),
                (Stream::Stdout, "end\n".to_owned()),
            ]
        );
        assert_eq!(o.stdout.text(), "got {\"a\":1}\nend\n");
    }

    #[tokio::test]
    async fn lines_arrive_while_the_program_still_runs() {
        let mut spec = sh("echo one; sleep 0.3; echo two");
        spec.stdout_lines = Some(1024);
        struct Timed(Vec<(String, std::time::Instant)>);
        impl Sink for Timed {
            fn output(&mut self, _: Stream, data: &[u8]) {
                self.0.push((
                    String::from_utf8_lossy(data).into_owned(),
                    std::time::Instant::now(),
                ));
            }
        }
        let mut t = Timed(Vec::new());
        let o = finish(spec, &mut t).await;
        assert_eq!(code(o.end), Some(0));
        let texts: Vec<&str> = t.0.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(texts, ["one\n", "two\n"]);
        assert!(t.0[1].1 - t.0[0].1 >= Duration::from_millis(250));
    }

    #[tokio::test]
    async fn long_lines_are_cut_to_the_line_limit() {
        let mut spec = sh("head -c 100 /dev/zero | tr '\\0' x; echo; echo next");
        spec.stdout_lines = Some(10);
        let mut rec = Record::default();
        finish(spec, &mut rec).await;
        assert_eq!(
            rec.0,
            vec![
                (Stream::Stdout, "xxxxxxxxxx".to_owned()),
                (Stream::Stdout, "next\n".to_owned()),
            ]
        );
    }

    #[tokio::test]
    async fn exit_code_signal_and_stderr_tail() {
        let spec = sh("for i in 1 2 3 4 5; do echo line$i >&2; done; exit 7");
        let o = finish(spec, &mut Discard).await;
        assert_eq!(code(o.end), Some(7));
        assert_eq!(o.stderr.tail_lines(2), "line4\nline5");
        assert_eq!(o.stderr.tail_lines(10), "line1\nline2\nline3\nline4\nline5");
        let o = finish(sh("kill -9 $$"), &mut Discard).await;
        let End::Exited(s) = o.end else {
            panic!("{:?}", o.end)
        };
        assert_eq!(s.signal(), Some(9));
    }

    #[tokio::test]
    async fn caps_keep_head_and_tail_and_count_the_rest() {
        let mut spec =
            sh("printf HEAD; head -c 5000 /dev/zero | tr '\\0' x; printf TAIL >&2; printf TAIL");
        spec.output_cap = 100;
        let o = finish(spec, &mut Discard).await;
        assert_eq!(o.stdout.total(), 5008);
        assert_eq!(o.stdout.dropped(), 4908);
        let text = o.stdout.text();
        assert_eq!(
            text,
            format!(
                "HEAD{}\n…[4908 bytes omitted]…\n{}TAIL",
                "x".repeat(46),
                "x".repeat(46)
            )
        );
        assert_eq!(o.stderr.text(), "TAIL");
        assert_eq!(o.stderr.tail_lines(3), "TAIL");
    }

    #[tokio::test]
    async fn env_is_scrubbed_and_extended_and_cwd_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = std::fs::canonicalize(dir.path()).unwrap();
        let mut spec = sh("pwd; echo \"$EXTRA|${CARGO_PKG_NAME:-unset}\"");
        spec.cwd = cwd.clone();
        spec.env = vec![("EXTRA".into(), "yes".into())];
        let o = finish(spec, &mut Discard).await;
        assert_eq!(o.stdout.text(), format!("{}\nyes|unset\n", cwd.display()));
    }

    #[tokio::test]
    async fn timeout_and_cancel_end_the_run_with_partial_output() {
        let mut spec = sh("echo started; sleep 30");
        spec.timeout = Some(Duration::from_millis(200));
        let o = finish(spec, &mut Discard).await;
        assert_eq!(o.end, End::TimedOut);
        assert_eq!(o.stdout.text(), "started\n");
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            c.cancel();
        });
        let o = run(&Processes::default(), sh("sleep 30"), &cancel, &mut Discard)
            .await
            .unwrap();
        assert_eq!(o.end, End::Cancelled);
    }

    /// Output written before the exit is never lost to the exit grace: with no grace at
    /// all, the grace's timer and the output are ready together, and the output is read.
    #[tokio::test]
    async fn output_written_before_the_exit_outlives_a_zero_exit_grace() {
        for i in 0..40 {
            let mut spec = sh(&format!("echo {i}"));
            spec.exit_grace = Duration::ZERO;
            let o = finish(spec, &mut Discard).await;
            assert_eq!(o.stdout.text(), format!("{i}\n"), "run {i}");
            assert!(matches!(o.end, End::Exited(_)), "run {i}: {:?}", o.end);
        }
    }

    /// A program that ends on its own soon after its answer is left to do so (its group
    /// then ends without a /proc scan); only one still running after the exit grace gets
    /// the TERM.
    #[tokio::test]
    async fn after_its_answer_a_program_gets_the_exit_grace_to_end() {
        struct FirstLine(bool);
        impl Sink for FirstLine {
            fn output(&mut self, _: Stream, _: &[u8]) {
                self.0 = true;
            }
            fn answered(&self) -> bool {
                self.0
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let done = dir.path().join("done");
        let mut spec = sh(&format!(
            "echo answer; sleep 0.1; echo finished > '{}'",
            done.display()
        ));
        spec.stdout_lines = Some(1024);
        spec.exit_grace = Duration::from_secs(10);
        let o = finish(spec, &mut FirstLine(false)).await;
        assert_eq!(o.end, End::Answered);
        for _ in 0..500 {
            if std::fs::read_to_string(&done).is_ok_and(|t| t == "finished\n") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the program was ended before it could finish after its answer");
    }

    #[tokio::test]
    async fn a_program_that_cannot_start_is_an_error() {
        let spec = Spec::new("/nonexistent/toolhost-no-such-program", "/");
        let e = run(
            &Processes::default(),
            spec,
            &CancellationToken::new(),
            &mut Discard,
        )
        .await
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
