//! The page's event stream as written on the wire: server-sent events, gathered into one
//! write per batch (`rpc/ui.rs` flushes a batch 100 ms after the first change it gathers),
//! so a busy host costs an open page ten writes a second however many calls it runs.

use serde::Serialize;

/// Events gathered for one write.
#[derive(Default)]
pub struct Batch {
    text: String,
}

impl Batch {
    /// Adds one event: `event: <name>` and its data as one line of JSON (JSON written
    /// compactly has no raw newline, so it is always a single `data:` line).
    pub fn push(&mut self, name: &str, data: &impl Serialize) {
        let Ok(json) = serde_json::to_string(data) else {
            return;
        };
        self.text.push_str("event: ");
        self.text.push_str(name);
        self.text.push_str("\ndata: ");
        self.text.push_str(&json);
        self.text.push_str("\n\n");
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// The batch's text; the batch starts over empty.
    pub fn take(&mut self) -> String {
        std::mem::take(&mut self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_framed_one_data_line_each() {
        let mut b = Batch::default();
        assert!(b.is_empty());
        b.push("metrics", &"a\nb");
        b.push("calls", &serde_json::json!({"in_flight": []}));
        let text = b.take();
        assert_eq!(
            text,
            "event: metrics\ndata: \"a\\nb\"\n\nevent: calls\ndata: {\"in_flight\":[]}\n\n"
        );
        assert!(b.is_empty());
    }
}
