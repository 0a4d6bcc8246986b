//! What the ahead-of-time scripts (`triton_aot.py`, `cute_aot.py`) print: one JSON object on
//! standard output with each kernel's files and compile metadata, or errors at the version's
//! lines. The scripts parse no tool's report (the build rung reads resources from the cubin and
//! the `.ptxas.txt` they write), so this is all rung reads of them. The schema
//! (`schema/aot.schema.json`, `rung schema --aot`) is generated from these types and committed.
//! The scripts may add fields for people (signatures, launches); rung ignores them.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The script's whole reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AotReport {
    #[serde(default)]
    pub kernels: Vec<AotKernel>,
    /// Said to the user beside the build (a guess the script had to make, say).
    #[serde(default)]
    pub warnings: Vec<String>,
    #[serde(default)]
    pub errors: Vec<AotError>,
}

/// One compiled kernel (Triton) or `@cute.jit` function (CuTe DSL).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AotKernel {
    pub name: String,
    /// Compiled from a launch captured by calling run(), not from an inferred signature.
    #[serde(default)]
    pub captured: bool,
    /// What it wrote, by kind (`ptx`, `cubin`, `sass`, `ptxas`, `ttir`, `meta`, ...) → path.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    pub num_warps: Option<u32>,
    pub num_stages: Option<u32>,
    /// All the shared memory a launch takes, as the compiler's metadata says (Triton).
    #[serde(default)]
    pub shared: Option<u32>,
    /// The device kernels a CuTe DSL function launches; empty for Triton (one kernel).
    #[serde(default)]
    pub device_kernels: Vec<DeviceKernel>,
    /// The PTX's `.target`.
    pub gpu_name: Option<String>,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// A device kernel of a CuTe DSL function, as its PTX entry is named.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceKernel {
    pub name: String,
    /// The dynamic shared memory its launch asks for, from the lowered host code.
    pub dynamic_shared: Option<u32>,
}

/// An error at the version's line (or the script's, when it broke).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AotError {
    pub kernel: Option<String>,
    /// The Python exception's type (`SyntaxError`, `CompilationError`, ...).
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    #[serde(default)]
    pub traceback: Option<String>,
    pub lineno: Option<u32>,
    pub col: Option<u32>,
    /// ptxas's messages, as the compiler's log holds them: rung parses them and maps each to
    /// the version's line through the `.loc` directives of the rejected PTX (`files.failed_ptx`).
    #[serde(default)]
    pub ptxas_log: Option<String>,
    /// What it saved for the error (`failed_ptx`: the PTX ptxas rejected) → path.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

/// The JSON schema of [`AotReport`], as committed in `schema/aot.schema.json`.
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(AotReport)).expect("a schema serialises")
}
