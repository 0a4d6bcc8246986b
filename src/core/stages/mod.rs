//! The rungs. Each stage takes a version (and what earlier stages produced) and returns a typed
//! [`crate::model::report::StageResult`]; later stages run only when earlier ones pass.

pub mod bench;
pub mod build;
pub mod prepare;
pub mod problem;
pub mod profile;
pub mod run;
pub mod trace;

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::diag::Diagnostic;
use crate::model::protocol::{Arg, TensorFile, WorkerError};
use crate::model::report::StageDetail;
use crate::model::verdict::{Reason, Verdict};
use crate::spec::{SizeSet, Spec};

/// A stage's result before it is timed and recorded.
#[derive(Debug, Clone)]
pub struct StageOutcome {
    pub verdict: Verdict,
    pub summary: String,
    pub diagnostics: Vec<Diagnostic>,
    pub detail: StageDetail,
    pub reason: Option<Reason>,
}

impl StageOutcome {
    pub fn new(verdict: Verdict, summary: impl Into<String>) -> StageOutcome {
        StageOutcome { verdict, summary: summary.into(), diagnostics: vec![], detail: StageDetail::None, reason: None }
    }
}

/// The reason a worker's error stands for.
pub fn reason_for(e: &WorkerError) -> Reason {
    let m = e.message.to_ascii_lowercase();
    match e.kind.as_str() {
        "CUDA_ERROR_ILLEGAL_ADDRESS" => Reason::IllegalAddress,
        "CUDA_ERROR_OUT_OF_MEMORY" | "OutOfMemoryError" | "MemoryError" => Reason::OutOfMemory,
        "WorkerDied" => Reason::Crashed,
        "HostEntryFailed" | "HostEntryLoad" => Reason::EntryFailed,
        "TimerPatched" => Reason::TimerPatched,
        "HarnessPatched" => Reason::HarnessPatched,
        "LateWork" => Reason::LateWork,
        "LazyOutput" => Reason::LazyOutput,
        k if k.starts_with("CUDA_ERROR") => Reason::CudaError,
        _ if m.contains("illegal memory access") || m.contains("illegal address") => Reason::IllegalAddress,
        _ if m.contains("out of memory") => Reason::OutOfMemory,
        _ if m.contains("cuda error") => Reason::CudaError,
        // Under the sandbox a refused file or connection is EACCES: the sandbox's doing.
        "PermissionError" if crate::sandbox::strict() => Reason::SandboxDenied,
        _ if crate::sandbox::strict() && m.contains("[errno 13]") => Reason::SandboxDenied,
        _ => Reason::Exception,
    }
}

/// The keyword arguments of a Python function (`run` or `reference`) at one size, bound by
/// name like a kernel's: tensors as `tensor(t, shape)` makes them, scalars and size variables by
/// value (integers stay integers). Names that are none of these are left out.
pub fn call_args(
    spec: &Spec,
    params: &[String],
    sizes: &SizeSet,
    tensor: impl Fn(&crate::spec::TensorSpec, Vec<i64>) -> TensorFile,
) -> Result<BTreeMap<String, Arg>, crate::expr::ValueError> {
    let mut args = BTreeMap::new();
    for name in params {
        let v = if let Some((t, _)) = spec.tensor(name) {
            let shape = spec
                .shape_at(t, sizes)
                .map_err(|e| crate::expr::ValueError::Shape { name: name.clone(), message: e.message })?;
            Arg::Tensor(tensor(t, shape))
        } else if let Some(value) = spec.value_of(name, sizes, None)? {
            Arg::Value(value.to_json())
        } else {
            continue;
        };
        args.insert(name.clone(), v);
    }
    Ok(args)
}

/// Parameter name → (file, shape): the buffers of one input set.
pub type Files = BTreeMap<String, (PathBuf, Vec<i64>)>;
