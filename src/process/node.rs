//! The Node.js executable: the JS/TS module host and code mode's runner both run one.

use std::path::{Path, PathBuf};

/// `configured` (config `custom_tools.node`), else the first executable `node` on `PATH`.
pub fn find_node(configured: Option<PathBuf>) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if let Some(node) = configured {
        return if runnable(&node) {
            Ok(node)
        } else {
            Err(format!(
                "config custom_tools.node names {}, which is not an executable file",
                node.display()
            ))
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("node"))
        .find(|p| runnable(p))
        .ok_or_else(|| {
            "no Node.js found: JS/TS tool modules need node; put it on PATH or set config custom_tools.node".to_owned()
        })
}
