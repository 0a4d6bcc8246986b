//! The run stage's report types.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use crate::metrics::Comparison;
use crate::protocol::{CapturedKernel, OwnVerdict};
use crate::sizes::SizeSet;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunDetail {
    /// `cuda` (on the GPU), `triton-interpreter` (on the CPU) or `torch-cpu`.
    pub mode: String,
    pub sizes: Vec<SizeRun>,
    /// Where the time went, in seconds: `zygote_start` (only when the worker started for this
    /// check), `prewarm` (Triton compiling every test size's kernels in parallel, when the
    /// source is new), `fork`, `cuda_init`, `import`, `inputs` (drawing and writing them),
    /// `first_run` (the decoy runs, any compile left included), `run` (the checked runs),
    /// `worker_overhead` (staging, guard checks, round trips), `reference`, `metrics`, `dumps`
    /// (keeping the kernels that launched).
    #[serde(default)]
    pub phases: BTreeMap<String, f64>,
    /// Triton kernels that really launched on the GPU (their PTX and cubin are in the dumps).
    #[serde(default)]
    pub launched: Vec<CapturedKernel>,
    /// What the sandbox enforced on the processes that ran the version: `strict: Landlock ABI
    /// 7, files and TCP; no core dumps, files ≤ 24 GiB, private memory ≤ 24 GiB (from …)`, or
    /// `off (…)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SizeRun {
    pub sizes: SizeSet,
    /// Wall time of the second run, in the worker, synchronised.
    pub seconds: f64,
    /// Output → number of elements left unwritten (poison in both runs).
    pub unwritten: BTreeMap<String, usize>,
    /// Milliseconds the device kept working after the call's own stream finished.
    #[serde(default)]
    pub pending_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckDetail {
    pub seed: u64,
    pub results: Vec<OutputCheck>,
    /// The `@rung("name")` functions of the workspace's checks.py, per test size.
    pub user_rungs: Vec<UserRung>,
    /// GPU MODE's check_implementation or KernelBench's allclose, per test.
    #[serde(default)]
    pub own: Vec<OwnCheck>,
    /// Where a pass deserves a second look: the format's rule passes what rung's tolerance does
    /// not, or a vacuous answer (all zeros, one constant) would pass the rule too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OwnCheck {
    pub sizes: SizeSet,
    pub verdict: OwnVerdict,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UserRung {
    pub sizes: SizeSet,
    pub name: String,
    pub pass: bool,
    /// The assertion's message, when it failed.
    pub error: Option<String>,
    pub traceback: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OutputCheck {
    pub sizes: SizeSet,
    pub output: String,
    pub pass: bool,
    /// Why it failed, in words.
    pub reason: Option<String>,
    pub comparison: Comparison,
}
