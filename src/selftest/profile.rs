//! The GPU suite's profile rows: Nsight Compute and compute-sanitizer on the demo.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::check::{CheckOptions, Machine, check_with};
use crate::model::report::{Stage, Verdict};
use crate::store::Store;
use crate::workspace::Workspace;

use super::*;

/// A version whose reduction lacks its barrier, for racecheck.
pub(super) const RACE_VERSION: (&str, &str) =
    ("v102-race.cu", include_str!("../../tests/fixtures/profile/v102-race.cu"));

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
/// on the out-of-bounds fault (which rung's guard zones catch without a fault) and on a good CUDA
/// and a good Triton version, racecheck on a reduction without its barrier, each tool's target
/// in the sandbox when the mode is strict. `exe` is this binary.
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
        // A Triton version forks under compute-sanitizer's process tracking: inside the sandbox
        // its first fork once waited for ever on the tracker's FIFO (sandbox::ToolTracking).
        ("v004", Sanitizer::Memcheck, Verdict::Pass, None),
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
