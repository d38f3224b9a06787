//! Agent Skills end to end: real skill folders written by the tests, the real daemon and
//! the real CLI.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::skills::{front, skill_names, write_skill};
use common::{result, write_atomic, Daemon};
use serde_json::{json, Value};

async fn names(d: &Daemon) -> Vec<String> {
    skill_names(&result(d, "list_skills", json!({})).await)
}

async fn skill_errors(d: &Daemon) -> Vec<String> {
    let h = result(d, "host.health", json!({})).await;
    serde_json::from_value(h["skill_errors"].clone()).unwrap_or_default()
}

#[tokio::test]
async fn skills_are_found_in_order_validated_and_confined() {
    let d = Daemon::start_in(|dir| {
        let ws = dir.join("ws");
        let agents = ws.join(".agents/skills");
        let claude = ws.join(".claude/skills");
        write_skill(
            &dir.join("configured"),
            "from-config",
            &front("from-config", "A configured skill."),
            "Configured.\n",
            &[],
        );
        write_skill(
            &agents,
            "pdf",
            &front("pdf", "Fill PDF forms. Use when a PDF is mentioned."),
            "# PDF\nRun scripts/fill.py.\n",
            &[
                ("scripts/fill.py", "print('fill')\n"),
                ("references/REF.md", "ref\n"),
            ],
        );
        // The same name in .claude/skills: a clash; the first (.agents) wins.
        write_skill(
            &claude,
            "pdf",
            &front("pdf", "Another PDF skill."),
            "Other.\n",
            &[],
        );
        write_skill(
            &claude,
            "review",
            &front("review", "Reviews code."),
            "Review.\n",
            &[],
        );
        // Invalid: the name differs from the folder's.
        write_skill(&claude, "wrong-folder", &front("right-name", "x"), "", &[]);
        // Invalid: the description is too long.
        let long = "d".repeat(1025);
        write_skill(&claude, "too-long", &front("too-long", &long), "", &[]);
        // Invalid: no front matter at all.
        let bare = claude.join("bare");
        std::fs::create_dir_all(&bare).unwrap();
        std::fs::write(bare.join("SKILL.md"), "# Just Markdown\n").unwrap();
        // SKILL.md a symlink out of its folder: refused, the file is not read.
        let secret = dir.join("secret.md");
        std::fs::write(
            &secret,
            format!("---\n{}---\nsecret\n", front("escape", "x")),
        )
        .unwrap();
        let escape = claude.join("escape");
        std::fs::create_dir_all(&escape).unwrap();
        std::os::unix::fs::symlink(&secret, escape.join("SKILL.md")).unwrap();
        // A skill file that is a symlink out of the folder: left out, and never read.
        let leaky = write_skill(&claude, "leaky", &front("leaky", "Leaks."), "", &[]);
        std::os::unix::fs::symlink(&secret, leaky.join("notes.md")).unwrap();
        // The user's folders come after the workspace's.
        write_skill(
            &dir.join("home/.claude/skills"),
            "mine",
            &front("mine", "The user's own."),
            "Mine.\n",
            &[],
        );
        json!({"skills": {"paths": [dir.join("configured")]}})
    })
    .await;
    d.trust_workspace().await;
    let ws = d.workspace();
    assert_eq!(
        names(&d).await,
        ["from-config", "pdf", "leaky", "review", "mine"]
    );
    let list = result(&d, "list_skills", json!({})).await;
    let pdf = &list["skills"][1];
    assert_eq!(pdf["source"], "workspace_agents");
    assert_eq!(
        pdf["path"],
        ws.join(".agents/skills/pdf").display().to_string()
    );
    assert!(pdf["etag"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(list["skills"][0]["source"], "config");
    assert_eq!(list["skills"][4]["source"], "user_claude");

    let errors = skill_errors(&d).await;
    let claude = ws.join(".claude/skills");
    let has = |file: &Path, what: &str| {
        let prefix = format!("{}: ", file.display());
        errors
            .iter()
            .any(|e| e.starts_with(&prefix) && e.contains(what))
    };
    assert!(
        has(
            &claude.join("wrong-folder/SKILL.md"),
            "name: 'right-name' differs from the folder's name"
        ),
        "{errors:#?}"
    );
    assert!(
        has(
            &claude.join("too-long/SKILL.md"),
            "description: is 1025 characters long"
        ),
        "{errors:#?}"
    );
    assert!(
        has(&claude.join("bare/SKILL.md"), "no YAML front matter"),
        "{errors:#?}"
    );
    assert!(
        has(&claude.join("escape/SKILL.md"), "leads outside its folder"),
        "{errors:#?}"
    );
    assert!(
        has(&claude.join("leaky/notes.md"), "leads outside its folder"),
        "{errors:#?}"
    );
    let clash = format!(
        "skill 'pdf' is defined twice: {} is used, {} is ignored",
        ws.join(".agents/skills/pdf").display(),
        claude.join("pdf").display()
    );
    assert!(errors.contains(&clash), "{errors:#?}");
    assert_eq!(
        result(&d, "host.health", json!({})).await["status"],
        "degraded"
    );

    // get_skill: the text and the files.
    let g = result(&d, "get_skill", json!({"name": "pdf"})).await;
    assert!(g["text"].as_str().unwrap().contains("Run scripts/fill.py."));
    assert_eq!(
        g["files"],
        json!([
            {"path": "SKILL.md", "size": g["files"][0]["size"]},
            {"path": "references/REF.md", "size": 4},
            {"path": "scripts/fill.py", "size": 14}
        ])
    );
    let leaky = result(&d, "get_skill", json!({"name": "leaky"})).await;
    assert_eq!(
        leaky["files"],
        json!([{"path": "SKILL.md", "size": leaky["files"][0]["size"]}])
    );

    // read_skill_file: confined to the skill's folder.
    let f = result(
        &d,
        "read_skill_file",
        json!({"name": "pdf", "path": "scripts/fill.py"}),
    )
    .await;
    assert_eq!(f["text"], "print('fill')\n");
    for path in ["notes.md", "../pdf/SKILL.md", "/etc/passwd"] {
        let r = d
            .call("read_skill_file", json!({"name": "leaky", "path": path}))
            .await;
        assert_eq!(r["error"]["code"], -32602, "{path}: {r}");
    }
    let r = d
        .call(
            "read_skill_file",
            json!({"name": "leaky", "path": "notes.md"}),
        )
        .await;
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("outside its folder"),
        "{r}"
    );
    let r = d.call("get_skill", json!({"name": "nope"})).await;
    assert_eq!(r["error"]["message"], "no skill named 'nope'", "{r}");

    // load_skill: listed with the skills in its description, returns the instructions.
    let tools = result(&d, "list_tools", json!({})).await;
    let load = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "load_skill")
        .expect("load_skill is listed");
    let description = load["function"]["description"].as_str().unwrap();
    assert!(
        description.contains("  - pdf: Fill PDF forms. Use when a PDF is mentioned."),
        "{description}"
    );
    assert!(!description.contains("Another PDF skill."), "{description}");
    let out = d.invoke("load_skill", json!({"name": "pdf"})).await;
    let text = out["text"].as_str().unwrap();
    assert!(
        text.starts_with("# Skill: pdf\n\n# PDF\nRun scripts/fill.py."),
        "{text}"
    );
    assert!(
        text.contains("references/REF.md, scripts/fill.py"),
        "{text}"
    );
    assert!(!text.contains("description:"), "{text}");
    let r = d
        .call(
            "invoke",
            json!({"name": "load_skill", "arguments": {"name": "nope"}}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], false, "{r}");
    assert_eq!(
        r["result"]["result"]["error_kind"], "invalid_arguments",
        "{r}"
    );

    // discover: false keeps only the configured folder (applied by a reload).
    let cfg = json!({"skills": {"paths": [d.dir.path().join("configured")], "discover": false}});
    write_atomic(&d.config_path(), &cfg);
    let r = d.call("config.reload", json!({})).await;
    assert_eq!(r["result"]["applied"], true, "{r}");
    assert_eq!(names(&d).await, ["from-config"]);
    assert!(skill_errors(&d).await.is_empty());
    let out = d.invoke("load_skill", json!({"name": "pdf"})).await;
    assert_eq!(
        out["error_kind"], "invalid_arguments",
        "pdf is no longer a skill: {out}"
    );
}

#[tokio::test]
async fn adding_editing_and_removing_a_skill_notifies_once_each() {
    let d = Daemon::start_in(|_| json!({})).await;
    d.trust_workspace().await;
    let mut c = d.subscribed("subscribe_skills_changed").await;
    // The folder does not exist yet: it is picked up when created.
    let root = d.workspace().join(".toolhost/skills");
    let dir = write_skill(
        &root,
        "deploy",
        &front("deploy", "Deploys."),
        "Step 1.\n",
        &[("scripts/run.sh", "echo\n")],
    );
    let n = c.notification("skills_changed").await;
    assert_eq!(n["count"], 1, "{n}");
    c.quiet(600).await;
    assert_eq!(names(&d).await, ["deploy"]);
    let before = result(&d, "list_skills", json!({})).await["etag"].clone();
    assert_eq!(n["etag"], before);

    write_skill(
        &root,
        "deploy",
        &front("deploy", "Deploys, now better."),
        "Step 2.\n",
        &[],
    );
    let n = c.notification("skills_changed").await;
    assert_ne!(n["etag"], before);
    c.quiet(600).await;
    let g = result(&d, "get_skill", json!({"name": "deploy"})).await;
    assert_eq!(g["description"], "Deploys, now better.");
    assert!(g["text"].as_str().unwrap().ends_with("Step 2.\n"));

    std::fs::remove_dir_all(&dir).unwrap();
    let n = c.notification("skills_changed").await;
    assert_eq!(n["count"], 0, "{n}");
    c.quiet(600).await;
    assert!(names(&d).await.is_empty());
}

/// `toolhost skills …` in `ws`, with the user directories under `root`: (exit code, stdout).
async fn skills_cli(root: &Path, ws: &Path, args: &[&str]) -> (i32, String) {
    let out = common::toolhost(root)
        .arg("--config")
        .arg(root.join("no-config.json"))
        .arg("skills")
        .args(args)
        .current_dir(ws)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    (out.status.code().unwrap(), stdout)
}

#[tokio::test]
async fn skills_new_writes_a_valid_skill_and_check_and_list_need_no_daemon() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, ws) = (tmp.path(), tmp.path().join("project"));
    std::fs::create_dir_all(&ws).unwrap();
    let (code, out) = skills_cli(root, &ws, &["new", "release-notes"]).await;
    assert_eq!(code, 0, "{out}");
    let md = ws.join(".toolhost/skills/release-notes/SKILL.md");
    assert!(out.contains(&md.display().to_string()), "{out}");
    let (code, out) = skills_cli(root, &ws, &["check"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("ok      release-notes ("), "{out}");
    // A second `new` of the same name never overwrites it; a bad name is refused.
    let (code, _) = skills_cli(root, &ws, &["new", "release-notes"]).await;
    assert_eq!(code, 1);
    let (code, _) = skills_cli(root, &ws, &["new", "Bad_Name"]).await;
    assert_eq!(code, 1);
    assert!(!ws.join(".toolhost/skills/Bad_Name").exists());

    // The user's skill is listed after the project's, as the daemon would.
    write_skill(
        &root.join("home/.agents/skills"),
        "mine",
        &front("mine", "The user's own."),
        "",
        &[],
    );
    let (code, out) = skills_cli(root, &ws, &["--json"]).await;
    assert_eq!(code, 0, "{out}");
    let list: Value = serde_json::from_str(&out).unwrap();
    let sources: Vec<&str> = list["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["workspace_toolhost", "user_agents"]);

    // An invalid skill fails the check, naming the file and the field.
    write_skill(
        &ws.join(".claude/skills"),
        "broken",
        &front("other", "x"),
        "",
        &[],
    );
    let (code, out) = skills_cli(root, &ws, &["check"]).await;
    assert_eq!(code, 1, "{out}");
    let file = ws.join(".claude/skills/broken/SKILL.md");
    assert!(
        out.contains(&format!(
            "invalid {}: name: 'other' differs",
            file.display()
        )),
        "{out}"
    );
}

#[tokio::test]
async fn sync_links_into_an_empty_and_a_populated_claude_folder_leaving_foreign_skills_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, ws) = (tmp.path(), tmp.path().join("project"));
    let ours = ws.join(".toolhost/skills");
    write_skill(&ours, "alpha", &front("alpha", "Ours."), "", &[]);
    write_skill(&ours, "beta", &front("beta", "Ours too."), "", &[]);
    // Into an empty .agents/skills (it does not exist yet).
    let (code, out) = skills_cli(root, &ws, &["sync", "--target", "agents", "--check"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("outdated alpha"), "{out}");
    assert!(!ws.join(".agents").exists(), "--check writes nothing");
    let (code, out) = skills_cli(root, &ws, &["sync", "--target", "agents"]).await;
    assert_eq!(code, 0, "{out}");
    let link = ws.join(".agents/skills/alpha");
    // Relative, so the project's links survive a clone or a move.
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        Path::new("../../.toolhost/skills/alpha")
    );
    assert_eq!(
        link.canonicalize().unwrap(),
        ours.join("alpha").canonicalize().unwrap()
    );

    // Into a populated .claude/skills: its own beta is not ours and is left alone.
    let foreign = write_skill(
        &ws.join(".claude/skills"),
        "beta",
        &front("beta", "Theirs."),
        "",
        &[],
    );
    let (code, out) = skills_cli(root, &ws, &["sync", "--target", "claude"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!(
            "foreign  beta {} (not ours: left alone)",
            foreign.display()
        )),
        "{out}"
    );
    assert!(std::fs::symlink_metadata(&foreign).unwrap().is_dir());
    assert!(std::fs::read_to_string(foreign.join("SKILL.md"))
        .unwrap()
        .contains("Theirs."));
    assert!(std::fs::read_link(ws.join(".claude/skills/alpha")).is_ok());
    // Everything ours is linked now; the links are one skill, not clashes.
    let (code, out) = skills_cli(root, &ws, &["sync", "--check"]).await;
    assert_eq!(code, 0, "{out}");
    let (_, out) = skills_cli(root, &ws, &["check"]).await;
    let clashes: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("defined twice"))
        .collect();
    assert_eq!(clashes.len(), 1, "only the foreign beta clashes: {out}");
}
