//! The ladder: [`climb`] loops over a table of rungs (the stage contract, [`super::contract`]), times each, records
//! its row (which also streams it) and stops at the first gate that does not pass. The two tables
//! are the CPU rungs ([`CPU`]: prepare, build), which the watcher runs on its build threads, and
//! the GPU rungs ([`GPU`]: run, the build's kernels captured at launch, check, bench, roofline),
//! which run in the GPU's lane.
//!
//! A new rung is a type implementing [`Rung`] and its place in one of the tables; what it needs
//! from the rungs before it is a field of [`Climb`].

use std::time::{Instant, SystemTime};

use super::contract::{Climb, Rung, Step};
use super::{record, reference_build, runners_for, stage_result};
use crate::model::report::{Stage, StageDetail, Verdict};
use crate::stages::StageOutcome;
use crate::stages::build::{self, BuildEnv};
use crate::stages::{prepare, run};
use crate::store::StoreError;

/// Climbs `rungs` in order. `false` when a newer save cancelled the climb: the rung it was on
/// records nothing, and nothing after it runs.
pub fn climb(rungs: &[&dyn Rung], cx: &mut Climb<'_>) -> Result<bool, StoreError> {
    for rung in rungs {
        let started = SystemTime::now();
        let t0 = Instant::now();
        let step = rung.climb(cx)?;
        if cx.cancelled() {
            return Ok(false);
        }
        let (outcome, tools) = match step {
            Step::Row(outcome, tools) => (*outcome, tools),
            Step::Next => continue,
            Step::Stop => {
                cx.stopped = true;
                break;
            }
        };
        let go_on = !rung.gates() || outcome.verdict == Verdict::Pass;
        let result = stage_result(rung.stage(), (started, t0), outcome, tools);
        let row = record(cx.at.store, &cx.version, &cx.source_hash, cx.at.seed, started, result)?;
        match cx.stages.iter().position(|s| s.stage == row.stage) {
            Some(i) => cx.stages[i] = row,
            None => cx.stages.push(row),
        }
        if !go_on {
            cx.stopped = true;
            break;
        }
    }
    Ok(true)
}

/// The CPU rungs, in order.
pub const CPU: &[&dyn Rung] = &[&Prepare, &Build];

/// The GPU rungs before the bench, in order, for a version whose CPU rungs passed.
pub const GPU_CHECKS: &[&dyn Rung] = &[&Run, &Captured, &Check];

/// The bench rungs, for a version whose check rungs did not stop the climb.
pub const GPU_BENCHES: &[&dyn Rung] = &[&super::bench::Bench, &super::bench::Roofline];

/// Static checks before compiling.
pub struct Prepare;

impl Rung for Prepare {
    fn stage(&self) -> Stage {
        Stage::Prepare
    }

    fn climb(&self, cx: &mut Climb<'_>) -> Result<Step, StoreError> {
        if let Some(e) = &cx.read_error {
            let why = format!("cannot read {}: {e}", cx.version.path.display());
            return Ok(Step::row(StageOutcome::new(Verdict::Error, why)));
        }
        // A Python file that does not parse fails here, at its line, before anything binds.
        let python = cx.at.machine.toolchain.python.as_ref().filter(|_| cx.version.kind.is_python());
        if let Some(d) = python.and_then(|py| prepare::python_syntax(&py.path, &cx.version.path, &cx.source)) {
            let mut out = StageOutcome::new(Verdict::Fail, format!("{}: {}", d.location(), d.message));
            out.diagnostics.push(d);
            return Ok(Step::row(out));
        }
        Ok(Step::row(prepare::prepare(cx.at.ws.format, cx.at.ws.spec.as_ref(), &cx.version, &cx.source)))
    }
}

/// The compile: nvcc or NVRTC for CUDA, Triton and CuTe DSL ahead of time.
pub struct Build;

impl Rung for Build {
    fn stage(&self) -> Stage {
        Stage::Build
    }

    fn climb(&self, cx: &mut Climb<'_>) -> Result<Step, StoreError> {
        let machine = cx.at.machine;
        let env = BuildEnv {
            ws: cx.at.ws,
            toolchain: &machine.toolchain,
            gpu_arch: machine.gpu.first().map(|g| g.arch()),
            timeout: cx.at.ws.build_limit(),
            triton_at_launch: machine.gpu.first().is_some() && machine.toolchain.has_python_package("torch"),
            cancel: cx.at.cancel.cloned(),
        };
        let b = build::build(&env, cx.at.store, &cx.version, &cx.source)?;
        let outcome = StageOutcome {
            verdict: b.verdict,
            summary: b.summary,
            diagnostics: b.diagnostics,
            detail: b.detail,
            reason: None,
        };
        Ok(Step::Row(Box::new(outcome), b.tools))
    }
}

/// The version's run on the workers, which also judges its outputs (the check rung records
/// that). A CUDA reference is built first, once, for the run and the bench.
pub struct Run;

impl Rung for Run {
    fn stage(&self) -> Stage {
        Stage::Run
    }

    fn gates(&self) -> bool {
        false
    }

    fn climb(&self, cx: &mut Climb<'_>) -> Result<Step, StoreError> {
        let (ws, machine) = (cx.at.ws, cx.at.machine);
        cx.reference = reference_build(ws, cx.at.store, machine);
        let out = match runners_for(ws, machine, cx.at.runners) {
            Ok(r) => {
                let gpu = machine.gpu.first();
                let env = run::RunEnv {
                    toolchain: &machine.toolchain,
                    gpu_sms: gpu.map(|g| g.sm_count),
                    gpu_arch: gpu.map(|g| g.compute_capability),
                    reference: cx.reference.clone(),
                };
                run::run_and_check(ws, &env, r, &cx.version, &cx.source, cx.at.seed)
            }
            Err(e) => run::RunOutcome {
                run: StageOutcome::new(Verdict::Error, format!("cannot prepare the workers: {e}")),
                check: None,
            },
        };
        if let StageDetail::Run(r) = &out.run.detail {
            cx.launched = r.launched.clone();
        }
        cx.check = out.check;
        Ok(Step::row(out.run))
    }
}

/// A Triton version compiled at launch: the kernels that ran become its build's artefacts, in
/// the build's row.
pub struct Captured;

impl Rung for Captured {
    fn stage(&self) -> Stage {
        Stage::Build
    }

    fn gates(&self) -> bool {
        false
    }

    fn climb(&self, cx: &mut Climb<'_>) -> Result<Step, StoreError> {
        let at_launch = cx.stages.iter().find(|s| s.stage == Stage::Build && matches!(s.detail, StageDetail::None));
        let (Some(row), Some(g)) = (at_launch, cx.at.machine.gpu.first()) else { return Ok(Step::Next) };
        let Some((verdict, summary, detail)) =
            build::captured(cx.at.ws, &cx.at.machine.toolchain, &g.arch(), &cx.launched)
        else {
            return Ok(Step::Next);
        };
        let outcome =
            StageOutcome { verdict, summary, diagnostics: vec![], detail: StageDetail::Build(detail), reason: None };
        Ok(Step::Row(Box::new(outcome), row.tools.clone()))
    }
}

/// The outputs against the reference, as the run judged them.
pub struct Check;

impl Rung for Check {
    fn stage(&self) -> Stage {
        Stage::Check
    }

    fn climb(&self, cx: &mut Climb<'_>) -> Result<Step, StoreError> {
        Ok(cx.check.take().map_or(Step::Stop, Step::row))
    }
}
