//! The profile stage's report types.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sizes::SizeSet;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProfileDetail {
    /// The sizes of the profiled call.
    pub sizes: SizeSet,
    /// Each kernel the call launched, as Nsight Compute measured it.
    pub kernels: Vec<KernelProfile>,
    /// The Nsight Compute report (`.ncu-rep`, for `ncu-ui`) and its raw page as CSV: SHA-256s of
    /// objects in `.rung/objects/`.
    pub report: Option<String>,
    pub csv: Option<String>,
    /// The command, as run in the workspace's root.
    pub command: String,
    /// The bytes rung.toml's roofline formula counts at these sizes, from the version's newest
    /// roofline of the same source, and the DRAM bytes Nsight Compute saw over that: above 1,
    /// the kernel moves more than it needs (it re-reads what did not stay in L2).
    #[serde(default)]
    pub formula_bytes: Option<f64>,
    #[serde(default)]
    pub traffic_ratio: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SanitizerDetail {
    pub tool: Sanitizer,
    pub sizes: SizeSet,
    pub findings: Vec<Finding>,
    /// The tool's closing line (`ERROR SUMMARY: 2 errors`).
    pub summary: Option<String>,
    /// The tool's whole output, an object in `.rung/objects/`.
    pub log: Option<String>,
    pub command: String,
}

/// What limits a kernel, by Nsight Compute's speed-of-light figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    /// The memory system is the busier unit, and busy.
    Memory,
    /// The SMs are the busier unit, and busy.
    Compute,
    /// Neither is busy: the kernel waits (too few warps, dependencies, launch overhead).
    Latency,
}

impl Bound {
    pub fn name(self) -> &'static str {
        match self {
            Bound::Memory => "memory",
            Bound::Compute => "compute",
            Bound::Latency => "latency",
        }
    }
}

/// One kernel launch as Nsight Compute measured it. Figures it did not report are `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KernelProfile {
    pub kernel: String,
    pub grid: String,
    pub block: String,
    /// `gpu__time_duration.sum`, µs.
    pub duration_us: f64,
    /// SM throughput, % of peak (`sm__throughput`).
    pub sm_percent: Option<f64>,
    /// Memory throughput, % of peak (`gpu__compute_memory_throughput`: the busiest of DRAM, L2,
    /// L1).
    pub memory_percent: Option<f64>,
    pub dram_percent: Option<f64>,
    pub dram_read_bytes: Option<f64>,
    pub dram_write_bytes: Option<f64>,
    /// DRAM bytes over the duration, GB/s.
    pub dram_gbs: Option<f64>,
    pub achieved_occupancy_percent: Option<f64>,
    pub theoretical_occupancy_percent: Option<f64>,
    /// What caps the blocks per SM below a full SM: `registers`, `shared memory`, `warps`,
    /// `blocks`, `barriers`; `None` when the theoretical occupancy is full.
    pub occupancy_limiter: Option<String>,
    /// Waves of blocks per SM (`launch__waves_per_multiprocessor`): under 1, the grid leaves SMs
    /// idle.
    #[serde(default)]
    pub waves: Option<f64>,
    pub registers_per_thread: Option<f64>,
    /// Static plus dynamic shared memory, bytes per block.
    pub shared_bytes_per_block: Option<f64>,
    pub l1_hit_percent: Option<f64>,
    pub l2_hit_percent: Option<f64>,
    /// Warp stall reasons, most cycles first: (reason, cycles stalled per issued instruction).
    pub stalls: Vec<(String, f64)>,
    /// The busiest tensor pipe, % of peak (0 for a kernel without tensor-core instructions).
    pub tensor_percent: Option<f64>,
    pub bound: Bound,
    /// The numbers behind `bound`, in words.
    pub why: String,
    /// The SASS instructions with the most warp-stall samples (from the source page).
    pub hot_spots: Vec<HotSpot>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HotSpot {
    pub sass: String,
    /// Warp-stall samples at this instruction, and their share of the kernel's.
    pub samples: u64,
    pub percent: f64,
}

/// Which compute-sanitizer tool wrote a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Sanitizer {
    Memcheck,
    Racecheck,
}

impl Sanitizer {
    pub fn name(self) -> &'static str {
        match self {
            Sanitizer::Memcheck => "memcheck",
            Sanitizer::Racecheck => "racecheck",
        }
    }
}

/// One finding of compute-sanitizer, located at its source line when the kernel was built with
/// line information (rung's builds are).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Finding {
    /// `Invalid __global__ write of size 4 bytes`, `Race reported between Read access ... and
    /// Write access`.
    pub what: String,
    pub kernel: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// The lines under it: the thread and block, the address, the other side of a race.
    pub details: Vec<String>,
}
