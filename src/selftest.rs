//! `rung selftest`: the checks that need a real machine, built into the release binary so that
//! a GPU machine without Rust can run them. Every fixture it uses is embedded.
//!
//! - faults: every case of `tests/fixtures/faults/faults.toml`, copied into a fresh demo
//!   workspace under a neutral name in random order, checked one at a time within the run limit,
//!   each followed by a good version that must pass (the time to recover is reported);
//! - demo: every demo version passes;
//! - problems: the GPU MODE folders and the KernelBench file pass with honest versions and fail
//!   with wrong ones;
//! - warm: a changed Triton version's file, written with a recompile forced, to its check row in
//!   the history, with the zygote warm, against a fresh worker that imports torch;
//! - profile: Nsight Compute on each demo version against rung's own bench, memcheck on the
//!   out-of-bounds fault and a good version, racecheck on a reduction without its barrier.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use include_dir::{Dir, include_dir};
use serde::{Deserialize, Serialize};

use crate::check::{CheckOptions, Machine, check_with};
use crate::model::report::{Stage, Verdict, VersionReport};
use crate::runners::Runners;
use crate::store::Store;
use crate::workspace::Workspace;

static FAULTS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/tests/fixtures/faults");
static GPU_MODE: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/tests/fixtures/gpu-mode");
static KERNELBENCH: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/tests/fixtures/kernelbench");
/// The demo's v005 as a PTX version with its signature declared: run, checked and benched too.
const PTX_VERSION: (&str, &str) = ("v006-ptx.ptx", include_str!("../tests/fixtures/ptx/v006-ptx.ptx"));
/// A `rung_run` host entry (two kernels and a scratch buffer) and a kernel that is right only
/// when launched as a thread-block cluster: the demo checks them beside its own versions.
const HOST_ENTRY_VERSION: (&str, &str) =
    ("v007-rung-run.cu", include_str!("../tests/fixtures/host-entry/v007-rung-run.cu"));
const CLUSTER_VERSION: (&str, &str) = ("v008-cluster.cu", include_str!("../tests/fixtures/cluster/v008-cluster.cu"));

#[derive(Debug, Clone, Deserialize)]
struct Manifest {
    fault: Vec<FaultCase>,
}

/// One fault case and the verdict rung must give it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultCase {
    pub file: String,
    pub what: String,
    /// `cpu` (also without a GPU) or `gpu`.
    #[serde(rename = "where")]
    pub place: String,
    pub stage: Stage,
    pub verdict: Verdict,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub warning: Option<String>,
}

/// The fault cases, from the embedded manifest.
pub fn fault_cases() -> Vec<FaultCase> {
    let text = FAULTS.get_file("faults.toml").and_then(|f| f.contents_utf8()).expect("faults.toml is embedded");
    toml::from_str::<Manifest>(text).expect("faults.toml parses").fault
}

/// What one fault case got.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultRun {
    pub file: String,
    pub what: String,
    /// The neutral name it was checked under.
    pub name: String,
    pub expected: String,
    pub got: String,
    pub summary: String,
    pub ok: bool,
    pub seconds: f64,
    /// The good version checked right after: passed, and how long its check took.
    pub recovered: Option<bool>,
    pub recovery_seconds: Option<f64>,
    /// Where the good version's check spent its time (the run's phases, seconds).
    #[serde(default)]
    pub recovery_phases: BTreeMap<String, f64>,
}

/// The run stage's phases of a version's record.
fn phases_of(rec: &VersionReport) -> BTreeMap<String, f64> {
    rec.stages
        .iter()
        .find_map(|s| match &s.detail {
            crate::model::report::StageDetail::Run(r) => Some(r.phases.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

fn describe(stage: Stage, verdict: Verdict, reason: Option<&str>) -> String {
    match reason {
        Some(r) => format!("{stage}: {verdict} ({r})"),
        None => format!("{stage}: {verdict}"),
    }
}

/// Does `rec` show what `case` expects? Returns (matches, what it got, its summary).
pub fn judge_fault(case: &FaultCase, rec: &VersionReport) -> (bool, String, String) {
    let first_bad = rec.stages.iter().find(|s| s.verdict != Verdict::Pass);
    let Some(stage) = (match case.verdict {
        Verdict::Pass => rec.stages.iter().find(|s| s.stage == case.stage),
        _ => first_bad,
    }) else {
        let last = rec.stages.last();
        let got = last.map_or("nothing ran".into(), |s| describe(s.stage, s.verdict, None));
        return (false, got, last.map(|s| s.summary.clone()).unwrap_or_default());
    };
    let reason = stage.reason.map(|r| r.name());
    let got = describe(stage.stage, stage.verdict, reason.as_deref());
    let mut ok = stage.stage == case.stage && stage.verdict == case.verdict;
    if let Some(want) = &case.reason {
        ok &= reason.as_deref() == Some(want.as_str());
    }
    if let Some(want) = case.summary.as_deref().filter(|s| !s.is_empty()) {
        ok &= stage.summary.contains(want);
    }
    if let Some(want) = &case.warning {
        ok &= stage.diagnostics.iter().any(|d| d.message.contains(want.as_str()));
        // Work left running is still complete work: every later rung passes.
        ok &= first_bad.is_none();
    }
    (ok, got, stage.summary.clone())
}

/// Writes an embedded folder to `dest`.
fn write_dir(dir: &Dir, dest: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dest)?;
    for f in dir.files() {
        let rel = f.path().strip_prefix(dir.path()).unwrap_or(f.path());
        let p = dest.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(p, f.contents())?;
    }
    for d in dir.dirs() {
        let rel = d.path().strip_prefix(dir.path()).unwrap_or(d.path());
        write_dir(d, &dest.join(rel))?;
    }
    Ok(())
}

/// A small deterministic shuffle (splitmix64 keyed by `seed`).
fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut state = seed;
    for i in (1..items.len()).rev() {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        items.swap(i, (z % (i as u64 + 1)) as usize);
    }
}

pub struct FaultOptions {
    /// Run the GPU cases too (and the CPU ones on the GPU).
    pub gpu: bool,
    /// Orders the cases.
    pub order_seed: u64,
    /// `limits.run` for the workspace, e.g. "10s".
    pub run_limit: String,
}

/// Writes the demo workspace for the fault cases into `dir`: no demo versions, a good CUDA and a
/// good Triton version, the run limit, and (without a GPU) smaller test sizes for the
/// interpreter.
fn fault_workspace(dir: &Path, opts: &FaultOptions) -> anyhow::Result<()> {
    crate::templates::write("rmsnorm", dir)?;
    let versions = dir.join("versions");
    for e in std::fs::read_dir(&versions)? {
        std::fs::remove_file(e?.path())?;
    }
    let toml_path = dir.join("rung.toml");
    let mut toml = std::fs::read_to_string(&toml_path)?;
    if !opts.gpu {
        let start = toml.find("\ntest = ").map(|i| i + 1).unwrap_or(0);
        let end = toml[start..].find('\n').map_or(toml.len(), |e| start + e);
        toml.replace_range(
            start..end,
            "test = [{ rows = 1, cols = 1 }, { rows = 3, cols = 1000 }, { rows = 2, cols = 2500 }]",
        );
    }
    toml.push_str(&format!("\n[limits]\nrun = \"{}\"\n", opts.run_limit));
    std::fs::write(&toml_path, toml)?;
    for (id, file) in [("v001-good.cu", "c-good.cu"), ("v002-good.py", "t-good.py")] {
        let f = FAULTS.get_file(file).expect("embedded");
        std::fs::write(versions.join(id), f.contents())?;
    }
    Ok(())
}

/// Checks every fault case (see the module's doc). `progress` sees each result as it lands.
pub fn run_faults(
    dir: &Path,
    opts: &FaultOptions,
    mut progress: impl FnMut(&FaultRun),
) -> anyhow::Result<Vec<FaultRun>> {
    fault_workspace(dir, opts)?;
    let mut cases: Vec<FaultCase> = fault_cases().into_iter().filter(|c| opts.gpu || c.place == "cpu").collect();
    shuffle(&mut cases, opts.order_seed);
    let mut named = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let ext = Path::new(&case.file).extension().and_then(|e| e.to_str()).unwrap_or("py");
        let name = format!("v{:03}-candidate.{ext}", 101 + i);
        let f = FAULTS.get_file(&case.file).ok_or_else(|| anyhow::anyhow!("{} is not embedded", case.file))?;
        std::fs::write(dir.join("versions").join(&name), f.contents())?;
        named.push((case.clone(), name));
    }
    let ws = Workspace::open(dir)?;
    let mut store = Store::open(&ws.state_dir())?;
    let machine = Machine::discover();
    let mut runners = None;
    let mut out = Vec::new();
    for (case, name) in named {
        let id = name[..4].to_string();
        let t0 = Instant::now();
        let report = check_with(
            &ws,
            &mut store,
            &CheckOptions { versions: vec![id], seed: None, no_bench: true },
            &machine,
            &mut runners,
        )?;
        let seconds = t0.elapsed().as_secs_f64();
        let rec = report.versions.first().ok_or_else(|| anyhow::anyhow!("{name} was not checked"))?;
        let (ok, got, summary) = judge_fault(&case, rec);
        // The next good version of the same language must pass.
        let good = if case.file.ends_with(".cu") && opts.gpu { "v001" } else { "v002" };
        let t1 = Instant::now();
        let g = check_with(
            &ws,
            &mut store,
            &CheckOptions { versions: vec![good.into()], seed: None, no_bench: true },
            &machine,
            &mut runners,
        )?;
        let recovery_seconds = t1.elapsed().as_secs_f64();
        let ran = g.versions[0].stages.iter().any(|s| s.stage == Stage::Check);
        let recovered = ran.then(|| g.versions[0].verdict == Verdict::Pass);
        let run = FaultRun {
            file: case.file.clone(),
            what: case.what.clone(),
            name,
            expected: describe(case.stage, case.verdict, case.reason.as_deref()),
            got,
            summary,
            ok,
            seconds,
            recovered,
            recovery_seconds: recovered.map(|_| recovery_seconds),
            recovery_phases: phases_of(&g.versions[0]),
        };
        progress(&run);
        out.push(run);
    }
    Ok(out)
}

/// One version's outcome in the demo or problem checks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VersionRun {
    pub workspace: String,
    pub version: String,
    pub expected: Verdict,
    pub got: Verdict,
    pub summary: String,
    pub ok: bool,
}

fn version_runs(label: &str, report: &crate::model::report::CheckReport) -> Vec<VersionRun> {
    report
        .versions
        .iter()
        .map(|v| {
            let name = v.path.to_string_lossy().to_string();
            let expected = if name.contains("wrong") { Verdict::Fail } else { Verdict::Pass };
            let last = v.stages.iter().find(|s| s.verdict != Verdict::Pass).or(v.stages.last());
            let mut summary = last.map(|s| format!("{}: {}", s.stage, s.summary)).unwrap_or_default();
            // `wrong-<reason>` in the name: it must fail with that reason code.
            let want = expected_reason(&name);
            let got_reason = last.and_then(|s| s.reason);
            if let Some(r) = want {
                summary = format!(
                    "[{} expected, {} given] {summary}",
                    r.name(),
                    got_reason.map_or("none".into(), |g| g.name())
                );
            }
            let reason_ok = want.is_none_or(|r| got_reason == Some(r));
            // A pass must have reached the check rung; a fail must fail there or at run (a
            // defence of rung's), not before.
            let checked = v.stages.iter().any(|s| s.stage == Stage::Check)
                || (expected == Verdict::Fail
                    && v.stages.iter().any(|s| s.stage == Stage::Run && s.verdict == Verdict::Fail));
            VersionRun {
                workspace: label.into(),
                version: v.path.display().to_string(),
                expected,
                got: v.verdict,
                summary,
                ok: checked && v.verdict == expected && reason_ok,
            }
        })
        .collect()
}

/// The reason code a fixture's name asks for: `v003-wrong-input-mutated.py` → input-mutated.
fn expected_reason(name: &str) -> Option<crate::model::report::Reason> {
    use crate::model::report::Reason::*;
    let rest = name.rsplit('/').next()?.split_once("wrong-")?.1;
    [
        InputMutated,
        Unwritten,
        Crashed,
        Memoised,
        ProblemCheck,
        ShapeMismatch,
        Mismatch,
        Timeout,
        NonFinite,
        Exception,
        TimerPatched,
        NoCustomKernel,
        ForgedReply,
        HarnessPatched,
        L2Persisting,
    ]
    .into_iter()
    .find(|r| rest.starts_with(&r.name()))
}

/// The demo workspace with the versions only the selftest adds: PTX, a `rung_run` host entry and
/// a cluster kernel.
fn write_demo(demo: &Path) -> anyhow::Result<()> {
    crate::templates::write("rmsnorm", demo)?;
    for (name, text) in [PTX_VERSION, HOST_ENTRY_VERSION, CLUSTER_VERSION] {
        std::fs::write(demo.join("versions").join(name), text)?;
    }
    Ok(())
}

/// A CUDA reference for the vector-add template: a grid-stride loop with its own launch, so it
/// shares nothing with the versions checked against it.
const CUDA_REFERENCE: &str = r#"// rung: grid=264 block=128
// The trusted reference, in CUDA: a grid-stride loop, one element at a time.
extern "C" __global__ void reference_add(const float* a, const float* b, float* out, int n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}
"#;

/// A version that is wrong past the first 1000 elements: only the largest test size sees it.
const WRONG_AGAINST_CUDA: &str = r#"// rung: grid="cdiv(n, 256)" block=256
extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i < 1000 ? a[i] + b[i] : a[i] - b[i];
}
"#;

/// The vector-add template with `reference.cu` in place of `reference.py`, and a wrong version.
fn write_cuda_reference(ws: &Path) -> anyhow::Result<()> {
    crate::templates::write("vector-add", ws)?;
    std::fs::remove_file(ws.join("reference.py"))?;
    std::fs::write(ws.join("reference.cu"), CUDA_REFERENCE)?;
    std::fs::write(ws.join("versions").join("v004-wrong-sign.cu"), WRONG_AGAINST_CUDA)?;
    Ok(())
}

/// Checks the demo, the GPU MODE folders, the KernelBench problem and a workspace whose
/// reference is CUDA; then benches that workspace's v002, which times it against the reference.
pub fn run_workspaces(dir: &Path) -> anyhow::Result<Vec<VersionRun>> {
    let machine = Machine::discover();
    let mut out = Vec::new();
    let demo = dir.join("demo");
    write_demo(&demo)?;
    let mut places: Vec<(String, PathBuf)> = vec![("demo (rmsnorm)".into(), demo)];
    write_dir(&GPU_MODE, &dir.join("gpu-mode"))?;
    for p in ["vectoradd", "vectorsum", "outslot"] {
        places.push((format!("GPU MODE {p}"), dir.join("gpu-mode").join(p)));
    }
    write_dir(&KERNELBENCH, &dir.join("kernelbench"))?;
    places.push(("KernelBench 19_Linear_ReLU".into(), dir.join("kernelbench")));
    let cu_ref = dir.join("cuda-reference");
    write_cuda_reference(&cu_ref)?;
    places.push(("vector-add, reference.cu".into(), cu_ref.clone()));
    for (label, path) in places {
        let ws = Workspace::open(&path)?;
        let mut store = Store::open(&ws.state_dir())?;
        let mut runners = None;
        let opts = CheckOptions { no_bench: true, ..Default::default() };
        let report = check_with(&ws, &mut store, &opts, &machine, &mut runners)?;
        out.extend(version_runs(&label, &report));
        // A Triton version's build result, after the run: the kernels that launched.
        for v in report.versions.iter().filter(|v| v.kind == crate::workspace::VersionKind::Triton) {
            let Some(build) = v.stages.iter().find(|s| s.stage == Stage::Build) else { continue };
            let listed = match &build.detail {
                crate::model::report::StageDetail::Build(d) => {
                    !d.ahead_of_time && d.artefacts.iter().any(|a| a.kind == "cubin")
                }
                _ => false,
            };
            out.push(VersionRun {
                workspace: format!("{label}, build artefacts"),
                version: v.path.display().to_string(),
                expected: Verdict::Pass,
                got: build.verdict,
                summary: format!("build: {}", build.summary),
                ok: listed && build.verdict == Verdict::Pass,
            });
        }
    }
    // Benches against a GPU reference, interleaved: the CUDA reference, GPU MODE's ref_kernel
    // at task.yml's benchmarks, KernelBench's Model.
    let benched = [
        ("vector-add, reference.cu, bench", cu_ref.clone(), "v002", None),
        ("GPU MODE vectoradd, bench", dir.join("gpu-mode").join("vectoradd"), "v002", None),
        ("KernelBench 19_Linear_ReLU, bench", dir.join("kernelbench"), "v002", None),
        // Right answers kept in a persisting-L2 carve-out: the check passes, the bench fails.
        (
            "GPU MODE outslot, bench",
            dir.join("gpu-mode").join("outslot"),
            "v018",
            Some(crate::model::report::Reason::L2Persisting),
        ),
        // Right answers in a check, remembered by pointer in a bench: the re-check catches it.
        (
            "GPU MODE outslot, bench",
            dir.join("gpu-mode").join("outslot"),
            "v019",
            Some(crate::model::report::Reason::Memoised),
        ),
    ];
    for (label, path, id, fails) in benched {
        out.extend(bench_run(label, &path, id, &machine, fails)?);
    }
    Ok(out)
}

/// One version benched, as a row: it passes when the bench passed and timed a speedup over the
/// reference, or, given `fails`, when the bench failed with that reason.
fn bench_run(
    label: &str,
    path: &Path,
    id: &str,
    machine: &Machine,
    fails: Option<crate::model::report::Reason>,
) -> anyhow::Result<Vec<VersionRun>> {
    let mut out = Vec::new();
    let ws = Workspace::open(path)?;
    let mut store = Store::open(&ws.state_dir())?;
    let opts = CheckOptions { versions: vec![id.into()], ..Default::default() };
    let report = check_with(&ws, &mut store, &opts, machine, &mut None)?;
    for v in &report.versions {
        let bench = v.stages.iter().find(|s| s.stage == Stage::Bench);
        let against = bench.is_some_and(|b| match &b.detail {
            crate::model::report::StageDetail::Bench(d) => d.speedups.iter().any(|s| s.role == "reference"),
            _ => false,
        });
        let ok = match fails {
            None => against && bench.is_some_and(|b| b.verdict == Verdict::Pass),
            Some(r) => bench.is_some_and(|b| b.verdict == Verdict::Fail && b.reason == Some(r)),
        };
        out.push(VersionRun {
            workspace: label.into(),
            version: v.path.display().to_string(),
            expected: if fails.is_some() { Verdict::Fail } else { Verdict::Pass },
            got: bench.map_or(Verdict::Skipped, |b| b.verdict),
            summary: bench.map(|b| format!("bench: {}", b.summary)).unwrap_or_else(|| "no bench".into()),
            ok,
        });
    }
    Ok(out)
}

/// The warm path: one sample.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WarmRun {
    /// `warm` (zygote running) or `fresh` (a new worker importing torch).
    pub kind: String,
    /// From the file's write to its check row in the history.
    pub seconds: f64,
    pub verdict: Verdict,
    /// Stage durations (ms) and the run's phases (s).
    pub stages_ms: BTreeMap<String, f64>,
    pub phases: BTreeMap<String, f64>,
}

/// Edits the demo's Triton version so its kernel's source changes (Triton must recompile),
/// then checks it; `rounds` times warm, then once with a fresh worker.
pub fn run_warm(dir: &Path, rounds: usize) -> anyhow::Result<Vec<WarmRun>> {
    let machine = Machine::discover();
    crate::templates::write("rmsnorm", dir)?;
    let file = dir.join("versions").join("v004-triton.py");
    let original = std::fs::read_to_string(&file)?;
    let anchor = "    row = tl.program_id(0).to(tl.int64)\n";
    anyhow::ensure!(original.contains(anchor), "the demo's Triton kernel changed; update the selftest's anchor");
    let mut runners: Option<Runners> = None;
    let mut out = Vec::new();
    let nonce = crate::store::now_ms();
    for round in 0..=rounds + 1 {
        // Round 0 warms the zygote (not reported); the last round uses a fresh worker.
        let fresh = round == rounds + 1;
        if fresh {
            runners = None;
        }
        let edited = original.replacen(anchor, &format!("{anchor}    nonce = {}\n", nonce + round as i64), 1);
        let t0 = Instant::now();
        std::fs::write(&file, edited)?;
        let ws = Workspace::open(dir)?;
        let mut store = Store::open(&ws.state_dir())?;
        let report = check_with(
            &ws,
            &mut store,
            &CheckOptions { versions: vec!["v004".into()], seed: None, no_bench: true },
            &machine,
            &mut runners,
        )?;
        let seconds = t0.elapsed().as_secs_f64();
        if round == 0 {
            continue;
        }
        let v = &report.versions[0];
        let stages_ms = v.stages.iter().map(|s| (s.stage.name().to_string(), s.duration_ms)).collect();
        let phases = phases_of(v);
        out.push(WarmRun {
            kind: if fresh { "fresh".into() } else { "warm".into() },
            seconds,
            verdict: v.verdict,
            stages_ms,
            phases,
        });
    }
    std::fs::write(&file, original)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_names_embedded_files_and_known_reasons() {
        let cases = fault_cases();
        assert!(cases.len() >= 12, "every fault the issue lists");
        for c in &cases {
            assert!(FAULTS.get_file(&c.file).is_some(), "{} is not in tests/fixtures/faults", c.file);
            assert!(c.place == "cpu" || c.place == "gpu", "{}: where = {}", c.file, c.place);
            if let Some(r) = &c.reason {
                let parsed: Result<crate::model::report::Reason, _> = serde_json::from_value(serde_json::json!(r));
                assert!(parsed.is_ok(), "{}: unknown reason {r}", c.file);
            }
        }
    }

    #[test]
    fn the_bench_limit_is_set_once_whether_or_not_limits_had_one() {
        for template in ["vector-add", "rmsnorm"] {
            let dir = tempfile::tempdir().unwrap();
            crate::templates::write(template, dir.path()).unwrap();
            let toml = std::fs::read_to_string(dir.path().join("rung.toml")).unwrap();
            let edited = with_bench_limit(&toml, "4s").unwrap();
            let spec = crate::spec::Spec::parse(&edited, std::path::Path::new("rung.toml"))
                .unwrap_or_else(|e| panic!("{template}: {e:?}\n{edited}"));
            assert_eq!(spec.limits.bench, std::time::Duration::from_secs(4), "{template}");
        }
    }

    #[test]
    fn the_shuffle_is_a_permutation_that_depends_on_the_seed() {
        let mut a: Vec<u32> = (0..20).collect();
        let mut b = a.clone();
        shuffle(&mut a, 1);
        shuffle(&mut b, 2);
        assert_ne!(a, b);
        a.sort();
        assert_eq!(a, (0..20).collect::<Vec<_>>());
    }
}

/// One version's bench in the bench validation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRun {
    pub workspace: String,
    pub version: String,
    pub verdict: Verdict,
    pub median_us: Option<f64>,
    pub basis: Option<String>,
    /// The same calls timed between events on the call's stream, µs (beside a CUPTI headline).
    #[serde(default)]
    pub events_us: Option<f64>,
    /// Why the bench was timed by events, not CUPTI.
    #[serde(default)]
    pub timer_note: Option<String>,
    pub ci_rel_percent: Option<f64>,
    pub n: Option<usize>,
    pub throttled: Option<bool>,
    pub bench_summary: String,
    pub roofline_summary: Option<String>,
    pub percent_of_ceiling: Option<f64>,
    /// Small kernels: per-call µs by graph replay.
    pub graph_us: Option<f64>,
    /// Interleaved speedups: "15.41x vs v001 (best approved) SUSPICIOUS".
    pub speedups: Vec<String>,
    /// What this run was expected to show and did not; empty when all is as expected.
    pub unexpected: Vec<String>,
}

/// rung.toml text with `[limits] bench` set to `budget`, whether or not it had one; comments
/// and layout kept.
fn with_bench_limit(toml: &str, budget: &str) -> anyhow::Result<String> {
    let mut doc: toml_edit::DocumentMut = toml.parse()?;
    doc["limits"]["bench"] = toml_edit::value(budget);
    Ok(doc.to_string())
}

/// What a bench run of the selftest must show, beyond a pass.
fn bench_expectations(label: &str, b: Option<&crate::stages::bench::BenchDetail>) -> Vec<String> {
    let mut why = Vec::new();
    let Some(b) = b else { return why };
    let speedup = b.speedups.first();
    match label {
        "vs-v001" => match speedup {
            Some(s) if s.against == "v001" && s.suspicious => {}
            Some(s) => {
                why.push(format!("expected a suspicious speedup over v001, got {:.2}x vs {}", s.speedup, s.against))
            }
            None => why.push(format!("no speedup over v001: {}", b.comparison_notes.join("; "))),
        },
        "vs-v003" => match speedup {
            Some(s) if s.against == "v003" && !s.suspicious => {}
            Some(s) => {
                why.push(format!("expected an unflagged speedup over v003, got {:.2}x vs {}", s.speedup, s.against))
            }
            None => why.push(format!("no speedup over v003: {}", b.comparison_notes.join("; "))),
        },
        // ~100 ms of spinning on a side stream the call never joins: its real cost.
        "side-stream" if b.sizes.first().is_none_or(|x| x.headline.median < 50.0) => why.push(format!(
            "the side stream's work was not timed: {:.3} ms median",
            b.sizes.first().map_or(0.0, |x| x.headline.median)
        )),
        "small" if b.sizes.first().is_none_or(|x| x.graph.is_none()) => why.push(format!(
            "a small kernel was not timed by graph replay: {}",
            b.sizes.first().and_then(|x| x.graph_error.clone()).unwrap_or_default()
        )),
        _ => {}
    }
    why
}

/// The bench part: the demo benched and roofline'd, one version benched five times, speedups
/// over approved versions (one flagged suspicious), the side-stream case, and a small problem
/// timed by graph replay. The demo workspace is left at `dir/demo` for outside tools (ncu,
/// triton.testing.do_bench) to time the same kernels.
pub fn run_bench(
    dir: &Path,
    repeat: &str,
    repeats: usize,
    only: &[String],
    demo_versions: &[String],
) -> anyhow::Result<(Vec<BenchRun>, serde_json::Value)> {
    let machine = Machine::discover();
    let demo = dir.join("demo");
    write_demo(&demo)?;
    let side = dir.join("side-stream");
    fault_workspace(&side, &FaultOptions { gpu: true, order_seed: 0, run_limit: "10s".into() })?;
    let f = FAULTS.get_file("t-side-stream.py").expect("embedded");
    std::fs::write(side.join("versions").join("v101-candidate.py"), f.contents())?;
    // A small problem, so the graph replay of small kernels runs for a CUDA and a Triton version.
    let small = dir.join("small");
    crate::templates::write("vector-add", &small)?;
    let path = small.join("rung.toml");
    let toml = std::fs::read_to_string(&path)?.replace("bench = [{ n = 67108864 }]", "bench = [{ n = 65536 }]");
    std::fs::write(&path, toml)?;
    // A shorter bench budget than the default: this runs many benches.
    for (ws, budget) in [(&demo, "8s"), (&side, "8s"), (&small, "4s")] {
        let path = ws.join("rung.toml");
        std::fs::write(&path, with_bench_limit(&std::fs::read_to_string(&path)?, budget)?)?;
    }
    let mut out = Vec::new();
    let mut reports = serde_json::Map::new();
    let v = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // (label, workspace, versions, versions to approve first).
    let runs: Vec<(&str, &Path, Vec<String>, Vec<String>)> = vec![
        ("demo", demo.as_path(), demo_versions.to_vec(), vec![]),
        ("repeat", demo.as_path(), vec![repeat.to_string(); repeats], vec![]),
        // v001 approved: v005 re-benched against it is over 10x faster, so flagged suspicious.
        ("vs-v001", demo.as_path(), v(&["v005"]), v(&["v001"])),
        // v003 approved too, and faster: the CUDA v005 and the Triton v004 against it.
        ("vs-v003", demo.as_path(), v(&["v004", "v005"]), v(&["v003"])),
        ("side-stream", side.as_path(), v(&["v101"]), vec![]),
        ("small", small.as_path(), vec![], vec![]),
    ];
    for (label, path, versions, approve) in
        runs.into_iter().filter(|r| only.is_empty() || only.iter().any(|o| o == r.0))
    {
        let ws = Workspace::open(path)?;
        let mut store = Store::open(&ws.state_dir())?;
        for id in &approve {
            store.set_status(id, crate::store::Status::Approved, None)?;
        }
        let mut runners = None;
        let batches: Vec<Vec<String>> =
            if label == "repeat" { versions.iter().map(|v| vec![v.clone()]).collect() } else { vec![versions] };
        for (i, vs) in batches.into_iter().enumerate() {
            let report = check_with(
                &ws,
                &mut store,
                &CheckOptions { versions: vs, ..Default::default() },
                &machine,
                &mut runners,
            )?;
            reports.insert(format!("{label}-{i}"), serde_json::to_value(&report)?);
            for v in &report.versions {
                let bench = v.stages.iter().find(|s| s.stage == Stage::Bench);
                let roof = v.stages.iter().find(|s| s.stage == Stage::Roofline);
                let detail = bench.and_then(|s| match &s.detail {
                    crate::model::report::StageDetail::Bench(b) => Some(b),
                    _ => None,
                });
                let b = detail.and_then(|b| b.sizes.first().cloned().map(|x| (x, b.throttled)));
                let speedups = detail
                    .map(|b| {
                        b.speedups
                            .iter()
                            .map(|s| {
                                format!(
                                    "{:.2}x vs {} ({}, {} rounds){}",
                                    s.speedup,
                                    s.against,
                                    s.role,
                                    s.rounds,
                                    if s.suspicious { " SUSPICIOUS" } else { "" }
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let pct = roof.and_then(|s| match &s.detail {
                    crate::model::report::StageDetail::Roofline(r) => r.percent_of_ceiling,
                    _ => None,
                });
                out.push(BenchRun {
                    workspace: label.into(),
                    version: v.path.display().to_string(),
                    verdict: v.verdict,
                    median_us: b.as_ref().map(|(x, _)| x.headline.median * 1e3),
                    basis: b.as_ref().map(|(x, _)| x.basis.clone()),
                    events_us: b.as_ref().map(|(x, _)| x.gpu.median * 1e3),
                    timer_note: b.as_ref().and_then(|(x, _)| x.timer_note.clone()),
                    ci_rel_percent: b.as_ref().map(|(x, _)| x.headline.ci_rel * 100.0),
                    n: b.as_ref().map(|(x, _)| x.headline.n),
                    throttled: b.as_ref().map(|(_, t)| *t),
                    bench_summary: bench.map(|s| s.summary.clone()).unwrap_or_else(|| "no bench".into()),
                    roofline_summary: roof.map(|s| s.summary.clone()),
                    percent_of_ceiling: pct,
                    graph_us: b.as_ref().and_then(|(x, _)| x.graph.as_ref().map(|g| g.median * 1e3)),
                    speedups,
                    unexpected: bench_expectations(label, detail),
                });
            }
        }
    }
    Ok((out, serde_json::Value::Object(reports)))
}

/// A version whose reduction lacks its barrier, for racecheck.
const RACE_VERSION: (&str, &str) = ("v102-race.cu", include_str!("../tests/fixtures/profile/v102-race.cu"));

/// One `rung profile` run of the selftest: what it found against what it must find.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProfileRun {
    pub version: String,
    /// `profile`, `memcheck` or `racecheck`.
    pub tool: String,
    pub verdict: Verdict,
    pub summary: String,
    /// Nsight Compute's DRAM bytes over its duration, GB/s, and rung's own achieved GB/s (the
    /// roofline's bytes over the bench's median), with their difference.
    pub ncu_dram_gbs: Option<f64>,
    pub rung_gbs: Option<f64>,
    pub delta_percent: Option<f64>,
    pub ncu_us: Option<f64>,
    pub rung_us: Option<f64>,
    /// Nsight Compute's DRAM bytes over the bytes rung.toml's formula counts.
    pub traffic_ratio: Option<f64>,
    /// Where the first finding is, for the sanitizers.
    pub at: Option<String>,
    pub ok: bool,
    pub expected: String,
}

/// The profile rung on the demo: Nsight Compute on every CUDA and Triton version (after a check
/// with the bench, so rung's own achieved GB/s stands beside Nsight Compute's DRAM GB/s), memcheck
/// on the out-of-bounds fault (which rung's guard zones catch without a fault) and on a good
/// version, racecheck on a reduction without its barrier. `exe` is this binary.
pub fn run_profile(dir: &Path, exe: &Path, mut each: impl FnMut(&ProfileRun)) -> anyhow::Result<Vec<ProfileRun>> {
    use crate::model::report::StageDetail;
    use crate::profile::Sanitizer;
    use crate::stages::profile::{Tool, profile};
    let machine = Machine::discover();
    let demo = dir.join("demo");
    crate::templates::write("rmsnorm", &demo)?;
    let oob = FAULTS.get_file("c-out-of-bounds.cu").and_then(|f| f.contents_utf8()).unwrap_or_default();
    std::fs::write(demo.join("versions/v101-oob.cu"), oob)?;
    std::fs::write(demo.join("versions").join(RACE_VERSION.0), RACE_VERSION.1)?;
    let ws = Workspace::open(&demo)?;
    let mut store = Store::open(&ws.state_dir())?;
    let mut runners = None;
    let demo_ids = ["v001", "v002", "v003", "v004", "v005"];
    let opts = CheckOptions { versions: demo_ids.map(String::from).to_vec(), ..Default::default() };
    let report = check_with(&ws, &mut store, &opts, &machine, &mut runners)?;
    drop(runners);
    let mut out = Vec::new();
    let mut push = |r: ProfileRun, out: &mut Vec<ProfileRun>| {
        each(&r);
        out.push(r);
    };
    for id in demo_ids {
        let v = ws.version(id).ok_or_else(|| anyhow::anyhow!("the demo has no {id}"))?.clone();
        let rec = report.versions.iter().find(|r| r.id == id);
        let roof = rec.and_then(|r| r.stages.iter().find(|s| s.stage == Stage::Roofline));
        let (rung_gbs, rung_us) = match roof.map(|s| &s.detail) {
            Some(StageDetail::Roofline(r)) => (r.achieved_gbs, Some(r.seconds * 1e6)),
            _ => (None, None),
        };
        let r = profile(&ws, &mut store, &v, &machine, Tool::Ncu, exe)?;
        let (k, traffic_ratio) = match &r.detail {
            StageDetail::Profile(p) => (p.kernels.first().cloned(), p.traffic_ratio),
            _ => (None, None),
        };
        let ncu_dram_gbs = k.as_ref().and_then(|k| k.dram_gbs);
        let delta = ncu_dram_gbs.zip(rung_gbs).map(|(n, g)| 100.0 * (n - g) / g);
        // Where the kernel moves what the formula counts, the two bandwidths must agree (this
        // also checks the formula); one that reads data again moves more, and is said to.
        let ok = r.verdict == Verdict::Pass
            && match traffic_ratio {
                Some(t) if t > 1.05 => true,
                Some(_) => delta.is_some_and(|d| d.abs() <= 5.0),
                None => false,
            };
        push(
            ProfileRun {
                version: id.into(),
                tool: "profile".into(),
                verdict: r.verdict,
                summary: r.summary.clone(),
                ncu_dram_gbs,
                rung_gbs,
                delta_percent: delta,
                ncu_us: k.map(|k| k.duration_us),
                rung_us,
                traffic_ratio,
                at: None,
                ok,
                expected: "pass; DRAM GB/s within 5% of rung's where the traffic is the formula's".into(),
            },
            &mut out,
        );
    }
    let sanitize = [
        ("v101", Sanitizer::Memcheck, Verdict::Fail, Some(("versions/v101-oob.cu", &[14u32][..]))),
        ("v005", Sanitizer::Memcheck, Verdict::Pass, None),
        ("v102", Sanitizer::Racecheck, Verdict::Fail, Some(("versions/v102-race.cu", &[10u32, 11][..]))),
    ];
    for (id, tool, want, place) in sanitize {
        let v = ws.version(id).ok_or_else(|| anyhow::anyhow!("the demo has no {id}"))?.clone();
        let r = profile(&ws, &mut store, &v, &machine, Tool::Sanitizer(tool), exe)?;
        let first = r.diagnostics.first();
        let at = first.map(|d| d.location());
        let ok = r.verdict == want
            && place.is_none_or(|(file, lines)| {
                first.is_some_and(|d| d.file == Path::new(file) && lines.contains(&d.line))
            });
        let expected = match place {
            Some((file, lines)) => format!("fail at {file}:{lines:?}"),
            None => "pass, no findings".into(),
        };
        push(
            ProfileRun {
                version: id.into(),
                tool: tool.name().into(),
                verdict: r.verdict,
                summary: r.summary.clone(),
                ncu_dram_gbs: None,
                rung_gbs: None,
                delta_percent: None,
                ncu_us: None,
                rung_us: None,
                traffic_ratio: None,
                at,
                ok,
                expected,
            },
            &mut out,
        );
    }
    Ok(out)
}

/// The scripted agent behind `rung internal-scripted-agent DIR`: the prompt from standard input
/// kept as `DIR/request-N.txt`, the reply `DIR/reply-N.md` printed, N counting from 1.
pub fn scripted_agent(dir: &Path) -> i32 {
    use std::io::Read;
    let mut prompt = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut prompt) {
        eprintln!("rung internal-scripted-agent: reading the prompt: {e}");
        return crate::exit::INTERNAL;
    }
    let n = (1..).find(|n| !dir.join(format!("request-{n}.txt")).exists()).unwrap_or(1);
    if let Err(e) = std::fs::write(dir.join(format!("request-{n}.txt")), &prompt) {
        eprintln!("rung internal-scripted-agent: {}: {e}", dir.display());
        return crate::exit::INTERNAL;
    }
    match std::fs::read_to_string(dir.join(format!("reply-{n}.md"))) {
        Ok(reply) => {
            print!("{reply}");
            crate::exit::OK
        }
        Err(e) => {
            eprintln!("rung internal-scripted-agent: no reply-{n}.md in {}: {e}", dir.display());
            crate::exit::INTERNAL
        }
    }
}

/// One step of auto mode on the GPU.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AutoStepRun {
    /// The proposal's id, and what the script sent (`wrong`, `slower`, `faster`).
    pub version: String,
    pub script: String,
    /// The version the request for it put in focus.
    pub parent_in_request: Option<String>,
    /// What its rungs measured, and what auto mode made of it.
    pub measured: String,
    pub decision: String,
    pub ok: bool,
    pub expected: String,
}

/// Auto mode with real rungs: the demo's v002 checked and benched as the start, then a scripted
/// agent (this binary as a `command` provider) that proposes a wrong version (v003 off by 1%),
/// a slower one (v001's one thread per row) and a faster one (v005); the bench ranks them. It
/// must reject the first two with their reasons, build on the third and stop at its 1.5x target.
pub fn run_auto(dir: &Path, exe: &Path) -> anyhow::Result<(Vec<AutoStepRun>, String)> {
    use crate::agent::auto::{self, Measure, Target};
    let machine = Machine::discover();
    let demo = dir.join("demo");
    crate::templates::write("rmsnorm", &demo)?;
    let script = dir.join("script");
    std::fs::create_dir_all(&script)?;
    let read = |name: &str| std::fs::read_to_string(demo.join("versions").join(name));
    let wrong = read("v003-float4-registers.cu")?.replace("inv_cols + eps)", "inv_cols + eps) * 1.01f");
    let replies = [
        ("wrong", "scaled rsqrt", wrong),
        ("slower", "one thread per row", read("v001-naive.cu")?),
        ("faster", "float4 loads no cache hints", read("v005-float4-no-cache-hints.cu")?),
    ];
    for (i, (_, name, src)) in replies.iter().enumerate() {
        std::fs::write(script.join(format!("reply-{}.md", i + 1)), format!("name: {name}\n\n```cuda\n{src}```\n"))?;
    }
    let ws = Workspace::open(&demo)?;
    let mut store = Store::open(&ws.state_dir())?;
    let mut runners = None;
    let opts = CheckOptions { versions: vec!["v002".into()], ..Default::default() };
    let report = check_with(&ws, &mut store, &opts, &machine, &mut runners)?;
    let start = Measure::of_report(&report.versions[0]);
    anyhow::ensure!(start.median_ms.is_some(), "v002 did not bench: {}", start.describe());
    drop(store);
    let cfg = format!(
        "[agent]\nprovider = \"script\"\n\n[agent.providers.script]\nkind = \"command\"\ncommand = [{:?}, \"internal-scripted-agent\", {:?}]\n",
        exe.display().to_string(),
        script.display().to_string()
    );
    let cfg = crate::agent::config::AgentConfig::parse(&cfg, &dir.join("agent.toml"))?;
    let agent = crate::agent::Agent::new(cfg, None, None)?;
    let mut conv = agent.conversation(Some(&crate::agent::ChatStore::for_workspace(&demo)))?;
    let mut climb =
        |id: &str| auto::climb_here(&demo, id, &CheckOptions::default(), &machine, &mut runners).map(|(m, _)| m);
    let why = format!("v002 ({})", start.describe());
    let end = auto::run(
        auto::Session { root: &demo, agent: &agent, conv: &mut conv, tools: &crate::agent::NoTools },
        Target { speedup: Some(1.5), max_versions: Some(6), ..Target::default() },
        (Some(start), why),
        &crate::agent::Cancel::new(),
        &mut climb,
        &mut |_| {},
    );
    let focus_of = |n: usize| {
        let text = std::fs::read_to_string(script.join(format!("request-{n}.txt"))).unwrap_or_default();
        let at = text.find("## The version in focus: ")?;
        text[at + 25..].split_whitespace().next().map(str::to_string)
    };
    let expected_parent = ["v002", "v002", "v002"];
    let mut out = Vec::new();
    for (i, (step, j)) in end.steps.iter().enumerate() {
        let kind = replies.get(i).map_or("extra", |r| r.0);
        let rec = Workspace::open(&demo)
            .ok()
            .and_then(|ws| Store::open(&ws.state_dir()).ok().and_then(|s| Measure::recorded(&ws, &s, step)));
        let parent = focus_of(i + 1);
        let (want, expected) = match kind {
            "wrong" => (j.reject.as_deref().is_some_and(|r| r.starts_with("auto: check fail")), "rejected: check fail"),
            "slower" => {
                (j.reject.as_deref().is_some_and(|r| r.contains("not faster than v002")), "rejected: not faster")
            }
            "faster" => (j.parent && end.why.starts_with("target reached"), "the next parent; target reached"),
            _ => (false, "no fourth proposal"),
        };
        out.push(AutoStepRun {
            version: step.clone(),
            script: kind.into(),
            parent_in_request: parent.clone(),
            measured: rec.map_or_else(|| "-".into(), |m| m.describe()),
            decision: j.why.clone(),
            ok: want && parent.as_deref() == expected_parent.get(i).copied(),
            expected: format!("{expected}; request carried {}", expected_parent.get(i).unwrap_or(&"-")),
        });
    }
    Ok((out, end.why))
}
