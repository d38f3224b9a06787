//! The YAML front matter of a Markdown file — a skill's `SKILL.md`, a command file —
//! split from its body and read as JSON, within bounds.
//!
//! These files come from folders a workspace (a cloned repository, a sandboxed command)
//! can write, so the parse must stay small whatever the file says. yaml-rust2's
//! `YamlLoader` copies an aliased node at every alias, so 512 bytes of nested aliases
//! (an alias bomb) grew into gigabytes and aborted the daemon, and its recursive clone and
//! drop overflowed the stack on a chain of 3,000 anchors. Here the pull parser's events
//! build the JSON value directly, and three bounds hold:
//!
//! - the front matter is at most [`MAX_BYTES`];
//! - nodes nest at most [`MAX_DEPTH`] deep (an alias counts with the depth of what it
//!   names), so every later walk of the value stays shallow;
//! - the value, aliases expanded, weighs at most [`MAX_WEIGHT`] (one per node plus the
//!   bytes of its scalars): an alias is refused *before* it is copied once it would pass
//!   that, so a bomb costs no more than its first few levels. Ordinary aliases stay valid.
//!
//! A breach is an error about the file (the caller names it), never a daemon abort.

use std::collections::HashMap;

use serde_json::{Map, Value};
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::TScalarStyle;
use yaml_rust2::Yaml;

/// The most front matter read (a skill's asks for a name and a 1,024-character description).
pub const MAX_BYTES: usize = 64 * 1024;
/// How deep mappings and sequences nest, at most.
pub const MAX_DEPTH: usize = 32;
/// The most the value may weigh with its aliases expanded: nodes plus scalar bytes.
pub const MAX_WEIGHT: usize = 256 * 1024;

/// `(front matter, where the body starts)` when `text` opens with a `---` line and a later
/// `---` line closes it.
pub fn split(text: &str) -> Option<(&str, usize)> {
    let text_start = text.strip_prefix('\u{feff}').map_or(0, |_| 3);
    let rest = &text[text_start..];
    let first = rest.lines().next()?;
    if first.trim_end() != "---" {
        return None;
    }
    let front_start = text_start + first.len() + 1;
    let mut at = front_start;
    for line in text.get(front_start..)?.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Some((&text[front_start..at], at + line.len()));
        }
        at += line.len();
    }
    None
}

/// The front matter's first YAML document as JSON (`null` when it is empty), or why it
/// cannot be read: a sentence that starts with "front matter".
pub fn parse(front: &str) -> Result<Value, String> {
    if front.len() > MAX_BYTES {
        return Err(format!(
            "front matter is {} bytes long; at most {MAX_BYTES} are allowed",
            front.len()
        ));
    }
    let mut parser = Parser::new_from_str(front);
    let mut b = Builder::default();
    loop {
        let (event, mark) = parser
            .next_token()
            .map_err(|e| format!("front matter is not valid YAML: {e}"))?;
        let at = || format!("line {}", mark.line());
        match event {
            Event::StreamEnd | Event::DocumentEnd => break,
            Event::Nothing | Event::StreamStart | Event::DocumentStart => {}
            Event::SequenceStart(anchor, _) => b.open(Open::Seq(Vec::new()), anchor, at)?,
            Event::MappingStart(anchor, _) => b.open(Open::Map(Map::new(), None), anchor, at)?,
            Event::SequenceEnd | Event::MappingEnd => b.close(at)?,
            Event::Scalar(text, style, anchor, tag) => {
                let weight = 1 + text.len();
                b.weight += weight;
                let node = Node {
                    value: scalar(text, style, tag.as_ref()),
                    weight,
                    height: 0,
                };
                b.add(node, anchor, at)?;
            }
            Event::Alias(id) => {
                let Some((weight, height)) = b.anchors.get(&id).map(|n| (n.weight, n.height))
                else {
                    return Err(format!("front matter: {}: an alias names no anchor", at()));
                };
                if b.stack.len() + height > MAX_DEPTH {
                    return Err(too_deep(&at()));
                }
                // Paid for before it is copied: a copy is always within the bounds.
                b.spend(weight, &at)?;
                let Some(node) = b.anchors.get(&id).cloned() else {
                    continue;
                };
                b.add(node, 0, at)?;
            }
        }
    }
    Ok(b.root.map_or(Value::Null, |n| n.value))
}

fn too_deep(at: &str) -> String {
    format!("front matter: {at}: nests more than {MAX_DEPTH} levels deep")
}

/// A finished node: its value, weight (nodes plus scalar bytes) and height (0 for a scalar).
#[derive(Clone)]
struct Node {
    value: Value,
    weight: usize,
    height: usize,
}

/// A sequence or mapping still open; a mapping holds the key waiting for its value.
enum Open {
    Seq(Vec<Value>),
    Map(Map<String, Value>, Option<String>),
}

struct Frame {
    open: Open,
    anchor: usize,
    weight: usize,
    height: usize,
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    /// Anchored nodes by id, for their aliases.
    anchors: HashMap<usize, Node>,
    /// The weight of everything built so far, aliases expanded.
    weight: usize,
    root: Option<Node>,
}

impl Builder {
    /// Adds `weight` to what was built, refused beyond [`MAX_WEIGHT`].
    fn spend(&mut self, weight: usize, at: &impl Fn() -> String) -> Result<(), String> {
        if self.weight + weight > MAX_WEIGHT {
            return Err(format!(
                "front matter: {}: with its anchors and aliases expanded it grows beyond {MAX_WEIGHT} nodes and bytes (an alias bomb?)",
                at()
            ));
        }
        self.weight += weight;
        Ok(())
    }

    fn open(&mut self, open: Open, anchor: usize, at: impl Fn() -> String) -> Result<(), String> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(too_deep(&at()));
        }
        self.weight += 1;
        self.stack.push(Frame {
            open,
            anchor,
            weight: 1,
            height: 1,
        });
        Ok(())
    }

    fn close(&mut self, at: impl Fn() -> String) -> Result<(), String> {
        let Some(frame) = self.stack.pop() else {
            return Ok(());
        };
        let value = match frame.open {
            Open::Seq(items) => Value::Array(items),
            Open::Map(map, _) => Value::Object(map),
        };
        let node = Node {
            value,
            weight: frame.weight,
            height: frame.height,
        };
        self.add(node, frame.anchor, at)
    }

    /// Puts a finished node into its parent (or makes it the document), keeping it for
    /// aliases when it has an anchor.
    fn add(&mut self, node: Node, anchor: usize, at: impl Fn() -> String) -> Result<(), String> {
        if anchor > 0 {
            // The copy kept for aliases counts too: nested anchors must not multiply.
            self.spend(node.weight, &at)?;
            self.anchors.insert(anchor, node.clone());
        }
        let Some(parent) = self.stack.last_mut() else {
            self.root = Some(node);
            return Ok(());
        };
        parent.weight += node.weight;
        parent.height = parent.height.max(node.height + 1);
        match &mut parent.open {
            Open::Seq(items) => items.push(node.value),
            Open::Map(_, key @ None) => *key = Some(key_text(node.value)),
            Open::Map(map, key) => {
                let k = key.take().unwrap_or_default();
                if map.contains_key(&k) {
                    return Err(format!(
                        "front matter: {}: the key `{k}` is given twice",
                        at()
                    ));
                }
                map.insert(k, node.value);
            }
        }
        Ok(())
    }
}

/// A scalar as yaml-rust2's loader reads it: quoted is a string; a plain one is typed by
/// its core-schema tag or its text.
fn scalar(text: String, style: TScalarStyle, tag: Option<&Tag>) -> Value {
    let yaml = if style != TScalarStyle::Plain {
        Yaml::String(text)
    } else {
        match tag {
            Some(t) if t.handle == "tag:yaml.org,2002:" && t.suffix == "str" => Yaml::String(text),
            Some(t) if t.handle != "tag:yaml.org,2002:" => Yaml::String(text),
            _ => Yaml::from_str(&text),
        }
    };
    match yaml {
        Yaml::Real(r) => r
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or_else(|| Value::String(r), Value::Number),
        Yaml::Integer(i) => i.into(),
        Yaml::String(s) => s.into(),
        Yaml::Boolean(b) => b.into(),
        _ => Value::Null,
    }
}

/// A mapping key as a JSON object key: a scalar's text, anything else as JSON.
fn key_text(k: Value) -> String {
    match k {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn front_matter_is_split_from_the_body() {
        let text = "---\nname: a\ndescription: b\n---\n# Body\n";
        let (front, start) = split(text).unwrap();
        assert_eq!(front, "name: a\ndescription: b\n");
        assert_eq!(&text[start..], "# Body\n");
        assert!(split("# no front matter\n").is_none());
        assert!(split("---\nname: a\n").is_none());
    }

    #[test]
    fn values_are_read_as_the_loader_reads_them() {
        let v =
            parse("name: a\nn: 2\nr: 1.5\nb: true\nq: '3'\nnothing:\nlist: [x, 1]\nmap: {k: v}\n")
                .unwrap();
        assert_eq!(
            v,
            json!({"name": "a", "n": 2, "r": 1.5, "b": true, "q": "3", "nothing": null,
                   "list": ["x", 1], "map": {"k": "v"}})
        );
        assert_eq!(parse("").unwrap(), Value::Null);
        assert_eq!(parse("# only a comment\n").unwrap(), Value::Null);
        // An ordinary alias still works.
        let v = parse("base: &b {x: 1}\nother: *b\n").unwrap();
        assert_eq!(v, json!({"base": {"x": 1}, "other": {"x": 1}}));
        let e = parse("a: 1\na: 2\n").unwrap_err();
        assert!(e.contains("`a` is given twice"), "{e}");
    }

    #[test]
    fn an_alias_bomb_is_refused_before_it_grows() {
        let mut bomb = String::from(
            "a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
        );
        for i in 1..10 {
            let p = i - 1;
            bomb.push_str(&format!(
                "a{i}: &a{i} [*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p}]\n"
            ));
        }
        assert!(bomb.len() < 1024);
        let e = parse(&bomb).unwrap_err();
        assert!(e.contains("alias bomb"), "{e}");
    }

    #[test]
    fn deep_nesting_and_anchor_chains_are_refused() {
        let deep = format!("a: {}1{}\n", "[".repeat(40), "]".repeat(40));
        assert!(parse(&deep).unwrap_err().contains("levels deep"));
        let mut block = String::new();
        for i in 0..40 {
            block.push_str(&format!("{}k{i}:\n", "  ".repeat(i)));
        }
        assert!(parse(&block).unwrap_err().contains("levels deep"));
        // Anchors each a list holding the one before: 2,000 fit the size cap and are
        // refused for their depth; 3,000 (65 KB) for their size.
        let chain = |n: usize| {
            let mut chain = String::from("a0: &a0 [x]\n");
            for i in 1..n {
                chain.push_str(&format!("a{i}: &a{i} [*a{}]\n", i - 1));
            }
            chain
        };
        assert!(parse(&chain(2000)).unwrap_err().contains("levels deep"));
        assert!(parse(&chain(3000)).unwrap_err().contains("bytes long"));
        let big = format!("a: {}\n", "x".repeat(MAX_BYTES));
        assert!(parse(&big).unwrap_err().contains("bytes long"));
    }
}
