//! The run and check rungs (DESIGN.md, stages 2 and 3), for what can run here today: Triton
//! versions of rung.toml problems in Triton's interpreter on the CPU, against a Python
//! reference. rung draws the inputs, poisons the outputs twice, hashes the inputs before and
//! after, computes the metrics and gives the verdicts; the Python worker only calls functions on
//! buffers rung wrote to files and the worker memory-maps.
//!
//! CUDA versions, and Python versions on the GPU, need the native and zygote workers; until then
//! their run says so plainly and no number is invented.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::diag::{Diagnostic, Pos};
use crate::inputs::{self, POISON};
use crate::metrics::{self, Comparison};
use crate::report::{StageDetail, Verdict};
use crate::spec::{SizeSet, Spec};
use crate::store::sha256_hex;
use crate::toolchain::Toolchain;
use crate::workspace::{Format, VersionFile, VersionKind, Workspace};

const WORKER: &str = include_str!("../../assets/python/rung_worker.py");

/// How long the worker may take to start (imports included).
const START_LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunDetail {
    /// `triton-interpreter` (on the CPU).
    pub mode: String,
    pub sizes: Vec<SizeRun>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SizeRun {
    pub sizes: SizeSet,
    /// Wall time of the second run, in the worker.
    pub seconds: f64,
    /// Output → number of elements left unwritten (poison in both runs).
    pub unwritten: BTreeMap<String, usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckDetail {
    pub seed: u64,
    pub results: Vec<OutputCheck>,
    /// The `@rung("name")` functions of the workspace's checks.py, per test size.
    pub user_rungs: Vec<UserRung>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UserRung {
    pub sizes: SizeSet,
    pub name: String,
    pub pass: bool,
    /// The assertion's message, when it failed.
    pub error: Option<String>,
    pub traceback: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OutputCheck {
    pub sizes: SizeSet,
    pub output: String,
    pub pass: bool,
    /// Why it failed, in words.
    pub reason: Option<String>,
    pub comparison: Comparison,
}

pub struct RunOutcome {
    pub run: (Verdict, String, Vec<Diagnostic>, StageDetail),
    /// Present when the run passed.
    pub check: Option<(Verdict, String, Vec<Diagnostic>, StageDetail)>,
}

fn skipped(why: impl Into<String>) -> RunOutcome {
    RunOutcome { run: (Verdict::Skipped, why.into(), vec![], StageDetail::None), check: None }
}

/// Runs and checks one version that built.
pub fn run_and_check(
    ws: &Workspace,
    tc: &Toolchain,
    gpu_sms: Option<u32>,
    v: &VersionFile,
    source: &str,
    seed: u64,
) -> RunOutcome {
    let gpu = gpu_sms.is_some();
    let (Format::Rung, Some(spec)) = (ws.format, ws.spec.as_ref()) else {
        return skipped("GPU MODE and KernelBench problems run in the Python worker on a GPU, which is not built yet");
    };
    let native = match v.kind {
        VersionKind::Triton => None,
        VersionKind::Cuda | VersionKind::CudaHost | VersionKind::Ptx if !gpu => {
            return skipped("no GPU: run and check skipped (build, PTX/SASS and diffs work)");
        }
        VersionKind::Cuda => match NativePlan::new(ws, spec, v, source, gpu_sms) {
            Ok(p) => Some(p),
            Err(d) => {
                let why = d.message.clone();
                return RunOutcome { run: (Verdict::Fail, why, vec![d], StageDetail::None), check: None };
            }
        },
        VersionKind::CudaHost | VersionKind::Ptx => {
            return skipped(format!("running {} versions is not built yet (plain .cu kernels run)", v.kind));
        }
        _ if !gpu => return skipped(format!("no GPU: {} versions run only on a GPU", v.kind)),
        _ => return skipped(format!("running {} versions on the GPU is not built yet", v.kind)),
    };
    let Some(reference) = ws.reference.clone().filter(|r| r.extension().is_some_and(|e| e == "py")) else {
        return skipped("the reference is not a reference.py: a CUDA reference is not run yet");
    };
    let needs = if native.is_some() { "numpy" } else { "triton" };
    let Some(python) =
        tc.python.as_ref().filter(|p| p.packages.contains_key(needs) && p.packages.contains_key("numpy"))
    else {
        return skipped(format!("{needs} and numpy are needed to run the Python reference: run `rung setup`"));
    };
    // With a GPU and torch, Python versions run for real; without, in Triton's interpreter.
    let python_gpu = gpu && native.is_none() && python.packages.contains_key("torch");
    match Checker::new(ws, spec, &python.path, seed, native, python_gpu) {
        Ok(mut c) => {
            let out = c.run_version(v, source, &reference);
            c.finish();
            out
        }
        Err(e) => RunOutcome { run: (Verdict::Error, e, vec![], StageDetail::None), check: None },
    }
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Worker {
    fn start_python(ws: &Workspace, python: &Path, script: &Path, on_gpu: bool) -> Result<Worker, String> {
        let mut cmd = Command::new(python);
        cmd.arg(script).arg(if on_gpu { "--cuda" } else { "--interpret" });
        if on_gpu {
            cmd.env_remove("TRITON_INTERPRET");
        } else {
            cmd.env("TRITON_INTERPRET", "1");
        }
        Self::start(ws, cmd)
    }

    /// This binary as `rung worker`: the native worker.
    fn start_native(ws: &Workspace) -> Result<Worker, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find rung itself: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.arg("worker");
        Self::start(ws, cmd)
    }

    fn start(ws: &Workspace, mut cmd: Command) -> Result<Worker, String> {
        let what = cmd.get_program().to_string_lossy().into_owned();
        let mut child = cmd
            .current_dir(&ws.root)
            .env("TRITON_CACHE_DIR", ws.state_dir().join("triton-cache"))
            .env("TRITON_DEFAULT_FP_FUSION", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start the worker ({what}): {e}"))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut w = Worker { child, stdin, lines };
        let hello = w.read(START_LIMIT).map_err(|e| format!("the Python worker did not start: {e}"))?;
        let hello: serde_json::Value =
            serde_json::from_str(&hello).map_err(|e| format!("bad handshake from the worker: {e}"))?;
        if hello["protocol"] != 1 {
            return Err(format!("the worker speaks protocol {}, rung speaks 1", hello["protocol"]));
        }
        if let Some(e) = hello.get("error").filter(|e| !e.is_null()) {
            return Err(format!("the worker cannot run: {e}"));
        }
        Ok(w)
    }

    fn read(&mut self, limit: Duration) -> Result<String, String> {
        self.lines.recv_timeout(limit).map_err(|e| match e {
            std::sync::mpsc::RecvTimeoutError::Timeout => {
                format!("no answer within {:.0} s (limits.run in rung.toml)", limit.as_secs_f64())
            }
            std::sync::mpsc::RecvTimeoutError::Disconnected => {
                let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                format!("the worker died ({status})")
            }
        })
    }

    /// One request; on a time-out or a crash the worker is killed and the error returned.
    fn call(&mut self, req: &serde_json::Value, limit: Duration) -> Result<serde_json::Value, String> {
        let line = format!("{req}\n");
        if self.stdin.write_all(line.as_bytes()).and_then(|_| self.stdin.flush()).is_err() {
            return Err("the worker is gone".into());
        }
        match self.read(limit) {
            Ok(resp) => serde_json::from_str(&resp).map_err(|e| format!("bad answer from the worker: {e}")),
            Err(e) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                Err(e)
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.stdin.write_all(b"{\"op\": \"exit\"}\n");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Checker<'a> {
    ws: &'a Workspace,
    spec: &'a Spec,
    /// The Python worker: the reference, and Triton versions in the interpreter.
    worker: Worker,
    /// For CUDA versions: the native worker and what to launch.
    native: Option<(Worker, NativePlan)>,
    /// Python versions run on the GPU with torch tensors (else in Triton's interpreter).
    python_gpu: bool,
    dir: PathBuf,
    seed: u64,
}

/// How to launch a CUDA version: its cubin, kernel, parameters in order and launch at each size.
struct NativePlan {
    cubin: PathBuf,
    kernel: String,
    params: Vec<crate::launch::Param>,
    launch: crate::launch::Launch,
    num_sms: i64,
}

impl NativePlan {
    fn new(
        ws: &Workspace,
        spec: &Spec,
        v: &VersionFile,
        source: &str,
        sms: Option<u32>,
    ) -> Result<NativePlan, Diagnostic> {
        let file = v.path.as_path();
        let header = crate::launch::parse_header(source, file, spec).map_err(|mut d| d.remove(0))?;
        let (sigs, _) = crate::launch::find_signatures(source);
        let wanted = header.kernel.clone().or_else(|| spec.launch.kernel.clone());
        let sig = crate::launch::choose(&sigs, wanted.as_deref(), file)?.clone();
        let launch = crate::launch::merge(&header, spec, file)?;
        let dumps = ws.state_dir().join(crate::store::DUMPS_DIR).join(&v.id);
        let cubin = dumps.join(format!("{}.cubin", v.id));
        // The PTX entry must take what the signature declares, or the launch would misread memory.
        if let Ok(ptx) = std::fs::read_to_string(dumps.join(format!("{}.ptx", v.id))) {
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
            num_sms: sms.unwrap_or(132) as i64,
        })
    }
}

/// The number of `.param` entries of a PTX `.entry`.
fn ptx_param_count(ptx: &str, entry: &str) -> Option<usize> {
    let start = ptx.find(&format!(".entry {entry}("))?;
    let rest = &ptx[start..];
    let end = rest.find(')')?;
    Some(rest[..end].matches(".param").count())
}

/// Bulk data goes through files in shared memory when the system has it.
fn data_dir() -> PathBuf {
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() { base.to_path_buf() } else { std::env::temp_dir() };
    base.join(format!("rung-{}-{}", std::process::id(), crate::store::now_ms()))
}

impl<'a> Checker<'a> {
    fn new(
        ws: &'a Workspace,
        spec: &'a Spec,
        python: &Path,
        seed: u64,
        native: Option<NativePlan>,
        python_gpu: bool,
    ) -> Result<Self, String> {
        let dir = data_dir();
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let script = dir.join("rung_worker.py");
        std::fs::write(&script, WORKER).map_err(|e| format!("{}: {e}", script.display()))?;
        let worker = Worker::start_python(ws, python, &script, python_gpu)?;
        let native = match native {
            Some(plan) => Some((Worker::start_native(ws)?, plan)),
            None => None,
        };
        Ok(Checker { ws, spec, worker, native, python_gpu, dir, seed })
    }

    /// One run of the version at `sizes`: the kernel through the native worker, or run() in the
    /// interpreter. Returns the worker's answer.
    fn call_run(
        &mut self,
        v: &VersionFile,
        id: usize,
        params: &[String],
        sizes: &SizeSet,
        files: &BTreeMap<String, (PathBuf, Vec<i64>)>,
    ) -> Result<serde_json::Value, String> {
        let limit = self.spec.limits.run;
        let Some((worker, plan)) = self.native.as_mut() else {
            let mode = if self.python_gpu { "cuda" } else { "interpret" };
            let req = serde_json::json!({ "id": id, "op": "call", "file": v.path, "function": "run", "mode": mode, "args": self.args(params, sizes, files)? });
            return self.worker.call(&req, limit);
        };
        let dims = plan.launch.eval(self.spec, sizes, plan.num_sms)?;
        let mut args = Vec::new();
        for p in &plan.params {
            let arg = if let Some((path, _)) = files.get(&p.name).filter(|_| p.pointer) {
                serde_json::json!({ "buffer": path })
            } else {
                let value = self
                    .spec
                    .value_of(&p.name, sizes, Some(plan.num_sms))?
                    .ok_or_else(|| format!("no value for `{}`", p.name))?;
                serde_json::json!({ "scalar": { "ctype": p.base, "value": value.as_f64() } })
            };
            args.push(arg);
        }
        let req = serde_json::json!({
            "id": id, "op": "launch", "cubin": plan.cubin, "kernel": plan.kernel,
            "grid": dims.grid, "block": dims.block, "smem": dims.smem_bytes, "params": args,
        });
        let resp = worker.call(&req, limit);
        // A CUDA error ends the native worker: start a fresh one for what follows.
        if resp.as_ref().map_or(true, |r| r["ok"] == false)
            && let Ok(w) = Worker::start_native(self.ws)
        {
            *worker = w;
        }
        resp
    }

    fn finish(self) {
        let dir = self.dir.clone();
        drop(self);
        let _ = std::fs::remove_dir_all(dir);
    }

    fn tensor_arg(path: &Path, dtype: crate::dtype::DType, shape: &[i64]) -> serde_json::Value {
        serde_json::json!({ "path": path, "dtype": dtype.name(), "shape": shape })
    }

    /// The run() / reference() arguments at one size: tensors by file, scalars and sizes by value.
    fn args(
        &self,
        params: &[String],
        sizes: &SizeSet,
        files: &BTreeMap<String, (PathBuf, Vec<i64>)>,
    ) -> Result<serde_json::Value, String> {
        call_args(self.spec, params, sizes, |t, _| {
            let (path, shape) = &files[&t.name];
            Self::tensor_arg(path, t.dtype, shape)
        })
    }

    fn run_version(&mut self, v: &VersionFile, source: &str, reference: &Path) -> RunOutcome {
        let limit = self.spec.limits.run;
        let params: Vec<String> = crate::stages::prepare::python_def_params(source, "run")
            .map(|(p, _)| p.into_iter().map(|(n, _)| n).collect())
            .unwrap_or_default();
        let ref_source = std::fs::read_to_string(self.ws.root.join(reference)).unwrap_or_default();
        let ref_params: Vec<String> = crate::stages::prepare::python_def_params(&ref_source, "reference")
            .map(|(p, _)| p.into_iter().map(|(n, _)| n).collect())
            .unwrap_or_else(|| self.spec.inputs.iter().map(|t| t.name.clone()).collect());
        let mut runs = Vec::new();
        let mut checks = Vec::new();
        let mut user_rungs = Vec::new();
        let mut run_diags = Vec::new();
        let mut run_fail: Option<String> = None;
        let mut check_fail: Option<String> = None;

        for (si, sizes) in self.spec.test_sizes.iter().enumerate() {
            let size_dir = self.dir.join(format!("s{si}"));
            let _ = std::fs::create_dir_all(&size_dir);
            let mut files: BTreeMap<String, (PathBuf, Vec<i64>)> = BTreeMap::new();
            let mut hashes = BTreeMap::new();
            for (idx, t) in self.spec.inputs.iter().enumerate() {
                let shape = self.spec.shape_at(t, sizes).unwrap_or_default();
                let numel: i64 = shape.iter().product();
                let bytes = inputs::generate(t.dtype, &t.init, self.seed, idx as u64, numel as usize);
                let path = size_dir.join(format!("{}.bin", t.name));
                if let Err(e) = std::fs::write(&path, &bytes) {
                    return RunOutcome {
                        run: (Verdict::Error, format!("{}: {e}", path.display()), vec![], StageDetail::None),
                        check: None,
                    };
                }
                hashes.insert(t.name.clone(), sha256_hex(&bytes));
                files.insert(t.name.clone(), (path, shape));
            }
            let mut out_bytes: BTreeMap<String, [Vec<u8>; 2]> = BTreeMap::new();
            let mut seconds = 0.0;
            for (pass, poison) in POISON.into_iter().enumerate() {
                for t in &self.spec.outputs {
                    let shape = self.spec.shape_at(t, sizes).unwrap_or_default();
                    let len = shape.iter().product::<i64>() as usize * t.dtype.size_bytes();
                    let path = size_dir.join(format!("{}.bin", t.name));
                    let _ = std::fs::write(&path, vec![poison; len]);
                    files.insert(t.name.clone(), (path, shape));
                }
                match self.call_run(v, pass, &params, sizes, &files) {
                    Ok(resp) if resp["ok"] == true => seconds = resp["seconds"].as_f64().unwrap_or(0.0),
                    Ok(resp) => {
                        let e = &resp["error"];
                        let line = e["lineno"].as_u64().unwrap_or(0) as u32;
                        let msg = format!(
                            "{}: {}",
                            e["type"].as_str().unwrap_or("error"),
                            e["message"].as_str().unwrap_or("")
                        );
                        let mut d = Diagnostic::error(&v.path, Pos::new(line, 0), msg.clone());
                        d.tool_text = e["traceback"].as_str().map(str::to_string);
                        run_diags.push(d);
                        run_fail = Some(format!("{msg} (at {})", crate::spec::size_label(sizes)));
                        break;
                    }
                    Err(e) => {
                        run_fail = Some(format!("{e} (at {})", crate::spec::size_label(sizes)));
                        break;
                    }
                }
                for t in &self.spec.outputs {
                    let bytes = std::fs::read(&files[&t.name].0).unwrap_or_default();
                    out_bytes.entry(t.name.clone()).or_insert_with(|| [Vec::new(), Vec::new()])[pass] = bytes;
                }
            }
            if run_fail.is_some() {
                break;
            }
            for t in &self.spec.inputs {
                let after = std::fs::read(&files[&t.name].0).map(|b| sha256_hex(&b)).unwrap_or_default();
                if after != hashes[&t.name] {
                    run_fail = Some(format!(
                        "the kernel changed its input `{}` (at {})",
                        t.name,
                        crate::spec::size_label(sizes)
                    ));
                }
            }
            let mut unwritten = BTreeMap::new();
            for t in &self.spec.outputs {
                let [a, b] = &out_bytes[&t.name];
                let missing = inputs::unwritten(a, b, t.dtype.size_bytes());
                if !missing.is_empty() && run_fail.is_none() {
                    let shape: Vec<usize> = files[&t.name].1.iter().map(|d| *d as usize).collect();
                    run_fail = Some(format!(
                        "{} of {} elements of `{}` were never written (first at {:?}, at {})",
                        missing.len(),
                        a.len() / t.dtype.size_bytes(),
                        t.name,
                        crate::metrics::unravel(missing[0], &shape),
                        crate::spec::size_label(sizes)
                    ));
                }
                unwritten.insert(t.name.clone(), missing.len());
            }
            runs.push(SizeRun { sizes: sizes.clone(), seconds, unwritten });
            if run_fail.is_some() {
                break;
            }
            // The reference, cached by (reference source, seed, size).
            let key = sha256_hex(format!("{ref_source}\n{}\n{sizes:?}", self.seed).as_bytes());
            let cache = self.ws.state_dir().join("cache").join("reference").join(&key[..16]);
            let _ = std::fs::create_dir_all(&cache);
            let mut returns = serde_json::Map::new();
            for t in &self.spec.outputs {
                let shape = self.spec.shape_at(t, sizes).unwrap_or_default();
                returns
                    .insert(t.name.clone(), Self::tensor_arg(&cache.join(format!("{}.bin", t.name)), t.dtype, &shape));
            }
            let cached = self.spec.outputs.iter().all(|t| cache.join(format!("{}.bin", t.name)).is_file());
            if !cached {
                let args = match self.args(&ref_params, sizes, &files) {
                    Ok(a) => a,
                    Err(e) => {
                        check_fail = Some(format!("the reference's arguments: {e}"));
                        break;
                    }
                };
                let req = serde_json::json!({ "id": 9, "op": "call", "file": reference, "function": "reference", "mode": "reference", "args": args, "returns": returns });
                match self.worker.call(&req, limit) {
                    Ok(resp) if resp["ok"] == true => {}
                    Ok(resp) => {
                        let e = &resp["error"];
                        check_fail = Some(format!(
                            "the reference failed: {}: {}",
                            e["type"].as_str().unwrap_or(""),
                            e["message"].as_str().unwrap_or("")
                        ));
                        let _ = std::fs::remove_dir_all(&cache);
                        break;
                    }
                    Err(e) => {
                        check_fail = Some(format!("the reference failed: {e}"));
                        let _ = std::fs::remove_dir_all(&cache);
                        break;
                    }
                }
            }
            for t in &self.spec.outputs {
                let shape: Vec<usize> = files[&t.name].1.iter().map(|d| *d as usize).collect();
                let reference =
                    inputs::to_f64(t.dtype, &std::fs::read(cache.join(format!("{}.bin", t.name))).unwrap_or_default());
                let output = inputs::to_f64(t.dtype, &out_bytes[&t.name][1]);
                if reference.len() != output.len() {
                    check_fail =
                        Some(format!("the cached reference for `{}` has the wrong size; delete .rung/cache", t.name));
                    continue;
                }
                let comparison = metrics::compare(&output, &reference, &shape, &t.tolerance);
                let reason = metrics::judge(&comparison, &t.tolerance);
                if let (Some(r), None) = (&reason, &check_fail) {
                    check_fail = Some(format!("`{}` at {}: {r}", t.name, crate::spec::size_label(sizes)));
                }
                checks.push(OutputCheck {
                    sizes: sizes.clone(),
                    output: t.name.clone(),
                    pass: reason.is_none(),
                    reason,
                    comparison,
                });
            }
            // The user's own rungs (checks.py), on this size's inputs and the version's outputs.
            if let Some(checks_py) = self.ws.checks.clone() {
                let tensors = |ts: &[crate::spec::TensorSpec]| -> serde_json::Value {
                    ts.iter()
                        .map(|t| {
                            let (path, shape) = &files[&t.name];
                            (t.name.clone(), Self::tensor_arg(path, t.dtype, shape))
                        })
                        .collect::<serde_json::Map<_, _>>()
                        .into()
                };
                let req = serde_json::json!({ "id": 10, "op": "checks", "file": checks_py, "sizes": sizes,
                    "inputs": tensors(&self.spec.inputs), "outputs": tensors(&self.spec.outputs) });
                match self.worker.call(&req, limit) {
                    Ok(resp) if resp["ok"] == true => {
                        for r in resp["rungs"].as_array().into_iter().flatten() {
                            let rung = UserRung {
                                sizes: sizes.clone(),
                                name: r["name"].as_str().unwrap_or("").to_string(),
                                pass: r["ok"] == true,
                                error: r["error"].as_str().map(str::to_string),
                                traceback: r["traceback"].as_str().map(str::to_string),
                            };
                            if let (Some(e), None) = (&rung.error, &check_fail) {
                                check_fail = Some(format!(
                                    "user rung \"{}\" at {}: {e}",
                                    rung.name,
                                    crate::spec::size_label(sizes)
                                ));
                            }
                            user_rungs.push(rung);
                        }
                    }
                    Ok(resp) => {
                        let e = &resp["error"];
                        check_fail = Some(format!(
                            "{} does not load: {}: {}",
                            checks_py.display(),
                            e["type"].as_str().unwrap_or(""),
                            e["message"].as_str().unwrap_or("")
                        ));
                    }
                    Err(e) => check_fail = Some(format!("{}: {e}", checks_py.display())),
                }
            }
        }
        let mode = if self.native.is_some() || self.python_gpu {
            "cuda".to_string()
        } else {
            "triton-interpreter".to_string()
        };
        let run_detail = StageDetail::Run(RunDetail { mode, sizes: runs.clone() });
        if let Some(why) = run_fail {
            return RunOutcome { run: (Verdict::Fail, why, run_diags, run_detail), check: None };
        }
        let place =
            if self.native.is_some() || self.python_gpu { "on the GPU" } else { "in Triton's interpreter on the CPU" };
        let run_summary =
            format!("{place}, {} test size(s): every output element written, inputs unchanged", runs.len());
        let worst = checks.iter().map(|c| c.comparison.max_abs_err).fold(0f64, f64::max);
        let mut names: Vec<&str> = user_rungs.iter().map(|r| r.name.as_str()).collect();
        names.dedup();
        let user = if names.is_empty() { String::new() } else { format!("; user rungs passed: {}", names.join(", ")) };
        let check_detail = StageDetail::Check(CheckDetail { seed: self.seed, results: checks, user_rungs });
        let check = match check_fail {
            Some(why) => (Verdict::Fail, why, vec![], check_detail),
            None => (
                Verdict::Pass,
                format!("matches the reference at every test size (max abs err {worst:.2e}, seed {}){user}", self.seed),
                vec![],
                check_detail,
            ),
        };
        RunOutcome { run: (Verdict::Pass, run_summary, vec![], run_detail), check: Some(check) }
    }
}

/// The keyword arguments of a Python function (`run` or `reference`) at one size, bound by
/// name like a kernel's: tensors as `tensor(t, shape)` makes them, scalars and size variables by
/// value (integers stay integers). Names that are none of these are left out.
pub fn call_args(
    spec: &Spec,
    params: &[String],
    sizes: &SizeSet,
    tensor: impl Fn(&crate::spec::TensorSpec, Vec<i64>) -> serde_json::Value,
) -> Result<serde_json::Value, String> {
    let mut args = serde_json::Map::new();
    for name in params {
        let v = if let Some((t, _)) = spec.tensor(name) {
            let shape = spec.shape_at(t, sizes).map_err(|e| format!("`{name}`: {}", e.message))?;
            serde_json::json!({ "tensor": tensor(t, shape) })
        } else if let Some(value) = spec.value_of(name, sizes, None)? {
            serde_json::json!({ "value": value.to_json() })
        } else {
            continue;
        };
        args.insert(name.clone(), v);
    }
    Ok(serde_json::Value::Object(args))
}
