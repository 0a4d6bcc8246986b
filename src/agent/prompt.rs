//! The workspace's part of the agent's system prompt: the task (rung.toml and the reference), the
//! version in focus (its source and the results of the file as it is now: each rung's verdict
//! and summary, its diagnostics), and the versions the user rejected with their reasons. Without
//! a version in focus, the task and the reference alone: the first proposal starts from them.
//! Each part is cut to a budget, so a large reference does not crowd out the results.

use std::fmt::Write as _;
use std::path::Path;

use rung_core::context::Passage;
use rung_core::store::{Status, Store};
use rung_core::workspace::Workspace;

/// Characters of one file quoted whole at the most.
const FILE_CHARS: usize = 6000;
/// Diagnostics listed per rung.
const DIAGNOSTICS: usize = 5;
/// SASS lines quoted of the version in focus (its first kernel's first instructions).
const SASS_LINES: usize = 40;
/// Passages retrieved from `context/` for a message, and their budget in tokens.
const PASSAGES: usize = 4;
const PASSAGE_TOKENS: usize = 1500;

fn quoted(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.trim_end().to_string();
    }
    let cut: String = text.chars().take(limit).collect();
    format!("{}\n… ({} more characters: read_file has the rest)", cut.trim_end(), text.chars().count() - limit)
}

fn fence(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("cu" | "cuh") => "cuda",
        Some("py") => "python",
        Some("ptx") => "ptx",
        Some("toml") => "toml",
        _ => "",
    }
}

/// The context for the system prompt, or an empty string when the workspace does not open.
/// `query` (the user's message) picks the passages of `context/` that follow.
pub fn workspace_context(root: &Path, focus: Option<&str>, query: &str) -> String {
    workspace_context_with(root, focus, query).0
}

/// [`workspace_context`], and the passages of `context/` it quotes (what the chat shows went
/// into the prompt).
pub fn workspace_context_with(root: &Path, focus: Option<&str>, query: &str) -> (String, Vec<Passage>) {
    let Ok(ws) = Workspace::open(root) else { return (String::new(), vec![]) };
    let store = Store::open(&ws.state_dir()).ok();
    let mut out = String::from("# The workspace\n");
    let spec_path = ws.root.join("rung.toml");
    if let Ok(text) = std::fs::read_to_string(&spec_path) {
        let _ = write!(out, "\n## The task: rung.toml\n```toml\n{}\n```\n", quoted(&text, FILE_CHARS));
    }
    for name in ["reference.py", "reference.cu"] {
        let p = ws.root.join(name);
        if let Ok(text) = std::fs::read_to_string(&p) {
            let _ = write!(out, "\n## The reference: {name}\n```{}\n{}\n```\n", fence(&p), quoted(&text, FILE_CHARS));
        }
    }
    let v = focus.and_then(|id| ws.version(id));
    match v {
        None => {
            out.push_str("\n## No version in focus\nPropose the first version from the task and the reference alone.\n")
        }
        Some(v) => {
            let source = ws.read_source(v).unwrap_or_default();
            let row = store.as_ref().and_then(|s| s.version(&v.id).ok().flatten());
            let status = row.as_ref().map_or("not in the history yet".to_string(), |r| r.status.as_str().to_string());
            let parent =
                row.as_ref().and_then(|r| r.parent.clone()).map(|p| format!(", made from {p}")).unwrap_or_default();
            let _ = write!(
                out,
                "\n## The version in focus: {} ({}, {status}{parent})\nA new version starts from this one.\n```{}\n{}\n```\n",
                v.id,
                v.path.display(),
                fence(&v.path),
                quoted(&source, FILE_CHARS)
            );
            let results = store.as_ref().and_then(|s| rung_core::service::results(&ws, s, v).ok());
            let hash = results.as_ref().and_then(|r| r.source_hash.clone());
            let current: Vec<_> = results.iter().flat_map(|r| r.current()).collect();
            if current.is_empty() {
                out.push_str("\nIts rungs have not run on the file as it is now.\n");
            } else {
                out.push_str("\n### Its last results (of the file as it is now)\n");
                for r in current {
                    let summary = r.payload.get("summary").and_then(|s| s.as_str()).unwrap_or("");
                    let _ = writeln!(out, "- {} {}: {summary}", r.stage, r.verdict);
                    let diags = r.payload.get("diagnostics").and_then(|d| d.as_array()).cloned().unwrap_or_default();
                    for d in diags.iter().take(DIAGNOSTICS) {
                        let file = d.get("file").and_then(|f| f.as_str()).unwrap_or("");
                        let line = d.get("line").and_then(|l| l.as_u64()).unwrap_or(0);
                        let msg = d.get("message").and_then(|m| m.as_str()).unwrap_or("");
                        let _ = writeln!(out, "  - {file}:{line}: {msg}");
                    }
                }
            }
            let all = results.as_ref().map_or(&[][..], |r| r.all.as_slice());
            sass_excerpt(&mut out, &ws, &v.id, all, hash.as_deref());
            // Its sections timed inside the kernel, when `rung trace` recorded this file.
            if let Some(t) =
                rung_core::stages::trace::latest(&ws, &v.id).filter(|t| Some(&t.source_hash) == hash.as_ref())
            {
                let _ = write!(out, "\n### Its trace (sections timed inside the kernel)\n```\n{}```\n", t.table());
            }
        }
    }
    if let Some(store) = &store {
        let rejected: Vec<_> = ws
            .versions
            .iter()
            .filter_map(|v| store.version(&v.id).ok().flatten())
            .filter(|r| r.status == Status::Rejected)
            .collect();
        if !rejected.is_empty() {
            out.push_str("\n## Rejected versions and why (do not repeat them)\n");
            for r in rejected {
                let _ = writeln!(out, "- {}: {}", r.id, r.reason.as_deref().unwrap_or("no reason given"));
            }
        }
    }
    // An index that cannot be read quotes nothing; search_context reports why.
    let passages =
        rung_core::context::search(&ws.root, &ws.state_dir(), query, PASSAGES, PASSAGE_TOKENS).unwrap_or_default();
    if !passages.is_empty() {
        out.push_str("\n## Passages from context/ that match the request (search_context finds more)\n");
        for p in &passages {
            let _ = write!(out, "\n### {}\n{}\n", p.place(), p.text.trim_end());
        }
    }
    (out, passages)
}

/// The ptxas resources of each kernel of the version's last build, and the first instructions
/// of its SASS: what a reader of the parent looks at first (spills, registers, vector widths).
fn sass_excerpt(
    out: &mut String,
    ws: &Workspace,
    id: &str,
    results: &[rung_core::store::ResultRow],
    hash: Option<&str>,
) {
    let build = results.iter().find(|r| r.stage == "build" && Some(r.source_hash.as_str()) == hash);
    let kernels = build
        .and_then(|r| r.payload.get("detail"))
        .and_then(|d| d.get("kernels"))
        .and_then(|k| k.as_array())
        .cloned()
        .unwrap_or_default();
    let mut lines = Vec::new();
    for k in &kernels {
        let Some(r) = k.get("resources") else { continue };
        let n = |f: &str| r.get(f).and_then(serde_json::Value::as_u64).unwrap_or(0);
        lines.push(format!(
            "- {}: {} registers, {} B shared, {} B stack, spills {} B stored / {} B loaded",
            r.get("name").and_then(|v| v.as_str()).unwrap_or("?"),
            n("registers"),
            n("shared_bytes"),
            n("stack_frame_bytes"),
            n("spill_store_bytes"),
            n("spill_load_bytes"),
        ));
    }
    if !lines.is_empty() {
        let _ = write!(out, "\n### Its kernels' resources (ptxas)\n{}\n", lines.join("\n"));
    }
    // The listing follows the build: this process may still be making it.
    rung_core::stages::build::sass::wait(&ws.state_dir(), id, std::time::Duration::from_secs(30));
    let Some((_, text)) = ws.dumps(id, "sass") else { return };
    let listing = rung_core::asm::parse(rung_core::asm::AsmKind::Sass, &text);
    let Some(k) = listing.iter().find(|k| k.lines.iter().any(|l| l.instr.is_some())) else { return };
    let instrs: Vec<&str> = k.lines.iter().map(|l| l.text.as_str()).collect();
    let shown = instrs.len().min(SASS_LINES);
    let _ = write!(
        out,
        "\n### Its SASS, kernel {} (the first {shown} of {} lines; get_asm has all)\n```sass\n{}\n```\n",
        k.name,
        instrs.len(),
        instrs[..shown].join("\n")
    );
}
