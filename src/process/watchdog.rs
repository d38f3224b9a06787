//! A tiny `sh` process that outlives a daemon killed with -9 just long enough to kill what
//! the daemon had running. `PR_SET_PDEATHSIG` only reaches direct children; without this,
//! a call's background grandchildren would run until the next daemon's ledger sweep.
//!
//! The daemon writes `+ <pgid>` / `- <pgid>` for every group it starts and ends on the
//! watchdog's stdin, and `+ <pid>@<starttime>` / `- <pid>@<starttime>` for every escaped
//! process it attributes to a group (the same sets as the ledger). When the daemon dies, for
//! whatever reason, the pipe reaches end of file: the watchdog SIGKILLs the groups still
//! listed (their live members pin the pgid numbers, so they were not reused), the listed
//! escapees that still have their start time, and every process carrying the daemon's
//! instance cookie, then exits. A clean shutdown tells it `q` to just exit.
//! It runs in its own process group, with a scrubbed environment and no cookie.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};

const SCRIPT: &str = r#"
trap '' HUP INT TERM
instance=$1
listed=' '
while read -r op it; do
  case "$op" in
    +) listed="$listed$it " ;;
    -) case "$listed" in *" $it "*) listed="${listed%%" $it "*} ${listed#*" $it "}" ;; esac ;;
    q) exit 0 ;;
  esac
done
for it in $listed; do
  case "$it" in
    *@*)
      p=${it%@*}
      read -r st < "/proc/$p/stat" 2>/dev/null || continue
      set -- ${st##*) }
      [ "${20}" = "${it#*@}" ] && kill -KILL "$p" 2>/dev/null ;;
    *) kill -KILL -- "-$it" 2>/dev/null ;;
  esac
done
for e in /proc/[0-9]*/environ; do
  if grep -qzxF "TOOLHOST_INSTANCE=$instance" "$e" 2>/dev/null; then
    p=${e#/proc/}; kill -KILL "${p%/environ}" 2>/dev/null
  fi
done
"#;

/// One daemon's watchdog: the `sh` process and the write end of its stdin.
pub(super) struct Watchdog {
    child: Child,
    stdin: ChildStdin,
}

impl Watchdog {
    /// Starts the watchdog for the daemon whose cookie is `instance`.
    pub(super) fn start(instance: &str) -> Option<Watchdog> {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", SCRIPT, "toolhost-watchdog", instance])
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        match cmd.spawn() {
            Ok(mut child) => match child.stdin.take() {
                Some(stdin) => Some(Watchdog { child, stdin }),
                None => {
                    let _ = child.kill();
                    None
                }
            },
            Err(e) => {
                tracing::warn!("cannot start the process watchdog: {e}");
                None
            }
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Tells the watchdog that a group (`<pgid>`) or an escapee (`<pid>@<starttime>`)
    /// started (`+`) or ended (`-`); false once it is gone.
    pub(super) fn tell(&mut self, op: char, item: &str) -> bool {
        // One `write` per line (`writeln!` on the unbuffered pipe made four per call).
        match self.stdin.write_all(format!("{op} {item}\n").as_bytes()) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("the process watchdog is gone: {e}");
                false
            }
        }
    }

    /// Ends the watchdog at a clean shutdown (after everything was killed) and waits for it.
    pub(super) fn stop(self) {
        let Watchdog {
            mut child,
            mut stdin,
        } = self;
        // `q`: quit without the kill pass, which would find nothing and only cost time.
        let _ = writeln!(stdin, "q");
        drop(stdin);
        let _ = child.wait();
    }
}
