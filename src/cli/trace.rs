//! `rung trace VERSION`: a `.cu`, `.ptx`, Triton, CuTe DSL or TileLang version's sections timed
//! inside the kernel (rung_trace.cuh's markers, `// rung_trace` lines, rung_trace.py's,
//! rung_trace_cute.py's or rung_trace_tilelang.py's markers), one traced launch at the first benchmark size.

use std::path::Path;

use clap::Args;

use rung::exit;
use rung::stages::trace::{self, TraceRunError};
use rung::toolchain::Toolchain;
use rung::trace::Leader;

#[derive(Debug, Args)]
pub struct TraceArgs {
    pub version: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Records the buffer holds (32 bytes each); past it they are counted, not written.
    /// Default: 1048576, and when the launch asks for more, a second launch with room for all
    /// of them (up to 67108864).
    #[arg(long)]
    pub capacity: Option<u64>,
    /// The seed that draws the inputs (default: drawn).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Who writes the records: lane 0 of every warp, or thread 0 of every block (fewer records,
    /// less overhead; a section then times the first warp's path). Default: `block` where the
    /// source defines RUNG_TRACE_PER_BLOCK, else `warp`. `block` is for `.cu` versions only.
    #[arg(long, value_parser = ["warp", "block"])]
    pub leader: Option<String>,
}

fn code_of(e: &TraceRunError) -> i32 {
    match e {
        TraceRunError::Build(rung::trace::TraceError::NoMarkers(_) | rung::trace::TraceError::NoPtxMarkers(_)) => {
            exit::USAGE
        }
        TraceRunError::Build(_) => exit::BUILD_FAILED,
        TraceRunError::Kind(_)
        | TraceRunError::NoPythonMarkers { .. }
        | TraceRunError::NotRungFormat
        | TraceRunError::PythonPerBlock(_)
        | TraceRunError::NoSizes => exit::USAGE,
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
    let asked = args.leader.as_deref().map(|l| if l == "block" { Leader::Block } else { Leader::Warp });
    let leader = match trace::choose_leader(v.kind, &ws.read_source(&v).unwrap_or_default(), asked) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rung trace: {e}");
            return code_of(&e);
        }
    };
    let tc = Toolchain::discover();
    let machine = rung::check::Machine::discover();
    if let (None, Some(tracer)) = (machine.gpu.first(), trace::python_tracer(v.kind)) {
        // A Python DSL version's markers compile when its kernels do, on the GPU: their names
        // here.
        let source = ws.read_source(&v).unwrap_or_default();
        let names = rung::trace::names_in(&source);
        if names.is_empty() {
            let e = TraceRunError::NoPythonMarkers { path: v.path.display().to_string(), module: tracer.module };
            eprintln!("rung trace: {e}");
            return code_of(&e);
        }
        let names: Vec<&str> = names.values().map(String::as_str).collect();
        println!(
            "no GPU here: {}'s kernels compile with its markers ({}) when `rung trace` runs it on a GPU",
            v.id,
            names.join(", ")
        );
        return exit::OK;
    }
    if machine.gpu.first().is_none() {
        // Said in one line; the traced variant is built first, so its errors show here too.
        let scratch = match tempfile_dir() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("rung trace: {e}");
                return exit::INTERNAL;
            }
        };
        let built = trace::build(&ws, &v, &tc, None, &scratch, leader);
        let _ = std::fs::remove_dir_all(&scratch);
        return match built {
            Ok((t, arch)) => {
                let names: Vec<&str> = t.names.values().map(String::as_str).collect();
                println!(
                    "no GPU here: {}'s traced variant builds for {arch} (markers: {}; one leader per {}); `rung trace` launches it on a GPU",
                    v.id,
                    names.join(", "),
                    leader.as_str()
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
    match trace::trace_once(&ws, &v, &tc, seed, args.capacity, Some(leader)) {
        Ok(record) => {
            if args.json {
                println!("{}", serde_json::to_string(&record).expect("a trace record serialises"));
            } else {
                print!("{}", record.table());
                println!("(open the trace events in ui.perfetto.dev)");
            }
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
