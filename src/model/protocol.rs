//! The worker protocol, defined once here: rung and its workers (`rung worker`, the native one,
//! and `assets/python/rung_worker.py`) speak JSON lines of these types. The JSON schema
//! (`schema/worker.schema.json`) is generated from them and committed; `tests/protocol.rs` keeps
//! the two in sync, round-trips every message and validates what the Python worker really prints.
//!
//! A worker's first line is a [`Hello`]. Then each [`Request`] line gets one [`Response`] line.
//! Bulk arrays never travel as JSON: a [`TensorFile`] names a file (in /dev/shm where there is
//! one) that rung wrote and the worker maps or copies.
//!
//! The Python worker is a zygote: its parent imports numpy, Triton and torch without touching
//! CUDA, and each check begins with [`Op::Fork`]. The child answers the fork (with its pid) and
//! every request up to the next [`Op::Exit`]; then the parent is listening again. When the child
//! dies (a segfault, a kill after a time-out) the parent writes a [`Response`] with the error
//! `WorkerDied` and the signal, so rung always gets an answer line.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::sizes::SizeSet;

pub use crate::judged::{
    InputCheck, OwnVerdict, ProbeOutcome, ProbeResult, ProblemCase, ProblemOutcome, ProblemTensor, RuleFigures,
    TensorMeta,
};

/// Bumped on any incompatible change; the handshake must match.
pub const PROTOCOL: u32 = 2;

/// Bytes of guard zone put before and after every buffer a kernel gets: a write there is an
/// out-of-bounds write that did not fault. They are filled with [`GUARD_BYTE`].
pub const GUARD_BYTES: u64 = 64 * 1024;
pub const GUARD_BYTE: u8 = 0xC3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WorkerKind {
    Native,
    Python,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Capability {
    /// Launches a cubin's kernel (native).
    Launch,
    /// Launches with thread-block clusters through cuLaunchKernelEx (native).
    Clusters,
    /// Calls a `rung_run` version's host entry from its shared object (native).
    HostEntry,
    /// Calls Python functions (references, versions' run()).
    Call,
    /// Runs Triton kernels in Triton's interpreter on the CPU.
    TritonInterpret,
    /// Runs on the GPU with torch tensors.
    Cuda,
    /// Forks a child per check (the zygote).
    Fork,
    /// Runs GPU MODE problem folders and KernelBench files.
    Problems,
    /// Runs the `@rung` functions of a checks.py.
    Checks,
}

/// A worker's first line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    pub protocol: u32,
    pub worker: WorkerKind,
    pub pid: u32,
    pub capabilities: Vec<Capability>,
    /// The GPU's name, when the worker opened one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Python's version (the Python worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
    /// Imported packages and their versions (numpy, triton, torch).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub packages: BTreeMap<String, String>,
    /// Seconds the worker took to start (imports included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_seconds: Option<f64>,
    /// What the Python zygote did once before it forks, by name, in seconds, so that every child
    /// inherits it: its imports (`import torch`), and `triton_key`, the hash of Triton's
    /// installation that each compile and cache lookup asks for (on a thread beside torch's
    /// import; `triton_key wait` is how long the zygote waited for it after its imports).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub warmed: BTreeMap<String, f64>,
    /// Why the worker cannot serve (it exits after saying so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<WorkerError>,
}

/// One request line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Request {
    pub id: u64,
    #[serde(flatten)]
    pub op: Op,
}

// One request a line, built once and sent: its size in memory does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Op {
    /// Launch a kernel of a cubin (native worker).
    Launch(Launch),
    /// Call a Python function: a version's run(), or a reference (Python worker).
    Call(Call),
    /// Run the `@rung` functions of a checks.py on one size's buffers (Python worker).
    Checks(Checks),
    /// Start a child for one check (the Python zygote).
    Fork(Fork),
    /// Run a version of a GPU MODE or KernelBench problem at one test (Python worker).
    Problem(Problem),
    /// Judge what a version's process saw at one test, in a process that never ran a version:
    /// the problem's inputs drawn again, its reference and its own check (Python worker).
    Judge(Judge),
    /// Time a launch (native) or a call (Python) repeatedly.
    Bench(Bench),
    /// Measure this GPU's ceilings: device-to-device copy bandwidth (native), bf16 GEMM
    /// throughput (Python, torch).
    Ceiling(Ceiling),
    /// End the child (after a fork) or the worker.
    Exit,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    pub cubin: PathBuf,
    pub kernel: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes; above 48 KB the function attribute is raised first.
    pub smem: u32,
    /// Thread-block cluster dimensions: launched through cuLaunchKernelEx.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<[u32; 3]>,
    /// The kernel's parameters in declaration order.
    pub params: Vec<LaunchParam>,
    /// Guard bytes before and after every buffer (0: none).
    #[serde(default)]
    pub guard_bytes: u64,
    /// A `rung_run` version's shared object: instead of launching `kernel`, the worker calls the
    /// object's `rung_run_packed(void** args)` (generated by the build around the version's
    /// `rung_run`), which launches its own kernels on the default stream. `grid`, `block`,
    /// `smem` and `cluster` are then unused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<PathBuf>,
    /// A traced launch (the cubin built with `-DRUNG_TRACE`): the worker allocates room for
    /// `capacity` records in `regions` parts (one per SM, each with its own counter), writes
    /// their addresses into the cubin's `rung_trace` symbol, launches, and writes the records
    /// the kernel wrote to `out`, part after part (the count it asked for is the answer's
    /// `trace_requested`; the room that would have held them all, `trace_needed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceRequest>,
}

/// Where a traced launch's records go, how many fit, and in how many parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceRequest {
    pub capacity: u64,
    pub out: PathBuf,
    /// Parts of the buffer (the GPU's SM count): a record goes to the part of the SM it was
    /// written on, and each part holds `capacity / regions` (rounded up).
    #[serde(default = "one_region")]
    pub regions: u32,
    /// A Python version's call: the markers' module the worker arms before the import
    /// (`rung_trace`, `rung_trace_cute`, `rung_trace_tilelang`); absent for a native launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub markers: Option<String>,
}

fn one_region() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum LaunchParam {
    /// A device buffer holding this file's bytes (written back after the launch).
    Buffer { name: String, path: PathBuf },
    /// A value passed by value, encoded for its C type (`float`, `int`, `__half`...).
    Scalar { name: String, ctype: String, value: f64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CallMode {
    /// Triton's interpreter on the CPU, tensors as host arrays.
    Interpret,
    /// torch tensors on the GPU.
    Cuda,
    /// A reference: numpy arrays in, outputs returned.
    Reference,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Call {
    pub file: PathBuf,
    pub function: String,
    pub mode: CallMode,
    /// Keyword arguments.
    pub args: BTreeMap<String, Arg>,
    /// For functions that return their outputs (references): where each goes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub returns: BTreeMap<String, TensorFile>,
    /// Guard bytes around every tensor on the GPU (0: none).
    #[serde(default)]
    pub guard_bytes: u64,
    /// A traced call of a Triton, CuTe DSL or TileLang version (`rung trace`): before the
    /// version is imported the worker allocates the buffer as for a traced launch and gives its
    /// addresses to the markers its source imports (`rung_trace.py`, `rung_trace_cute.py`,
    /// `rung_trace_tilelang.py`), and afterwards writes the records kept to `out` (the answer's
    /// `trace_requested` and `trace_needed`, as a launch's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceRequest>,
}

impl Call {
    /// A call of a Python reference's `reference(...)`, whose outputs it returns to `returns`.
    pub fn reference(file: PathBuf, args: BTreeMap<String, Arg>, returns: BTreeMap<String, TensorFile>) -> Call {
        let (function, mode, guard_bytes, trace) = ("reference".into(), CallMode::Reference, 0, None);
        Call { file, function, mode, args, returns, guard_bytes, trace }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum Arg {
    Tensor(TensorFile),
    /// A scalar or size variable, by value (integers stay integers).
    Value(serde_json::Value),
}

/// A tensor in a file: raw little-endian elements, row-major.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TensorFile {
    pub path: PathBuf,
    pub dtype: DType,
    pub shape: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Checks {
    pub file: PathBuf,
    pub sizes: SizeSet,
    pub inputs: BTreeMap<String, TensorFile>,
    pub outputs: BTreeMap<String, TensorFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fork {
    pub mode: CallMode,
    /// Calls the zygote runs first, each in its own short-lived child, all at once, so that
    /// Triton compiles every specialisation in parallel into the cache the check's child then
    /// reads. Their outcomes are not reported (the check's own calls are).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prewarm: Vec<Call>,
    /// How long the prewarm children may take before they are killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prewarm_seconds: Option<f64>,
    /// The GPU's compute capability (90 for sm_90): the prewarm children then compile for it
    /// without opening the GPU (run() called with fake tensors, Triton's own specialisation,
    /// `triton.compile` into the same cache), so the check's child is forked at once and opens
    /// the GPU alone, while they compile. Without it each prewarm child runs run() on the GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prewarm_arch: Option<u32>,
    /// A secret of this fork's that the child puts on every answer (`Response::token`), so a
    /// line the version writes to the protocol's stream does not pass for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemFormat {
    GpuMode,
    KernelBench,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Problem {
    pub format: ProblemFormat,
    /// GPU MODE: reference.py (generate_input, ref_kernel, check_implementation). KernelBench:
    /// the problem file (Model, get_inputs, get_init_inputs).
    pub problem: PathBuf,
    /// The version: a GPU MODE `custom_kernel` or a KernelBench `ModelNew`.
    pub version: PathBuf,
    /// GPU MODE: one test of task.yml, passed to generate_input (its seed replaced by rung's).
    #[serde(default)]
    pub args: BTreeMap<String, serde_json::Value>,
    /// The seed of the test's first case (the seed `generate_input` gets, or torch's for
    /// KernelBench's get_inputs and the models' weights).
    pub seed: u64,
    /// One case per seed: the first is `seed`, the others fresh inputs drawn under further seeds
    /// of rung's, each with its output slots poisoned with the next pattern. Empty: `[seed]`.
    #[serde(default)]
    pub seeds: Vec<u64>,
    /// rung's tolerance `[atol, rtol]` per dtype name, for the metrics beside the format's rule.
    #[serde(default)]
    pub tolerances: BTreeMap<String, [f64; 2]>,
    /// The compile phase: import the version and call it once on the first case's inputs,
    /// unjudged (load_inline, torch.compile and Triton compile here, under `limits.build`).
    #[serde(default)]
    pub warmup: bool,
    /// One of task.yml's benchmarks, re-checked: judged as a test, without the vacuity probes.
    #[serde(default)]
    pub benchmark: bool,
    /// With `warmup`, on a GPU: list the Triton kernels the version's call launches, for a
    /// version that declares some.
    #[serde(default)]
    pub list_kernels: bool,
    /// With `warmup`, on a GPU: list every GPU kernel that call launches (torch's profiler), for
    /// a version that declares CUDA kernels (`__global__`, load_inline's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub list_gpu_kernels: bool,
    /// A judged test: the folder where the version's process writes what it returned (and the
    /// inputs it changed) for the judge's process, which answers the verdict ([`Judge`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dump: Option<PathBuf>,
    /// What the judge learnt of the problem, for the version's process to act on.
    #[serde(default)]
    pub hints: JudgeHints,
    /// Call the version with TF32 off (torch's matmul and cuDNN flags), to confirm a judge's
    /// suspicion ([`ProblemCase::tf32_suspect`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_tf32: bool,
    /// The sparse probe's call ([`JudgeHints::sparse`]), alone in its request: one call on the
    /// first seed's draw with a few inputs moved. rung makes it last in a check, after every test
    /// is judged, so a version that breaks on such a draw (a crash, a sticky CUDA error) loses no
    /// verdict but the probe's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sparse_call: bool,
}

/// What a judge's process learnt of a problem that the version's process needs before the call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JudgeHints {
    /// GPU MODE: the tensors of `data` that ref_kernel writes: poisoned before each call.
    #[serde(default)]
    pub output_slots: Vec<String>,
    /// The inputs the problem draws the same way twice under one seed: the judge draws them
    /// again; of every other input the version's process writes a copy before the call.
    #[serde(default)]
    pub regenerable: Vec<String>,
    /// GPU MODE: of `output_slots`, those the reference also reads, or writes only in part (a
    /// cache updated in place): not poisoned, since what the draw put in them is part of the
    /// answer; compared whole, with no count of unwritten elements. KernelBench: the inputs
    /// `Model` changes in place, which the version may change too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inout_slots: Vec<String>,
    /// GPU MODE: the reference's answer depends on `data`'s last tensor, so it is an input
    /// even when a version fills and returns it (otherwise that tensor is the buffer pmpp_v2
    /// hands in for the output, and a version may write it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reads_last: bool,
    /// The sparse probe of a reduction: after its tests, a check makes one more call on a draw
    /// with a few elements of every floating input moved far out ([`Problem::sparse_call`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse: Option<SparseProbe>,
}

/// How the sparse probe moves a draw: `k` elements of each floating input (not the output
/// slots in `skip`), at positions drawn from a seed of rung's, each set to the tensor's largest
/// magnitude times `factor`. The judge chose it so the reference lands far from its answer to
/// the draw as it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SparseProbe {
    pub k: usize,
    pub factor: f64,
    #[serde(default)]
    pub skip: Vec<String>,
}

/// The judge's side of a GPU MODE or KernelBench test. With `learn`, the problem's inputs are
/// drawn under `seed` and the reference run once, to learn the [`JudgeHints`]; otherwise each
/// of `observed` (the records the version's process wrote, opaque here) is judged: answered as
/// [`ProblemOutcome::cases`], or with [`Response::redo`] when inputs must be kept and the test
/// run again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Judge {
    pub format: ProblemFormat,
    pub problem: PathBuf,
    #[serde(default)]
    pub args: BTreeMap<String, serde_json::Value>,
    /// The test's first seed (KernelBench: the models' weights).
    pub seed: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub learn: bool,
    #[serde(default)]
    pub observed: Vec<serde_json::Value>,
    /// The folder the version's process wrote its files in: a file a record names elsewhere
    /// is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dump: Option<PathBuf>,
    #[serde(default)]
    pub tolerances: BTreeMap<String, [f64; 2]>,
    /// Try the problem's own check on vacuous answers too (a test's first case).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub probe: bool,
    /// A bench's re-check: `observed` is the call on the timed buffers, then the one on new
    /// buffers; the answer is [`Response::recheck`] and its reason, or nothing when both pass.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recheck: bool,
    /// `observed` is the sparse probe's call alone ([`Problem::sparse_call`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sparse_call: bool,
}

/// Timing requests. The first of a series carries `launch` or `call` and the input sets: the
/// worker uploads every set once, warms up for `warmup_seconds`, and keeps them; later requests
/// with neither only ask for more samples; `write_back` copies set 0's buffers back to their
/// files (so the timed runs' outputs can be checked), all but the `read_only` ones. Before each timed call a buffer of
/// `flush_bytes` is read on the GPU and its lines discarded (flushing L2); calls rotate through the input sets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Bench {
    /// Which of the worker's timing series this request is for. A comparison keeps two series
    /// set up at once and alternates batches between them (A B A B); a `launch` or `call`
    /// replaces its own series only.
    #[serde(default)]
    pub series: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<Launch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<Call>,
    /// Further input sets: parameter name → the file holding that set's data.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sets: Vec<BTreeMap<String, PathBuf>>,
    #[serde(default)]
    pub warmup_seconds: f64,
    pub samples: u32,
    #[serde(default)]
    pub flush_bytes: u64,
    /// The flush kernels (`rung_flush` reads the buffer, `rung_flush_evict_first` reads it again
    /// evict-first, `rung_discard` then drops its lines from L2), as PTX, for a worker without
    /// its own copy: the Python worker. Every worker flushes with the same kernels, so Triton and
    /// CUDA versions are timed from the same L2 state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush_ptx: Option<String>,
    #[serde(default)]
    pub write_back: bool,
    /// The input set a write-back's call runs on (rung draws it at random per bench); its
    /// outputs, shared by every set, are what is written back.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recheck_set: u32,
    /// A write-back's fresh inputs, by parameter name: copied into `recheck_set`'s buffers
    /// before its call, so the call meets data no timed call saw.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub recheck_inputs: BTreeMap<String, PathBuf>,
    /// Files the worker only reads (the bench's kept input sets), named by a series' first
    /// request: the series' write-backs leave them as they are, and the native worker keeps their bytes in memory between requests, read again
    /// when a file's length, modification time or inode changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only: Vec<PathBuf>,
    /// Buffers whose files are not written (the poisoned outputs): each path stands for `bytes`
    /// bytes of `value`, which the native worker fills on the device; a write-back writes the file.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub filled: BTreeMap<PathBuf, Fill>,
    /// Graph replay, for small kernels: `graph_calls` calls on set 0 captured into one CUDA graph
    /// (no flush between them), the graph replayed `graph_replays` times, each timed by events;
    /// the per-call times come back in `Response::graph_ms`. Done after the samples.
    #[serde(default)]
    pub graph_calls: u32,
    #[serde(default)]
    pub graph_replays: u32,
    /// For `rung profile`: one call on set 0 made between `cuProfilerStart` and `cuProfilerStop`
    /// (after one call outside them, so a JIT compile or lazy module load is not what is
    /// profiled), nothing timed. Nsight Compute started with `--profile-from-start off` then
    /// profiles exactly that call's kernels.
    #[serde(default)]
    pub profile: bool,
    /// A GPU MODE or KernelBench call to time instead of `call`: the problem makes its own inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<ProblemBench>,
    /// A problem's write-back: where its re-check calls write what they saw for the judge, and
    /// what the judge learnt of the problem ([`Problem::dump`], [`Problem::hints`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dump: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hints: Option<JudgeHints>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A buffer of `bytes` bytes, each `value`: what a poisoned output's file would hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fill {
    pub bytes: u64,
    pub value: u8,
}

/// What a GPU MODE or KernelBench bench times, in the Python worker: `custom_kernel(data)` (or
/// the problem's `ref_kernel`) on `generate_input(**args)`, or `ModelNew` (or `Model`) on
/// `get_inputs()`, with weights seeded identically. Each input set is drawn on its own seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProblemBench {
    pub format: ProblemFormat,
    /// The problem's file: GPU MODE's reference.py, or the KernelBench problem.
    pub problem: PathBuf,
    pub version: PathBuf,
    /// Time the problem's reference (`ref_kernel`, `Model`) instead of the version.
    #[serde(default)]
    pub reference: bool,
    /// One entry of task.yml's `benchmarks:` (empty for KernelBench).
    #[serde(default)]
    pub args: BTreeMap<String, serde_json::Value>,
    pub seed: u64,
    /// Independent input sets to rotate through.
    pub sets: u32,
}

/// One timed call, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sample {
    /// Between events recorded before and after the call on its stream.
    pub gpu_ms: f64,
    /// From CUPTI's activity records: the GPU's busy time for the work the call launched on
    /// any stream (the union of its kernels', copies' and memsets' intervals; rung's L2 flush
    /// left out). None when CUPTI is not tracing. The Python worker takes it from a second,
    /// traced call on the next input set (tracing slows a Python call's host side).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_ms: Option<f64>,
    /// From the same records: the first start to the last end, idle gaps included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_ms: Option<f64>,
    /// Host time of the call itself (launch overhead is real cost).
    pub host_ms: f64,
    /// From before the call to the whole device being idle again, as the host saw it: every
    /// stream's work, plus the fixed cost of waiting (`Response::fixed_ms`).
    pub wall_ms: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CeilingKind {
    /// Device-to-device copy: the better of cuMemcpy and a tuned copy kernel.
    Copy,
    /// A large bf16 GEMM through cuBLAS (torch.matmul).
    GemmBf16,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Ceiling {
    pub kind: CeilingKind,
    /// Copy: bytes per buffer. GEMM: the square size (M = N = K).
    pub size: u64,
    /// Timed repetitions (the best is kept).
    pub reps: u32,
}

/// One answer line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Response {
    /// The request's id; absent on the zygote's `WorkerDied` line.
    #[serde(default)]
    pub id: Option<u64>,
    /// A forked child's answers carry its fork's token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    pub ok: bool,
    /// Wall seconds of the call or launch, synchronised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<WorkerError>,
    /// The forked child's pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Where time went, in seconds: `fork`, `cuda_init`, `import`, `compile`, `run`...
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub phases: BTreeMap<String, f64>,
    /// Buffers whose guard zones were written: out-of-bounds writes that did not fault.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guards: Vec<GuardBreach>,
    /// Milliseconds the device kept working after the call's own stream was done: work left
    /// on another stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_ms: Option<f64>,
    /// The `@rung` results of a checks request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rungs: Vec<RungOutcome>,
    /// Triton kernels that really launched during the call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<CapturedKernel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<ProblemOutcome>,
    /// A judge's answer: what it learnt of the problem, for the version's next calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hints: Option<JudgeHints>,
    /// A judge's answer: inputs the problem does not draw the same way twice; the test is run
    /// again with copies of them kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redo: Vec<String>,
    /// A problem bench's write-back: what the version's process saw of its re-check calls, for
    /// the judge ([`Judge::recheck`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observed: Vec<serde_json::Value>,
    /// Timed calls of a bench request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<Sample>,
    /// A write-back's call, on the fresh inputs, timed as a sample is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recheck_sample: Option<Sample>,
    /// The fixed cost in `wall_ms` of waiting for the device (an empty call, median, ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed_ms: Option<f64>,
    /// A series' first request: the input sets the timed calls rotate through (fewer than asked
    /// when one set is past a GiB, far past any L2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_sets: Option<u32>,
    /// Why samples carry no `busy_ms` (CUPTI not found, refused, stopped or off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timer_note: Option<String>,
    /// A bench: the largest carve-out of persisting L2 (cudaLimitPersistingL2CacheSize) the
    /// version had set before a timed call, in bytes; rung set it to zero and reset the
    /// persisting lines before each timed call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_persisting_bytes: Option<u64>,
    /// Measured ceilings by method, in GB/s (copy) or TFLOP/s (GEMM).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ceilings: BTreeMap<String, f64>,
    /// Graph replay: per-call milliseconds, one per replay.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub graph_ms: Vec<f64>,
    /// A problem bench's `write_back`: why the version's output at the benchmark disagrees with
    /// the problem's reference (its own check), when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recheck: Option<String>,
    /// With `recheck`: its reason code (`memoised` when the timed buffers refilled with fresh
    /// values get a wrong answer that new buffers do not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recheck_reason: Option<crate::verdict::Reason>,
    /// A traced launch: how many records the kernel asked to write (past the capacity they
    /// were counted, not written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_requested: Option<u64>,
    /// A traced launch: the capacity that would have held every record (its fullest part's
    /// count times the parts); at most `trace_requested` times the parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_needed: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkerError {
    /// `CUDA_ERROR_ILLEGAL_ADDRESS`, a Python exception's class, `WorkerDied`, `BadRequest`...
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceback: Option<String>,
    /// The line in `file` (the version's, when the traceback passes through it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineno: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
}

impl WorkerError {
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> WorkerError {
        WorkerError { kind: kind.into(), message: message.into(), traceback: None, lineno: None, file: None }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuardBreach {
    /// The parameter's name.
    pub name: String,
    /// Bytes changed in the guard before the buffer and after it.
    pub before: u64,
    pub after: u64,
    /// Offset from the buffer's end of the farthest changed byte after it (or from its start,
    /// negative, before it).
    pub farthest: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RungOutcome {
    pub name: String,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceback: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineno: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CapturedKernel {
    pub name: String,
    /// Triton's hash of the compiled kernel; for a DSL's, the SHA-256 of its cubin and entry
    /// name (a cubin may hold several kernels, each a record of its own).
    pub hash: String,
    /// What compiled it at run time: `cute-dsl` or `tilelang`; absent for Triton.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiler: Option<String>,
    /// Files the worker wrote: what the compiler produced for this launch (a CuTe DSL
    /// kernel has a cubin and no PTX: its runtime module embeds only the cubin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ptx: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cubin: Option<PathBuf>,
    /// The launch's grid, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grid: Option<[u32; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_warps: Option<u32>,
}

/// Any line of the protocol: what the committed schema describes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Message {
    Hello(Hello),
    Request(Request),
    Response(Response),
}

/// The JSON schema of the protocol, as committed in `schema/worker.schema.json`.
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Message)).expect("a schema serialises")
}

/// The guard check after a run: how many bytes of each zone changed, and the farthest.
pub fn guard_breach(name: &str, before_zone: &[u8], after_zone: &[u8]) -> Option<GuardBreach> {
    let changed_before: Vec<usize> =
        before_zone.iter().enumerate().filter(|(_, b)| **b != GUARD_BYTE).map(|(i, _)| i).collect();
    let changed_after: Vec<usize> =
        after_zone.iter().enumerate().filter(|(_, b)| **b != GUARD_BYTE).map(|(i, _)| i).collect();
    if changed_before.is_empty() && changed_after.is_empty() {
        return None;
    }
    let farthest = match changed_after.last() {
        Some(i) => *i as i64 + 1,
        None => -((before_zone.len() - changed_before[0]) as i64),
    };
    Some(GuardBreach {
        name: name.to_string(),
        before: changed_before.len() as u64,
        after: changed_after.len() as u64,
        farthest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_breach_counts_and_places_changed_bytes() {
        let clean = vec![GUARD_BYTE; 16];
        assert_eq!(guard_breach("y", &clean, &clean), None);
        let mut after = clean.clone();
        after[0] = 0;
        after[3] = 1;
        let b = guard_breach("y", &clean, &after).unwrap();
        assert_eq!((b.before, b.after, b.farthest), (0, 2, 4));
        let mut before = clean.clone();
        before[12] = 9;
        let b = guard_breach("x", &before, &clean).unwrap();
        assert_eq!((b.before, b.after, b.farthest), (1, 0, -4));
    }
}
