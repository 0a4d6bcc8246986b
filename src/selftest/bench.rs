//! The GPU suite's bench rows: each demo kernel timed and compared with Nsight Compute.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::check::{CheckOptions, Machine, check_with};
use crate::model::report::{Stage, Verdict};
use crate::store::Store;
use crate::workspace::Workspace;

use super::*;

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
pub(super) fn with_bench_limit(toml: &str, budget: &str) -> anyhow::Result<String> {
    let mut doc: toml_edit::DocumentMut = toml.parse()?;
    doc["limits"]["bench"] = toml_edit::value(budget);
    Ok(doc.to_string())
}

/// What a bench run of the selftest must show, beyond a pass.
pub(super) fn bench_expectations(
    label: &str,
    version: &str,
    b: Option<&crate::stages::bench::BenchDetail>,
    after_another: bool,
) -> Vec<String> {
    let mut why = Vec::new();
    let Some(b) = b else { return why };
    // One check of one problem at one size: every version after the first is timed on the input
    // sets the first drew, unless a bench changed them.
    if after_another && b.phases.contains_key(crate::stages::bench::PHASE_DRAWN) {
        why.push("the kept input sets were drawn again: an earlier bench changed them".into());
    }
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
        // c-poison-only.cu against the approved c-good.cu: the same work on every call, so
        // the same time, unless some timed calls found their outputs written.
        "poison-only" if version.starts_with("v101") => match speedup {
            Some(s) if s.against == "v001" && !s.suspicious && (0.8..1.25).contains(&s.speedup) => {}
            Some(s) => why.push(format!(
                "a kernel that works only on poisoned outputs was timed at {:.2}x the honest one{}",
                s.speedup,
                if s.suspicious { " (suspicious)" } else { "" }
            )),
            None => why.push(format!("no speedup over v001: {}", b.comparison_notes.join("; "))),
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
/// over approved versions (one flagged suspicious), the side-stream case, a kernel that works
/// only on poisoned outputs against the honest one, and a small problem
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
    // A kernel that works only while its outputs hold the poison, against the honest one.
    let poison = dir.join("poison-only");
    fault_workspace(&poison, &FaultOptions { gpu: true, order_seed: 0, run_limit: "10s".into() })?;
    let f = FAULTS.get_file("c-poison-only.cu").expect("embedded");
    std::fs::write(poison.join("versions").join("v101-candidate.cu"), f.contents())?;
    // A small problem, so the graph replay of small kernels runs for a CUDA and a Triton version.
    let small = dir.join("small");
    crate::templates::write("vector-add", &small)?;
    let path = small.join("rung.toml");
    let toml = std::fs::read_to_string(&path)?.replace("bench = [{ n = 67108864 }]", "bench = [{ n = 65536 }]");
    std::fs::write(&path, toml)?;
    // A shorter bench budget than the default: this runs many benches.
    for (ws, budget) in [(&demo, "8s"), (&side, "8s"), (&poison, "8s"), (&small, "4s")] {
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
        // The honest one benched first, then approved: an approved version is timed against
        // only once it has a bench.
        ("poison-good", poison.as_path(), v(&["v001"]), vec![]),
        ("poison-only", poison.as_path(), v(&["v101"]), v(&["v001"])),
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
            // Whether a version of this check was benched before: the next is timed on the input
            // sets it drew (one seed per check: the repeat run's checks each draw their own).
            let mut kept = false;
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
                    unexpected: bench_expectations(label, &v.id, detail, kept),
                });
                kept |= detail.is_some_and(|d| !d.sizes.is_empty());
            }
        }
    }
    Ok((out, serde_json::Value::Object(reports)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::bench::{BenchDetail, Speedup};

    fn against_good(speedup: f64) -> BenchDetail {
        BenchDetail {
            speedups: vec![Speedup {
                role: "best approved".into(),
                against: "v001".into(),
                sizes: Default::default(),
                this: Default::default(),
                other: Default::default(),
                speedup,
                speedup_low: speedup,
                speedup_high: speedup,
                rounds: 4,
                suspicious: speedup > crate::stages::bench::SUSPICIOUS_SPEEDUP,
            }],
            ..Default::default()
        }
    }

    /// The kernel that works only on poisoned outputs must be timed as the honest one is: a
    /// bench that let its calls find the last answer shows it many times faster.
    #[test]
    fn the_poison_only_kernel_must_time_as_the_honest_one() {
        let ok = |v: &str, b: &BenchDetail| bench_expectations("poison-only", v, Some(b), false);
        assert!(ok("v101", &against_good(1.01)).is_empty());
        let cheat = ok("v101", &against_good(60.0));
        assert!(cheat[0].contains("60.00x the honest one (suspicious)"), "{cheat:?}");
        assert_eq!(ok("v101", &BenchDetail::default()).len(), 1, "no comparison is no evidence");
        assert!(ok("v001", &BenchDetail::default()).is_empty(), "the honest one is benched alone");
    }
}
