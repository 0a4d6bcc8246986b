//! The kinds of version file rung knows and the problem formats a workspace can be in.

use std::fmt;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// rung.toml + reference + versions/.
    Rung,
    /// A GPU MODE reference-kernels problem folder.
    GpuMode,
    /// A KernelBench problem file (`Model`, `get_inputs`, `get_init_inputs`).
    KernelBench,
}

/// What language a version is written in, which decides how it is built and run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum VersionKind {
    /// CUDA C++ with an `extern "C" __global__` kernel, launched by rung.
    Cuda,
    /// CUDA C++ exporting `extern "C" int rung_run(...)`, built as a shared object.
    CudaHost,
    /// Hand-written PTX.
    Ptx,
    Triton,
    CuteDsl,
    #[serde(rename = "tilelang")]
    TileLang,
    /// PyTorch (a GPU MODE `custom_kernel` or a KernelBench `ModelNew` without a DSL).
    #[serde(rename = "pytorch")]
    PyTorch,
}

impl VersionKind {
    pub fn name(self) -> &'static str {
        match self {
            VersionKind::Cuda => "cuda",
            VersionKind::CudaHost => "cuda-host",
            VersionKind::Ptx => "ptx",
            VersionKind::Triton => "triton",
            VersionKind::CuteDsl => "cute-dsl",
            VersionKind::TileLang => "tilelang",
            VersionKind::PyTorch => "pytorch",
        }
    }

    /// Run by the native worker: a kernel (`.cu`, `.ptx`) or a `rung_run` host entry.
    pub fn is_native(self) -> bool {
        matches!(self, VersionKind::Cuda | VersionKind::CudaHost | VersionKind::Ptx)
    }

    pub fn is_python(self) -> bool {
        matches!(self, VersionKind::Triton | VersionKind::CuteDsl | VersionKind::TileLang | VersionKind::PyTorch)
    }
}

impl fmt::Display for VersionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One version file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VersionFile {
    /// `v002` for `v002-vectorized.cu`; the file stem when there is no `vNNN` prefix.
    pub id: String,
    /// Relative to the workspace root.
    pub path: PathBuf,
    pub kind: VersionKind,
}

/// A version's review status (DESIGN.md, "Results and history").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Written by a person.
    Draft,
    /// Written by an agent, awaiting review.
    Proposed,
    Approved,
    /// With a reason that goes back to the agent.
    Rejected,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Draft => "draft",
            Status::Proposed => "proposed",
            Status::Approved => "approved",
            Status::Rejected => "rejected",
        }
    }

    pub fn parse(s: &str) -> Status {
        match s {
            "proposed" => Status::Proposed,
            "approved" => Status::Approved,
            "rejected" => Status::Rejected,
            _ => Status::Draft,
        }
    }
}
