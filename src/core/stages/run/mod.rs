//! The run and check rungs (DESIGN.md, stages 2 and 3). rung draws the inputs, poisons the
//! outputs, hashes the inputs before and after, computes the metrics and gives the verdicts; the
//! workers ([`crate::runners`]) only execute.
//!
//! For a rung.toml problem every test size is run twice: first on a decoy input set with the
//! first poison pattern, then on the real input set with the second. An element is unwritten
//! only if it holds the poison both times; an output that does not change when the inputs did
//! and is wrong is a remembered (memoised) result; buffers sit inside guard zones on the GPU, so
//! an out-of-bounds write that did not fault still shows. The second run's outputs are checked
//! against the reference, whose outputs are cached by (the problem's files, seed, size).
//!
//! GPU MODE problem folders and KernelBench files run in the Python worker the way their own
//! harnesses do (see [`run_problem`]); rung judges the outputs with its metrics and reports the
//! problem's own verdict beside its own.

mod checker;
mod formats;
mod judge;
mod judging;
mod probe;

use checker::Checker;
pub use formats::run_problem;
pub use judge::{JudgedTest, compile_phase_verdict, declared_cuda_kernels, declared_kernels, judge_cases};
pub use judging::{JudgeFailed, judge_call};

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::diag::{Diagnostic, Pos};
use crate::model::protocol::{self, CallMode, CapturedKernel};
use crate::model::report::{Reason, Verdict};
pub use crate::model::run::{CheckDetail, OutputCheck, OwnCheck, RunDetail, SizeRun, UserRung};
use crate::runners::{Failure, Runners};
use crate::spec::{SizeSet, Spec};
use crate::stages::StageOutcome;
use crate::toolchain::Toolchain;
use crate::workspace::{Format, VersionFile, VersionKind, Workspace};

/// The decoy input set of the first run is drawn with this added to the seed.
const DECOY: u64 = 0x5DEE_CE66_D1CE_F00D;

/// Milliseconds of device work after run() returned above which rung says so.
const PENDING_WARN_MS: f64 = 1.0;

pub struct RunOutcome {
    pub run: StageOutcome,
    /// Present when the run passed.
    pub check: Option<StageOutcome>,
}

fn skipped(why: impl Into<String>) -> RunOutcome {
    RunOutcome { run: StageOutcome::new(Verdict::Skipped, why), check: None }
}

fn failed(verdict: Verdict, reason: Option<Reason>, why: impl Into<String>) -> RunOutcome {
    RunOutcome { run: StageOutcome { reason, ..StageOutcome::new(verdict, why) }, check: None }
}

fn failure_reason(f: &Failure) -> (Verdict, Option<Reason>) {
    match f {
        Failure::Timeout(_) => (Verdict::Fail, Some(Reason::Timeout)),
        Failure::Died(_) => (Verdict::Fail, Some(Reason::Crashed)),
        Failure::Protocol(_) => (Verdict::Error, None),
        Failure::Forged(_) => (Verdict::Fail, Some(Reason::ForgedReply)),
        Failure::OutOfMemory(_) => (Verdict::Error, None),
    }
}

/// Why a native version cannot be launched at a size.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Value(#[from] crate::expr::ValueError),
    #[error("no value for the kernel parameter `{0}`")]
    NoValue(String),
}

impl LaunchError {
    /// The reason code a failed launch carries: a kernel parameter rung.toml gives no value is
    /// a signature that does not match the problem.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            LaunchError::NoValue(_) => Some(Reason::SignatureMismatch),
            LaunchError::Value(_) => None,
        }
    }
}

/// Why a CUDA reference cannot serve: its file, and what went wrong. Each says which file and
/// what to fix; the run rung fails with `reference-failed` and the bench claims no speedup.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReferenceError {
    #[error("cannot read {}: {message}", path.display())]
    Read { path: std::path::PathBuf, message: String },
    #[error("{}: {message}", path.display())]
    Kind { path: std::path::PathBuf, message: String },
    #[error("the reference {} does not build: {why}", path.display())]
    Build { path: std::path::PathBuf, why: String },
    #[error("{0}")]
    Store(String),
}

/// What a machine offers the run rung.
pub struct RunEnv<'a> {
    pub toolchain: &'a Toolchain,
    /// The GPU's SM count, when there is a GPU.
    pub gpu_sms: Option<u32>,
    /// The GPU's compute capability (90 for sm_90), when there is a GPU.
    pub gpu_arch: Option<u32>,
    /// A CUDA reference's build ([`crate::check::reference_build`]): what it is and its source,
    /// or why it did not build.
    pub reference: Option<Result<(VersionFile, String), ReferenceError>>,
}

/// Runs and checks one version that built.
pub fn run_and_check(
    ws: &Workspace,
    env: &RunEnv,
    runners: &mut Runners,
    v: &VersionFile,
    source: &str,
    seed: u64,
) -> RunOutcome {
    let gpu = env.gpu_sms.is_some();
    let packages = env.toolchain.python.as_ref().map(|p| &p.packages);
    let has = |p: &str| packages.is_some_and(|m| m.contains_key(p));
    if matches!(ws.format, Format::GpuMode | Format::KernelBench) {
        if !has("torch") {
            return skipped(format!(
                "{} problems run with torch, which this Python lacks (install torch into rung's environment)",
                if ws.format == Format::GpuMode { "GPU MODE" } else { "KernelBench" }
            ));
        }
        let mode = if gpu { CallMode::Cuda } else { CallMode::Interpret };
        return run_problem(ws, env.toolchain, runners, v, seed, mode);
    }
    let Some(spec) = ws.spec.as_ref() else {
        return skipped("the workspace has no rung.toml");
    };
    let native = match v.kind {
        VersionKind::Ptx if crate::launch::find_signatures(&crate::launch::ptx_launch_source(source)).0.is_empty() => {
            return skipped("this PTX declares no C signature (see the prepare warning), so it is not run");
        }
        VersionKind::Cuda | VersionKind::CudaHost | VersionKind::Ptx => {
            match NativePlan::new(ws, spec, v, source, env.gpu_sms) {
                Ok(p) if gpu => Some(p),
                Ok(_) => return skipped("no GPU: run and check skipped (build, PTX/SASS and diffs work)"),
                Err(d) => {
                    let why = d.message.clone();
                    let mut out = failed(Verdict::Fail, Some(Reason::SignatureMismatch), why);
                    out.run.diagnostics.push(d);
                    return out;
                }
            }
        }
        VersionKind::Triton if !gpu || !has("torch") => None,
        _ if !gpu => return skipped(format!("no GPU: {} versions run only on a GPU", v.kind)),
        _ => None,
    };
    let Some(reference) = ws.reference.clone() else {
        return skipped("no reference to check against (the workspace's error says why): run and check skipped");
    };
    // Sizes that cannot be held here are an error that names them, not an allocation that aborts.
    let available = crate::gpu::available_memory();
    if let Some(why) = spec.test_sizes.iter().find_map(|s| spec.too_big(s, available)) {
        let mut out = failed(Verdict::Error, None, format!("{why}: lower [sizes] in rung.toml"));
        out.run.diagnostics.push(
            Diagnostic::error(crate::spec::FILE_NAME, Pos::WHOLE_FILE, why)
                .with_help("lower the test sizes in [sizes]: a check draws every tensor twice, on the CPU"),
        );
        return out;
    }
    // A CUDA reference runs through the native worker, like a CUDA version.
    let ref_plan = if reference.extension().is_some_and(|e| e == "py") {
        None
    } else if !gpu {
        return skipped(format!("no GPU: the CUDA reference {} runs only on a GPU", reference.display()));
    } else {
        match &env.reference {
            Some(Ok((rv, rsource))) => match NativePlan::new(ws, spec, rv, rsource, env.gpu_sms) {
                Ok(p) => Some(p),
                Err(d) => {
                    let why = format!("the reference cannot be launched: {}: {}", d.location(), d.message);
                    let mut out = failed(Verdict::Error, Some(Reason::ReferenceFailed), why);
                    out.run.diagnostics.push(d);
                    return out;
                }
            },
            Some(Err(why)) => return failed(Verdict::Error, Some(Reason::ReferenceFailed), why.to_string()),
            None => return skipped(format!("the reference {} was not built", reference.display())),
        }
    };
    // Python runs the version, the Python reference or the user's checks.py; a CUDA version
    // against a CUDA reference needs none of it. The reference and checks.py run in a process
    // of their own ([`Runners::reference`]), so only a Python version needs a child forked for
    // it: a CUDA version's check forks none (that fork, and the zygote's start with torch, were
    // most of a CUDA version's run rung on a GPU).
    let python = native.is_none() || ref_plan.is_none() || ws.checks.is_some();
    let forks_child = native.is_none();
    let needs = if native.is_some() || (gpu && has("torch")) { "numpy" } else { "triton" };
    let mut missing: Vec<&str> = [needs, "numpy"].into_iter().filter(|m| !has(m)).collect();
    missing.dedup();
    if python && !missing.is_empty() {
        let what = if ref_plan.is_none() { "the Python reference" } else { "this version and checks.py" };
        let verb = if missing.len() > 1 { "are" } else { "is" };
        return skipped(format!(
            "{} {verb} needed to run {what} and not installed: run `rung setup`",
            missing.join(" and ")
        ));
    }
    let mode = if native.is_some() {
        CallMode::Reference
    } else if gpu && has("torch") {
        CallMode::Cuda
    } else {
        CallMode::Interpret
    };
    let mut c = Checker {
        ws,
        spec,
        toolchain: env.toolchain,
        runners,
        native,
        ref_plan,
        forks_child,
        mode,
        seed,
        phases: BTreeMap::new(),
        launched: vec![],
        gpu_arch: env.gpu_arch,
    };
    let out = c.run_version(v, source, &reference);
    c.runners.end_children();
    out
}

/// Where a rung.toml problem's reference outputs at `sizes` are kept: keyed by the problem's
/// files (`problem`, [`Workspace::problem_hash`]), the seed and the sizes.
pub fn reference_cache(ws: &Workspace, problem: &str, seed: u64, sizes: &SizeSet) -> PathBuf {
    let key = crate::store::sha256_hex(format!("{problem}\n{seed}\n{sizes:?}").as_bytes());
    ws.state_dir().join("cache").join("reference").join(&key[..16])
}

/// Whether the reference's outputs at every test size of a rung.toml problem are kept for this
/// seed: a check of a version after this moment reads them and never writes them.
pub fn reference_kept(ws: &Workspace, seed: u64) -> bool {
    let Some(spec) = ws.spec.as_ref() else { return false };
    let problem = ws.problem_hash();
    spec.test_sizes.iter().all(|sizes| {
        let dir = reference_cache(ws, &problem, seed, sizes);
        spec.outputs.iter().all(|t| dir.join(format!("{}.bin", t.name)).is_file())
    })
}

/// How to launch a CUDA version: its cubin, kernel, parameters in order and launch at each size;
/// or, for a `rung_run` version, its shared object, whose host entry takes the same parameters.
pub struct NativePlan {
    /// The build's cubin (in `.rung/dumps/<id>/`), which may not exist yet.
    pub cubin: PathBuf,
    kernel: String,
    params: Vec<crate::launch::Param>,
    /// `None` for a host entry, which launches its own kernels.
    launch: Option<crate::launch::Launch>,
    /// A `rung_run` version's shared object (in `.rung/dumps/<id>/`).
    library: Option<PathBuf>,
    num_sms: i64,
}

impl NativePlan {
    pub fn new(
        ws: &Workspace,
        spec: &Spec,
        v: &VersionFile,
        source: &str,
        sms: Option<u32>,
    ) -> Result<NativePlan, Diagnostic> {
        let file = v.path.as_path();
        // A PTX version's launch and signature are in its comments.
        let ptx_launch;
        let source = if v.kind == VersionKind::Ptx {
            ptx_launch = crate::launch::ptx_launch_source(source);
            ptx_launch.as_str()
        } else {
            source
        };
        let header = crate::launch::parse_header(source, file, spec).map_err(|mut d| d.remove(0))?;
        let (sigs, _) = crate::launch::find_signatures(source);
        let wanted = header.kernel.clone().or_else(|| spec.launch.kernel.clone());
        let sig = crate::launch::choose(&sigs, wanted.as_deref(), file)?.clone();
        let host = sig.host_entry;
        let launch = if host { None } else { Some(crate::launch::merge(&header, spec, file)?) };
        let dumps = ws.state_dir().join(crate::store::DUMPS_DIR).join(&v.id);
        let cubin = dumps.join(format!("{}.cubin", v.id));
        let library = host.then(|| dumps.join(format!("lib{}.so", v.id)));
        // The PTX entry must take what the signature declares, or the launch would misread memory.
        if !host && let Ok(ptx) = std::fs::read_to_string(dumps.join(format!("{}.ptx", v.id))) {
            let n = ptx_param_count(&ptx, &sig.name);
            if let Some(n) = n.filter(|n| *n != sig.params.len()) {
                return Err(Diagnostic::error(
                    file,
                    Pos::new(sig.line, sig.column),
                    format!(
                        "the PTX entry `{}` takes {n} parameters but the signature rung read declares {}",
                        sig.name,
                        sig.params.len()
                    ),
                )
                .with_help("declare the kernel's parameters on its extern \"C\" line so rung can read them"));
            }
        }
        Ok(NativePlan {
            cubin,
            kernel: sig.name.clone(),
            params: sig.params,
            launch,
            library,
            num_sms: sms.unwrap_or(132) as i64,
        })
    }
}

impl NativePlan {
    /// [`NativePlan::launch_at`] for the bench, which needs only the message on failure.
    pub fn launcher<'a>(
        &'a self,
        spec: &'a Spec,
    ) -> impl Fn(&SizeSet, &crate::stages::Files) -> Result<protocol::Launch, LaunchError> + 'a {
        move |sizes, files| self.launch_at(spec, sizes, files)
    }

    /// The launch at one size with the buffers in `files` (parameter name → file, shape).
    pub fn launch_at(
        &self,
        spec: &Spec,
        sizes: &SizeSet,
        files: &BTreeMap<String, (PathBuf, Vec<i64>)>,
    ) -> Result<protocol::Launch, LaunchError> {
        let dims = match &self.launch {
            Some(l) => l.eval(spec, sizes, self.num_sms)?,
            None => crate::launch::LaunchDims { grid: [1, 1, 1], block: [1, 1, 1], smem_bytes: 0, cluster: None },
        };
        let mut params = Vec::new();
        for p in &self.params {
            let param = if let Some((path, _)) = files.get(&p.name).filter(|_| p.pointer) {
                protocol::LaunchParam::Buffer { name: p.name.clone(), path: path.clone() }
            } else {
                let value = spec
                    .value_of(&p.name, sizes, Some(self.num_sms))
                    .ok()
                    .flatten()
                    .ok_or_else(|| LaunchError::NoValue(p.name.clone()))?;
                protocol::LaunchParam::Scalar { name: p.name.clone(), ctype: p.base.clone(), value: value.as_f64() }
            };
            params.push(param);
        }
        Ok(protocol::Launch {
            cubin: self.cubin.clone(),
            kernel: self.kernel.clone(),
            grid: dims.grid,
            block: dims.block,
            smem: dims.smem_bytes,
            cluster: dims.cluster,
            params,
            guard_bytes: protocol::GUARD_BYTES,
            library: self.library.clone(),
            trace: None,
        })
    }
}

/// The number of `.param` entries of a PTX `.entry`.
pub fn ptx_param_count(ptx: &str, entry: &str) -> Option<usize> {
    let start = ptx.find(&format!(".entry {entry}("))?;
    let rest = &ptx[start..];
    let end = rest.find(')')?;
    Some(rest[..end].matches(".param").count())
}

/// The kernels that really launched replace the version's ahead-of-time PTX, cubin and SASS in
/// `.rung/dumps/<version>/` (so diffs and the TUI show what ran); the records point at them.
/// Their files are stored by hash and linked, as a build's are, and each cubin's SASS is made on
/// the builds' listing pool ([`crate::stages::build::sass`]), so the check's result does not wait
/// for it and a reader never sees a listing half written.
fn keep_launched(
    ws: &Workspace,
    tool: Option<crate::stages::build::sass::Disassembler>,
    v: &VersionFile,
    kernels: Vec<CapturedKernel>,
) -> Vec<CapturedKernel> {
    use crate::stages::build::sass;
    if kernels.is_empty() {
        return kernels;
    }
    let state = ws.state_dir();
    let dir = state.join(crate::store::DUMPS_DIR).join(&v.id);
    // What ran replaces the build's listings; a listing the capture has none of (a CuTe DSL
    // kernel brings no PTX) stays the ahead-of-time build's, of the same source and arch.
    let has_ptx = kernels.iter().any(|k| k.ptx.is_some());
    let has_cubin = kernels.iter().any(|k| k.cubin.is_some());
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let p = entry.path();
        let replaced =
            p.extension().is_some_and(|e| (e == "ptx" && has_ptx) || ((e == "cubin" || e == "sass") && has_cubin));
        if replaced {
            let _ = std::fs::remove_file(&p);
        }
    }
    let objects = crate::store::Objects::new(&state);
    let timeout = ws.build_limit();
    let mut seen = std::collections::BTreeSet::new();
    kernels
        .into_iter()
        .map(|mut k| {
            let stem = if seen.insert(k.name.clone()) {
                k.name.clone()
            } else {
                format!("{}-{}", k.name, &k.hash[..k.hash.len().min(12)])
            };
            let mut cubin_hash = None;
            for (f, ext) in [(&mut k.ptx, "ptx"), (&mut k.cubin, "cubin")] {
                let Some(src) = f.take() else { continue };
                let name = format!("{stem}.{ext}");
                let kept = std::fs::read(&src).and_then(|bytes| objects.put(&bytes)).and_then(|hash| {
                    let link = objects.link_dump(&state, &v.id, &name, &hash)?;
                    Ok((link, hash))
                });
                if let Ok((link, hash)) = kept {
                    *f = Some(link.strip_prefix(&ws.root).unwrap_or(&link).to_path_buf());
                    if ext == "cubin" {
                        cubin_hash = Some((name, hash));
                    }
                }
            }
            if let (Some((cubin, hash)), Some(tool)) = (cubin_hash, &tool) {
                sass::later(sass::Job {
                    root: ws.root.clone(),
                    state: state.clone(),
                    id: v.id.clone(),
                    cubin,
                    hash,
                    cache_key: None,
                    tool: tool.clone(),
                    timeout,
                });
            }
            k
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The kernels that launched replace the build's files, stored and linked, and their SASS
    /// lands through the listing pool; a second kernel of the same name keeps its own files.
    #[test]
    fn launched_kernels_replace_the_builds_dumps_and_their_sass_follows() {
        use crate::stages::build::sass::{self, Disassembler};
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspace::broken(tmp.path(), vec![]);
        let v = VersionFile { id: "v004".into(), path: "versions/v004-triton.py".into(), kind: VersionKind::Triton };
        let dumps = ws.state_dir().join(crate::store::DUMPS_DIR).join("v004");
        std::fs::create_dir_all(&dumps).unwrap();
        for old in ["add.ptx", "add.cubin", "add.sass"] {
            std::fs::write(dumps.join(old), "ahead of time").unwrap();
        }
        let worker = tmp.path().join("worker");
        std::fs::create_dir_all(&worker).unwrap();
        let tool = tmp.path().join("disasm");
        std::fs::write(&tool, "#!/bin/sh\nsleep 0.2\nfor a; do last=$a; done\necho \"listing of $(cat \"$last\")\"\n")
            .unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let captured = |hash: &str| {
            for ext in ["ptx", "cubin"] {
                std::fs::write(worker.join(format!("{hash}.{ext}")), format!("{ext} {hash}")).unwrap();
            }
            CapturedKernel {
                name: "add".into(),
                hash: hash.into(),
                compiler: None,
                ptx: Some(worker.join(format!("{hash}.ptx"))),
                cubin: Some(worker.join(format!("{hash}.cubin"))),
                grid: None,
                num_warps: None,
            }
        };
        let tool = Some(Disassembler { path: tool, nvdisasm: true });
        let kept = keep_launched(&ws, tool, &v, vec![captured("aaaaaaaaaaaaaaaa"), captured("bbbbbbbbbbbbbbbb")]);
        let rel = ".rung/dumps/v004";
        assert_eq!(kept[0].cubin.as_deref(), Some(Path::new(&format!("{rel}/add.cubin"))));
        assert_eq!(kept[1].ptx.as_deref(), Some(Path::new(&format!("{rel}/add-bbbbbbbbbbbb.ptx"))));
        assert_eq!(std::fs::read_to_string(dumps.join("add.ptx")).unwrap(), "ptx aaaaaaaaaaaaaaaa");
        assert!(std::fs::read_link(dumps.join("add.cubin")).unwrap().starts_with("../../objects"));
        // The build's listing is gone at once; the launched kernels' follow.
        assert!(!dumps.join("add.sass").exists());
        assert!(sass::pending(&ws.state_dir(), "v004"));
        assert!(sass::wait(&ws.state_dir(), "v004", std::time::Duration::from_secs(20)));
        assert_eq!(std::fs::read_to_string(dumps.join("add.sass")).unwrap(), "listing of cubin aaaaaaaaaaaaaaaa\n");
        assert_eq!(
            std::fs::read_to_string(dumps.join("add-bbbbbbbbbbbb.sass")).unwrap(),
            "listing of cubin bbbbbbbbbbbbbbbb\n"
        );
    }
}
