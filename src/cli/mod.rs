//! Command-line parsing and the human and JSON renderings of the core's results.

mod auto;
mod chat;
mod commands;
mod context;
mod render;
mod selftest_cmd;
mod trace;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "rung",
    version,
    about = "A terminal workbench for writing GPU kernels: every version climbs build, run, check, bench, roofline, profile.",
    after_help = "Exit codes: 0 all passed, 1 a check failed, 2 usage error, 3 a build failed, \
                  4 invalid workspace, 5 internal or tool error, 6 benchmark regression."
)]
pub struct Cli {
    /// The workspace folder (or KernelBench problem file); default: the current folder.
    #[arg(short = 'C', long = "workspace", global = true, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Write a new workspace from a template.
    New {
        dir: PathBuf,
        /// vector-add (default), rmsnorm (the demo), cute-dsl or tilelang (the vector add with a CuTe DSL or TileLang version).
        #[arg(long, short)]
        template: Option<String>,
    },
    /// Climb the rungs for some versions (default: all) and record the results.
    Check(CheckArgs),
    /// The recorded results, newest first.
    History {
        /// Only this version.
        version: Option<String>,
        #[arg(long)]
        json: bool,
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Diff two versions: their sources, or their PTX or SASS once built.
    Diff(DiffArgs),
    /// Approve a version: the fastest approved version is what later versions are re-benched
    /// against (interleaved) for their speedup.
    Approve { version: String },
    /// Reject a version, with the reason that goes back to whoever wrote it.
    Reject {
        version: String,
        #[arg(long)]
        reason: String,
    },
    /// What rung found on this machine (CUDA, Python, GPU, profilers) and what is missing.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// Install the CUDA toolchain, Triton and numpy from Python wheels into rung's own environment.
    Setup {
        /// Reinstall even when a complete environment exists.
        #[arg(long)]
        force: bool,
        /// Also install an optional package set: cute-dsl (nvidia-cutlass-dsl), tilelang.
        #[arg(long, value_name = "EXTRA")]
        with: Vec<String>,
    },
    /// Write the demo workspace into DIR (default ./rung-demo), set up if needed, check it, show it.
    Demo { dir: Option<PathBuf> },
    /// Print the JSON schema of `rung check --json` (or of the worker protocol, the watch events,
    /// the ahead-of-time scripts' reply).
    Schema {
        /// The worker protocol's schema (the JSON lines between rung and its workers).
        #[arg(long)]
        worker: bool,
        /// The schema of `rung watch --json` events.
        #[arg(long, conflicts_with = "worker")]
        watch: bool,
        /// The schema of what the ahead-of-time scripts (Triton, CuTe DSL) print.
        #[arg(long, conflicts_with_all = ["worker", "watch"])]
        aot: bool,
        /// The schema of `rung trace --json` (and of the record `get_trace` returns).
        #[arg(long, conflicts_with_all = ["worker", "watch", "aot"])]
        trace: bool,
    },
    /// Watch the workspace: every save rebuilds and re-checks that version (newest wins); a change
    /// to rung.toml, the reference or checks.py re-runs every version. `--json`: one event per
    /// line (schema: `rung schema --watch`).
    Watch(WatchArgs),
    /// The terminal UI (also what plain `rung` opens on a terminal): versions with a glyph per
    /// rung, compile errors, approve and reject; every save re-runs that version's rungs.
    Tui(TuiArgs),
    /// Serve the workspace to agents as a Model Context Protocol server on stdin/stdout: tools
    /// list_versions, read_version, submit_version, check, get_results, get_asm, diff_asm,
    /// get_profile, history (docs/JSON.md).
    Mcp,
    /// Ask the agent one question: the reply streams to standard output and the conversation
    /// is saved in .rung/chat/ (provider from [agent] in ~/.config/rung/config.toml).
    Chat(chat::ChatArgs),
    /// The agent's documents and code in context/: add a git repository, a folder or a manual,
    /// update them, list what is indexed, search it.
    Context(context::ContextArgs),
    /// Auto mode: the agent proposes a faster version of the parent, each proposal climbs every
    /// rung, failures and slower versions are rejected with why, faster ones become the parent;
    /// until a target (--target-roofline, --target-speedup) or a budget (--max-versions,
    /// --max-tokens). One line per choice on standard output.
    Auto(auto::AutoArgs),
    /// Check rung itself on this machine: the fault cases, and with --gpu the demo, GPU MODE and
    /// KernelBench problems and the warm path. Prints one table.
    Selftest(SelftestArgs),
    /// Profile a version on the GPU: Nsight Compute on one call at the first benchmark size,
    /// summarised per kernel (what bounds it and the numbers behind that), or compute-sanitizer's
    /// memcheck or racecheck on one call at the first test size, findings at their source lines.
    /// The result is recorded in the history; the report stays in .rung/objects/.
    Profile(ProfileArgs),
    /// Time the sections inside a version's kernel: a `.cu` version's rung_trace.cuh markers
    /// (RUNG_TRACE_BEGIN/END/MARK), a `.ptx` version's `// rung_trace` lines, or a Triton, CuTe
    /// DSL or TileLang version's rung_trace*.py markers (rt.begin/end/mark) compiled in, one launch
    /// at the first benchmark size after its check passed; per-section statistics and a Chrome
    /// trace-event file for Perfetto.
    Trace(trace::TraceArgs),
    /// One profiled call of a version (run by `rung profile` under ncu or compute-sanitizer).
    #[command(hide = true)]
    InternalProfileCall {
        version: String,
        /// `bench`: the first benchmark size; `test`: the first test size.
        #[arg(long, default_value = "bench")]
        at: String,
        #[arg(long)]
        seed: Option<u64>,
    },
    /// A scripted agent for `kind = "command"`: saves the prompt from stdin as DIR/request-N.txt
    /// and prints DIR/reply-N.md (the selftest's auto mode runs against it).
    #[command(hide = true)]
    InternalScriptedAgent { dir: PathBuf },
    /// Serve kernel launches on stdin/stdout (started by rung itself; JSON lines).
    #[command(hide = true)]
    Worker,
    /// Compile with NVRTC in this process (run by the build rung with NVRTC's library path).
    #[command(hide = true)]
    InternalNvrtc {
        /// The source file, relative to the working directory; also the name in diagnostics.
        source: PathBuf,
        /// Where to write the PTX.
        #[arg(long)]
        out: PathBuf,
        /// NVRTC options.
        #[arg(last = true)]
        options: Vec<String>,
    },
}

#[derive(Args, Debug)]
pub struct ProfileArgs {
    pub version: String,
    /// compute-sanitizer's memcheck instead of Nsight Compute: out-of-bounds and misaligned
    /// accesses, at their source lines.
    #[arg(long, conflicts_with = "racecheck")]
    pub memcheck: bool,
    /// compute-sanitizer's racecheck: shared-memory races, at their source lines.
    #[arg(long)]
    pub racecheck: bool,
    /// Print the recorded result as JSON (the `rung check --json` stage result).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    pub a: String,
    pub b: String,
    /// Compare the PTX (built if needed).
    #[arg(long, conflicts_with = "sass")]
    pub ptx: bool,
    /// Compare the SASS (built if needed).
    #[arg(long)]
    pub sass: bool,
    /// One JSON document: aligned rows, hunks, inline changes, instruction mixes.
    #[arg(long)]
    pub json: bool,
    /// Rename registers by first use, so a different allocation does not hide the same code.
    #[arg(long)]
    pub regs: bool,
    /// Only this kernel.
    #[arg(long)]
    pub kernel: Option<String>,
    /// Force one layout (default: side by side when the terminal is wide enough).
    #[arg(long, value_enum)]
    pub layout: Option<DiffLayout>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffLayout {
    Side,
    Unified,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Version ids (v002) or paths; none means all.
    pub versions: Vec<String>,
    /// Check every version (the default when none is named).
    #[arg(long, conflicts_with = "versions")]
    pub all: bool,
    /// Print one JSON document (schema: `rung schema`).
    #[arg(long)]
    pub json: bool,
    /// With --json: first one JSON line per rung as each is recorded (`{"machine": ...}` then
    /// `{"stage": {"version", "source_hash", "result"}}`), then the report on one line. The SSH
    /// runner reads it to bring results home rung by rung.
    #[arg(long, requires = "json")]
    pub stream: bool,
    /// Reproduce a check: the seed that draws the inputs.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop after the check rung (no bench, no roofline).
    #[arg(long)]
    pub no_bench: bool,
    /// Compare every checked version's latest bench with this version's (for CI).
    #[arg(long, value_name = "VERSION", requires = "max_regression")]
    pub baseline: Option<String>,
    /// With --baseline: exit 6 when a version is slower by more than PCT percent, judged on the
    /// medians' confidence intervals (the fastest the version's allows against the slowest the
    /// baseline's allows).
    #[arg(long, value_name = "PCT", requires = "baseline")]
    pub max_regression: Option<f64>,
    /// Where the rungs run: ssh://user@host[:port]/path, `slurm` (a job with rung.toml's [runner]
    /// options) or `local` (here, whatever rung.toml says). Default: rung.toml's runner.
    #[arg(long, value_name = "URL")]
    pub runner: Option<String>,
}

pub fn main() -> std::process::ExitCode {
    quiet_on_closed_stdout();
    let cli = Cli::parse();
    let code = match commands::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rung: {e:#}");
            rung::exit::INTERNAL
        }
    };
    // SASS listings still being made (they follow their builds): in the dumps before rung ends,
    // each within its build's time limit.
    rung::stages::build::sass::wait_all(std::time::Duration::from_secs(600));
    // Workers asked to exit: a zygote gets its grace, the rest are killed, none waited for.
    rung::runners::ending::finish();
    std::process::ExitCode::from(code as u8)
}

/// `rung history | head` closes rung's standard output early. Rust ignores SIGPIPE (rung writes
/// to its workers' pipes and must outlive one that died), so `println!` panics instead: the
/// panic is turned into the quiet exit a Unix tool gives there, 141 (128 + SIGPIPE).
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

#[derive(Debug, clap::Args)]
pub struct SelftestArgs {
    /// Run everything on the GPU (fails without one).
    #[arg(long)]
    pub gpu: bool,
    /// Parts to run: faults, lanes, workspaces, warm, profile, auto, trace, sandbox, bench
    /// (default: faults, plus workspaces, warm, profile, auto, trace and sandbox with --gpu;
    /// lanes, the CUDA fault cases in one check, ends the faults part on a GPU).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Work here instead of a temporary folder (kept afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Orders the fault cases (drawn when absent; printed).
    #[arg(long)]
    pub order_seed: Option<u64>,
    /// `limits.run` for the fault workspace.
    #[arg(long, default_value = "10s")]
    pub run_limit: String,
    /// Warm-path rounds.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Bench part: how many times v003 is benched again to show the medians' spread.
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Bench part: only these runs (demo, repeat, vs-v001, vs-v003, side-stream, small).
    #[arg(long, value_delimiter = ',')]
    pub bench_runs: Vec<String>,
    /// Bench part: only these demo versions in the `demo` run (default: all).
    #[arg(long, value_delimiter = ',')]
    pub demo_versions: Vec<String>,
    /// Also write the JSON results to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Also run the bench validation: the demo benched and roofline'd, v003 benched five
    /// times, the side-stream case benched.
    #[arg(long)]
    pub bench: bool,
}

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// One JSON event per line.
    #[arg(long)]
    pub json: bool,
    /// Only what changes from now on (by default every version is checked first).
    #[arg(long)]
    pub changes_only: bool,
    /// Stop after the check rung.
    #[arg(long)]
    pub no_bench: bool,
    /// The seed for every check (drawn from the pool when absent).
    #[arg(long)]
    pub seed: Option<u64>,
    /// This version's jobs go first (the one you are looking at).
    #[arg(long, value_name = "VERSION")]
    pub focus: Option<String>,
    /// Build threads (default: the CPU count, at most 8).
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Find changes by scanning the workspace every 200 ms, without file events (for network
    /// mounts and other file systems that send none). The scan also runs beside the events, to
    /// catch one they lose.
    #[arg(long)]
    pub poll: bool,
}

#[derive(Debug, clap::Args)]
pub struct TuiArgs {
    /// Check every version on start (by default only what changes from now on is checked).
    #[arg(long)]
    pub check: bool,
    /// Stop after the check rung.
    #[arg(long)]
    pub no_bench: bool,
    /// The UI theme, from themes/ (dark, light); overrides the settings file.
    #[arg(long, value_name = "NAME")]
    pub theme: Option<String>,
}
