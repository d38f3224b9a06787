//! The JSON frontends: Claude Code (`~/.claude.json` with its user and project scopes,
//! `.mcp.json`), Claude Desktop, Cursor, VS Code and Gemini CLI. Each keeps its servers in
//! one object (`mcpServers`, VS Code `servers`); `~/.claude.json` also in
//! `projects.<path>.mcpServers`.

use serde_json::{Map, Value};

use super::{Block, Entry, Source};

/// The blocks of one JSON file: `(where, servers)` pairs.
pub fn blocks(source: &Source, root: &Value) -> Vec<(Vec<String>, Map<String, Value>)> {
    let Block::Json { key, projects } = source.block else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(Value::Object(servers)) = root.get(key) {
        out.push((vec![key.to_owned()], servers.clone()));
    }
    if projects {
        for (path, project) in root
            .get("projects")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if let Some(Value::Object(servers)) = project.get(key) {
                if !servers.is_empty() {
                    out.push((
                        vec!["projects".to_owned(), path.clone(), key.to_owned()],
                        servers.clone(),
                    ));
                }
            }
        }
    }
    out
}

/// Parses `text` (a frontend's file) into its entries.
pub fn read(source: &Source, text: &str) -> Result<Vec<Entry>, String> {
    let root: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(blocks(source, &root)
        .into_iter()
        .flat_map(|(at, servers)| {
            servers.into_iter().map(move |(name, raw)| Entry {
                at: at.clone(),
                name,
                raw,
            })
        })
        .collect())
}

/// `text` without the servers `remove` (each `(where, name)`), with `entry` (when given)
/// as `toolhost` in the file's main block; every other key is kept in its order.
pub fn rewrite(
    source: &Source,
    text: &str,
    remove: &[(Vec<String>, String)],
    entry: Option<Value>,
) -> Result<String, String> {
    let Block::Json { key, .. } = source.block else {
        return Err("not a JSON frontend".to_owned());
    };
    let mut root: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    for (at, name) in remove {
        if let Some(Value::Object(servers)) = at.iter().try_fold(&mut root, |v, k| v.get_mut(k)) {
            servers.shift_remove(name);
        }
    }
    if source.frontend == super::Frontend::VsCode {
        drop_unused_inputs(&mut root, key);
    }
    let Some(entry) = entry else {
        return finish(&root);
    };
    let Value::Object(top) = &mut root else {
        return Err("the file is not a JSON object".to_owned());
    };
    let servers = top
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(servers) = servers else {
        return Err(format!("{key} is not an object"));
    };
    servers.insert(super::TOOLHOST.to_owned(), entry);
    finish(&root)
}

/// VS Code's `inputs` (the values it prompts for) that no server left in the file uses as
/// `${input:id}`: the imported servers took theirs along (as `${ID}` in the secrets file).
fn drop_unused_inputs(root: &mut Value, key: &str) {
    let used = root.get(key).map(Value::to_string).unwrap_or_default();
    if let Some(Value::Array(inputs)) = root.get_mut("inputs") {
        inputs.retain(|input| {
            input
                .get("id")
                .and_then(Value::as_str)
                .is_none_or(|id| used.contains(&format!("${{input:{id}}}")))
        });
    }
}

fn finish(root: &Value) -> Result<String, String> {
    let mut out = serde_json::to_string_pretty(root).map_err(|e| e.to_string())?;
    out.push('\n');
    Ok(out)
}
