//! The files rung carries inside its binary: the Python worker and its problem judge, the
//! ahead-of-time compile scripts, and rung's own PTX kernels (the L2 flush and the copy ceiling).
//! They are written out where they run; nothing else is read from the source tree at run time.

/// The Python worker (runners.rs writes it beside the workspace's state).
pub const PYTHON_WORKER: &str = include_str!("../../assets/python/rung_worker.py");
/// GPU MODE and KernelBench problems judged in the Python worker.
pub const PYTHON_PROBLEM: &str = include_str!("../../assets/python/rung_problem.py");
/// Triton's ahead-of-time compile.
pub const TRITON_AOT: &str = include_str!("../../assets/python/triton_aot.py");
/// CuTe DSL's ahead-of-time compile.
pub const CUTE_AOT: &str = include_str!("../../assets/python/cute_aot.py");
/// What the two ahead-of-time scripts share.
pub const AOT_COMMON: &str = include_str!("../../assets/python/aot_common.py");
/// rung's copy and L2 flush kernels (assets/kernels/copy.cu), as PTX.
pub const COPY_PTX: &str = include_str!("../../assets/kernels/copy.ptx");
