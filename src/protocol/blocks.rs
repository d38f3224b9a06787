//! The one rule from MCP content blocks to what the model and the agent loop get of them.
//! Every source that returns blocks (an MCP server, a custom tool program, a JS/TS module)
//! reads them here, so the same blocks give the same `output` text and the same image
//! control fields whatever their source (proto-docs/tools.md, "Content blocks").

use std::borrow::Cow;

use serde_json::Value;

use super::ImageDataUrl;

/// The text the model reads of `blocks`: one line per block, joined by `\n`. A text block
/// is its text and an embedded resource its text; the rest are named in brackets, since the
/// model cannot read them as text: `[image: image/png, 92 bytes base64]`,
/// `[audio: audio/wav, 60 bytes base64]`, `[resource: <uri>]` (a blob),
/// `[resource link: <uri>]`, and a kind the spec does not define (or a block without the
/// fields its kind needs) `[<type> content]`. What has no `type` gives no line.
///
/// The blocks are read in place (never copied: an image's data may be megabytes).
pub fn blocks_text(blocks: &[Value]) -> String {
    let lines: Vec<Cow<'_, str>> = blocks.iter().filter_map(block_line).collect();
    lines.join("\n")
}

/// The first image of `blocks` as a data URL, for the control fields (`_image_data_url`)
/// of frontends that attach images to the next model turn.
pub fn first_image(blocks: &[Value]) -> Option<ImageDataUrl> {
    blocks
        .iter()
        .find_map(|b| match (kind(b), str_at(b, "mimeType")) {
            (Some("image"), Some(mime)) => ImageDataUrl::new(mime, str_at(b, "data")?),
            _ => None,
        })
}

fn kind(block: &Value) -> Option<&str> {
    block.get("type").and_then(Value::as_str)
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// One block's line (see [`blocks_text`]).
fn block_line(block: &Value) -> Option<Cow<'_, str>> {
    let kind = kind(block)?;
    let line = match kind {
        "text" => str_at(block, "text").map(Cow::Borrowed),
        "image" | "audio" => match (str_at(block, "mimeType"), str_at(block, "data")) {
            (Some(mime), Some(data)) => Some(Cow::Owned(format!(
                "[{kind}: {mime}, {} bytes base64]",
                data.len()
            ))),
            _ => None,
        },
        "resource" => block.get("resource").and_then(|r| {
            str_at(r, "text")
                .map(Cow::Borrowed)
                .or_else(|| Some(Cow::Owned(format!("[resource: {}]", str_at(r, "uri")?))))
        }),
        "resource_link" => {
            str_at(block, "uri").map(|uri| Cow::Owned(format!("[resource link: {uri}]")))
        }
        _ => None,
    };
    Some(line.unwrap_or_else(|| Cow::Owned(format!("[{kind} content]"))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(blocks: Value) -> String {
        match blocks {
            Value::Array(b) => blocks_text(&b),
            _ => unreachable!(),
        }
    }

    #[test]
    fn text_blocks_are_their_text_joined_by_newlines() {
        assert_eq!(text(json!([])), "");
        assert_eq!(text(json!([{"type": "text", "text": "a"}])), "a");
        assert_eq!(
            text(
                json!([{"type": "text", "text": "a", "annotations": {}}, {"type": "text", "text": "b\n"}])
            ),
            "a\nb\n"
        );
    }

    #[test]
    fn every_kind_of_block_gives_one_line() {
        let blocks = json!([
            {"type": "text", "text": "caption"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside a"}},
            {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AA=="}},
            {"type": "resource_link", "uri": "file:///c", "name": "c"},
        ]);
        assert_eq!(
            text(blocks),
            "caption\n[image: image/png, 4 bytes base64]\n[audio: audio/wav, 8 bytes base64]\ninside a\n[resource: file:///b.bin]\n[resource link: file:///c]"
        );
    }

    #[test]
    fn unknown_kinds_are_named_and_what_is_no_block_gives_nothing() {
        let blocks = json!([
            {"type": "hologram", "data": "x"},
            {"type": "image", "mimeType": "image/png"},
            {"type": "resource_link"},
            {"text": "no type"},
            "not an object",
            {"type": "text", "text": "after"},
        ]);
        assert_eq!(
            text(blocks),
            "[hologram content]\n[image content]\n[resource_link content]\nafter"
        );
    }

    #[test]
    fn the_first_valid_image_is_the_data_url() {
        let blocks = json!([
            {"type": "text", "text": "x"},
            {"type": "image", "data": "not base64!", "mimeType": "image/png"},
            {"type": "image", "data": "AAAA", "mimeType": "image/gif"},
            {"type": "image", "data": "BBBB", "mimeType": "image/png"},
        ]);
        let Value::Array(blocks) = blocks else {
            unreachable!()
        };
        assert_eq!(
            first_image(&blocks).map(|u| u.as_str().to_owned()),
            Some("data:image/gif;base64,AAAA".to_owned())
        );
        assert_eq!(first_image(&blocks[..2]), None);
        assert_eq!(
            first_image(&[json!({"type": "audio", "data": "AAAA", "mimeType": "image/png"})]),
            None
        );
    }
}
