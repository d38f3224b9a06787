//! What a tool produced, whatever its source: the one result shape built-in tools, custom
//! tool programs and MCP servers produce, and the JSON-RPC envelope, the MCP facade, the
//! CLI and the audit log consume.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::ContentBlock;

/// A tool's output: its own fields, the MCP content blocks and structured content it
/// returned, and the control fields for the agent loop, kept apart.
///
/// On the wire (the `result` of an `invoke` envelope) `structured_content`, the fields and
/// `content` are members of one object; the control fields travel beside it, in the
/// envelope's `control` ([`super::InvokeResult::control`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolOutput {
    /// The tool's own fields, in the order it gave them (`output`, `exit_code`, `path`, …).
    /// Never `content` when [`Self::content`] is set, nor `structured_content` when
    /// [`Self::structured_content`] is, nor a name starting with `_`.
    pub fields: Map<String, Value>,
    /// MCP content blocks, as the tool gave them (annotations and all), for MCP frontends:
    /// a custom tool's `content`, an MCP server's blocks when they are more than text.
    /// Read them typed with [`Self::blocks`].
    pub content: Option<Vec<Value>>,
    /// MCP `structuredContent`.
    pub structured_content: Option<Map<String, Value>>,
    /// Signals for the agent loop, not text for the model.
    pub control: Control,
}

/// The fields that may hold an output's main text, in order of preference.
const MAIN_TEXT: [&str; 6] = ["output", "stdout", "content", "entries", "matches", "text"];

impl ToolOutput {
    /// An output of plain fields (a built-in tool's).
    pub fn from_fields(fields: Map<String, Value>) -> Self {
        ToolOutput {
            fields,
            ..Default::default()
        }
    }

    /// Sets one of the tool's own fields.
    pub fn insert(&mut self, key: &str, value: impl Into<Value>) {
        self.fields.insert(key.to_owned(), value.into());
    }

    /// The content blocks that are blocks the MCP spec defines, typed (others are skipped).
    pub fn blocks(&self) -> impl Iterator<Item = ContentBlock> + '_ {
        self.content
            .iter()
            .flatten()
            .filter_map(|b| ContentBlock::deserialize(b).ok())
    }

    /// What a reader is shown of this output: the one place that decides, for every
    /// renderer (the MCP facade, the CLI).
    pub fn shown(&self) -> Shown<'_> {
        let main = MAIN_TEXT.iter().find_map(|k| {
            self.fields
                .get(*k)
                .and_then(Value::as_str)
                .map(|text| (*k, text))
        });
        let facts = self
            .fields
            .iter()
            .filter(|(k, v)| Some(k.as_str()) != main.map(|(m, _)| m) && v.as_str() != Some(""))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Shown {
            main_text: main.map(|(_, text)| text),
            facts,
        }
    }
}

/// An output as a reader sees it (see [`ToolOutput::shown`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Shown<'a> {
    /// The main text: the first of `output`, `stdout`, `content`, `entries`, `matches`,
    /// `text` (`load_skill`'s, `search_tools`') that is a string.
    pub main_text: Option<&'a str>,
    /// Every other field but empty strings (a quiet stderr says nothing), e.g. `exit_code`.
    pub facts: Map<String, Value>,
}

impl Serialize for ToolOutput {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let len = self.fields.len()
            + usize::from(self.content.is_some())
            + usize::from(self.structured_content.is_some());
        let mut map = s.serialize_map(Some(len))?;
        if let Some(structured) = &self.structured_content {
            map.serialize_entry("structured_content", structured)?;
        }
        for (k, v) in &self.fields {
            map.serialize_entry(k, v)?;
        }
        if let Some(content) = &self.content {
            map.serialize_entry("content", content)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for ToolOutput {
    /// `content` is content blocks when it is a list (`read_file`'s is text), and
    /// `structured_content` structured content when it is an object.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut fields = Map::<String, Value>::deserialize(d)?;
        let content = match fields.remove("content") {
            Some(Value::Array(blocks)) => Some(blocks),
            Some(other) => {
                fields.insert("content".into(), other);
                None
            }
            None => None,
        };
        let structured_content = match fields.remove("structured_content") {
            Some(Value::Object(s)) => Some(s),
            Some(other) => {
                fields.insert("structured_content".into(), other);
                None
            }
            None => None,
        };
        Ok(ToolOutput {
            fields,
            content,
            structured_content,
            control: Control::default(),
        })
    }
}

/// The schema of [`ToolOutput`] on the wire.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct ToolOutputWire {
    /// MCP `structuredContent`.
    structured_content: Option<Map<String, Value>>,
    /// MCP content blocks (or, for `read_file`, the numbered lines).
    content: Option<Value>,
    /// The tool's own fields.
    #[serde(flatten)]
    fields: Map<String, Value>,
}

impl JsonSchema for ToolOutput {
    fn schema_name() -> Cow<'static, str> {
        "ToolOutput".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        ToolOutputWire::json_schema(generator)
    }
}

/// The control fields the contract defines (proto-docs/tools.md): on the wire, members of
/// the envelope's `control` whose names start with `_`. A field a program makes up, or one
/// of the wrong type, is not one of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Control {
    /// The output carries an image the agent loop may attach to the next model turn.
    #[serde(
        rename = "_multimodal",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub multimodal: Option<bool>,
    /// The output's first image.
    #[serde(
        rename = "_image_data_url",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub image_data_url: Option<ImageDataUrl>,
}

impl Control {
    /// The control fields of an output with an image (its first).
    pub fn image(url: ImageDataUrl) -> Self {
        Control {
            multimodal: Some(true),
            image_data_url: Some(url),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Control::default()
    }

    /// Moves every `_` field out of `fields` (a program's result): those the contract
    /// defines, with the right type, become control fields. Returns the names of the others,
    /// which are dropped.
    pub fn split_from(&mut self, fields: &mut Map<String, Value>) -> Vec<String> {
        if !fields.keys().any(|k| k.starts_with('_')) {
            return Vec::new();
        }
        let mut dropped = Vec::new();
        let names: Vec<String> = fields
            .keys()
            .filter(|k| k.starts_with('_'))
            .cloned()
            .collect();
        for name in names {
            let Some(value) = fields.shift_remove(&name) else {
                continue;
            };
            let accepted = match (name.as_str(), value) {
                ("_multimodal", Value::Bool(b)) => {
                    self.multimodal = Some(b);
                    true
                }
                ("_image_data_url", Value::String(s)) => match ImageDataUrl::try_from(s) {
                    Ok(url) => {
                        self.image_data_url = Some(url);
                        true
                    }
                    Err(_) => false,
                },
                _ => false,
            };
            if !accepted {
                dropped.push(name);
            }
        }
        dropped
    }
}

/// A `data:image/<type>;base64,<data>` URL: the only kind of URL `_image_data_url` may hold
/// (never `javascript:`, `file:` or `https:`, which a frontend might follow).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "String")]
pub struct ImageDataUrl(String);

impl ImageDataUrl {
    /// The URL of image `data` (base64) of MIME type `mime`; `None` unless `mime` is an
    /// `image/` type and `data` is base64.
    pub fn new(mime: &str, data: &str) -> Option<Self> {
        Self::try_from(format!("data:{mime};base64,{data}")).ok()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ImageDataUrl {
    type Error = &'static str;
    fn try_from(url: String) -> Result<Self, Self::Error> {
        const NOT: &str = "not a data:image/…;base64, URL";
        let rest = url.strip_prefix("data:image/").ok_or(NOT)?;
        let (subtype, data) = rest.split_once(";base64,").ok_or(NOT)?;
        let subtype_ok = !subtype.is_empty()
            && subtype
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
        let data_ok = data
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b));
        if subtype_ok && data_ok {
            Ok(ImageDataUrl(url))
        } else {
            Err(NOT)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(o) => o,
            _ => unreachable!(),
        }
    }

    #[test]
    fn only_the_contracts_control_fields_with_their_types_are_accepted() {
        let mut fields = obj(json!({
            "text": "hi", "_multimodal": true, "_approved": true,
            "_image_data_url": "data:image/png;base64,iVBORw0K"
        }));
        let mut control = Control::default();
        assert_eq!(control.split_from(&mut fields), vec!["_approved"]);
        assert_eq!(Value::Object(fields), json!({"text": "hi"}));
        assert_eq!(
            serde_json::to_value(&control).unwrap(),
            json!({"_multimodal": true, "_image_data_url": "data:image/png;base64,iVBORw0K"})
        );
        for forged in [
            json!("javascript:alert(1)"),
            json!("data:text/html;base64,PHNjcmlwdD4="),
            json!("data:image/svg+xml,<svg onload=alert(1)>"),
            json!("data:image/png;base64,AA AA"),
            json!(1),
        ] {
            let mut fields = obj(json!({"_image_data_url": forged, "_multimodal": "yes"}));
            let mut control = Control::default();
            assert_eq!(control.split_from(&mut fields).len(), 2, "{forged}");
            assert!(control.is_empty() && fields.is_empty(), "{forged}");
        }
    }

    #[test]
    fn content_is_blocks_only_when_it_is_a_list() {
        let text: ToolOutput =
            serde_json::from_value(json!({"path": "a", "content": "     1\thi\n"})).unwrap();
        assert_eq!(text.content, None);
        assert_eq!(text.shown().main_text, Some("     1\thi\n"));
        let blocks: ToolOutput = serde_json::from_value(json!({
            "output": "a", "content": [{"type": "text", "text": "a"}], "structured_content": {"n": 1}
        }))
        .unwrap();
        assert_eq!(
            blocks.blocks().collect::<Vec<_>>(),
            vec![ContentBlock::text("a")]
        );
        assert_eq!(blocks.structured_content, Some(obj(json!({"n": 1}))));
        assert_eq!(
            serde_json::to_value(&blocks).unwrap(),
            json!({"structured_content": {"n": 1}, "output": "a", "content": [{"type": "text", "text": "a"}]})
        );
    }

    #[test]
    fn the_main_text_is_the_first_text_field_and_the_rest_are_facts() {
        let out =
            ToolOutput::from_fields(obj(json!({"exit_code": 0, "stdout": "hi\n", "stderr": ""})));
        let shown = out.shown();
        assert_eq!(shown.main_text, Some("hi\n"));
        assert_eq!(Value::Object(shown.facts), json!({"exit_code": 0}));
    }
}
