//! Binding the listeners of protocol.md §1: the Unix socket (own, or passed by systemd)
//! and the optional token-protected TCP listener.

use std::os::fd::FromRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use tokio::net::{TcpListener, UnixListener};

use crate::config::Config;

/// The socket path of protocol.md §1, with config `listen.socket` as the configured one.
pub fn socket_path(explicit: Option<&Path>, cfg: &Config) -> PathBuf {
    crate::protocol::socket_path(explicit, cfg.listen.socket.as_deref())
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
        let path = socket_path(socket, cfg);
        let (unix, owned_path) = match systemd_socket()? {
            Some(l) => (l, None),
            None => (
                bind_unix(&path, cfg.listen.socket_mode.as_deref()).await?,
                Some(path.clone()),
            ),
        };
        let tcp = match &cfg.listen.tcp {
            None => None,
            Some(addr) => {
                let token = read_token(cfg)?;
                let l = TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on tcp {addr}"))?;
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
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        }
    }
    if path.exists() {
        // Replace a stale socket only when nobody answers on it.
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            bail!("another toolhost daemon is already serving on {} (stop it first, or pass --socket)", path.display());
        }
        std::fs::remove_file(path)
            .with_context(|| format!("cannot remove stale socket {}", path.display()))?;
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
