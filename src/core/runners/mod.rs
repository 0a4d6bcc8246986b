//! The worker processes that execute versions, and their lifetimes. A [`Runners`] is held for as
//! long as its owner lives: one `rung check` (every version of it), or a long-running process
//! (`rung watch`, the TUI, the MCP server, `rung selftest`), so the Python zygote's imports stay
//! warm across checks. Each check of a Python version runs in a fresh child forked from the
//! zygote; each CUDA version runs in the native worker, which is replaced after any CUDA error.
//!
//! Every request has a time limit. On a time-out the process running it is killed (the zygote's
//! child, or the native worker) and the failure is returned: the next request finds a working
//! worker again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::model::protocol::{self, CallMode, Capability, Op, Request, Response, WorkerError};

use crate::assets::PYTHON_WORKER;

pub mod ending;
mod worker;
mod zygote;
pub use worker::{Failure, Worker};
pub use zygote::Zygote;

/// How long a worker may take to start (the zygote imports torch and Triton).
pub const START_LIMIT: Duration = Duration::from_secs(120);

/// Kills a zygote child and everything in its process group (it leads one: what the version
/// started dies with it).
fn signal_kill(pid: u32) {
    // SAFETY: killpg(2) and kill(2) on a pid this process's zygote forked and reported, which
    // leads its own group; the worst case is ESRCH when it has already exited.
    unsafe {
        libc::killpg(pid as i32, libc::SIGKILL);
        libc::kill(pid as i32, libc::SIGKILL);
    }
}

/// Whether a process is still running: there, and not a zombie its parent has yet to reap.
fn running(pid: u32) -> bool {
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis.
        return stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X')));
    }
    if std::path::Path::new("/proc/self").exists() {
        return false;
    }
    // SAFETY: kill(2) with signal 0 sends nothing; it only says whether the pid exists.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

/// A zygote's start as the run's phases, for a check that waited for it: the whole start
/// (`zygote_started`, imports included, as the zygote timed it) and each step it timed
/// (`zygote: import torch`, `zygote: triton_key`).
pub fn start_phases(hello: &protocol::Hello) -> Vec<(String, f64)> {
    let steps = hello.warmed.iter().map(|(k, s)| (format!("zygote: {k}"), *s));
    hello.start_seconds.map(|s| ("zygote_started".to_string(), s)).into_iter().chain(steps).collect()
}

/// The pids a scheduler may kill to cancel the job running in these workers (zygote children and
/// the native worker), shared with the thread that schedules.
pub type Live = std::sync::Arc<std::sync::Mutex<Vec<u32>>>;

fn live_add(live: &Live, pid: u32) {
    if let Ok(mut l) = live.lock() {
        l.push(pid);
    }
}

fn live_remove(live: &Live, pid: u32) {
    if let Ok(mut l) = live.lock() {
        l.retain(|p| *p != pid);
    }
}

/// Kills every live pid (a scheduler cancelling the running job).
pub fn kill_live(live: &Live) {
    if let Ok(l) = live.lock() {
        for pid in l.iter() {
            signal_kill(*pid);
        }
    }
}

/// The native worker (`rung worker`).
pub struct Native {
    worker: Worker,
    next_id: u64,
}

/// What every worker process gets: its folder for bulk files, the workspace's Triton cache, the
/// log folder.
#[derive(Debug, Clone)]
pub struct WorkerEnv {
    pub cwd: PathBuf,
    pub triton_cache: PathBuf,
    /// The workspace's build caches for torch: load_inline's extensions and torch.compile's
    /// Inductor artefacts, so an unchanged extension is not rebuilt at the next check.
    pub torch_cache: PathBuf,
    pub logs: PathBuf,
    pub data: PathBuf,
    /// The one GPU (by ordinal) the workers may see, for a lane of one GPU among several.
    pub visible_device: Option<i32>,
    /// libcupti for the workers' bench timing (`RUNG_CUPTI`), when rung found one and the
    /// environment names none.
    pub cupti: Option<PathBuf>,
    /// What the zygote imports before it forks (`RUNG_PREIMPORT`): see [`preimports`]. Decided
    /// when a zygote starts.
    pub preimport: Vec<&'static str>,
    /// The sandbox the workers start in (`RUNG_SANDBOX=strict`), made for this workspace.
    pub sandbox: Option<std::sync::Arc<crate::sandbox::Sandbox>>,
    /// The check lane these workers serve, when a check runs several ([`crate::check`]): their
    /// logs are their own, so a dying worker's quoted log tail is its own.
    pub lane: Option<usize>,
}

/// What a zygote imports before it forks (`RUNG_PREIMPORT`), for the workspace's Python at its
/// root and in `versions/` (the problem's own only, for the judge's and the reference's zygote),
/// what each forked child would otherwise import again: `torch._inductor.config` where GPU
/// MODE's DeterministicContext (`torch.use_deterministic_algorithms`, in nearly every pmpp_v2
/// reference) or `torch.compile` is called (900 modules, 4-6 s on the H200's Python), and
/// `torch._inductor.compile_fx` where `torch.compile` is (its first call imports about 600 more:
/// 1.4-1.9 s on the CPU machine, 0.01 s with compile_fx imported first). Only modules whose
/// import leaves CUDA alone may be preimported (`torch.utils.cpp_extension`, for `load_inline`,
/// opens it, and every forked child then failed with "Cannot re-initialize CUDA in forked
/// subprocess" on the H200): the zygote starts again without any that does (rung_worker.py's
/// `_preimport`).
pub fn preimports(root: &Path, problem_only: bool) -> Vec<&'static str> {
    let mut files = python_files(root);
    if !problem_only {
        files.extend(python_files(&root.join(crate::workspace::VERSIONS_DIR)));
    }
    let texts: Vec<String> = files.iter().filter_map(|p| std::fs::read_to_string(p).ok()).collect();
    let mut out = Vec::new();
    if texts.iter().any(|t| t.contains("use_deterministic_algorithms") || t.contains("torch.compile")) {
        out.push("torch._inductor.config");
    }
    if texts.iter().any(|t| t.contains("torch.compile")) {
        out.push("torch._inductor.compile_fx");
    }
    out
}

/// The `.py` files directly in `dir`.
fn python_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "py")).collect())
        .unwrap_or_default()
}

/// The slow-to-import packages (torch) the problem's own Python imports: the workspace's
/// top-level modules (the reference, whatever rung.toml names it, checks.py, their helpers).
fn problem_imports(root: &Path) -> Vec<&'static str> {
    let imports_torch = python_files(root).into_iter().any(|p| {
        std::fs::read_to_string(p).is_ok_and(|t| {
            t.lines().map(str::trim_start).any(|l| l.starts_with("import torch") || l.starts_with("from torch"))
        })
    });
    if imports_torch { vec!["torch"] } else { vec![] }
}

impl WorkerEnv {
    /// A worker's log file: `NAME.log`, or `NAME-laneK.log` for a check lane's.
    pub fn log(&self, name: &str) -> PathBuf {
        match self.lane {
            Some(k) => self.logs.join(format!("{name}-lane{k}.log")),
            None => self.logs.join(format!("{name}.log")),
        }
    }

    /// Sets up `cmd` to start a worker: its folders, caches and, when sandboxed, the sandbox;
    /// `seal` says which process seals `/proc` (a zygote's children, or the worker itself).
    fn apply(&self, cmd: &mut Command, seal: crate::sandbox::Seal) {
        if let Some(d) = self.visible_device {
            cmd.env("CUDA_VISIBLE_DEVICES", d.to_string());
        }
        cmd.current_dir(&self.cwd)
            .env("TRITON_CACHE_DIR", &self.triton_cache)
            .env("TORCH_EXTENSIONS_DIR", self.torch_cache.join("extensions"))
            .env("TORCHINDUCTOR_CACHE_DIR", self.torch_cache.join("inductor"))
            // TileLang compiles at a version's first call: its kernels and TVM's libraries are
            // kept beside torch's, not in the home folder (not writable in the sandbox).
            .env("TILELANG_CACHE_DIR", self.torch_cache.join("tilelang"))
            .env("TVM_FFI_CACHE_DIR", self.torch_cache.join("tvm-ffi"))
            .env("TRITON_DEFAULT_FP_FUSION", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .env("RUNG_WORKER_DIR", &self.data);
        if let Some(p) = &self.cupti {
            cmd.env("RUNG_CUPTI", p);
        }
        if !self.preimport.is_empty() {
            cmd.env("RUNG_PREIMPORT", self.preimport.join(","));
        }
        if let Some(sandbox) = &self.sandbox {
            // Temporary files in the run's own folder: the rest of /tmp is outside the sandbox;
            // CUDA's JIT cache beside Triton's rather than in the home folder.
            cmd.env("TMPDIR", &self.data).env("CUDA_CACHE_PATH", self.triton_cache.join("cuda"));
            // Inductor (torch.compile) compiles in the version's own process: its compile
            // workers are processes that process starts, which inherit its /proc seal, so any of
            // them that opens the GPU fails.
            cmd.env("TORCHINDUCTOR_COMPILE_THREADS", "1");
            sandbox.apply(cmd, seal);
        }
    }
}

type StartingZygote = std::thread::JoinHandle<(Result<Zygote, Failure>, f64)>;

/// The workers a process keeps: started on first use, restarted when one dies.
pub struct Runners {
    pub env: WorkerEnv,
    script: PathBuf,
    python: Option<PathBuf>,
    zygotes: Vec<Zygote>,
    /// Zygotes starting on threads of their own, by kind (interpret, reference): the first
    /// request for that kind takes one ([`Runners::start_ahead`]).
    starting: Vec<((bool, bool), StartingZygote)>,
    native: Option<Native>,
    /// The native worker starting on a thread of its own ([`Runners::start_native_ahead`]).
    native_starting: Option<std::thread::JoinHandle<Result<Worker, Failure>>>,
    /// Seconds each zygote took to start (imports), for the record.
    pub zygote_starts: Vec<f64>,
    /// Benchmark-size inputs and reference outputs shared by the versions this check benches.
    pub kept: crate::kept::Kept,
    /// The test sizes' input sets the last version's check drew, by what drew them (seed,
    /// inputs, sizes): the next version of the same check uses them rather than drawing again.
    pub drawn_inputs: Option<(String, DrawnInputs)>,
    /// Pids a scheduler may kill to cancel the running job.
    pub live: Live,
}

/// The native worker started from `cmd`, its pid in `live`.
fn start_native(cmd: Command, log: &Path, live: &Live) -> Result<Worker, Failure> {
    let worker = Worker::start(cmd, log)?;
    live_add(live, worker.child.id());
    Ok(worker)
}

/// A check's drawn input sets: (test size, pass, input) → bytes.
pub type DrawnInputs = std::collections::BTreeMap<(usize, usize, usize), std::sync::Arc<Vec<u8>>>;

/// Drawn test-size inputs up to this many bytes in all are kept for the next version (held
/// between checks too, in a watch or the TUI: kept small).
pub const KEEP_DRAWN_BYTES: usize = 64 << 20;

/// Bulk data goes through files in shared memory when the system has it.
pub fn data_dir() -> PathBuf {
    let base = Path::new("/dev/shm");
    // Benchmark-size buffers need room: a container's /dev/shm is often 64 MB.
    let base = if base.is_dir() && free_bytes(base) > 8 << 30 { base.to_path_buf() } else { std::env::temp_dir() };
    sweep_dead(&base);
    base.join(format!("rung-{}", crate::store::unique()))
}

/// Removes the data folders (`rung-<pid>-<n>`) of rung processes that are gone: one stopped by
/// Ctrl-C or a kill never removed its own, and in /dev/shm they hold memory until a reboot.
pub fn sweep_dead(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) =
            name.strip_prefix("rung-").and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        // SAFETY: getuid(2) takes nothing and cannot fail.
        let uid = unsafe { libc::getuid() };
        let ours = e.metadata().is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == uid);
        if ours && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Bytes free on the file system holding `path` (0 when unknown).
fn free_bytes(path: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return 0 };
    // SAFETY: statvfs fills the struct it is given; the path is a valid C string.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut s) != 0 {
            return 0;
        }
        s.f_bavail as u64 * s.f_frsize as u64
    }
}

impl Runners {
    /// Workers for the workspace at `root` (its `.rung` state folder is `state`).
    pub fn new(root: &Path, state: &Path, python: Option<PathBuf>) -> std::io::Result<Runners> {
        let data = data_dir();
        std::fs::create_dir_all(&data)?;
        let script = data.join(PYTHON_WORKER);
        // The worker imports the problem judge, and the zygote's prewarm compiles through the
        // ahead-of-time capture (triton_capture.py): every Python file goes beside it.
        crate::assets::write_python(&data)?;
        let sandbox = crate::sandbox::for_workspace(root, python.as_deref(), &data);
        Ok(Runners {
            env: WorkerEnv {
                cwd: root.to_path_buf(),
                triton_cache: state.join("triton-cache"),
                torch_cache: state.join("torch-cache"),
                logs: state.join("logs"),
                data,
                visible_device: None,
                cupti: if std::env::var_os("RUNG_CUPTI").is_some() { None } else { crate::toolchain::find_cupti() },
                preimport: Vec::new(),
                sandbox,
                lane: None,
            },
            script,
            python,
            zygotes: Vec::new(),
            starting: Vec::new(),
            native: None,
            native_starting: None,
            zygote_starts: Vec::new(),
            kept: crate::kept::Kept::default(),
            drawn_inputs: None,
            live: Live::default(),
        })
    }

    /// The run's data folder (in shared memory where there is some).
    pub fn data(&self) -> &Path {
        &self.env.data
    }

    /// The folder for one check's bulk files (emptied first).
    pub fn scratch(&self, name: &str) -> PathBuf {
        let dir = self.env.data.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::create_dir_all(&dir);
        dir
    }

    /// The zygote (interpreter or real Triton), started if needed (or restarted if it died).
    pub fn zygote(&mut self, interpret: bool) -> Result<&mut Zygote, Failure> {
        self.zygote_for(interpret, false)
    }

    /// The zygote of that kind, started if it is not running (or died).
    fn zygote_for(&mut self, interpret: bool, reference: bool) -> Result<&mut Zygote, Failure> {
        let is = |z: &Zygote| z.interpret == interpret && z.reference == reference;
        if let Some(i) = self.zygotes.iter().position(is)
            && !self.zygotes[i].worker.alive()
        {
            self.zygotes.remove(i);
        }
        if !self.zygotes.iter().any(is)
            && let Some(i) = self.starting.iter().position(|(k, _)| *k == (interpret, reference))
            && let (_, handle) = self.starting.remove(i)
            && let Ok((Ok(mut z), seconds)) = handle.join()
            && z.worker.alive()
        {
            if !reference {
                self.zygote_starts.push(seconds);
            }
            self.zygotes.push(z);
        }
        if !self.zygotes.iter().any(is) {
            let start = self.zygote_starter((interpret, reference), self.live.clone())?;
            let t0 = Instant::now();
            let z = start()?;
            if !reference {
                self.zygote_starts.push(t0.elapsed().as_secs_f64());
            }
            self.zygotes.push(z);
        }
        Ok(self.zygotes.iter_mut().find(|z| is(z)).expect("just started"))
    }

    /// Starts the zygote of that kind on a thread of its own, while the caller goes on (a check
    /// building its versions): its imports (torch and Triton, seconds) are then paid while nobody
    /// waits, and the first request for it takes it. Nothing when one runs or is starting, or
    /// without a Python.
    pub fn start_ahead(&mut self, interpret: bool, reference: bool) {
        let kind = (interpret, reference);
        let running = self.zygotes.iter_mut().any(|z| (z.interpret, z.reference) == kind && z.worker.alive());
        if running || self.starting.iter().any(|(k, _)| *k == kind) {
            return;
        }
        let Ok(start) = self.zygote_starter(kind, self.live.clone()) else { return };
        let handle = std::thread::spawn(move || {
            let t0 = Instant::now();
            (start(), t0.elapsed().as_secs_f64())
        });
        self.starting.push((kind, handle));
    }

    /// What starts a zygote of `kind` (interpret, reference), now or on another thread: its
    /// Python, the worker's script, and the environment with the preimports read now (a watch's
    /// restarted zygote sees versions added since; the judge's and the reference's zygote run
    /// only the problem's own code). Its children's pids go in `live`.
    fn zygote_starter(
        &self,
        kind: (bool, bool),
        live: Live,
    ) -> Result<impl FnOnce() -> Result<Zygote, Failure> + Send + 'static, Failure> {
        let python = self
            .python
            .clone()
            .ok_or_else(|| Failure::Protocol("no Python with numpy for the worker: run `rung setup`".to_string()))?;
        let (script, mut env) = (self.script.clone(), self.env.clone());
        env.preimport = preimports(&env.cwd, kind.1);
        Ok(move || Zygote::start(&python, &script, kind, &env, live))
    }

    /// The child that runs a rung.toml problem's own Python (its reference, checks.py) in this
    /// check: forked from a zygote of its own that no version's code ever ran in, so nothing a
    /// version does in its process (patching numpy, the worker's functions, the reference's
    /// module) reaches the answer it is judged against. The child lives until
    /// [`Runners::end_children`], so a check imports the reference once.
    pub fn reference(&mut self, limit: Duration) -> Result<&mut Zygote, Failure> {
        let z = self.zygote_for(true, true)?;
        if !z.has_child() || z.child_mode != Some(CallMode::Reference) {
            let resp = z.fork(CallMode::Reference, limit)?;
            if !resp.ok {
                let e = resp.error.unwrap_or_else(|| WorkerError::new("WorkerDied", "the child did not start"));
                return Err(Failure::Died(format!("the reference's process did not start: {}: {}", e.kind, e.message)));
            }
        }
        Ok(z)
    }

    /// One call of the problem's own Python (its reference), for a thread working ahead of
    /// need apart from this check's workers (the bench's fresh-set reference): in a reference
    /// zygote of its own, as [`Runners::reference`]'s, started for the call and ended after.
    /// `stop` set (and the child's pid, put in `live`, killed) abandons it. `None` without a
    /// Python.
    pub fn detached_reference(
        &self,
        live: Live,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Option<impl FnOnce(protocol::Call, Duration) -> Result<Response, Failure> + Send + 'static> {
        let start = self.zygote_starter((true, true), live).ok()?;
        let stopped = move || stop.load(std::sync::atomic::Ordering::SeqCst);
        Some(move |call: protocol::Call, limit: Duration| {
            let abandoned = || Failure::Died("abandoned: the check ended without it".into());
            let mut z = start()?;
            if stopped() {
                return Err(abandoned());
            }
            let forked = z.fork(CallMode::Reference, START_LIMIT)?;
            if !forked.ok || stopped() {
                return if forked.ok { Err(abandoned()) } else { Ok(forked) };
            }
            let resp = z.call(Op::Call(call), limit);
            z.end_child();
            resp
        })
    }

    /// The child that judges a GPU MODE or KernelBench version (its problem's inputs drawn again,
    /// the reference, the problem's own check): forked, in `mode`, from a zygote of its own that
    /// no version's code ever ran in, as [`Runners::reference`]'s. It lives until
    /// [`Runners::end_children`].
    pub fn judge(&mut self, mode: CallMode, limit: Duration) -> Result<&mut Zygote, Failure> {
        let z = self.zygote_for(mode != CallMode::Cuda, true)?;
        if !z.has_child() || z.child_mode != Some(mode) {
            let resp = z.fork(mode, limit)?;
            if !resp.ok {
                let e = resp.error.unwrap_or_else(|| WorkerError::new("WorkerDied", "the child did not start"));
                return Err(Failure::Died(format!("the judge's process did not start: {}: {}", e.kind, e.message)));
            }
        }
        Ok(z)
    }

    /// When the sandbox these workers should start in is not the one they started in (it is
    /// asked for now, [`crate::sandbox::strict`], or the workspace's top-level entries changed
    /// since it was made), they are ended, and the next ones start in the current one. Returns
    /// whether they were.
    pub fn sandbox_if_asked(&mut self, root: &Path) -> bool {
        let Some(now) = crate::sandbox::for_workspace(root, self.python.as_deref(), &self.env.data) else {
            return false;
        };
        if self.env.sandbox.as_ref().is_some_and(|s| std::sync::Arc::ptr_eq(s, &now)) {
            return false;
        }
        self.env.sandbox = Some(now);
        self.zygotes.clear();
        // Started in the old sandbox: each ends when its thread drops it.
        self.starting.clear();
        self.native = None;
        true
    }

    /// Whether that zygote is already running (its imports are warm).
    pub fn warm(&self, interpret: bool) -> bool {
        self.zygotes.iter().any(|z| z.interpret == interpret && !z.reference)
    }

    /// One launch in the native worker. After a CUDA error, a death or a time-out the worker is
    /// dropped; the next launch starts a fresh one.
    pub fn launch(&mut self, launch: protocol::Launch, limit: Duration) -> Result<Response, Failure> {
        self.native(Op::Launch(launch), limit)
    }

    /// Any request to the native worker, started if needed, dropped after a CUDA error.
    pub fn native(&mut self, op: Op, limit: Duration) -> Result<Response, Failure> {
        if self.native.as_mut().is_some_and(|n| !n.worker.alive())
            && let Some(n) = self.native.take()
        {
            live_remove(&self.live, n.worker.child.id());
        }
        if self.native.is_none() {
            let mut ahead = self.native_starting.take().and_then(|h| h.join().ok()).and_then(Result::ok);
            let alive = ahead.as_mut().is_some_and(|w| w.alive());
            let worker = match ahead {
                Some(w) if alive => w,
                ahead => {
                    // One started ahead that died is no pid to kill any more.
                    if let Some(dead) = ahead {
                        live_remove(&self.live, dead.child.id());
                    }
                    start_native(self.native_command()?, &self.env.log("native"), &self.live)?
                }
            };
            self.native = Some(Native { worker, next_id: 1 });
        }
        let native = self.native.as_mut().expect("started");
        native.next_id += 1;
        let req = Request { id: native.next_id, op };
        let resp = native.worker.call(&req, limit);
        let broken = match &resp {
            Ok(r) => r.error.as_ref().is_some_and(|e| e.kind.starts_with("CUDA_ERROR")),
            Err(_) => true,
        };
        if broken && let Some(mut n) = self.native.take() {
            live_remove(&self.live, n.worker.child.id());
            n.worker.kill();
        }
        resp
    }

    /// The native worker's command line: rung itself, sealed by its own sandbox.
    fn native_command(&self) -> Result<Command, Failure> {
        let exe = std::env::current_exe().map_err(|e| Failure::Protocol(format!("cannot find rung itself: {e}")))?;
        let mut cmd = Command::new(exe);
        cmd.arg("worker");
        self.env.apply(&mut cmd, crate::sandbox::Seal::Itself);
        Ok(cmd)
    }

    /// Starts the native worker on a thread of its own while the caller goes on (a check
    /// building its CUDA versions): its CUDA context is made while nobody waits, and the first
    /// launch takes it. One that failed to start is started again, in the open, by that launch.
    pub fn start_native_ahead(&mut self) {
        if self.native.is_some() || self.native_starting.is_some() {
            return;
        }
        let Ok(cmd) = self.native_command() else { return };
        let (log, live) = (self.env.log("native"), self.live.clone());
        self.native_starting = Some(std::thread::spawn(move || start_native(cmd, &log, &live)));
    }

    /// Whether the native worker can launch clusters (known once it has started).
    pub fn native_has(&self, cap: Capability) -> bool {
        self.native.as_ref().is_some_and(|n| n.worker.hello.capabilities.contains(&cap))
    }

    /// Ends the zygotes' children (between checks).
    pub fn end_children(&mut self) {
        for z in &mut self.zygotes {
            z.end_child();
        }
    }

    /// Forks, ahead of the next check of a GPU MODE or KernelBench problem, the children it
    /// will ask for: the version's and the judge's, in `mode`, each in a zygote already
    /// running. See [`Zygote::fork_ahead`].
    pub fn fork_ahead(&mut self, mode: CallMode) {
        let interpret = mode != CallMode::Cuda;
        for z in self.zygotes.iter_mut().filter(|z| z.interpret == interpret) {
            let _ = z.fork_ahead(mode);
        }
    }
}

impl Drop for Runners {
    fn drop(&mut self) {
        self.zygotes.clear();
        self.native = None;
        // A native worker started ahead and never used: ended, not left behind.
        if let Some(h) = self.native_starting.take() {
            drop(h.join());
        }
        self.kept.abandon_ahead();
        let _ = std::fs::remove_dir_all(&self.env.data);
    }
}

#[cfg(test)]
mod tests;
