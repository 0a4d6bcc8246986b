//! The bench stage's report types.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use crate::sizes::SizeSet;
use crate::verdict::Reason;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BenchDetail {
    pub gpu: String,
    pub uuid: String,
    pub device_before: Option<DeviceState>,
    pub device_after: Option<DeviceState>,
    /// Before or after, a reason that slows the GPU was active with the SM clock more than 3%
    /// below its maximum (or the clock unknown): `DeviceState::throttled`.
    pub throttled: bool,
    /// How long this bench waited for another rung process timing on the same GPU.
    pub lock_wait_ms: f64,
    pub sizes: Vec<SizeBench>,
    /// Speedups against the best approved version and the reference, timed interleaved.
    #[serde(default)]
    pub speedups: Vec<Speedup>,
    /// Why a comparison was not made or failed.
    #[serde(default)]
    pub comparison_notes: Vec<String>,
    /// Where the bench's wall time went, in seconds, on rung's side: `lock_wait` (another
    /// process timing on this GPU), `device_state` (clocks and throttling, before and after),
    /// `inputs` (drawing the input sets and writing them), `series` (each size's timed series:
    /// the worker's upload, warm-up, flushes, timed calls and graph replay), `interleaved` (the
    /// comparisons with the approved best and the reference), `workers` (ending the Python
    /// children) and `cleanup`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub phases: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SizeBench {
    pub sizes: SizeSet,
    /// The headline time, ms: `gpu`, or the device-wide interval less `fixed_ms` when work was left
    /// on another stream. Its median is the figure the roofline and comparisons use.
    pub headline: Summary,
    /// `cupti`, `events` or `device-wide`.
    pub basis: String,
    /// GPU time between events on the call's stream, ms.
    pub gpu: Summary,
    /// With a `cupti` headline (the GPU's busy time for the call's work on every stream, from
    /// CUPTI's activity records): from the same records, first start to last end, idle gaps
    /// between the work included, ms.
    #[serde(default)]
    pub span: Option<Summary>,
    /// Why the samples were timed by events rather than CUPTI.
    #[serde(default)]
    pub timer_note: Option<String>,
    /// Host time of the call itself, ms.
    pub host: Summary,
    /// Device-wide interval as the host saw it, ms, before subtracting `fixed_ms`.
    pub wall: Summary,
    /// The fixed cost of waiting for an idle device, ms (an empty call's wall time).
    pub fixed_ms: f64,
    pub stop: Stop,
    pub input_sets: usize,
    pub flush_bytes: u64,
    /// Small kernels: per-call time by CUDA graph replay (no host launch overhead, L2 warm), ms.
    #[serde(default)]
    pub graph: Option<Summary>,
    /// Why graph replay could not time a small kernel (a capture the kernel's code breaks).
    #[serde(default)]
    pub graph_error: Option<String>,
    /// The input set whose buffers the re-checked call ran in, holding the fresh set's data then
    /// (drawn at random per bench; 0 is the set the check's seed draws).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recheck_set: Option<u32>,
    /// The re-checked call's time between events, ms: the first call on the fresh inputs, to set
    /// beside `gpu` (the timed calls').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recheck_ms: Option<f64>,
    /// Why the timed outputs disagree with the reference, when they do.
    pub recheck_failure: Option<String>,
    /// The re-check's reason code where it is not `mismatch` (GPU MODE and KernelBench: the
    /// timed buffers refilled and judged as a check case; `memoised` for a remembered result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recheck_reason: Option<Reason>,
    /// The carve-out of persisting L2 the version set (cudaLimitPersistingL2CacheSize), bytes:
    /// rung set it to zero and reset the persisting lines before every timed call, so the times
    /// are without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_persisting_bytes: Option<u64>,
    /// Where this size's series went, in seconds: the worker's `upload` (the version loaded,
    /// the input sets and flush buffer on the device), `timer_start`, `warmup`, `fixed_cost` (the
    /// empty call), `timed` (the samples, each after its L2 flush), `graph_replay` and
    /// `write_back`; and rung's `recheck` of the timed outputs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub phases: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Ceilings {
    pub uuid: String,
    pub gpu: String,
    /// The best device-to-device copy, GB/s counting bytes read plus written.
    pub copy_gbs: f64,
    /// Each method's figure: `cuMemcpy`, `copy-kernel`.
    pub copy_methods: BTreeMap<String, f64>,
    /// A large bf16 GEMM through cuBLAS (torch.matmul), TFLOP/s; absent without torch.
    pub gemm_bf16_tflops: Option<f64>,
    /// The datasheet's figures for this GPU, when rung knows it.
    pub datasheet_gbs: Option<f64>,
    pub datasheet_bf16_tflops: Option<f64>,
    pub measured_at: String,
    /// How the ceilings were timed: `cupti` (as benches are when CUPTI traces) or `events`.
    /// Empty in a cache written before rung timed by CUPTI, which is then measured again.
    #[serde(default)]
    pub timer: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RooflineDetail {
    pub sizes: SizeSet,
    pub seconds: f64,
    pub bytes: Option<f64>,
    pub flops: Option<f64>,
    pub achieved_gbs: Option<f64>,
    pub achieved_tflops: Option<f64>,
    /// `memory` or `compute`: which ceiling applies at this arithmetic intensity.
    pub bound: String,
    /// Achieved as a percentage of the ceiling that bounds it.
    pub percent_of_ceiling: Option<f64>,
    pub ceilings: Ceilings,
}

/// A speedup measured by interleaving: this version and the other timed in alternating batches
/// (A B A B) on the same input sets, so drift in clocks or temperature hits both alike.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Speedup {
    /// `best approved` or `reference`.
    pub role: String,
    /// The version compared with (its id), or the reference's file.
    pub against: String,
    pub sizes: SizeSet,
    /// This version's headline times in the interleaved rounds, ms.
    pub this: Summary,
    /// The other's, ms.
    pub other: Summary,
    /// The other's median over this one's: above 1, this version is faster.
    pub speedup: f64,
    /// The speedup at the ends of the two medians' 95% intervals (the slowest this version's
    /// allows against the fastest the other's allows, and the reverse).
    pub speedup_low: f64,
    pub speedup_high: f64,
    /// Alternating batches timed (each an A batch then a B batch).
    pub rounds: usize,
    /// More than [`SUSPICIOUS_SPEEDUP`] over the best approved version: flagged for review (a
    /// skipped computation or a result cached across calls looks like this).
    pub suspicious: bool,
}

/// How a version's time compares with a baseline's, noise-aware: the confidence intervals of the
/// two medians, not the bare medians.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Comparison {
    pub version: String,
    pub baseline: String,
    /// candidate median / baseline median − 1, in percent (positive: slower).
    pub change_percent: f64,
    /// The smallest slowdown the intervals allow: candidate CI low / baseline CI high − 1, in %.
    pub least_slowdown_percent: f64,
    pub max_regression_percent: f64,
    /// The least slowdown exceeds the allowed regression.
    pub regressed: bool,
    /// What both figures are: the headlines' basis when the two benches share it, else `events`
    /// (every bench keeps its event times), so a change of timer is not read as a change of speed.
    #[serde(default)]
    pub basis: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub mean: f64,
    /// Sample standard deviation (n − 1).
    pub std: f64,
    pub min: f64,
    pub max: f64,
    /// The median's 95% confidence interval, by order statistics.
    pub ci_low: f64,
    pub ci_high: f64,
    /// (ci_high − ci_low) / median.
    pub ci_rel: f64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Stop {
    /// The median's CI is under the target.
    #[default]
    Converged,
    /// The time budget ran out first (the CI is wider than the target; see `ci_rel`).
    Budget,
    /// The sample cap was reached first.
    MaxSamples,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceState {
    pub uuid: String,
    pub name: String,
    pub driver: String,
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub max_sm_clock_mhz: Option<u32>,
    pub temperature_c: Option<u32>,
    pub power_w: Option<f64>,
    /// The active clock-event reasons as nvidia-smi reports them (a bit mask, e.g. `0x0000000000000004`).
    pub throttle_mask: Option<String>,
    /// The reasons in words.
    pub throttle_reasons: Vec<String>,
    /// A reason that slows the GPU (not idle, not an applications-clocks or display setting) is
    /// active and the SM clock is more than 3% below its maximum, or either clock is unknown.
    pub throttled: bool,
}
