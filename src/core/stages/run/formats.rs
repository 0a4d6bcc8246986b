//! GPU MODE problem folders and KernelBench files, run in the Python worker their own way: a
//! compile phase, then two judged cases per test on fresh inputs.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::diag::{Diagnostic, Pos};
use crate::model::protocol::{self, CallMode, WorkerError};
use crate::model::report::{Reason, StageDetail, Verdict};
pub use crate::model::run::{CheckDetail, OutputCheck, OwnCheck, RunDetail, SizeRun};
use crate::runners::{Failure, Runners};
use crate::spec::SizeSet;
use crate::stages::problem::{SeedDraw, problem_seed_range, read_task_yml};
use crate::stages::{StageOutcome, reason_for};
use crate::toolchain::Toolchain;
use crate::workspace::{Format, VersionFile, Workspace};

use super::judge::*;
use super::judging::*;
use super::probe::{ProbeLost, ProbeRequests, sparse_probe};
use super::*;

// ---------------------------------------------------------------------------------------------
// GPU MODE and KernelBench

/// The integer arguments of a test, as a size set for display.
fn args_label(args: &BTreeMap<String, serde_json::Value>) -> SizeSet {
    // The seed is rung's and stands in the check's summary; the label names the sizes.
    args.iter().filter(|(k, _)| k.as_str() != "seed").filter_map(|(k, v)| v.as_i64().map(|i| (k.clone(), i))).collect()
}

/// Runs a version of a GPU MODE problem at each test of task.yml, and on the GPU at each of its
/// benchmarks too (a version correct only at the test sizes fails), or a KernelBench version
/// at its published inputs, in a forked child, the problem's own way: `generate_input(**test)`
/// with the test's seed replaced by one drawn from rung's, `custom_kernel(data)` beside
/// `ref_kernel(data)` and the problem's `check_implementation`; or `Model`/`ModelNew` built from
/// `get_init_inputs()` with weights seeded identically, on `get_inputs()`.
///
/// The version first gets a compile phase under `limits.build`: one unjudged call, where
/// `load_inline`, `torch.compile` and Triton compile. Each test then runs two cases on fresh
/// inputs (the second under a further seed), their output slots poisoned with two patterns.
/// The format's own rule decides pass or fail (GPU MODE's check_implementation, KernelBench's
/// allclose at atol = rtol = 1e-2); rung's metrics stand beside it, and where the two disagree,
/// or a vacuous answer would pass the rule too, the check says so in a warning with the
/// figures. rung's own defences fail a version whatever the rule says: an input it changed,
/// output elements it never wrote, a process it ended.
pub fn run_problem(
    ws: &Workspace,
    tc: &Toolchain,
    runners: &mut Runners,
    v: &VersionFile,
    seed: u64,
    mode: CallMode,
) -> RunOutcome {
    let Some(problem) = ws.reference.clone() else {
        return skipped("the problem file was not found");
    };
    let format = if ws.format == Format::GpuMode {
        protocol::ProblemFormat::GpuMode
    } else {
        protocol::ProblemFormat::KernelBench
    };
    let on_gpu = mode == CallMode::Cuda;
    // (arguments, cases, a benchmark re-checked)
    let mut tests: Vec<(BTreeMap<String, serde_json::Value>, usize, bool)> = Vec::new();
    if format == protocol::ProblemFormat::GpuMode {
        match read_task_yml(&ws.root.join("task.yml")) {
            Ok(t) if !t.tests.is_empty() => {
                tests.extend(t.tests.into_iter().map(|a| (a, 2, false)));
                if on_gpu {
                    tests.extend(t.benchmarks.into_iter().map(|a| (a, 1, true)));
                }
            }
            Ok(_) => return failed(Verdict::Error, None, "task.yml lists no tests"),
            Err(d) => {
                let mut out = failed(Verdict::Error, None, d.message.clone());
                out.run.diagnostics.push(d);
                return out;
            }
        }
    } else {
        tests.push((BTreeMap::new(), 2, false));
    }
    let limits = crate::spec::Limits::default();
    // What a judged request may take: rung's work around the version's call is most of it at
    // large sizes (the version's process draws, digests and poisons the inputs and hands the
    // outputs over; the judge's draws them again, runs the reference, the f64 metrics and the
    // problem's check). That time is rung's, not the version's: four times the run limit, while
    // the version's own call (each record's `seconds`) is held to the run limit itself
    // ([`slow_call`]). With torch on the 2-core CPU machine, KernelBench's 40_LayerNorm took
    // 40-50 s to judge, and 19_ReLU's 6.4 GB tensors most of 30 s to hand over.
    let request_limit = limits.run * 4;
    let interpret = mode != CallMode::Cuda;
    let mut phases = BTreeMap::new();
    let warm = runners.warm(interpret);
    let t0 = Instant::now();
    let fork = runners.zygote(interpret).and_then(|z| {
        if !warm {
            phases.insert("zygote_start".to_string(), t0.elapsed().as_secs_f64());
            phases.extend(crate::runners::start_phases(z.hello()));
        }
        z.fork(mode, limits.run.max(Duration::from_secs(30)))
    });
    match fork {
        Ok(r) if r.ok => phases.extend(r.phases),
        Ok(r) => {
            let e = r.error.unwrap_or_else(|| WorkerError::new("WorkerDied", ""));
            return failed(Verdict::Error, None, format!("the Python worker's child could not start: {}", e.message));
        }
        Err(e) => return failed(Verdict::Error, None, format!("the Python worker could not fork: {e}")),
    }
    let tolerances: BTreeMap<String, [f64; 2]> = crate::dtype::ALL
        .iter()
        .map(|d| {
            let t = d.default_tolerance();
            (d.name().to_string(), [t.atol, t.rtol])
        })
        .collect();
    let mut runs = Vec::new();
    let mut checks = Vec::new();
    let mut own = Vec::new();
    let mut warn_groups: Vec<(String, String, usize)> = Vec::new();
    let mut launched = Vec::new();
    let mut run_fail: Option<(Verdict, Option<Reason>, String, Option<Diagnostic>)> = None;
    let mut check_fail: Option<(Reason, String)> = None;
    let who = if format == protocol::ProblemFormat::GpuMode {
        "the problem's check_implementation"
    } else {
        "KernelBench's rule"
    };
    // rung's seeds, not the file's, so a version cannot learn its inputs; drawn in the file's
    // own range, since a problem may build its data from the seed's value (pmpp_v2's sort adds
    // it to every element: at 2^31 an f32 row collapses to one value).
    let seed_range = problem_seed_range(&tests);
    // The version's path is relative to the workspace, wherever rung runs from.
    let version_source = ws.read_source(v).unwrap_or_default();
    let declares_kernels = !declared_kernels(&version_source).is_empty();
    let declares_cuda = !declared_cuda_kernels(&version_source).is_empty();
    let mut seeds_of = SeedDraw::new(seed, seed_range);
    let plan: Vec<Planned> =
        tests.iter().enumerate().map(|(ti, (a, n, b))| Planned::new(ti, a, *n, *b, &mut seeds_of)).collect();
    let mut hints: Option<protocol::JudgeHints> = None;
    let req_for =
        |p: &Planned, warmup: bool, hints: &protocol::JudgeHints, seeds: Vec<u64>, no_tf32: bool, dump: &Path| {
            protocol::Problem {
                format,
                problem: problem.clone(),
                version: v.path.clone(),
                args: p.args.clone(),
                seed: p.test_seed,
                seeds,
                tolerances: tolerances.clone(),
                warmup,
                benchmark: p.is_bench,
                list_kernels: warmup && declares_kernels,
                list_gpu_kernels: warmup && declares_cuda,
                dump: (!warmup).then(|| dump.to_path_buf()),
                hints: hints.clone(),
                no_tf32,
                sparse_call: false,
            }
        };
    let judge_req = |p: &Planned, learn: bool, observed: Vec<serde_json::Value>, dump: &Path| protocol::Judge {
        format,
        problem: problem.clone(),
        args: p.args.clone(),
        seed: if learn { *p.seeds.last().unwrap_or(&p.test_seed) } else { p.test_seed },
        learn,
        observed,
        dump: Some(dump.to_path_buf()),
        tolerances: tolerances.clone(),
        probe: !p.is_bench,
        recheck: false,
        sparse_call: false,
    };
    // The version's judged call of a test, made while the judge's process judges the test
    // before it ([`Prefetched`]).
    let mut prefetched: Option<Prefetched> = None;
    for (ti, p) in plan.iter().enumerate() {
        let label = p.label.clone();
        let label_sizes = p.label_sizes.clone();
        let dump = runners.data().join(format!("judged-{ti}"));
        let mut outcome = None;
        for attempt in 0..2 {
            let mut steps = vec![(false, request_limit)];
            if ti == 0 && attempt == 0 {
                // The compile phase: one unjudged call under the build limit.
                steps.insert(0, (true, limits.build));
            }
            let mut resp = None;
            let mut learning: Option<Instant> = None;
            for (warmup, limit) in steps {
                let hint = hints.clone().unwrap_or_default();
                let r = if warmup {
                    // While the version compiles, the judge's process starts and learns what
                    // the problem's inputs and reference look like (the output slots, the inputs
                    // it can draw again) for the judged calls.
                    let sent = runners.zygote(interpret).and_then(|z| {
                        z.send(protocol::Op::Problem(req_for(p, true, &hint, p.seeds.clone(), false, &dump)))
                    });
                    if hints.is_none() {
                        learning = Some(Instant::now());
                        if let Err(f) = judge_send(runners, mode, judge_req(p, true, vec![], &dump), limits.build) {
                            run_fail = Some(f.at(&label));
                        }
                    }
                    sent.and_then(|_| runners.zygote(interpret).and_then(|z| z.receive(limit)))
                } else {
                    if hints.is_none() {
                        let t_learn = learning.unwrap_or_else(Instant::now);
                        let learnt = match learning {
                            Some(_) => judge_receive(runners, mode, limits.build),
                            None => judge_call(runners, mode, judge_req(p, true, vec![], &dump), limits.build),
                        };
                        match learnt {
                            Ok(r) => {
                                crate::stats::add_phases(&mut phases, &r.phases);
                                // The judge's start (its zygote, the fork, CUDA) and what it learnt.
                                phases.insert("judge_start".into(), t_learn.elapsed().as_secs_f64());
                                hints = Some(r.hints.unwrap_or_default());
                            }
                            Err(f) => {
                                run_fail.get_or_insert(f.at(&label));
                                break;
                            }
                        }
                    }
                    let hint = hints.clone().unwrap_or_default();
                    match prefetched.take() {
                        Some(pf) if pf.test == ti && pf.hints == hint && attempt == 0 => pf.answer,
                        other => {
                            if let Some(pf) = other {
                                let _ = std::fs::remove_dir_all(&pf.dump);
                            }
                            runners.scratch(&format!("judged-{ti}"));
                            let seeds = p.seeds[..p.ncases].to_vec();
                            runners.zygote(interpret).and_then(|z| {
                                z.call(protocol::Op::Problem(req_for(p, false, &hint, seeds, false, &dump)), limit)
                            })
                        }
                    }
                };
                if run_fail.is_some() {
                    break;
                }
                let stage = if warmup { "while compiling (its first call)" } else { "" };
                match r {
                    Ok(r) if r.ok => {
                        crate::stats::add_phases(&mut phases, &r.phases);
                        launched.extend(r.kernels.clone());
                        if warmup
                            && let Some(p) = &r.problem
                            && let Some(f) = compile_phase_verdict(p, &version_source)
                        {
                            run_fail = Some((Verdict::Fail, Some(f.0), format!("{} (at {label})", f.1), None));
                            break;
                        }
                        resp = Some(r);
                    }
                    Ok(r) => {
                        let e = r.error.unwrap_or_else(|| WorkerError::new("error", ""));
                        let at = if stage.is_empty() { format!("at {label}") } else { format!("{stage}, at {label}") };
                        if let Some((verdict, why)) = problem_code_failed(&e) {
                            // Said in the version's process, where the version's code ran (it can
                            // raise an exception of that name itself): it stands only when the
                            // judge's process, which never ran it, fails the same way drawing this
                            // test; otherwise the failure is the version's.
                            let judge = judge_call(runners, mode, judge_req(p, true, vec![], &dump), limits.build);
                            if matches!(&judge, Err(JudgeFailed(j, ..)) if *j == verdict) {
                                run_fail = Some((verdict, None, format!("{why} ({at})"), None));
                            } else {
                                let (msg, d) = error_at(&e, &v.path);
                                run_fail = Some((
                                    Verdict::Fail,
                                    Some(Reason::Exception),
                                    format!("{msg}, which the judge's process drawing the same test did not ({at})"),
                                    Some(d),
                                ));
                            }
                            break;
                        }
                        // With no GPU here, a version that asked for CUDA cannot be judged here:
                        // it would run on a GPU.
                        if !on_gpu && asks_for_a_gpu(&e) {
                            let why = shorten(&one_line(&format!("{}: {}", e.kind, e.message)), 240);
                            run_fail = Some((
                                Verdict::Skipped,
                                None,
                                format!("no GPU: the version asked for one ({why}) ({at})"),
                                None,
                            ));
                            break;
                        }
                        let (msg, d) = error_at(&e, &v.path);
                        run_fail = Some((Verdict::Fail, Some(reason_for(&e)), format!("{msg} ({at})"), Some(d)));
                        break;
                    }
                    Err(f) => {
                        let at = if stage.is_empty() { format!("at {label}") } else { format!("{stage}, at {label}") };
                        let (verdict, reason) = failure_reason(&f);
                        let what = match &f {
                            Failure::Timeout(d) if warmup => format!(
                                "no answer within limits.build ({}s) while compiling (its first call), at {label}",
                                d.as_secs()
                            ),
                            _ => format!("{f} ({at})"),
                        };
                        run_fail = Some((verdict, reason, what, None));
                        break;
                    }
                }
            }
            if run_fail.is_some() {
                break;
            }
            let observed = resp.and_then(|r| r.problem).map(|p| p.observed).unwrap_or_default();
            if observed.is_empty() {
                run_fail = Some((Verdict::Error, None, "the worker returned no outputs".into(), None));
                break;
            }
            if let Some(s) = slow_call(&observed, limits.run) {
                run_fail = Some((
                    Verdict::Fail,
                    Some(Reason::Timeout),
                    format!(
                        "the version's call took {s:.1} s at {label}, past limits.run ({} s)",
                        limits.run.as_secs()
                    ),
                    None,
                ));
                break;
            }
            // The verdict, from a process that never ran the version; meanwhile the version's
            // process makes its judged call of the next test.
            let sent = judge_send(runners, mode, judge_req(p, false, observed, &dump), request_limit);
            if sent.is_ok()
                && let Some(q) = plan.get(ti + 1)
            {
                let hint = hints.clone().unwrap_or_default();
                let next = runners.scratch(&format!("judged-{}", ti + 1));
                let seeds = q.seeds[..q.ncases].to_vec();
                let answer = runners.zygote(interpret).and_then(|z| {
                    z.call(protocol::Op::Problem(req_for(q, false, &hint, seeds, false, &next)), request_limit)
                });
                prefetched = Some(Prefetched { test: ti + 1, hints: hint, dump: next, answer });
            }
            let t_wait = Instant::now();
            let judged = sent.and_then(|_| judge_receive(runners, mode, request_limit));
            *phases.entry("judge_wait".into()).or_insert(0.0) += t_wait.elapsed().as_secs_f64();
            match judged {
                Ok(r) if !r.redo.is_empty() && attempt == 0 => {
                    // Inputs the problem draws differently each time: kept, and the test again.
                    if let Some(h) = hints.as_mut() {
                        h.regenerable.retain(|n| !r.redo.contains(n));
                    }
                }
                Ok(r) => {
                    crate::stats::add_phases(&mut phases, &r.phases);
                    if let Some(h) = r.hints {
                        hints = Some(h);
                    }
                    outcome = r.problem;
                    break;
                }
                Err(f) => {
                    run_fail = Some(f.at(&label));
                    break;
                }
            }
        }
        // The problem's own check failed f32 outputs with TF32 on: does it pass with TF32 off?
        if run_fail.is_none()
            && let Some(o) = outcome.as_mut()
            && let Some(case) = o.cases.iter_mut().find(|c| c.tf32_suspect)
        {
            let hint = hints.clone().unwrap_or_default();
            let again = runners
                .zygote(interpret)
                .and_then(|z| {
                    z.call(protocol::Op::Problem(req_for(p, false, &hint, vec![case.seed], true, &dump)), request_limit)
                })
                .ok()
                .filter(|r| r.ok)
                .and_then(|r| r.problem)
                .map(|p| p.observed)
                .and_then(|observed| {
                    judge_call(runners, mode, judge_req(p, false, observed, &dump), request_limit).ok()
                })
                .and_then(|r| r.problem);
            if again.is_some_and(|p| p.cases.iter().all(|c| c.own.as_ref().is_some_and(|o| o.pass))) {
                case.notes.push(TF32_NOTE.into());
            }
        }
        let _ = std::fs::remove_dir_all(&dump);
        if run_fail.is_some() {
            break;
        }
        let Some(outcome) = outcome else {
            run_fail = Some((Verdict::Error, None, "the judge returned no verdict".into(), None));
            break;
        };
        let t_metrics = Instant::now();
        let judged = judge_cases(&outcome.cases, &label);
        runs.push(SizeRun {
            sizes: label_sizes.clone(),
            seconds: outcome.cases.iter().rev().find(|c| c.probe.is_none()).map_or(0.0, |c| c.seconds),
            unwritten: judged.unwritten.clone(),
            pending_ms: None,
        });
        *phases.entry("run".into()).or_insert(0.0) += outcome.cases.iter().map(|c| c.seconds).sum::<f64>();
        if let Some(f) = judged.run_fail {
            run_fail = Some((Verdict::Fail, Some(f.0), f.1, None));
            break;
        }
        // One warning per kind and output, however many tests say it.
        for (key, w) in judged.warnings {
            match warn_groups.iter_mut().find(|g| g.0 == key) {
                Some(g) => g.2 += 1,
                None => warn_groups.push((key, w, 1)),
            }
        }
        if let Some(f) = judged.check_fail {
            check_fail.get_or_insert(f);
        }
        for c in judged.checks {
            checks.push(OutputCheck { sizes: label_sizes.clone(), ..c });
        }
        *phases.entry("metrics".into()).or_insert(0.0) += t_metrics.elapsed().as_secs_f64();
        if let Some(o) = judged.own {
            if !o.pass && check_fail.is_none() {
                let reason = if judged.shape_differs { Reason::ShapeMismatch } else { Reason::ProblemCheck };
                let mut why = format!("{who} fails at {label}: ");
                for n in &judged.notes {
                    why.push_str(&format!("{n}; "));
                }
                why.push_str(&shorten(&one_line(&o.message), 320));
                check_fail = Some((reason, why));
            }
            own.push(OwnCheck { sizes: label_sizes, verdict: o });
        }
    }
    // A next test's call made for a test never judged (an earlier one failed).
    if let Some(pf) = prefetched {
        let _ = std::fs::remove_dir_all(&pf.dump);
    }
    // The sparse probe, last: every test is judged before it, so a version that breaks on a
    // draw moved out of the problem's range (a crash, a sticky CUDA error, a hang) loses only
    // the probe's verdict. On the last test planned, the largest (a benchmark on a GPU, where a
    // version that samples only at the timed sizes does it), learnt again there when the judge
    // learnt it at another test. Of a version already failing it would add nothing.
    if run_fail.is_none()
        && check_fail.is_none()
        && let Some(hint) = hints.clone().filter(|h| h.sparse.is_some())
        && let Some(p) = plan.last()
    {
        let t = Instant::now();
        let dump = runners.scratch("judged-probe");
        let call = protocol::Problem { sparse_call: true, ..req_for(p, false, &hint, vec![p.test_seed], false, &dump) };
        let judge = protocol::Judge { sparse_call: true, probe: false, ..judge_req(p, false, vec![], &dump) };
        let learn = (plan.len() > 1)
            .then(|| (protocol::Judge { probe: true, ..judge_req(p, true, vec![], &dump) }, limits.build));
        // Fresh draws of the same test, for a probe made again while its answer differs.
        let more: Vec<u64> = (0..PROBE_AGAIN).map(|_| seeds_of.draw()).collect();
        let asked = ProbeRequests { learn, call, judge, more, limit: request_limit };
        match sparse_probe(runners, interpret, mode, asked) {
            Ok(None) => {}
            Ok(Some(cases)) => {
                let judged = judge_cases(&cases, &p.label);
                match judged.run_fail {
                    // What a version does to rung's harness, its timers or its outputs' type
                    // holds whatever the draw.
                    Some((r @ (Reason::HarnessPatched | Reason::TimerPatched | Reason::LazyOutput), why)) => {
                        run_fail = Some((Verdict::Fail, Some(r), why, None));
                    }
                    // Out of the problem's range a version may do what it likes with its
                    // inputs and outputs: said, not held against it.
                    Some((_, why)) => {
                        warn_groups.push(("probe".into(), format!("on the sparse probe's draw, {why}"), 1))
                    }
                    None => {}
                }
                check_fail = judged.check_fail.filter(|(r, _)| *r == Reason::InputIgnored);
                for (key, w) in judged.warnings.into_iter().filter(|(k, _)| k == "probe") {
                    if !warn_groups.iter().any(|g| g.0 == key) {
                        warn_groups.push((key, w, 1));
                    }
                }
            }
            Err(ProbeLost::Forged(why)) => {
                run_fail = Some((
                    Verdict::Fail,
                    Some(Reason::ForgedReply),
                    format!("{why} (at {}, the sparse probe)", p.label),
                    None,
                ));
            }
            Err(ProbeLost::Unjudged(why)) => {
                if !warn_groups.iter().any(|g| g.0 == "probe") {
                    warn_groups.push((
                        "probe".into(),
                        format!("the sparse probe at {} was not judged: {why}", p.label),
                        1,
                    ));
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dump);
        phases.insert("probe".into(), t.elapsed().as_secs_f64());
    }
    let warnings: Vec<String> = warn_groups
        .into_iter()
        .map(|(_, w, n)| if n > 1 { format!("{w} (and at {} more)", n - 1) } else { w })
        .collect();
    runners.end_children();
    let launched = keep_launched(ws, crate::stages::build::sass::Disassembler::of(tc), v, launched);
    let run_detail = StageDetail::Run(RunDetail {
        mode: if on_gpu { "cuda" } else { "torch-cpu" }.into(),
        sizes: runs.clone(),
        phases,
        launched,
        sandbox: Some(crate::sandbox::describe()),
    });
    if let Some((verdict, reason, summary, d)) = run_fail {
        return RunOutcome {
            run: StageOutcome { verdict, summary, diagnostics: d.into_iter().collect(), detail: run_detail, reason },
            check: None,
        };
    }
    let place = if on_gpu { "on the GPU" } else { "with torch on the CPU" };
    let benches = tests.iter().filter(|t| t.2).count();
    let what = if format == protocol::ProblemFormat::GpuMode {
        if benches > 0 {
            format!("{} task.yml test(s) and {benches} benchmark(s)", runs.len() - benches)
        } else {
            format!("{} task.yml test(s)", runs.len())
        }
    } else {
        "KernelBench input set(s)".to_string()
    };
    // KernelBench: the inputs Model changes in place, which the version may change too.
    let inputs = match hints.as_ref().map(|h| &h.inout_slots) {
        Some(changed) if format == protocol::ProblemFormat::KernelBench && !changed.is_empty() => {
            format!("inputs unchanged but {}, which Model changes in place too", changed.join(", "))
        }
        _ => "inputs unchanged".to_string(),
    };
    let run = StageOutcome {
        verdict: Verdict::Pass,
        summary: format!("{place}, {what}, two fresh input sets each: {inputs}, every output written"),
        diagnostics: vec![],
        detail: run_detail,
        reason: None,
    };
    let own_pass = own.iter().filter(|o| o.verdict.pass).count();
    let own_note = if own.is_empty() { String::new() } else { format!("; {who}: {own_pass} of {} pass", own.len()) };
    let warn_note = match warnings.len() {
        0 => String::new(),
        1 => format!("; warning: {}", warnings[0]),
        n => format!("; {n} warnings, the first: {}", warnings[0]),
    };
    let worst = checks.iter().map(|c| c.comparison.max_abs_err).fold(0f64, f64::max);
    let diagnostics =
        warnings.iter().map(|w| Diagnostic::warning(&v.path, Pos::WHOLE_FILE, w.clone())).collect::<Vec<_>>();
    let detail = StageDetail::Check(CheckDetail { seed, results: checks, user_rungs: vec![], own, warnings });
    let check = match check_fail {
        Some((reason, why)) => StageOutcome {
            verdict: Verdict::Fail,
            summary: format!("{why}{own_note}"),
            diagnostics,
            detail,
            reason: Some(reason),
        },
        None => StageOutcome {
            verdict: Verdict::Pass,
            summary: if warn_note.is_empty() {
                format!("matches the reference (max abs err {worst:.2e}, seed {seed}){own_note}")
            } else {
                format!("passes the problem's own rule (max abs err {worst:.2e}, seed {seed}){own_note}{warn_note}")
            },
            diagnostics,
            detail,
            reason: None,
        },
    };
    RunOutcome { run, check: Some(check) }
}

/// How many more moved draws the sparse probe makes while its answer differs: a version that
/// reads half its inputs escapes all four with a chance of one in sixteen.
const PROBE_AGAIN: usize = 3;

/// One test of a problem, planned before the first call: its arguments (the seed rung's), its
/// seeds (the compile phase's last, on the first test) and how it is named.
struct Planned {
    args: BTreeMap<String, serde_json::Value>,
    ncases: usize,
    is_bench: bool,
    seeds: Vec<u64>,
    test_seed: u64,
    label_sizes: SizeSet,
    label: String,
}

impl Planned {
    fn new(
        ti: usize,
        test: &BTreeMap<String, serde_json::Value>,
        ncases: usize,
        is_bench: bool,
        seeds_of: &mut SeedDraw,
    ) -> Planned {
        let mut args = test.clone();
        let mut seeds: Vec<u64> = (0..ncases).map(|_| seeds_of.draw()).collect();
        let test_seed = seeds[0];
        if args.contains_key("seed") {
            args.insert("seed".into(), serde_json::json!(test_seed));
        }
        let label_sizes = args_label(&args);
        let mut label =
            if label_sizes.is_empty() { "the test".to_string() } else { crate::spec::size_label(&label_sizes) };
        if is_bench {
            label = format!("benchmark {label}");
        }
        // The compile phase's inputs come from a seed of their own (the last in the list).
        if ti == 0 {
            seeds.push(seeds_of.draw());
        }
        Planned { args, ncases, is_bench, seeds, test_seed, label_sizes, label }
    }
}

/// The version's judged call of a test, made while the judge's process judged the one before:
/// used when that test comes, if the judge's hints have not changed since (else made again).
struct Prefetched {
    test: usize,
    hints: protocol::JudgeHints,
    dump: std::path::PathBuf,
    answer: Result<protocol::Response, Failure>,
}

/// Said of a GPU MODE version whose f32 outputs fail the problem's check with TF32 on and pass
/// it with TF32 off.
const TF32_NOTE: &str = "it passes with TF32 off: TF32 (torch.backends.cudnn.allow_tf32 and \
                         torch.backends.cuda.matmul.allow_tf32, cuDNN's on by default) is the likely cause; \
                         set both to False in the version, as the reference does";

/// The longest of the version's own calls in a judged test's records, when it is past `limit`.
fn slow_call(observed: &[serde_json::Value], limit: Duration) -> Option<f64> {
    let longest = observed.iter().filter_map(|o| o["seconds"].as_f64()).fold(0.0, f64::max);
    (longest > limit.as_secs_f64()).then_some(longest)
}

/// Whether an error says CUDA was asked for (on a machine without a GPU).
fn asks_for_a_gpu(e: &WorkerError) -> bool {
    let text = format!("{} {}", e.kind, e.message).to_ascii_lowercase();
    ["cuda", "nvidia", "acceleratorerror"].iter().any(|w| text.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The judge's own exception is the version's failure (the problem's check raised on its
    /// answer); running out of the device memory both processes share is no verdict at all.
    #[test]
    fn a_judge_out_of_device_memory_gives_no_verdict() {
        let failed = |kind: &str, message: &str| {
            let r =
                protocol::Response { ok: false, error: Some(WorkerError::new(kind, message)), ..Default::default() };
            judge_failed(Ok(r)).err().unwrap()
        };
        let oom = failed("OutOfMemoryError", "CUDA out of memory. Tried to allocate 256.00 MiB.");
        assert_eq!((oom.0, oom.1), (Verdict::Error, None));
        assert!(oom.2.starts_with("the judge's process ran out of device memory"), "{}", oom.2);
        assert!(
            oom.2.ends_with("no verdict (OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB.)"),
            "{}",
            oom.2
        );
        let raised = failed("AssertionError", "shapes differ");
        assert_eq!((raised.0, raised.1), (Verdict::Fail, Some(Reason::Exception)));
    }

    /// The version's own call is held to the run limit, not the request around it.
    #[test]
    fn the_versions_call_alone_is_timed() {
        let rec = |s: f64| serde_json::json!({"seconds": s, "slots": []});
        let limit = Duration::from_secs(30);
        assert_eq!(slow_call(&[rec(1.0), rec(29.9)], limit), None);
        assert_eq!(slow_call(&[rec(1.0), rec(31.5)], limit), Some(31.5));
        assert_eq!(slow_call(&[serde_json::json!({})], limit), None, "a record without seconds is not slow");
    }
}
