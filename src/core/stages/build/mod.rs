//! The build rung: source → PTX → CUBIN, with the ptxas resource report per kernel and
//! diagnostics in the version's own file; the SASS listing follows it, made while the version
//! runs ([`sass`]).
//!
//! CUDA C++ goes through `nvcc -ptx` (the front end, and nvcc's own PTX validation), then
//! `ptxas -v` (cubin and resource report); `nvdisasm` lists the cubin after the rung. Splitting it this way
//! keeps the PTX that ptxas saw, so a ptxas error (inline PTX, wgmma on plain sm_90) is mapped
//! back through the PTX's `.loc` lines to the version's own line. A `rung_run` host entry is
//! also linked as a shared object. `.ptx` versions start at ptxas. Triton versions are compiled
//! ahead of time for the target through `assets/python/triton_aot.py`, labelled as such.
//!
//! Artefacts go to `.rung/objects/` under their hash and are linked from
//! `.rung/dumps/<version>/`. A build is keyed by the source, the local headers it includes, the
//! options and the tool versions; an unchanged version is not rebuilt.

mod cuda;
mod python;
pub mod sass;

use cuda::*;
pub use python::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use crate::diag::{Diagnostic, Pos, Severity};
pub use crate::model::build::{Artefact, BuildDetail, KernelBuild};
use crate::model::report::{StageDetail, Verdict};
use crate::parsers::{OutputParser, ParseContext, PtxLineMap, parse_all};
use crate::spec::CompilerChoice;
use crate::store::{Objects, Store, StoreError, sha256_hex};
use crate::toolchain::{Tool, Toolchain};
use crate::workspace::{VersionFile, VersionKind, Workspace};

/// Bump when the build's commands or outputs change, so cached builds are redone.
const BUILD_LOGIC_VERSION: u32 = 3;

pub struct Built {
    pub verdict: Verdict,
    pub summary: String,
    pub diagnostics: Vec<Diagnostic>,
    pub tools: BTreeMap<String, String>,
    pub detail: StageDetail,
}

/// Everything the build needs besides the version itself.
pub struct BuildEnv<'a> {
    pub ws: &'a Workspace,
    pub toolchain: &'a Toolchain,
    /// The GPU's architecture (`sm_90`), when there is a GPU.
    pub gpu_arch: Option<String>,
    pub timeout: Duration,
    /// Triton versions are compiled by their launch on the GPU (the run rung captures what
    /// launched), not ahead of time: set when there is a GPU and torch to launch with.
    pub triton_at_launch: bool,
    /// The scheduler's flag for a newer save: once set, the running tool is killed (with its
    /// children) and the build stops.
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// Instructions that only exist on the `a` (architecture-specific) targets.
const SM90A_ONLY: &[&str] = &["wgmma.", "setmaxnreg"];

/// The target: the GPU's, else rung.toml's, else sm_90; upgraded to sm_90a when the version
/// uses sm_90a-only instructions, unless rung.toml pins the plain target.
pub fn choose_arch(gpu: Option<&str>, pinned: Option<&str>, source: &str) -> (String, String) {
    let (mut arch, mut reason) = match (gpu, pinned) {
        (Some(g), Some(p)) if p.trim_end_matches(['a', 'f']) == g => (p.to_string(), "GPU + rung.toml".to_string()),
        (Some(g), _) => (g.to_string(), "GPU".to_string()),
        (None, Some(p)) => (p.to_string(), "rung.toml".to_string()),
        (None, None) => ("sm_90".to_string(), "default".to_string()),
    };
    if pinned.is_none()
        && arch == "sm_90"
        && let Some(feature) = SM90A_ONLY.iter().find(|f| source.contains(*f))
    {
        arch = "sm_90a".into();
        reason = format!("{reason}, +a: uses {}", feature.trim_end_matches('.'));
    }
    (arch, reason)
}

fn tool_versions(tools: &[(&str, &Option<Tool>)]) -> BTreeMap<String, String> {
    tools
        .iter()
        .filter_map(|(n, t)| t.as_ref().map(|t| (n.to_string(), t.version.clone().unwrap_or_else(|| "unknown".into()))))
        .collect()
}

/// Local headers a CUDA source includes with quotes, found next to it, recursively.
fn local_includes(dir: &Path, source: &str, seen: &mut BTreeMap<PathBuf, String>) {
    for line in source.lines() {
        let Some(rest) = line.trim_start().strip_prefix("#include") else { continue };
        let Some(name) = rest.trim().strip_prefix('"').and_then(|r| r.split('"').next()) else { continue };
        let path = dir.join(name);
        if seen.contains_key(&path) {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(&path) {
            seen.insert(path.clone(), text.clone());
            local_includes(path.parent().unwrap_or(dir), &text, seen);
        }
    }
}

/// The local headers (quoted `#include`s found next to it, recursively) that the version's
/// source at `root`/`v.path` includes: a save of one of them rebuilds the version.
pub fn local_headers(root: &Path, v: &VersionFile, source: &str) -> Vec<PathBuf> {
    let mut seen = BTreeMap::new();
    let dir = root.join(&v.path).parent().map(Path::to_path_buf).unwrap_or_default();
    local_includes(&dir, source, &mut seen);
    seen.into_keys().collect()
}

/// The command as a shell would take it, for the record.
pub(crate) fn quote(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| {
            let s = a.to_string_lossy();
            if s.is_empty() || s.contains([' ', '"', '\'', '(', ')', '*', '$']) {
                format!("'{s}'")
            } else {
                s.into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why a tool gave no output: it could not start, ran past its limit, or a newer save cancelled it.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("cannot run {program}: {source}")]
    Start { program: String, source: std::io::Error },
    #[error("waiting for {program}: {source}")]
    Wait { program: String, source: std::io::Error },
    #[error("cancelled: a newer save of this version arrived")]
    Cancelled,
    #[error("{program} did not finish within {secs:.0} s ({limit})")]
    Overran { program: String, secs: f64, limit: String },
}

/// Runs a tool with the build's time limit, killed (with its children) when the build's cancel
/// flag is set; a tool that cannot start, overruns or is cancelled is an `Err`.
fn run_tool(cmd: Command, env: &BuildEnv) -> Result<Output, ToolError> {
    run_limited(cmd, env.timeout, "limits.build in rung.toml", env.cancel.as_ref())
}

/// [`run_tool`] with the name of the limit that `timeout` comes from, for the message.
pub(crate) fn run_limited(
    mut cmd: Command,
    timeout: Duration,
    limit: &str,
    cancel: Option<&std::sync::Arc<std::sync::atomic::AtomicBool>>,
) -> Result<Output, ToolError> {
    use std::io::Read;
    let program = cmd.get_program().to_string_lossy().into_owned();
    use std::os::unix::process::CommandExt;
    // Its own process group, so a time-out or a cancel stops the tool's children too (a Python
    // compile script's helpers would otherwise keep its pipes open).
    cmd.process_group(0);
    let kill_group = |child: &mut std::process::Child| {
        // SAFETY: killpg on the group this function created for the child.
        unsafe {
            libc::killpg(child.id() as i32, libc::SIGKILL);
        }
        let _ = child.kill();
        let _ = child.wait();
    };
    // A tool never reads rung's stdin: under `rung mcp` that is the protocol's.
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|source| ToolError::Start { program: program.clone(), source })?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out_thread = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stdout.read_to_end(&mut b);
        b
    });
    let err_thread = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stderr.read_to_end(&mut b);
        b
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|source| ToolError::Wait { program: program.clone(), source })? {
            break s;
        }
        if cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst)) {
            kill_group(&mut child);
            return Err(ToolError::Cancelled);
        }
        if start.elapsed() > timeout {
            kill_group(&mut child);
            return Err(ToolError::Overran { program, secs: timeout.as_secs_f64(), limit: limit.to_string() });
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Ok(Output { status, stdout: out_thread.join().unwrap_or_default(), stderr: err_thread.join().unwrap_or_default() })
}

struct Session<'a> {
    env: &'a BuildEnv<'a>,
    v: &'a VersionFile,
    /// For Triton: the run() arguments to capture launches with.
    launch: Option<serde_json::Value>,
    tmp: PathBuf,
    commands: Vec<String>,
    diagnostics: Vec<Diagnostic>,
    ctx: ParseContext,
    /// Seconds each tool took, summed by [`phase_label`].
    phases: BTreeMap<String, f64>,
}

/// The phase a build command's time goes under: the tool's file name, `nvrtc` for rung's own
/// NVRTC child, and the script's stem for a Python compile script (`triton_aot`).
fn phase_label(cmd: &Command) -> String {
    let file = |p: &std::ffi::OsStr| {
        Path::new(p).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "tool".into())
    };
    let mut args = cmd.get_args();
    let first = args.next();
    if first.is_some_and(|a| a == "internal-nvrtc") {
        return "nvrtc".into();
    }
    match first {
        Some(a) if Path::new(a).extension().is_some_and(|e| e == "py") => file(a),
        _ => file(cmd.get_program()),
    }
}

impl Session<'_> {
    /// A path as the commands see it: relative to the workspace root they run in, so a recorded
    /// command can be re-run from there.
    fn rel(&self, p: &Path) -> PathBuf {
        p.strip_prefix(&self.env.ws.root).map(Path::to_path_buf).unwrap_or_else(|_| p.to_path_buf())
    }

    /// Runs a command as it is, recorded in the build's commands and its time in its phase.
    fn run(&mut self, cmd: Command) -> Result<Output, ToolError> {
        self.commands.push(quote(&cmd));
        let label = phase_label(&cmd);
        let t0 = Instant::now();
        let ran = run_tool(cmd, self.env);
        *self.phases.entry(label).or_default() += t0.elapsed().as_secs_f64();
        ran
    }

    /// Runs a command in the workspace root; parses its stderr; returns its output if it succeeded.
    fn step(&mut self, cmd: Command, parsers: &[&dyn OutputParser]) -> Result<Output, ()> {
        self.step_reading_ptx(cmd, parsers, None)
    }

    /// As `step`; when the command writes a PTX file (`nvcc -ptx` validates what it wrote with
    /// ptxas), errors citing it are mapped through that file's `.loc` lines.
    fn step_reading_ptx(
        &mut self,
        mut cmd: Command,
        parsers: &[&dyn OutputParser],
        ptx: Option<&Path>,
    ) -> Result<Output, ()> {
        cmd.current_dir(&self.env.ws.root);
        // nvcc's intermediate files (tmpxft_*) go to TMPDIR and stay there when the tool is
        // killed (a cancelled build, a time-out): in the build's own folder, removed with it,
        // rather than thousands of them left in /tmp over days of saves.
        if !cmd.get_envs().any(|(k, _)| k == "TMPDIR") {
            cmd.env("TMPDIR", &self.tmp);
        }
        let out = match self.run(cmd) {
            Ok(o) => o,
            Err(e) => {
                self.diagnostics.push(Diagnostic::error(&self.v.path, Pos::WHOLE_FILE, e.to_string()));
                return Err(());
            }
        };
        if let Some(p) = ptx
            && let Ok(text) = std::fs::read_to_string(p)
        {
            self.ctx.ptx.insert(p.display().to_string(), PtxLineMap::new(&text));
        }
        let text = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
        let mut found = parse_all(&text, &self.ctx, parsers);
        if !out.status.success() && !found.iter().any(Diagnostic::is_error) {
            // Never swallow a failure the parsers did not recognise: its first line is in the
            // message, the whole output beside it.
            let how = out.status.code().map_or_else(|| "killed by a signal".to_string(), |c| format!("exit {c}"));
            let first = text.lines().map(str::trim).find(|l| !l.is_empty());
            let message = match first {
                Some(l) if l.chars().count() > 200 => {
                    format!("the build failed ({how}): {}…", l.chars().take(200).collect::<String>())
                }
                Some(l) => format!("the build failed ({how}): {l}"),
                None => format!("the build failed ({how}) and printed nothing"),
            };
            let mut d = Diagnostic::error(&self.v.path, Pos::WHOLE_FILE, message);
            d.tool_text = Some(text.trim_end().to_string());
            found.push(d);
        }
        for d in found {
            if !self.diagnostics.iter().any(|o| o.file == d.file && o.line == d.line && o.message == d.message) {
                self.diagnostics.push(d);
            }
        }
        if out.status.success() { Ok(out) } else { Err(()) }
    }
}

/// The hash of every embedded Python file, which a Triton or CuTe build's cache key includes:
/// computed once per process, not per build.
static PYTHON_KEY: LazyLock<String> = LazyLock::new(|| sha256_hex(crate::assets::python_text().as_bytes()));

/// Builds one version, reusing an identical earlier build when the cache has one.
pub fn build(env: &BuildEnv, store: &mut Store, v: &VersionFile, source: &str) -> Result<Built, StoreError> {
    let spec = env.ws.spec.as_ref();
    let tc = env.toolchain;
    let is_cuda = matches!(v.kind, VersionKind::Cuda | VersionKind::CudaHost | VersionKind::Ptx);
    if v.kind == VersionKind::Triton && env.triton_at_launch && env.gpu_arch.is_some() {
        let mut tools = BTreeMap::new();
        if let Some(p) = &tc.python {
            tools.insert("python".into(), p.version.clone());
            tools.insert("triton".into(), p.packages.get("triton").cloned().unwrap_or_default());
        }
        return Ok(Built {
            verdict: Verdict::Pass,
            summary: "Triton compiles at launch on the GPU: the run rung captures the kernels that launch".into(),
            diagnostics: vec![],
            tools,
            detail: StageDetail::None,
        });
    }
    let aot = match v.kind {
        VersionKind::Triton => true,
        VersionKind::CuteDsl => tc.has_python_package("cutlass"),
        VersionKind::TileLang => tc.has_python_package("tilelang"),
        _ => false,
    };
    if !is_cuda && !aot {
        let (what, install) = match v.kind {
            VersionKind::CuteDsl => {
                ("CuTe DSL", "pip install nvidia-cutlass-dsl into rung's Python (see `rung doctor`)")
            }
            VersionKind::TileLang => ("TileLang", "pip install tilelang into rung's Python (see `rung doctor`)"),
            _ => ("PyTorch", "nothing: PyTorch versions are compiled when they run"),
        };
        let installed = match v.kind {
            VersionKind::TileLang => tc.has_python_package("tilelang"),
            _ => true,
        };
        let summary = if installed {
            format!("{what} versions are compiled when they run, on a GPU")
        } else {
            format!("{what} is not installed: {install}")
        };
        return Ok(Built {
            // Nothing to compile ahead of time: the run rung runs it as it is.
            verdict: if installed { Verdict::Pass } else { Verdict::Error },
            summary,
            diagnostics: vec![],
            tools: BTreeMap::new(),
            detail: StageDetail::None,
        });
    }

    let pinned = spec.and_then(|s| s.build.arch.as_deref());
    let choice = spec.map_or(CompilerChoice::Auto, |s| s.build.compiler);
    let use_nvrtc = v.kind == VersionKind::Cuda
        && (choice == CompilerChoice::Nvrtc
            || (choice == CompilerChoice::Auto && tc.nvcc.is_none() && tc.nvrtc_lib_dir.is_some()));
    let (arch, arch_reason) = choose_arch(env.gpu_arch.as_deref(), pinned, source);
    let flags: Vec<String> = spec.map(|s| s.build.flags.clone()).unwrap_or_default();
    let tools = match v.kind {
        VersionKind::CuteDsl => {
            let mut t = tool_versions(&[("nvdisasm", &tc.nvdisasm), ("cuobjdump", &tc.cuobjdump)]);
            if let Some(p) = &tc.python {
                t.insert("python".into(), p.version.clone());
                t.insert("nvidia-cutlass-dsl".into(), p.packages.get("cutlass").cloned().unwrap_or_default());
            }
            t
        }
        VersionKind::Triton => {
            let mut t =
                tool_versions(&[("ptxas", &tc.ptxas), ("nvdisasm", &tc.nvdisasm), ("cuobjdump", &tc.cuobjdump)]);
            if let Some(p) = &tc.python {
                t.insert("python".into(), p.version.clone());
                t.insert("triton".into(), p.packages.get("triton").cloned().unwrap_or_else(|| "missing".into()));
            }
            t
        }
        VersionKind::TileLang => {
            let mut t = tool_versions(&[("nvcc", &tc.nvcc), ("nvdisasm", &tc.nvdisasm), ("cuobjdump", &tc.cuobjdump)]);
            if let Some(p) = &tc.python {
                t.insert("python".into(), p.version.clone());
                t.insert("tilelang".into(), p.packages.get("tilelang").cloned().unwrap_or_default());
            }
            t
        }
        VersionKind::Ptx => {
            tool_versions(&[("ptxas", &tc.ptxas), ("nvdisasm", &tc.nvdisasm), ("cuobjdump", &tc.cuobjdump)])
        }
        _ if use_nvrtc => {
            let mut t =
                tool_versions(&[("ptxas", &tc.ptxas), ("nvdisasm", &tc.nvdisasm), ("cuobjdump", &tc.cuobjdump)]);
            let lib = tc.nvrtc_lib_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default();
            t.insert("nvrtc".into(), lib);
            t
        }
        _ => tool_versions(&[
            ("nvcc", &tc.nvcc),
            ("ptxas", &tc.ptxas),
            ("nvdisasm", &tc.nvdisasm),
            ("cuobjdump", &tc.cuobjdump),
        ]),
    };

    // The cache key: everything that can change the output.
    let mut includes = BTreeMap::new();
    let version_dir = env.ws.root.join(&v.path).parent().map(Path::to_path_buf).unwrap_or_default();
    if !aot {
        local_includes(&version_dir, source, &mut includes);
    }
    let mut key_text = format!(
        "rung-build {BUILD_LOGIC_VERSION}\n{}\n{arch}\n{flags:?}\n{tools:?}\nnvrtc={use_nvrtc}\n",
        v.kind.name()
    );
    key_text.push_str(source);
    for (p, text) in &includes {
        key_text.push_str(&format!("\n--- {}\n{text}", p.display()));
    }
    // Triton kernels are captured from run() at one size: that size's arguments are an input.
    let launch = if v.kind == VersionKind::Triton { spec.and_then(|s| launch_json(s, source)) } else { None };
    if let Some(l) = &launch {
        key_text.push_str(&format!("\n--- launch\n{l}"));
    }
    // The embedded compile scripts are part of the build, like a tool version.
    match v.kind {
        VersionKind::Triton | VersionKind::CuteDsl | VersionKind::TileLang => key_text.push_str(&PYTHON_KEY),
        // rung's headers are on a CUDA build's include path.
        VersionKind::Cuda | VersionKind::CudaHost => key_text.push_str(crate::assets::TRACE_HEADER),
        _ => {}
    }
    let cache_key = sha256_hex(key_text.as_bytes());

    let objects = Objects::new(&env.ws.state_dir());
    if let Some(cached) = store.cached_build(&cache_key)?
        && let Ok(mut detail) = serde_json::from_str::<BuildDetail>(&cached)
        && detail.artefacts.iter().all(|a| objects.path_of(&a.hash).is_file())
        && link_dumps(&objects, &env.ws.state_dir(), &v.id, &detail.artefacts).is_ok()
    {
        detail.cached = true;
        // The phases were the first build's: none ran now.
        detail.phases.clear();
        // A listing the first build's rung ended before is made now.
        listings_later(env, v, &detail);
        let summary = summarise(&detail, 0);
        return Ok(Built {
            verdict: Verdict::Pass,
            summary,
            diagnostics: vec![],
            tools,
            detail: StageDetail::Build(detail),
        });
    }

    let missing = match v.kind {
        VersionKind::Triton if !tc.has_python_package("triton") => Some("Triton is not installed"),
        VersionKind::Triton if tc.ptxas.is_none() => Some("no ptxas for Triton"),
        VersionKind::CuteDsl => None,
        VersionKind::TileLang if tc.nvcc.is_none() => Some("no nvcc for TileLang (it compiles its CUDA with nvcc)"),
        VersionKind::TileLang => None,
        VersionKind::Ptx if tc.ptxas.is_none() => Some("no ptxas"),
        VersionKind::Cuda if use_nvrtc && tc.nvrtc_lib_dir.is_none() => Some("no NVRTC (libnvrtc.so.13)"),
        VersionKind::Cuda | VersionKind::CudaHost if !use_nvrtc && tc.nvcc.is_none() => {
            Some(if v.kind == VersionKind::CudaHost {
                "no nvcc (rung_run versions need it)"
            } else {
                "no nvcc or NVRTC"
            })
        }
        _ if tc.ptxas.is_none() => Some("no ptxas"),
        _ if tc.cuobjdump.is_none() && tc.nvdisasm.is_none() => Some("no cuobjdump or nvdisasm for SASS"),
        _ => None,
    };
    if let Some(what) = missing {
        return Ok(Built {
            verdict: Verdict::Error,
            summary: format!("{what}: run `rung setup` (CUDA 13 and Triton from Python wheels), then `rung doctor`"),
            diagnostics: vec![],
            tools,
            detail: StageDetail::None,
        });
    }

    let tmp = env.ws.state_dir().join("tmp").join(format!("{}-{}", v.id, crate::store::unique()));
    if let Err(e) = std::fs::create_dir_all(&tmp) {
        return Ok(Built {
            verdict: Verdict::Error,
            summary: format!("cannot create {}: {e}", tmp.display()),
            diagnostics: vec![],
            tools,
            detail: StageDetail::None,
        });
    }
    let mut ctx = ParseContext::for_version(&v.path);
    // Tools print absolute paths for files given relative to the workspace root, sometimes.
    ctx.path_map.push((format!("{}/", env.ws.root.display()), PathBuf::new()));
    let mut s = Session {
        env,
        v,
        launch,
        tmp: tmp.clone(),
        commands: Vec::new(),
        diagnostics: Vec::new(),
        ctx,
        phases: BTreeMap::new(),
    };
    let mut detail = BuildDetail {
        compiler: match v.kind {
            VersionKind::Triton => "triton".into(),
            VersionKind::CuteDsl => "cute-dsl".into(),
            VersionKind::TileLang => "tilelang".into(),
            VersionKind::Ptx => "ptxas".into(),
            _ if use_nvrtc => "nvrtc".into(),
            _ => "nvcc".into(),
        },
        arch: arch.clone(),
        arch_reason,
        ahead_of_time: aot,
        cached: false,
        cache_key: cache_key.clone(),
        commands: vec![],
        artefacts: vec![],
        kernels: vec![],
        notes: vec![],
        phases: BTreeMap::new(),
    };
    let produced = match v.kind {
        VersionKind::Triton => build_python_aot(&mut s, AotTool::Triton, &arch, &mut detail),
        VersionKind::CuteDsl => build_python_aot(&mut s, AotTool::Cute, &arch, &mut detail),
        VersionKind::TileLang => build_python_aot(&mut s, AotTool::TileLang, &arch, &mut detail),
        _ => build_cuda(&mut s, &arch, &flags, use_nvrtc, &mut detail),
    };
    detail.commands = std::mem::take(&mut s.commands);
    detail.phases = std::mem::take(&mut s.phases);
    let diagnostics = std::mem::take(&mut s.diagnostics);
    let _ = std::fs::remove_dir_all(&tmp);

    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    let ok = produced.is_ok() && errors == 0;
    if !ok {
        let first = diagnostics.iter().find(|d| d.is_error()).map(|d| format!(": {}", d.message)).unwrap_or_default();
        return Ok(Built {
            verdict: Verdict::Fail,
            summary: format!("{} error(s){first}", errors.max(1)),
            diagnostics,
            tools,
            detail: StageDetail::Build(detail),
        });
    }
    let files = produced.expect("checked above");
    let stored = Instant::now();
    for (name, kind, bytes) in files {
        let hash = match objects.put(&bytes) {
            Ok(h) => h,
            Err(e) => {
                return Ok(Built {
                    verdict: Verdict::Error,
                    summary: format!("cannot store {name}: {e}"),
                    diagnostics,
                    tools,
                    detail: StageDetail::Build(detail),
                });
            }
        };
        detail.artefacts.push(Artefact { name, kind, hash, bytes: bytes.len() as u64 });
    }
    if let Err(e) = link_dumps(&objects, &env.ws.state_dir(), &v.id, &detail.artefacts) {
        return Ok(Built {
            verdict: Verdict::Error,
            summary: format!("cannot link .rung/dumps/{}: {e}", v.id),
            diagnostics,
            tools,
            detail: StageDetail::Build(detail),
        });
    }
    detail.phases.insert("store".into(), stored.elapsed().as_secs_f64());
    store.put_cached_build(&cache_key, &serde_json::to_string(&detail).expect("build details serialise"))?;
    // After the record: the listing's job adds itself to it.
    listings_later(env, v, &detail);
    let warnings = diagnostics.iter().filter(|d| d.severity == Severity::Warning).count();
    let summary = summarise(&detail, warnings);
    Ok(Built { verdict: Verdict::Pass, summary, diagnostics, tools, detail: StageDetail::Build(detail) })
}

/// Queues the SASS listing of each of the build's cubins that has none ([`sass`]): made while
/// the version runs, not before its run rung.
fn listings_later(env: &BuildEnv, v: &VersionFile, detail: &BuildDetail) {
    let Some(tool) = sass::Disassembler::of(env.toolchain) else { return };
    for cubin in detail.artefacts.iter().filter(|a| a.kind == "cubin") {
        let stem = cubin.name.strip_suffix(".cubin").unwrap_or(&cubin.name);
        if detail.artefacts.iter().any(|a| a.name == format!("{stem}.sass")) {
            continue;
        }
        sass::later(sass::Job {
            root: env.ws.root.clone(),
            state: env.ws.state_dir(),
            id: v.id.clone(),
            cubin: cubin.name.clone(),
            hash: cubin.hash.clone(),
            cache_key: Some(detail.cache_key.clone()),
            tool: tool.clone(),
            timeout: env.timeout,
        });
    }
}

fn summarise(d: &BuildDetail, warnings: usize) -> String {
    let regs: Vec<String> = d
        .kernels
        .iter()
        .map(|k| {
            let spill = k.resources.spill_store_bytes + k.resources.spill_load_bytes;
            let mut s = format!("{} regs", k.resources.registers);
            if k.resources.shared_bytes > 0 {
                s.push_str(&format!(", {} B smem", k.resources.shared_bytes));
            }
            if spill > 0 {
                s.push_str(&format!(", {spill} B spills"));
            }
            s
        })
        .collect();
    let mut out = format!("{} for {}", d.compiler, d.arch);
    if d.ahead_of_time {
        out.push_str(" (ahead-of-time)");
    }
    if !regs.is_empty() {
        out.push_str(&format!(": {}", regs.join("; ")));
    }
    if warnings > 0 {
        out.push_str(&format!(", {warnings} warning(s)"));
    }
    if d.cached {
        out.push_str(" [cached]");
    }
    out
}

/// Replaces `.rung/dumps/<id>/` with links to these artefacts (built beside it, then renamed).
fn link_dumps(objects: &Objects, state: &Path, id: &str, artefacts: &[Artefact]) -> std::io::Result<()> {
    let dumps = state.join(crate::store::DUMPS_DIR);
    let staging_id = format!(".{id}.{}.new", crate::store::unique());
    let _ = std::fs::remove_dir_all(dumps.join(&staging_id));
    for a in artefacts {
        objects.link_dump(state, &staging_id, &a.name, &a.hash)?;
    }
    std::fs::create_dir_all(dumps.join(&staging_id))?;
    let final_dir = dumps.join(id);
    let old = dumps.join(format!(".{id}.{}.old", crate::store::unique()));
    if final_dir.exists() {
        std::fs::rename(&final_dir, &old)?;
    }
    std::fs::rename(dumps.join(&staging_id), &final_dir)?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

type Files = Vec<(String, String, Vec<u8>)>;

#[cfg(test)]
mod tests {
    use super::choose_arch;

    #[test]
    fn target_choice() {
        let plain = "extern \"C\" __global__ void k() {}";
        let wgmma = "asm volatile(\"wgmma.fence.sync.aligned;\");";
        assert_eq!(choose_arch(None, None, plain).0, "sm_90");
        assert_eq!(choose_arch(None, None, wgmma), ("sm_90a".into(), "default, +a: uses wgmma".into()));
        assert_eq!(choose_arch(Some("sm_90"), None, wgmma).0, "sm_90a");
        // A GPU decides the target; rung.toml's suffix is honoured when it names the same chip.
        assert_eq!(choose_arch(Some("sm_90"), Some("sm_80"), plain).0, "sm_90");
        assert_eq!(choose_arch(Some("sm_90"), Some("sm_90a"), plain).0, "sm_90a");
        // A pinned plain target is respected even when the version needs sm_90a.
        assert_eq!(choose_arch(None, Some("sm_90"), wgmma).0, "sm_90");
        assert_eq!(choose_arch(Some("sm_100"), None, wgmma).0, "sm_100");
    }
}
