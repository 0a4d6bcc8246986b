//! The module graph has no loops: every file's references to other modules of the crate
//! (`use crate::a::b`, `crate::a::f()`, `super::x`, `rung::a` from the binary) are edges, and the
//! graph of files must be acyclic. A loop is reported with the files in it and, for each edge,
//! the names that make it, so the fix (moving a type down a layer) is plain.
//!
//! A folder module is one unit: its `mod.rs` declares and re-exports its files (`mod x;`,
//! `pub use x::*`) and they use its items through `super::*`, which are not edges. Every other
//! path is, between any two files, inside a folder or across folders.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`stages::run`, `tui::panes`) → the source file.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            // A folder with its own Cargo.toml is another crate (src/core, src/model): its own graph.
            if p.is_dir() && !p.join("Cargo.toml").is_file() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let rel = p.strip_prefix(src).unwrap().with_extension("");
                let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
                if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                    parts.pop();
                }
                out.insert(parts.join("::"), p);
            }
        }
    }
    out
}

/// The text without comments and string literals (a path in a doc comment is not a use).
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            _ => out.push(c),
        }
    }
    out
}

/// The longest prefix of `path` that is a module; a module the crate root re-exports under
/// another name (`pub use model::diag;` in lib.rs) is that module.
fn resolve(mods: &BTreeMap<String, PathBuf>, path: &[&str]) -> Option<String> {
    let aliased: Vec<String>;
    let path = match path.first().and_then(|first| aliases(mods).remove(*first)) {
        Some(full) => {
            aliased = full.split("::").map(str::to_string).chain(path[1..].iter().map(|s| s.to_string())).collect();
            aliased.iter().map(String::as_str).collect::<Vec<_>>()
        }
        None => path.to_vec(),
    };
    (1..=path.len()).rev().map(|k| path[..k].join("::")).find(|m| mods.contains_key(m))
}

/// Modules the crate root re-exports: `pub use model::diag;` makes `diag` name `model::diag`.
fn aliases(mods: &BTreeMap<String, PathBuf>) -> BTreeMap<String, String> {
    let re = regex::Regex::new(r"(?m)^pub use ((?:[A-Za-z_]\w*::)*([A-Za-z_]\w*));").expect("static regex");
    let Some(root) = mods.get("") else { return BTreeMap::new() };
    let text = std::fs::read_to_string(root).unwrap_or_default();
    re.captures_iter(&text)
        .filter(|c| mods.contains_key(&c[1].to_string()))
        .map(|c| (c[2].to_string(), c[1].to_string()))
        .collect()
}

/// Module → (module it references → the names used).
fn edges(mods: &BTreeMap<String, PathBuf>, root: &str) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let path_re =
        regex::Regex::new(r"\b(crate|super|rung)((?:::[A-Za-z_]\w*)+)(?:::\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\})?")
            .expect("static regex");
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (m, file) in mods {
        let text = code_only(&std::fs::read_to_string(file).unwrap());
        let here: Vec<&str> = if m.is_empty() { vec![] } else { m.split("::").collect() };
        // `super` of a file module is its parent; of a mod.rs, its parent's parent.
        let parent: Vec<&str> = here[..here.len().saturating_sub(1)].to_vec();
        for c in path_re.captures_iter(&text) {
            let base: Vec<&str> = match &c[1] {
                "super" => parent.clone(),
                "rung" if root == "rung" => continue,
                _ => vec![],
            };
            let tail: Vec<&str> = c[2].split("::").filter(|s| !s.is_empty()).collect();
            let mut targets: Vec<Vec<&str>> = vec![];
            let joined: Vec<&str> = base.iter().copied().chain(tail.iter().copied()).collect();
            if let Some(group) = c.get(3) {
                for item in group.as_str().split(',') {
                    let item = item.split(" as ").next().unwrap_or("").trim();
                    let item = item.split('{').next().unwrap_or("").trim_end_matches("::").trim();
                    if item.is_empty() || item == "self" {
                        targets.push(joined.clone());
                        continue;
                    }
                    let mut t = joined.clone();
                    t.extend(item.split("::").filter(|s| !s.is_empty()));
                    targets.push(t);
                }
            } else {
                targets.push(joined);
            }
            for t in targets {
                let Some(to) = resolve(mods, &t) else { continue };
                // A child's use of its ancestor's items is an edge only when the ancestor is
                // not merely the module that declares it: `super::x` inside x's sibling is fine.
                if to == *m || (m.starts_with(&format!("{to}::")) && to.is_empty()) {
                    continue;
                }
                let name = t.last().copied().unwrap_or("").to_string();
                out.entry(m.clone()).or_default().entry(to).or_default().insert(name);
            }
        }
    }
    out
}

/// Strongly connected components of more than one module (Tarjan).
fn loops(graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>, nodes: &[String]) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on: BTreeSet<String>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit(t: &mut T, v: &str) {
        t.index.insert(v.into(), t.next);
        t.low.insert(v.into(), t.next);
        t.next += 1;
        t.stack.push(v.into());
        t.on.insert(v.into());
        let next: Vec<String> = t.g.get(v).map(|e| e.keys().cloned().collect()).unwrap_or_default();
        for w in next {
            if !t.index.contains_key(&w) {
                visit(t, &w);
                let l = t.low[v].min(t.low[&w]);
                t.low.insert(v.into(), l);
            } else if t.on.contains(&w) {
                let l = t.low[v].min(t.index[&w]);
                t.low.insert(v.into(), l);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = vec![];
            while let Some(w) = t.stack.pop() {
                t.on.remove(&w);
                let done = w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        on: BTreeSet::new(),
        next: 0,
        out: vec![],
    };
    for n in nodes {
        if !t.index.contains_key(n) {
            visit(&mut t, n);
        }
    }
    t.out
}

fn describe(graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>, comp: &[String]) -> String {
    let mut lines = vec![format!("a loop between {}:", comp.join(", "))];
    for a in comp {
        for (b, names) in graph.get(a).into_iter().flatten() {
            if comp.contains(b) {
                lines.push(format!("  {a} -> {b}: {}", names.iter().cloned().collect::<Vec<_>>().join(", ")));
            }
        }
    }
    lines.join("\n")
}

fn check(src: &Path, root: &str) -> Vec<String> {
    let mods = modules(src);
    let graph = edges(&mods, root);
    let nodes: Vec<String> = mods.keys().cloned().collect();
    loops(&graph, &nodes).iter().map(|c| describe(&graph, c)).collect()
}

#[test]
fn the_module_graph_has_no_loops() {
    let src = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let mut found = check(src, "rung");
    found.extend(check(&src.join("core"), "rung_core"));
    found.extend(check(&src.join("model"), "rung_model"));
    found.extend(check(&src.join("agent"), "rung_agent"));
    found.extend(check(&src.join("tui"), "rung_tui"));
    assert!(found.is_empty(), "{}", found.join("\n\n"));
}

/// The crates above the core stand in one order: the agent (the verbs and the chat agent) has no
/// terminal UI, command line or protocol server under it; the TUI has no command line or
/// protocol server. `cargo tree` says so of each, as built.
#[test]
fn the_agent_and_the_tui_stand_on_the_core_and_not_on_each_other_s_shells() {
    for (krate, banned) in
        [("rung-agent", &["ratatui", "crossterm", "clap", "rmcp", "rung-tui"][..]), ("rung-tui", &["clap", "rmcp"][..])]
    {
        let tree = std::process::Command::new(env!("CARGO"))
            .args(["tree", "--offline", "-p", krate, "-e", "normal", "--prefix", "none"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("cargo tree runs");
        assert!(tree.status.success(), "cargo tree: {}", String::from_utf8_lossy(&tree.stderr));
        let tree = String::from_utf8_lossy(&tree.stdout);
        assert!(tree.lines().any(|l| l.starts_with("rung-core ")), "{krate} stands on the core: {tree}");
        for name in banned {
            let hit: Vec<&str> = tree.lines().filter(|l| l.split(' ').next() == Some(*name)).collect();
            assert!(hit.is_empty(), "`cargo tree -p {krate}` lists {name}: {hit:?}");
        }
    }
}

#[test]
fn a_loop_is_found_and_named() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path();
    std::fs::create_dir_all(src.join("stages")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod report;\npub mod stages;\npub mod leaf;\n").unwrap();
    std::fs::write(src.join("leaf.rs"), "// crate::report::Nothing in a comment is no edge\npub struct L;\n").unwrap();
    std::fs::write(
        src.join("report.rs"),
        "use crate::stages::{run::RunDetail, self};\nuse crate::leaf::L;\nlet s = \"crate::stages::bench\";\n",
    )
    .unwrap();
    std::fs::write(src.join("stages/mod.rs"), "pub mod run;\npub mod bench;\n").unwrap();
    std::fs::write(src.join("stages/run.rs"), "use super::bench::Files;\npub struct RunDetail;\n").unwrap();
    std::fs::write(src.join("stages/bench.rs"), "pub type Files = ();\nfn f() -> crate::report::Reason { todo!() }\n")
        .unwrap();
    let found = check(src, "rung");
    assert_eq!(found.len(), 1, "{found:?}");
    let text = &found[0];
    assert!(text.starts_with("a loop between report, stages::bench, stages::run:"), "{text}");
    assert!(text.contains("report -> stages::run: RunDetail"), "{text}");
    assert!(text.contains("stages::run -> stages::bench: Files"), "{text}");
    assert!(text.contains("stages::bench -> report: Reason"), "{text}");
    assert!(!text.contains("leaf"), "{text}");
    // Break it: the detail type moves down a layer, and the loop is gone.
    std::fs::write(src.join("report.rs"), "use crate::leaf::L;\n").unwrap();
    assert!(check(src, "rung").is_empty());
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn no_source_file_is_over_800_lines_unless_it_says_why() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python: Vec<PathBuf> = std::fs::read_dir(root.join("assets/python"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .collect();
    let long: Vec<String> = rust_files(&root.join("src"))
        .into_iter()
        .chain(python)
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let lines = text.lines().count();
            let says_why = text.lines().next().is_some_and(|l| l.to_lowercase().contains("one file"));
            (lines > 800 && !says_why).then(|| format!("{} ({lines} lines)", p.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these, or say in their first comment why each must be one file: {long:?}");
}

#[test]
fn no_function_waives_the_argument_limit() {
    let src = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let waived: Vec<String> = rust_files(src)
        .into_iter()
        .filter(|p| std::fs::read_to_string(p).unwrap().contains(concat!("clippy::", "too_many_arguments")))
        .map(|p| p.display().to_string())
        .collect();
    assert!(waived.is_empty(), "pass a context struct instead: {waived:?}");
}

/// The model (every type the parts share: verdicts, stage details, the report, the worker
/// protocol) is a crate of its own under everything (shells → core → model, never back): it
/// depends on serde, serde_json and schemars alone, so it cannot reach rung, and does no I/O.
#[test]
fn the_model_crate_depends_on_serde_and_schemars_alone_and_does_no_io() {
    let src = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let manifest: toml::Table = std::fs::read_to_string(src.join("model/Cargo.toml")).unwrap().parse().unwrap();
    let deps: Vec<&String> = manifest.get("dependencies").and_then(|d| d.as_table()).unwrap().keys().collect();
    assert_eq!(deps, ["schemars", "serde", "serde_json"], "the model crate's dependencies");
    for section in ["dev-dependencies", "build-dependencies"] {
        assert!(manifest.get(section).is_none(), "the model crate has [{section}]");
    }
    let mut bad = Vec::new();
    for f in rust_files(&src.join("model")) {
        let text = code_only(&std::fs::read_to_string(&f).unwrap());
        let name = f.strip_prefix(src).unwrap().display().to_string();
        for io in ["std::fs", "std::process", "std::env", "std::net", "Command::new"] {
            if text.contains(io) {
                bad.push(format!("{name}: {io}"));
            }
        }
    }
    assert!(bad.is_empty(), "the model does I/O:\n{}", bad.join("\n"));
}

/// The core (workspace, stages, runners, workers, store, watcher) is a crate under the shells: no
/// terminal UI, command line, MCP or HTTP crate in its manifest, nor anywhere in its dependency
/// tree, and it names no shell module.
#[test]
fn the_core_crate_has_no_ui_and_names_no_shell() {
    let src = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let manifest: toml::Table = std::fs::read_to_string(src.join("core/Cargo.toml")).unwrap().parse().unwrap();
    let deps: Vec<&String> = manifest.get("dependencies").and_then(|d| d.as_table()).unwrap().keys().collect();
    const SHELL_CRATES: [&str; 8] =
        ["ratatui", "crossterm", "ratatui-textarea", "clap", "rmcp", "ureq", "indicatif", "pulldown-cmark"];
    for d in &deps {
        assert!(!SHELL_CRATES.contains(&d.as_str()), "the core crate depends on `{d}`, a shell's crate");
    }
    assert!(deps.iter().any(|d| *d == "rung-model"), "the core crate stands on the model");
    let tree = std::process::Command::new(env!("CARGO"))
        .args(["tree", "--offline", "-p", "rung-core", "-e", "normal", "--prefix", "none"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(tree.status.success(), "cargo tree: {}", String::from_utf8_lossy(&tree.stderr));
    let tree = String::from_utf8_lossy(&tree.stdout);
    assert!(tree.lines().any(|l| l.starts_with("rung-model ")), "cargo tree printed no dependency: {tree}");
    for name in ["ratatui", "crossterm", "clap", "rmcp"] {
        let hit: Vec<&str> = tree.lines().filter(|l| l.split(' ').next() == Some(name)).collect();
        assert!(hit.is_empty(), "`cargo tree -p rung-core` lists {name}: {hit:?}");
    }
    let shells = regex::Regex::new(r"\b(crate|rung)::(agent|mcp|selftest|cli|tui)\b").unwrap();
    let mut bad = Vec::new();
    for f in rust_files(&src.join("core")) {
        let text = code_only(&std::fs::read_to_string(&f).unwrap());
        if let Some(m) = shells.find(&text) {
            bad.push(format!("{}: {}", f.strip_prefix(src).unwrap().display(), m.as_str()));
        }
    }
    assert!(bad.is_empty(), "the core names a shell:\n{}", bad.join("\n"));
}

/// The library crates' errors are types (thiserror), not strings: a `Result<_, String>` loses
/// what went wrong to the first caller that wants to act on it. The binary's shells (cli/, tui/)
/// may end in a message.
#[test]
fn the_libraries_return_no_string_errors() {
    let src = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let re = regex::Regex::new(r"Result<.*,\s*String>").unwrap();
    let mut found = Vec::new();
    for dir in ["core", "model", "agent", "mcp", "selftest"] {
        // (The agent crate holds the verbs too: src/agent/verbs.)
        for f in rust_files(&src.join(dir)) {
            let text = code_only(&std::fs::read_to_string(&f).unwrap());
            for (i, line) in text.lines().enumerate() {
                if re.is_match(line) {
                    found.push(format!("{}:{}: {}", f.strip_prefix(src).unwrap().display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "give these an error type:\n{}", found.join("\n"));
}
