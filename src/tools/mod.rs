//! Built-in tools: file tools (`fs`) and the shell (`shell`).

use std::path::Path;
use std::sync::Arc;

use crate::registry::Tool;

/// The six built-in tools. `outputs_dir` is where spilled outputs live; `read_file` may
/// read there even though it is outside the workspace.
pub fn builtins(outputs_dir: &Path) -> Vec<Arc<dyn Tool>> {
    let _ = outputs_dir;
    Vec::new()
}
