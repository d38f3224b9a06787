//! Write-back for the admin methods (`mcp.add` / `mcp.remove`): edit the JSON, validate the
//! result exactly as [`load`](super::load) would, then replace the file atomically.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Map, Value};

use super::error::{ConfigError, ConfigErrorKind, ContentHash};
use super::load::{self, Env, SERVERS_KEY};

/// Serialises writers in this process, so concurrent admin calls each see the previous
/// one's result (read-modify-write is not atomic otherwise).
static WRITE_LOCK: Mutex<()> = Mutex::new(());

/// Adds the MCP server `name` to the config file at `path` (under `mcp_servers`, or
/// `mcpServers` if that is the key the file uses). The server block is stored as given
/// (`${NAME}` references stay unexpanded). Refused — nothing written — if the name exists
/// (`ConfigErrorKind::Conflict`) or the resulting config does not validate with the current
/// environment. A missing file is created (with its parent directories, mode 0600).
///
/// Blocking: call from `spawn_blocking` in async code. The watcher sees the rename; the
/// caller may also reload directly.
pub fn add_mcp_server(
    path: &Path,
    name: &str,
    server: &Map<String, Value>,
) -> Result<(), ConfigError> {
    edit(path, &Env::for_config(path)?, |servers| {
        if servers.contains_key(name) {
            return Err(ConfigError::one(
                ConfigErrorKind::Conflict,
                "",
                format!("server {name} already exists"),
            ));
        }
        servers.insert(name.to_owned(), Value::Object(server.clone()));
        Ok(true)
    })
    .map(|_| ())
}

/// Removes the MCP server `name`; `Ok(false)` (and no write) if there is no such server.
/// The rest of the file must still validate, or the edit is refused.
pub fn remove_mcp_server(path: &Path, name: &str) -> Result<bool, ConfigError> {
    edit(path, &Env::for_config(path)?, |servers| {
        Ok(servers.shift_remove(name).is_some())
    })
}

/// The MCP server blocks of the config file at `path` as written (`${NAME}` references
/// unexpanded), under whichever key the file uses; empty when there is no file. What
/// `toolhost import` compares its plan with.
pub fn mcp_server_blocks(path: &Path) -> Result<Map<String, Value>, ConfigError> {
    let Some(bytes) = load::read_file(&resolve(path))? else {
        return Ok(Map::new());
    };
    let root = load::parse(&bytes)?;
    let Value::Object(obj) = root else {
        return Ok(Map::new());
    };
    let key = load::servers_key(&obj)
        .map_err(|p| ConfigError::new(ConfigErrorKind::Invalid, vec![p]))?
        .unwrap_or(SERVERS_KEY);
    Ok(match obj.get(key) {
        Some(Value::Object(servers)) => servers.clone(),
        _ => Map::new(),
    })
}

/// Read → `f` edits the servers map (returns whether it changed anything) → validate →
/// atomic write. Returns what `f` returned.
pub(crate) fn edit(
    path: &Path,
    env: &Env,
    f: impl FnOnce(&mut Map<String, Value>) -> Result<bool, ConfigError>,
) -> Result<bool, ConfigError> {
    let _guard = WRITE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let target = resolve(path);
    let mut root = match load::read_file(&target)? {
        Some(bytes) => {
            let hash = ContentHash::of(&bytes);
            load::parse(&bytes).map_err(|e| e.with_hash(hash))?
        }
        None => Value::Object(Map::new()),
    };
    let Value::Object(obj) = &mut root else {
        return Err(ConfigError::one(
            ConfigErrorKind::Invalid,
            "",
            "expected a JSON object at the top level",
        ));
    };
    let key = load::servers_key(obj)
        .map_err(|p| ConfigError::new(ConfigErrorKind::Invalid, vec![p]))?
        .unwrap_or(SERVERS_KEY);
    let servers = obj
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if servers.is_null() {
        *servers = Value::Object(Map::new());
    }
    let Value::Object(servers) = servers else {
        return Err(ConfigError::one(
            ConfigErrorKind::Invalid,
            key,
            "expected an object",
        ));
    };
    if !f(servers)? {
        return Ok(false);
    }
    load::evaluate(root.clone(), env)?;
    let mut text = serde_json::to_string_pretty(&root).map_err(|e| {
        ConfigError::one(
            ConfigErrorKind::Invalid,
            "",
            format!("cannot serialise: {e}"),
        )
    })?;
    text.push('\n');
    crate::atomic_file::write_atomic(
        &target,
        text.as_bytes(),
        crate::atomic_file::Durability::Synced,
    )
    .map_err(|e| {
        ConfigError::one(
            ConfigErrorKind::Io,
            "",
            format!("cannot write {}: {e}", target.display()),
        )
    })?;
    Ok(true)
}

/// A symlinked config is edited at its target (so the link survives).
fn resolve(path: &Path) -> PathBuf {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
        }
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn add_keeps_other_keys_and_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        let original = "{\n  \"workspace\": \"/w\",\n  \"mcpServers\": {\n    \"zeta\": {\"command\": \"z\", \"args\": [\"1\"]},\n    \"alpha\": {\"url\": \"https://a/mcp\"}\n  },\n  \"limits\": {\"max_output_bytes\": 5},\n  \"custom_tools\": {\"discover\": true}\n}\n";
        std::fs::write(&path, original).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();

        add_mcp_server(
            &path,
            "mid",
            &obj(json!({"command": "m", "env": {"B": "1", "A": "2"}})),
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with("}\n"));
        assert!(
            text.contains("\n  \"workspace\": \"/w\",\n"),
            "2-space indent: {text}"
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["workspace", "mcpServers", "limits", "custom_tools"]);
        let names: Vec<&String> = v["mcpServers"].as_object().unwrap().keys().collect();
        assert_eq!(names, ["zeta", "alpha", "mid"]);
        let env_keys: Vec<&String> = v["mcpServers"]["mid"]["env"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(env_keys, ["B", "A"]);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        // No temp files left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        let e = add_mcp_server(&path, "zeta", &obj(json!({"command": "x"}))).unwrap_err();
        assert_eq!(e.kind, ConfigErrorKind::Conflict);
        assert_eq!(e.to_string(), "server zeta already exists");

        assert!(remove_mcp_server(&path, "zeta").unwrap());
        assert!(!remove_mcp_server(&path, "zeta").unwrap());
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let names: Vec<&String> = v["mcpServers"].as_object().unwrap().keys().collect();
        assert_eq!(names, ["alpha", "mid"]);
        assert_eq!(v["custom_tools"], json!({"discover": true}));
    }

    #[test]
    fn bad_blocks_are_refused_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, "{\"mcp_servers\": {}}").unwrap();
        let e = add_mcp_server(
            &path,
            "both",
            &obj(json!({"command": "x", "url": "https://h/mcp"})),
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("mcp_servers.both: has both"),
            "{e}"
        );
        let e = add_mcp_server(&path, "bad name", &obj(json!({"command": "x"}))).unwrap_err();
        assert!(e.to_string().contains("must match"), "{e}");
        let e = add_mcp_server(
            &path,
            "t",
            &obj(json!({"url": "https://h/mcp", "headers": {"A": "${UNSET_WRITE_T1}"}})),
        )
        .unwrap_err();
        assert!(e.to_string().contains("UNSET_WRITE_T1 is not set"), "{e}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"mcp_servers\": {}}"
        );
    }

    #[test]
    fn missing_file_is_created_with_parents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/config.json");
        add_mcp_server(&path, "fs", &obj(json!({"command": "x"}))).unwrap();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v, json!({"mcp_servers": {"fs": {"command": "x"}}}));
        let loaded = super::super::load(&path).unwrap();
        assert_eq!(
            loaded.config.mcp_servers["fs"].command.as_deref(),
            Some("x")
        );
    }

    #[test]
    fn symlinked_config_is_edited_at_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        std::fs::write(&real, "{}").unwrap();
        let link = dir.path().join("config.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        add_mcp_server(&link, "fs", &obj(json!({"command": "x"}))).unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(std::fs::read_to_string(&real).unwrap().contains("\"fs\""));
    }

    #[test]
    fn concurrent_adds_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, "{\"workspace\": \"/w\"}\n").unwrap();
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                std::thread::spawn(move || {
                    add_mcp_server(&path, &format!("s{i}"), &obj(json!({"command": "x"})))
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        let loaded = super::super::load(&path).unwrap();
        assert_eq!(loaded.config.mcp_servers.len(), 8);
        assert_eq!(loaded.config.workspace.as_deref(), Some(Path::new("/w")));
    }
}
