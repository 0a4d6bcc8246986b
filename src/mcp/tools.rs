//! What each MCP tool does, as plain functions over the core: open the workspace and the history,
//! call the functions the CLI calls, and return a typed result with a short text for the model.
//! [`super`] wires them to the protocol.
//!
//! Every call reads the workspace again, so files written by a person, an editor or
//! `submit_version` are seen at once. Builds and checks go through one [`Engine`], whose workers
//! stay alive between calls (the Python zygote keeps its imports warm).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::asm::diff::{Row, RowKind};
use crate::asm::mix::InstructionMix;
use crate::asm::{self, AsmKind, Normalize};
use crate::check::{self, CheckOptions, Machine};
use crate::diag::Diagnostic;
use crate::model::report::{CheckReport, Stage, Verdict};
use crate::runners::Runners;
use crate::store::{ResultRow, Status, Store, StoreError, VersionRow, sha256_hex};
use crate::workspace::{self, Format, VersionFile, VersionKind, Workspace};

/// The largest source `submit_version` accepts: 1 MiB.
pub const MAX_SOURCE_BYTES: usize = 1 << 20;
/// The longest name (after lowering to `[a-z0-9-]`) a submitted version's file gets.
pub const MAX_NAME_CHARS: usize = 48;
/// Listing lines `get_asm` returns unless asked for more.
pub const DEFAULT_ASM_LINES: usize = 2000;
/// Hunk rows `diff_asm` returns unless asked for more.
pub const DEFAULT_DIFF_ROWS: usize = 800;
/// Results `history` returns unless asked for more.
pub const DEFAULT_HISTORY: usize = 20;
/// Diagnostics quoted per stage in a text summary (all of them are in the structured content).
const TEXT_DIAGNOSTICS: usize = 8;

/// A tool call that could not do what was asked: what was wrong and what to do instead. It goes
/// back to the client as a tool error (`isError: true`); the server keeps serving.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ToolError {
    /// The argument at fault, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub error: String,
    pub help: String,
}

impl ToolError {
    pub fn new(field: Option<&str>, error: impl Into<String>, help: impl Into<String>) -> ToolError {
        ToolError { field: field.map(str::to_string), error: error.into(), help: help.into() }
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}\n  help: {}", self.error, self.help)
    }
}

impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> ToolError {
        ToolError::new(
            None,
            format!("the history store failed: {e}"),
            "this is rung's own database (.rung/history.db), not the version's fault: retry the call; if it keeps failing, delete .rung/ (rung rebuilds it)",
        )
    }
}

/// A successful call: the text a model reads and the structured content a program reads.
#[derive(Debug, Clone)]
pub struct Reply {
    pub text: String,
    pub data: serde_json::Value,
}

impl Reply {
    fn new<T: Serialize>(text: String, data: &T) -> Result<Reply, ToolError> {
        let data = serde_json::to_value(data).map_err(|e| {
            ToolError::new(None, format!("the result could not be serialised: {e}"), "this is a bug in rung; report it")
        })?;
        Ok(Reply { text, data })
    }
}

/// The machine's tools and the workers, found and started on first need and kept between calls.
#[derive(Default)]
pub struct Engine {
    machine: Option<Machine>,
    runners: Option<Runners>,
}

/// What every tool works on: the workspace folder and the shared engine.
pub struct Context {
    pub dir: PathBuf,
    engine: Mutex<Engine>,
    /// One submission at a time, so two never take the same id.
    submitting: Mutex<()>,
}

impl Context {
    pub fn new(dir: PathBuf) -> Context {
        Context { dir, engine: Mutex::new(Engine::default()), submitting: Mutex::new(()) }
    }

    /// The engine, one build or check at a time. A call that panicked does not poison it for the
    /// next one.
    fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops the workers (the zygote and the native worker), unless a build or check still
    /// holds them: exiting does not wait for it, and the workers end with their closed pipes.
    pub fn shutdown(&self) {
        let runners = match self.engine.try_lock() {
            Ok(mut e) => e.runners.take(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().runners.take(),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        drop(runners);
    }

    fn workspace(&self) -> Result<Workspace, ToolError> {
        Workspace::open(&self.dir).map_err(|e| {
            ToolError::new(
                None,
                format!("the workspace {} cannot be opened: {e}", self.dir.display()),
                "fix the file named above (rung reads the workspace again on every call), or start `rung mcp -C DIR` in a kernel workspace",
            )
        })
    }
}

fn open_store(ws: &Workspace) -> Result<Store, ToolError> {
    Store::open(&ws.state_dir()).map_err(ToolError::from)
}

/// The version named by `want` (an id, a file stem or a path), or an error listing the others.
fn find_version<'w>(ws: &'w Workspace, field: &str, want: &str) -> Result<&'w VersionFile, ToolError> {
    ws.version(want).ok_or_else(|| {
        let ids: Vec<&str> = ws.versions.iter().map(|v| v.id.as_str()).collect();
        ToolError::new(
            Some(field),
            format!("{field}: no version `{want}` in {}", ws.root.join(workspace::VERSIONS_DIR).display()),
            if ids.is_empty() {
                "there are no versions yet: write one with submit_version".to_string()
            } else {
                format!("name one of: {} (list_versions describes them)", ids.join(", "))
            },
        )
    })
}

fn read_source(ws: &Workspace, v: &VersionFile) -> Result<String, ToolError> {
    ws.read_source(v).map_err(|e| {
        ToolError::new(
            None,
            format!("cannot read {}: {e}", v.path.display()),
            "the file may have been deleted or renamed meanwhile: call list_versions",
        )
    })
}

fn summary_of(row: &ResultRow) -> String {
    row.payload.get("summary").and_then(|s| s.as_str()).unwrap_or("").to_string()
}

fn worst(verdicts: impl Iterator<Item = Verdict>) -> Option<Verdict> {
    verdicts.max()
}

fn symbol(verdict: &str) -> &'static str {
    Verdict::parse(verdict).map_or("?", Verdict::symbol)
}

/// `rung`, `gpu-mode`, `kernel-bench`: the format as the JSON output spells it.
fn format_name(format: Format) -> String {
    serde_json::to_value(format).ok().and_then(|f| f.as_str().map(str::to_string)).unwrap_or_default()
}

/// The language tag of a fenced block of this kind's source.
fn fence(kind: VersionKind) -> &'static str {
    match kind {
        VersionKind::Cuda | VersionKind::CudaHost => "cuda",
        VersionKind::Ptx => "ptx",
        _ => "python",
    }
}

// ---------------------------------------------------------------------------------------------
// Arguments. Their JSON schemas (generated from these types) are the tools' input schemas.

/// A version, by id (`v002`), file stem (`v002-float4`) or path (`versions/v002-float4.cu`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VersionArgs {
    /// The version: its id (`v002`), file stem (`v002-float4`) or path (`versions/v002-float4.cu`).
    pub version: String,
}

/// A version file's extension, which decides how it is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Extension {
    /// CUDA C++ (an `extern "C" __global__` kernel, or `extern "C" int rung_run(...)`).
    Cu,
    /// Python: Triton, CuTe DSL, TileLang or PyTorch (`def run(...)`).
    Py,
    /// Hand-written PTX.
    Ptx,
}

impl Extension {
    pub fn as_str(self) -> &'static str {
        match self {
            Extension::Cu => "cu",
            Extension::Py => "py",
            Extension::Ptx => "ptx",
        }
    }

    fn of(path: &Path) -> Option<Extension> {
        match path.extension()?.to_str()? {
            "cu" => Some(Extension::Cu),
            "py" => Some(Extension::Py),
            "ptx" => Some(Extension::Ptx),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitArgs {
    /// A short description that names the file `versions/vNNN-<name>.<extension>` (rung picks
    /// the next free id). Lowered to [a-z0-9-] (`Float4 FMA` becomes `float4-fma`), at most 48
    /// characters; a name containing `/`, `\`, `..` or starting with `.` is refused.
    pub name: String,
    /// The complete source file, at most 1 MiB (1,048,576 bytes).
    pub source: String,
    /// `cu`, `py` or `ptx`; default: the parent's.
    #[serde(default)]
    pub extension: Option<Extension>,
    /// The version this one was derived from (e.g. `v002`): recorded in the history, the
    /// default extension, and the natural `a` of a later `diff_asm`.
    #[serde(default)]
    pub parent: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckArgs {
    /// The versions to check (ids such as `v004`); empty or absent: every version.
    #[serde(default)]
    pub versions: Vec<String>,
    /// The seed that draws the inputs, to reproduce an earlier check; drawn from the
    /// workspace's seed pool when absent.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Stop after the check rung: no bench, no roofline.
    #[serde(default)]
    pub no_bench: bool,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AsmArgs {
    /// The version: its id (`v002`), file stem or path.
    pub version: String,
    /// `sass` (default) or `ptx`.
    #[serde(default)]
    pub kind: Option<AsmKind>,
    /// Only this kernel (default: every kernel of the version).
    #[serde(default)]
    pub kernel: Option<String>,
    /// At most this many listing lines in all (default 2000); the instruction mix always counts
    /// the whole kernel.
    #[serde(default)]
    pub max_lines: Option<usize>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiffAsmArgs {
    /// The older version, e.g. the parent (`v002`).
    pub a: String,
    /// The newer version (`v004`).
    pub b: String,
    /// `sass` (default) or `ptx`.
    #[serde(default)]
    pub kind: Option<AsmKind>,
    /// Only this kernel (default: every kernel, paired by name).
    #[serde(default)]
    pub kernel: Option<String>,
    /// Rename registers by first use, so a different register allocation does not hide the
    /// same instruction stream.
    #[serde(default)]
    pub registers: bool,
    /// At most this many rows of hunks in all (default 800); the counts and mixes are always
    /// complete.
    #[serde(default)]
    pub max_rows: Option<usize>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryArgs {
    /// Only this version (default: every version).
    #[serde(default)]
    pub version: Option<String>,
    /// Only this stage.
    #[serde(default)]
    pub stage: Option<Stage>,
    /// At most this many results, newest first (default 20).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Also return each result's full record (the stage result as `rung check --json` prints
    /// it); default: the summary only.
    #[serde(default)]
    pub payload: bool,
}

// ---------------------------------------------------------------------------------------------
// Results: the structured content of each tool (their schemas are the tools' output schemas).

/// `list_versions`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct VersionsOut {
    /// Absolute path of the workspace root.
    pub workspace: PathBuf,
    pub format: Format,
    pub problem: Option<String>,
    /// Problems with the workspace itself (rung.toml, duplicate version ids, files that are not
    /// versions).
    pub diagnostics: Vec<Diagnostic>,
    pub versions: Vec<VersionEntry>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct VersionEntry {
    pub id: String,
    /// Relative to the workspace root.
    pub path: PathBuf,
    pub kind: VersionKind,
    /// `null` until the version is first checked or submitted.
    pub status: Option<Status>,
    /// The version it was derived from, when its author said.
    pub parent: Option<String>,
    /// Why it was rejected.
    pub reason: Option<String>,
    /// The worst verdict of the latest results for the file's current source; `null` when it
    /// was never checked as it is now.
    pub verdict: Option<Verdict>,
    /// The newest result of every stage.
    pub stages: Vec<StageBrief>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StageBrief {
    pub stage: String,
    pub verdict: String,
    pub summary: String,
    /// The result is for the file's current source (false: the file changed since).
    pub current: bool,
    pub result_id: i64,
}

/// `read_version`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SourceOut {
    pub id: String,
    pub path: PathBuf,
    pub kind: VersionKind,
    pub status: Option<Status>,
    pub parent: Option<String>,
    pub reason: Option<String>,
    /// SHA-256 of the source.
    pub source_hash: String,
    pub bytes: usize,
    pub source: String,
}

/// `submit_version`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SubmitOut {
    /// The new version's id.
    pub id: String,
    /// The file written, relative to the workspace root.
    pub path: PathBuf,
    pub kind: VersionKind,
    /// Always `proposed`.
    pub status: Status,
    pub parent: Option<String>,
    /// The name as it went into the file name.
    pub name: String,
    pub source_hash: String,
    pub bytes: usize,
}

/// One stored stage result.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResultEntry {
    pub result_id: i64,
    pub version: String,
    pub stage: String,
    pub verdict: String,
    pub summary: String,
    /// SHA-256 of the source this result is for.
    pub source_hash: String,
    /// The result is for the version file's current source; `null` when the file is gone.
    pub current: Option<bool>,
    pub seed: Option<i64>,
    /// Milliseconds since the Unix epoch.
    pub started_at_ms: i64,
    pub finished_at_ms: i64,
    /// The stage result, as `rung check --json` prints it (`get_results` and `get_profile`
    /// always, `history` when asked).
    pub payload: Option<serde_json::Value>,
}

/// `get_results`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResultsOut {
    pub id: String,
    pub path: PathBuf,
    pub kind: VersionKind,
    pub status: Option<Status>,
    pub parent: Option<String>,
    pub reason: Option<String>,
    /// SHA-256 of the file's current source.
    pub source_hash: String,
    /// The worst verdict of the results for the current source; `null` when there are none.
    pub verdict: Option<Verdict>,
    /// The newest result of every stage, in the order they were recorded.
    pub results: Vec<ResultEntry>,
}

/// `get_asm`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AsmOut {
    pub version: String,
    pub kind: AsmKind,
    /// The version was built by this call (its listing was missing or older than its source).
    pub built_now: bool,
    /// The listings read, relative to the workspace root.
    pub files: Vec<PathBuf>,
    pub kernels: Vec<KernelAsm>,
    /// Some lines were left out (`max_lines`).
    pub truncated: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KernelAsm {
    pub name: String,
    /// Counted over the whole kernel.
    pub mix: InstructionMix,
    pub lines_total: usize,
    /// The listing without addresses and encodings; fewer than `lines_total` when truncated.
    pub lines: Vec<AsmLineOut>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AsmLineOut {
    pub text: String,
    /// The line of the version's source this came from, when the listing says.
    pub source_line: Option<u32>,
}

/// `diff_asm`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DiffAsmOut {
    pub a: String,
    pub b: String,
    pub kind: AsmKind,
    pub registers: bool,
    /// Versions built by this call.
    pub built_now: Vec<String>,
    pub kernels: Vec<KernelChange>,
    /// Some hunk rows were left out (`max_rows`).
    pub truncated: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KernelChange {
    /// The kernel in `a` (absent: only in `b`).
    pub left: Option<String>,
    /// The kernel in `b` (absent: only in `a`).
    pub right: Option<String>,
    /// Lines only in `a`.
    pub deleted: usize,
    /// Lines only in `b`.
    pub inserted: usize,
    pub left_mix: Option<InstructionMix>,
    pub right_mix: Option<InstructionMix>,
    /// The instruction-mix counts that differ.
    pub mix_changes: Vec<asm::mix::MixChange>,
    /// Runs of changed rows with three rows of context.
    pub hunks: Vec<Hunk>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Hunk {
    /// 1-based line of the hunk's first row in `a`'s listing (0: none).
    pub left_line: usize,
    /// 1-based line of the hunk's first row in `b`'s listing (0: none).
    pub right_line: usize,
    /// The label of the block the hunk starts in.
    pub block: Option<String>,
    pub rows: Vec<Row>,
}

/// `get_profile`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ProfileOut {
    pub version: String,
    /// A profile has been recorded for this version.
    pub available: bool,
    /// What is there, in words.
    pub message: String,
    /// The newest `profile` result, when there is one.
    pub profile: Option<ResultEntry>,
}

/// `history`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct HistoryOut {
    pub version: Option<String>,
    pub stage: Option<Stage>,
    /// Newest first.
    pub results: Vec<ResultEntry>,
}

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
        entries.push(VersionEntry {
            id: v.id.clone(),
            path: v.path.clone(),
            kind: v.kind,
            status: row.as_ref().map(|r| r.status),
            parent: row.as_ref().and_then(|r| r.parent.clone()),
            reason: row.as_ref().and_then(|r| r.reason.clone()),
            verdict,
            stages,
        });
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
        let status = e.status.map_or("new", Status::as_str);
        let parent = e.parent.as_ref().map(|p| format!(", parent {p}")).unwrap_or_default();
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
        let _ = writeln!(text, "{} {} ({}, {status}{parent}): {verdict}{last}", e.id, e.path.display(), e.kind);
        if let Some(r) = &e.reason {
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
        id: v.id.clone(),
        path: v.path.clone(),
        kind: v.kind,
        status: row.as_ref().map(|r| r.status),
        parent: row.as_ref().and_then(|r| r.parent.clone()),
        reason: row.as_ref().and_then(|r| r.reason.clone()),
        source_hash: sha256_hex(source.as_bytes()),
        bytes: source.len(),
        source,
    };
    let mut text = format!(
        "{} {} ({}, {}{}, {} bytes)\n",
        out.id,
        out.path.display(),
        out.kind,
        out.status.map_or("new", Status::as_str),
        out.parent.as_ref().map(|p| format!(", parent {p}")).unwrap_or_default(),
        out.bytes
    );
    if let Some(r) = &out.reason {
        let _ = writeln!(text, "rejected because: {r}");
    }
    let _ = write!(text, "```{}\n{}", fence(out.kind), out.source);
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
fn next_id(ws: &Workspace, dir: &Path, store: &Store) -> Result<String, ToolError> {
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
    let kind = match VersionKind::detect(&probe, &args.source) {
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

fn exit_words(code: i32) -> &'static str {
    match code {
        crate::exit::OK => "every rung that could run here passed",
        crate::exit::CHECK_FAILED => "a version ran but is wrong",
        crate::exit::BUILD_FAILED => "a version does not build",
        crate::exit::WORKSPACE_INVALID => "the workspace is invalid",
        crate::exit::INTERNAL => "rung or a tool broke (not the version's fault)",
        crate::exit::REGRESSION => "a benchmark regressed",
        _ => "see the versions below",
    }
}

fn diagnostics_text(out: &mut String, diagnostics: &[Diagnostic], indent: &str) {
    for d in diagnostics.iter().take(TEXT_DIAGNOSTICS) {
        for line in d.to_string().lines() {
            let _ = writeln!(out, "{indent}{line}");
        }
    }
    if diagnostics.len() > TEXT_DIAGNOSTICS {
        let _ = writeln!(out, "{indent}… {} more in the structured result", diagnostics.len() - TEXT_DIAGNOSTICS);
    }
}

/// The text of a check: one line per stage, the diagnostics under the stage that produced them.
pub fn check_text(r: &CheckReport) -> String {
    let mut text = format!(
        "checked {} version{} · seed {} · exit code {}: {}\n",
        r.versions.len(),
        if r.versions.len() == 1 { "" } else { "s" },
        r.seed,
        r.exit_code,
        exit_words(r.exit_code)
    );
    diagnostics_text(&mut text, &r.diagnostics, "");
    for v in &r.versions {
        let _ = writeln!(
            text,
            "{} {} {} ({}, {}): {}",
            v.verdict.symbol(),
            v.id,
            v.path.display(),
            v.kind,
            v.status.as_str(),
            v.verdict
        );
        for s in &v.stages {
            let reason = s.reason.map(|r| format!(" [{}]", r.name())).unwrap_or_default();
            let _ = writeln!(text, "  {} {:<9} {}{reason}", s.verdict.symbol(), s.stage.name(), s.summary);
            diagnostics_text(&mut text, &s.diagnostics, "      ");
        }
    }
    text
}

pub fn check(ctx: &Context, args: &CheckArgs) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    for want in &args.versions {
        find_version(&ws, "versions", want)?;
    }
    if ws.versions.is_empty() {
        return Err(ToolError::new(
            None,
            format!("there are no versions in {} to check", ws.root.join(workspace::VERSIONS_DIR).display()),
            "write one with submit_version",
        ));
    }
    let mut store = open_store(&ws)?;
    let opts = CheckOptions { versions: args.versions.clone(), seed: args.seed, no_bench: args.no_bench };
    let report = {
        let mut engine = ctx.engine();
        let Engine { machine, runners } = &mut *engine;
        let machine = machine.get_or_insert_with(Machine::discover);
        check::check_with(&ws, &mut store, &opts, machine, runners)?
    };
    Reply::new(check_text(&report), &report)
}

fn result_entry(row: &ResultRow, current_hash: Option<&str>, payload: bool) -> ResultEntry {
    ResultEntry {
        result_id: row.id,
        version: row.version.clone(),
        stage: row.stage.clone(),
        verdict: row.verdict.clone(),
        summary: summary_of(row),
        source_hash: row.source_hash.clone(),
        current: current_hash.map(|h| h == row.source_hash),
        seed: row.seed,
        started_at_ms: row.started_at_ms,
        finished_at_ms: row.finished_at_ms,
        payload: payload.then(|| row.payload.clone()),
    }
}

fn result_line(text: &mut String, e: &ResultEntry) {
    let stale = if e.current == Some(false) { " (for an older source)" } else { "" };
    let _ = writeln!(text, "  {} {:<9} {}{stale}", symbol(&e.verdict), e.stage, e.summary);
}

pub fn get_results(ctx: &Context, args: &VersionArgs) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    let v = find_version(&ws, "version", &args.version)?;
    let source = read_source(&ws, v)?;
    let hash = sha256_hex(source.as_bytes());
    let store = open_store(&ws)?;
    let row: Option<VersionRow> = store.version(&v.id)?;
    let results: Vec<ResultEntry> =
        store.latest_results(&v.id)?.iter().map(|r| result_entry(r, Some(&hash), true)).collect();
    let verdict = worst(results.iter().filter(|r| r.current == Some(true)).filter_map(|r| Verdict::parse(&r.verdict)));
    let out = ResultsOut {
        id: v.id.clone(),
        path: v.path.clone(),
        kind: v.kind,
        status: row.as_ref().map(|r| r.status),
        parent: row.as_ref().and_then(|r| r.parent.clone()),
        reason: row.as_ref().and_then(|r| r.reason.clone()),
        source_hash: hash,
        verdict,
        results,
    };
    let mut text = format!(
        "{} {} ({}, {}{}): {}\n",
        out.id,
        out.path.display(),
        out.kind,
        out.status.map_or("new", Status::as_str),
        out.parent.as_ref().map(|p| format!(", parent {p}")).unwrap_or_default(),
        match (out.verdict, out.results.is_empty()) {
            (Some(v), _) => v.name(),
            (None, true) => "not checked yet: call check",
            (None, false) => "changed since its last check: call check",
        }
    );
    for e in &out.results {
        result_line(&mut text, e);
        let diags: Vec<Diagnostic> = e
            .payload
            .as_ref()
            .and_then(|p| p.get("diagnostics"))
            .and_then(|d| serde_json::from_value(d.clone()).ok())
            .unwrap_or_default();
        diagnostics_text(&mut text, &diags, "      ");
    }
    Reply::new(text, &out)
}

/// Makes sure `v`'s listing of `kind` is from its current source: builds it (prepare and build,
/// recorded) when the listing is missing or the last build was of another source. Returns
/// whether it built.
fn ensure_built(ctx: &Context, ws: &Workspace, v: &VersionFile, kind: AsmKind) -> Result<bool, ToolError> {
    let source = read_source(ws, v)?;
    let hash = sha256_hex(source.as_bytes());
    let mut store = open_store(ws)?;
    let latest = store.latest_results(&v.id)?;
    let fresh = latest.iter().any(|r| r.stage == "build" && r.verdict == "pass" && r.source_hash == hash);
    if fresh && ws.dumps(&v.id, kind.ext()).is_some() {
        return Ok(false);
    }
    let built = {
        let mut engine = ctx.engine();
        let machine = engine.machine.get_or_insert_with(Machine::discover);
        let seed = store.next_seed(check::draw_seed)?;
        check::build_phase(ws, &mut store, v, seed, machine, None)?
    };
    let Some(built) = built else {
        return Err(ToolError::new(None, format!("the build of {} was cancelled", v.id), "call the tool again"));
    };
    if !built.runnable {
        let failed = built.stages.iter().find(|s| s.verdict != Verdict::Pass);
        let mut help = String::new();
        if let Some(s) = failed {
            for d in s.diagnostics.iter().take(TEXT_DIAGNOSTICS) {
                let _ = writeln!(help, "{d}");
            }
        }
        help.push_str("fix the source and submit it as a new version (get_results shows every diagnostic)");
        return Err(ToolError::new(
            Some("version"),
            format!(
                "{} does not build, so it has no {}: {}",
                v.id,
                kind.label(),
                failed.map(|s| format!("{}: {}", s.stage, s.summary)).unwrap_or_default()
            ),
            help,
        ));
    }
    Ok(true)
}

/// The parsed listing of `v`, built first when needed.
fn listing(
    ctx: &Context,
    ws: &Workspace,
    v: &VersionFile,
    kind: AsmKind,
    kernel: Option<&str>,
    field: &str,
) -> Result<(Vec<asm::KernelListing>, Vec<PathBuf>, bool), ToolError> {
    let built_now = ensure_built(ctx, ws, v, kind)?;
    let Some((files, text)) = ws.dumps(&v.id, kind.ext()) else {
        return Err(ToolError::new(
            Some(field),
            format!(
                "{} has no {} in {} although it builds",
                v.id,
                kind.label(),
                ws.state_dir().join(crate::store::DUMPS_DIR).join(&v.id).display()
            ),
            format!(
                "call check on {}: some versions get their PTX and SASS when they run (Triton on a GPU); or ask for the other kind",
                v.id
            ),
        ));
    };
    let mut kernels = asm::parse(kind, &text);
    if let Some(k) = kernel {
        let names: Vec<String> = kernels.iter().map(|l| l.name.clone()).collect();
        kernels.retain(|l| l.name == k);
        if kernels.is_empty() {
            return Err(ToolError::new(
                Some("kernel"),
                format!("kernel: {} has no kernel `{k}` in its {}", v.id, kind.label()),
                format!("name one of: {} (or leave kernel out for all)", names.join(", ")),
            ));
        }
    }
    Ok((kernels, files, built_now))
}

/// One line per class and per memory or tensor-core mnemonic, most frequent first.
fn mix_text(m: &InstructionMix) -> String {
    let mut classes: Vec<(&String, &usize)> = m.classes.iter().collect();
    classes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let mut text = format!("{} instructions: ", m.instructions);
    text.push_str(&classes.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", "));
    for (what, map) in [("memory", &m.memory), ("tensor core", &m.tensor)] {
        if !map.is_empty() {
            let _ = write!(
                text,
                "\n  {what}: {}",
                map.iter().map(|(k, n)| format!("{k} ×{n}")).collect::<Vec<_>>().join(", ")
            );
        }
    }
    text
}

pub fn get_asm(ctx: &Context, args: &AsmArgs) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    let v = find_version(&ws, "version", &args.version)?.clone();
    let kind = args.kind.unwrap_or(AsmKind::Sass);
    let (kernels, files, built_now) = listing(ctx, &ws, &v, kind, args.kernel.as_deref(), "version")?;
    let mut budget = args.max_lines.unwrap_or(DEFAULT_ASM_LINES);
    let mut truncated = false;
    let mut out_kernels = Vec::new();
    for k in &kernels {
        let take = k.lines.len().min(budget);
        budget -= take;
        truncated |= take < k.lines.len();
        out_kernels.push(KernelAsm {
            name: k.name.clone(),
            mix: asm::mix::mix(kind, k),
            lines_total: k.lines.len(),
            lines: k.lines[..take]
                .iter()
                .map(|l| AsmLineOut { text: l.text.clone(), source_line: l.source_line })
                .collect(),
        });
    }
    let out = AsmOut { version: v.id.clone(), kind, built_now, files, kernels: out_kernels, truncated };
    let mut text = format!(
        "{} {}, {} ({} kernel{}{})\n",
        out.version,
        kind.label(),
        if built_now { "built now" } else { "from its last build" },
        out.kernels.len(),
        if out.kernels.len() == 1 { "" } else { "s" },
        if truncated { "; truncated: pass max_lines or kernel for more" } else { "" }
    );
    for k in &out.kernels {
        let _ = writeln!(text, "━━ {}: {}", k.name, mix_text(&k.mix));
        let mut last_source = None;
        for l in &k.lines {
            if l.source_line.is_some() && l.source_line != last_source {
                let _ = writeln!(text, "{}  // line {}", l.text, l.source_line.unwrap_or(0));
                last_source = l.source_line;
            } else {
                let _ = writeln!(text, "{}", l.text);
            }
        }
        if k.lines.len() < k.lines_total {
            let _ = writeln!(text, "… {} more lines", k.lines_total - k.lines.len());
        }
    }
    Reply::new(text, &out)
}

/// A run of changed rows in unified layout: what left, then what came.
fn flush_unified(text: &mut String, pending: &mut Vec<&Row>) {
    for s in pending.iter().filter_map(|r| r.left.as_ref()) {
        let _ = writeln!(text, "- {}", s.text);
    }
    for s in pending.iter().filter_map(|r| r.right.as_ref()) {
        let _ = writeln!(text, "+ {}", s.text);
    }
    pending.clear();
}

pub fn diff_asm(ctx: &Context, args: &DiffAsmArgs) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    let a = find_version(&ws, "a", &args.a)?.clone();
    let b = find_version(&ws, "b", &args.b)?.clone();
    let kind = args.kind.unwrap_or(AsmKind::Sass);
    let (la, _, built_a) = listing(ctx, &ws, &a, kind, None, "a")?;
    let (lb, _, built_b) = listing(ctx, &ws, &b, kind, None, "b")?;
    let (mut la, mut lb) = (la, lb);
    if let Some(k) = &args.kernel {
        la.retain(|l| &l.name == k);
        lb.retain(|l| &l.name == k);
        if la.is_empty() && lb.is_empty() {
            return Err(ToolError::new(
                Some("kernel"),
                format!("kernel: neither {} nor {} has a kernel `{k}`", a.id, b.id),
                "leave kernel out to compare every kernel (get_asm lists their names)",
            ));
        }
    }
    let d = asm::diff::diff(kind, &la, &lb, Normalize { registers: args.registers });
    let mut budget = args.max_rows.unwrap_or(DEFAULT_DIFF_ROWS);
    let mut truncated = false;
    let mut kernels = Vec::new();
    for k in &d.kernels {
        let mut hunks = Vec::new();
        for &(s, e) in &k.hunks {
            if budget == 0 {
                truncated = true;
                break;
            }
            let end = e.min(s + budget);
            truncated |= end < e;
            budget -= end - s;
            let first = |f: fn(&Row) -> Option<&crate::asm::diff::Side>| {
                k.rows[s..e].iter().find_map(|r| f(r).map(|x| x.line + 1)).unwrap_or(0)
            };
            hunks.push(Hunk {
                left_line: first(|r| r.left.as_ref()),
                right_line: first(|r| r.right.as_ref()),
                block: k.rows[s].block.clone(),
                rows: k.rows[s..end].to_vec(),
            });
        }
        let changes = match (&k.left_mix, &k.right_mix) {
            (Some(l), Some(r)) => asm::mix::changes(l, r),
            _ => vec![],
        };
        kernels.push(KernelChange {
            left: k.left.clone(),
            right: k.right.clone(),
            deleted: k.deleted,
            inserted: k.inserted,
            left_mix: k.left_mix.clone(),
            right_mix: k.right_mix.clone(),
            mix_changes: changes,
            hunks,
        });
    }
    let built_now: Vec<String> =
        [(built_a, &a.id), (built_b, &b.id)].into_iter().filter(|(b, _)| *b).map(|(_, id)| id.clone()).collect();
    let out =
        DiffAsmOut { a: a.id.clone(), b: b.id.clone(), kind, registers: args.registers, built_now, kernels, truncated };
    let mut text = format!(
        "{} diff {} → {} ({} kernel{}{}{})\n",
        kind.label(),
        out.a,
        out.b,
        out.kernels.len(),
        if out.kernels.len() == 1 { "" } else { "s" },
        if out.registers { ", registers renamed" } else { "" },
        if truncated { "; truncated: pass max_rows or kernel for more" } else { "" }
    );
    for k in &out.kernels {
        let name = match (&k.left, &k.right) {
            (Some(l), Some(r)) if l == r => l.clone(),
            (Some(l), Some(r)) => format!("{l} → {r}"),
            (Some(l), None) => format!("{l} (only in {})", out.a),
            (None, Some(r)) => format!("{r} (only in {})", out.b),
            (None, None) => continue,
        };
        let _ = writeln!(text, "━━ {name}: −{} +{} lines", k.deleted, k.inserted);
        if k.mix_changes.is_empty() {
            let _ = writeln!(text, "instruction mix: unchanged");
        } else {
            let _ = writeln!(text, "instruction mix ({} → {}):", out.a, out.b);
            for c in &k.mix_changes {
                let _ = writeln!(text, "  {:<32} {:>6} → {:<6} {:+}", c.what, c.a, c.b, c.b as i64 - c.a as i64);
            }
        }
        if k.hunks.is_empty() {
            let _ = writeln!(text, "(no differences)");
        }
        for h in &k.hunks {
            let block = h.block.as_ref().map(|b| format!(" in {b}")).unwrap_or_default();
            let _ = writeln!(text, "@@ {}:{} {}:{}{block} @@", out.a, h.left_line, out.b, h.right_line);
            let mut pending: Vec<&Row> = Vec::new();
            for r in &h.rows {
                if r.kind == RowKind::Equal {
                    flush_unified(&mut text, &mut pending);
                    let _ = writeln!(text, "  {}", r.left.as_ref().map_or("", |s| s.text.as_str()));
                } else {
                    pending.push(r);
                }
            }
            flush_unified(&mut text, &mut pending);
        }
    }
    Reply::new(text, &out)
}

pub fn get_profile(ctx: &Context, args: &VersionArgs) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    let v = find_version(&ws, "version", &args.version)?;
    let hash = ws.source_hash(v);
    let store = open_store(&ws)?;
    let profile = store
        .latest_results(&v.id)?
        .iter()
        .find(|r| r.stage == Stage::Profile.name())
        .map(|r| result_entry(r, hash.as_deref(), true));
    let out = match profile {
        Some(p) => ProfileOut {
            version: v.id.clone(),
            available: true,
            message: format!("profile of {} ({}): {}", v.id, p.verdict, p.summary),
            profile: Some(p),
        },
        None => ProfileOut {
            version: v.id.clone(),
            available: false,
            message: format!(
                "not available yet: no profile has been recorded for {id}; `rung profile {id}` (or P in the TUI) \
                 records one on a machine with a GPU and Nsight Compute; nothing is invented",
                id = v.id
            ),
            profile: None,
        },
    };
    let mut text = format!("{}\n", out.message);
    if let Some(p) = &out.profile {
        result_line(&mut text, p);
    }
    // The sanitizers' latest findings, when there are any, in the text the model reads.
    for r in store.latest_results(&v.id)?.iter().filter(|r| r.stage == "memcheck" || r.stage == "racecheck") {
        result_line(&mut text, &result_entry(r, hash.as_deref(), false));
    }
    Reply::new(text, &out)
}

pub fn history(ctx: &Context, args: &HistoryArgs) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    let version = match &args.version {
        Some(want) => Some(find_version(&ws, "version", want).map(|v| v.id.clone()).or_else(|e| {
            // A deleted version's history stays: its id is still a valid question.
            let store = open_store(&ws)?;
            if store.version(want)?.is_some() { Ok(want.clone()) } else { Err(e) }
        })?),
        None => None,
    };
    let store = open_store(&ws)?;
    let limit = args.limit.unwrap_or(DEFAULT_HISTORY).max(1);
    let hashes: std::collections::HashMap<String, String> =
        ws.versions.iter().filter_map(|v| ws.source_hash(v).map(|h| (v.id.clone(), h))).collect();
    let rows = match args.stage {
        // The store filters by version only: read enough rows to find `limit` of this stage.
        Some(stage) => store
            .history(version.as_deref(), limit.saturating_mul(50).max(1000))?
            .into_iter()
            .filter(|r| r.stage == stage.name())
            .take(limit)
            .collect(),
        None => store.history(version.as_deref(), limit)?,
    };
    let results: Vec<ResultEntry> =
        rows.iter().map(|r| result_entry(r, hashes.get(&r.version).map(String::as_str), args.payload)).collect();
    let out = HistoryOut { version, stage: args.stage, results };
    let mut text = format!(
        "{} result{}{}{}, newest first\n",
        out.results.len(),
        if out.results.len() == 1 { "" } else { "s" },
        out.version.as_ref().map(|v| format!(" of {v}")).unwrap_or_default(),
        out.stage.map(|s| format!(" ({s})")).unwrap_or_default()
    );
    for e in &out.results {
        let when = crate::model::report::rfc3339(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(e.started_at_ms.max(0) as u64),
        );
        let stale = if e.current == Some(false) { " (older source)" } else { "" };
        let _ = writeln!(
            text,
            "#{} {} {} {:<9} {} {}{stale}",
            e.result_id,
            when,
            e.version,
            e.stage,
            symbol(&e.verdict),
            e.summary
        );
    }
    Reply::new(text, &out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowered_and_traversal_is_refused() {
        assert_eq!(sanitise_name("Float4 FMA").unwrap(), "float4-fma");
        assert_eq!(sanitise_name("  unroll_x4!! ").unwrap(), "unroll-x4");
        assert_eq!(sanitise_name("a.b").unwrap(), "a-b");
        for bad in ["../../x", "a/b", "a\\b", "..", ".hidden", "x..y"] {
            let e = sanitise_name(bad).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("name"), "{bad}");
            assert!(e.error.contains("may not contain"), "{bad}: {e}");
        }
        assert!(sanitise_name("!!!").unwrap_err().error.contains("no letters or digits"));
        assert_eq!(sanitise_name(&"x".repeat(200)).unwrap().len(), MAX_NAME_CHARS);
    }
}
