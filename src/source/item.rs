//! The rules an item of a folder source is held to, shared by skills and commands: its name
//! (the Agent Skills rule: 1–64 characters of lowercase letters, digits and hyphens, without
//! a leading, trailing or doubled hyphen), its description's length, and the error that
//! names the file, the field and what is wrong.

use std::fmt;
use std::path::PathBuf;

pub const MAX_NAME_CHARS: usize = 64;
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// Why an item was skipped (or what of it was left out): `<file>: <field>: <reason>`.
/// Skills and command files fail this way (`SkillError`, `CommandError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub file: PathBuf,
    pub field: Option<&'static str>,
    pub reason: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file.display())?;
        if let Some(field) = self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.reason)
    }
}

/// The name rule, as a sentence about what is wrong.
pub fn check_name(name: &str) -> Result<(), String> {
    let len = name.chars().count();
    if len == 0 || len > MAX_NAME_CHARS {
        return Err(format!(
            "'{name}' is {len} characters long; 1 to {MAX_NAME_CHARS} are allowed"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(format!(
            "'{name}' may hold only lowercase letters, digits and hyphens"
        ));
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        return Err(format!(
            "'{name}' may not start or end with a hyphen, nor hold two in a row"
        ));
    }
    Ok(())
}
