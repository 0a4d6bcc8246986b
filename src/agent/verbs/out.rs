//! The tools' structured results.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Serialize;

use rung_core::asm::diff::Row;
use rung_core::asm::mix::InstructionMix;
use rung_core::asm::{self, AsmKind};
use rung_core::diag::Diagnostic;
use rung_core::model::report::{Stage, Verdict};
use rung_core::store::{Status, VersionRow};
use rung_core::workspace::{Format, VersionFile, VersionKind};

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

/// Who a version is and where it stands: the fields `list_versions`, `read_version` and
/// `get_results` open with (flattened into each, so their JSON is as before).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct VersionHead {
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
}

impl VersionHead {
    pub fn of(v: &VersionFile, row: Option<&VersionRow>) -> VersionHead {
        VersionHead {
            id: v.id.clone(),
            path: v.path.clone(),
            kind: v.kind,
            status: row.map(|r| r.status),
            parent: row.and_then(|r| r.parent.clone()),
            reason: row.and_then(|r| r.reason.clone()),
        }
    }

    /// `v003 versions/v003.cu (cuda, accepted, parent v002`: the opening of each tool's line
    /// for the version, left open for what the tool adds.
    pub fn opening(&self) -> String {
        format!(
            "{} {} ({}, {}{}",
            self.id,
            self.path.display(),
            self.kind,
            self.status.map_or("new", Status::as_str),
            self.parent.as_ref().map(|p| format!(", parent {p}")).unwrap_or_default()
        )
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct VersionEntry {
    #[serde(flatten)]
    pub head: VersionHead,
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
    #[serde(flatten)]
    pub head: VersionHead,
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
    /// Versions whose file holds this very source, each with its review (`v006 (rejected: too
    /// slow)`): a resubmission of what was already tried.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub same_as: Vec<String>,
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
    #[serde(flatten)]
    pub head: VersionHead,
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

/// `get_trace`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TraceOut {
    pub version: String,
    /// A trace has been recorded for this version.
    pub available: bool,
    /// It is of the file as it is now.
    pub current: bool,
    /// What is there, in words.
    pub message: String,
    /// The latest trace record, when there is one.
    pub trace: Option<rung_core::model::trace::TraceRecord>,
}

/// `history`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct HistoryOut {
    pub version: Option<String>,
    pub stage: Option<Stage>,
    /// Newest first.
    pub results: Vec<ResultEntry>,
}
