//! Judging a GPU MODE or KernelBench test from its cases: rung's defences first, then the
//! format's own rule with rung's metrics and warnings beside it; and what the compile phase says
//! before any case (patched timers or judge, declared kernels that never launched).

use std::collections::BTreeMap;

use crate::metrics::{self};
use crate::model::protocol::{self, OwnVerdict, ProbeOutcome};
use crate::model::report::Reason;
pub use crate::model::run::OutputCheck;
use crate::spec::SizeSet;

/// The first line of a message (GPU MODE's verdicts run to several lines).
pub(super) fn one_line(s: &str) -> String {
    let lines: Vec<&str> = s.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    match lines.len() {
        0 => String::new(),
        1 => lines[0].to_string(),
        _ => format!("{} ({})", lines[0], lines[1..].join("; ")),
    }
}

/// The Triton kernels a Python version declares: its `@triton.jit` functions (decorators such
/// as `@triton.autotune` may stand above or below). Their launches are what the worker's launch
/// hook sees; a CUDA kernel of load_inline's is not seen there, and is not listed.
pub fn declared_kernels(source: &str) -> Vec<String> {
    let triton = regex::Regex::new(r"@triton\.jit\b[^\n]*\n(?:[ \t]*@[^\n]*\n)*[ \t]*def\s+([A-Za-z_]\w*)")
        .expect("static regex");
    let mut out: Vec<String> = Vec::new();
    for c in triton.captures_iter(source) {
        let n = c[1].to_string();
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// The CUDA kernels a Python version declares in its source (load_inline's strings, a
/// `cuda_sources` file read in): every `__global__` function's name. Their launches are seen by
/// torch's profiler, whose names are demangled signatures that contain these.
pub fn declared_cuda_kernels(source: &str) -> Vec<String> {
    let global = regex::Regex::new(
        r"__global__\s+(?:(?:static|inline|__forceinline__|__noinline__)\s+|__launch_bounds__\s*\([^)]*\)\s*)*void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\(",
    )
    .expect("static regex");
    let mut out: Vec<String> = Vec::new();
    for c in global.captures_iter(source) {
        let n = c[1].to_string();
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// What the compile phase says about a version before any case is judged: timing primitives it
/// replaced, or kernels it declares that never launched.
pub fn compile_phase_verdict(p: &protocol::ProblemOutcome, source: &str) -> Option<(Reason, String)> {
    if !p.harness.is_empty() {
        return Some((Reason::HarnessPatched, harness_patched(&p.harness, "")));
    }
    if !p.patched.is_empty() {
        return Some((
            Reason::TimerPatched,
            format!("the version replaced {}: timing it cannot be trusted", p.patched.join(", ")),
        ));
    }
    if let Some(gpu) = &p.launched_gpu {
        let declared = declared_cuda_kernels(source);
        if !declared.is_empty() && !declared.iter().any(|d| gpu.iter().any(|l| launched_as(l, d))) {
            let shown: Vec<&str> = gpu.iter().take(4).map(String::as_str).collect();
            return Some((
                Reason::NoCustomKernel,
                format!(
                    "the version declares the CUDA kernel(s) {} but none of them launched; the GPU kernels that did: {}{}",
                    declared.iter().map(|d| format!("`{d}`")).collect::<Vec<_>>().join(", "),
                    shown.join(", "),
                    if gpu.len() > 4 { ", …" } else { "" }
                ),
            ));
        }
    }
    let launched = p.launched.as_ref()?;
    let declared = declared_kernels(source);
    if declared.is_empty() {
        return None;
    }
    if declared.iter().any(|d| launched.iter().any(|l| l.contains(d.as_str()))) {
        return None;
    }
    let shown: Vec<&str> = launched.iter().take(4).map(String::as_str).collect();
    Some((
        Reason::NoCustomKernel,
        format!(
            "the version declares {} but none of them launched; {}",
            declared.iter().map(|d| format!("`{d}`")).collect::<Vec<_>>().join(", "),
            if shown.is_empty() {
                "no Triton kernel launched at all: the work was done some other way (a fallback?)".to_string()
            } else {
                format!(
                    "the Triton kernels that did: {}{}",
                    shown.join(", "),
                    if launched.len() > 4 { ", …" } else { "" }
                )
            }
        ),
    ))
}

/// Whether the profiler's kernel name `launched` (a demangled signature: `void
/// ns::add_kernel<float>(float const*, ...)`, or a bare `add_kernel`) is the kernel `declared`.
fn launched_as(launched: &str, declared: &str) -> bool {
    let head = launched.split('(').next().unwrap_or(launched);
    let head = head.split('<').next().unwrap_or(head);
    let name = head.rsplit([' ', ':']).next().unwrap_or(head);
    name == declared
}

/// The summary of a lazy-output verdict: the outputs that are not plain tensors, and why that fails.
fn lazy_output(outputs: &[String], label: &str) -> String {
    format!(
        "the version returned {} (at {label}): an output that is not a plain tensor runs the version's own code when it is read, so its work can happen after its call is timed and what is read from it is what it says; return a plain torch.Tensor",
        outputs.join(", ")
    )
}

/// The summary of a late-work verdict: the threads (the first three), where each was.
fn late_work(threads: &[String], label: &str) -> String {
    let more = if threads.len() > 3 { format!(" and {} more", threads.len() - 3) } else { String::new() };
    format!(
        "the version's call returned while a thread it started was still running ({}{more}) (at {label}): its time \
         leaves that work out, and its outputs could change after rung read them; join the thread before returning",
        threads[..threads.len().min(3)].join("; ")
    )
}

/// The summary of a harness-patched verdict: what was replaced (the first few), and where.
fn harness_patched(names: &[String], at: &str) -> String {
    let shown: Vec<String> = names.iter().take(4).map(|n| format!("`{n}`")).collect();
    format!(
        "the version replaced or changed {}{}{at}, which rung's judge runs: its verdict cannot be trusted",
        shown.join(", "),
        if names.len() > 4 { format!(" and {} more", names.len() - 4) } else { String::new() }
    )
}

/// At most `max` characters, cut at a word and marked.
pub(super) fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    let at = cut.rfind(' ').unwrap_or(cut.len());
    format!("{} …", &cut[..at])
}

/// What the cases of one test say, judged.
#[derive(Debug, Default)]
pub struct JudgedTest {
    /// rung's own defences: a changed input, unwritten outputs.
    pub run_fail: Option<(Reason, String)>,
    /// rung's verdict where the format has no rule of its own, or an output it cannot compare.
    pub check_fail: Option<(Reason, String)>,
    /// The format's own verdict: the first case that fails, else the first.
    pub own: Option<OwnVerdict>,
    pub shape_differs: bool,
    pub checks: Vec<OutputCheck>,
    pub unwritten: BTreeMap<String, usize>,
    /// (what it is about, the warning): one of a kind is kept per check, with a count.
    pub warnings: Vec<(String, String)>,
    pub notes: Vec<String>,
}

fn fmt_psnr(p: Option<f64>) -> String {
    p.map_or("∞ dB".to_string(), |p| format!("{p:.1} dB"))
}

/// Judges the cases of one test: rung's defences first (inputs, poison), then the format's rule
/// with rung's metrics beside it.
pub fn judge_cases(cases: &[protocol::ProblemCase], label: &str) -> JudgedTest {
    let mut j = JudgedTest::default();
    // An output slot is unwritten where the poison survives in every case that poisoned it.
    let mut unwritten: BTreeMap<String, usize> = BTreeMap::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for c in cases {
        for inp in &c.inputs {
            if inp.changed > 0 && j.run_fail.is_none() {
                j.run_fail = Some((
                    Reason::InputMutated,
                    format!(
                        "the version changed its input `{}` ({} element(s)) (at {label}); outputs are {}",
                        inp.name,
                        inp.changed,
                        if c.output_slots.is_empty() {
                            "what it returns".to_string()
                        } else {
                            c.output_slots.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
                        }
                    ),
                ));
            }
        }
        for (slot, n) in &c.unwritten {
            *seen.entry(slot.clone()).or_insert(0) += 1;
            let e = unwritten.entry(slot.clone()).or_insert(usize::MAX);
            *e = (*e).min(*n);
        }
    }
    // A replay: the previous case's right answer returned again for inputs whose answer differs
    // (an answer that is wrong both times, a constant, is a mismatch, not a memory).
    let right = |c: &protocol::ProblemCase| match &c.own {
        Some(o) => o.pass,
        None => c.outputs.iter().all(|t| {
            t.comparison.as_ref().is_some_and(|cmp| {
                let [atol, rtol] = t.tolerance.unwrap_or([0.0, 0.0]);
                metrics::judge(cmp, &crate::dtype::Tolerance { atol, rtol, min_psnr: None, min_cosine: None }).is_none()
            })
        }),
    };
    if let Some(c) = cases.iter().find(|c| !c.harness.is_empty()) {
        j.run_fail = Some((Reason::HarnessPatched, harness_patched(&c.harness, &format!(" (at {label})"))));
    } else if let Some(c) = cases.iter().find(|c| !c.patched.is_empty()) {
        j.run_fail = Some((
            Reason::TimerPatched,
            format!("the version replaced {} (at {label}): timing it cannot be trusted", c.patched.join(", ")),
        ));
    } else if let Some(c) = cases.iter().find(|c| !c.lazy.is_empty()) {
        j.run_fail = Some((Reason::LazyOutput, lazy_output(&c.lazy, label)));
    } else if let Some(c) = cases.iter().find(|c| !c.late.is_empty()) {
        j.run_fail = Some((Reason::LateWork, late_work(&c.late, label)));
    }
    // A remembered answer is one that is wrong for the inputs it is returned for. Right for both
    // (a reduction whose value barely moves between draws, answered in low precision), the same
    // bits are what an honest version gives too: said, not failed.
    if j.run_fail.is_none()
        && let Some(w) = cases.windows(2).find(|w| w[1].replayed && right(&w[0]))
    {
        if right(&w[1]) {
            j.warnings.push((
                "replayed".into(),
                format!(
                    "the version returned the same output bit for bit for fresh inputs (seed {}, at {label}); the rule passes it for both, whose answers differ by less than its tolerance",
                    w[1].seed
                ),
            ));
        } else {
            j.run_fail = Some((
                Reason::Memoised,
                format!(
                    "the version returned the same output bit for bit for fresh inputs (seed {}, at {label}), where the reference's changed: a remembered answer",
                    w[1].seed
                ),
            ));
        }
    }
    unwritten.retain(|_, n| *n > 0);
    if j.run_fail.is_none()
        && let Some((slot, n)) = unwritten.iter().next()
    {
        j.run_fail = Some((
            Reason::Unwritten,
            format!(
                "{n} element(s) of `{slot}` were never written (at {label}): they still hold rung's poison{}",
                match seen.get(slot).copied().unwrap_or(1) {
                    1 => String::new(),
                    k => format!(" in all {k} runs, each poisoned with a different pattern"),
                }
            ),
        ));
    }
    j.unwritten = unwritten;
    // The format's verdict: the first failing case's, else the first case's.
    let verdicts: Vec<&OwnVerdict> = cases.iter().filter_map(|c| c.own.as_ref()).collect();
    j.own = verdicts.iter().find(|o| !o.pass).or(verdicts.first()).map(|o| (*o).clone());
    let has_rule = j.own.is_some();
    for c in cases {
        for n in &c.notes {
            if !j.notes.contains(n) {
                j.notes.push(n.clone());
            }
        }
        if let Some(v) = &c.vacuous {
            let key = format!("vacuous: {v}");
            if !j.warnings.iter().any(|w| w.0 == key) {
                j.warnings.push((key, format!("the rule is vacuous here: {v} (at {label})")));
            }
        }
    }
    // The case to show: the first with a failing output, else the first.
    let mut shown: Option<Vec<OutputCheck>> = None;
    let mut shown_fails = false;
    for c in cases {
        let mut these = Vec::new();
        let mut failing = false;
        for t in &c.outputs {
            if t.output.shape != t.reference.shape {
                j.shape_differs = true;
            }
            let Some(cmp) = &t.comparison else {
                j.check_fail.get_or_insert((
                    Reason::ShapeMismatch,
                    format!(
                        "`{}` at {label} is {} {:?}; the reference's is {} {:?}",
                        t.name, t.output.dtype, t.output.shape, t.reference.dtype, t.reference.shape
                    ),
                ));
                failing = true;
                continue;
            };
            let [atol, rtol] = t.tolerance.unwrap_or([0.0, 0.0]);
            let tol = crate::dtype::Tolerance { atol, rtol, min_psnr: None, min_cosine: None };
            let reason = metrics::judge(cmp, &tol);
            if let Some(why) = &reason {
                failing = true;
                if has_rule {
                    let passes = cases.iter().all(|c| c.own.as_ref().is_none_or(|o| o.pass));
                    if passes {
                        let w = format!(
                            "the format's rule passes `{}` at {label}, rung's {} tolerance (atol {atol:.0e}, rtol {rtol:.0e}) does not: {} of {} elements beyond it; max rel err {:.3e}, PSNR {}, cosine {:.6}",
                            t.name,
                            t.output.dtype,
                            cmp.mismatches,
                            cmp.elements,
                            cmp.max_rel_err,
                            fmt_psnr(cmp.psnr),
                            cmp.cosine
                        );
                        let key = format!("rule: {}", t.name);
                        if !j.warnings.iter().any(|x| x.0 == key) {
                            j.warnings.push((key, w));
                        }
                    }
                } else {
                    let code = if cmp.nan_count + cmp.inf_count > 0 && cmp.mismatches > 0 {
                        Reason::NonFinite
                    } else {
                        Reason::Mismatch
                    };
                    j.check_fail.get_or_insert((code, format!("`{}` at {label}: {why}", t.name)));
                }
            }
            these.push(OutputCheck {
                sizes: SizeSet::new(),
                output: t.name.clone(),
                pass: reason.is_none(),
                reason,
                comparison: cmp.clone(),
            });
        }
        // The first failing case is the one shown, else the first case.
        if shown.is_none() || (failing && !shown_fails) {
            shown = Some(these);
            shown_fails = failing;
        }
    }
    j.checks = shown.unwrap_or_default();
    // The sparse probe (a reduction's draw with a few inputs moved far out): an answer that did
    // not move with them fails whatever the format's rule said of the unmoved draws.
    for p in cases.iter().filter_map(|c| c.probe.as_ref()) {
        let moved = format!("{} element(s) of each floating input moved to {}x its largest magnitude", p.k, p.factor);
        match p.outcome {
            ProbeOutcome::Ignored => {
                j.check_fail.get_or_insert((Reason::InputIgnored, format!("with {moved} (at {label}), {}", p.message)));
            }
            // Said only of a version that passes otherwise: of a wrong one it adds nothing.
            ProbeOutcome::Differs | ProbeOutcome::Unjudged => {
                if j.check_fail.is_none()
                    && j.own.as_ref().is_none_or(|o| o.pass)
                    && !j.warnings.iter().any(|w| w.0 == "probe")
                {
                    j.warnings.push(("probe".into(), format!("with {moved} (at {label}), {}", p.message)));
                }
            }
            ProbeOutcome::Followed => {}
        }
    }
    j
}

#[cfg(test)]
mod problem_tests {
    use super::*;
    use crate::model::protocol::{InputCheck, ProblemCase, ProblemOutcome, ProblemTensor, RuleFigures, TensorMeta};

    fn meta(dtype: &str, shape: &[i64]) -> TensorMeta {
        TensorMeta { dtype: dtype.into(), shape: shape.to_vec() }
    }

    /// A case whose one output is compared at f32's tolerance: `err` at one element of four.
    fn case(seed: u64, err: f64, own: Option<bool>) -> ProblemCase {
        let o = [1.0, 2.0 + err, 3.0, 4.0];
        let r = [1.0, 2.0, 3.0, 4.0];
        let tol = crate::dtype::Tolerance { atol: 1e-5, rtol: 1e-4, min_psnr: None, min_cosine: None };
        ProblemCase {
            seed,
            seconds: 0.001,
            outputs: vec![ProblemTensor {
                name: "output".into(),
                output: meta("f32", &[4]),
                reference: meta("f32", &[4]),
                comparison: Some(metrics::compare(&o, &r, &[4], &tol)),
                tolerance: Some([1e-5, 1e-4]),
                rule: None,
            }],
            inputs: vec![InputCheck { name: "data[0]".into(), changed: 0 }],
            output_slots: vec!["data[2]".into()],
            unwritten: BTreeMap::new(),
            own: own.map(|pass| OwnVerdict { pass, message: if pass { String::new() } else { "mismatch".into() } }),
            vacuous: None,
            notes: vec![],
            replayed: false,
            tf32_suspect: false,
            patched: vec![],
            harness: vec![],
            late: vec![],
            lazy: vec![],
            probe: None,
        }
    }

    #[test]
    fn a_changed_input_fails_before_anything_else() {
        let mut c = case(1, 0.5, Some(false));
        c.inputs[0].changed = 12;
        let j = judge_cases(&[c], "size=8");
        let (reason, why) = j.run_fail.unwrap();
        assert_eq!(reason, Reason::InputMutated);
        assert!(why.contains("`data[0]` (12 element(s))") && why.contains("`data[2]`"), "{why}");
    }

    #[test]
    fn unwritten_counts_what_stayed_poisoned_in_every_run() {
        let mut a = case(1, 0.0, Some(true));
        let mut b = case(2, 0.0, Some(true));
        a.unwritten.insert("data[2]".into(), 5);
        b.unwritten.insert("data[2]".into(), 3);
        let j = judge_cases(&[a.clone(), b], "size=8");
        assert_eq!(j.run_fail.as_ref().unwrap().0, Reason::Unwritten);
        assert_eq!(j.unwritten["data[2]"], 3);
        // An element written in one of the runs is not unwritten: poison that matched by chance.
        let mut c = case(3, 0.0, Some(true));
        c.unwritten.insert("data[2]".into(), 0);
        let j = judge_cases(&[a, c], "size=8");
        assert!(j.run_fail.is_none(), "{:?}", j.run_fail);
    }

    #[test]
    fn a_replay_is_memoised_only_after_a_right_answer() {
        let first = case(1, 0.0, Some(true));
        let mut second = case(2, 0.5, Some(false));
        second.replayed = true;
        let j = judge_cases(&[first, second.clone()], "size=8");
        assert_eq!(j.run_fail.unwrap().0, Reason::Memoised);
        // Wrong both times (a constant): the rule's failure, not a memory.
        let j = judge_cases(&[case(1, 0.5, Some(false)), second], "size=8");
        assert!(j.run_fail.is_none());
        assert!(!j.own.unwrap().pass);
        // Right both times: the same bits are what an honest low-precision answer gives.
        let mut again = case(2, 0.0, Some(true));
        again.replayed = true;
        let j = judge_cases(&[case(1, 0.0, Some(true)), again], "size=8");
        assert!(j.run_fail.is_none(), "{:?}", j.run_fail);
        assert!(
            j.warnings.iter().any(|w| w.0 == "replayed" && w.1.contains("the rule passes it for both")),
            "{:?}",
            j.warnings
        );
    }

    #[test]
    fn patched_timers_fail_the_run() {
        let mut c = case(1, 0.0, Some(true));
        c.patched = vec!["time.perf_counter".into()];
        let (reason, why) = judge_cases(&[c], "size=8").run_fail.unwrap();
        assert_eq!(reason, Reason::TimerPatched);
        assert!(why.contains("time.perf_counter"));
    }

    /// A thread left running names the verdict before the poison it left: it is the cause.
    #[test]
    fn a_thread_left_running_is_late_work_before_unwritten() {
        let mut c = case(1, 0.0, Some(true));
        c.unwritten.insert("data[2]".into(), 16);
        c.late = (1..=5).map(|k| format!("Thread-{k} (later) at v.py:12 in later()")).collect();
        let (reason, why) = judge_cases(&[c], "size=8").run_fail.unwrap();
        assert_eq!(reason, Reason::LateWork);
        assert!(why.contains("Thread-1 (later) at v.py:12 in later()") && why.contains("and 2 more"), "{why}");
        assert!(!why.contains("Thread-4"), "{why}");
    }

    /// An output that does its work when read fails before the right answer it reads as.
    #[test]
    fn an_output_that_is_not_a_plain_tensor_is_lazy_output_though_its_values_are_right() {
        let mut c = case(1, 0.0, Some(true));
        c.lazy = vec!["output: Lazy, a torch.Tensor subclass".into()];
        let (reason, why) = judge_cases(&[c], "size=8").run_fail.unwrap();
        assert_eq!(reason, Reason::LazyOutput);
        assert!(why.contains("output: Lazy, a torch.Tensor subclass (at size=8)"), "{why}");
        assert!(judge_cases(&[case(1, 0.0, Some(true))], "size=8").run_fail.is_none());
    }

    #[test]
    fn cuda_kernels_declared_in_load_inline_strings_and_never_launched_are_named() {
        let src = r#"
from torch.utils.cpp_extension import load_inline
cuda_src = """
template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* c, int n) { }
extern "C" __global__ __launch_bounds__(256) void scale(float* x) { }
__global__ void __launch_bounds__(128, 2) tail_kernel(float* x) { }
__device__ void helper(float* x) { }
"""
"#;
        assert_eq!(declared_cuda_kernels(src), ["add_kernel", "scale", "tail_kernel"]);
        assert!(declared_cuda_kernels("import torch\n").is_empty());
        assert!(launched_as("void add_kernel<float>(float const*, float const*, float*, int)", "add_kernel"));
        assert!(launched_as("void ns::add_kernel(float*)", "add_kernel"));
        assert!(launched_as("scale", "scale"));
        assert!(!launched_as("void my_add_kernel_v2(float*)", "add_kernel"));
        let outcome = |gpu: Option<Vec<&str>>| ProblemOutcome {
            args: BTreeMap::new(),
            cases: vec![],
            observed: vec![],
            launched: None,
            launched_gpu: gpu.map(|l| l.into_iter().map(String::from).collect()),
            patched: vec![],
            harness: vec![],
        };
        let fallback =
            vec!["void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"];
        let (reason, why) = compile_phase_verdict(&outcome(Some(fallback)), src).unwrap();
        assert_eq!(reason, Reason::NoCustomKernel);
        assert!(why.contains("`add_kernel`") && why.contains("vectorized_elementwise_kernel"), "{why}");
        assert!(compile_phase_verdict(&outcome(Some(vec!["void scale(float*)"])), src).is_none());
        // Nothing listed (no GPU, or a profiler that recorded nothing): no verdict either way.
        assert!(compile_phase_verdict(&outcome(None), src).is_none());
    }

    #[test]
    fn a_patched_judge_fails_the_run_before_a_patched_timer() {
        let mut c = case(1, 0.0, Some(true));
        c.patched = vec!["time.perf_counter".into()];
        c.harness = (0..6).map(|k| format!("reference.f{k}")).collect();
        let (reason, why) = judge_cases(&[c], "size=8").run_fail.unwrap();
        assert_eq!(reason, Reason::HarnessPatched);
        assert!(why.contains("`reference.f0`") && why.contains("and 2 more") && why.contains("(at size=8)"), "{why}");
        let p = ProblemOutcome {
            args: BTreeMap::new(),
            cases: vec![],
            observed: vec![],
            launched: None,
            launched_gpu: None,
            patched: vec![],
            harness: vec!["torch.allclose".into()],
        };
        assert_eq!(compile_phase_verdict(&p, "").unwrap().0, Reason::HarnessPatched);
    }

    #[test]
    fn the_format_rule_decides_and_rung_warns_where_it_disagrees() {
        // The rule passes an error rung's f32 tolerance does not: a pass, with the figures.
        let j = judge_cases(&[case(1, 0.01, Some(true)), case(2, 0.01, Some(true))], "size=8");
        assert!(j.run_fail.is_none() && j.check_fail.is_none());
        assert!(j.own.as_ref().unwrap().pass);
        assert_eq!(j.warnings.len(), 1, "one warning per output, however many cases: {:?}", j.warnings);
        let w = &j.warnings[0].1;
        assert!(w.contains("rung's f32 tolerance") && w.contains("max rel err") && w.contains("PSNR"), "{w}");
        // The rule fails what rung's tolerance passes: the rule's verdict stands.
        let j = judge_cases(&[case(1, 0.0, Some(false))], "size=8");
        assert!(!j.own.unwrap().pass);
        assert!(j.warnings.is_empty());
        // No rule of the format's own: rung's tolerance decides.
        let j = judge_cases(&[case(1, 0.5, None)], "size=8");
        assert_eq!(j.check_fail.unwrap().0, Reason::Mismatch);
    }

    #[test]
    fn a_vacuous_rule_is_a_warning_and_counts_need_matching_elements() {
        let mut c = case(1, 0.0, Some(true));
        c.vacuous = Some("an all-zero output passes KernelBench's rule too".into());
        c.outputs[0].rule = Some(RuleFigures { mismatches: 0, zero_pass: 4, constant_pass: 0, constant: 2.5 });
        let j = judge_cases(&[c], "the test");
        assert!(j.warnings[0].1.starts_with("the rule is vacuous here: an all-zero output"), "{:?}", j.warnings);
        // Different element counts cannot be compared: a shape mismatch, named.
        let mut c = case(1, 0.0, None);
        c.outputs[0].comparison = None;
        c.outputs[0].output = meta("f32", &[5]);
        let (reason, why) = judge_cases(&[c], "size=8").check_fail.unwrap();
        assert_eq!(reason, Reason::ShapeMismatch);
        assert!(why.contains("[5]") && why.contains("[4]"), "{why}");
        // A reshaped output of as many elements is compared, and the shape is noted.
        let mut c = case(1, 0.0, Some(false));
        c.outputs[0].output = meta("f32", &[1, 4]);
        assert!(judge_cases(&[c], "size=8").shape_differs);
    }

    #[test]
    fn triton_kernels_declared_and_never_launched_are_named() {
        let src = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/gpu-mode/outslot/versions/v010-wrong-no-custom-kernel.py"
        ))
        .unwrap();
        assert_eq!(declared_kernels(&src), vec!["add_kernel".to_string()]);
        let autotuned = "@triton.autotune(configs=[], key=['n'])\n@triton.jit\n@some.other\ndef k1(x):\n    pass\n\n@triton.jit(do_not_specialize=['n'])\ndef k2(x, n):\n    pass\n";
        assert_eq!(declared_kernels(autotuned), vec!["k1".to_string(), "k2".to_string()]);
        assert!(declared_kernels("import torch\n# @triton.jit is not used here\n").is_empty());
        let outcome = |launched: Option<Vec<&str>>| ProblemOutcome {
            args: BTreeMap::new(),
            cases: vec![],
            observed: vec![],
            launched: launched.map(|l| l.into_iter().map(String::from).collect()),
            launched_gpu: None,
            patched: vec![],
            harness: vec![],
        };
        let (reason, why) = compile_phase_verdict(&outcome(Some(vec![])), &src).unwrap();
        assert_eq!(reason, Reason::NoCustomKernel);
        assert!(why.contains("`add_kernel`"), "{why}");
        assert!(compile_phase_verdict(&outcome(Some(vec!["add_kernel"])), &src).is_none());
        // Not listed (no GPU): no verdict either way.
        assert!(compile_phase_verdict(&outcome(None), &src).is_none());
        let mut patched = outcome(None);
        patched.patched = vec!["torch.cuda.Event.elapsed_time".into()];
        assert_eq!(compile_phase_verdict(&patched, "").unwrap().0, Reason::TimerPatched);
    }
}
