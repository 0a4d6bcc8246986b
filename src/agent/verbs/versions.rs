//! Listing, reading and submitting versions.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rung_core::model::report::Verdict;
use rung_core::store::{Status, Store, sha256_hex};
use rung_core::workspace::{self, Format, VersionKind, Workspace};

use super::*;

// ---------------------------------------------------------------------------------------------
// The tools.

pub fn list_versions(ctx: &Context) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    let store = open_store(&ws)?;
    let mut entries = Vec::new();
    for v in &ws.versions {
        let row = store.version(&v.id)?;
        let hash = ws.source_hash(v);
        let latest = store.latest_results(&v.id)?;
        let stages: Vec<StageBrief> = latest
            .iter()
            .map(|r| StageBrief {
                stage: r.stage.clone(),
                verdict: r.verdict.clone(),
                summary: summary_of(r),
                current: hash.as_deref() == Some(r.source_hash.as_str()),
                result_id: r.id,
            })
            .collect();
        let verdict = worst(stages.iter().filter(|s| s.current).filter_map(|s| Verdict::parse(&s.verdict)));
        entries.push(VersionEntry { head: VersionHead::of(v, row.as_ref()), verdict, stages });
    }
    let out = VersionsOut {
        workspace: ws.root.clone(),
        format: ws.format,
        problem: ws.spec.as_ref().map(|s| s.name.clone()),
        diagnostics: ws.diagnostics.clone(),
        versions: entries,
    };
    let mut text = format!(
        "{} ({} workspace at {}): {} version{}\n",
        out.problem.as_deref().unwrap_or("(unnamed problem)"),
        format_name(ws.format),
        ws.root.display(),
        out.versions.len(),
        if out.versions.len() == 1 { "" } else { "s" }
    );
    for d in &out.diagnostics {
        let _ = writeln!(text, "{d}");
    }
    for e in &out.versions {
        let climbed: Vec<String> =
            e.stages.iter().filter(|s| s.current).map(|s| format!("{} {}", symbol(&s.verdict), s.stage)).collect();
        let verdict = match (e.verdict, e.stages.is_empty()) {
            (Some(v), _) => format!("{} [{}]", v.name(), climbed.join(", ")),
            (None, true) => "not checked yet".to_string(),
            (None, false) => "changed since its last check".to_string(),
        };
        let last = e
            .stages
            .iter()
            .filter(|s| s.current)
            .rfind(|s| s.verdict != "pass")
            .or_else(|| e.stages.iter().rfind(|s| s.current))
            .map(|s| format!(" — {}: {}", s.stage, s.summary))
            .unwrap_or_default();
        let _ = writeln!(text, "{}): {verdict}{last}", e.head.opening());
        if let Some(r) = &e.head.reason {
            let _ = writeln!(text, "  rejected because: {r}");
        }
    }
    if out.versions.is_empty() {
        text.push_str("no versions yet: write one with submit_version\n");
    }
    Reply::new(text, &out)
}

pub fn read_version(ctx: &Context, args: &VersionArgs) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    let v = find_version(&ws, "version", &args.version)?;
    let source = read_source(&ws, v)?;
    let store = open_store(&ws)?;
    let row = store.version(&v.id)?;
    let out = SourceOut {
        head: VersionHead::of(v, row.as_ref()),
        source_hash: sha256_hex(source.as_bytes()),
        bytes: source.len(),
        source,
    };
    let mut text = format!("{}, {} bytes)\n", out.head.opening(), out.bytes);
    if let Some(r) = &out.head.reason {
        let _ = writeln!(text, "rejected because: {r}");
    }
    let _ = write!(text, "```{}\n{}", fence(out.head.kind), out.source);
    if !out.source.ends_with('\n') {
        text.push('\n');
    }
    text.push_str("```\n");
    Reply::new(text, &out)
}

/// Lowers a requested name to `[a-z0-9-]`, or says which rule it breaks.
pub fn sanitise_name(raw: &str) -> Result<String, ToolError> {
    let rule = "a version name may not contain `/`, `\\` or `..`, nor start with `.`: it only names the file versions/vNNN-<name>.<extension>";
    let help = "pass a plain description such as `float4-unrolled`; it is lowered to [a-z0-9-]";
    let trimmed = raw.trim();
    let bad = if trimmed.contains('/') {
        Some("`/`")
    } else if trimmed.contains('\\') {
        Some("`\\`")
    } else if trimmed.contains("..") {
        Some("`..`")
    } else if trimmed.starts_with('.') {
        Some("a leading `.`")
    } else {
        None
    };
    if let Some(what) = bad {
        return Err(ToolError::new(Some("name"), format!("name `{raw}` is refused: it contains {what}; {rule}"), help));
    }
    let mut out = String::new();
    for c in trimmed.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut out: String = out.trim_end_matches('-').chars().take(MAX_NAME_CHARS).collect();
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        return Err(ToolError::new(
            Some("name"),
            format!("name `{raw}` has no letters or digits, so it cannot name a file"),
            help,
        ));
    }
    Ok(out)
}

/// The next free `vNNN`: above every id among the version files, every `vNNN` file name in
/// `versions/` (including files that are not versions) and every id the history knows (a deleted
/// file's history is kept, so its id is not reused).
pub(super) fn next_id(ws: &Workspace, dir: &Path, store: &Store) -> Result<String, ToolError> {
    let mut max = 0u32;
    let mut consider = |id: &str| {
        if let Some(n) = id.strip_prefix('v').and_then(|d| d.parse::<u32>().ok()) {
            max = max.max(n);
        }
    };
    for v in &ws.versions {
        consider(&v.id);
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let (id, prefixed) = workspace::version_id(&e.file_name().to_string_lossy());
            if prefixed {
                consider(&id);
            }
        }
    }
    for row in store.versions()? {
        consider(&row.id);
    }
    let next = max.checked_add(1).ok_or_else(|| {
        ToolError::new(None, "no version id is left after v4294967295", "renumber the versions in versions/")
    })?;
    Ok(format!("v{next:03}"))
}

pub fn submit_version(ctx: &Context, args: &SubmitArgs) -> Result<Reply, ToolError> {
    if args.source.len() > MAX_SOURCE_BYTES {
        return Err(ToolError::new(
            Some("source"),
            format!(
                "source is {} bytes, over the limit of {MAX_SOURCE_BYTES} bytes (1 MiB) for one version; nothing was written",
                args.source.len()
            ),
            "send the kernel's source itself: generate large tables at run time or keep them in a header next to the versions (versions/*.cuh) instead of inlining them",
        ));
    }
    if args.source.trim().is_empty() {
        return Err(ToolError::new(
            Some("source"),
            "source is empty; nothing was written",
            "send the complete file, as it should be saved",
        ));
    }
    let name = sanitise_name(&args.name)?;
    let _one_at_a_time = ctx.submitting.lock().unwrap_or_else(|e| e.into_inner());
    let ws = ctx.workspace()?;
    let parent = match &args.parent {
        Some(p) => Some(find_version(&ws, "parent", p)?.clone()),
        None => None,
    };
    let ext = match (args.extension, &parent) {
        (Some(e), _) => e,
        (None, Some(p)) => Extension::of(&p.path).ok_or_else(|| {
            ToolError::new(
                Some("extension"),
                format!(
                    "extension: the parent {} ({}) has no .cu, .py or .ptx extension to take",
                    p.id,
                    p.path.display()
                ),
                "pass extension: `cu`, `py` or `ptx`",
            )
        })?,
        (None, None) => {
            return Err(ToolError::new(
                Some("extension"),
                "extension: not given, and there is no parent to take it from",
                "pass extension: `cu` (CUDA C++), `py` (Triton, CuTe DSL, PyTorch) or `ptx`, or name the parent version",
            ));
        }
    };
    // The kind, as discovery will see the file.
    let probe = PathBuf::from(format!("source.{}", ext.as_str()));
    let kind = match rung_core::workspace::detect_kind(&probe, &args.source) {
        Ok(k) => k,
        Err(_) if ws.format != Format::Rung && ext == Extension::Py => VersionKind::PyTorch,
        Err(why) => {
            return Err(ToolError::new(
                Some("source"),
                format!("source is not a version rung can run: {why}; nothing was written"),
                "import the DSL the kernel is written in (`import triton`, `import torch`, ...), or pick the right extension",
            ));
        }
    };
    let versions_dir = ws.root.join(workspace::VERSIONS_DIR);
    if !versions_dir.is_dir() && !ws.versions.is_empty() {
        return Err(ToolError::new(
            None,
            format!(
                "this {} workspace keeps its versions beside the problem ({}), and a versions/ folder would hide them",
                format_name(ws.format),
                ws.versions.iter().map(|v| v.path.display().to_string()).collect::<Vec<_>>().join(", ")
            ),
            "create versions/ and move the submissions into it (as vNNN-name.py), then submit again",
        ));
    }
    let io_error = |what: &str, path: &Path, e: std::io::Error| {
        ToolError::new(
            None,
            format!("cannot {what} {}: {e}", path.display()),
            "check that the workspace folder is writable; nothing of this version was recorded",
        )
    };
    std::fs::create_dir_all(&versions_dir).map_err(|e| io_error("create", &versions_dir, e))?;
    let dir = std::fs::canonicalize(&versions_dir).map_err(|e| io_error("resolve", &versions_dir, e))?;
    let mut store = open_store(&ws)?;
    let id = next_id(&ws, &dir, &store)?;
    let file_name = format!("{id}-{name}.{}", ext.as_str());
    let target = dir.join(&file_name);
    if target.parent() != Some(dir.as_path()) {
        return Err(ToolError::new(
            Some("name"),
            format!("name `{}` would not stay inside {}", args.name, dir.display()),
            "pass a plain description such as `float4-unrolled`",
        ));
    }
    // Before the file exists: a watcher in this process that builds it at once builds it inside
    // the sandbox (proposals always run sandboxed).
    rung_core::sandbox::for_proposals();
    {
        use std::io::Write;
        // Never overwrites: a file of that name appearing meanwhile (or a link planted there)
        // makes this fail instead.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&target)
            .map_err(|e| io_error("create", &target, e))?;
        f.write_all(args.source.as_bytes()).map_err(|e| io_error("write", &target, e))?;
    }
    let discard = |why: ToolError| {
        let _ = std::fs::remove_file(&target);
        why
    };
    let real = std::fs::canonicalize(&target).map_err(|e| discard(io_error("resolve", &target, e)))?;
    if real.parent() != Some(dir.as_path()) {
        return Err(discard(ToolError::new(
            Some("name"),
            format!("{} resolves outside {}: removed", target.display(), dir.display()),
            "pass a plain description such as `float4-unrolled`",
        )));
    }
    // Read the workspace again: the version must be there as written, under its id.
    let ws = ctx.workspace().map_err(discard)?;
    let rel = PathBuf::from(workspace::VERSIONS_DIR).join(&file_name);
    let Some(v) = ws.versions.iter().find(|v| v.path == rel).cloned() else {
        let why: Vec<String> = ws.diagnostics.iter().filter(|d| d.file == rel).map(|d| d.to_string()).collect();
        return Err(discard(ToolError::new(
            None,
            format!(
                "{} was not taken as a version{}: removed",
                rel.display(),
                if why.is_empty() { String::new() } else { format!(" ({})", why.join("; ")) }
            ),
            "another version with the same id may have appeared at the same moment: submit again",
        )));
    };
    let hash = sha256_hex(args.source.as_bytes());
    // What was tried before, byte for byte: a rejected version's source again is worth a word.
    let mut same_as = Vec::new();
    for other in ws.versions.iter().filter(|o| o.id != v.id && ws.source_hash(o).as_ref() == Some(&hash)) {
        let row = store.version(&other.id)?;
        let review = match row {
            Some(r) if r.status == Status::Rejected => {
                format!(" (rejected{})", r.reason.map(|why| format!(": {why}")).unwrap_or_default())
            }
            Some(r) => format!(" ({})", r.status.as_str()),
            None => String::new(),
        };
        same_as.push(format!("{}{review}", other.id));
    }
    store.sync_version(&v, &hash, Status::Proposed)?;
    store.set_status(&v.id, Status::Proposed, None)?;
    store.set_parent(&v.id, parent.as_ref().map(|p| p.id.as_str()))?;
    let out = SubmitOut {
        id: v.id.clone(),
        path: v.path.clone(),
        kind,
        status: Status::Proposed,
        parent: parent.map(|p| p.id),
        name: name.clone(),
        source_hash: hash,
        bytes: args.source.len(),
        same_as,
    };
    let mut text = format!(
        "wrote {}: {} ({}), proposed{}.\n",
        out.path.display(),
        out.id,
        out.kind,
        out.parent.as_ref().map(|p| format!(", parent {p}")).unwrap_or_default()
    );
    if name != args.name {
        let _ = writeln!(text, "the name `{}` became `{name}` ([a-z0-9-] only).", args.name);
    }
    if !out.same_as.is_empty() {
        let _ = writeln!(text, "warning: the same source as {}: it will do what that did.", out.same_as.join(", "));
    }
    let _ = writeln!(
        text,
        "next: check {{\"versions\": [\"{}\"]}} climbs its rungs{}",
        out.id,
        out.parent
            .as_ref()
            .map(|p| format!("; diff_asm {{\"a\": \"{p}\", \"b\": \"{}\"}} shows what changed in SASS", out.id))
            .unwrap_or_default()
    );
    Reply::new(text, &out)
}
