//! The sandbox a version's code runs in: the Linux Landlock LSM, through the `landlock` crate.
//! Every process that executes a version (the Python zygote and the children it forks, the
//! ahead-of-time compile scripts that import a version, the native worker that loads a host
//! entry) starts inside it: the system, the toolchain, Python's own folders and the workspace
//! readable; the workspace's `.rung/`, the run's data folder and `/dev` (the GPU's device files)
//! writable; nothing else, so a version cannot read `~/.ssh` or rung's config, nor write outside
//! its scratch and caches; and where the kernel's Landlock has it (ABI 4 and later), no TCP
//! connection or listening port. `no_new_privs` comes with it, as Landlock requires.
//!
//! The ruleset is built here, in rung, before the process is spawned; the spawned child only
//! makes system calls between fork and exec (`setrlimit`, `prctl`, `open`, the Landlock calls),
//! which is all that is safe there.
//!
//! `/proc`: the CUDA driver writes to its own process's `/proc/<pid>/task/` files as it starts
//! (without that, `cuInit` fails with `CUDA_ERROR_OPERATING_SYSTEM`). Landlock's rules name
//! files, and a process's `/proc/<pid>` exists only once it runs, so the ruleset made here lets
//! all of `/proc` be written, and a second layer ([`Seal`]), made by each process that opens the
//! GPU for itself, takes that back except for its own `/proc/<pid>/task`: no version writes
//! `/proc/sys`, `/proc/sysrq-trigger` or another process's entries.
//!
//! It is on by default; `RUNG_SANDBOX=off` (or `[sandbox] mode = "off"` in the user's config
//! file) turns it off, and the TUI's header then says so. Agent proposals run sandboxed even
//! then. `rung doctor` says which, and every run records it. Sandboxed processes also start with
//! resource limits ([`Limits`]).

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, LazyLock, Mutex};

mod tracking;
pub use tracking::{TRACKING_VAR, ToolTracking};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    path_beneath_rules,
};

/// The environment variable that chooses: `strict` or `off`, over the config file's
/// `[sandbox] mode`.
pub const MODE_VAR: &str = "RUNG_SANDBOX";

/// Where the sandbox's mode came from, and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mode {
    pub strict: bool,
    /// `RUNG_SANDBOX`, `config.toml` (its path), or `default`.
    pub from: String,
    /// A value that is neither `strict` nor `off`, read as off: what it was and where.
    pub problem: Option<String>,
}

/// The mode from `RUNG_SANDBOX`, else `[sandbox] mode` in the user's config file
/// ([`crate::userconfig::default_path`]), else strict. A value that is neither `strict` nor
/// `off`, or a config file that does not parse, is read as strict: a typo never turns it off.
pub fn mode() -> Mode {
    mode_from(std::env::var(MODE_VAR).ok(), crate::userconfig::default_path())
}

/// [`mode`] given the variable's value and the config file's path.
pub fn mode_from(var: Option<String>, config: Option<PathBuf>) -> Mode {
    let judge = |value: &str, from: String| {
        let v = value.trim().to_ascii_lowercase();
        let problem =
            (v != "strict" && v != "off").then(|| format!("{from}: `{value}` is not strict or off (read as strict)"));
        Mode { strict: v != "off", from, problem }
    };
    if let Some(v) = var.filter(|v| !v.trim().is_empty()) {
        return judge(&v, MODE_VAR.to_string());
    }
    if let Some(path) = config
        && let Ok(text) = std::fs::read_to_string(&path)
    {
        let from = format!("{} [sandbox]", path.display());
        match text.parse::<toml::Table>() {
            Ok(t) => {
                if let Some(m) = t.get("sandbox").and_then(|s| s.get("mode")) {
                    return match m.as_str() {
                        Some(v) => judge(v, from),
                        None => Mode { strict: true, problem: Some(format!("{from}: mode is not a string")), from },
                    };
                }
            }
            Err(e) => {
                return Mode { strict: true, problem: Some(format!("{}: {}", path.display(), e.message())), from };
            }
        }
    }
    Mode { strict: true, from: "default".into(), problem: None }
}

/// What the TUI's header warns of when versions run unsandboxed; `None` when they are sandboxed.
pub fn unsandboxed() -> Option<&'static str> {
    if !strict() {
        Some("sandbox off")
    } else if kernel_abi() == 0 {
        Some("no sandbox: no Landlock")
    } else {
        None
    }
}

/// What the sandbox is on this machine, in words, for `rung doctor` and every run's record.
pub fn describe() -> String {
    let abi = kernel_abi();
    let mut m = mode();
    if !m.strict && FOR_PROPOSALS.load(std::sync::atomic::Ordering::SeqCst) {
        m = Mode { strict: true, from: "an agent's proposal: proposals always run sandboxed".into(), problem: None };
    }
    let said = m.problem.map(|p| format!(" ({p})")).unwrap_or_default();
    match (m.strict, abi) {
        (false, _) => format!(
            "off{said} (versions run with your rights; remove {MODE_VAR}=off or [sandbox] mode = \"off\" from the config to turn it back on{})",
            if abi > 0 { format!(", this kernel has Landlock ABI {abi}") } else { String::new() }
        ),
        (true, 0) => "strict asked, but this kernel has no Landlock: versions run unsandboxed".into(),
        (true, n) => format!(
            "strict: Landlock ABI {n}, {}; {} (from {})",
            if n < 4 { "files only (TCP needs ABI 4)" } else { "files and TCP" },
            Limits::for_machine().describe(),
            m.from
        ),
    }
}

/// Set once an agent's proposal is built or run in this process: from then on every process rung
/// starts for a version is sandboxed, whatever the mode says.
static FOR_PROPOSALS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Agent proposals always run sandboxed: called before a proposal is written, built or run. The
/// rest of the process's versions run sandboxed too (one set of workers serves them all, and an
/// agent that proposed once may propose again).
pub fn for_proposals() {
    FOR_PROPOSALS.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether versions run sandboxed ([`mode`], or an agent's proposal was seen: [`for_proposals`]).
pub fn strict() -> bool {
    FOR_PROPOSALS.load(std::sync::atomic::Ordering::SeqCst) || mode().strict
}

/// The resource limits a sandboxed process starts with: no core dumps, a cap on the size of any
/// file it writes (past it a write fails with EFBIG instead of killing it), and a cap on its
/// private writable memory (`RLIMIT_DATA`: the heap and anonymous mappings, not the GPU driver's
/// shared mappings of device memory nor its address-space reservations, which `RLIMIT_AS`
/// would count). Both caps are the machine's memory: they stop a runaway, not a real kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub file_bytes: u64,
    pub data_bytes: u64,
}

impl Limits {
    /// The caps for this machine: its physical memory.
    pub fn for_machine() -> Limits {
        // SAFETY: sysconf(3) only reads system values.
        let (pages, size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
        let ram = if pages > 0 && size > 0 { pages as u64 * size as u64 } else { 64 << 30 };
        Limits { file_bytes: ram, data_bytes: ram }
    }

    pub fn describe(&self) -> String {
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        format!(
            "no core dumps, files ≤ {:.0} GiB, private memory ≤ {:.0} GiB",
            gib(self.file_bytes),
            gib(self.data_bytes)
        )
    }
}

/// The kernel's Landlock ABI version; 0 when it has none.
pub fn kernel_abi() -> i64 {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) only returns the
    // ABI version (or an error); it takes no memory of ours.
    let r = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) };
    r.max(0)
}

/// A ruleset made and ready to be applied to processes about to start.
#[derive(Debug)]
pub struct Sandbox {
    fd: OwnedFd,
    pub limits: Limits,
    /// The folders it lets be read, and written.
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    /// The /proc seal's layer: the entries of `/` but `/proc`, and the access it handles.
    seal_top: Vec<std::ffi::CString>,
    seal_access: u64,
}

/// Which process seals `/proc` (the second layer, above) for itself: the started process, as
/// the native worker and the builds do, or each child it forks, as a Python zygote's children
/// do (the zygote never opens the GPU, and a layer it made for its own `/proc/<pid>` would
/// shut its children out of theirs). Those children read `SEAL_VAR` and `SEAL_ACCESS_VAR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seal {
    Itself,
    ItsChildren,
}

/// The entries of `/` a sealed process may still write beneath (the first layer decides what
/// of them it really may), one per line, for the children of a zygote to seal themselves.
pub const SEAL_VAR: &str = "RUNG_SANDBOX_SEAL";
/// The Landlock access bits the seal handles (write, move, truncate), as a decimal number.
pub const SEAL_ACCESS_VAR: &str = "RUNG_SANDBOX_SEAL_ACCESS";

/// Landlock's access bits (uapi `landlock.h`): writing to a file, truncating one, and moving or
/// linking one to another folder. A layer that does not handle the last denies every such move
/// (renames across folders fail with EXDEV: Triton's cache does them), so the seal handles it and
/// allows it wherever it allows writes.
const LANDLOCK_WRITE_FILE: u64 = 1 << 1;
const LANDLOCK_REFER: u64 = 1 << 13;
const LANDLOCK_TRUNCATE: u64 = 1 << 14;
/// Of those, what a rule on a file (not a folder) may allow.
const LANDLOCK_FILE_ONLY: u64 = LANDLOCK_WRITE_FILE | LANDLOCK_TRUNCATE;

/// The /proc seal, made and applied by the calling process for itself: a Landlock layer that
/// handles writing, truncating and moving files, allowed beneath each of `top` and beneath this
/// process's own `/proc/self/task`. Only system calls, so it runs between fork and exec.
///
/// # Safety
/// Async-signal-safe: no allocation; `top` must outlive the call.
unsafe fn seal_proc(top: &[std::ffi::CString], access: u64) -> std::io::Result<()> {
    #[repr(C)]
    struct RulesetAttr {
        handled_access_fs: u64,
    }
    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }
    let err = std::io::Error::last_os_error;
    let attr = RulesetAttr { handled_access_fs: access };
    // SAFETY (for the block): the pointers are to live locals and NUL-terminated strings, and
    // every descriptor opened here is closed here.
    unsafe {
        let ruleset = libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        );
        if ruleset < 0 {
            return Err(err());
        }
        let ruleset = ruleset as libc::c_int;
        let allow = |path: *const libc::c_char| -> std::io::Result<()> {
            let fd = libc::open(path, libc::O_PATH | libc::O_CLOEXEC);
            if fd < 0 {
                return Ok(()); // gone since the ruleset was made: nothing to allow
            }
            let mut st: libc::stat = std::mem::zeroed();
            let is_dir = libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFDIR;
            let allowed = if is_dir { access } else { access & LANDLOCK_FILE_ONLY };
            let rule = PathBeneath { allowed_access: allowed, parent_fd: fd };
            let r = libc::syscall(libc::SYS_landlock_add_rule, ruleset, 1u32, &rule as *const PathBeneath, 0u32);
            let e = err();
            libc::close(fd);
            if r != 0 { Err(e) } else { Ok(()) }
        };
        let mut made = top.iter().try_for_each(|t| allow(t.as_ptr()));
        if made.is_ok() {
            made = allow(c"/proc/self/task".as_ptr());
        }
        if made.is_ok() && libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) != 0 {
            made = Err(err());
        }
        libc::close(ruleset);
        made
    }
}

/// The entries of `/` but `/proc`: what the seal leaves to the first layer.
fn seal_top() -> Vec<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    let mut top: Vec<std::ffi::CString> = std::fs::read_dir("/")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name() != "proc")
        .filter_map(|e| std::ffi::CString::new(e.path().as_os_str().as_bytes()).ok())
        .collect();
    top.sort();
    top
}

/// Why a sandbox could not be made.
#[derive(Debug, thiserror::Error)]
#[error("the sandbox could not be made: {0}")]
pub struct SandboxError(String);

/// The folders everything reads: the system (libraries, the driver's files, `/proc`, `/sys`).
const SYSTEM: &[&str] = &["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys", "/run"];

/// What a version's processes may write in the workspace's `.rung/`: the compilers' caches
/// (Triton's and CUDA's, torch's extensions and Inductor's) and the builds' scratch folders.
/// The rest (the history, the stored artefacts, the reference cache, the proposals' records) is
/// rung's: a version that could write there could change its own status or another version's
/// results, or the answer it is judged against.
pub const STATE_WRITABLE: &[&str] = &["triton-cache", "torch-cache", "tmp"];
/// What they may read there besides: the built artefacts the native worker loads.
pub const STATE_READABLE: &[&str] = &["dumps", "objects"];

/// The entries of the workspace's root a version may read: all but `.rung/`, and no link that
/// leads out of the workspace (the root as a whole never let one be followed out either).
fn root_entries(root: &Path) -> Vec<PathBuf> {
    let Ok(real_root) = root.canonicalize() else { return vec![] };
    let mut out: Vec<PathBuf> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name() != crate::workspace::STATE_DIR)
        .map(|e| e.path())
        .filter(|p| p.canonicalize().is_ok_and(|real| real.starts_with(&real_root)))
        .collect();
    out.sort();
    out
}

impl Sandbox {
    /// A ruleset for a workspace: its root's `entries` readable ([`root_entries`]: all but
    /// `state`, its `.rung/`), of `state` only [`STATE_READABLE`] readable and
    /// [`STATE_WRITABLE`] writable; `scratch` writable, and `read` besides (Python's folders, the
    /// toolchain); no folder that holds the home folder. Best effort on older kernels (whatever
    /// their Landlock can enforce); `None` when it has none.
    pub fn new(
        entries: &[PathBuf],
        state: &Path,
        scratch: &[PathBuf],
        read: &[PathBuf],
    ) -> Result<Option<Sandbox>, SandboxError> {
        if kernel_abi() == 0 {
            return Ok(None);
        }
        let err = |e: landlock::RulesetError| SandboxError(e.to_string());
        let abi = ABI::V5;
        let mut reads: Vec<PathBuf> = SYSTEM.iter().map(PathBuf::from).collect();
        reads.extend(entries.iter().cloned());
        reads.extend(STATE_READABLE.iter().map(|d| state.join(d)));
        reads.extend(read.iter().cloned());
        let mut writes: Vec<PathBuf> = STATE_WRITABLE.iter().map(|d| state.join(d)).collect();
        // Made now if rung has not written them yet: a rule names a folder that exists, and a
        // worker started before the first build (the dumps and objects a native version's
        // worker loads) would otherwise never read them.
        for d in writes.iter().cloned().chain(STATE_READABLE.iter().map(|d| state.join(d))) {
            let _ = std::fs::create_dir_all(d);
        }
        writes.push(PathBuf::from("/dev"));
        writes.extend(scratch.iter().cloned());
        reads.retain(|p| p.exists());
        writes.retain(|p| p.exists());
        // No folder that holds the home folder (a `sys.path` entry of `~`, a home under /opt):
        // the secrets there stay out of reach, whatever else asks for it.
        if let Some(home) = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute()) {
            reads.retain(|p| !home.starts_with(p));
        }
        // All of /proc writable here (procfs itself refuses new files, removals and the rest);
        // each process's seal takes writing back but for its own tasks.
        let proc_write = AccessFs::from_all(abi);
        let seal_access = match kernel_abi() {
            1 => LANDLOCK_WRITE_FILE,
            2 => LANDLOCK_WRITE_FILE | LANDLOCK_REFER,
            _ => LANDLOCK_WRITE_FILE | LANDLOCK_REFER | LANDLOCK_TRUNCATE,
        };
        let ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))
            .map_err(err)?
            .handle_access(AccessNet::from_all(abi))
            .map_err(err)?
            .create()
            .map_err(err)?
            .add_rules(path_beneath_rules(&reads, AccessFs::from_read(abi)))
            .map_err(err)?
            .add_rules(path_beneath_rules(&writes, AccessFs::from_all(abi)))
            .map_err(err)?
            .add_rules(path_beneath_rules(["/proc"], proc_write))
            .map_err(err)?;
        let fd: Option<OwnedFd> = ruleset.into();
        Ok(fd.map(|fd| Sandbox {
            fd,
            limits: Limits::for_machine(),
            read: reads,
            write: writes,
            seal_top: seal_top(),
            seal_access,
        }))
    }

    /// `cmd` will start inside the sandbox: between fork and exec the child takes its resource
    /// limits ([`Limits`]), ignores SIGXFSZ (so a write past the file cap fails rather than
    /// kills), sets `no_new_privs`, restricts itself to the ruleset and, with [`Seal::Itself`],
    /// seals `/proc`; or does not start. With [`Seal::ItsChildren`] it is told how to seal its
    /// children instead.
    pub fn apply(self: &Arc<Self>, cmd: &mut Command, seal: Seal) {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::process::CommandExt;
        let fd = self.fd.as_raw_fd();
        let limits = self.limits;
        let me = Arc::clone(self);
        if seal == Seal::ItsChildren {
            let mut top = Vec::new();
            for t in self.seal_top.iter().map(|t| t.as_bytes()).filter(|t| !t.contains(&b'\n')) {
                top.extend_from_slice(t);
                top.push(b'\n');
            }
            cmd.env(SEAL_VAR, std::ffi::OsStr::from_bytes(&top)).env(SEAL_ACCESS_VAR, self.seal_access.to_string());
        }
        // SAFETY: the closure runs in the forked child before exec and makes only system calls
        // (setrlimit, signal, prctl, open, close, the Landlock calls: async-signal-safe, no
        // allocation); the ruleset's descriptor stays open in the parent (held by `self`, which
        // outlives the spawn) and is inherited by the child; `me` keeps the seal's paths alive.
        unsafe {
            cmd.pre_exec(move || {
                let cap = |what, bytes: u64| {
                    let l = libc::rlimit { rlim_cur: bytes as libc::rlim_t, rlim_max: bytes as libc::rlim_t };
                    if libc::setrlimit(what, &l) != 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
                };
                cap(libc::RLIMIT_CORE, 0)?;
                cap(libc::RLIMIT_FSIZE, limits.file_bytes)?;
                cap(libc::RLIMIT_DATA, limits.data_bytes)?;
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if seal == Seal::Itself {
                    seal_proc(&me.seal_top, me.seal_access)?;
                }
                Ok(())
            });
        }
    }
}

/// The folders a Python needs to read (its prefixes and `sys.path`), from the probe that found
/// it, else asked once in this process.
pub use crate::pyprobe::folders as python_folders;

/// The sandbox for a workspace's processes with this Python, made once per process and reused
/// while the workspace's top-level entries stay the same (a file added at its root is readable
/// only in a sandbox made after it): `None` when it is off, or the kernel has no Landlock.
/// `scratch` is the run's data folder.
pub fn for_workspace(root: &Path, python: Option<&Path>, scratch: &Path) -> Option<Arc<Sandbox>> {
    /// (workspace, its entries, Python, scratch) → the sandbox made for them.
    type Made = BTreeMap<(PathBuf, Vec<PathBuf>, PathBuf, PathBuf), Option<Arc<Sandbox>>>;
    static MADE: LazyLock<Mutex<Made>> = LazyLock::new(|| Mutex::new(BTreeMap::new()));
    if !strict() {
        return None;
    }
    let entries = root_entries(root);
    let key =
        (root.to_path_buf(), entries.clone(), python.map(Path::to_path_buf).unwrap_or_default(), scratch.to_path_buf());
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    made.entry(key)
        .or_insert_with(|| {
            let mut read = python.map(python_folders).unwrap_or_default();
            // rung's own environment (the CUDA wheels, the worker's scripts) and this binary:
            // the file, not its folder (a binary in the home folder or /tmp would open them all).
            read.push(crate::toolchain::rung_home());
            if let Ok(exe) = std::env::current_exe() {
                read.push(exe);
            }
            // Under compute-sanitizer, the folders its process tracking uses.
            let tracking = ToolTracking::from_env();
            read.extend(tracking.read);
            let mut writable = vec![scratch.to_path_buf()];
            writable.extend(tracking.write);
            let state = root.join(crate::workspace::STATE_DIR);
            let _ = std::fs::create_dir_all(&state);
            match Sandbox::new(&entries, &state, &writable, &read) {
                Ok(s) => s.map(Arc::new),
                Err(e) => {
                    eprintln!("rung: {e}; versions run unsandboxed");
                    None
                }
            }
        })
        .clone()
}

#[cfg(test)]
mod mode_tests {
    use super::*;

    #[test]
    fn the_variable_wins_then_the_config_file_then_strict() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("config.toml");
        assert_eq!(mode_from(None, Some(cfg.clone())), Mode { strict: true, from: "default".into(), problem: None });
        std::fs::write(&cfg, "[agent]\nprovider = \"x\"\n\n[sandbox]\nmode = \"Off\"\n").unwrap();
        let m = mode_from(None, Some(cfg.clone()));
        assert!(!m.strict && m.from.ends_with("config.toml [sandbox]") && m.problem.is_none(), "{m:?}");
        assert!(mode_from(Some("strict".into()), Some(cfg.clone())).strict, "the variable wins");
        assert!(!mode_from(Some(" ".into()), Some(cfg.clone())).strict, "an empty variable is unset");
        let bad = mode_from(Some("of".into()), None);
        assert!(
            bad.strict && bad.problem.as_deref().unwrap().contains("`of` is not strict or off (read as strict)"),
            "{bad:?}"
        );
        std::fs::write(&cfg, "[sandbox]\nmode = false\n").unwrap();
        let m = mode_from(None, Some(cfg.clone()));
        assert!(m.strict && m.problem.unwrap().contains("mode is not a string"));
        std::fs::write(&cfg, "[sandbox\nmode = \"off\"\n").unwrap();
        let broken = mode_from(None, Some(cfg.clone()));
        assert!(broken.strict && broken.problem.unwrap().contains("config.toml"), "a broken file turns nothing off");
    }

    /// A sandboxed process makes and opens FIFOs in the tracker's folder when it is writable
    /// (what compute-sanitizer's target does as it forks), and nowhere else in /tmp.
    #[test]
    fn a_sandboxed_process_makes_fifos_only_in_the_tracker_folder() {
        if kernel_abi() == 0 {
            eprintln!("SKIPPED: this kernel has no Landlock");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let (tracker, other) = (tmp.path().join("NVIDIA-treetracker-test"), tmp.path().join("other"));
        std::fs::create_dir_all(&tracker).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let root = tmp.path().join("ws");
        std::fs::create_dir_all(&root).unwrap();
        let state = root.join(crate::workspace::STATE_DIR);
        let sandbox = Arc::new(Sandbox::new(&[], &state, std::slice::from_ref(&tracker), &[]).unwrap().unwrap());
        let sh = |script: String| {
            let mut cmd = Command::new("/bin/sh");
            cmd.args(["-c", &script]);
            sandbox.apply(&mut cmd, Seal::Itself);
            cmd.output().unwrap().status.success()
        };
        let fifo = tracker.join("pipe-0-ownerReadingStream");
        assert!(sh(format!("mkfifo {0} && exec 3<>{0}", fifo.display())), "the tracker's FIFO");
        assert!(!sh(format!("mkfifo {}", other.join("p").display())), "not elsewhere");
    }

    /// Inside the sandbox a process reads the workspace's own files but not rung's state in
    /// `.rung/` (the history, the reference cache), writes only the caches and scratch there,
    /// and follows no link out of the workspace.
    #[test]
    fn a_sandboxed_process_reads_the_workspace_but_not_rungs_state() {
        if kernel_abi() == 0 {
            eprintln!("SKIPPED: this kernel has no Landlock");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (root, outside) = (dir.path().join("ws"), dir.path().join("outside"));
        let state = root.join(crate::workspace::STATE_DIR);
        for d in [root.join("versions"), state.join("cache/reference"), outside.clone()] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(root.join("rung.toml"), "x").unwrap();
        std::fs::write(state.join("history.db"), "x").unwrap();
        std::fs::write(state.join("cache/reference/out.bin"), "x").unwrap();
        std::fs::write(outside.join("secret"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("linked")).unwrap();
        let entries = root_entries(&root);
        assert_eq!(entries, vec![root.join("rung.toml"), root.join("versions")], "no .rung, no link out");
        let sandbox = Arc::new(Sandbox::new(&entries, &state, &[], &[]).unwrap().expect("Landlock is here"));
        let sh = |script: &str| {
            let mut cmd = Command::new("/bin/sh");
            cmd.args(["-c", script]).current_dir(&root);
            sandbox.apply(&mut cmd, Seal::Itself);
            cmd.output().unwrap().status.success()
        };
        assert!(sh("cat rung.toml"), "the workspace's files are readable");
        assert!(!sh("ls ."), "its root is not listed (that would list `.rung/`)");
        assert!(sh("echo x > .rung/tmp/built && echo x > .rung/triton-cache/k"), "the caches are writable");
        assert!(!sh("cat .rung/history.db"), "the history is not readable");
        assert!(!sh("echo x >> .rung/history.db"), "nor writable");
        assert!(!sh("cat .rung/cache/reference/out.bin"), "nor the cached reference");
        assert!(!sh("cat linked/secret"), "a link out of the workspace leads nowhere");
        assert!(!sh("echo x > versions/v999.py"), "the sources are read-only");
        // What rung builds after the process started (the native worker starts before the first
        // build) is readable: the dumps and objects folders were made with the ruleset.
        for f in [state.join("dumps/v001/v001.cubin"), state.join("objects/ab/cd")] {
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, "x").unwrap();
            assert!(sh(&format!("cat {}", f.display())), "{} is readable", f.display());
        }
    }

    /// A sandbox for `root` in which `python3` runs rung's worker modules: (it, the Python, the
    /// modules' folder).
    fn python_sandbox(root: &Path) -> (Arc<Sandbox>, &'static Path, PathBuf) {
        let python = Path::new("python3");
        let worker = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/python");
        let mut read = python_folders(python);
        read.push(worker.clone());
        let state = root.join(crate::workspace::STATE_DIR);
        let sandbox = Sandbox::new(&root_entries(root), &state, &[], &read).unwrap().expect("Landlock is here");
        (Arc::new(sandbox), python, worker)
    }

    /// A workspace's own module (GPU MODE's `task`, `utils`) is imported from its root, which the
    /// sandbox lets be read but not listed: Python's own finder lists the folder, and finds
    /// nothing there; rung_sandbox's finder asks for the file by name.
    #[test]
    fn a_sandboxed_python_imports_the_workspaces_own_modules() {
        if kernel_abi() == 0 {
            eprintln!("SKIPPED: this kernel has no Landlock");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("helpers")).unwrap();
        std::fs::write(root.join("task.py"), "ANSWER = 42\n").unwrap();
        std::fs::write(root.join("helpers/__init__.py"), "from helpers.deep import X\n").unwrap();
        std::fs::write(root.join("helpers/deep.py"), "X = 7\n").unwrap();
        let (sandbox, python, worker) = python_sandbox(&root);
        let py = |finder: bool| {
            let script = format!(
                "import sys; sys.path.insert(0, {worker:?}); sys.path.insert(0, {root:?})\n\
                 import rung_sandbox\n{}\nimport task, helpers\nassert (task.ANSWER, helpers.X) == (42, 7)",
                if finder { "rung_sandbox.find_unlisted()" } else { "" },
                worker = worker.display().to_string(),
                root = root.display().to_string(),
            );
            let mut cmd = Command::new(python);
            cmd.args(["-c", &script]).current_dir(&root);
            sandbox.apply(&mut cmd, Seal::Itself);
            let out = cmd.output().unwrap();
            (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
        };
        let (ok, err) = py(false);
        assert!(!ok && err.contains("No module named 'task'"), "Python's own finder lists the root: {err}");
        let (ok, err) = py(true);
        assert!(ok, "{err}");
    }

    /// A sandboxed process writes its own `/proc/<pid>/task` (the CUDA driver does, as it
    /// starts) but no other process's `/proc` entries: sealed by itself (the native worker), or
    /// in each child a zygote forks (through `rung_sandbox.py`'s seal, with what `apply` passes).
    #[test]
    fn a_sandboxed_process_writes_its_own_proc_tasks_and_no_one_elses() {
        if kernel_abi() == 0 {
            eprintln!("SKIPPED: this kernel has no Landlock");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("versions")).unwrap();
        let (sandbox, python, worker) = python_sandbox(&root);
        // Another process of the same user: its oom_score_adj is writable outside the sandbox.
        let mut other = Command::new("sleep").arg("30").spawn().unwrap();
        let theirs = format!("/proc/{}/oom_score_adj", other.id());
        let now = std::fs::read_to_string(&theirs).unwrap();
        std::fs::write(&theirs, &now).expect("writable outside the sandbox");
        let sh = |script: &str, seal: Seal| {
            let mut cmd = Command::new("/bin/sh");
            cmd.args(["-c", script]).current_dir(&root).env("THEIRS", &theirs).env("NOW", now.trim());
            sandbox.apply(&mut cmd, seal);
            cmd.output().unwrap().status.success()
        };
        assert!(sh("echo sh > /proc/$$/task/$$/comm", Seal::Itself), "its own task's files");
        let mv = "mkdir -p .rung/tmp/a .rung/tmp/b && echo x > .rung/tmp/a/f && mv .rung/tmp/a/f .rung/tmp/b/f";
        assert!(sh(mv, Seal::Itself), "a file moved between folders it may write (Triton's cache)");
        assert!(!sh("echo $NOW > $THEIRS", Seal::Itself), "not another process's");
        assert!(!sh("echo 60 > /proc/sys/vm/swappiness", Seal::Itself), "nor the kernel's settings");
        assert!(sh("echo $NOW > $THEIRS", Seal::ItsChildren), "a zygote itself is not sealed");
        // A zygote's child seals itself with what apply passed on.
        let child = r#"
import os, sys, threading
sys.path.insert(0, sys.argv[1])
import rung_sandbox
pid = os.fork()
if pid == 0:
    rung_sandbox.seal_proc()
    open("/proc/self/task/%d/comm" % threading.get_native_id(), "w").write("child")
    try:
        open(os.environ["THEIRS"], "w").write(os.environ["NOW"])
        os._exit(3)
    except PermissionError:
        os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"#;
        let mut cmd = Command::new(python);
        cmd.args(["-c", child]).arg(&worker).current_dir(&root).env("THEIRS", &theirs).env("NOW", now.trim());
        sandbox.apply(&mut cmd, Seal::ItsChildren);
        let out = cmd.output().unwrap();
        other.kill().unwrap();
        let _ = other.wait();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }

    /// What a workspace's sandbox lets be read besides the workspace: rung's binary itself, not
    /// the folder it sits in (a binary in the home folder or /tmp would open all of it), and no
    /// folder that holds the home folder.
    #[test]
    fn rungs_binary_is_readable_but_not_its_folder_nor_the_home_folder() {
        if kernel_abi() == 0 || !strict() {
            eprintln!("SKIPPED: no Landlock here, or the sandbox is off");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("versions")).unwrap();
        let s = for_workspace(&root, Some(Path::new("python3")), dir.path()).expect("a sandbox");
        let exe = std::env::current_exe().unwrap();
        assert!(s.read.contains(&exe), "{:?}", s.read);
        assert!(!s.read.iter().any(|p| p == exe.parent().unwrap()), "{:?}", s.read);
        if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
            assert!(!s.read.iter().chain(&s.write).any(|p| home.starts_with(p)), "{home:?} in {:?}", s.read);
        }
    }

    #[test]
    fn the_limits_are_the_machine_s_memory() {
        let l = Limits::for_machine();
        assert!(l.file_bytes > 1 << 28 && l.data_bytes == l.file_bytes);
        assert!(l.describe().starts_with("no core dumps, files ≤ "), "{}", l.describe());
    }
}
