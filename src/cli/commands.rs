//! One function per subcommand. Each returns the process exit code.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use rung::asm::{AsmKind, Normalize};
use rung::check::{self, CheckOptions};
use rung::exit;
use rung::model::report::{CheckReport, SCHEMA};
use rung::setup::{self, SetupEvent};
use rung::store::{Status, Store};
use rung::templates;
use rung::toolchain::Toolchain;
use rung::workspace::{OpenError, Workspace};

use super::render;
use super::selftest_cmd::selftest;
use super::{CheckArgs, Cli, Command, DiffArgs, DiffLayout, ProfileArgs, TuiArgs, WatchArgs};

pub fn run(cli: Cli) -> Result<i32> {
    let ws_dir = cli.workspace.clone().unwrap_or_else(|| PathBuf::from("."));
    match cli.command {
        None if std::io::stdout().is_terminal() && std::io::stdin().is_terminal() => {
            tui_cmd(&ws_dir, &TuiArgs { check: false, no_bench: false, theme: None })
        }
        None => status(&ws_dir),
        Some(Command::Tui(args)) => tui_cmd(&ws_dir, &args),
        Some(Command::New { dir, template }) => new(&dir, template.as_deref().unwrap_or(templates::DEFAULT_TEMPLATE)),
        Some(Command::Check(args)) => check_cmd(&ws_dir, &args),
        Some(Command::History { version, json, limit }) => history(&ws_dir, version.as_deref(), json, limit),
        Some(Command::Diff(args)) => diff(&ws_dir, &args),
        Some(Command::Approve { version }) => review(&ws_dir, &version, Status::Approved, None),
        Some(Command::Reject { version, reason }) => review(&ws_dir, &version, Status::Rejected, Some(&reason)),
        Some(Command::Doctor { json }) => doctor(json),
        Some(Command::Setup { force, with }) => setup_cmd(force, &with),
        Some(Command::Demo { dir }) => demo(dir.unwrap_or_else(|| PathBuf::from("rung-demo"))),
        Some(Command::InternalNvrtc { source, out, options }) => internal_nvrtc(&source, &out, &options),
        Some(Command::Worker) => Ok(rung::worker::serve()),
        Some(Command::InternalScriptedAgent { dir }) => Ok(rung::selftest::scripted_agent(&dir)),
        Some(Command::Profile(args)) => profile_cmd(&ws_dir, &args),
        Some(Command::InternalProfileCall { version, at, seed }) => internal_profile_call(&ws_dir, &version, &at, seed),
        Some(Command::Selftest(args)) => selftest(&args),
        Some(Command::Watch(args)) => watch_cmd(&ws_dir, &args),
        Some(Command::Mcp) => mcp_cmd(&ws_dir),
        Some(Command::Chat(args)) => Ok(super::chat::chat_cmd(&ws_dir, &args)),
        Some(Command::Trace(args)) => Ok(super::trace::trace_cmd(&ws_dir, &args)),
        Some(Command::Context(args)) => Ok(super::context::context_cmd(&ws_dir, &args)),
        Some(Command::Auto(args)) => Ok(super::auto::auto_cmd(&ws_dir, &args)),
        Some(Command::Schema { worker, watch, aot, trace }) => {
            let schema = if trace {
                rung::model::trace::schema()
            } else if aot {
                rung::model::aot::schema()
            } else if worker {
                rung::model::protocol::schema()
            } else if watch {
                rung::watch::schema()
            } else {
                rung::model::report::check_schema()
            };
            println!("{}", serde_json::to_string_pretty(&schema)?);
            Ok(exit::OK)
        }
    }
}

/// Opens a workspace, or prints why not and returns the exit code to use.
fn open(dir: &Path) -> Result<Workspace, i32> {
    Workspace::open(dir).map_err(|e| {
        eprintln!("{e}");
        match e {
            OpenError::Io { .. } => exit::INTERNAL,
            _ => exit::WORKSPACE_INVALID,
        }
    })
}

fn open_store(ws: &Workspace) -> Result<Store> {
    Store::open(&ws.state_dir()).with_context(|| format!("opening the history in {}", ws.state_dir().display()))
}

fn status(dir: &Path) -> Result<i32> {
    let ws = match open(dir) {
        Ok(ws) => ws,
        Err(code) => return Ok(code),
    };
    let store = open_store(&ws)?;
    print!("{}", render::status(&ws, &store, color())?);
    Ok(exit::OK)
}

fn tui_cmd(dir: &Path, args: &TuiArgs) -> Result<i32> {
    // A rung.toml that does not load opens too: its errors in the compile-errors pane, the fix
    // picked up on save.
    let root = match Workspace::open(dir) {
        Ok(ws) => ws.root,
        Err(e) if e.is_fixable() => std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()),
        Err(_) => match open(dir) {
            Ok(ws) => ws.root,
            Err(code) => return Ok(code),
        },
    };
    let opts =
        rung_tui::Options { check: args.check, no_bench: args.no_bench, color: color(), theme: args.theme.clone() };
    rung_tui::run(&root, &opts)
}

fn new(dir: &Path, template: &str) -> Result<i32> {
    let files = match templates::write(template, dir) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("rung new: {e}");
            return Ok(match e {
                templates::NewError::Io { .. } => exit::INTERNAL,
                _ => exit::USAGE,
            });
        }
    };
    println!("wrote {} ({} files, template {template})", dir.display(), files.len());
    println!("next: cd {} && rung check", dir.display());
    Ok(exit::OK)
}

fn check_cmd(dir: &Path, args: &CheckArgs) -> Result<i32> {
    use rung::remote::RunOn;
    let opts = CheckOptions { versions: args.versions.clone(), seed: args.seed, no_bench: args.no_bench };
    let ws = match Workspace::open(dir) {
        Ok(ws) => ws,
        Err(e) if args.json => {
            // Agents get JSON even when the workspace itself is broken.
            let code = if matches!(e, OpenError::Io { .. }) { exit::INTERNAL } else { exit::WORKSPACE_INVALID };
            let diagnostics = match &e {
                OpenError::Spec(s) => s.diagnostics(),
                other => vec![rung::diag::Diagnostic::error(dir, rung::diag::Pos::WHOLE_FILE, other.to_string())],
            };
            let report = CheckReport {
                schema: SCHEMA,
                rung_version: env!("CARGO_PKG_VERSION").into(),
                workspace: std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()),
                format: None,
                problem: None,
                seed: args.seed.unwrap_or(0),
                diagnostics,
                versions: vec![],
                comparisons: vec![],
                exit_code: code,
            };
            println!("{}", serde_json::to_string_pretty(&report)?);
            return Ok(code);
        }
        Err(e) => {
            eprintln!("{e}");
            return Ok(if matches!(e, OpenError::Io { .. }) { exit::INTERNAL } else { exit::WORKSPACE_INVALID });
        }
    };
    let mut store = open_store(&ws)?;
    if args.stream {
        store.stream_results();
    }
    let target = match rung::remote::RunOn::of(&ws, args.runner.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("rung check: {e}");
            return Ok(exit::USAGE);
        }
    };
    let mut report = match &target {
        RunOn::Here => check::check(&ws, &mut store, &opts)?,
        RunOn::Away(away) => {
            let host = away.prefix();
            match away.check(&ws, &mut store, &opts, None, &mut |line: &str| eprintln!("rung check: {host}{line}")) {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(exit::INTERNAL),
                Err(e) => {
                    eprintln!("rung check: {e}");
                    return Ok(exit::INTERNAL);
                }
            }
        }
    };
    let mut notes = Vec::new();
    if let (Some(base), Some(pct)) = (&args.baseline, args.max_regression) {
        notes = rung::service::compare_with_baseline(&ws, &store, &mut report, base, pct);
        if report.comparisons.iter().any(|c| c.regressed) {
            report.exit_code = exit::REGRESSION;
        }
    }
    if args.json && args.stream {
        println!("{}", serde_json::to_string(&report)?);
    } else if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render::check_report(&report, color()));
        for c in &report.comparisons {
            println!(
                "{} {} vs {}: {:+.1}% (at least {:+.1}% by the confidence intervals; allowed {:.1}%; {})",
                if c.regressed { "✗ regression:" } else { "✓" },
                c.version,
                c.baseline,
                c.change_percent,
                c.least_slowdown_percent,
                c.max_regression_percent,
                c.basis
            );
        }
    }
    for n in notes {
        eprintln!("rung check --baseline: {n}");
    }
    Ok(report.exit_code)
}

fn history(dir: &Path, version: Option<&str>, json: bool, limit: usize) -> Result<i32> {
    let ws = match open(dir) {
        Ok(ws) => ws,
        Err(code) => return Ok(code),
    };
    let store = open_store(&ws)?;
    let q = rung::service::HistoryQuery { version, stage: None, limit };
    let h = match rung::service::history(&ws, &store, &q) {
        Ok(h) => h,
        Err(rung::service::VersionError::NoVersion { id, known }) => {
            eprintln!("rung history: no version `{id}`\n  help: versions here: {}", known.join(", "));
            return Ok(exit::USAGE);
        }
        Err(e) => return Err(e.into()),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "schema": SCHEMA, "results": h.rows }))?);
    } else {
        print!("{}", render::history(&h.rows, color()));
    }
    Ok(exit::OK)
}

/// Sets a version's review status, adding it to the history first if it was never checked.
fn review(dir: &Path, id: &str, status: Status, reason: Option<&str>) -> Result<i32> {
    let ws = match open(dir) {
        Ok(ws) => ws,
        Err(code) => return Ok(code),
    };
    let mut store = open_store(&ws)?;
    match rung::service::review(&ws, &mut store, id, status, reason) {
        Ok(v) => {
            println!("{} ({}) {}", v.id, v.path.display(), status.as_str());
            Ok(exit::OK)
        }
        Err(rung::service::VersionError::NoVersion { id, known }) => {
            eprintln!("rung: no version `{id}`\n  help: versions here: {}", known.join(", "));
            Ok(exit::USAGE)
        }
        Err(e) => Err(e.into()),
    }
}

fn profile_cmd(dir: &Path, args: &ProfileArgs) -> Result<i32> {
    use rung::stages::profile::{self, Tool};
    let ws = match open(dir) {
        Ok(ws) => ws,
        Err(code) => return Ok(code),
    };
    let Some(v) = ws.version(&args.version).cloned() else {
        eprintln!(
            "rung profile: no version `{}`\n  help: versions here: {}",
            args.version,
            ws.versions.iter().map(|v| v.id.as_str()).collect::<Vec<_>>().join(", ")
        );
        return Ok(exit::USAGE);
    };
    let tool = if args.memcheck {
        Tool::Sanitizer(rung::profile::Sanitizer::Memcheck)
    } else if args.racecheck {
        Tool::Sanitizer(rung::profile::Sanitizer::Racecheck)
    } else {
        Tool::Ncu
    };
    let mut store = open_store(&ws)?;
    let exe = std::env::current_exe().context("finding rung's own binary")?;
    let machine = rung::check::Machine::discover();
    let result = profile::profile(&ws, &mut store, &v, &machine, tool, &exe)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "schema": SCHEMA, "version": v.id, "result": result }))?
        );
    } else {
        print!("{}", render::profile(&v.id, &result, color()));
    }
    Ok(match result.verdict {
        rung::model::report::Verdict::Pass | rung::model::report::Verdict::Skipped => exit::OK,
        rung::model::report::Verdict::Fail => exit::CHECK_FAILED,
        rung::model::report::Verdict::Error => exit::INTERNAL,
    })
}

fn internal_profile_call(dir: &Path, version: &str, at: &str, seed: Option<u64>) -> Result<i32> {
    use rung::stages::profile::{self, At};
    let ws = match open(dir) {
        Ok(ws) => ws,
        Err(code) => return Ok(code),
    };
    let v = ws.version(version).with_context(|| format!("no version `{version}`"))?.clone();
    let at = if at == "test" { At::Test } else { At::Bench };
    match profile::call_once(&ws, &v, at, seed.unwrap_or_else(rung::check::draw_seed)) {
        Ok(sizes) => {
            println!("{}", profile::sizes_line(&sizes));
            Ok(exit::OK)
        }
        Err(e) => {
            eprintln!("rung internal-profile-call: {e}");
            Ok(exit::INTERNAL)
        }
    }
}

fn diff(dir: &Path, args: &DiffArgs) -> Result<i32> {
    let ws = match open(dir) {
        Ok(ws) => ws,
        Err(code) => return Ok(code),
    };
    let mut versions = Vec::new();
    for id in [&args.a, &args.b] {
        match ws.version(id) {
            Some(v) => versions.push(v.clone()),
            None => {
                eprintln!(
                    "rung diff: no version `{id}`\n  help: versions here: {}",
                    ws.versions.iter().map(|v| v.id.as_str()).collect::<Vec<_>>().join(", ")
                );
                return Ok(exit::USAGE);
            }
        }
    }
    if !args.ptx && !args.sass {
        let mut texts = Vec::new();
        for v in &versions {
            let text = ws.read_source(v).with_context(|| format!("reading {}", v.path.display()))?;
            texts.push((v.path.display().to_string(), text));
        }
        print!("{}", render::unified_diff(&texts[0], &texts[1], color()));
        return Ok(exit::OK);
    }
    let kind = if args.ptx { AsmKind::Ptx } else { AsmKind::Sass };
    let mut store = open_store(&ws)?;
    let q = rung::service::DiffQuery {
        a: &versions[0],
        b: &versions[1],
        kind,
        kernel: args.kernel.as_deref(),
        norm: Normalize { registers: args.regs },
    };
    let mut runners = None;
    let d = match rung::service::diff(&ws, &mut store, &q, &check::Machine::discover(), &mut runners) {
        Ok(c) => c.diff,
        Err(e) => {
            eprintln!("rung diff: {e}");
            if let rung::service::ListingError::Build { diagnostics, .. } = &e {
                for d in diagnostics {
                    eprintln!("{d}");
                }
            }
            eprintln!("  help: {}", e.help());
            return Ok(match e {
                rung::service::ListingError::Build { .. } | rung::service::ListingError::Missing { .. } => {
                    exit::BUILD_FAILED
                }
                rung::service::ListingError::NoKernel { .. } => exit::USAGE,
                _ => exit::INTERNAL,
            });
        }
    };
    if args.json {
        let doc = serde_json::json!({ "schema": SCHEMA, "a": versions[0].id, "b": versions[1].id, "diff": d });
        println!("{}", serde_json::to_string(&doc)?);
        return Ok(exit::OK);
    }
    let width = crossterm::terminal::size().map(|(w, _)| w as usize).ok().filter(|_| std::io::stdout().is_terminal());
    let width = width.or_else(|| std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok())).unwrap_or(100);
    let side = match args.layout {
        Some(DiffLayout::Side) => true,
        Some(DiffLayout::Unified) => false,
        None => width >= 140,
    };
    print!("{}", render::asm_diff(&d, &versions[0].id, &versions[1].id, side, width, color()));
    Ok(exit::OK)
}

fn doctor(json: bool) -> Result<i32> {
    let tc = Toolchain::discover();
    let gpu = rung::gpu::probe();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "schema": SCHEMA,
                "toolchain": tc,
                "gpu": gpu,
                "sandbox": rung::sandbox::describe(),
            }))?
        );
    } else {
        print!("{}", render::doctor(&tc, &gpu, color()));
    }
    Ok(exit::OK)
}

fn setup_cmd(force: bool, extras: &[String]) -> Result<i32> {
    match run_setup(force, extras) {
        Ok(()) => Ok(exit::OK),
        Err(e) => {
            eprintln!("rung setup: {e}");
            Ok(exit::INTERNAL)
        }
    }
}

fn run_setup(force: bool, extras: &[String]) -> Result<(), setup::SetupError> {
    let bar = indicatif::ProgressBar::new_spinner();
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    let mut step = String::new();
    let outcome = setup::setup(force, extras, &mut |ev| match ev {
        SetupEvent::Step(s) => {
            bar.println(format!("• {s}"));
            step = s;
            bar.set_message(step.clone());
        }
        SetupEvent::Line(l) => {
            let l = l.trim();
            if l.starts_with("Collecting")
                || l.starts_with("Downloading")
                || l.starts_with("Installing")
                || l.starts_with("Successfully")
            {
                bar.set_message(format!("{step}: {}", truncate(l, 80)));
                if !std::io::stderr().is_terminal() {
                    eprintln!("  {l}");
                }
            }
        }
    });
    bar.finish_and_clear();
    let outcome = outcome?;
    if outcome.already_done {
        println!("rung setup: already set up in {} (use --force to reinstall)", outcome.env.display());
    } else {
        println!("rung setup: ready in {}", outcome.env.display());
        if let Some(log) = outcome.log {
            println!("  log: {}", log.display());
        }
    }
    Ok(())
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { s.chars().take(n - 1).collect::<String>() + "…" }
}

fn demo(dir: PathBuf) -> Result<i32> {
    let existing = dir.join(rung::spec::FILE_NAME).is_file();
    if existing {
        println!("rung demo: reusing the demo workspace in {}", dir.display());
    } else {
        match templates::write(templates::DEMO_TEMPLATE, &dir) {
            Ok(files) => println!("rung demo: wrote {} ({} files)", dir.display(), files.len()),
            Err(e) => {
                eprintln!("rung demo: {e}");
                return Ok(exit::USAGE);
            }
        }
    }
    let tc = Toolchain::discover();
    if !tc.can_build_cuda() {
        println!("rung demo: no CUDA toolchain found, so running `rung setup` first (CUDA 13 from Python wheels)");
        if let Err(e) = run_setup(false, &[]) {
            eprintln!("rung demo: setup failed, so the demo can be checked only partly: {e}");
        }
    }
    let code = check_cmd(
        &dir,
        &CheckArgs {
            versions: vec![],
            all: true,
            json: false,
            stream: false,
            seed: None,
            no_bench: false,
            baseline: None,
            max_regression: None,
            runner: None,
        },
    )?;
    println!();
    status(&dir)?;
    // On a GPU, the sections inside one kernel too: v002 marks its sum of squares, reduction and
    // normalisation. Its outcome is shown, not the demo's exit code.
    if rung::check::Machine::discover().gpu.first().is_some() {
        println!("\nrung demo: the sections inside v002's kernel (`rung trace v002`):");
        let args =
            super::trace::TraceArgs { version: "v002".into(), json: false, capacity: None, seed: None, leader: None };
        super::trace::trace_cmd(&dir, &args);
    }
    println!("\nnext: cd {} and edit versions/, then `rung check` (or `rung diff v001 v004`)", dir.display());
    Ok(code)
}

fn internal_nvrtc(source: &Path, out: &Path, options: &[String]) -> Result<i32> {
    let text = std::fs::read_to_string(source).with_context(|| format!("reading {}", source.display()))?;
    match rung::nvrtc::compile(&text, &source.to_string_lossy(), options) {
        Ok(outcome) => {
            eprint!("{}", outcome.log);
            match outcome.ptx {
                Some(ptx) => {
                    std::fs::write(out, ptx).with_context(|| format!("writing {}", out.display()))?;
                    Ok(exit::OK)
                }
                None => Ok(exit::BUILD_FAILED),
            }
        }
        Err(e) => {
            eprintln!("nvrtc error: {e}");
            Ok(exit::INTERNAL)
        }
    }
}

/// Colour when stdout is a terminal and NO_COLOR is unset (no-color.org).
fn color() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn watch_cmd(dir: &Path, args: &WatchArgs) -> Result<i32> {
    use rung::watch::{EventKind, WatchOptions};
    use std::io::Write;
    // The focused version by id, whether named by id or by path.
    let focus = args.focus.as_ref().map(|f| {
        Workspace::open(dir).ok().and_then(|ws| ws.version(f).map(|v| v.id.clone())).unwrap_or_else(|| f.clone())
    });
    let opts = WatchOptions {
        initial: !args.changes_only,
        seed: args.seed,
        no_bench: args.no_bench,
        build_threads: args.jobs,
        focus: rung::watch::Focus::new(focus),
        poll: args.poll,
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let json = args.json;
    rung::watch::watch(dir, &opts, stop, |e| {
        let mut out = std::io::stdout().lock();
        if json {
            let _ = writeln!(out, "{}", serde_json::to_string(e).unwrap_or_default());
        } else {
            let line = match &e.kind {
                EventKind::Started { workspace, versions, .. } => {
                    format!("watching {} ({} versions); Ctrl-C stops", workspace.display(), versions.len())
                }
                EventKind::Changed { paths, versions, all } => format!(
                    "changed: {}{}",
                    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
                    if *all { " (every version re-runs)".to_string() } else { format!(" → {}", versions.join(", ")) }
                ),
                EventKind::Job { version, job, state, generation, why } => format!(
                    "{version} #{generation} {job:?} {state:?}{}",
                    why.as_ref().map(|w| format!(": {w}")).unwrap_or_default()
                )
                .to_lowercase(),
                EventKind::Done { report, .. } => {
                    // The version's block, without the one-check summary line (its seed and exit
                    // code belong to `rung check`).
                    let text = render::check_report(
                        &CheckReport { versions: vec![report.clone()], ..empty_report(dir) },
                        color(),
                    );
                    let lines: Vec<&str> = text.trim_end().lines().collect();
                    lines[..lines.len().saturating_sub(1)].join("\n")
                }
                EventKind::Removed { version } => format!("{version}: file deleted (its history stays)"),
                EventKind::Workspace { diagnostics } if !diagnostics.iter().any(|d| d.is_error()) => {
                    "the workspace loads again".to_string()
                }
                EventKind::Workspace { diagnostics } => {
                    let errors = diagnostics.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n");
                    format!("{errors}\nnothing runs until this is fixed; watching for the fix")
                }
            };
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    })?;
    Ok(exit::OK)
}

/// `rung mcp`: a folder that is no workspace is refused at once; an invalid rung.toml is not (every
/// tool reports it, and sees the fix on its next call).
fn mcp_cmd(dir: &Path) -> Result<i32> {
    if let Err(e @ (OpenError::Io { .. } | OpenError::NotAWorkspace(_))) = Workspace::open(dir) {
        eprintln!("rung mcp: {e}");
        return Ok(if matches!(e, OpenError::Io { .. }) { exit::INTERNAL } else { exit::WORKSPACE_INVALID });
    }
    rung::mcp::serve(dir)?;
    Ok(exit::OK)
}

fn empty_report(dir: &Path) -> CheckReport {
    CheckReport {
        schema: SCHEMA,
        rung_version: env!("CARGO_PKG_VERSION").to_string(),
        workspace: dir.to_path_buf(),
        format: None,
        problem: None,
        seed: 0,
        diagnostics: vec![],
        versions: vec![],
        comparisons: vec![],
        exit_code: 0,
    }
}
