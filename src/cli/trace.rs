//! `rung trace VERSION`: a `.cu` version's sections timed inside the kernel (rung_trace.cuh's
//! markers), one traced launch at the first benchmark size.

use std::path::Path;

use clap::Args;

use rung::exit;
use rung::stages::trace::{self, TraceRunError};
use rung::toolchain::Toolchain;

#[derive(Debug, Args)]
pub struct TraceArgs {
    pub version: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Records the buffer holds (32 bytes each); past it they are counted, not written.
    #[arg(long, default_value_t = trace::DEFAULT_CAPACITY)]
    pub capacity: u64,
    /// The seed that draws the inputs (default: drawn).
    #[arg(long)]
    pub seed: Option<u64>,
}

fn us(ns: f64) -> String {
    if ns >= 1e6 { format!("{:.2} ms", ns / 1e6) } else { format!("{:.1} µs", ns / 1e3) }
}

fn code_of(e: &TraceRunError) -> i32 {
    match e {
        TraceRunError::Build(rung::trace::TraceError::NoMarkers(_)) => exit::USAGE,
        TraceRunError::Build(_) => exit::BUILD_FAILED,
        TraceRunError::Kind(_) | TraceRunError::NotRungFormat | TraceRunError::NoSizes => exit::USAGE,
        _ => exit::INTERNAL,
    }
}

pub fn trace_cmd(dir: &Path, args: &TraceArgs) -> i32 {
    let ws = match rung::workspace::Workspace::open(dir) {
        Ok(ws) => ws,
        Err(e) => {
            eprintln!("{e}");
            return exit::WORKSPACE_INVALID;
        }
    };
    let Some(v) = ws.version(&args.version).cloned() else {
        let ids: Vec<&str> = ws.versions.iter().map(|v| v.id.as_str()).collect();
        eprintln!("rung trace: no version `{}`\n  help: versions here: {}", args.version, ids.join(", "));
        return exit::USAGE;
    };
    let tc = Toolchain::discover();
    let machine = rung::check::Machine::discover();
    if machine.gpu.first().is_none() {
        // Said in one line; the traced variant is built first, so its errors show here too.
        let scratch = match tempfile_dir() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("rung trace: {e}");
                return exit::INTERNAL;
            }
        };
        let built = trace::build(&ws, &v, &tc, None, &scratch);
        let _ = std::fs::remove_dir_all(&scratch);
        return match built {
            Ok((t, arch)) => {
                let names: Vec<&str> = t.names.values().map(String::as_str).collect();
                println!(
                    "no GPU here: {}'s traced variant builds for {arch} (markers: {}); `rung trace` launches it on a GPU",
                    v.id,
                    names.join(", ")
                );
                exit::OK
            }
            Err(e) => {
                eprintln!("rung trace: {e}");
                code_of(&e)
            }
        };
    }
    // Only a version whose check passed for the file as it is.
    if let Ok(store) = rung::store::Store::open(&ws.state_dir()) {
        let results = rung::service::results(&ws, &store, &v);
        let checked =
            results.as_ref().is_ok_and(|r| r.current().any(|row| row.stage == "check" && row.verdict == "pass"));
        if !checked {
            eprintln!("rung trace: {}'s check has not passed for the file as it is: `rung check {}` first", v.id, v.id);
            return exit::USAGE;
        }
    }
    let seed = args.seed.unwrap_or_else(rung::check::draw_seed);
    match trace::trace_once(&ws, &v, &tc, seed, args.capacity) {
        Ok(run) => {
            let untraced = rung::store::Store::open(&ws.state_dir())
                .ok()
                .and_then(|s| rung::service::latest_bench(&s, &v.id))
                .filter(|b| b.sizes == run.sizes);
            if args.json {
                let v = serde_json::json!({
                    "version": v.id, "sizes": run.sizes, "arch": run.arch, "seed": seed,
                    "summary": run.summary, "chrome_trace": run.chrome, "launch_ms": run.launch_ms,
                    "untraced_median_ms": untraced.as_ref().map(|b| b.headline.median),
                    "untraced_basis": untraced.as_ref().map(|b| b.basis.clone()),
                });
                println!("{v}");
                return exit::OK;
            }
            let s = &run.summary;
            println!(
                "{} traced at {} ({}, {}): {} leaders on {} SMs, {} from the first record to the last; launch {:.3} ms",
                v.id,
                run.sizes.iter().map(|(k, n)| format!("{k}={n}")).collect::<Vec<_>>().join(" "),
                run.arch,
                s.mechanism,
                s.streams,
                s.sms,
                us(s.span_ns as f64),
                run.launch_ms
            );
            println!(
                "{:16} {:>7} {:>10} {:>10} {:>10} {:>6} {:>4}  per-SM mean",
                "section", "calls", "median", "p99", "mean", "share", "SMs"
            );
            for x in &s.sections {
                println!(
                    "{:16} {:>7} {:>10} {:>10} {:>10} {:>5.1}% {:>4}  {}–{}",
                    x.name,
                    x.calls,
                    us(x.median_ns),
                    us(x.p99_ns),
                    us(x.mean_ns),
                    x.share * 100.0,
                    x.sms,
                    us(x.sm_mean_min_ns),
                    us(x.sm_mean_max_ns)
                );
            }
            for (name, n) in &s.marks {
                println!("mark {name}: {n}");
            }
            if s.dropped > 0 || s.unmatched_begins + s.unmatched_ends + s.backwards + s.unknown_tags > 0 {
                println!(
                    "! {} records dropped (the buffer holds {}: --capacity raises it); unmatched begins {}, ends {}; ends before their begin {}; unknown names {}",
                    s.dropped, s.capacity, s.unmatched_begins, s.unmatched_ends, s.backwards, s.unknown_tags
                );
            }
            match untraced {
                Some(b) => println!(
                    "untraced: {} median {:.4} ms at the same size (the last bench); the traced span is {:+.1}% of it",
                    b.basis,
                    b.headline.median,
                    (s.span_ns as f64 / 1e6 / b.headline.median - 1.0) * 100.0
                ),
                None => println!("untraced: no bench of this size yet (`rung check {}` benches it)", v.id),
            }
            println!("trace events: {} (open it in ui.perfetto.dev)", run.chrome.display());
            exit::OK
        }
        Err(e) => {
            eprintln!("rung trace: {e}");
            code_of(&e)
        }
    }
}

/// A fresh folder under the system's temporary folder.
fn tempfile_dir() -> std::io::Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("rung-trace-{}", rung::store::unique()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
