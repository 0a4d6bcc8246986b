//! `rung auto`: auto mode on the command line. The agent proposes a faster version of the
//! parent, the proposal climbs every rung here (as `rung check` would), and the loop judges it
//! and goes again until a target or a budget; each choice is printed with why. The reply
//! streams to standard error; the log, one line per choice, to standard output.

use std::io::Write;
use std::path::Path;

use clap::Args;
use rung::agent::auto::{self, AutoEvent, NOT_RUN, Target};
use rung::agent::tools::WorkspaceTools;
use rung::agent::{AgentEvent, Cancel, ChatStore};
use rung::check::{CheckOptions, Machine};
use rung::exit;
use rung::store::Store;
use rung::workspace::Workspace;

#[derive(Args, Debug)]
pub struct AutoArgs {
    /// Start from this version (default: the fastest approved, else the fastest passing one).
    #[arg(long, value_name = "VERSION")]
    pub from: Option<String>,
    /// Stop once the parent reaches this percent of the measured roofline.
    #[arg(long, value_name = "PERCENT")]
    pub target_roofline: Option<f64>,
    /// Stop once the parent is this many times faster than the start.
    #[arg(long, value_name = "X")]
    pub target_speedup: Option<f64>,
    /// Stop after this many proposals (default 5; 20 with a performance target).
    #[arg(long, value_name = "N")]
    pub max_versions: Option<u32>,
    /// Stop once the conversation has used this many tokens.
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    #[command(flatten)]
    pub agent: super::chat::AgentChoice,
}

pub fn auto_cmd(dir: &Path, args: &AutoArgs) -> i32 {
    for (what, v) in [("--target-roofline", args.target_roofline), ("--target-speedup", args.target_speedup)] {
        if v.is_some_and(|v| !v.is_finite() || v <= 0.0) {
            eprintln!("rung auto: {what} must be a positive number");
            return exit::USAGE;
        }
    }
    let agent = match args.agent.agent() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rung auto: {e}");
            return exit::USAGE;
        }
    };
    if let Err(e) = Workspace::open(dir) {
        eprintln!("rung auto: {e}");
        return exit::WORKSPACE_INVALID;
    }
    let start = match &args.from {
        Some(id) => {
            let ws = Workspace::open(dir).expect("opened above");
            let Some(v) = ws.version(id) else {
                eprintln!("rung auto: --from {id}: no such version in {}", ws.root.join("versions").display());
                return exit::USAGE;
            };
            let m = Store::open(&ws.state_dir())
                .ok()
                .and_then(|s| auto::Measure::recorded(&ws, &s, &v.id))
                .unwrap_or_else(|| auto::Measure::of(&v.id, &[]));
            let why = format!("{} as asked", v.id);
            (Some(m), why)
        }
        None => auto::start_parent(dir, None),
    };
    let tools = WorkspaceTools::new(dir.to_path_buf());
    let machine = Machine::discover();
    let mut runners = None;
    let mut climb =
        |id: &str| auto::climb_here(dir, id, &CheckOptions::default(), &machine, &mut runners).map(|(m, _)| m);
    // A start without results of its file as it is now is checked first: the proposals are
    // measured against it.
    let start = match start {
        (Some(m), why) if !m.checked && m.failed.is_none() && m.unchecked_why.as_deref() == Some(NOT_RUN) => {
            println!("auto: {} has no results of its file as it is now: checking it first", m.id);
            match climb(&m.id) {
                Ok(fresh) => (Some(fresh), why),
                Err(e) => {
                    eprintln!("rung auto: {} could not be checked: {e}", m.id);
                    return exit::INTERNAL;
                }
            }
        }
        other => other,
    };
    let start = match (start, &args.from) {
        ((Some(m), why), Some(_)) => {
            let why = format!("{why} ({})", m.describe());
            (Some(m), why)
        }
        (other, _) => other,
    };
    let target = Target {
        roofline_pct: args.target_roofline,
        speedup: args.target_speedup,
        max_versions: args.max_versions,
        max_tokens: args.max_tokens,
    };
    let mut conv = match agent.conversation(Some(&ChatStore::for_workspace(dir))) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rung auto: {e}");
            return exit::INTERNAL;
        }
    };
    let mut err = std::io::stderr();
    let end = auto::run(
        auto::Session { root: dir, agent: &agent, conv: &mut conv, tools: &tools },
        target,
        start,
        &Cancel::new(),
        &mut climb,
        &mut |ev| match ev {
            AutoEvent::Asking(text) => {
                let _ = writeln!(err, "\n> {text}");
            }
            AutoEvent::Agent(AgentEvent::Text(t)) => {
                let _ = err.write_all(t.as_bytes());
                let _ = err.flush();
            }
            AutoEvent::Agent(_) => {}
            AutoEvent::Proposed(p) => {
                let _ = writeln!(err);
                println!("auto: wrote {} ({}), climbing its rungs", p.path.display(), p.id);
            }
            AutoEvent::Log(line) => println!("auto: {line}"),
        },
    );
    if let Some(p) = &conv.path {
        eprintln!("[conversation saved in {}]", p.display());
    }
    let planned = ["target reached", "budget spent", "stopped by the user"];
    if planned.iter().any(|p| end.why.starts_with(p)) { exit::OK } else { exit::INTERNAL }
}
