//! The results every shell prints: `rung check --json`, `rung watch --json`, the MCP server and
//! the TUI read these same types. The JSON schema (`schema/check.schema.json`) is generated from
//! them with schemars and committed; a test keeps the two in sync.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::sizes::SizeSet;
use crate::version::Status;
use crate::version::{Format, VersionKind};

pub use super::verdict::{Reason, Stage, Verdict};

/// Bumped on any incompatible change to the JSON output.
pub const SCHEMA: u32 = 1;

/// The output of `rung check --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckReport {
    /// Always 1 for this layout.
    pub schema: u32,
    pub rung_version: String,
    /// Absolute path of the workspace root.
    pub workspace: PathBuf,
    pub format: Option<Format>,
    pub problem: Option<String>,
    /// The seed that drew this check's inputs; pass it to `--seed` to reproduce.
    pub seed: u64,
    /// Problems with the workspace itself (rung.toml, missing reference, duplicate version ids).
    pub diagnostics: Vec<Diagnostic>,
    /// One record per version checked, in version order.
    pub versions: Vec<VersionReport>,
    /// With `--baseline`: each version's latest bench against the baseline's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comparisons: Vec<crate::bench::Comparison>,
    /// The process exit code this report maps to (see README, "Exit codes").
    pub exit_code: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VersionReport {
    /// `v002` for `versions/v002-vectorized.cu`.
    pub id: String,
    pub path: PathBuf,
    pub kind: VersionKind,
    pub status: Status,
    /// SHA-256 of the source file.
    pub source_hash: String,
    /// The worst verdict of its stages.
    pub verdict: Verdict,
    /// The stages that ran, in order. A stage absent here did not run because an earlier one
    /// did not pass.
    pub stages: Vec<StageResult>,
    /// Where the rungs ran: the host, its GPU, and the runner that reached it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ran_on: Option<RanOn>,
}

/// Where a version's rungs ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RanOn {
    /// The machine's host name (for an SSH runner, as the URL names it when the remote's own
    /// report does not say).
    pub host: String,
    /// The GPU's name, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The device's index (its CUDA ordinal; a simulated device's number) when the scheduler
    /// runs one worker lane per device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// `ssh://user@host/path` for a remote runner; absent for this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<String>,
}

impl RanOn {
    /// `gpu-box (NVIDIA H200, GPU-7ab4…)`, `gpu-box (device 1: NVIDIA H200, GPU-…)` or
    /// `gpu-box (no GPU)`.
    pub fn describe(&self) -> String {
        let dev = self.device.map(|d| format!("device {d}: ")).unwrap_or_default();
        match (&self.gpu, &self.uuid) {
            (Some(g), Some(u)) => format!("{} ({dev}{g}, {u})", self.host),
            (Some(g), None) => format!("{} ({dev}{g})", self.host),
            _ if self.device.is_some() => {
                format!("{} (simulated device {}, no GPU)", self.host, self.device.unwrap_or(0))
            }
            _ => format!("{} (no GPU)", self.host),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StageResult {
    pub stage: Stage,
    pub verdict: Verdict,
    /// One line for people.
    pub summary: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub duration_ms: f64,
    pub diagnostics: Vec<Diagnostic>,
    /// Tool name → version, for every tool this stage ran.
    pub tools: BTreeMap<String, String>,
    /// The history row this result was stored as.
    pub result_id: Option<i64>,
    /// Why a run or check did not pass, as a value a program can match on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    pub detail: StageDetail,
    /// Set for a result that a remote runner produced: where it ran (kept in the history with
    /// the result, so the TUI can say so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ran_on: Option<RanOn>,
}

/// Stage-specific results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StageDetail {
    Prepare(PrepareDetail),
    Build(crate::build::BuildDetail),
    Run(crate::run::RunDetail),
    Check(crate::run::CheckDetail),
    Bench(crate::bench::BenchDetail),
    Roofline(crate::bench::RooflineDetail),
    Profile(crate::profile::ProfileDetail),
    Sanitizer(crate::profile::SanitizerDetail),
    /// Nothing beyond the summary (a stage that failed before producing anything).
    None,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrepareDetail {
    /// The entry point: a kernel name, `rung_run`, or the Python function rung calls.
    pub entry: Option<String>,
    /// Parameters bound by name to rung.toml's tensors, scalars and sizes.
    pub bindings: Vec<Binding>,
    /// The launch at every test and benchmark size (CUDA kernels only). `num_sms` is taken as
    /// 132 (H100/H200) until the GPU is known.
    pub launches: Vec<SizedLaunch>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SizedLaunch {
    pub sizes: SizeSet,
    pub launch: LaunchDims,
}

/// The JSON schema of [`CheckReport`], as committed in `schema/check.schema.json`.
pub fn check_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(CheckReport)).expect("a schema serialises")
}

impl VersionReport {
    pub fn stage(&self, stage: Stage) -> Option<&StageResult> {
        self.stages.iter().find(|s| s.stage == stage)
    }
}

/// Concrete launch dimensions at one size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LaunchDims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub smem_bytes: u32,
    pub cluster: Option<[u32; 3]>,
}

/// What a kernel parameter is bound to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Binding {
    Input { param: String, tensor: String, dtype: DType },
    Output { param: String, tensor: String, dtype: DType },
    Scalar { param: String, scalar: String, dtype: DType },
    Size { param: String, var: String },
}
