//! OAuth for HTTP MCP servers, on rmcp's `auth` module (discovery from the 401 challenge,
//! RFC 8414/OIDC metadata, PKCE S256, resource indicators, dynamic registration, client
//! metadata documents, refresh before expiry and on 401).
//!
//! The split: the daemon holds the tokens and talks to the authorization server; the CLI
//! (`toolhost mcp login`) talks to the user and runs the loopback redirect listener, then
//! hands the redirect URL back through a second `mcp.login`. So sign-in works the same when
//! the daemon runs under systemd with no terminal or browser.
//!
//! Tokens live in `<data_dir>/oauth/<server>.json`, mode 0600, written atomically. Each file
//! carries a fingerprint of the server's URL and auth settings: a reload that changes
//! either makes the file stale, and the next connection deletes it.
//!
//! Credentials belong to the authorization server that issued them (MCP 2026-07-28): the
//! tokens carry their issuer, and rmcp drops them when the resource names another one; a
//! client registered dynamically is kept with its issuer and client ID, so its secret never
//! goes to another server. The authorization response's RFC 9207 `iss` and the metadata's
//! `issuer` are checked by rmcp.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context};
use rmcp::transport::auth::{
    AuthClient, AuthError, AuthorizationManager, AuthorizationRequest, AuthorizationSession,
    ClientCredentialsConfig, CredentialStore, OAuthClientConfig, StoredCredentials,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::atomic_file::{write_atomic, Durability};
use crate::config::{McpAuth, McpAuthKind, McpServer};
use crate::lock;

/// The client name sent with dynamic registration.
const CLIENT_NAME: &str = "toolhost";

/// One daemon's OAuth state: where its tokens live, sign-ins waiting for their redirect,
/// and the last challenge per server (it seeds discovery and step-up scopes for the next
/// login). Owned by the daemon's [`McpManager`](super::McpManager) and shared with its
/// servers.
pub struct OAuth {
    dir: PathBuf,
    pending: Mutex<HashMap<String, Pending>>,
    challenges: Mutex<HashMap<String, String>>,
}

struct Pending {
    session: Arc<AuthorizationSession>,
    fingerprint: String,
    /// The client this sign-in registered, stored only once the sign-in succeeds (an
    /// abandoned one leaves the working credentials as they were).
    registration: Option<Registration>,
}

/// A connection attempt that needs the user to sign in (or to grant more scope).
#[derive(Debug, thiserror::Error)]
#[error("{hint}")]
pub struct AuthNeeded {
    pub hint: String,
}

fn login_hint(name: &str, why: &str) -> AuthNeeded {
    AuthNeeded {
        hint: format!("{why}: run `toolhost mcp login {name}`"),
    }
}

/// What one server's token file holds. Never logged: no `Debug`.
#[derive(Serialize, Deserialize, Default)]
struct TokenFile {
    /// Hash of the URL and auth settings the tokens were issued for.
    fingerprint: String,
    /// The client dynamic registration created at the last sign-in, if it was issued a
    /// secret (needed again to refresh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    registration: Option<Registration>,
    /// A registration's secret as files before issuer binding kept it: bound, on reading,
    /// to the stored credentials' client and issuer.
    #[serde(default, rename = "client_secret", skip_serializing)]
    legacy_client_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    credentials: Option<StoredCredentials>,
}

/// A dynamically registered client with a secret, and the authorization server it is
/// registered with: the secret is sent only with that client ID, to that issuer.
#[derive(Serialize, Deserialize, Clone)]
struct Registration {
    /// The authorization server metadata's `issuer` (none for a legacy server without
    /// metadata).
    issuer: Option<String>,
    client_id: String,
    client_secret: String,
}

impl TokenFile {
    /// The registration secret for the stored credentials: only when they belong to the
    /// client it was issued to, at the same issuer.
    fn registered_secret(&self) -> Option<&str> {
        let (reg, creds) = (self.registration.as_ref()?, self.credentials.as_ref()?);
        (reg.client_id == creds.client_id && reg.issuer == creds.issuer)
            .then_some(reg.client_secret.as_str())
    }
}

fn fingerprint(cfg: &McpServer) -> String {
    let mut h = Sha256::new();
    h.update(cfg.url.as_deref().unwrap_or("").as_bytes());
    h.update([0]);
    h.update(serde_json::to_vec(&cfg.auth).unwrap_or_default());
    hex::encode(h.finalize())
}

fn token_path(dir: &Path, name: &str) -> PathBuf {
    // Server names are config keys; hex keeps any of them a safe single file name.
    dir.join(format!("{}.json", hex::encode(name.as_bytes())))
}

/// One server's token file, as rmcp's credential store.
#[derive(Clone)]
struct FileStore {
    path: PathBuf,
    fingerprint: String,
    /// Serialises read-modify-write of the file within this daemon.
    guard: Arc<tokio::sync::Mutex<()>>,
}

impl FileStore {
    fn new(dir: &Path, name: &str, cfg: &McpServer) -> FileStore {
        FileStore {
            path: token_path(dir, name),
            fingerprint: fingerprint(cfg),
            guard: Arc::default(),
        }
    }

    /// The file, if it belongs to the current settings; a stale one is deleted.
    fn read(&self) -> Option<TokenFile> {
        let bytes = std::fs::read(&self.path).ok()?;
        match serde_json::from_slice::<TokenFile>(&bytes) {
            Ok(mut f) if f.fingerprint == self.fingerprint => {
                if let (Some(secret), Some(creds)) = (f.legacy_client_secret.take(), &f.credentials)
                {
                    f.registration.get_or_insert_with(|| Registration {
                        issuer: creds.issuer.clone(),
                        client_id: creds.client_id.clone(),
                        client_secret: secret,
                    });
                }
                Some(f)
            }
            _ => {
                let _ = std::fs::remove_file(&self.path);
                None
            }
        }
    }

    fn write(&self, file: &TokenFile) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        let bytes = serde_json::to_vec(file).map_err(std::io::Error::other)?;
        write_atomic(&self.path, &bytes, Durability::Synced)?;
        // A new file is created 0600; also repair a loosened one.
        std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o600))
    }

    fn update(&self, change: impl FnOnce(&mut TokenFile)) -> Result<(), AuthError> {
        let mut file = self.read().unwrap_or_else(|| TokenFile {
            fingerprint: self.fingerprint.clone(),
            ..TokenFile::default()
        });
        change(&mut file);
        self.write(&file)
            .map_err(|e| AuthError::CredentialStoreError(format!("cannot write token file: {e}")))
    }
}

#[async_trait::async_trait]
impl CredentialStore for FileStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let _g = self.guard.lock().await;
        Ok(self.read().and_then(|f| f.credentials))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let _g = self.guard.lock().await;
        self.update(|f| f.credentials = Some(credentials))
    }

    async fn clear(&self) -> Result<(), AuthError> {
        let _g = self.guard.lock().await;
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(AuthError::CredentialStoreError(format!(
                "cannot remove token file: {e}"
            ))),
        }
    }
}

impl OAuth {
    /// The token store of the daemon whose data dir is `data_dir` (`<data_dir>/oauth`).
    pub fn new(data_dir: &Path) -> OAuth {
        OAuth {
            dir: data_dir.join("oauth"),
            pending: Mutex::default(),
            challenges: Mutex::default(),
        }
    }

    /// The HTTP client for one server: a plain one when the config sends its own
    /// `Authorization` header, else one that adds (and refreshes) the server's OAuth token.
    pub async fn http_client(
        &self,
        name: &str,
        url: &str,
        cfg: &McpServer,
    ) -> anyhow::Result<AuthClient<reqwest::Client>> {
        // Idle pooling off, as rmcp's own default client (delayed-ACK latency otherwise).
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .context("cannot build the HTTP client")?;
        let mut manager = AuthorizationManager::new(url)
            .await
            .map_err(|e| anyhow!("{e}"))?;
        if cfg
            .headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization"))
        {
            // The config's own credentials win; no stored token is ever added to them.
            return Ok(AuthClient::new(http, manager));
        }
        let store = FileStore::new(&self.dir, name, cfg);
        manager.set_credential_store(store.clone());
        let has_tokens = store.read().is_some_and(|f| f.credentials.is_some());
        match &cfg.auth {
            Some(
                a @ McpAuth {
                    kind: McpAuthKind::ClientCredentials,
                    ..
                },
            ) => {
                let (Some(id), Some(secret)) = (&a.client_id, &a.client_secret) else {
                    bail!("auth type client_credentials needs client_id and client_secret");
                };
                client_credentials(&mut manager, url, id, secret, &a.scopes)
                    .await
                    .map_err(|e| anyhow!("client credentials sign-in failed: {e}"))?;
            }
            _ => {
                let restored = has_tokens
                    && manager
                        .initialize_from_store()
                        .await
                        .map_err(|e| anyhow!("{e}"))?;
                if restored {
                    configure_refresh(&mut manager, cfg, &store)?;
                }
            }
        }
        Ok(AuthClient::new(http, manager))
    }

    /// When a request failed on the server's 401/403 challenge (rmcp's `auth_challenge()` of
    /// the error): remembers the challenge for the next login and says what to do.
    pub fn needs_auth(&self, name: &str, challenge: Option<&str>) -> Option<AuthNeeded> {
        let challenge = challenge?;
        lock(&self.challenges).insert(name.to_owned(), challenge.to_owned());
        let insufficient = challenge.contains("insufficient_scope");
        let scope = challenge
            .split("scope=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .filter(|s| !s.is_empty());
        let why = match (insufficient, scope) {
            (true, Some(scope)) => format!("the server requires more access (scope {scope})"),
            (true, None) => "the server requires more access".to_owned(),
            (false, _) => "the server requires sign-in".to_owned(),
        };
        Some(login_hint(name, &why))
    }

    /// `mcp.login`, first half: discovery, client registration and PKCE, in the daemon; returns
    /// the URL for the user's browser (none for client credentials, which need no user).
    pub async fn begin_login(
        &self,
        name: &str,
        cfg: &McpServer,
        redirect_uri: &str,
    ) -> anyhow::Result<Option<String>> {
        let Some(url) = cfg.url.as_deref() else {
            bail!("MCP server '{name}' is not an HTTP server; only those sign in");
        };
        if cfg
            .auth
            .as_ref()
            .is_some_and(|a| a.kind == McpAuthKind::ClientCredentials)
        {
            return Ok(None);
        }
        let mut manager = AuthorizationManager::new(url)
            .await
            .map_err(|e| anyhow!("{e}"))?;
        manager.set_credential_store(FileStore::new(&self.dir, name, cfg));
        let challenge = lock(&self.challenges).get(name).cloned();
        let resolution = manager
            .resolve_metadata_from_challenge(challenge.as_deref())
            .await
            .map_err(|e| anyhow!("authorization server discovery failed: {e}"))?;
        let has_registration = resolution.metadata.registration_endpoint.is_some();
        let issuer = resolution.metadata.issuer.clone();
        let cimd_supported = resolution
            .metadata
            .additional_fields
            .get("client_id_metadata_document_supported")
            .and_then(serde_json::Value::as_bool)
            == Some(true);
        manager.set_metadata(resolution.metadata);

        let settings = cfg.auth.clone().unwrap_or_default();
        let (client_id, client_secret, configured_scopes, metadata_url) = (
            settings.client_id,
            settings.client_secret,
            settings.scopes,
            settings.client_metadata_url,
        );
        let step_up = challenge
            .as_deref()
            .is_some_and(|c| c.contains("insufficient_scope"));
        let scopes = if !configured_scopes.is_empty() {
            configured_scopes
        } else if step_up {
            // Step-up (SEP-2350): the scope granted before plus what the challenge asks for.
            let challenged = challenge.as_deref().and_then(|c| {
                rmcp::transport::auth::WWWAuthenticateParams::parse(c, &url_of(url)?).scope
            });
            let mut scopes = FileStore::new(&self.dir, name, cfg)
                .read()
                .and_then(|f| f.credentials)
                .map(|c| c.granted_scopes)
                .unwrap_or_default();
            for scope in manager.select_scopes(challenged.as_deref(), &[]) {
                if !scopes.contains(&scope) {
                    scopes.push(scope);
                }
            }
            scopes
        } else {
            // First sign-in: the challenge's scope, else the resource's `scopes_supported`.
            manager.select_initial_scopes(&[]).await
        };
        let mut request = AuthorizationRequest::new(redirect_uri)
            .with_client_name(CLIENT_NAME)
            .with_scopes(scopes.clone());
        let mut registration = None;
        if let Some(id) = client_id {
            request = request.with_preregistered_client(id);
            if let Some(secret) = client_secret {
                request = request.with_client_secret(secret);
            }
        } else if let (Some(doc), true) = (metadata_url, cimd_supported) {
            request = request.with_client_metadata_url(doc);
        } else if has_registration {
            // Registered here rather than inside rmcp so a secret it issues can be kept for
            // refreshing later.
            let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
            let registered = manager
                .register_client(CLIENT_NAME, redirect_uri, &scope_refs)
                .await
                .map_err(|e| anyhow!("dynamic client registration failed: {e}"))?;
            request = request.with_preregistered_client(registered.client_id.clone());
            if let Some(secret) = registered.client_secret.clone() {
                request = request.with_client_secret(secret.clone());
                registration = Some(Registration {
                    issuer,
                    client_id: registered.client_id,
                    client_secret: secret,
                });
            }
        } else {
            bail!("the authorization server offers no dynamic registration: set auth.client_id (or auth.client_metadata_url) for '{name}' in config.json");
        }
        let session = AuthorizationSession::new(manager, request)
            .await
            .map_err(|(_, e)| anyhow!("cannot start the authorization: {e}"))?;
        let url = session.get_authorization_url().to_owned();
        lock(&self.pending).insert(
            name.to_owned(),
            Pending {
                session: Arc::new(session),
                fingerprint: fingerprint(cfg),
                registration,
            },
        );
        Ok(Some(url))
    }

    /// `mcp.login`, second half: exchanges the code from the redirect for tokens (stored by
    /// rmcp through [`FileStore`]). The caller then reconnects the server.
    pub async fn finish_login(
        &self,
        name: &str,
        cfg: &McpServer,
        callback_url: &str,
    ) -> anyhow::Result<()> {
        let pending = lock(&self.pending)
            .remove(name)
            .ok_or_else(|| anyhow!("no sign-in in progress for '{name}': call mcp.login first"))?;
        if pending.fingerprint != fingerprint(cfg) {
            bail!("the server's URL or auth settings changed during sign-in; start again");
        }
        pending
            .session
            .handle_callback_url(callback_url)
            .await
            .map_err(|e| match e {
                AuthError::AuthorizationServerMismatch { .. }
                | AuthError::AuthorizationServerMissingIssuer { .. } => {
                    anyhow!("sign-in refused, the authorization response is not from the expected authorization server: {e}")
                }
                e => anyhow!("the authorization server refused the sign-in: {e}"),
            })?;
        // The tokens just stored belong to this sign-in's client: its registration replaces
        // any earlier one (none for a public or pre-registered client).
        FileStore::new(&self.dir, name, cfg)
            .update(|f| f.registration = pending.registration)
            .map_err(|e| anyhow!("{e}"))?;
        lock(&self.challenges).remove(name);
        Ok(())
    }

    /// `mcp.logout`: forgets the server's tokens (and any sign-in in progress).
    pub fn logout(&self, name: &str) -> anyhow::Result<bool> {
        lock(&self.pending).remove(name);
        lock(&self.challenges).remove(name);
        match std::fs::remove_file(token_path(&self.dir, name)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(anyhow!("cannot remove the token file: {e}")),
        }
    }

    /// [`OAuth::needs_auth`] for a failed connection attempt (the launcher's verdict, or a failed
    /// `tools/list` right after connecting).
    pub fn needed_in(&self, name: &str, err: &anyhow::Error) -> Option<AuthNeeded> {
        if let Some(n) = err.downcast_ref::<AuthNeeded>() {
            return Some(AuthNeeded {
                hint: n.hint.clone(),
            });
        }
        err.chain()
            .find_map(|cause| cause.downcast_ref::<rmcp::service::ServiceError>())
            .and_then(|e| self.needs_auth(name, e.auth_challenge()))
    }
}

/// Refreshing needs the client's secret when it has one (configured, or issued by
/// registration to this client at this issuer and kept in the token file).
fn configure_refresh(
    manager: &mut AuthorizationManager,
    cfg: &McpServer,
    store: &FileStore,
) -> anyhow::Result<()> {
    let Some(file) = store.read() else {
        return Ok(());
    };
    let Some(creds) = &file.credentials else {
        return Ok(());
    };
    let secret = cfg
        .auth
        .as_ref()
        .and_then(|a| a.client_secret.clone())
        .or_else(|| file.registered_secret().map(str::to_owned));
    if let Some(secret) = secret {
        let url = cfg.url.clone().unwrap_or_default();
        manager
            .configure_client(
                OAuthClientConfig::new(creds.client_id.clone(), url).with_client_secret(secret),
            )
            .map_err(|e| anyhow!("{e}"))?;
    }
    Ok(())
}

/// Machine-to-machine: discover, then exchange the configured client's credentials for
/// a token (stored like any other, so a restart reuses it until it expires).
async fn client_credentials(
    manager: &mut AuthorizationManager,
    url: &str,
    client_id: &str,
    client_secret: &str,
    scopes: &[String],
) -> Result<(), AuthError> {
    if manager.get_access_token().await.is_ok() {
        return Ok(());
    }
    let resolution = manager.resolve_metadata().await?;
    manager.set_metadata(resolution.metadata);
    let config = ClientCredentialsConfig::ClientSecret {
        client_id: client_id.to_owned(),
        client_secret: client_secret.to_owned(),
        scopes: scopes.to_vec(),
        resource: Some(url.to_owned()),
    };
    manager.validate_client_credentials_metadata(&config)?;
    manager.configure_client_credentials(&config)?;
    manager.exchange_client_credentials(&config).await?;
    Ok(())
}

fn url_of(url: &str) -> Option<reqwest::Url> {
    reqwest::Url::parse(url).ok()
}
