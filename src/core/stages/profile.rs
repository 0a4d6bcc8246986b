//! The profile rung, on demand (`rung profile VERSION`, `P` in the TUI, the MCP's get_profile):
//! Nsight Compute on one call of the version at the first benchmark size, summarised per kernel
//! ([`crate::profile`]); and compute-sanitizer's memcheck and racecheck on one call at the first
//! test size, their findings as diagnostics at source lines.
//!
//! The tool runs `rung internal-profile-call`, a child that builds nothing: it draws the inputs
//! as the bench does and asks the version's worker for one call inside `cuProfilerStart` and
//! `cuProfilerStop` (after one call outside them), so `ncu --profile-from-start off` profiles
//! exactly the version's kernels and none of the warm-up, the flush or the reference.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use crate::check::{self, Machine};
pub use crate::model::profile::{ProfileDetail, SanitizerDetail};
use crate::model::report::{Stage, StageDetail, StageResult, Verdict};
use crate::profile::{self, Sanitizer};
use crate::spec::SizeSet;
use crate::stages::StageOutcome;
use crate::stages::{bench, build, run};
use crate::store::{Objects, Store, StoreError};
use crate::workspace::{VersionFile, Workspace};

/// How long a profile may take: Nsight Compute replays each kernel some 40 times with every
/// section, and the child starts the workers.
const TOOL_LIMIT: Duration = Duration::from_secs(600);
/// SASS hot spots kept per kernel.
const HOT_SPOTS: usize = 8;

/// Which tool `rung profile` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Ncu,
    Sanitizer(Sanitizer),
}

impl Tool {
    pub fn stage(self) -> Stage {
        match self {
            Tool::Ncu => Stage::Profile,
            Tool::Sanitizer(Sanitizer::Memcheck) => Stage::Memcheck,
            Tool::Sanitizer(Sanitizer::Racecheck) => Stage::Racecheck,
        }
    }
}

/// The size of the profiled call: the first benchmark size (what the bench times), or the
/// first test size (small: the sanitizers slow every access down a hundredfold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    Bench,
    Test,
}

impl At {
    pub fn name(self) -> &'static str {
        match self {
            At::Bench => "bench",
            At::Test => "test",
        }
    }
}

/// Why a profiled call or a tool's export gave nothing to read.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("profiling GPU MODE and KernelBench problems is not built yet")]
    NotRungFormat,
    #[error("no GPU here")]
    NoGpu,
    #[error("{}: {source}", path.display())]
    Read { path: std::path::PathBuf, source: std::io::Error },
    #[error("rung.toml has no sizes")]
    NoSizes,
    #[error("cannot start the workers: {0}")]
    Workers(std::io::Error),
    /// The native version's launch plan: its diagnostic.
    #[error("{0}")]
    Plan(String),
    #[error("{0} versions cannot be profiled yet")]
    Kind(crate::workspace::VersionKind),
    /// The call itself failed: the bench's summary of why.
    #[error("{0}")]
    Call(String),
    #[error(transparent)]
    Tool(#[from] build::ToolError),
    #[error("ncu --import failed: {0}")]
    Import(String),
}

/// In the child the tool runs: the version's one profiled call. Returns the sizes it ran at.
pub fn call_once(ws: &Workspace, v: &VersionFile, at: At, seed: u64) -> Result<SizeSet, ProfileError> {
    let spec = ws.spec.as_ref().ok_or(ProfileError::NotRungFormat)?;
    let machine = Machine::discover();
    let gpu = machine.gpu.first().ok_or(ProfileError::NoGpu)?;
    let source = ws.read_source(v).map_err(|source| ProfileError::Read { path: v.path.clone(), source })?;
    let sizes = match at {
        At::Bench => spec.bench_sizes.first().or(spec.test_sizes.last()),
        At::Test => spec.test_sizes.first(),
    }
    .cloned()
    .ok_or(ProfileError::NoSizes)?;
    let mut slot = None;
    let runners = check::runners_for(ws, &machine, &mut slot).map_err(ProfileError::Workers)?;
    let plan = if v.kind.is_native() {
        Some(
            run::NativePlan::new(ws, spec, v, &source, Some(gpu.sm_count))
                .map_err(|d| ProfileError::Plan(d.to_string()))?,
        )
    } else {
        None
    };
    let launch_at = plan.as_ref().map(|p| p.launcher(spec));
    let target = match &launch_at {
        Some(f) => bench::Target::Native(f),
        None if v.kind.is_python() => bench::Target::python(v.path.clone(), &source),
        None => return Err(ProfileError::Kind(v.kind)),
    };
    let dir = runners.scratch(&format!("{}-profile", v.id));
    let out = bench::profile_call(spec, runners, gpu, &target, &sizes, seed, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    out.map(|()| sizes).map_err(|o| ProfileError::Call(o.summary))
}

/// What went wrong before a result: the stage's verdict and why.
fn outcome(verdict: Verdict, summary: impl Into<String>) -> StageOutcome {
    StageOutcome { verdict, summary: summary.into(), diagnostics: vec![], detail: StageDetail::None, reason: None }
}

/// Builds the version when needed, runs the tool on its one call, and records the result.
/// `exe` is rung's own binary (the tool starts it as the child).
pub fn profile(
    ws: &Workspace,
    store: &mut Store,
    v: &VersionFile,
    machine: &Machine,
    tool: Tool,
    exe: &Path,
) -> Result<StageResult, StoreError> {
    let seed = store.next_seed(check::draw_seed)?;
    let started = SystemTime::now();
    let t0 = Instant::now();
    // What rules the rung out is said before anything is built.
    let (out, source_hash) = match unavailable(ws, machine, tool) {
        Some(why) => (outcome(Verdict::Skipped, why), ws.source_hash(v).unwrap_or_default()),
        None => {
            let built = check::build_phase(ws, store, v, seed, machine, None)?;
            let out = match &built {
                None => outcome(Verdict::Error, "the build was cancelled"),
                Some(b) if !b.runnable => {
                    let failed = b.stages.iter().find(|s| s.verdict != Verdict::Pass);
                    let why = failed.map(|s| format!("{}: {}", s.stage, s.summary)).unwrap_or_default();
                    outcome(Verdict::Skipped, format!("not profiled: it does not build ({why})"))
                }
                Some(b) => {
                    // A proposal turned the sandbox on in `build_phase`: the tools' targets run in it.
                    let mut out = run_tool(ws, v, machine, tool, exe, seed);
                    compare_traffic(store, v, &b.source_hash, &mut out)?;
                    out
                }
            };
            (out, built.map(|b| b.source_hash).unwrap_or_default())
        }
    };
    let result = check::stage_result(tool.stage(), (started, t0), out, Default::default());
    check::record(store, v, &source_hash, seed, started, result)
}

/// Sets a profile's DRAM traffic against the bytes the version's newest roofline (of the same
/// source) counted, and says so in the summary when it moves more than 5% over them.
fn compare_traffic(
    store: &Store,
    v: &VersionFile,
    source_hash: &str,
    out: &mut StageOutcome,
) -> Result<(), StoreError> {
    let StageDetail::Profile(p) = &mut out.detail else { return Ok(()) };
    let roofline = store
        .latest_results(&v.id)?
        .into_iter()
        .find(|r| r.stage == Stage::Roofline.name() && r.source_hash == source_hash)
        .and_then(|r| serde_json::from_value::<StageResult>(r.payload).ok());
    let Some(StageDetail::Roofline(r)) = roofline.map(|r| r.detail) else { return Ok(()) };
    // The roofline counts at the first benchmark size, which is where the profile ran.
    let (Some(bytes), true) = (r.bytes, r.sizes == p.sizes || p.sizes.is_empty()) else { return Ok(()) };
    let dram: f64 =
        p.kernels.iter().map(|k| k.dram_read_bytes.unwrap_or(0.0) + k.dram_write_bytes.unwrap_or(0.0)).sum();
    if bytes <= 0.0 || dram <= 0.0 {
        return Ok(());
    }
    let ratio = dram / bytes;
    p.formula_bytes = Some(bytes);
    p.traffic_ratio = Some(ratio);
    if ratio > 1.05 {
        out.summary.push_str(&format!(
            "; DRAM traffic {:.2}x the {:.0} MB rung.toml's formula counts (data read again from DRAM)",
            ratio,
            bytes / 1e6
        ));
    }
    Ok(())
}

/// Why the tool cannot run here at all, if it cannot: no rung.toml problem, no GPU, no tool.
fn unavailable(ws: &Workspace, machine: &Machine, tool: Tool) -> Option<String> {
    if ws.spec.is_none() {
        return Some("profiling GPU MODE and KernelBench problems is not built yet".into());
    }
    if machine.gpu.first().is_none() {
        return Some("no GPU: the profile rung runs the version, so it needs one".into());
    }
    let (found, install) = tool_of(machine, tool);
    if found.is_none() { Some(install.into()) } else { None }
}

fn tool_of(machine: &Machine, tool: Tool) -> (Option<&crate::toolchain::Tool>, &'static str) {
    match tool {
        Tool::Ncu => (
            machine.toolchain.ncu.as_ref(),
            "Nsight Compute (ncu) is not found: it comes with the CUDA toolkit (/usr/local/cuda/bin), or install the \
             nsight-compute package; put it on PATH or set CUDA_HOME",
        ),
        Tool::Sanitizer(_) => (
            machine.toolchain.compute_sanitizer.as_ref(),
            "compute-sanitizer is not found: it comes with the CUDA toolkit (/usr/local/cuda/bin); put it on PATH \
             or set CUDA_HOME",
        ),
    }
}

fn run_tool(ws: &Workspace, v: &VersionFile, machine: &Machine, tool: Tool, exe: &Path, seed: u64) -> StageOutcome {
    let (Some(found), _) = tool_of(machine, tool) else {
        return outcome(Verdict::Error, "the tool went missing between the check and the run");
    };
    let child = |at: At| -> Vec<String> {
        vec![
            exe.display().to_string(),
            "internal-profile-call".into(),
            "--workspace".into(),
            ws.root.display().to_string(),
            v.id.clone(),
            "--at".into(),
            at.name().into(),
            "--seed".into(),
            seed.to_string(),
        ]
    };
    match tool {
        Tool::Ncu => {
            // The report is written here, kept as an object, and the folder removed.
            let dir = ws.state_dir().join("tmp").join(format!("profile-{}-{}", v.id, crate::store::unique()));
            if let Err(e) = std::fs::create_dir_all(&dir) {
                return outcome(Verdict::Error, format!("{}: {e}", dir.display()));
            }
            let out = ncu(ws, &found.path, &child(At::Bench), &dir);
            let _ = std::fs::remove_dir_all(&dir);
            out
        }
        Tool::Sanitizer(s) => sanitizer(ws, v, &found.path, s, &child(At::Test)),
    }
}

/// The tool's command. The child it starts (rung's `internal-profile-call`) runs the version in
/// the sandbox exactly when this process would (a proposal seen here included). Both tools'
/// targets start inside it: Nsight Compute's, and compute-sanitizer's once the sandbox lets its
/// process tracker's folder be written ([`crate::sandbox::ToolTracking`]; measured on an H100:
/// memcheck of a Triton version 10.2 s sandboxed, 9.3 s not).
///
/// The Python worker does not fork there ([`NO_FORK_VAR`]): the tools attach to processes that
/// are started, and a zygote's forked child inherits the injected library without its threads.
/// On an H100, with the four-thread input loader and with one, Nsight Compute's forked child
/// waited on a lock in its main thread for good (the zygote it forked from held the tool's
/// threads); unforked, the tool attaches to the process that runs the version.
fn command(program: &Path, args: &[String], root: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(root);
    let sandboxed = crate::sandbox::strict();
    cmd.env(crate::sandbox::MODE_VAR, if sandboxed { "strict" } else { "off" });
    cmd.env(NO_FORK_VAR, "1");
    cmd
}

/// Tells the Python zygote to serve its first fork's requests itself (rung_worker.py reads it).
const NO_FORK_VAR: &str = "RUNG_WORKER_NO_FORK";

/// Runs a tool in the workspace's root within [`TOOL_LIMIT`]: the command as run, how it ended,
/// and its standard output and error together.
fn run(
    program: &Path,
    args: &[String],
    root: &Path,
) -> Result<(String, std::process::Output, String), build::ToolError> {
    let cmd = command(program, args, root);
    let line = build::quote(&cmd);
    let ran = build::run_limited(cmd, TOOL_LIMIT, "rung profile's limit", None)?;
    let text = format!("{}{}", String::from_utf8_lossy(&ran.stdout), String::from_utf8_lossy(&ran.stderr));
    Ok((line, ran, text))
}

/// The last lines of a tool's output, for a verdict.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The child reports the sizes it ran at on its last line (`sizes: rows=16384, cols=8192`).
fn sizes_from(text: &str) -> SizeSet {
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix("rung-profile-sizes: "))
        .and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_default()
}

fn ncu(ws: &Workspace, ncu: &Path, child: &[String], dir: &Path) -> StageOutcome {
    let report = dir.join("report");
    let mut args: Vec<String> = [
        "--target-processes",
        "all",
        "--profile-from-start",
        "off",
        "--set",
        "full",
        "--import-source",
        "yes",
        // The clocks as they are, as the bench sees them (Nsight Compute locks them to base
        // otherwise).
        "--clock-control",
        "none",
        "-f",
        "-o",
    ]
    .map(String::from)
    .to_vec();
    args.push(report.display().to_string());
    args.extend(child.iter().cloned());
    let (command_line, ran, text) = match run(ncu, &args, &ws.root) {
        Ok(r) => r,
        Err(e) => return outcome(Verdict::Error, e.to_string()),
    };
    if text.contains("ERR_NVGPUCTRPERM") {
        return StageOutcome {
            reason: None,
            ..outcome(
                Verdict::Error,
                "Nsight Compute may not read the GPU's performance counters here (ERR_NVGPUCTRPERM): run as root, \
                 or load the driver with NVreg_RestrictProfilingToAdminUsers=0 (see NVIDIA's ERR_NVGPUCTRPERM page); \
                 every other rung works without them",
            )
        };
    }
    let rep = report.with_extension("ncu-rep");
    if !ran.status.success() || !rep.is_file() {
        return StageOutcome {
            reason: None,
            ..outcome(Verdict::Error, format!("ncu failed ({}):\n{}", ran.status, tail(&text, 12)))
        };
    }
    let export = |page: &[&str]| -> Result<String, ProfileError> {
        let mut args = vec!["--import".to_string(), rep.display().to_string(), "--csv".into()];
        args.extend(page.iter().map(|s| s.to_string()));
        let o = build::run_limited(command(ncu, &args, &ws.root), TOOL_LIMIT, "rung profile's limit", None)?;
        if !o.status.success() {
            return Err(ProfileError::Import(tail(&String::from_utf8_lossy(&o.stderr), 6)));
        }
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let raw = match export(&["--page", "raw"]) {
        Ok(t) => t,
        Err(e) => return outcome(Verdict::Error, e.to_string()),
    };
    let mut kernels = match profile::parse_raw(&raw) {
        Ok(k) => k,
        Err(e) => {
            return StageOutcome {
                reason: None,
                ..outcome(Verdict::Error, format!("Nsight Compute's table: {e}\n{}", tail(&text, 8)))
            };
        }
    };
    // Hot spots are a bonus: a source page that does not export leaves them out.
    if let Ok(src) = export(&["--page", "source", "--print-source", "sass"]) {
        let mut spots = profile::parse_source(&src, HOT_SPOTS);
        for k in &mut kernels {
            k.hot_spots = spots.remove(&k.kernel).unwrap_or_default();
        }
    }
    let objects = Objects::new(&ws.state_dir());
    let report_hash = std::fs::read(&rep).ok().and_then(|b| objects.put(&b).ok());
    let csv_hash = objects.put(raw.as_bytes()).ok();
    let summary = kernels
        .iter()
        .map(|k| {
            let dram = k.dram_gbs.map(|g| format!(", DRAM {g:.0} GB/s")).unwrap_or_default();
            let occ = k
                .achieved_occupancy_percent
                .map(|o| {
                    let limit = k.occupancy_limiter.as_deref().map(|l| format!(", limit: {l}")).unwrap_or_default();
                    format!(", occupancy {o:.0}%{limit}")
                })
                .unwrap_or_default();
            format!("{}: {:.1} µs, {}-bound ({}){dram}{occ}", k.kernel, k.duration_us, k.bound.name(), k.why)
        })
        .collect::<Vec<_>>()
        .join("; ");
    StageOutcome {
        verdict: Verdict::Pass,
        summary,
        diagnostics: vec![],
        detail: StageDetail::Profile(ProfileDetail {
            sizes: sizes_from(&text),
            kernels,
            report: report_hash,
            csv: csv_hash,
            command: command_line,
            formula_bytes: None,
            traffic_ratio: None,
        }),
        reason: None,
    }
}

fn sanitizer(ws: &Workspace, v: &VersionFile, program: &Path, tool: Sanitizer, child: &[String]) -> StageOutcome {
    let mut args: Vec<String> =
        ["--tool", tool.name(), "--target-processes", "all", "--print-limit", "50"].map(String::from).to_vec();
    args.extend(child.iter().cloned());
    let (command_line, _, text) = match run(program, &args, &ws.root) {
        Ok(r) => r,
        Err(e) => return outcome(Verdict::Error, e.to_string()),
    };
    let (findings, summary) = profile::parse_sanitizer(&text);
    let log = Objects::new(&ws.state_dir()).put(text.as_bytes()).ok();
    let diagnostics = profile::diagnostics(&findings, tool, &ws.root, &v.path);
    let sizes = sizes_from(&text);
    let detail = StageDetail::Sanitizer(SanitizerDetail {
        tool,
        sizes,
        findings: findings.clone(),
        summary: summary.clone(),
        log,
        command: command_line,
    });
    if summary.is_none() {
        // No closing summary: the tool itself did not finish.
        return StageOutcome {
            verdict: Verdict::Error,
            summary: format!("{} did not finish:\n{}", tool.name(), tail(&text, 12)),
            diagnostics,
            detail,
            reason: None,
        };
    }
    if findings.is_empty() {
        // A child that failed without a finding (it could not run the version) is no pass.
        if !text.contains("rung-profile-sizes: ") {
            return StageOutcome {
                verdict: Verdict::Error,
                summary: format!("the version did not run under {}:\n{}", tool.name(), tail(&text, 12)),
                diagnostics,
                detail,
                reason: None,
            };
        }
        return StageOutcome {
            verdict: Verdict::Pass,
            summary: format!("{}: no errors ({})", tool.name(), summary.unwrap_or_default()),
            diagnostics,
            detail,
            reason: None,
        };
    }
    let first = &diagnostics[0];
    StageOutcome {
        verdict: Verdict::Fail,
        summary: format!(
            "{}: {} finding{}, first at {}: {}",
            tool.name(),
            findings.len(),
            if findings.len() == 1 { "" } else { "s" },
            first.location(),
            first.message
        ),
        diagnostics,
        detail,
        reason: None,
    }
}

/// The line the child prints last, which the parent reads back from the tool's output.
pub fn sizes_line(sizes: &SizeSet) -> String {
    format!("rung-profile-sizes: {}", serde_json::to_string(sizes).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_given(cmd: &Command) -> Option<String> {
        cmd.get_envs()
            .find(|(k, _)| *k == crate::sandbox::MODE_VAR)
            .and_then(|(_, v)| v.map(|v| v.to_string_lossy().into_owned()))
    }

    /// The profilers' child is told the sandbox's mode outright: what this process runs under (a
    /// proposal seen here included), not what its own environment or config would say; the
    /// sanitizers' child as Nsight Compute's.
    #[test]
    fn the_profilers_child_is_told_whether_to_sandbox_the_version() {
        let here = if crate::sandbox::strict() { "strict" } else { "off" };
        for tool in ["ncu", "compute-sanitizer"] {
            let cmd = command(Path::new(tool), &[], Path::new("/"));
            assert_eq!(mode_given(&cmd).as_deref(), Some(here), "{tool}");
        }
    }

    /// The profilers' child runs the Python worker unforked.
    #[test]
    fn the_profilers_child_runs_the_python_worker_unforked() {
        let cmd = command(Path::new("ncu"), &[], Path::new("/"));
        let given = cmd.get_envs().find(|(k, _)| *k == NO_FORK_VAR).and_then(|(_, v)| v);
        assert_eq!(given, Some(std::ffi::OsStr::new("1")));
    }
}
