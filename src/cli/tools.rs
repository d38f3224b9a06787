//! `toolhost tools approve|diff NAME`: reviewing and accepting quarantined tools.

use std::process::ExitCode;

use clap::Subcommand;

use crate::client::{Client, ClientError};
use crate::protocol::{method, McpTool, ToolNameParams, ToolsApproveResult, ToolsDiffResult};

#[derive(Subcommand, Debug)]
pub enum ToolsCommand {
    /// Accept a quarantined tool's current definition and list it again.
    Approve { name: String },
    /// Show a tool's pinned definition against its current one (`-` pinned, `+` current).
    Diff { name: String },
}

pub async fn run(
    client: &Client,
    command: ToolsCommand,
    json: bool,
) -> Result<ExitCode, ClientError> {
    match command {
        ToolsCommand::Approve { name } => {
            let r: ToolsApproveResult = client
                .call(method::TOOLS_APPROVE, &ToolNameParams { name })
                .await?;
            if json {
                println!("{}", serde_json::to_string(&r).unwrap_or_default());
            } else {
                println!("approved {} (revision {})", r.name, r.revision);
            }
        }
        ToolsCommand::Diff { name } => {
            let r: ToolsDiffResult = client
                .call(method::TOOLS_DIFF, &ToolNameParams { name })
                .await?;
            if json {
                println!("{}", serde_json::to_string(&r).unwrap_or_default());
                return Ok(ExitCode::SUCCESS);
            }
            match &r.quarantine {
                Some(q) => println!("{}", q.message),
                None => println!("{} is not quarantined", r.name),
            }
            print!("{}", diff_text(r.pinned.as_ref(), r.current.as_ref()));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A line diff of the two definitions as indented JSON.
fn diff_text(old: Option<&McpTool>, new: Option<&McpTool>) -> String {
    let pretty = |t: Option<&McpTool>| {
        t.and_then(|t| serde_json::to_string_pretty(t).ok())
            .unwrap_or_default()
    };
    let (a, b) = (pretty(old), pretty(new));
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    // Longest common subsequence over lines: definitions are small.
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut out = String::from("--- pinned\n+++ current\n");
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push_str(&format!("  {}\n", a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            // Deletions before insertions, as `diff -u` prints them.
            out.push_str(&format!("- {}\n", a[i]));
            i += 1;
        } else {
            out.push_str(&format!("+ {}\n", b[j]));
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diff_marks_the_changed_line() {
        let t = |d: &str| McpTool {
            name: "w".into(),
            title: None,
            description: d.into(),
            input_schema: json!({}),
            output_schema: None,
            annotations: None,
        };
        let d = diff_text(Some(&t("old")), Some(&t("new")));
        assert_eq!(
            d,
            "--- pinned\n+++ current\n  {\n    \"name\": \"w\",\n-   \"description\": \"old\",\n+   \"description\": \"new\",\n    \"inputSchema\": {}\n  }\n"
        );
    }
}
