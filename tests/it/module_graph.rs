//! No import circle between the crate's top-level modules (ARCHITECTURE.md, "Invariants").
//!
//! Reads the source, not the compiler: every `crate::<module>` path in `src/<module>.rs` or
//! `src/<module>/**.rs` (use lines, paths in code, grouped `use crate::{a, b::{..}}`) is an
//! arrow from that module to `<module>`. Comments are skipped, tests inside the crate are
//! not: a circle that only a unit test closes is still a circle. Paths across modules are
//! spelled from `crate::` in this code base, which is what makes this reading complete.
//!
//! Run it with `cargo test --test module_graph`; a failure names each circle and, for every
//! arrow in it, the files that draw it.
//!
//! Why the arrows point the way they do:
//! - `protocol` is the bottom: it imports nothing of the crate. Enums that are both wire and
//!   config (`ApprovalClass`, `ApprovalMode`, `SandboxPolicy`, `Network`) live there, so
//!   `config → protocol`, never the reverse.
//! - `sandbox → config` and `approval → config`: a call's sandbox carries the config's
//!   section, and approval reads `approval.sandboxed_commands`.
//! - `registry → catalog`: the catalog is pure policy over `ToolSpec`s and knows neither the
//!   `Tool` trait nor the live registry.
//! - `custom`, `skills`, `commands → trust`: every file-defined source asks the one gate;
//!   `trust` knows no source.
//! - sources `→ registry, catalog, source`: a source implements `Tool` and describes each
//!   tool with a `ToolSpec`; the registry never names a source module, and no source names
//!   another. JS/TS modules are a kind of custom tool (`custom::modules`: one scan, one
//!   watch, one swap for programs and modules), not a source of their own.
//! - The Node executable (`process::node`) and the browser origins the HTTP doors allow
//!   (`protocol::LOCAL_ORIGINS`) sit below the rooms that share them, so `code` does not
//!   import the custom tool source and the page (`ui`) does not import the facade.
//! - `host` holds state and imports no behaviour; `daemon`, `reload`, `rpc` and `invoke` act
//!   on it; `session` and `mcp` never import `host`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

/// module -> module it imports -> files of the first that import the second.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

#[test]
fn no_import_circle_between_top_level_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = read_graph(&src);
    assert!(
        graph.len() > 10,
        "found the crate's modules and their imports (got {} modules)",
        graph.len()
    );
    let circles = circles(&graph);
    let report: Vec<String> = circles.iter().map(|c| describe(&graph, c)).collect();
    assert!(
        circles.is_empty(),
        "import circles between top-level modules:\n{}",
        report.join("\n")
    );
}

/// The sources of tools and prompts stand side by side on shared bases (`source`'s folder
/// watch and item rules, `front_matter`): none imports another. (The built-ins are
/// `tools`, which no source imports either.)
#[test]
fn no_source_module_imports_another() {
    const SOURCES: [&str; 5] = ["tools", "custom", "skills", "commands", "mcp"];
    let graph = read_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        SOURCES.iter().all(|s| graph.contains_key(*s)),
        "every source is a top-level module"
    );
    let mut found = Vec::new();
    for from in SOURCES {
        for (to, files) in graph.get(from).into_iter().flatten() {
            if SOURCES.contains(&to.as_str()) {
                let files: Vec<&str> = files.iter().map(String::as_str).collect();
                found.push(format!("{from} -> {to}: {}", files.join(", ")));
            }
        }
    }
    assert!(
        found.is_empty(),
        "sources importing sources:\n{}",
        found.join("\n")
    );
}

/// The longest chain of imports between top-level modules, counted in modules, is at most
/// [`LONGEST_CHAIN`] (18 modules before the folder sources got their shared base: `host ->
/// commands -> skills -> custom -> modules`; 16 before the modules joined the custom
/// source and the page stopped importing the facade; 14 since); a failure prints the
/// chain. `cargo nextest run --test it module_graph:: --no-capture` prints it.
#[test]
fn the_longest_import_chain_stays_short() {
    let graph = read_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let chain = longest_chain(&graph);
    println!(
        "longest import chain ({} modules): {}",
        chain.len(),
        chain.join(" -> ")
    );
    assert!(
        chain.len() <= LONGEST_CHAIN,
        "the longest import chain has {} modules: {}",
        chain.len(),
        chain.join(" -> ")
    );
}

/// What [`the_longest_import_chain_stays_short`] allows: lower it as chains shorten.
const LONGEST_CHAIN: usize = 15;

/// The longest path of the (circle-free) graph, by memoised depth-first search.
fn longest_chain(graph: &Graph) -> Vec<String> {
    fn from<'a>(
        graph: &'a Graph,
        m: &'a str,
        memo: &mut BTreeMap<&'a str, Vec<String>>,
        on_path: &mut BTreeSet<&'a str>,
    ) -> Vec<String> {
        if let Some(done) = memo.get(m) {
            return done.clone();
        }
        on_path.insert(m);
        let mut best = Vec::new();
        for next in graph.get(m).into_iter().flat_map(|a| a.keys()) {
            if on_path.contains(next.as_str()) {
                continue; // a circle: the circle test names it
            }
            let tail = from(graph, next, memo, on_path);
            if tail.len() > best.len() {
                best = tail;
            }
        }
        on_path.remove(m);
        best.insert(0, m.to_owned());
        memo.insert(m, best.clone());
        best
    }
    let mut memo = BTreeMap::new();
    let mut best = Vec::new();
    for m in graph.keys() {
        let chain = from(graph, m, &mut memo, &mut BTreeSet::new());
        if chain.len() > best.len() {
            best = chain;
        }
    }
    best
}

/// The check itself can fail: a circle of three is found and named in order, an arrow
/// inside one module or to the crate root is no arrow, and grouped imports count.
#[test]
fn the_reader_finds_grouped_imports_and_the_finder_finds_circles() {
    let modules: BTreeSet<String> = ["a", "b", "c", "d"].map(String::from).into();
    let code = "use crate::{b::X, c::{Y, Z}}; // crate::d in a comment\n\
                /* crate::d */ fn f() { crate::a::g(); crate::lock(); mycrate::d::h(); }";
    assert_eq!(
        imports(code, &modules),
        ["a", "b", "c"].map(String::from).into()
    );
    let mut graph = Graph::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        graph
            .entry(from.into())
            .or_default()
            .entry(to.into())
            .or_default()
            .insert(format!("src/{from}.rs"));
    }
    let found = circles(&graph);
    assert_eq!(found, vec![vec!["a".to_owned(), "b".into(), "c".into()]]);
    assert!(describe(&graph, &found[0]).starts_with("a -> b -> c -> a"));
}

/// The top-level modules (`mod x;` in `lib.rs`) and the arrows between them.
fn read_graph(src: &Path) -> Graph {
    let lib = fs::read_to_string(src.join("lib.rs")).unwrap_or_default();
    let modules: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("pub ").unwrap_or(l.trim());
            let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
            l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
        })
        .collect();
    let mut graph = Graph::new();
    for file in rust_files(src) {
        let rel = file.strip_prefix(src).unwrap_or(&file);
        let Some(first) = rel.components().next() else {
            continue;
        };
        let first = first.as_os_str().to_string_lossy();
        let module = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
        if !modules.contains(&module) {
            continue; // lib.rs, main.rs
        }
        let code = fs::read_to_string(&file).unwrap_or_default();
        let arrows = graph.entry(module.clone()).or_default();
        for to in imports(&code, &modules) {
            if to != module {
                arrows
                    .entry(to)
                    .or_default()
                    .insert(format!("src/{}", rel.display()));
            }
        }
    }
    graph
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The top-level modules that `code` names after `crate::`.
fn imports(code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let code = without_comments(code);
    let mut out = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `mycrate::`
        }
        let names = match rest.strip_prefix('{') {
            Some(group) => heads_of_group(group),
            None => vec![ident(rest)],
        };
        out.extend(names.into_iter().filter(|n| modules.contains(n)));
    }
    out
}

/// The first identifier of each item of a `{a::X, b::{Y, Z}, c}` group (`group` starts
/// after the opening brace).
fn heads_of_group(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item_start = true;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => item_start = true,
            c if item_start && !c.is_whitespace() => {
                heads.push(ident(&group[i..]));
                item_start = false;
            }
            _ => {}
        }
    }
    heads
}

fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// `code` without `//` and `/* */` comments (doc links are not imports). A `//` inside a
/// string literal cuts the rest of that line, which can only hide a path written after a
/// URL on the same line.
fn without_comments(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    loop {
        let line = rest.find("//");
        let block = rest.find("/*");
        match (line, block) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |end| &rest[l + end..]);
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                rest = rest[b..].find("*/").map_or("", |end| &rest[b + end + 2..]);
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

/// Every strongly connected group of two or more modules, each as one circle through all
/// of its members' shortest paths, starting at its smallest name (so the report is
/// stable).
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut queue = VecDeque::from([from.to_owned()]);
        while let Some(m) = queue.pop_front() {
            for to in graph.get(&m).into_iter().flat_map(|a| a.keys()) {
                if seen.insert(to.clone()) {
                    queue.push_back(to.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for (m, from_m) in &reachable {
        if done.contains(*m) || !from_m.contains(*m) {
            continue;
        }
        let group: BTreeSet<String> = from_m
            .iter()
            .filter(|n| reachable.get(n).is_some_and(|r| r.contains(*m)))
            .cloned()
            .collect();
        done.extend(group.iter().cloned());
        out.push(circle_through(graph, &group));
    }
    out
}

/// A closed walk from the group's first member through every other one, by shortest paths
/// inside the group; listed without repeating the start.
fn circle_through(graph: &Graph, group: &BTreeSet<String>) -> Vec<String> {
    let path = |from: &str, to: &str| -> Vec<String> {
        let mut back: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = VecDeque::from([from.to_owned()]);
        while let Some(m) = queue.pop_front() {
            for next in graph.get(&m).into_iter().flat_map(|a| a.keys()) {
                if group.contains(next) && !back.contains_key(next) && next != from {
                    back.insert(next.clone(), m.clone());
                    queue.push_back(next.clone());
                }
            }
        }
        let mut steps = vec![to.to_owned()];
        while let Some(prev) = back.get(steps.last().map_or("", String::as_str)) {
            if prev == from {
                break;
            }
            steps.push(prev.clone());
        }
        steps.reverse();
        steps
    };
    let mut walk: Vec<String> = group.iter().take(1).cloned().collect();
    for next in group.iter().skip(1) {
        let here = walk.last().cloned().unwrap_or_default();
        if !walk.contains(next) {
            walk.extend(path(&here, next));
        }
    }
    let here = walk.last().cloned().unwrap_or_default();
    let start = walk.first().cloned().unwrap_or_default();
    let mut home = path(&here, &start);
    home.pop(); // the start itself
    walk.extend(home);
    walk
}

/// `a -> b -> a`, then one line per arrow with the files that draw it.
fn describe(graph: &Graph, circle: &[String]) -> String {
    let mut text = circle.join(" -> ");
    if let Some(first) = circle.first() {
        text.push_str(&format!(" -> {first}"));
    }
    for (i, from) in circle.iter().enumerate() {
        let to = &circle[(i + 1) % circle.len()];
        let files = graph
            .get(from)
            .and_then(|a| a.get(to))
            .map(|f| f.iter().cloned().collect::<Vec<_>>().join(", "))
            .unwrap_or_default();
        text.push_str(&format!("\n  {from} -> {to}: {files}"));
    }
    text
}
