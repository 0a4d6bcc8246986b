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
use crate::spec::{ScalarValue, SizeSet, Spec};
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
    gpu: bool,
    v: &VersionFile,
    source: &str,
    seed: u64,
) -> RunOutcome {
    let (Format::Rung, Some(spec)) = (ws.format, ws.spec.as_ref()) else {
        return skipped("GPU MODE and KernelBench problems run in the Python worker on a GPU, which is not built yet");
    };
    match v.kind {
        VersionKind::Triton => {}
        VersionKind::Cuda | VersionKind::CudaHost | VersionKind::Ptx if !gpu => {
            return skipped("no GPU: run and check skipped (build, PTX/SASS and diffs work)");
        }
        VersionKind::Cuda | VersionKind::CudaHost | VersionKind::Ptx => {
            return skipped("running CUDA and PTX versions on the GPU is not built yet: the native worker is next");
        }
        _ if !gpu => return skipped(format!("no GPU: {} versions run only on a GPU", v.kind)),
        _ => return skipped(format!("running {} versions on the GPU is not built yet", v.kind)),
    }
    let Some(reference) = ws.reference.clone().filter(|r| r.extension().is_some_and(|e| e == "py")) else {
        return skipped("the reference is not a reference.py: a CUDA reference needs a GPU");
    };
    let Some(python) =
        tc.python.as_ref().filter(|p| p.packages.contains_key("triton") && p.packages.contains_key("numpy"))
    else {
        return skipped("Triton and numpy are needed to check Triton versions in the interpreter: run `rung setup`");
    };
    match Checker::new(ws, spec, &python.path, seed) {
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
    fn start(ws: &Workspace, python: &Path, script: &Path) -> Result<Worker, String> {
        let mut child = Command::new(python)
            .arg(script)
            .arg("--interpret")
            .current_dir(&ws.root)
            .env("TRITON_INTERPRET", "1")
            .env("TRITON_CACHE_DIR", ws.state_dir().join("triton-cache"))
            .env("TRITON_DEFAULT_FP_FUSION", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start the Python worker ({}): {e}", python.display()))?;
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
    worker: Worker,
    dir: PathBuf,
    seed: u64,
}

/// Bulk data goes through files in shared memory when the system has it.
fn data_dir() -> PathBuf {
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() { base.to_path_buf() } else { std::env::temp_dir() };
    base.join(format!("rung-{}-{}", std::process::id(), crate::store::now_ms()))
}

impl<'a> Checker<'a> {
    fn new(ws: &'a Workspace, spec: &'a Spec, python: &Path, seed: u64) -> Result<Self, String> {
        let dir = data_dir();
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let script = dir.join("rung_worker.py");
        std::fs::write(&script, WORKER).map_err(|e| format!("{}: {e}", script.display()))?;
        let worker = Worker::start(ws, python, &script)?;
        Ok(Checker { ws, spec, worker, dir, seed })
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
    ) -> serde_json::Value {
        let scope = self.spec.scope(sizes, None);
        let mut args = serde_json::Map::new();
        for name in params {
            let v = if let (Some((t, _)), Some((path, shape))) = (self.spec.tensor(name), files.get(name)) {
                serde_json::json!({ "tensor": Self::tensor_arg(path, t.dtype, shape) })
            } else if let Some(sc) = self.spec.scalars.iter().find(|s| &s.name == name) {
                match &sc.value {
                    ScalarValue::Number(n) => serde_json::json!({ "value": n }),
                    ScalarValue::Expr(e) => serde_json::json!({ "value": e.eval_int(&scope).unwrap_or(0) }),
                }
            } else if let Some(v) = sizes.get(name) {
                serde_json::json!({ "value": v })
            } else {
                continue;
            };
            args.insert(name.clone(), v);
        }
        serde_json::Value::Object(args)
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
                let req = serde_json::json!({ "id": pass, "op": "call", "file": v.path, "function": "run", "mode": "interpret", "args": self.args(&params, sizes, &files) });
                match self.worker.call(&req, limit) {
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
                        run_fail = Some(format!("{msg} (at {})", size_label(sizes)));
                        break;
                    }
                    Err(e) => {
                        run_fail = Some(format!("{e} (at {})", size_label(sizes)));
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
                    run_fail = Some(format!("the kernel changed its input `{}` (at {})", t.name, size_label(sizes)));
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
                        unravel(missing[0], &shape),
                        size_label(sizes)
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
                let req = serde_json::json!({ "id": 9, "op": "call", "file": reference, "function": "reference", "mode": "reference", "args": self.args(&ref_params, sizes, &files), "returns": returns });
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
                    check_fail = Some(format!("`{}` at {}: {r}", t.name, size_label(sizes)));
                }
                checks.push(OutputCheck {
                    sizes: sizes.clone(),
                    output: t.name.clone(),
                    pass: reason.is_none(),
                    reason,
                    comparison,
                });
            }
        }
        let mode = "triton-interpreter".to_string();
        let run_detail = StageDetail::Run(RunDetail { mode, sizes: runs.clone() });
        if let Some(why) = run_fail {
            return RunOutcome { run: (Verdict::Fail, why, run_diags, run_detail), check: None };
        }
        let run_summary = format!(
            "in Triton's interpreter on the CPU, {} test size(s): every output element written, inputs unchanged",
            runs.len()
        );
        let worst = checks.iter().map(|c| c.comparison.max_abs_err).fold(0f64, f64::max);
        let check_detail = StageDetail::Check(CheckDetail { seed: self.seed, results: checks });
        let check = match check_fail {
            Some(why) => (Verdict::Fail, why, vec![], check_detail),
            None => (
                Verdict::Pass,
                format!("matches the reference at every test size (max abs err {worst:.2e}, seed {})", self.seed),
                vec![],
                check_detail,
            ),
        };
        RunOutcome { run: (Verdict::Pass, run_summary, vec![], run_detail), check: Some(check) }
    }
}

fn size_label(sizes: &SizeSet) -> String {
    sizes.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}

fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (d, &n) in shape.iter().enumerate().rev() {
        if n > 0 {
            idx[d] = i % n;
            i /= n;
        }
    }
    idx
}
