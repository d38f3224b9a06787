//! Binding the listeners of proto-docs/transport.md: the Unix socket (own, or passed by systemd)
//! and the optional token-protected TCP listener.

use std::os::fd::FromRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use tokio::net::{TcpListener, UnixListener};

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

pub struct Listeners {
    pub unix: UnixListener,
    /// Set when we bound the socket ourselves, so we remove it on exit (never systemd's).
    pub owned_path: Option<PathBuf>,
    pub path: PathBuf,
    pub tcp: Option<(TcpListener, String)>,
}

impl Listeners {
    pub async fn bind(socket: Option<&Path>, cfg: &Config) -> anyhow::Result<Listeners> {
        let (mut path, default) = chosen_socket(socket, cfg);
        let (unix, owned_path) = match systemd_socket()? {
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
                (
                    bind_unix(&path, cfg.listen.socket_mode.as_deref()).await?,
                    Some(path.clone()),
                )
            }
        };
        let tcp = match &cfg.listen.tcp {
            None => None,
            Some(addr) => {
                let token = read_token(cfg)?;
                let l = TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on tcp {addr}"))?;
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
            owned_path,
            path,
            tcp,
        })
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

async fn bind_unix(path: &Path, mode: Option<&str>) -> anyhow::Result<UnixListener> {
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
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", path.display())),
        Ok(m) if !m.file_type().is_socket() => bail!(
            "{} exists and is not a socket; refusing to replace it (remove it or choose another --socket)",
            path.display()
        ),
        Ok(_) => {
            // Replace a stale socket only when nobody answers on it.
            if tokio::net::UnixStream::connect(path).await.is_ok() {
                bail!("another toolhost daemon is already serving on {} (stop it first, or pass --socket)", path.display());
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
    Ok(listener)
}

fn read_token(cfg: &Config) -> anyhow::Result<String> {
    let token = match (&cfg.listen.token_file, crate::secrets::get("TOOLHOST_TOKEN")) {
        (_, Some(t)) if !t.is_empty() => t,
        (Some(f), _) => std::fs::read_to_string(f).with_context(|| format!("cannot read listen.token_file {}", f.display()))?,
        _ => bail!("listen.tcp is set but there is no token: set listen.token_file or TOOLHOST_TOKEN (TCP without a token is refused)"),
    };
    let token = token.trim().to_owned();
    if token.is_empty() {
        bail!("the TCP token is empty; refusing to listen on TCP without a token");
    }
    Ok(token)
}
