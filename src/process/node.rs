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

/// What `node --version` says, without its `v` (`"20.20.2"`), or `None` when it cannot be run.
pub fn version(node: &Path) -> Option<String> {
    let out = std::process::Command::new(node)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let v = text.trim().trim_start_matches('v');
    (out.status.success() && !v.is_empty()).then(|| v.to_owned())
}

/// `(major, minor)` of a Node version such as `"22.6.0"` (0 for what is not a number).
fn major_minor(version: &str) -> (u32, u32) {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// Whether Node `version` runs TypeScript modules at all: type stripping came in 22.6 (behind
/// a flag the module host adds, [`needs_strip_flag`]).
pub fn strips_types(version: &str) -> bool {
    let (major, minor) = major_minor(version);
    major > 22 || (major == 22 && minor >= 6)
}

/// Whether Node `version` strips TypeScript only behind `--experimental-strip-types`.
pub fn needs_strip_flag(version: &str) -> bool {
    matches!(major_minor(version), (22, 6..=17) | (23, 0..=5))
}

#[cfg(test)]
mod tests {
    #[test]
    fn type_stripping_starts_at_22_6() {
        for (v, strips) in [
            ("20.20.2", false),
            ("22.5.1", false),
            ("22.6.0", true),
            ("23.0.0", true),
            ("24.1.0", true),
            ("", false),
        ] {
            assert_eq!(super::strips_types(v), strips, "{v}");
        }
    }

    #[test]
    fn the_strip_flag_is_passed_only_where_node_needs_it() {
        use super::needs_strip_flag;
        assert!(!needs_strip_flag("20.20.2"));
        assert!(!needs_strip_flag("22.5.1"));
        assert!(needs_strip_flag("22.6.0"));
        assert!(needs_strip_flag("22.17.1"));
        assert!(!needs_strip_flag("22.18.0"));
        assert!(needs_strip_flag("23.5.0"));
        assert!(!needs_strip_flag("23.6.0"));
        assert!(!needs_strip_flag("24.1.0"));
    }
}
