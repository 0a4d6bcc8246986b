//! The measured ceilings of a GPU (cached per UUID) and the roofline rung.

use std::path::PathBuf;
use std::time::Duration;

use crate::gpu::GpuInfo;
pub use crate::model::bench::{BenchDetail, Ceilings, RooflineDetail};
use crate::model::protocol::{CallMode, Ceiling, CeilingKind, Op, Response};
use crate::model::report::{StageDetail, Verdict};
use crate::runners::{Failure, Runners};
use crate::spec::Spec;
use crate::stages::StageOutcome;
use crate::workspace::VersionKind;

use super::*;

pub(super) fn ceilings_path(uuid: &str) -> PathBuf {
    crate::toolchain::rung_home().join("ceilings").join(format!("{uuid}.json"))
}

/// Why the GPU's ceilings could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum CeilingError {
    #[error("the GPU's bench lock: {0}")]
    Lock(std::io::Error),
    #[error(transparent)]
    Worker(#[from] crate::runners::Failure),
    #[error("measuring the copy ceiling: {0:?}")]
    Copy(Option<String>),
}

/// The GPU's ceilings: measured once per GPU UUID and cached (`$RUNG_HOME/ceilings/`).
pub fn ceilings(runners: &mut Runners, gpu: &GpuInfo, torch: bool) -> Result<Ceilings, CeilingError> {
    let path = ceilings_path(&gpu.uuid);
    if let Ok(text) = std::fs::read_to_string(&path)
        && let Ok(c) = serde_json::from_str::<Ceilings>(&text)
        && (c.gemm_bf16_tflops.is_some() || !torch)
        && !c.timer.is_empty()
    {
        return Ok(c);
    }
    let _lock = crate::gpulock::lock(&gpu.uuid).map_err(CeilingError::Lock)?;
    let copy = runners
        .native(Op::Ceiling(Ceiling { kind: CeilingKind::Copy, size: 1 << 30, reps: 20 }), Duration::from_secs(120))?;
    if !copy.ok {
        return Err(CeilingError::Copy(copy.error.map(|e| e.message)));
    }
    let copy_gbs = copy.ceilings.values().copied().fold(0.0, f64::max);
    let mut timer = if copy.timer_note.is_none() { BASIS_CUPTI } else { BASIS_EVENTS };
    let mut gemm = None;
    if torch {
        let z = runners.zygote(false)?;
        if z.fork(CallMode::Cuda, Duration::from_secs(60)).is_ok_and(|r| r.ok) {
            let r = z.call(
                Op::Ceiling(Ceiling { kind: CeilingKind::GemmBf16, size: 8192, reps: 20 }),
                Duration::from_secs(120),
            );
            if let Some(r) = r.filter_ok() {
                gemm = r.ceilings.values().copied().reduce(f64::max);
                if r.timer_note.is_some() {
                    timer = BASIS_EVENTS;
                }
            }
        }
        runners.end_children();
    }
    let (ds_gbs, ds_tflops) = datasheet(&gpu.name);
    let c = Ceilings {
        uuid: gpu.uuid.clone(),
        gpu: gpu.name.clone(),
        copy_gbs,
        copy_methods: copy.ceilings,
        gemm_bf16_tflops: gemm,
        datasheet_gbs: ds_gbs,
        datasheet_bf16_tflops: ds_tflops,
        measured_at: crate::store::rfc3339(std::time::SystemTime::now()),
        timer: timer.into(),
    };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(&path, serde_json::to_string_pretty(&c).unwrap_or_default());
    Ok(c)
}

pub(super) trait FilterOk {
    fn filter_ok(self) -> Option<Response>;
}

impl FilterOk for Result<Response, Failure> {
    fn filter_ok(self) -> Option<Response> {
        self.ok().filter(|r| r.ok)
    }
}

/// The roofline of a benched version at its first benchmark size.
pub fn roofline(spec: &Spec, bench: &BenchDetail, ceilings: Ceilings, num_sms: i64) -> StageOutcome {
    let Some(b) = bench.sizes.first() else {
        return fail(Verdict::Skipped, None, "nothing was benched");
    };
    let scope = spec.scope(&b.sizes, Some(num_sms));
    let bytes = spec.roofline.bytes.as_ref().and_then(|e| e.eval_f64(&scope).ok());
    let flops = spec.roofline.flops.as_ref().and_then(|e| e.eval_f64(&scope).ok());
    if bytes.is_none() && flops.is_none() {
        return fail(Verdict::Skipped, None, "rung.toml's [roofline] gives neither bytes nor flops");
    }
    let seconds = b.headline.median * 1e-3;
    let achieved_gbs = bytes.map(|x| x / seconds / 1e9);
    let achieved_tflops = flops.map(|x| x / seconds / 1e12);
    // The ridge point: where the compute ceiling meets the memory one.
    let memory_bound = match (bytes, flops, ceilings.gemm_bf16_tflops) {
        (Some(by), Some(fl), Some(t)) => fl / by < t * 1e12 / (ceilings.copy_gbs * 1e9),
        (Some(_), _, _) => true,
        _ => false,
    };
    let (bound, percent) = if memory_bound {
        ("memory", achieved_gbs.map(|g| 100.0 * g / ceilings.copy_gbs))
    } else {
        ("compute", achieved_tflops.zip(ceilings.gemm_bf16_tflops).map(|(a, c)| 100.0 * a / c))
    };
    let summary = match (bound, achieved_gbs, achieved_tflops, percent) {
        ("memory", Some(g), _, Some(p)) => format!(
            "{g:.0} GB/s: {p:.1}% of the measured copy ceiling ({:.0} GB/s{}), memory-bound",
            ceilings.copy_gbs,
            ceilings.datasheet_gbs.map(|d| format!("; datasheet {d:.0}")).unwrap_or_default()
        ),
        (_, _, Some(t), Some(p)) => format!(
            "{t:.1} TFLOP/s: {p:.1}% of the measured bf16 GEMM ceiling ({:.0} TFLOP/s), compute-bound",
            ceilings.gemm_bf16_tflops.unwrap_or(0.0)
        ),
        _ => "no ceiling to compare with".into(),
    };
    // A kernel at the ceiling reads a little over it: the ceiling is its method's best run, the
    // kernel's figure a median. Said, so it is not taken for a wrong formula or a broken timer.
    let summary = match percent {
        Some(p) if p > 100.0 => format!("{summary} (over 100%: the ceiling is its best run, this figure a median)"),
        _ => summary,
    };
    StageOutcome {
        verdict: Verdict::Pass,
        summary,
        diagnostics: vec![],
        detail: StageDetail::Roofline(RooflineDetail {
            sizes: b.sizes.clone(),
            seconds,
            bytes,
            flops,
            achieved_gbs,
            achieved_tflops,
            bound: bound.into(),
            percent_of_ceiling: percent,
            ceilings,
        }),
        reason: None,
    }
}

/// Whether this kind of version can be benched.
pub fn benchable(kind: VersionKind) -> bool {
    kind.is_native() || kind.is_python()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats;

    fn ceilings() -> Ceilings {
        Ceilings {
            uuid: "GPU-x".into(),
            gpu: "NVIDIA H200".into(),
            copy_gbs: 4000.0,
            copy_methods: BTreeMap::new(),
            gemm_bf16_tflops: Some(800.0),
            datasheet_gbs: Some(4800.0),
            datasheet_bf16_tflops: Some(989.4),
            measured_at: String::new(),
            timer: BASIS_CUPTI.into(),
        }
    }

    fn bench_at(ms: f64) -> BenchDetail {
        let s = stats::summarize(&[ms]);
        BenchDetail {
            gpu: "NVIDIA H200".into(),
            sizes: vec![SizeBench {
                sizes: BTreeMap::from([("rows".into(), 16384), ("cols".into(), 8192)]),
                headline: s,
                basis: "events".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn the_demo_roofline_is_memory_bound_and_its_percentage_is_bytes_over_time_over_ceiling() {
        let spec = crate::spec::Spec::parse(
            &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../assets/demo/rung.toml")).unwrap(),
            std::path::Path::new("rung.toml"),
        )
        .unwrap();
        // x and y: 16384 x 8192 f32 each; w: 8192 f32.
        let bytes = 2.0 * 16384.0 * 8192.0 * 4.0 + 8192.0 * 4.0;
        let out = roofline(&spec, &bench_at(0.2685), ceilings(), 132);
        let StageDetail::Roofline(r) = &out.detail else { panic!("{out:?}") };
        assert_eq!(r.bytes, Some(bytes));
        let gbs = bytes / 0.2685e-3 / 1e9;
        assert!((r.achieved_gbs.unwrap() - gbs).abs() < 1e-6);
        assert_eq!(r.bound, "memory");
        assert!((r.percent_of_ceiling.unwrap() - 100.0 * gbs / 4000.0).abs() < 1e-9);
        assert!(out.summary.contains("of the measured copy ceiling"), "{}", out.summary);
        assert!(!out.summary.contains("over 100%"), "{}", out.summary);
        // At the ceiling, a median a little faster than the ceiling's best run says why.
        let at = bytes / (4000.0 * 1e9) * 1e3 * 0.997;
        let out = roofline(&spec, &bench_at(at), ceilings(), 132);
        assert!(out.summary.contains("100.3% of the measured copy ceiling"), "{}", out.summary);
        assert!(
            out.summary.ends_with("(over 100%: the ceiling is its best run, this figure a median)"),
            "{}",
            out.summary
        );
    }

    #[test]
    fn a_high_intensity_kernel_is_compute_bound() {
        let toml = "[problem]\nname = \"mm\"\n[[inputs]]\nname = \"a\"\ndtype = \"bf16\"\nshape = [\"n\", \"n\"]\n[[outputs]]\nname = \"c\"\ndtype = \"bf16\"\nshape = [\"n\", \"n\"]\n[sizes]\ntest = [{ n = 64 }]\nbench = [{ n = 8192 }]\n[roofline]\nbytes = \"2 * bytes(a)\"\nflops = \"2 * n * n * n\"\n";
        let spec = crate::spec::Spec::parse(toml, std::path::Path::new("rung.toml")).unwrap();
        let mut b = bench_at(2.0);
        b.sizes[0].sizes = BTreeMap::from([("n".into(), 8192)]);
        let out = roofline(&spec, &b, ceilings(), 132);
        let StageDetail::Roofline(r) = &out.detail else { panic!() };
        assert_eq!(r.bound, "compute");
        let tflops = 2.0 * 8192f64.powi(3) / 2e-3 / 1e12;
        assert!((r.percent_of_ceiling.unwrap() - 100.0 * tflops / 800.0).abs() < 1e-9);
    }

    #[test]
    fn work_left_on_another_stream_makes_the_headline_device_wide() {
        let same = |gpu: f64, wall: f64| protocol::Sample {
            gpu_ms: gpu,
            busy_ms: None,
            span_ms: None,
            host_ms: 0.01,
            wall_ms: wall,
        };
        // A kernel on the call's stream: the device-wide interval is its time plus the fixed cost.
        let normal: Vec<_> = (0..20).map(|i| same(0.270 + i as f64 * 1e-4, 0.350 + i as f64 * 1e-4)).collect();
        let (m, basis) = headline_samples(&normal, 0.080);
        assert_eq!(basis, "events");
        assert!((stats::summarize(&m).median - 0.27095).abs() < 1e-9);
        // 100 ms on a side stream, nothing on the call's own.
        let side: Vec<_> = (0..20).map(|_| same(0.004, 100.3)).collect();
        let (m, basis) = headline_samples(&side, 0.080);
        assert_eq!(basis, "device-wide");
        assert!((stats::summarize(&m).median - 100.22).abs() < 1e-9);
    }

    #[test]
    fn cupti_busy_times_are_the_headline_only_when_every_sample_has_one() {
        let s = |gpu: f64, busy: Option<f64>| protocol::Sample {
            gpu_ms: gpu,
            busy_ms: busy,
            span_ms: busy,
            host_ms: 0.01,
            wall_ms: gpu + 0.08,
        };
        let traced: Vec<_> = (0..20).map(|i| s(0.264, Some(0.251 + i as f64 * 1e-5))).collect();
        let (m, basis) = headline_samples(&traced, 0.080);
        assert_eq!(basis, BASIS_CUPTI);
        assert!((stats::summarize(&m).median - 0.251095).abs() < 1e-9);
        // One sample without a busy time (tracing stopped mid-series): the whole series is events.
        let mut mixed = traced.clone();
        mixed[7].busy_ms = None;
        assert_eq!(headline_samples(&mixed, 0.080).1, BASIS_EVENTS);
        // An interleaved pair is compared on one basis: events when either side lacks busy times.
        let untraced: Vec<_> = (0..20).map(|_| s(0.266, None)).collect();
        let [a, b] = headline_pair(&[traced.clone(), untraced.clone()], [0.08, 0.08]);
        assert!(a.iter().all(|&x| x == 0.264) && b.iter().all(|&x| x == 0.266));
        let [a, _] = headline_pair(&[traced.clone(), traced], [0.08, 0.08]);
        assert!(a.iter().all(|&x| x < 0.252));
    }

    #[test]
    fn a_speedup_is_the_other_median_over_this_one_with_the_intervals_crossed() {
        let this = stats::summarize(&(0..101).map(|i| 100.0 + (i % 11) as f64 * 0.1).collect::<Vec<_>>());
        let other = stats::summarize(&(0..101).map(|i| 250.0 + (i % 7) as f64 * 0.5).collect::<Vec<_>>());
        let (s, low, high) = speedup(&this, &other);
        assert!((s - other.median / this.median).abs() < 1e-12);
        assert!(low < s && s < high, "{low} {s} {high}");
        assert!((low - other.ci_low / this.ci_high).abs() < 1e-12);
        assert!((high - other.ci_high / this.ci_low).abs() < 1e-12);
        // Slower than the other: below 1.
        assert!(speedup(&other, &this).0 < 1.0);
    }

    #[test]
    fn an_interleaved_comparison_runs_its_rounds_then_stops_on_both_intervals_or_the_budget() {
        let rule = StopRule { budget_seconds: 8.0, ..StopRule::default() };
        let tight: Vec<f64> = (0..200).map(|i| 0.25 + (i % 5) as f64 * 1e-5).collect();
        let wide: Vec<f64> = (0..200).map(|i| 0.25 * (1.0 + (i % 2) as f64)).collect();
        // Both converged, but too few rounds yet.
        assert!(!interleave_done(2, &[tight.clone(), tight.clone()], 1.0, &rule));
        assert!(interleave_done(MIN_ROUNDS, &[tight.clone(), tight.clone()], 1.0, &rule));
        // One side still wide: keep going until the budget is spent.
        assert!(!interleave_done(10, &[tight.clone(), wide.clone()], 1.0, &rule));
        assert!(interleave_done(10, &[tight, wide], 8.0, &rule));
    }

    #[test]
    fn datasheet_figures_are_known_for_hopper() {
        assert_eq!(datasheet("NVIDIA H200"), (Some(4800.0), Some(989.4)));
        assert_eq!(datasheet("NVIDIA GeForce RTX 4090"), (None, None));
    }
}
