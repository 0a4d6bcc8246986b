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
//!   out-of-bounds fault and a good version, racecheck on a reduction without its barrier;
//! - sandbox: versions that reach for secrets, files outside or the network refused on the GPU,
//!   and the demo's bench medians inside the sandbox against outside it.

mod auto;
mod bench;
mod profile;
mod sandbox;
mod trace;
mod workspaces;

pub use auto::*;
pub use bench::*;
pub use profile::*;
pub use sandbox::*;
pub use trace::*;
pub use workspaces::*;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use include_dir::{Dir, include_dir};
use serde::{Deserialize, Serialize};

use crate::check::{CheckOptions, Machine, check_with};
use crate::model::report::{Stage, Verdict, VersionReport};
use crate::store::Store;
use crate::workspace::Workspace;

static FAULTS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/tests/fixtures/faults");
static GPU_MODE: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/tests/fixtures/gpu-mode");
static KERNELBENCH: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/tests/fixtures/kernelbench");
/// The demo's v005 as a PTX version with its signature declared: run, checked and benched too.
const PTX_VERSION: (&str, &str) = ("v006-ptx.ptx", include_str!("../../tests/fixtures/ptx/v006-ptx.ptx"));
/// A `rung_run` host entry (two kernels and a scratch buffer) and a kernel that is right only
/// when launched as a thread-block cluster: the demo checks them beside its own versions.
const HOST_ENTRY_VERSION: (&str, &str) =
    ("v007-rung-run.cu", include_str!("../../tests/fixtures/host-entry/v007-rung-run.cu"));
const CLUSTER_VERSION: (&str, &str) = ("v008-cluster.cu", include_str!("../../tests/fixtures/cluster/v008-cluster.cu"));

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
            &CheckOptions { versions: vec![id], seed: None, no_bench: case.stage != Stage::Bench },
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
    if opts.gpu {
        for run in run_lanes(&dir.with_extension("one-check"), opts)? {
            progress(&run);
            out.push(run);
        }
    }
    Ok(out)
}

/// The CUDA fault cases checked again, all in one check after the good CUDA version, in a copy
/// of the workspace without checks.py: there the check climbs CUDA versions' check rungs in
/// lanes, several at once, and each case must get the verdict it gets alone. A row per case
/// (named `vNNN+lanes`), and one for the good version: the `lanes` part, and the end of the
/// `faults` part on a GPU.
pub fn run_lanes(dir: &Path, opts: &FaultOptions) -> anyhow::Result<Vec<FaultRun>> {
    let _ = std::fs::remove_dir_all(dir);
    fault_workspace(dir, opts)?;
    let _ = std::fs::remove_file(dir.join("checks.py"));
    let mut cases: Vec<FaultCase> =
        fault_cases().into_iter().filter(|c| c.file.ends_with(".cu") && c.stage != Stage::Bench).collect();
    shuffle(&mut cases, opts.order_seed);
    let good = FaultCase {
        file: "c-good.cu".into(),
        what: "the honest CUDA version, first".into(),
        place: "gpu".into(),
        stage: Stage::Check,
        verdict: Verdict::Pass,
        reason: None,
        summary: None,
        warning: None,
    };
    let mut ids = vec![("v001".to_string(), good)];
    for (i, case) in cases.into_iter().enumerate() {
        let name = format!("v{:03}-candidate.cu", 201 + i);
        let f = FAULTS.get_file(&case.file).ok_or_else(|| anyhow::anyhow!("{} is not embedded", case.file))?;
        std::fs::write(dir.join("versions").join(&name), f.contents())?;
        ids.push((name[..4].to_string(), case));
    }
    let ws = Workspace::open(dir)?;
    let mut store = Store::open(&ws.state_dir())?;
    let machine = Machine::discover();
    let lanes = crate::check::check_lanes(&ws, &machine, ids.len());
    let t0 = Instant::now();
    let versions = ids.iter().map(|(id, _)| id.clone()).collect();
    let report =
        check_with(&ws, &mut store, &CheckOptions { versions, seed: None, no_bench: true }, &machine, &mut None)?;
    let seconds = t0.elapsed().as_secs_f64();
    let mut out = Vec::new();
    for (id, case) in ids {
        let rec = report.versions.iter().find(|v| v.id == id);
        let (ok, got, summary) = match rec {
            Some(rec) => judge_fault(&case, rec),
            None => (false, "not checked".into(), String::new()),
        };
        out.push(FaultRun {
            file: case.file.clone(),
            what: format!("{} [one check, {lanes} lanes, {seconds:.1} s]", case.what),
            name: format!("{id}+lanes"),
            expected: describe(case.stage, case.verdict, case.reason.as_deref()),
            got,
            summary,
            ok,
            seconds: rec.map_or(0.0, |r| r.stages.iter().map(|s| s.duration_ms).sum::<f64>() / 1e3),
            recovered: None,
            recovery_seconds: None,
            recovery_phases: BTreeMap::new(),
        });
    }
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
                assert!(crate::model::report::Reason::parse(r).is_some(), "{}: unknown reason {r}", c.file);
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
