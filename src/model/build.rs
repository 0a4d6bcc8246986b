//! The build stage's report types.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BuildDetail {
    /// `nvcc`, `ptxas` or `triton`.
    pub compiler: String,
    /// The target, e.g. `sm_90a`.
    pub arch: String,
    /// Why this target: `GPU`, `rung.toml`, `default`, plus `+a: uses wgmma` when upgraded.
    pub arch_reason: String,
    /// True for Triton builds made without launching the kernel: the signature and constexprs
    /// were inferred (see `notes`), so the kernels that really launch may differ.
    pub ahead_of_time: bool,
    /// True when this result was reused from an identical earlier build (no tool ran).
    pub cached: bool,
    pub cache_key: String,
    /// Every command run, exactly as run (working directory: the workspace root).
    pub commands: Vec<String>,
    /// What the rung made, stored by hash and linked in `.rung/dumps/<version>/`. A CUDA or PTX
    /// build's SASS listing (`<version>.sass`, from `nvdisasm -c -g`) is made after the rung,
    /// while the version runs, and is not among them: it lands in the dumps a moment later and
    /// in the build cache's record, so a cached build lists it.
    pub artefacts: Vec<Artefact>,
    pub kernels: Vec<KernelBuild>,
    /// Anything the build inferred or assumed.
    pub notes: Vec<String>,
    /// Where the build's time went, in seconds, by tool as run: `nvcc` (the front end, and
    /// again for a `rung_run` version's shared library), `nvrtc`, `ptxas`, `triton_aot`,
    /// `cute_aot`, `tilelang_aot` (each of which lists its own SASS); then
    /// `store` (hashing and keeping the artefacts). Empty for a cached build: no tool ran.
    #[serde(default)]
    pub phases: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Artefact {
    /// File name under `.rung/dumps/<version>/`.
    pub name: String,
    /// `ptx`, `cubin`, `sass`, `so`, `ttir`, `ttgir`, `llir`, ...
    pub kind: String,
    /// SHA-256: the object in `.rung/objects/`.
    pub hash: String,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KernelBuild {
    pub resources: KernelResources,
    /// Triton's launch parameters, for Triton kernels.
    pub num_warps: Option<u32>,
    pub num_stages: Option<u32>,
}

/// The `-v` report for one kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct KernelResources {
    /// The mangled entry name, as in PTX and SASS.
    pub name: String,
    pub arch: String,
    pub registers: u32,
    pub barriers: u32,
    /// Static shared memory, bytes.
    pub shared_bytes: u32,
    pub stack_frame_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
    /// Constant bank 0 bytes (kernel parameters and constants), when reported.
    pub cmem0_bytes: Option<u32>,
}
