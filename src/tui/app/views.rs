//! The rows the panes show, read from the workspace and the history: versions, their
//! diagnostics with excerpts, the timing history per GPU.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use rung_core::diag::Diagnostic;
use rung_core::model::report::{Stage, StageDetail, StageResult, Verdict};
use rung_core::stages::bench::{BenchDetail, ROLE_REFERENCE, RooflineDetail, SizeBench};
use rung_core::store::Store;
use rung_core::workspace::{VersionFile, Workspace};

use crate::theme::Role;

use super::*;

pub(super) fn step(i: usize, n: usize, down: bool) -> usize {
    if n == 0 {
        0
    } else if down {
        (i + 1).min(n - 1)
    } else {
        i.saturating_sub(1)
    }
}

pub(super) fn version_view(ws: &Workspace, store: &Store, v: &VersionFile) -> Result<VersionView> {
    let root = ws.root.as_path();
    let row = store.version(&v.id)?;
    // Only results of the file as it is now, as on the text status screen.
    let all = rung_core::service::results(ws, store, v)?;
    let results: Vec<_> = all.current().cloned().collect();
    let mut view = VersionView {
        id: v.id.clone(),
        source_hash: all.source_hash.clone(),
        name: display_name(v),
        path: v.path.clone(),
        status: row.as_ref().map(|r| r.status),
        parent: row.as_ref().and_then(|r| r.parent.clone()),
        reason: row.and_then(|r| r.reason),
        verdicts: BTreeMap::new(),
        bench: None,
        speedup: None,
        roofline_percent: None,
        diagnostics: vec![],
        failures: vec![],
        results: BTreeMap::new(),
    };
    for r in &results {
        let Ok(stage) = serde_json::from_value::<Stage>(serde_json::Value::String(r.stage.clone())) else { continue };
        if let Some(verdict) = Verdict::parse(&r.verdict) {
            view.verdicts.insert(stage, verdict);
        }
        // A payload from an older layout still gives its verdict.
        let Ok(result) = serde_json::from_value::<StageResult>(r.payload.clone()) else { continue };
        if matches!(result.verdict, Verdict::Fail | Verdict::Error) {
            view.failures.push(format!("{}: {}", result.stage, result.summary));
        }
        match &result.detail {
            StageDetail::Bench(b) => {
                view.bench = b.sizes.first().cloned();
                view.speedup = b.speedups.iter().find(|s| s.role == "best approved").map(|s| s.speedup);
            }
            StageDetail::Roofline(r) => view.roofline_percent = r.percent_of_ceiling,
            _ => {}
        }
        view.diagnostics.extend(result.diagnostics.iter().cloned().map(|d| {
            let (excerpt, caret) = excerpt(root, &d).unzip();
            DiagnosticView { excerpt, caret: caret.flatten(), diagnostic: d }
        }));
        view.results.insert(stage, result);
    }
    Ok(view)
}

pub fn verdict_role(v: Verdict) -> Role {
    match v {
        Verdict::Pass => Role::Pass,
        Verdict::Fail => Role::Fail,
        Verdict::Error => Role::Error,
        Verdict::Skipped => Role::Skipped,
    }
}

/// The passing bench and roofline rows of the history, parsed once: a refresh reads only the
/// rows recorded since the last one (every row's payload parsed again on each refresh made a
/// reload of 200 versions cost tens of milliseconds).
#[derive(Default)]
pub struct TimingRows {
    /// Oldest first, so GPUs keep the order they were first benched in and newer rows win.
    benches: Vec<(String, String, BenchDetail)>,
    roofs: Vec<RooflineDetail>,
    last_bench: i64,
    last_roof: i64,
}

impl TimingRows {
    /// Reads the rows recorded since the last call, keeping the newest `HISTORY_ROWS` of each.
    fn update(&mut self, store: &Store) -> Result<()> {
        for r in store.stage_results_after(Stage::Bench.name(), self.last_bench, HISTORY_ROWS)? {
            self.last_bench = self.last_bench.max(r.id);
            if r.verdict != Verdict::Pass.name() {
                continue;
            }
            if let Ok(StageResult { detail: StageDetail::Bench(b), .. }) = serde_json::from_value(r.payload) {
                self.benches.push((r.version, r.source_hash, b));
            }
        }
        for r in store.stage_results_after(Stage::Roofline.name(), self.last_roof, HISTORY_ROWS)? {
            self.last_roof = self.last_roof.max(r.id);
            if r.verdict != Verdict::Pass.name() {
                continue;
            }
            if let Ok(StageResult { detail: StageDetail::Roofline(d), .. }) = serde_json::from_value(r.payload) {
                self.roofs.push(d);
            }
        }
        let keep = |n: usize| n.saturating_sub(HISTORY_ROWS);
        self.benches.drain(..keep(self.benches.len()));
        self.roofs.drain(..keep(self.roofs.len()));
        Ok(())
    }
}

/// Every version's newest passing bench per GPU, with the reference's time and the roofline's
/// floor on that GPU. This is history: a version edited since keeps its old point, marked.
pub(super) fn timing(rows: &mut TimingRows, store: &Store, versions: &[VersionView]) -> Result<Vec<GpuTiming>> {
    rows.update(store)?;
    let mut gpus: Vec<GpuTiming> = Vec::new();
    for (version, source_hash, b) in &rows.benches {
        let Some(ordinal) = versions.iter().position(|v| &v.id == version) else { continue };
        let Some(first) = b.sizes.first() else { continue };
        let key = if b.uuid.is_empty() { &b.gpu } else { &b.uuid };
        let gpu = match gpus.iter().position(|g| (if g.uuid.is_empty() { &g.gpu } else { &g.uuid }) == key) {
            Some(i) => &mut gpus[i],
            None => {
                gpus.push(GpuTiming { gpu: b.gpu.clone(), uuid: b.uuid.clone(), ..Default::default() });
                gpus.last_mut().expect("just pushed")
            }
        };
        let current = versions[ordinal].source_hash.as_ref() == Some(source_hash);
        let point = TimingPoint {
            version: version.clone(),
            ordinal,
            median_us: 0.0,
            min_us: 0.0,
            max_us: 0.0,
            current,
            bench: first.clone(),
        };
        gpu.points.retain(|p| &p.version != version);
        gpu.points.push(point);
        if let Some(r) = b.speedups.iter().find(|s| s.role == ROLE_REFERENCE) {
            gpu.reference_us = Some(r.other.median * 1e3);
        }
    }
    for r in &rows.roofs {
        let (Some(g), Some(pct)) = (
            gpus.iter_mut()
                .find(|g| if g.uuid.is_empty() { g.gpu == r.ceilings.gpu } else { g.uuid == r.ceilings.uuid }),
            r.percent_of_ceiling,
        ) else {
            continue;
        };
        g.roofline_us = Some(r.seconds * pct / 100.0 * 1e6);
    }
    for g in &mut gpus {
        g.points.sort_by_key(|p| p.ordinal);
        one_timer(g);
    }
    Ok(gpus)
}

/// Puts a GPU's points on one timer: when versions were timed by different ones (a CUDA version
/// by CUPTI, a Triton one or an older bench by events), each point becomes its time between
/// events, which every bench records; a device-wide point keeps its headline (its event time
/// misses the work left on another stream).
pub fn one_timer(g: &mut GpuTiming) {
    let benches: Vec<&SizeBench> = g.points.iter().map(|p| &p.bench).collect();
    g.mixed_timers = rung_core::stages::bench::mixed_timers(&benches);
    let figures: Vec<(f64, f64, f64)> = rung_core::stages::bench::one_timer(&benches)
        .0
        .into_iter()
        .map(|s| (s.median * 1e3, s.min * 1e3, s.max * 1e3))
        .collect();
    for (p, f) in g.points.iter_mut().zip(figures) {
        (p.median_us, p.min_us, p.max_us) = f;
    }
}

/// The newest result of each stage, kept only when it is of the same source as the newest result
/// of all: after an edit that fails to build, the old source's bench is not this version's.
pub(super) fn display_name(v: &VersionFile) -> String {
    let stem = v.path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let rest = stem.strip_prefix(&v.id).unwrap_or(&stem).trim_start_matches(['-', '_']);
    if rest.is_empty() { stem.clone() } else { rest.to_string() }
}

/// The diagnostic's line with tabs expanded to four spaces, and the caret's offset in it.
pub(super) fn excerpt(root: &Path, d: &Diagnostic) -> Option<(String, Option<usize>)> {
    let line = d.line.checked_sub(1)? as usize;
    let text = std::fs::read_to_string(root.join(&d.file)).ok()?;
    let raw = text.lines().nth(line)?;
    Some((raw.replace('\t', "    "), caret_offset(raw, d.column)))
}

/// Display offset of 1-based `column` in `line` once each tab takes four cells.
pub fn caret_offset(line: &str, column: u32) -> Option<usize> {
    let before = column.checked_sub(1)? as usize;
    Some(
        line.chars().take(before).map(|c| if c == '\t' { 4 } else { 1 }).sum::<usize>()
            + before.saturating_sub(line.chars().count()),
    )
}
