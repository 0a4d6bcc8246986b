//! The profile stage's report types.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::profile::{Finding, KernelProfile, Sanitizer};
use crate::spec::SizeSet;

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
