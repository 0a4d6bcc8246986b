//! The GPU suite's workspaces: the demo, GPU MODE folders and KernelBench checked, their benches, and the warm path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::check::{CheckOptions, Machine, check_with};
use crate::model::report::{Stage, Verdict};
use crate::runners::Runners;
use crate::store::Store;
use crate::workspace::Workspace;

use super::*;

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

pub(super) fn version_runs(label: &str, report: &crate::model::report::CheckReport) -> Vec<VersionRun> {
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

/// The reason code a fixture's name asks for: `v003-wrong-input-mutated.py` → input-mutated,
/// `v012-wrong-input-mutated-via-gc.py` too (the longest leading run of words that names a reason).
pub(super) fn expected_reason(name: &str) -> Option<crate::model::report::Reason> {
    let rest = name.rsplit('/').next()?.split_once("wrong-")?.1;
    let stem = rest.split_once('.').map_or(rest, |(s, _)| s);
    let words: Vec<&str> = stem.split('-').collect();
    (1..=words.len()).rev().find_map(|k| crate::model::report::Reason::parse(&words[..k].join("-")))
}

/// The demo workspace with the versions only the selftest adds: PTX, a `rung_run` host entry and
/// a cluster kernel.
pub(super) fn write_demo(demo: &Path) -> anyhow::Result<()> {
    crate::templates::write("rmsnorm", demo)?;
    for (name, text) in [PTX_VERSION, HOST_ENTRY_VERSION, CLUSTER_VERSION] {
        std::fs::write(demo.join("versions").join(name), text)?;
    }
    Ok(())
}

/// A CUDA reference for the vector-add template: a grid-stride loop with its own launch, so it
/// shares nothing with the versions checked against it.
pub(super) const CUDA_REFERENCE: &str = r#"// rung: grid=264 block=128
// The trusted reference, in CUDA: a grid-stride loop, one element at a time.
extern "C" __global__ void reference_add(const float* a, const float* b, float* out, int n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}
"#;

/// A version that is wrong past the first 1000 elements: only the largest test size sees it.
pub(super) const WRONG_AGAINST_CUDA: &str = r#"// rung: grid="cdiv(n, 256)" block=256
extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i < 1000 ? a[i] + b[i] : a[i] - b[i];
}
"#;

/// The vector-add template with `reference.cu` in place of `reference.py`, and a wrong version.
pub(super) fn write_cuda_reference(ws: &Path) -> anyhow::Result<()> {
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
        // A Triton version's build result, after the run: the kernels that launched. A version
        // whose run failed (one that launches none of its kernels, say) has none to list.
        let ran = |v: &&crate::model::report::VersionReport| {
            v.stages.iter().any(|s| s.stage == Stage::Run && s.verdict == Verdict::Pass)
        };
        for v in report.versions.iter().filter(|v| v.kind == crate::workspace::VersionKind::Triton).filter(ran) {
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
        // Right answers everywhere, the work skipped on inputs seen before: the call on fresh
        // inputs, timed as the timed calls are, does what they did not.
        (
            "GPU MODE outslot, bench",
            dir.join("gpu-mode").join("outslot"),
            "v024",
            Some(crate::model::report::Reason::Memoised),
        ),
        // Right answers in a check, a thread left doing the work after each timed call.
        (
            "GPU MODE outslot, bench",
            dir.join("gpu-mode").join("outslot"),
            "v022",
            Some(crate::model::report::Reason::LateWork),
        ),
    ];
    for (label, path, id, fails) in benched {
        out.extend(bench_run(label, &path, id, &machine, fails)?);
    }
    Ok(out)
}

/// One version benched, as a row: it passes when the bench passed and timed a speedup over the
/// reference, or, given `fails`, when the bench failed with that reason.
pub(super) fn bench_run(
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
    use super::expected_reason;
    use crate::model::report::Reason;

    #[test]
    fn a_fixture_name_asks_for_the_longest_reason_it_starts_with() {
        let cases = [
            ("versions/v003-wrong-input-mutated.py", Some(Reason::InputMutated)),
            ("v012-wrong-input-mutated-via-gc.py", Some(Reason::InputMutated)),
            ("v007-wrong-problem-check-large.py", Some(Reason::ProblemCheck)),
            ("v017-wrong-no-custom-kernel-cuda.py", Some(Reason::NoCustomKernel)),
            ("v020-wrong-harness-patched-builtin-swap.py", Some(Reason::HarnessPatched)),
            ("v009-wrong-l2-persisting.py", Some(Reason::L2Persisting)),
            ("v004-wrong-shape-mismatch.cu", Some(Reason::ShapeMismatch)),
            ("v005-wrong-mismatch.py", Some(Reason::Mismatch)),
            // No reason named: the verdict alone is checked.
            ("v021-wrong-judge-module-swapped.py", None),
            ("v030-wrong-shape.py", None),
            ("v001-fills-output.py", None),
        ];
        for (name, want) in cases {
            assert_eq!(expected_reason(name), want, "{name}");
        }
    }
}
