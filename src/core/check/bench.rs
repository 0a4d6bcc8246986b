//! The bench and roofline rungs: a version that passed its check, timed on the GPU (beside the
//! best approved version and a CUDA reference, interleaved), then placed against the GPU's
//! ceilings.

use super::contract::{Climb, Rung, Step};
use super::runners_for;
use crate::model::report::{Stage, StageDetail, Verdict};
use crate::stages::bench;
use crate::stages::{StageOutcome, run};
use crate::store::{Status, Store, StoreError};
use crate::workspace::{Format, VersionFile, Workspace};

/// The bench rung.
pub struct Bench;

/// The roofline rung.
pub struct Roofline;

fn skipped(why: impl Into<String>) -> Step {
    Step::row(StageOutcome::new(Verdict::Skipped, why))
}

fn workers_failed(e: std::io::Error) -> Step {
    Step::row(StageOutcome::new(Verdict::Error, format!("cannot prepare the workers: {e}")))
}

impl Rung for Bench {
    fn stage(&self) -> Stage {
        Stage::Bench
    }

    fn climb(&self, cx: &mut Climb<'_>) -> Result<Step, StoreError> {
        if cx.at.opts.no_bench {
            return Ok(Step::Stop);
        }
        let (ws, machine, seed) = (cx.at.ws, cx.at.machine, cx.at.seed);
        let Some(gpu) = machine.gpu.first() else {
            return Ok(skipped("no GPU: bench and roofline skipped (no timing is invented)"));
        };
        let v = &cx.version;
        let (Some(spec), Format::Rung) = (ws.spec.as_ref(), ws.format) else {
            // A GPU MODE or KernelBench problem: its own inputs, against its own GPU reference.
            return Ok(match runners_for(ws, machine, cx.at.runners) {
                Ok(r) => Step::row(bench::bench_problem(ws, r, gpu, v, seed)),
                Err(e) => workers_failed(e),
            });
        };
        if !bench::benchable(v.kind) {
            return Ok(skipped(format!("benching {} versions is not built yet", v.kind)));
        }
        // The best approved version, re-benched interleaved with this one.
        let best = best_approved(ws, cx.at.store, &v.id);
        let r = match runners_for(ws, machine, cx.at.runners) {
            Ok(r) => r,
            Err(e) => return Ok(workers_failed(e)),
        };
        let plan = if v.kind.is_native() {
            run::NativePlan::new(ws, spec, v, &cx.source, Some(gpu.sm_count)).ok()
        } else {
            None
        };
        let launch_at = plan.as_ref().map(|p| p.launcher(spec));
        let target = match &launch_at {
            Some(f) => bench::Target::Native(f),
            None if v.kind.is_python() => bench::Target::python(v.path.clone(), &cx.source),
            None => {
                return Ok(skipped(format!(
                    "{} cannot be launched (see its prepare and run results)",
                    v.path.display()
                )));
            }
        };
        let best_plan = best
            .as_ref()
            .filter(|(b, _)| b.kind.is_native())
            .map(|(b, src)| run::NativePlan::new(ws, spec, b, src, Some(gpu.sm_count)).map_err(|d| d.message.clone()));
        let best_launch = best_plan.as_ref().and_then(|p| p.as_ref().ok()).map(|p| p.launcher(spec));
        let mut others = Vec::new();
        let mut notes = Vec::new();
        match (&best, &best_plan, &best_launch) {
            (None, _, _) => notes.push(
                "no other approved version has a passing bench: no speedup over the best approved version".into(),
            ),
            (Some((b, _)), Some(Err(e)), _) => {
                notes.push(format!("the best approved version {} cannot be launched: {e}", b.id))
            }
            (Some((b, _)), Some(Ok(p)), Some(f)) if p.cubin.exists() => others.push(bench::Other {
                role: bench::ROLE_BEST_APPROVED,
                label: b.id.clone(),
                target: bench::Target::Native(f),
            }),
            (Some((b, _)), Some(Ok(_)), _) => {
                notes.push(format!("the best approved version {} has no build: run `rung check {}` first", b.id, b.id))
            }
            (Some((b, src)), None, _) => others.push(bench::Other {
                role: bench::ROLE_BEST_APPROVED,
                label: b.id.clone(),
                target: bench::Target::python(b.path.clone(), src),
            }),
        }
        // A CUDA reference is a GPU baseline: timed interleaved like the best approved version. A
        // Python reference runs on the host with numpy, so no speedup over it is claimed.
        let ref_plan = match &cx.reference {
            Some(Ok((rv, src))) => match run::NativePlan::new(ws, spec, rv, src, Some(gpu.sm_count)) {
                Ok(p) if p.cubin.exists() => Some(p),
                Ok(_) => {
                    notes.push("the CUDA reference has no cubin: no speedup over it".into());
                    None
                }
                Err(d) => {
                    notes.push(format!("the CUDA reference cannot be launched: {}", d.message));
                    None
                }
            },
            Some(Err(e)) => {
                notes.push(format!("{e}: no speedup over it"));
                None
            }
            None => {
                if let Some(r) = &ws.reference {
                    notes.push(format!(
                        "the reference ({}) runs on the host with numpy: it is not a GPU baseline, so no speedup over it",
                        r.display()
                    ));
                }
                None
            }
        };
        let ref_launch = ref_plan.as_ref().map(|p| p.launcher(spec));
        if let (Some(f), Some(r)) = (&ref_launch, &ws.reference) {
            others.push(bench::Other {
                role: bench::ROLE_REFERENCE,
                label: r.display().to_string(),
                target: bench::Target::Native(f),
            });
        }
        let mut out = bench::bench(&mut bench::BenchCtx { ws, spec, runners: r, seed }, gpu, v, &target, &others);
        if let StageDetail::Bench(b) = &mut out.detail {
            b.comparison_notes.splice(0..0, notes);
        }
        if let (Verdict::Pass, StageDetail::Bench(b)) = (&out.verdict, &out.detail) {
            cx.benched = Some(b.clone());
        }
        Ok(Step::row(out))
    }
}

impl Rung for Roofline {
    fn stage(&self) -> Stage {
        Stage::Roofline
    }

    fn climb(&self, cx: &mut Climb<'_>) -> Result<Step, StoreError> {
        let (ws, machine) = (cx.at.ws, cx.at.machine);
        let (Some(spec), Format::Rung) = (ws.spec.as_ref(), ws.format) else {
            return Ok(skipped(
                "no roofline: a GPU MODE or KernelBench problem states no bytes or FLOPs (rung.toml's [roofline] does)",
            ));
        };
        let (Some(gpu), Some(b)) = (machine.gpu.first(), cx.benched.take()) else { return Ok(Step::Stop) };
        let r = match runners_for(ws, machine, cx.at.runners) {
            Ok(r) => r,
            Err(e) => return Ok(workers_failed(e)),
        };
        let torch = machine.toolchain.has_python_package("torch");
        Ok(Step::row(match bench::ceilings(r, gpu, torch) {
            Ok(c) => bench::roofline(spec, &b, c, gpu.sm_count as i64),
            Err(e) => StageOutcome::new(Verdict::Error, format!("measuring the GPU's ceilings: {e}")),
        }))
    }
}

/// The approved version (other than `this`, still in the workspace, benchable) with the fastest
/// passing bench in the history, with its source.
fn best_approved(ws: &Workspace, store: &Store, this: &str) -> Option<(VersionFile, String)> {
    let rows = store.versions().ok()?;
    let mut timed = Vec::new();
    for row in rows.iter().filter(|r| r.status == Status::Approved && r.id != this) {
        let Some(file) = ws.versions.iter().find(|f| f.id == row.id) else { continue };
        if !bench::benchable(file.kind) {
            continue;
        }
        // Versions never benched do not count.
        if let Some(b) = bench::passing_bench(&store.latest_results(&row.id).ok()?) {
            timed.push((file.clone(), b));
        }
    }
    let best = bench::fastest(&timed.iter().enumerate().map(|(i, (_, b))| (i, b)).collect::<Vec<_>>())?;
    let file = timed.swap_remove(best).0;
    let source = std::fs::read_to_string(ws.root.join(&file.path)).ok()?;
    Some((file, source))
}
