//! One command file: read through [`crate::safe_read`] (never out of its commands
//! folder), its optional YAML front matter checked, and its body expanded with the
//! arguments a caller gives.
//!
//! Front matter keys: `description` (a string of at most 1,024 characters) and
//! `arguments` (a list of `{name, description, required, choices}`); other keys (a
//! frontend's own, such as `allowed-tools`) are left alone. A file without front matter is
//! a command with no description whose whole text is the body, as frontends' command
//! files are.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde_json::Value;

use crate::front_matter;
use crate::protocol::{CommandArgument, CommandEntry, CommandSource};
use crate::safe_read;
use crate::source::item::{FileError, MAX_DESCRIPTION_CHARS};

/// The most of one command file read.
pub const MAX_COMMAND_BYTES: u64 = 256 * 1024;
/// The argument a command gets when it declares none but its body uses `$ARGUMENTS` or
/// `$1`…`$9`: the free text typed after the command.
pub const FREE_TEXT_ARGUMENT: &str = "arguments";

/// Why a command file was skipped: `<file>: <field>: <reason>`. A command's Markdown and
/// front matter are read as a skill's are, so it fails the same way.
pub type CommandError = FileError;

/// What a command expands to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// A file's Markdown, with `$ARGUMENTS`, `$1`…`$9` and `{{name}}` to substitute.
    Template {
        text: String,
        /// The arguments were not declared: `$1`… are the words of [`FREE_TEXT_ARGUMENT`].
        free_text: bool,
    },
    /// One of the host's own commands, rendered live (`super::builtin`).
    Builtin(super::builtin::Builtin),
}

/// A command that loaded: how it is listed, and what it expands to.
#[derive(Debug, Clone)]
pub struct Command {
    pub entry: CommandEntry,
    pub body: Body,
}

impl Command {
    /// Checks `given` against the declared arguments: an unknown one, a required one
    /// missing (or empty) and a value outside `choices` are refused, naming the argument.
    pub fn check(&self, given: &BTreeMap<String, String>) -> Result<(), String> {
        let name = &self.entry.name;
        let declared = &self.entry.arguments;
        if let Some(unknown) = given
            .keys()
            .find(|k| !declared.iter().any(|a| &a.name == *k))
        {
            return Err(format!("command '{name}' has no argument '{unknown}'"));
        }
        for a in declared {
            let value = given.get(&a.name).map(String::as_str).unwrap_or_default();
            if a.required && value.is_empty() {
                return Err(format!("command '{name}' needs the argument '{}'", a.name));
            }
            if !value.is_empty() && !a.choices.is_empty() && !a.choices.iter().any(|c| c == value) {
                return Err(format!(
                    "argument '{}' of command '{name}' is '{value}'; it is one of: {}",
                    a.name,
                    a.choices.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// A file's `text` (its [`Body::Template`]) with `given` substituted, after
    /// [`Command::check`].
    pub fn substitute(
        &self,
        text: &str,
        free_text: bool,
        given: &BTreeMap<String, String>,
    ) -> String {
        let value = |name: &str| given.get(name).map(String::as_str).unwrap_or_default();
        let positional: Vec<&str> = if free_text {
            value(FREE_TEXT_ARGUMENT).split_whitespace().collect()
        } else {
            self.entry
                .arguments
                .iter()
                .map(|a| value(&a.name))
                .collect()
        };
        expand(text, &positional, given, &self.entry.arguments)
    }

    /// The values `choices` offers for `argument` starting with `prefix`.
    pub fn complete(&self, argument: &str, prefix: &str) -> Vec<String> {
        let Some(a) = self.entry.arguments.iter().find(|a| a.name == argument) else {
            return Vec::new();
        };
        a.choices
            .iter()
            .filter(|c| c.starts_with(prefix))
            .cloned()
            .collect()
    }
}

/// The words of a command's name, from its path relative to its commands folder:
/// `mcp/status.md` is `["mcp", "status"]`. Each word follows the skill name rule
/// (lowercase letters, digits and hyphens), so `_` can join them into a prompt name that
/// no other command's name also comes out as.
pub fn words(rel: &Path) -> Result<Vec<String>, String> {
    let mut words: Vec<String> = Vec::new();
    let parts: Vec<_> = rel.components().collect();
    for (i, part) in parts.iter().enumerate() {
        let part = part.as_os_str().to_string_lossy();
        let word = if i + 1 == parts.len() {
            part.strip_suffix(".md")
                .or_else(|| part.strip_suffix(".toml"))
                .unwrap_or(&part)
                .to_owned()
        } else {
            part.into_owned()
        };
        crate::source::item::check_name(&word)?;
        words.push(word);
    }
    Ok(words)
}

/// The bytes of the command file `rel` beneath `root` (bounded; `rel` and any symlink on its
/// way stay inside `root`).
pub fn read(root: &Path, rel: &Path) -> Result<Vec<u8>, CommandError> {
    safe_read::read_beneath(root, rel, MAX_COMMAND_BYTES).map_err(|e| CommandError {
        file: root.join(rel),
        field: None,
        reason: format!("the file {e}"),
    })
}

/// The command in `bytes`, the content of `rel` beneath `root` (what the trust gate hashed,
/// for a workspace's file: nothing is read twice, so nothing can change in between).
pub fn parse(
    root: &Path,
    rel: &Path,
    source: CommandSource,
    bytes: Vec<u8>,
) -> Result<Command, CommandError> {
    let file = root.join(rel);
    let err = |field, reason: String| CommandError {
        file: file.clone(),
        field,
        reason,
    };
    let words = words(rel).map_err(|r| err(Some("name"), format!("the file name: {r}")))?;
    let text = String::from_utf8(bytes).map_err(|_| err(None, "is not UTF-8 text".into()))?;
    if rel.extension().is_some_and(|x| x == "toml") {
        let (meta, body) = gemini_toml(&text).map_err(|(field, reason)| err(field, reason))?;
        return Ok(Command {
            entry: CommandEntry {
                name: words.join(" "),
                prompt: words.join("_"),
                description: meta.description,
                arguments: meta.arguments,
                source,
                path: Some(file.display().to_string()),
            },
            body: Body::Template {
                text: body,
                free_text: false,
            },
        });
    }
    let (meta, body) = match front_matter::split(&text) {
        Some((front, start)) => (
            parse_front_matter(front).map_err(|(field, reason)| err(field, reason))?,
            text.get(start..).unwrap_or_default(),
        ),
        None => (FrontMatter::default(), text.as_str()),
    };
    let body = body.trim().to_owned();
    let mut arguments = meta.arguments;
    let free_text = arguments.is_empty() && uses_positional(&body);
    if free_text {
        arguments.push(CommandArgument {
            name: FREE_TEXT_ARGUMENT.into(),
            description: Some(
                "What is typed after the command ($ARGUMENTS; $1… are its words)".into(),
            ),
            required: false,
            choices: Vec::new(),
        });
    }
    Ok(Command {
        entry: CommandEntry {
            name: words.join(" "),
            prompt: words.join("_"),
            description: meta.description,
            arguments,
            source,
            path: Some(file.display().to_string()),
        },
        body: Body::Template {
            text: body,
            free_text,
        },
    })
}

/// The argument of a Gemini CLI command: what is typed after it, as `{{args}}`.
const GEMINI_ARGS: &str = "args";

/// A Gemini CLI command file: TOML with `prompt` (required) and `description`. The typed
/// text replaces `{{args}}`; a prompt without `{{args}}` gets it appended after a blank
/// line, as Gemini CLI does.
fn gemini_toml(text: &str) -> Result<(FrontMatter, String), FieldError> {
    let doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| (None, format!("not valid TOML: {e}")))?;
    let string = |key: &'static str| match doc.get(key) {
        None => Ok(None),
        Some(item) => item
            .as_str()
            .map(|s| Some(s.to_owned()))
            .ok_or((Some(key), "expected a string".to_owned())),
    };
    let prompt = string("prompt")?.ok_or((Some("prompt"), "missing".to_owned()))?;
    let description = string("description")?;
    if let Some(d) = &description {
        let n = d.chars().count();
        if n > MAX_DESCRIPTION_CHARS {
            return Err((
                Some("description"),
                format!("is {n} characters long; at most {MAX_DESCRIPTION_CHARS} are allowed"),
            ));
        }
    }
    let placeholder = format!("{{{{{GEMINI_ARGS}}}}}");
    let mut body = prompt.trim().to_owned();
    if !body.contains(&placeholder) {
        body = format!("{body}\n\n{placeholder}");
    }
    let meta = FrontMatter {
        description,
        arguments: vec![CommandArgument {
            name: GEMINI_ARGS.into(),
            description: Some("What is typed after the command ({{args}})".into()),
            required: false,
            choices: Vec::new(),
        }],
    };
    Ok((meta, body))
}

#[derive(Default)]
struct FrontMatter {
    description: Option<String>,
    arguments: Vec<CommandArgument>,
}

type FieldError = (Option<&'static str>, String);

fn parse_front_matter(front: &str) -> Result<FrontMatter, FieldError> {
    let map = match front_matter::parse(front).map_err(|e| (None, e))? {
        Value::Null => return Ok(FrontMatter::default()),
        Value::Object(map) => map,
        _ => return Err((None, "front matter is not a YAML mapping".into())),
    };
    let description = match map.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.chars().count() > MAX_DESCRIPTION_CHARS => {
            return Err((
                Some("description"),
                format!(
                    "is {} characters long; at most {MAX_DESCRIPTION_CHARS} are allowed",
                    s.chars().count()
                ),
            ))
        }
        Some(Value::String(s)) => Some(s.trim().to_owned()).filter(|s| !s.is_empty()),
        Some(_) => return Err((Some("description"), "must be a string".into())),
    };
    let arguments = match map.get("arguments") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => parse_arguments(list)?,
        Some(_) => {
            return Err((
                Some("arguments"),
                "must be a list of {name, description, required, choices}".into(),
            ))
        }
    };
    Ok(FrontMatter {
        description,
        arguments,
    })
}

fn parse_arguments(list: &[Value]) -> Result<Vec<CommandArgument>, FieldError> {
    let mut out: Vec<CommandArgument> = Vec::new();
    let mut seen = HashSet::new();
    for (i, item) in list.iter().enumerate() {
        let bad = |reason: String| (Some("arguments"), format!("item {}: {reason}", i + 1));
        let Value::Object(map) = item else {
            return Err(bad("must be a mapping with a `name`".into()));
        };
        let mut arg = CommandArgument {
            name: String::new(),
            description: None,
            required: false,
            choices: Vec::new(),
        };
        for (key, value) in map {
            match (key.as_str(), value) {
                ("name", Value::String(s)) => arg.name = s.clone(),
                ("description", Value::String(s)) => arg.description = Some(s.trim().to_owned()),
                ("required", Value::Bool(b)) => arg.required = *b,
                ("choices", Value::Array(values)) => {
                    arg.choices = values
                        .iter()
                        .map(|v| match v {
                            Value::String(s) => Ok(s.clone()),
                            Value::Number(n) if n.is_i64() => Ok(n.to_string()),
                            _ => Err(bad("`choices` must be a list of strings".into())),
                        })
                        .collect::<Result<_, _>>()?;
                }
                (k @ ("name" | "description" | "required" | "choices"), _) => {
                    let want = match k {
                        "required" => "true or false",
                        "choices" => "a list of strings",
                        _ => "a string",
                    };
                    return Err(bad(format!("`{k}` must be {want}")));
                }
                (other, _) => {
                    return Err(bad(format!(
                        "unknown key `{other}` (name, description, required, choices)"
                    )))
                }
            }
        }
        if !valid_argument_name(&arg.name) {
            return Err(bad(format!(
                "`name` '{}' must be 1 to 64 letters, digits, `_` or `-`",
                arg.name
            )));
        }
        if !seen.insert(arg.name.clone()) {
            return Err(bad(format!("`name` '{}' is declared twice", arg.name)));
        }
        out.push(arg);
    }
    Ok(out)
}

fn valid_argument_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Whether `body` refers to the arguments by position (`$ARGUMENTS`, `$1`…`$9`).
fn uses_positional(body: &str) -> bool {
    body.match_indices('$').any(|(i, _)| {
        let rest = &body[i..];
        rest.starts_with("$ARGUMENTS") || position(rest).is_some()
    })
}

/// `n` when `text` starts with `$n`, `n` in 1…9.
fn position(text: &str) -> Option<usize> {
    let digit = text.strip_prefix('$')?.chars().next()?.to_digit(10)?;
    (1..=9).contains(&digit).then_some(digit as usize)
}

/// Substitutes, in one pass (a value is never expanded again): `$ARGUMENTS` by the
/// positional values joined by spaces, `$1`…`$9` by one of them (empty past the end), and
/// `{{name}}` (spaces inside allowed) by the named value; `{{other}}` naming no argument is
/// left as written.
pub fn expand(
    template: &str,
    positional: &[&str],
    named: &BTreeMap<String, String>,
    declared: &[CommandArgument],
) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find(['$', '{']) {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("$ARGUMENTS") {
            let all: Vec<&str> = positional
                .iter()
                .copied()
                .filter(|v| !v.is_empty())
                .collect();
            out.push_str(&all.join(" "));
            rest = after;
        } else if let Some(n) = position(rest) {
            out.push_str(positional.get(n - 1).copied().unwrap_or_default());
            rest = &rest[2..];
        } else if let Some((name, after)) = placeholder(rest) {
            match declared.iter().find(|a| a.name == name) {
                Some(a) => out.push_str(named.get(&a.name).map(String::as_str).unwrap_or_default()),
                None => out.push_str(&rest[..rest.len() - after.len()]),
            }
            rest = after;
        } else {
            // A lone `$` or `{`: one byte, ASCII.
            out.push_str(&rest[..1]);
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}

/// `{{ name }}` at the start of `text`: the trimmed name and what follows the `}}`.
fn placeholder(text: &str) -> Option<(&str, &str)> {
    let inner = text.strip_prefix("{{")?;
    let end = inner.find("}}")?;
    let name = inner[..end].trim();
    valid_argument_name(name).then(|| (name, &inner[end + 2..]))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn arg(name: &str) -> CommandArgument {
        CommandArgument {
            name: name.into(),
            description: None,
            required: false,
            choices: Vec::new(),
        }
    }

    #[test]
    fn placeholders_are_substituted_once() {
        let declared = [arg("pr"), arg("focus")];
        let named: BTreeMap<String, String> = [
            ("pr".to_owned(), "123".to_owned()),
            ("focus".to_owned(), "{{pr}} $1".to_owned()),
        ]
        .into();
        let text = expand(
            "Review #$1 ({{ focus }}); all: $ARGUMENTS; $3; {{other}} {{pr}}$$ {x} cost $",
            &["123", "{{pr}} $1"],
            &named,
            &declared,
        );
        assert_eq!(
            text,
            "Review #123 ({{pr}} $1); all: 123 {{pr}} $1; ; {{other}} 123$$ {x} cost $"
        );
    }

    #[test]
    fn words_follow_the_name_rule() {
        assert_eq!(
            words(Path::new("mcp/status.md")).unwrap(),
            ["mcp", "status"]
        );
        assert!(words(Path::new("Mcp.md")).is_err());
        assert!(words(Path::new("a_b.md")).is_err());
    }

    #[test]
    fn arguments_are_checked_with_their_item() {
        let e = parse_front_matter("arguments:\n  - name: a\n    require: true\n")
            .err()
            .unwrap();
        assert_eq!(e.0, Some("arguments"));
        assert!(e.1.contains("item 1") && e.1.contains("require"), "{}", e.1);
        let e = parse_front_matter("arguments:\n  - name: a\n  - name: a\n")
            .err()
            .unwrap();
        assert!(e.1.contains("twice"), "{}", e.1);
        let e = parse_front_matter("description: [x]\n").err().unwrap();
        assert_eq!(e.0, Some("description"));
        let ok = parse_front_matter(
            "description: d\nallowed-tools: x\narguments:\n  - name: level\n    choices: [low, high]\n",
        )
        .unwrap();
        assert_eq!(ok.arguments[0].choices, ["low", "high"]);
    }

    #[test]
    fn free_text_is_declared_when_the_body_uses_positions() {
        assert!(uses_positional("fix $1"));
        assert!(uses_positional("all of $ARGUMENTS"));
        assert!(!uses_positional("costs $0 or $ 5"));
    }

    #[test]
    fn gemini_toml_commands_take_their_prompt_and_args() {
        let (meta, body) = gemini_toml(
            "description = \"Commit.\"\nprompt = \"\"\"\nWrite a commit for {{args}}.\n\"\"\"\n",
        )
        .unwrap();
        assert_eq!(meta.description.as_deref(), Some("Commit."));
        assert_eq!(body, "Write a commit for {{args}}.");
        assert_eq!(meta.arguments[0].name, "args");
        let (_, body) = gemini_toml("prompt = 'Explain.'").unwrap();
        assert_eq!(body, "Explain.\n\n{{args}}");
        let e = gemini_toml("description = 'x'").err().unwrap();
        assert_eq!(e, (Some("prompt"), "missing".to_owned()));
        let e = gemini_toml("prompt = 3").err().unwrap();
        assert_eq!(e.0, Some("prompt"));
        assert!(gemini_toml("prompt = ").is_err());
        assert_eq!(
            words(Path::new("git/commit.toml")).unwrap(),
            ["git", "commit"]
        );
    }
}
