//! Printing results: the global `--json` switch and the small formatters every family
//! shares (tables, enum spellings, first lines of descriptions).
//!
//! Everything printed for people goes through [`printable`] (by way of [`say!`] and
//! [`say_err!`]): descriptions, names, errors and outputs come from tools, servers and
//! files nobody vetted, and a raw ESC or BEL in them would retitle the terminal, move the
//! cursor or rewrite lines already shown. `--json` output needs no such care: JSON escapes
//! every control character in a string.

use std::borrow::Cow;
use std::fmt::Write as _;

use clap::Args;
use serde::Serialize;
use serde_json::Value;

/// How results are printed: for people by default, or with the global `--json` as exactly
/// one compact JSON document on stdout (the method's result as the protocol defines it), for
/// every client command alike.
#[derive(Args, Debug, Clone, Copy)]
pub struct Output {
    /// Print the result as one line of JSON (the protocol's result object).
    #[arg(long, global = true)]
    pub json: bool,
}

/// `text` with every control character but line feed and tab shown as a visible escape
/// (`\x1b`, `\r`, `\u{9b}`), so it prints as the characters it holds and cannot drive the
/// terminal. Borrowed when there is nothing to escape (the common case).
pub fn printable(text: &str) -> Cow<'_, str> {
    let keep = |c: char| !c.is_control() || c == '\n' || c == '\t';
    if text.chars().all(keep) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if keep(c) => out.push(c),
            '\r' => out.push_str("\\r"),
            c if u32::from(c) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    Cow::Owned(out)
}

/// `println!` for people: the formatted line passes through [`printable`].
macro_rules! say {
    ($($arg:tt)*) => {
        println!("{}", $crate::cli::render::printable(&format!($($arg)*)))
    };
}
pub(crate) use say;

/// `eprintln!` for people (errors quote daemon messages, which quote tools).
macro_rules! say_err {
    ($($arg:tt)*) => {
        eprintln!("{}", $crate::cli::render::printable(&format!($($arg)*)))
    };
}
pub(crate) use say_err;

/// The wire spelling of an enum value (`read_only`, `circuit_open`, …).
pub fn wire<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".to_owned(),
    }
}

pub fn print_json<T: Serialize + ?Sized>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// A result as JSON: one compact line with `--json` (for scripts), else indented (for
/// commands without a more readable form).
pub fn emit<T: Serialize + ?Sized>(out: Output, v: &T) {
    if out.json {
        println!("{}", serde_json::to_string(v).unwrap_or_default());
    } else {
        print_json(v);
    }
}

/// The first non-blank line of a description, without a list marker.
pub fn first_line(text: &str) -> &str {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .trim_start_matches("- ")
}

/// Names joined with commas, or `none`.
pub fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// Rows as columns, each as wide as its widest cell (so long tool names never push the
/// rest out of line), the last column left unpadded.
pub fn print_table(rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths[c].saturating_sub(cell.chars().count());
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        say!("{}", line.trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_shown_as_escapes_and_text_passes_unchanged() {
        assert!(matches!(
            printable("plain\ttext\nü ✓"),
            Cow::Borrowed("plain\ttext\nü ✓")
        ));
        assert_eq!(
            printable("a\u{1b}]0;title\u{7}b\rc\u{7f}\u{9b}2K"),
            "a\\x1b]0;title\\x07b\\rc\\x7f\\u{9b}2K"
        );
    }
}
