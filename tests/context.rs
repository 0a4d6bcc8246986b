//! The context index: BM25 over `context/`, kept in `.rung/` and updated as files change.

use std::path::{Path, PathBuf};

use rung::context::{self, Updated};

mod common;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Three notes that talk about kernels and memory a lot, and one that names `stmatrix` once.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().to_path_buf();
    let common = "A kernel reads global memory and writes global memory.\nMemory bandwidth bounds this kernel.\n\n";
    write(&ws, "context/a.md", &common.repeat(6));
    write(&ws, "context/b/notes.md", &format!("{}Shared memory banks and the kernel's tiles.\n", common.repeat(4)));
    write(&ws, "context/c.txt", &common.repeat(3));
    write(
        &ws,
        "context/cutlass/epilogue.md",
        "# Epilogue\n\nThe epilogue stores the accumulator fragments to shared memory with stmatrix,\nthen to global memory.\n",
    );
    (tmp, ws)
}

fn state(ws: &Path) -> PathBuf {
    ws.join(".rung")
}

#[test]
fn a_term_in_one_file_ranks_that_file_first() {
    let (_tmp, ws) = workspace();
    let found =
        context::search(&ws, &state(&ws), "how does the kernel store memory fragments with stmatrix", 5, 2000).unwrap();
    assert_eq!(found[0].path, PathBuf::from("context/cutlass/epilogue.md"), "{found:?}");
    assert!(found[0].text.contains("stmatrix"), "{}", found[0].text);
    // The common words alone still find the others, ranked after it.
    assert!(found.len() > 1 && found[1..].iter().all(|p| p.score < found[0].score));
    assert!(context::search(&ws, &state(&ws), "zzzz qqqq", 5, 2000).unwrap().is_empty());
}

#[test]
fn the_index_follows_edits_new_files_and_deletions() {
    let (_tmp, ws) = workspace();
    assert_eq!(context::refresh(&ws, &state(&ws)).unwrap(), Updated { read: 4, kept: 0, dropped: 0 });
    assert_eq!(
        context::refresh(&ws, &state(&ws)).unwrap(),
        Updated { read: 0, kept: 4, dropped: 0 },
        "nothing changed"
    );
    assert!(context::search(&ws, &state(&ws), "multicast", 5, 2000).unwrap().is_empty());
    // An edit: only that file is read again, and its new term is found.
    write(&ws, "context/c.txt", "TMA multicast sends one tile to every block of a cluster.\n");
    assert_eq!(context::refresh(&ws, &state(&ws)).unwrap(), Updated { read: 1, kept: 3, dropped: 0 });
    let found = context::search(&ws, &state(&ws), "multicast", 5, 2000).unwrap();
    assert_eq!(found[0].path, PathBuf::from("context/c.txt"));
    // A deleted file's passages go with it.
    std::fs::remove_file(ws.join("context/cutlass/epilogue.md")).unwrap();
    assert_eq!(context::refresh(&ws, &state(&ws)).unwrap(), Updated { read: 0, kept: 3, dropped: 1 });
    let found = context::search(&ws, &state(&ws), "stmatrix", 5, 2000).unwrap();
    assert!(found.iter().all(|p| p.path != Path::new("context/cutlass/epilogue.md")), "{found:?}");
}

#[test]
fn rung_s_own_notes_answer_without_a_context_folder_and_the_budget_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let found = context::search(tmp.path(), &tmp.path().join(".rung"), "wgmma", 3, 2000).unwrap();
    assert!(!found.is_empty(), "rung's notes speak of wgmma");
    assert!(found[0].path.to_string_lossy().starts_with("rung:"), "{:?}", found[0].path);
    // A small budget: the first passage whole, then only what fits.
    let (_t, ws) = workspace();
    let all = context::search(&ws, &state(&ws), "kernel memory", 50, 100_000).unwrap();
    let few = context::search(&ws, &state(&ws), "kernel memory", 50, 60).unwrap();
    assert!(all.len() > few.len() && !few.is_empty(), "{} vs {}", all.len(), few.len());
    let chars: usize = few.iter().skip(1).map(|p| p.text.chars().count()).sum();
    assert!(chars <= 60 * 4, "{chars}");
}

/// The prompt carries what the message asks about: a workspace's `context/` passage that names
/// the message's rare term is quoted under its path and line, within the budget.
#[test]
fn the_prompt_quotes_the_passage_the_message_asks_about() {
    let (_tmp, ws) = new_workspace();
    write(&ws, "context/cutlass/epilogue.md", "# Epilogue\n\nStore the accumulators with stmatrix, then TMA.\n");
    let prompt = rung::agent::prompt::workspace_context(&ws, Some("v002"), "use stmatrix in the epilogue");
    let at = prompt.find("## Passages from context/").expect("a passages section");
    let passages = &prompt[at..];
    assert!(passages.contains("### context/cutlass/epilogue.md:1"), "{passages}");
    assert!(passages.contains("Store the accumulators with stmatrix"), "{passages}");
    let none = rung::agent::prompt::workspace_context(&ws, Some("v002"), "zzzz qqqq");
    assert!(!none.contains("## Passages from context/"), "nothing matches, nothing quoted");
}

fn rung(ws: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(["-C", ws.to_str().unwrap()])
        .args(args)
        .env("NO_COLOR", "1")
        .env("RUNG_HOME", ws.join(".rung-home"))
        .output()
        .unwrap()
}

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A workspace from `rung new`, in a temporary folder beside which a test puts its sources.
fn new_workspace() -> (tempfile::TempDir, PathBuf) {
    common::new_workspace("vector-add")
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
            "-C",
            dir.to_str().unwrap(),
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repository laid out like a kernel library: headers to keep, tests to leave out.
fn library(dir: &Path) {
    write(
        dir,
        "include/cute/layout.hpp",
        "// Layouts map coordinates to offsets.\nstruct Layout { int shape, stride; };\n",
    );
    write(dir, "include/cute/swizzle.hpp", "// Swizzle permutes shared memory addresses to avoid bank conflicts.\n");
    write(dir, "test/unit/layout_test.cpp", "// zebrafish appears only in the tests.\n");
    write(dir, "README.md", "# Library\n\nTop-level readme.\n");
    git(dir, &["init", "-q"]);
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "first"]);
}

/// `rung context add file://…` makes a shallow, sparse clone with only `--path`'s folder,
/// records it in rung.toml (which still loads), indexes it; `rung context update` brings the
/// origin's new commit, and leaves a clone with local changes as it is, saying why.
#[test]
fn a_git_source_is_cloned_sparse_recorded_and_updated() {
    let (tmp, ws) = new_workspace();
    let origin = tmp.path().join("origin");
    library(&origin);
    let url = format!("file://{}", origin.display());
    let out = rung(&ws, &["context", "add", &url, "--path", "include/cute", "--name", "lib"]);
    assert!(out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("cloned") && said.contains("(only include/cute)") && said.contains("indexed"), "{said}");
    assert!(ws.join("context/lib/include/cute/layout.hpp").is_file());
    assert!(!ws.join("context/lib/test").exists(), "the sparse clone left test/ out");
    let toml = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    assert!(toml.contains("[[context.sources]]") && toml.contains("paths = [\"include/cute\"]"), "{toml}");
    assert!(toml.starts_with("# "), "the file's own comments stay: {toml}");
    let spec = rung::workspace::Workspace::open(&ws).unwrap().spec;
    assert_eq!(spec.unwrap().context[0].url.as_deref(), Some(url.as_str()));
    let found = context::search(&ws, &state(&ws), "swizzle bank conflicts", 3, 2000).unwrap();
    assert_eq!(found[0].path, PathBuf::from("context/lib/include/cute/swizzle.hpp"), "{found:?}");
    assert!(context::search(&ws, &state(&ws), "zebrafish", 3, 2000).unwrap().is_empty());
    // The same name again is refused, with what to do instead.
    let again = rung(&ws, &["context", "add", &url, "--name", "lib"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again).contains("rung context update lib"), "{}", text(&again));

    // A new commit upstream comes with update.
    write(&origin, "include/cute/tma.hpp", "// TMA multicast copies one tile to a cluster.\n");
    git(&origin, &["add", "."]);
    git(&origin, &["commit", "-qm", "second"]);
    let head = git(&origin, &["rev-parse", "--short", "HEAD"]);
    let out = rung(&ws, &["context", "update"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains(&format!("→ {head}")), "{}", text(&out));
    let found = context::search(&ws, &state(&ws), "multicast cluster", 3, 2000).unwrap();
    assert_eq!(found[0].path, PathBuf::from("context/lib/include/cute/tma.hpp"));
    assert!(!ws.join("context/lib/test").exists(), "still sparse after the update");

    // A local change is never thrown away.
    write(&ws, "context/lib/include/cute/layout.hpp", "// my notes\n");
    let out = rung(&ws, &["context", "update", "lib"]);
    assert!(text(&out).contains("left as it is: it has local changes"), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(ws.join("context/lib/include/cute/layout.hpp")).unwrap(), "// my notes\n");
    // Unknown names are named.
    let out = rung(&ws, &["context", "update", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("no context source `nope`: rung.toml records lib"), "{}", text(&out));
    // A fresh copy of the workspace (no clone) gets it back with update.
    std::fs::remove_dir_all(ws.join("context/lib")).unwrap();
    let out = rung(&ws, &["context", "update"]);
    assert!(text(&out).contains("lib: cloned at"), "{}", text(&out));
    assert!(ws.join("context/lib/include/cute/tma.hpp").is_file());
}

/// A failed clone leaves nothing in context/ and rung.toml as it was.
#[test]
fn a_failed_clone_leaves_nothing_behind() {
    let (tmp, ws) = new_workspace();
    let before = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    let url = format!("file://{}/no-such-repo", tmp.path().display());
    let out = rung(&ws, &["context", "add", &url]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    assert!(text(&out).contains("git clone"), "{}", text(&out));
    let left: Vec<_> =
        std::fs::read_dir(ws.join("context")).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(std::fs::read_to_string(ws.join("rung.toml")).unwrap(), before);
    let out = rung(&ws, &["context", "add", "/no/such/folder/or/url"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("neither a folder here nor a git URL"), "{}", text(&out));
}

/// A folder is linked (with `--path`, each subfolder alone): indexed, readable by the agent's
/// read_file, and nothing beside the chosen subfolders is.
#[test]
fn a_folder_source_is_linked_with_its_paths_and_the_agent_may_read_only_those() {
    let (tmp, ws) = new_workspace();
    let lib = tmp.path().join("lib");
    write(&lib, "include/cute/layout.hpp", "// Layouts map coordinates to offsets.\n");
    write(&lib, "secrets/key.txt", "hunter2\n");
    let out = rung(&ws, &["context", "add", lib.to_str().unwrap(), "--path", "include"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(std::fs::symlink_metadata(ws.join("context/lib/include")).unwrap().file_type().is_symlink());
    assert!(rung::agent::tools::resolve_readable(&ws, "context/lib/include/cute/layout.hpp").is_ok());
    // A hand-made link to the rest of the folder is not context.
    std::os::unix::fs::symlink(lib.join("secrets"), ws.join("context/lib/secrets")).unwrap();
    assert!(rung::agent::tools::resolve_readable(&ws, "context/lib/secrets/key.txt").is_err());
    assert!(context::search(&ws, &state(&ws), "hunter2", 3, 2000).unwrap().is_empty());
    let found = context::search(&ws, &state(&ws), "coordinates offsets", 3, 2000).unwrap();
    assert_eq!(found[0].path, PathBuf::from("context/lib/include/cute/layout.hpp"));
    // list shows it, with its origin and what is indexed of it.
    let out = rung(&ws, &["context", "list", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = v["entries"].as_array().unwrap().iter().find(|r| r["name"] == "lib").unwrap().clone();
    assert_eq!(row["files"], 1, "{row}");
    assert!(row["origin"].as_str().unwrap().starts_with("link "), "{row}");
    assert!(v["index_bytes"].as_u64().unwrap() > 0);
    // The link gone (a fresh copy of the workspace): list says so, update makes it again.
    std::fs::remove_dir_all(ws.join("context/lib")).unwrap();
    let out = rung(&ws, &["context", "list"]);
    assert!(text(&out).contains("not linked here"), "{}", text(&out));
    let out = rung(&ws, &["context", "update"]);
    assert!(text(&out).contains("lib: 1 links made again"), "{}", text(&out));
}

/// The PTX manual, split by section: the instruction's own section comes first for its name,
/// before the sections that only mention it; code keeps its lines, entities are decoded, the
/// navigation and footer are gone; a second split replaces the first, a folder of the user's is
/// never replaced.
#[test]
fn the_ptx_manual_is_split_by_section_and_an_instruction_finds_its_own() {
    let (_tmp, ws) = new_workspace();
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/manual/ptx-isa-excerpt.html");
    let out = rung(&ws, &["context", "add-docs", "ptx", page.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("into 5 sections"), "{}", text(&out));
    let found = context::search(&ws, &state(&ws), "cp.async.bulk.tensor", 5, 100_000).unwrap();
    let first = &found[0];
    assert_eq!(
        first.section.as_deref(),
        Some("9.7.9.25.5.1. Data Movement and Conversion Instructions: cp.async.bulk.tensor"),
        "{found:#?}"
    );
    assert!(first.path.to_string_lossy().ends_with("-cp-async-bulk-tensor.md"), "{}", first.path.display());
    let whole = std::fs::read_to_string(ws.join(&first.path)).unwrap();
    assert!(whole.contains("// global -> shared::cta\ncp.async.bulk.tensor.dim.dst.src{.load_mode}"), "{whole}");
    assert!(whole.contains("| Copies a box of the tensor."), "{whole}");
    assert!(!whole.contains("Copyright") && !whole.contains("toctree"), "{whole}");
    let reduce = context::search(&ws, &state(&ws), "cp.reduce.async.bulk.tensor", 1, 100_000).unwrap();
    assert!(reduce[0].section.as_deref().unwrap().ends_with(": cp.reduce.async.bulk.tensor"), "{reduce:?}");
    // Again: replaced, not doubled.
    let out = rung(&ws, &["context", "add-docs", "ptx", page.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(std::fs::read_dir(ws.join("context/ptx")).unwrap().count(), 6, "5 sections and the marker");
    let out = rung(&ws, &["context", "list"]);
    assert!(text(&out).contains("manual "), "{}", text(&out));
    // A folder rung did not write is the user's.
    write(&ws, "context/mine/notes.md", "mine\n");
    let out = rung(&ws, &["context", "add-docs", "mine", page.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read_to_string(ws.join("context/mine/notes.md")).unwrap(), "mine\n");
}

/// A bad `[[context.sources]]` entry is a rung.toml error at its line, with the fix.
#[test]
fn a_bad_context_source_in_rung_toml_is_an_error_at_its_key() {
    let (_tmp, ws) = new_workspace();
    let mut toml = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    toml.push_str("\n[[context.sources]]\nname = \"../up\"\nurl = \"https://example.com/x.git\"\n");
    std::fs::write(ws.join("rung.toml"), &toml).unwrap();
    let line = toml.lines().position(|l| l.starts_with("name = \"../up\"")).unwrap() + 1;
    let Err(e) = rung::workspace::Workspace::open(&ws) else { panic!("rung.toml loaded") };
    let e = e.to_string();
    assert!(e.contains(&format!("rung.toml:{line}:")) && e.contains("is not a folder name"), "{e}");
}
