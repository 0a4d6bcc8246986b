//! The names every part shares: the stages of the ladder, their verdicts, and the reason codes
//! a failure carries.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The rungs, in the order a version climbs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// Static checks before compiling: kind, launch header, parameter binding.
    Prepare,
    /// Compile to PTX, CUBIN and SASS (or Triton's stages), with diagnostics.
    Build,
    /// Execute on poisoned outputs, twice, with guard zones and input hashes.
    Run,
    /// Compare with the reference at every test size; the user's `@rung` checks.
    Check,
    /// Time at the benchmark sizes; speedups over the best approved version.
    Bench,
    /// Achieved bandwidth or FLOP/s against the GPU's measured ceilings.
    Roofline,
    /// Nsight Compute, on demand (`rung profile`): what limits each kernel.
    Profile,
    /// compute-sanitizer's memcheck, on demand (`rung profile --memcheck`): bad accesses at
    /// their source lines.
    Memcheck,
    /// compute-sanitizer's racecheck, on demand (`rung profile --racecheck`): shared-memory
    /// races at their source lines.
    Racecheck,
}

impl Stage {
    pub const ALL: [Stage; 9] = [
        Stage::Prepare,
        Stage::Build,
        Stage::Run,
        Stage::Check,
        Stage::Bench,
        Stage::Roofline,
        Stage::Profile,
        Stage::Memcheck,
        Stage::Racecheck,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Prepare => "prepare",
            Stage::Build => "build",
            Stage::Run => "run",
            Stage::Check => "check",
            Stage::Bench => "bench",
            Stage::Roofline => "roofline",
            Stage::Profile => "profile",
            Stage::Memcheck => "memcheck",
            Stage::Racecheck => "racecheck",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The rung was climbed.
    Pass,
    /// The rung could not run here (e.g. no GPU); `summary` says why. Not a failure.
    Skipped,
    /// The version is wrong: it does not build, crashes, or disagrees with the reference.
    Fail,
    /// rung or a tool broke (not the version's fault); `summary` says what.
    Error,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Skipped => "skipped",
            Verdict::Fail => "fail",
            Verdict::Error => "error",
        }
    }

    pub fn symbol(self) -> &'static str {
        match self {
            Verdict::Pass => "✓",
            Verdict::Skipped => "–",
            Verdict::Fail => "✗",
            Verdict::Error => "!",
        }
    }

    pub fn parse(s: &str) -> Option<Verdict> {
        Some(match s {
            "pass" => Verdict::Pass,
            "skipped" => Verdict::Skipped,
            "fail" => Verdict::Fail,
            "error" => Verdict::Error,
            _ => return None,
        })
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a run or check did not pass. `summary` says the same in words, with the numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// The kernel touched an address outside any allocation (CUDA_ERROR_ILLEGAL_ADDRESS).
    IllegalAddress,
    /// The kernel wrote into the guard zone around a buffer (an out-of-bounds write that did not
    /// fault).
    OutOfBounds,
    /// No answer within `limits.run`; the worker was killed.
    Timeout,
    /// The process running the version died (a signal, an abort).
    Crashed,
    /// An allocation failed: out of device (or host) memory.
    OutOfMemory,
    /// Another CUDA error.
    CudaError,
    /// The version's Python code raised.
    Exception,
    /// The sandbox refused the version a file or a connection (`RUNG_SANDBOX=strict`): it read
    /// or wrote outside its workspace and scratch, or opened the network.
    SandboxDenied,
    /// The kernel's declared parameters do not match its PTX entry.
    SignatureMismatch,
    /// Output elements were never written.
    Unwritten,
    /// The kernel changed an input.
    InputMutated,
    /// NaN or Inf in an output where the reference is finite.
    NonFinite,
    /// An output's shape differs from the reference's.
    ShapeMismatch,
    /// The output disagrees with the reference beyond the tolerance.
    Mismatch,
    /// The output did not change when the inputs did: a remembered result.
    Memoised,
    /// A reduction's answer did not move when a few of its inputs were moved far out: it
    /// matches the answer to the inputs before, so the version does not read every input (a
    /// sampled or estimated reduction).
    InputIgnored,
    /// A `@rung` function of checks.py failed.
    UserRung,
    /// The problem's own check failed (GPU MODE's check_implementation, KernelBench's allclose).
    ProblemCheck,
    /// The reference itself failed.
    ReferenceFailed,
    /// The connection to a remote runner was lost mid-run; `summary` has ssh's reason.
    ConnectionLost,
    /// No connection to a remote runner could be made (refused, unknown host, a host key that
    /// does not match), or it broke while the workspace was sent: nothing ran there.
    ConnectionFailed,
    /// The cluster's scheduler killed the job at its time limit.
    TimeLimit,
    /// A `rung_run` host entry returned a non-zero code, or its shared object did not load.
    EntryFailed,
    /// The version replaced a clock or a synchronisation point that timing reads
    /// (time.perf_counter, torch.cuda.Event, torch.cuda.synchronize...).
    TimerPatched,
    /// The version declares its own kernels (Triton, CUDA) but none of them launched: the work
    /// was done by something else (a fallback to torch).
    NoCustomKernel,
    /// A line on rung's channel that was not the worker's answer: the version wrote it.
    ForgedReply,
    /// The version replaced or changed a function its judge runs: the problem's own
    /// (`reference.check_implementation`, `ref_kernel`, `generate_input`, a KernelBench `Model`),
    /// rung's, or a torch operation (`torch.allclose`) with one of its own.
    HarnessPatched,
    /// The version set aside persisting L2 (cudaLimitPersistingL2CacheSize) for its data, which
    /// would outlast the flush before each timed call; rung undid it and timed without it.
    L2Persisting,
    /// The version's call returned while a thread it started was still running: work its time
    /// leaves out, which could change its outputs after rung read them.
    LateWork,
    /// The version returned an output that is not a plain tensor (a `torch.Tensor` subclass):
    /// its operations are the version's own, so its work can run when the output is read, after
    /// the timed call, and what a judge reads from it is what the subclass says.
    LazyOutput,
}

impl Reason {
    pub fn name(self) -> String {
        serde_json::to_value(self).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
    }

    /// The reason a code names (`input-mutated`), as [`Reason::name`] writes it.
    pub fn parse(code: &str) -> Option<Reason> {
        serde_json::from_value(serde_json::Value::String(code.to_string())).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;

    /// A code reads back as the reason that wrote it; a code no reason writes reads as none.
    #[test]
    fn a_reason_code_parses_back_to_its_reason() {
        for r in [Reason::InputMutated, Reason::L2Persisting, Reason::NoCustomKernel, Reason::Timeout] {
            assert_eq!(Reason::parse(&r.name()), Some(r), "{}", r.name());
        }
        assert_eq!(Reason::name(Reason::L2Persisting), "l2-persisting");
        assert_eq!(Reason::parse("input_mutated"), None);
        assert_eq!(Reason::parse(""), None);
    }
}
