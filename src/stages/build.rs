//! The build rung: source → PTX → CUBIN → SASS, with the ptxas resource report per kernel and
//! diagnostics in the version's own file.
//!
//! CUDA C++ goes through `nvcc -ptx` (the front end, and nvcc's own PTX validation), then
//! `ptxas -v` (cubin and resource report), then `cuobjdump --dump-sass`. Splitting it this way
//! keeps the PTX that ptxas saw, so a ptxas error (inline PTX, wgmma on plain sm_90) is mapped
//! back through the PTX's `.loc` lines to the version's own line. A `rung_run` host entry is
//! also linked as a shared object. `.ptx` versions start at ptxas. Triton versions are compiled
//! ahead of time for the target through `assets/python/triton_aot.py`, labelled as such.
//!
//! Artefacts go to `.rung/objects/` under their hash and are linked from
//! `.rung/dumps/<version>/`. A build is keyed by the source, the local headers it includes, the
//! options and the tool versions; an unchanged version is not rebuilt.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::diag::{Diagnostic, Pos, Severity};
pub use crate::model::build::{Artefact, BuildDetail, KernelBuild};
use crate::model::report::{StageDetail, Verdict};
use crate::parsers::{
    HostLinker, KernelResources, NvccFrontend, NvlinkOutput, OutputParser, ParseContext, PtxLineMap, PtxasOutput,
    PythonTraceback, parse_all, parse_resources,
};
use crate::spec::CompilerChoice;
use crate::store::{Objects, Store, StoreError, sha256_hex};
use crate::toolchain::{Tool, Toolchain};
use crate::workspace::{VersionFile, VersionKind, Workspace};

/// Bump when the build's commands or outputs change, so cached builds are redone.
const BUILD_LOGIC_VERSION: u32 = 3;

use crate::assets::{AOT_COMMON, CUTE_AOT, TRITON_AOT};

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

thread_local! {
    /// The scheduler's cancel flag for the build running on this thread (see [`with_cancel`]).
    static CANCEL: std::cell::RefCell<Option<std::sync::Arc<std::sync::atomic::AtomicBool>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` (a build) with `cancel` watched by every tool it starts: once set, the running tool
/// is killed and the build stops. The flag is per thread, so builds on other threads go on.
pub fn with_cancel<T>(cancel: Option<&std::sync::Arc<std::sync::atomic::AtomicBool>>, f: impl FnOnce() -> T) -> T {
    CANCEL.with(|c| *c.borrow_mut() = cancel.cloned());
    let out = f();
    CANCEL.with(|c| *c.borrow_mut() = None);
    out
}

fn cancelled() -> bool {
    CANCEL.with(|c| c.borrow().as_ref().is_some_and(|f| f.load(std::sync::atomic::Ordering::SeqCst)))
}

/// Runs a tool with a time limit; a tool that cannot start, overruns or is cancelled is an `Err`.
fn run_tool(cmd: Command, timeout: Duration) -> Result<Output, String> {
    run_limited(cmd, timeout, "limits.build in rung.toml")
}

/// [`run_tool`] with the name of the limit that `timeout` comes from, for the message.
pub(crate) fn run_limited(mut cmd: Command, timeout: Duration, limit: &str) -> Result<Output, String> {
    use std::io::Read;
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
        .map_err(|e| format!("cannot run {}: {e}", cmd.get_program().to_string_lossy()))?;
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
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break s;
        }
        if cancelled() {
            kill_group(&mut child);
            return Err("cancelled: a newer save of this version arrived".into());
        }
        if start.elapsed() > timeout {
            kill_group(&mut child);
            return Err(format!(
                "{} did not finish within {:.0} s ({limit})",
                cmd.get_program().to_string_lossy(),
                timeout.as_secs_f64()
            ));
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
}

impl Session<'_> {
    /// A path as the commands see it: relative to the workspace root they run in, so a recorded
    /// command can be re-run from there.
    fn rel(&self, p: &Path) -> PathBuf {
        p.strip_prefix(&self.env.ws.root).map(Path::to_path_buf).unwrap_or_else(|_| p.to_path_buf())
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
        self.commands.push(quote(&cmd));
        let out = match run_tool(cmd, self.env.timeout) {
            Ok(o) => o,
            Err(msg) => {
                self.diagnostics.push(Diagnostic::error(&self.v.path, Pos::WHOLE_FILE, msg));
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
            // Never swallow a failure the parsers did not recognise.
            let mut d = Diagnostic::error(
                &self.v.path,
                Pos::WHOLE_FILE,
                format!("the build failed (exit {:?})", out.status.code()),
            );
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
        VersionKind::Triton => key_text.push_str(&sha256_hex(format!("{TRITON_AOT}{AOT_COMMON}").as_bytes())),
        VersionKind::CuteDsl => key_text.push_str(&sha256_hex(format!("{CUTE_AOT}{AOT_COMMON}").as_bytes())),
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

    let tmp =
        env.ws.state_dir().join("tmp").join(format!("{}-{}-{}", v.id, std::process::id(), crate::store::now_ms()));
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
    let mut s = Session { env, v, launch, tmp: tmp.clone(), commands: Vec::new(), diagnostics: Vec::new(), ctx };
    let mut detail = BuildDetail {
        compiler: match v.kind {
            VersionKind::Triton => "triton".into(),
            VersionKind::CuteDsl => "cute-dsl".into(),
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
    };
    let produced = match v.kind {
        VersionKind::Triton => build_python_aot(&mut s, AotTool::Triton, &arch, &mut detail),
        VersionKind::CuteDsl => build_python_aot(&mut s, AotTool::Cute, &arch, &mut detail),
        _ => build_cuda(&mut s, &arch, &flags, use_nvrtc, &mut detail),
    };
    detail.commands = std::mem::take(&mut s.commands);
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
    store.put_cached_build(&cache_key, &serde_json::to_string(&detail).expect("build details serialise"))?;
    let warnings = diagnostics.iter().filter(|d| d.severity == Severity::Warning).count();
    let summary = summarise(&detail, warnings);
    Ok(Built { verdict: Verdict::Pass, summary, diagnostics, tools, detail: StageDetail::Build(detail) })
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
    let staging_id = format!(".{id}.{}.new", std::process::id());
    let _ = std::fs::remove_dir_all(dumps.join(&staging_id));
    for a in artefacts {
        objects.link_dump(state, &staging_id, &a.name, &a.hash)?;
    }
    std::fs::create_dir_all(dumps.join(&staging_id))?;
    let final_dir = dumps.join(id);
    let old = dumps.join(format!(".{id}.{}.old", std::process::id()));
    if final_dir.exists() {
        std::fs::rename(&final_dir, &old)?;
    }
    std::fs::rename(dumps.join(&staging_id), &final_dir)?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

type Files = Vec<(String, String, Vec<u8>)>;

fn build_cuda(
    s: &mut Session,
    arch: &str,
    flags: &[String],
    use_nvrtc: bool,
    detail: &mut BuildDetail,
) -> Result<Files, ()> {
    let tc = s.env.toolchain;
    let id = s.v.id.clone();
    let ptx_path = s.tmp.join(format!("{id}.ptx"));
    let cubin_path = s.tmp.join(format!("{id}.cubin"));
    let virt = arch.replacen("sm_", "compute_", 1);
    let mut files: Files = Vec::new();

    if s.v.kind == VersionKind::Ptx {
        // The version is the PTX: ptxas cites it by its own path and line.
        let mut cmd = Command::new(&tc.ptxas.as_ref().expect("checked").path);
        cmd.arg(format!("-arch={arch}"))
            .args(["-v", "-warn-spills", "-lineinfo", "-o"])
            .arg(s.rel(&cubin_path))
            .arg(&s.v.path);
        let out = s.step(cmd, &[&PtxasOutput])?;
        detail.kernels = kernels_from(&String::from_utf8_lossy(&out.stderr));
        let ptx = std::fs::read(s.env.ws.root.join(&s.v.path)).map_err(|_| ())?;
        files.push((format!("{id}.ptx"), "ptx".into(), ptx));
    } else {
        if use_nvrtc {
            nvrtc_ptx(s, &virt, flags, &ptx_path)?;
        } else {
            let nvcc = &tc.nvcc.as_ref().expect("checked").path;
            let mut cmd = Command::new(nvcc);
            cmd.arg("-ptx")
                .arg(format!("-arch={virt}"))
                .args(["-lineinfo", "-O3", "-std=c++17"])
                .args(flags)
                .arg("-o")
                .arg(s.rel(&ptx_path))
                .arg(&s.v.path);
            s.step_reading_ptx(cmd, &[&NvccFrontend, &PtxasOutput, &NvlinkOutput], Some(&ptx_path))?;
        }
        let ptx = std::fs::read(&ptx_path).map_err(|_| ())?;
        let mut cmd = Command::new(&tc.ptxas.as_ref().expect("checked").path);
        cmd.arg(format!("-arch={arch}"))
            .args(["-v", "-warn-spills", "-lineinfo", "-o"])
            .arg(s.rel(&cubin_path))
            .arg(s.rel(&ptx_path));
        let out = s.step(cmd, &[&PtxasOutput])?;
        detail.kernels = kernels_from(&String::from_utf8_lossy(&out.stderr));
        files.push((format!("{id}.ptx"), "ptx".into(), ptx));

        if s.v.kind == VersionKind::CudaHost {
            let so = s.tmp.join(format!("lib{id}.so"));
            let nvcc = &tc.nvcc.as_ref().expect("checked").path;
            let mut cmd = Command::new(nvcc);
            // The CUDA runtime beside nvcc: a pip-installed toolchain keeps it in lib/, where
            // nvcc's own link line does not look.
            if let Some(root) = nvcc.parent().and_then(Path::parent) {
                for lib in ["lib", "lib64"]
                    .map(|l| root.join(l))
                    .into_iter()
                    .filter(|l| l.join("libcudart_static.a").is_file())
                {
                    cmd.arg(format!("-L{}", lib.display()));
                }
            }
            // The version's own translation unit plus the packed entry the worker calls
            // (`hostentry::PACKED_SHIM`): the shim includes the version, so its quoted
            // includes resolve as they do for the version.
            let shim = s.tmp.join(format!("{id}-packed.cu"));
            std::fs::write(&shim, crate::hostentry::packed_shim(&s.v.path)).map_err(|_| ())?;
            cmd.args(["-shared", "-Xcompiler", "-fPIC"])
                .arg(format!("-gencode=arch={virt},code={arch}"))
                .args(["-lineinfo", "-O3", "-std=c++17", "-I."])
                .args(flags)
                .arg("-o")
                .arg(s.rel(&so))
                .arg(s.rel(&shim));
            s.step(cmd, &[&NvccFrontend, &PtxasOutput, &NvlinkOutput, &HostLinker])?;
            files.push((format!("lib{id}.so"), "so".into(), std::fs::read(&so).map_err(|_| ())?));
        }
    }
    let cubin = std::fs::read(&cubin_path).map_err(|_| ())?;
    let sass = disassemble(s, &cubin_path)?;
    files.push((format!("{id}.cubin"), "cubin".into(), cubin));
    files.push((format!("{id}.sass"), "sass".into(), sass.into_bytes()));
    Ok(files)
}

/// The front end through NVRTC, in a child process whose library path lets NVRTC find its
/// builtins. Its log is in nvcc's format, naming the version by its workspace path.
fn nvrtc_ptx(s: &mut Session, virt: &str, flags: &[String], ptx_path: &Path) -> Result<(), ()> {
    let tc = s.env.toolchain;
    let lib = tc.nvrtc_lib_dir.as_ref().expect("checked");
    let exe = std::env::current_exe().map_err(|_| ())?;
    let mut cmd = Command::new(exe);
    cmd.arg("internal-nvrtc").arg(&s.v.path).arg("--out").arg(s.rel(ptx_path)).arg("--");
    cmd.arg(format!("--gpu-architecture={virt}")).args(["-lineinfo", "-std=c++17"]);
    if let Some(dir) = s.v.path.parent() {
        cmd.arg(format!("-I{}", dir.display()));
    }
    if let Some(include) = lib.parent().map(|p| p.join("include")).filter(|p| p.is_dir()) {
        cmd.arg(format!("-I{}", include.display()));
    }
    cmd.args(flags);
    let mut paths = vec![lib.clone()];
    paths.extend(std::env::split_paths(&std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default()));
    if let Ok(joined) = std::env::join_paths(paths) {
        cmd.env("LD_LIBRARY_PATH", joined);
    }
    s.step(cmd, &[&NvccFrontend]).map(|_| ())
}

fn kernels_from(ptxas_stderr: &str) -> Vec<KernelBuild> {
    parse_resources(ptxas_stderr)
        .into_iter()
        .map(|r| KernelBuild { resources: r, num_warps: None, num_stages: None })
        .collect()
}

/// SASS through `nvdisasm -c -g` when present: it names branch targets with labels and keeps
/// the source line of each instruction; else `cuobjdump --dump-sass`.
fn disassemble(s: &mut Session, cubin: &Path) -> Result<String, ()> {
    let tc = s.env.toolchain;
    let mut cmd = match (&tc.nvdisasm, &tc.cuobjdump) {
        (Some(n), _) => {
            let mut cmd = Command::new(&n.path);
            cmd.args(["-c", "-g"]).arg(s.rel(cubin));
            cmd
        }
        (None, Some(c)) => {
            let mut cmd = Command::new(&c.path);
            cmd.arg("--dump-sass").arg(s.rel(cubin));
            cmd
        }
        (None, None) => return Err(()),
    };
    cmd.current_dir(&s.env.ws.root);
    let out = s.step(cmd, &[])?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The arguments `run(...)` gets at the first benchmark size (else the last test size), for
/// triton_aot.py to call it with fake tensors and compile the kernels it really launches.
fn launch_json(spec: &crate::spec::Spec, source: &str) -> Option<serde_json::Value> {
    let sizes = spec.bench_sizes.first().or(spec.test_sizes.last())?;
    let (params, _) = crate::stages::prepare::python_def_params(source, "run")?;
    let names: Vec<String> = params.into_iter().map(|(n, _)| n).collect();
    let args = crate::stages::call_args(spec, &names, sizes, |t, shape| crate::model::protocol::TensorFile {
        path: Default::default(),
        dtype: t.dtype,
        shape,
    })
    .ok()?;
    Some(serde_json::json!({ "args": args, "sizes": sizes }))
}

/// What triton_aot.py prints.
#[derive(Deserialize)]
struct AotReport {
    #[serde(default)]
    kernels: Vec<AotKernel>,
    #[serde(default)]
    warnings: Vec<String>,
    #[serde(default)]
    errors: Vec<AotError>,
}

#[derive(Deserialize)]
struct AotKernel {
    name: String,
    /// Compiled from a launch captured by calling run(), not from an inferred signature.
    #[serde(default)]
    captured: bool,
    #[serde(default)]
    files: BTreeMap<String, String>,
    num_warps: Option<u32>,
    num_stages: Option<u32>,
    #[serde(default)]
    shared: Option<u32>,
    registers: Option<u32>,
    spill_stores: Option<u32>,
    spill_loads: Option<u32>,
    stack_frame: Option<u32>,
    barriers: Option<u32>,
    gpu_name: Option<String>,
    #[serde(default)]
    notes: Vec<String>,
}

#[derive(Deserialize)]
struct AotError {
    kernel: Option<String>,
    #[serde(rename = "type")]
    kind: String,
    message: String,
    #[serde(default)]
    traceback: Option<String>,
    lineno: Option<u32>,
    col: Option<u32>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum AotTool {
    Triton,
    Cute,
}

/// Triton or CuTe DSL kernels compiled ahead of time by the embedded Python scripts, which print
/// one JSON report (kernels with their files and resources, or errors at the version's lines).
fn build_python_aot(s: &mut Session, tool: AotTool, arch: &str, detail: &mut BuildDetail) -> Result<Files, ()> {
    let tc = s.env.toolchain;
    let python = &tc.python.as_ref().expect("checked").path;
    let (name, text) = match tool {
        AotTool::Triton => ("triton_aot.py", TRITON_AOT),
        AotTool::Cute => ("cute_aot.py", CUTE_AOT),
    };
    let script = s.tmp.join(name);
    std::fs::write(&script, text).map_err(|_| ())?;
    std::fs::write(s.tmp.join("aot_common.py"), AOT_COMMON).map_err(|_| ())?;
    let out_dir = s.tmp.join("aot");
    // CuTe DSL compiles for the architecture-specific target (sm_90a on Hopper).
    let target = match tool {
        AotTool::Cute if !arch.ends_with('a') => format!("{}a", arch.trim_start_matches("sm_")),
        _ => arch.trim_start_matches("sm_").to_string(),
    };
    detail.arch = format!("sm_{target}");
    let mut cmd = Command::new(python);
    cmd.arg(s.rel(&script))
        .arg("--version-file")
        .arg(&s.v.path)
        .arg("--arch")
        .arg(target)
        .arg("--out")
        .arg(s.rel(&out_dir));
    if let Some(ptxas) = tc.ptxas.as_ref().map(|t| &t.path) {
        cmd.env("TRITON_PTXAS_PATH", ptxas).env("TRITON_PTXAS_BLACKWELL_PATH", ptxas);
    }
    cmd.env("TRITON_CACHE_DIR", s.env.ws.state_dir().join("triton-cache")).env("TRITON_DEFAULT_FP_FUSION", "1");
    if let Some(bin) = tc.nvdisasm.as_ref().or(tc.ptxas.as_ref()).and_then(|t| t.path.parent()) {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let joined = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path)));
        if let Ok(p) = joined {
            cmd.env("PATH", p);
        }
    }
    if let Some(launch) = s.launch.as_ref().filter(|_| tool == AotTool::Triton) {
        let path = s.tmp.join("launch.json");
        std::fs::write(&path, launch.to_string()).map_err(|_| ())?;
        cmd.arg("--launch-json").arg(s.rel(&path));
    }
    // A problem folder's own modules (GPU MODE's task.py, utils.py) import from its root.
    cmd.env("PYTHONPATH", &s.env.ws.root);
    cmd.current_dir(&s.env.ws.root);
    s.commands.push(quote(&cmd));
    let out = match run_tool(cmd, s.env.timeout) {
        Ok(o) => o,
        Err(msg) => {
            s.diagnostics.push(Diagnostic::error(&s.v.path, Pos::WHOLE_FILE, msg));
            return Err(());
        }
    };
    let report: AotReport = match serde_json::from_slice(&out.stdout) {
        Ok(r) => r,
        Err(_) => {
            // The script itself broke: show Python's own words.
            let text = String::from_utf8_lossy(&out.stderr).into_owned();
            let mut ds = PythonTraceback.parse(&text, &s.ctx);
            if ds.is_empty() {
                let mut d = Diagnostic::error(&s.v.path, Pos::WHOLE_FILE, "the Triton compiler produced no result");
                d.tool_text = Some(text);
                ds.push(d);
            }
            s.diagnostics.extend(ds);
            return Err(());
        }
    };
    for e in &report.errors {
        let pos = Pos::new(e.lineno.unwrap_or(0), e.col.unwrap_or(0));
        let head = e.message.lines().last().unwrap_or(&e.message).trim();
        let msg = match &e.kernel {
            Some(k) => format!("{}: {head} (in {k})", e.kind),
            None => format!("{}: {head}", e.kind),
        };
        let mut d = Diagnostic::error(&s.v.path, pos, msg);
        d.tool_text = Some(match e.traceback.as_deref().filter(|t| !t.is_empty()) {
            Some(tb) => format!("{}\n{tb}", e.message),
            None => e.message.clone(),
        });
        s.diagnostics.push(d);
    }
    detail.notes.extend(report.warnings.iter().cloned());
    if !report.errors.is_empty() || !out.status.success() {
        if report.errors.is_empty() {
            let mut d = Diagnostic::error(
                &s.v.path,
                Pos::WHOLE_FILE,
                format!("the Triton compiler failed (exit {:?})", out.status.code()),
            );
            d.tool_text = Some(String::from_utf8_lossy(&out.stderr).into_owned());
            s.diagnostics.push(d);
        }
        return Err(());
    }
    if report.kernels.is_empty() {
        let (what, help) = match tool {
            AotTool::Triton => (
                "no @triton.jit kernel found",
                "a Triton version defines at least one @triton.jit kernel and a run(...) that launches it",
            ),
            AotTool::Cute => (
                "no @cute.jit function found",
                "a CuTe DSL version defines a @cute.jit function that launches its @cute.kernel, and a run(...)",
            ),
        };
        s.diagnostics.push(Diagnostic::error(&s.v.path, Pos::new(1, 1), what).with_help(help));
        return Err(());
    }
    if let Some(launch) = s.launch.as_ref().filter(|_| report.kernels.iter().any(|k| k.captured)) {
        detail.notes.insert(0, format!("kernels captured from run() at {}", launch["sizes"]));
    }
    let mut files: Files = Vec::new();
    for k in &report.kernels {
        for (kind, path) in &k.files {
            if kind == "meta" || kind == "source" {
                continue;
            }
            let ext = if kind == "ptxas" { "ptxas.txt".to_string() } else { kind.clone() };
            if let Ok(bytes) = std::fs::read(s.env.ws.root.join(path)) {
                files.push((format!("{}.{ext}", k.name), kind.clone(), bytes));
            }
        }
        detail.notes.extend(k.notes.iter().map(|n| format!("{}: {n}", k.name)));
        detail.kernels.push(KernelBuild {
            resources: KernelResources {
                name: k.name.clone(),
                arch: k.gpu_name.clone().unwrap_or_else(|| arch.to_string()),
                registers: k.registers.unwrap_or(0),
                barriers: k.barriers.unwrap_or(0),
                shared_bytes: k.shared.unwrap_or(0),
                stack_frame_bytes: k.stack_frame.unwrap_or(0),
                spill_store_bytes: k.spill_stores.unwrap_or(0),
                spill_load_bytes: k.spill_loads.unwrap_or(0),
                cmem0_bytes: None,
            },
            num_warps: k.num_warps,
            num_stages: k.num_stages,
        });
    }
    Ok(files)
}

/// The build result of a Triton version compiled at launch, made after the run rung captured
/// the kernels that really launched (their PTX and cubin, now in `.rung/dumps/<id>/`): those are
/// its artefacts, stored like any build's, with each kernel's resources read from its cubin by
/// `cuobjdump --dump-resource-usage`. It replaces the placeholder recorded before the run.
pub fn captured(
    ws: &Workspace,
    tc: &Toolchain,
    arch: &str,
    kernels: &[crate::model::protocol::CapturedKernel],
) -> Option<(Verdict, String, BuildDetail)> {
    if kernels.is_empty() {
        return None;
    }
    let objects = Objects::new(&ws.state_dir());
    let mut detail = BuildDetail {
        compiler: "triton".into(),
        arch: arch.into(),
        arch_reason: "GPU".into(),
        ahead_of_time: false,
        cached: false,
        cache_key: String::new(),
        commands: vec![],
        artefacts: vec![],
        kernels: vec![],
        notes: vec![
            "compiled by Triton at launch on the GPU; captured by the run rung: these are the kernels that ran".into(),
        ],
    };
    for k in kernels {
        for path in [&k.ptx, &k.cubin].into_iter().flatten() {
            let full = ws.root.join(path);
            let Ok(bytes) = std::fs::read(&full) else { continue };
            let Ok(hash) = objects.put(&bytes) else { continue };
            let name = full.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            let kind = full.extension().map(|e| e.to_string_lossy().to_string()).unwrap_or_default();
            detail.artefacts.push(Artefact { name, kind, hash, bytes: bytes.len() as u64 });
        }
        let resources = k
            .cubin
            .as_ref()
            .and_then(|c| cubin_resources(tc, &ws.root.join(c)))
            .and_then(|all| all.into_iter().find(|r| r.name == k.name))
            .unwrap_or_else(|| KernelResources { name: k.name.clone(), arch: arch.into(), ..Default::default() });
        detail.kernels.push(KernelBuild { resources, num_warps: k.num_warps, num_stages: None });
    }
    let names: Vec<String> =
        detail.kernels.iter().map(|k| format!("{} ({} regs)", k.resources.name, k.resources.registers)).collect();
    let summary = format!("triton at launch for {arch}: {} kernel(s) captured: {}", names.len(), names.join(", "));
    Some((Verdict::Pass, summary, detail))
}

/// Each kernel's resources in a cubin, from `cuobjdump --dump-resource-usage`
/// (`Function k: REG:26 STACK:0 SHARED:0 LOCAL:0 ...`).
pub fn cubin_resources(tc: &Toolchain, cubin: &Path) -> Option<Vec<KernelResources>> {
    let tool = tc.cuobjdump.as_ref()?;
    let out = std::process::Command::new(&tool.path).arg("--dump-resource-usage").arg(cubin).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Some(parse_resource_usage(&text))
}

/// Parses `cuobjdump --dump-resource-usage`: a `Function <name>:` line, then its fields
/// (`REG:26 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:576 ...`) on the next line.
pub fn parse_resource_usage(text: &str) -> Vec<KernelResources> {
    let mut arch = String::new();
    let mut out = Vec::new();
    let mut pending: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("arch = ") {
            arch = rest.trim().to_string();
            continue;
        }
        if let Some(rest) = line.strip_prefix("Function ") {
            let (name, fields) = rest.split_once(':').unwrap_or((rest, ""));
            pending = Some(name.trim().to_string());
            if fields.trim().is_empty() {
                continue;
            }
        }
        let Some(name) = pending.take() else { continue };
        let fields = line.rsplit_once("Function ").map_or(line, |(_, r)| r.split_once(':').map_or(r, |(_, f)| f));
        let field = |key: &str| -> Option<u32> {
            fields
                .split_whitespace()
                .find_map(|f| f.strip_prefix(key).and_then(|v| v.strip_prefix(':')))
                .and_then(|v| v.parse().ok())
        };
        out.push(KernelResources {
            name,
            arch: arch.clone(),
            registers: field("REG").unwrap_or(0),
            barriers: 0,
            shared_bytes: field("SHARED").unwrap_or(0),
            stack_frame_bytes: field("STACK").unwrap_or(0),
            // Local memory is what spills (and local arrays) use; cuobjdump does not split it.
            spill_store_bytes: field("LOCAL").unwrap_or(0),
            spill_load_bytes: field("LOCAL").unwrap_or(0),
            cmem0_bytes: field("CONSTANT[0]"),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::choose_arch;

    #[test]
    fn cuobjdump_resource_usage_parses_per_kernel() {
        // As cuobjdump 13.2 prints it for a fatbin (a plain cubin has no `arch =` header).
        let text = "\nFatbin elf code:\n================\narch = sm_90\ncode version = [1,8]\n\n\
                    Resource usage:\n Common:\n  GLOBAL:0\n Function add_kernel:\n  REG:26 STACK:0 SHARED:0 LOCAL:8 CONSTANT[0]:560 TEXTURE:0 SURFACE:0 SAMPLER:0\n\
                    Function _Z4tailPf:\n  REG:40 STACK:16 SHARED:1024 LOCAL:0 CONSTANT[0]:360 TEXTURE:0 SURFACE:0 SAMPLER:0\n";
        let r = super::parse_resource_usage(text);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!((r[0].name.as_str(), r[0].registers, r[0].cmem0_bytes), ("add_kernel", 26, Some(560)));
        assert_eq!((r[0].arch.as_str(), r[0].spill_store_bytes), ("sm_90", 8));
        assert_eq!(
            (r[1].name.as_str(), r[1].registers, r[1].shared_bytes, r[1].stack_frame_bytes),
            ("_Z4tailPf", 40, 1024, 16)
        );
    }

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
