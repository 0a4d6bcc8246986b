//! `rung selftest`: the suites it runs here or on a GPU machine, their tables, and the archive of
//! what they wrote.

use std::path::PathBuf;

use anyhow::{Context, Result};

use rung::check::{self};
use rung::exit;

use super::SelftestArgs;

pub(super) fn selftest(args: &SelftestArgs) -> Result<i32> {
    use rung::selftest::{self as st, FaultOptions};
    let gpu = rung::gpu::probe();
    if args.gpu && gpu.first().is_none() {
        eprintln!(
            "rung selftest --gpu: no GPU here ({}); without --gpu the fault cases run in Triton's interpreter",
            gpu.absent_reason.as_deref().unwrap_or("none found")
        );
        return Ok(exit::USAGE);
    }
    let parts: Vec<String> = if args.only.is_empty() {
        if args.gpu {
            ["faults", "workspaces", "warm", "profile", "auto", "trace", "sandbox"].map(String::from).to_vec()
        } else {
            vec!["faults".into()]
        }
    } else {
        args.only.clone()
    };
    let mut parts = parts;
    if args.bench && !parts.iter().any(|p| p == "bench") {
        parts.push("bench".into());
    }
    for p in &parts {
        if !["faults", "lanes", "workspaces", "warm", "bench", "profile", "auto", "trace", "sandbox"]
            .contains(&p.as_str())
        {
            eprintln!(
                "rung selftest: unknown part `{p}` (faults, lanes, workspaces, warm, bench, profile, auto, trace, sandbox)"
            );
            return Ok(exit::USAGE);
        }
    }
    if parts.iter().any(|p| p == "lanes") && !args.gpu {
        eprintln!("rung selftest: the lanes part checks CUDA versions on the GPU: add --gpu");
        return Ok(exit::USAGE);
    }
    let tmp;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile_dir()?;
            tmp.clone()
        }
    };
    let order_seed = args.order_seed.unwrap_or_else(check::draw_seed);
    let mut all_ok = true;
    let mut doc = serde_json::Map::new();
    if let Some(g) = gpu.first() {
        doc.insert("gpu".into(), serde_json::json!({ "name": g.name, "uuid": g.uuid, "sms": g.sm_count }));
    }
    let opts = FaultOptions { gpu: args.gpu, order_seed, run_limit: args.run_limit.clone() };
    let faults = parts.iter().any(|p| p == "faults");
    if faults {
        if !args.json {
            println!(
                "fault cases ({}; order seed {order_seed}, limits.run {})",
                if args.gpu { "on the GPU" } else { "without a GPU" },
                args.run_limit
            );
            println!(
                "{:<22} {:<48} {:<34} {:<34} {:>7} {:>9}",
                "name", "fault", "expected", "got", "time s", "recovery"
            );
        }
        let runs = st::run_faults(&dir.join("faults"), &opts, |r| {
            if !args.json {
                print_fault(r);
            }
        })?;
        all_ok &= runs.iter().all(|r| r.ok && r.recovered != Some(false));
        doc.insert("order_seed".into(), order_seed.into());
        doc.insert("faults".into(), serde_json::to_value(&runs)?);
    }
    // The faults part ends with these rows on a GPU (the lanes part needs one): alone, they take
    // well under a minute; asked for beside it, they are not run twice.
    if parts.iter().any(|p| p == "lanes") && !faults {
        let runs = st::run_lanes(&dir.join("lanes"), &opts)?;
        if !args.json {
            println!("\nthe CUDA fault cases in one check, in check lanes");
            runs.iter().for_each(print_fault);
        }
        all_ok &= runs.iter().all(|r| r.ok);
        doc.insert("lanes".into(), serde_json::to_value(&runs)?);
    }
    if parts.iter().any(|p| p == "workspaces") {
        let runs = st::run_workspaces(&dir.join("workspaces"))?;
        if !args.json {
            println!("\nworkspaces");
            for r in &runs {
                println!(
                    "{} {:<28} {:<32} expected {:<5} got {:<5} {}",
                    if r.ok { "✓" } else { "✗" },
                    r.workspace,
                    r.version,
                    r.expected.name(),
                    r.got.name(),
                    r.summary.chars().take(150).collect::<String>()
                );
            }
        }
        all_ok &= runs.iter().all(|r| r.ok);
        doc.insert("workspaces".into(), serde_json::to_value(&runs)?);
    }
    if parts.iter().any(|p| p == "warm") {
        let runs = st::run_warm(&dir.join("warm"), args.rounds)?;
        if !args.json {
            println!("\nwarm path: write a changed Triton version (recompile forced) → its check row in the history");
            for r in &runs {
                let phases: Vec<String> = r.phases.iter().map(|(k, v)| format!("{k} {:.0}ms", v * 1e3)).collect();
                let stages: Vec<String> = r.stages_ms.iter().map(|(k, v)| format!("{k} {v:.0}ms")).collect();
                println!(
                    "  {:<6} {:>6.2} s  {}  stages: {}  phases: {}",
                    r.kind,
                    r.seconds,
                    r.verdict.name(),
                    stages.join(", "),
                    phases.join(", ")
                );
            }
        }
        all_ok &= runs.iter().all(|r| r.verdict == rung::model::report::Verdict::Pass);
        doc.insert("warm".into(), serde_json::to_value(&runs)?);
    }
    if parts.iter().any(|p| p == "profile") {
        let exe = std::env::current_exe().context("finding rung's own binary")?;
        if !args.json {
            println!(
                "\nprofile (ncu's DRAM bytes over its duration against rung's achieved GB/s; the sanitizers' findings)"
            );
        }
        let runs = st::run_profile(&dir.join("profile"), &exe, |r| {
            if args.json {
                return;
            }
            let figures = match (r.ncu_dram_gbs, r.rung_gbs, r.delta_percent) {
                (Some(n), Some(g), Some(d)) => format!(
                    "ncu {:.1} µs, {n:.0} GB/s; rung {:.1} µs, {g:.0} GB/s; Δ {d:+.1}%; traffic {}",
                    r.ncu_us.unwrap_or(0.0),
                    r.rung_us.unwrap_or(0.0),
                    r.traffic_ratio.map_or("?".into(), |t| format!("{t:.2}x the formula's"))
                ),
                _ => r.at.clone().unwrap_or_default(),
            };
            println!(
                "{} {:<5} {:<9} {:<7} {:<100} expected {}",
                if r.ok { "✓" } else { "✗" },
                r.version,
                r.tool,
                r.verdict.name(),
                figures,
                r.expected
            );
            println!("    {}", r.summary.chars().take(400).collect::<String>());
        })?;
        all_ok &= runs.iter().all(|r| r.ok);
        doc.insert("profile".into(), serde_json::to_value(&runs)?);
    }
    if parts.iter().any(|p| p == "trace") {
        let rows = st::run_trace(&dir.join("trace"))?;
        if !args.json {
            println!(
                "\ntrace (traced vector adds: .cu, Triton, .ptx, and CuTe DSL and TileLang where installed; checked, benched, then one traced launch each)"
            );
        }
        for row in &rows {
            if args.json {
                continue;
            }
            println!("{} {} {}; expected {}", if row.ok { "✓" } else { "✗" }, row.version, row.check, row.expected);
            if let Some(s) = &row.summary {
                println!(
                    "    {}: {} leaders on {} SMs, span {:.1} µs, launch {:.3} ms, untraced bench median {}",
                    s.mechanism,
                    s.streams,
                    s.sms,
                    s.span_ns as f64 / 1e3,
                    row.launch_ms.unwrap_or(0.0),
                    row.untraced_ms.map_or("-".into(), |m| format!("{m:.4} ms"))
                );
                for x in &s.sections {
                    println!(
                        "    {:8} calls {:>7}  median {:.0} ns  p99 {:.0} ns  share {:.1}%",
                        x.name,
                        x.calls,
                        x.median_ns,
                        x.p99_ns,
                        x.share * 100.0
                    );
                }
                println!(
                    "    marks {:?}; dropped {}; unmatched {}/{}; unknown {}",
                    s.marks, s.dropped, s.unmatched_begins, s.unmatched_ends, s.unknown_tags
                );
            }
            if let Some(e) = &row.error {
                println!("    {e}");
            }
        }
        all_ok &= rows.iter().all(|r| r.ok);
        doc.insert("trace".into(), serde_json::to_value(&rows)?);
    }
    if parts.iter().any(|p| p == "auto") {
        let exe = std::env::current_exe().context("finding rung's own binary")?;
        let (runs, why) = st::run_auto(&dir.join("auto"), &exe)?;
        if !args.json {
            println!(
                "\nauto (a scripted agent proposes a wrong, a slower and a faster version of v002; the rungs judge)"
            );
            for r in &runs {
                println!(
                    "{} {:<5} {:<7} request's parent {:<5} measured {:<45} expected {}",
                    if r.ok { "✓" } else { "✗" },
                    r.version,
                    r.script,
                    r.parent_in_request.as_deref().unwrap_or("-"),
                    r.measured,
                    r.expected
                );
                println!("    {}", r.decision);
            }
            println!("  auto mode: {why}");
        }
        all_ok &= runs.len() == 3 && runs.iter().all(|r| r.ok) && why.starts_with("target reached");
        doc.insert("auto".into(), serde_json::json!({"steps": runs, "stopped": why}));
    }
    if parts.iter().any(|p| p == "sandbox") {
        let exe = std::env::current_exe().context("finding rung's own binary")?;
        let rows = st::run_sandbox(&dir.join("sandbox"), &exe)?;
        if !args.json {
            println!("\nsandbox (hostile versions on the GPU inside it; the demo's medians inside and outside)");
            for r in &rows {
                println!("{} {:<18} {}\n    expected {}", if r.ok { "✓" } else { "✗" }, r.name, r.got, r.expected);
            }
        }
        all_ok &= rows.iter().all(|r| r.ok);
        doc.insert("sandbox".into(), serde_json::to_value(&rows)?);
    }
    if parts.iter().any(|p| p == "bench") {
        let (runs, reports) =
            st::run_bench(&dir.join("bench"), "v003", args.repeats, &args.bench_runs, &args.demo_versions)?;
        if !args.json {
            println!("\nbench (rung's median at the benchmark size; roofline against the measured ceiling)");
            for r in &runs {
                println!(
                    "{} {:<12} {:<40} {:>10} {:<12} ±{:<6} n={:<5} {}",
                    if r.verdict == rung::model::report::Verdict::Pass { "✓" } else { "✗" },
                    r.workspace,
                    r.version,
                    r.median_us.map(|m| format!("{m:.1} µs")).unwrap_or_else(|| "-".into()),
                    r.basis.clone().unwrap_or_default(),
                    r.ci_rel_percent.map(|c| format!("{c:.2}%")).unwrap_or_default(),
                    r.n.unwrap_or(0),
                    r.roofline_summary.clone().unwrap_or_else(|| r.bench_summary.clone())
                );
                if let (Some(e), Some("cupti")) = (r.events_us, r.basis.as_deref()) {
                    println!("  {:<12} between events on the call's stream: {e:.1} µs", "");
                }
                if let Some(n) = &r.timer_note {
                    println!("  {:<12} {n}", "");
                }
                if let Some(g) = r.graph_us {
                    println!("  {:<12} graph replay: {g:.2} µs/call", "");
                }
                for s in &r.speedups {
                    println!("  {:<12} {s}", "");
                }
                for u in &r.unexpected {
                    println!("✗ {:<12} {u}", "");
                }
            }
            let rep: Vec<f64> = runs.iter().filter(|r| r.workspace == "repeat").filter_map(|r| r.median_us).collect();
            if rep.len() > 1 {
                let lo = rep.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = rep.iter().copied().fold(0.0, f64::max);
                println!(
                    "  repeat: {} medians from {lo:.1} to {hi:.1} µs: spread {:.2}%",
                    rep.len(),
                    100.0 * (hi - lo) / lo
                );
            }
        }
        all_ok &= runs
            .iter()
            .filter(|r| r.workspace != "side-stream")
            .all(|r| r.verdict == rung::model::report::Verdict::Pass && r.unexpected.is_empty());
        doc.insert("bench".into(), serde_json::to_value(&runs)?);
        doc.insert("bench_reports".into(), reports);
        if let Some(g) = gpu.first()
            && let Ok(text) =
                std::fs::read_to_string(rung::toolchain::rung_home().join("ceilings").join(format!("{}.json", g.uuid)))
        {
            if !args.json {
                println!("  ceilings: {}", text.split_whitespace().collect::<Vec<_>>().join(" "));
            }
            doc.insert("ceilings".into(), serde_json::from_str(&text).unwrap_or_default());
        }
    }
    doc.insert("ok".into(), all_ok.into());
    if let Some(path) = &args.out {
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string(&doc)?);
    } else {
        println!("\n{}", if all_ok { "selftest: every case as expected" } else { "selftest: FAILED (see ✗ above)" });
    }
    if args.dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(if all_ok { exit::OK } else { exit::CHECK_FAILED })
}

/// A fresh folder under the system's temporary directory.
fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("rung-selftest-{}-{}", std::process::id(), rung::store::now_ms()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// One fault case's row: its name, the fault, what was expected and got, the time, the recovery.
fn print_fault(r: &rung::selftest::FaultRun) {
    let rec = match (r.recovered, r.recovery_seconds) {
        (Some(true), Some(s)) => format!("ok {s:.2}s"),
        (Some(false), _) => "FAILED".into(),
        _ => "-".into(),
    };
    println!(
        "{} {:<20} {:<48} {:<34} {:<34} {:>7.2} {:>9}",
        if r.ok { "✓" } else { "✗" },
        r.name,
        format!("{} ({})", r.what, r.file),
        r.expected,
        r.got,
        r.seconds,
        rec
    );
    if !r.ok {
        println!("    summary: {}", r.summary);
    }
}
