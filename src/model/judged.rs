//! What a GPU MODE or KernelBench test produced, as the worker protocol carries it
//! ([`crate::protocol::Response::problem`]): what the version's process observed of each case,
//! and each case as the judge's process judged it. Part of the protocol (re-exported there and
//! in its committed schema), kept apart because it is the judge's vocabulary, not the pipe's.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a GPU MODE or KernelBench test produced: from the version's process, what it observed
/// of each case (`observed`); from the judge's process, each case judged (`cases`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProblemOutcome {
    /// The test's arguments as used (the seed is rung's).
    pub args: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    pub cases: Vec<ProblemCase>,
    /// The version's process's records of a judged test, for the judge (`Judge::observed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observed: Vec<serde_json::Value>,
    /// The compile phase: the Triton kernels the version's second call launched, by name (the
    /// worker's launch hook); absent where they were not listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched: Option<Vec<String>>,
    /// The compile phase: every GPU kernel the version's second call launched, by name (torch's
    /// profiler); absent where they were not listed or the profiler recorded none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched_gpu: Option<Vec<String>>,
    /// Timing primitives (time.perf_counter, torch.cuda.Event, synchronize...) the version
    /// replaced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patched: Vec<String>,
    /// The judge's own functions (the problem's modules, rung's, torch operations) the version
    /// replaced or changed: `reference.check_implementation`, `torch.allclose`...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub harness: Vec<String>,
}

/// One call of the version on fresh inputs, judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProblemCase {
    pub seed: u64,
    /// The version's call, synchronised.
    pub seconds: f64,
    /// Each tensor the version returned beside the reference's at the same position.
    pub outputs: Vec<ProblemTensor>,
    /// Every tensor handed to the version that is not an output: elements whose bits changed.
    pub inputs: Vec<InputCheck>,
    /// The tensors of `data` taken for outputs (written by ref_kernel, or the last one when the
    /// version returns it): poisoned before the call, never counted as mutated inputs.
    #[serde(default)]
    pub output_slots: Vec<String>,
    /// Output slot the version returned → elements still holding the poison.
    #[serde(default)]
    pub unwritten: BTreeMap<String, usize>,
    /// The format's own verdict: GPU MODE's check_implementation, KernelBench's allclose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own: Option<OwnVerdict>,
    /// Set when a vacuous answer (all zeros, one constant) passes the format's rule too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vacuous: Option<String>,
    /// What was promoted or reshaped to compare, and diagnoses (TF32).
    #[serde(default)]
    pub notes: Vec<String>,
    /// The version returned bit for bit what it returned for the previous case, whose inputs
    /// (and reference) differed: a remembered answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// The problem's own check failed f32 outputs of a version whose process had TF32 on: rung
    /// calls it again with TF32 off to see whether that is the cause.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tf32_suspect: bool,
    /// Timing primitives the version had replaced when its call returned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patched: Vec<String>,
    /// The judge's own functions the version had replaced or changed when its call returned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub harness: Vec<String>,
    /// Threads the version's call started and left running when it returned and rung
    /// synchronised (`Thread-1 (later) at v008.py:10 in later()`): work its time leaves out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late: Vec<String>,
    /// Outputs the version returned as something other than a plain tensor
    /// (`output[0]: Lazy, a torch.Tensor subclass`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lazy: Vec<String>,
    /// Set on the sparse probe's call ([`crate::model::protocol::SparseProbe`]), whose outputs
    /// are not listed: what it showed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeResult>,
}

/// What the sparse probe showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProbeResult {
    pub outcome: ProbeOutcome,
    /// The elements moved in each floating input, and by how much.
    pub k: usize,
    pub factor: f64,
    /// In words, with the figures (empty when it followed).
    #[serde(default)]
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeOutcome {
    /// The answer followed the moved reference within the rule.
    Followed,
    /// The answer is the one to the inputs before they moved: a failure.
    Ignored,
    /// The answer is neither: a warning (the version may rely on the inputs' distribution).
    Differs,
    /// The version or the reference raised on the moved draw: a warning, nothing is known.
    Unjudged,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProblemTensor {
    pub name: String,
    pub output: TensorMeta,
    pub reference: TensorMeta,
    /// rung's metrics at rung's tolerance for the dtypes; `null` when the element counts differ.
    pub comparison: Option<crate::metrics::Comparison>,
    /// The tolerance `comparison` counted mismatches at: `[atol, rtol]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<[f64; 2]>,
    /// The format's allclose rule, where it is one (KernelBench's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<RuleFigures>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TensorMeta {
    /// rung's dtype name where it has one (f32), torch's otherwise (bool, complex64).
    pub dtype: String,
    pub shape: Vec<i64>,
}

/// A format's allclose rule applied to one output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleFigures {
    pub mismatches: usize,
    /// Elements an all-zero output would get past the rule.
    pub zero_pass: usize,
    /// Elements one constant (the reference's mean) would get past the rule.
    pub constant_pass: usize,
    pub constant: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InputCheck {
    pub name: String,
    pub changed: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OwnVerdict {
    pub pass: bool,
    pub message: String,
}
