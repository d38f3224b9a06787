//! Binding the listeners of proto-docs/transport.md: the Unix socket (own, or passed by systemd)
//! and the optional token-protected TCP listener.

use std::fs::File;
use std::os::fd::FromRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener, UnixStream};

use crate::config::Config;

/// The socket path, and whether it is the default one (in a runtime directory of ours that
/// must be private).
fn chosen_socket(explicit: Option<&Path>, cfg: &Config) -> (PathBuf, bool) {
    let path = crate::protocol::socket_path(explicit, cfg.listen.socket.as_deref());
    let is_default = path == crate::protocol::default_socket();
    (path, is_default)
}

/// Creates `dir` with mode 0700 if missing, and refuses it unless it is a real directory
/// (not a symlink) owned by us and closed to group and others. Otherwise another user could
/// create it first (in /tmp) and take over or watch the socket, as tmux and ssh-agent guard
/// against.
pub(crate) fn ensure_private_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
    }
    let m = std::fs::symlink_metadata(dir)
        .with_context(|| format!("cannot inspect {}", dir.display()))?;
    let uid = nix::unistd::geteuid().as_raw();
    if !m.file_type().is_dir() {
        bail!(
            "refusing the socket directory {}: it is not a directory (a symlink or a file); remove it or pass --socket",
            dir.display()
        );
    }
    if m.uid() != uid {
        bail!(
            "refusing the socket directory {}: it is owned by uid {}, not by us (uid {uid}); someone else may have created it; remove it or pass --socket",
            dir.display(),
            m.uid()
        );
    }
    if m.mode() & 0o077 != 0 {
        bail!(
            "refusing the socket directory {}: its mode {:o} lets group or others in; run `chmod 700 {}` or pass --socket",
            dir.display(),
            m.mode() & 0o7777,
            dir.display()
        );
    }
    Ok(())
}

/// A socket file this daemon bound, with the lock that says it is ours: `<socket>.lock`,
/// flock'd for as long as we own the file. A starting daemon tells a live owner from a
/// dead one by this lock, which the kernel drops the moment its holder dies, however it
/// dies; a socket file outlives a kill -9, and a connect can still succeed on the socket of
/// a daemon that is being killed.
pub struct OwnedSocket {
    pub path: PathBuf,
    _lock: Flock<File>,
}

impl OwnedSocket {
    /// Removes the socket file (the lock goes when this value does).
    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

pub struct Listeners {
    pub unix: UnixListener,
    /// Set when we bound the socket ourselves, so we remove it on exit (never systemd's).
    pub owned: Option<OwnedSocket>,
    pub path: PathBuf,
    pub tcp: Option<(TcpListener, super::http::Tokens)>,
}

impl Listeners {
    pub async fn bind(socket: Option<&Path>, cfg: &Config) -> anyhow::Result<Listeners> {
        let (mut path, default) = chosen_socket(socket, cfg);
        let (unix, owned) = match systemd_socket()? {
            Some(l) => {
                // Serve and report the socket systemd passed, whatever the config says.
                if let Some(given) = l
                    .local_addr()
                    .ok()
                    .and_then(|a| a.as_pathname().map(Path::to_path_buf))
                {
                    if given != path {
                        tracing::info!(activated = %given.display(), configured = %path.display(), "socket activation: serving the socket systemd passed, not the configured one");
                    }
                    path = given;
                }
                (l, None)
            }
            None => {
                if default {
                    if let Some(dir) = path.parent() {
                        ensure_private_dir(dir)?;
                    }
                }
                let (unix, owned) = bind_unix(&path, cfg.listen.socket_mode.as_deref()).await?;
                (unix, Some(owned))
            }
        };
        let tcp = match &cfg.listen.tcp {
            None => None,
            Some(addr) => {
                let token = tcp_token(cfg)?;
                let l = TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on tcp {addr}"))?;
                deepen_backlog(&l);
                if l.local_addr().is_ok_and(|a| a.ip().is_unspecified()) {
                    tracing::warn!(
                        "listen.tcp {addr} accepts connections from every network this machine is on; only the bearer token stands between them and your tools (use 127.0.0.1 unless you mean it)"
                    );
                }
                Some((l, token))
            }
        };
        Ok(Listeners {
            unix,
            owned,
            path,
            tcp,
        })
    }

    /// The address the TCP listener is bound to, if there is one.
    pub fn tcp_addr(&self) -> Option<std::net::SocketAddr> {
        self.tcp.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    pub fn describe(&self) -> String {
        match &self.tcp {
            Some((l, _)) => format!(
                "{} + tcp {}",
                self.path.display(),
                l.local_addr().map(|a| a.to_string()).unwrap_or_default()
            ),
            None => self.path.display().to_string(),
        }
    }
}

/// The socket passed by systemd socket activation (`LISTEN_FDS`), if any.
fn systemd_socket() -> anyhow::Result<Option<UnixListener>> {
    let fds = sd_notify::listen_fds().context("reading LISTEN_FDS")?;
    let Some(fd) = fds.into_iter().next() else {
        return Ok(None);
    };
    // SAFETY: systemd passed us this descriptor and nothing else in the process owns it.
    let std_listener = unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd) };
    std_listener.set_nonblocking(true)?;
    Ok(Some(UnixListener::from_std(std_listener)?))
}

async fn bind_unix(path: &Path, mode: Option<&str>) -> anyhow::Result<(UnixListener, OwnedSocket)> {
    if let Some(dir) = path.parent() {
        if !dir.exists() {
            // Directories we create are private from the start (no chmod window).
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
    }
    let lock = claim(path).await?;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", path.display())),
        Ok(m) if !m.file_type().is_socket() => bail!(
            "{} exists and is not a socket; refusing to replace it (remove it or choose another --socket)",
            path.display()
        ),
        Ok(_) => {
            // No toolhost daemon owns the file (we hold its lock); one that answers on it
            // anyway is not ours to replace (a systemd socket, a daemon without the lock).
            if answers(path).await {
                bail!(already_serving(path));
            }
            std::fs::remove_file(path)
                .with_context(|| format!("cannot remove stale socket {}", path.display()))?;
        }
    }
    // Bind under a strict umask so the socket is never reachable with looser permissions,
    // then set the configured mode.
    let old_umask = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = UnixListener::bind(path);
    nix::sys::stat::umask(old_umask);
    let listener = bound.with_context(|| format!("cannot bind {}", path.display()))?;
    let mode = match mode {
        Some(m) => u32::from_str_radix(m.trim_start_matches("0o"), 8).with_context(|| {
            format!("listen.socket_mode {m:?} is not an octal mode like \"0660\"")
        })?,
        None => 0o600,
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok((
        listener,
        OwnedSocket {
            path: path.to_path_buf(),
            _lock: lock,
        },
    ))
}

/// Lets a burst of TCP connections wait in the kernel's queue rather than be refused: the
/// listen backlog is raised from the runtime's 1,024 to the system's most
/// (`net.core.somaxconn`, 4,096 by default), as the Unix socket's already is, so a client
/// in a burst of up to that many sees a delay until the accept loop takes it.
fn deepen_backlog(listener: &impl std::os::fd::AsFd) {
    use nix::sys::socket::{listen, Backlog};
    if let Err(e) = listen(listener, Backlog::MAXALLOWABLE) {
        tracing::debug!(%e, "could not raise the listen backlog");
    }
}

/// How long a starting daemon waits for the daemon before it to let go of the socket: a
/// killed one lets go within milliseconds, a stopping one once it has removed its socket.
const HANDOVER_WAIT: Duration = Duration::from_secs(10);

/// How long a server on the socket has to answer [`answers`].
const ANSWER_WAIT: Duration = Duration::from_secs(2);

fn already_serving(path: &Path) -> String {
    format!(
        "another toolhost daemon is already serving on {} (stop it first, or pass --socket)",
        path.display()
    )
}

/// Takes the lock of the socket at `path` ([`OwnedSocket`]). While another daemon holds
/// it, that daemon is either live, and then it answers on the socket and we give up at
/// once, or dying or stopping, and then it lets go soon and we wait for it.
async fn claim(path: &Path) -> anyhow::Result<Flock<File>> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_path = PathBuf::from(lock_path);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&lock_path)
        .with_context(|| format!("cannot open the socket's lock {}", lock_path.display()))?;
    let deadline = tokio::time::Instant::now() + HANDOVER_WAIT;
    loop {
        file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => return Ok(locked),
            Err((file, Errno::EWOULDBLOCK)) => file,
            Err((_, e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", lock_path.display()))
            }
        };
        if answers(path).await {
            bail!(already_serving(path));
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "another toolhost daemon holds {} and has not let go of {} within {} s (is it still stopping?)",
                lock_path.display(),
                path.display(),
                HANDOVER_WAIT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether a server is alive on the socket at `path`. A connect alone does not tell: a
/// dying daemon's socket still takes connections into its backlog until the kernel closes
/// it, which then resets them. So the probe asks `GET /health` and waits: an answer, or a
/// slow or silent server, counts as alive; a reset or a refusal does not.
async fn answers(path: &Path) -> bool {
    let Ok(mut stream) = UnixStream::connect(path).await else {
        return false;
    };
    let probe = async {
        stream
            .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await?;
        stream.read(&mut [0u8; 1]).await
    };
    !matches!(tokio::time::timeout(ANSWER_WAIT, probe).await, Ok(Err(_)))
}

/// The TCP listener's bearer tokens by name: `default` is `TOOLHOST_TOKEN`, else
/// `listen.token_file`; each of `listen.tokens` is named by its key. One is needed (TCP
/// without a token is refused), none may be empty, and no two the same (a token names
/// its caller).
pub fn tcp_token(cfg: &Config) -> anyhow::Result<super::http::Tokens> {
    let read = |f: &Path, key: &str| {
        std::fs::read_to_string(f).with_context(|| format!("cannot read {key} {}", f.display()))
    };
    let default = match (
        &cfg.listen.token_file,
        crate::secrets::get("TOOLHOST_TOKEN"),
    ) {
        (_, Some(t)) if !t.is_empty() => Some(t),
        (Some(f), _) => Some(read(f, "listen.token_file")?),
        _ => None,
    };
    let mut tokens: Vec<(std::sync::Arc<str>, std::sync::Arc<str>)> = Vec::new();
    let named = cfg
        .listen
        .tokens
        .iter()
        .map(|(name, f)| read(f, &format!("listen.tokens.{name}")).map(|t| (name.as_str(), t)));
    for entry in default.map(|t| Ok(("default", t))).into_iter().chain(named) {
        let (name, token) = entry?;
        let token = token.trim();
        if token.is_empty() {
            bail!("the TCP token {name:?} is empty; refusing to listen on TCP with an empty token");
        }
        if let Some((other, _)) = tokens.iter().find(|(_, t)| &**t == token) {
            bail!(
                "the TCP tokens {other:?} and {name:?} are the same; each token names its caller"
            );
        }
        tokens.push((name.into(), token.into()));
    }
    if tokens.is_empty() {
        bail!("listen.tcp is set but there is no token: set listen.token_file, listen.tokens or TOOLHOST_TOKEN (TCP without a token is refused)");
    }
    Ok(tokens.into())
}
