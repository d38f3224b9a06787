//! The one thread that forks every child.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process;
//! tokio forks on whatever thread polls the spawn, and its blocking threads come and go. So
//! every spawn runs as a job on this thread, which never exits: the signal then fires exactly
//! when the daemon dies. Jobs run one at a time, which also makes "spawn and record the pid"
//! atomic with respect to the adopted-zombie scan (also run here).
//!
//! One thread per process, shared by every daemon in it: the thread a child's PDEATHSIG
//! follows must live as long as the process, whichever daemon asked for the child.

use std::io;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

type Job = Box<dyn FnOnce() + Send>;

static JOBS: OnceLock<Mutex<Option<mpsc::Sender<Job>>>> = OnceLock::new();

fn sender() -> io::Result<mpsc::Sender<Job>> {
    let slot = JOBS.get_or_init(|| Mutex::new(None));
    let mut slot = slot
        .lock()
        .map_err(|_| io::Error::other("spawner lock poisoned"))?;
    if let Some(tx) = slot.as_ref() {
        return Ok(tx.clone());
    }
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("toolhost-spawner".into())
        .spawn(move || {
            // The sender lives in a static, so this loop never ends while the process runs.
            while let Ok(job) = rx.recv() {
                // A panicking job must not take the thread (and every child's PDEATHSIG) down.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            }
        })?;
    *slot = Some(tx.clone());
    Ok(tx)
}

/// Runs `f` on the spawner thread inside the caller's tokio runtime (so tokio children
/// register with it) and returns its result.
pub async fn on_spawner<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    let handle = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    sender()?
        .send(Box::new(move || {
            let _entered = handle.enter();
            // If the caller is gone, the result is dropped here (a GroupGuard kills its group).
            let _ = tx.send(f());
        }))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    rx.await
        .map_err(|_| io::Error::other("the spawner dropped the job"))
}
