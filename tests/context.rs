//! The context index: BM25 over `context/`, kept in `.rung/` and updated as files change.

use std::path::{Path, PathBuf};

use rung::context::{self, Updated};

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
    let found = context::search(&ws, &state(&ws), "how does the kernel store memory fragments with stmatrix", 5, 2000);
    assert_eq!(found[0].path, PathBuf::from("context/cutlass/epilogue.md"), "{found:?}");
    assert!(found[0].text.contains("stmatrix"), "{}", found[0].text);
    // The common words alone still find the others, ranked after it.
    assert!(found.len() > 1 && found[1..].iter().all(|p| p.score < found[0].score));
    assert!(context::search(&ws, &state(&ws), "zzzz qqqq", 5, 2000).is_empty());
}

#[test]
fn the_index_follows_edits_new_files_and_deletions() {
    let (_tmp, ws) = workspace();
    assert_eq!(context::refresh(&ws, &state(&ws)), Updated { read: 4, kept: 0, dropped: 0 });
    assert_eq!(context::refresh(&ws, &state(&ws)), Updated { read: 0, kept: 4, dropped: 0 }, "nothing changed");
    assert!(context::search(&ws, &state(&ws), "multicast", 5, 2000).is_empty());
    // An edit: only that file is read again, and its new term is found.
    write(&ws, "context/c.txt", "TMA multicast sends one tile to every block of a cluster.\n");
    assert_eq!(context::refresh(&ws, &state(&ws)), Updated { read: 1, kept: 3, dropped: 0 });
    let found = context::search(&ws, &state(&ws), "multicast", 5, 2000);
    assert_eq!(found[0].path, PathBuf::from("context/c.txt"));
    // A deleted file's passages go with it.
    std::fs::remove_file(ws.join("context/cutlass/epilogue.md")).unwrap();
    assert_eq!(context::refresh(&ws, &state(&ws)), Updated { read: 0, kept: 3, dropped: 1 });
    let found = context::search(&ws, &state(&ws), "stmatrix", 5, 2000);
    assert!(found.iter().all(|p| p.path != Path::new("context/cutlass/epilogue.md")), "{found:?}");
}

#[test]
fn rung_s_own_notes_answer_without_a_context_folder_and_the_budget_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let found = context::search(tmp.path(), &tmp.path().join(".rung"), "wgmma", 3, 2000);
    assert!(!found.is_empty(), "rung's notes speak of wgmma");
    assert!(found[0].path.to_string_lossy().starts_with("rung:"), "{:?}", found[0].path);
    // A small budget: the first passage whole, then only what fits.
    let (_t, ws) = workspace();
    let all = context::search(&ws, &state(&ws), "kernel memory", 50, 100_000);
    let few = context::search(&ws, &state(&ws), "kernel memory", 50, 60);
    assert!(all.len() > few.len() && !few.is_empty(), "{} vs {}", all.len(), few.len());
    let chars: usize = few.iter().skip(1).map(|p| p.text.chars().count()).sum();
    assert!(chars <= 60 * 4, "{chars}");
}

/// The prompt carries what the message asks about: a workspace's `context/` passage that names
/// the message's rare term is quoted under its path and line, within the budget.
#[test]
fn the_prompt_quotes_the_passage_the_message_asks_about() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(["new", ws.to_str().unwrap(), "--template", "vector-add"])
        .output()
        .unwrap();
    assert!(out.status.success());
    write(&ws, "context/cutlass/epilogue.md", "# Epilogue\n\nStore the accumulators with stmatrix, then TMA.\n");
    let prompt = rung::agent::prompt::workspace_context(&ws, Some("v002"), "use stmatrix in the epilogue");
    let at = prompt.find("## Passages from context/").expect("a passages section");
    let passages = &prompt[at..];
    assert!(passages.contains("### context/cutlass/epilogue.md:1"), "{passages}");
    assert!(passages.contains("Store the accumulators with stmatrix"), "{passages}");
    let none = rung::agent::prompt::workspace_context(&ws, Some("v002"), "zzzz qqqq");
    assert!(!none.contains("## Passages from context/"), "nothing matches, nothing quoted");
}
