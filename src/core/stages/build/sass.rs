//! A cubin's SASS listing, made after the build rung has ended rather than inside it.
//!
//! nvdisasm spends about 0.4 s building its tables before it writes the first line of a small
//! cubin's listing: more than half of a small CUDA version's build. Nothing on the way to a
//! verdict reads the listing (the run rung loads the cubin), so the build rung ends when the
//! cubin is stored and the listing is made here, on a pool of threads at a lower priority than
//! the builds, while the version runs, checks and benches. It lands in the object store, is linked
//! as `.rung/dumps/<id>/<id>.sass` in one rename (a reader sees the whole listing or none) and is
//! added to the build cache's record, so a cached build links it at once.
//!
//! Readers in this process wait for a version's pending listing ([`wait`]); [`ensure`] also makes
//! a listing that is missing beside its cubin (rung ended before it landed, or another process
//! built the version). rung waits for every pending listing before it exits ([`wait_all`]).

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::model::build::{Artefact, BuildDetail};
use crate::store::{Objects, Store};
use crate::toolchain::Toolchain;

/// The tool that writes SASS: `nvdisasm -c -g` when present (it labels branch targets and keeps
/// each instruction's source line), else `cuobjdump --dump-sass`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disassembler {
    pub path: PathBuf,
    pub nvdisasm: bool,
}

impl Disassembler {
    pub fn of(tc: &Toolchain) -> Option<Self> {
        match (&tc.nvdisasm, &tc.cuobjdump) {
            (Some(n), _) => Some(Disassembler { path: n.path.clone(), nvdisasm: true }),
            (None, Some(c)) => Some(Disassembler { path: c.path.clone(), nvdisasm: false }),
            (None, None) => None,
        }
    }

    /// The command for `cubin`, which names it as given (relative to the directory it runs in).
    pub fn command(&self, cubin: &Path) -> Command {
        let mut cmd = Command::new(&self.path);
        if self.nvdisasm {
            cmd.args(["-c", "-g"]);
        } else {
            cmd.arg("--dump-sass");
        }
        cmd.arg(cubin);
        cmd
    }

    /// The tool's phase label, as a build's phases name it.
    pub fn label(&self) -> &'static str {
        if self.nvdisasm { "nvdisasm" } else { "cuobjdump" }
    }
}

/// One listing to make.
#[derive(Debug, Clone)]
pub struct Job {
    /// The workspace root: the tool runs there.
    pub root: PathBuf,
    /// Its `.rung/`.
    pub state: PathBuf,
    pub id: String,
    /// The cubin's name in `.rung/dumps/<id>/` (`v001.cubin`); its listing is the same stem's
    /// `.sass`.
    pub cubin: String,
    /// The cubin's object hash: the listing is linked only while the dumps' cubin is still this
    /// one (a newer build of the version has its own job).
    pub hash: String,
    /// The build cache's record to add the listing to.
    pub cache_key: Option<String>,
    pub tool: Disassembler,
    /// The build's time limit (`limits.build`).
    pub timeout: Duration,
}

impl Job {
    fn listing_name(&self) -> String {
        let stem = self.cubin.strip_suffix(".cubin").unwrap_or(&self.cubin);
        format!("{stem}.sass")
    }
}

#[derive(Default)]
struct Pool {
    queue: VecDeque<Job>,
    /// Jobs queued or running, by (state folder, version).
    pending: BTreeMap<(PathBuf, String), usize>,
    threads: usize,
    idle: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool { queue: VecDeque::new(), pending: BTreeMap::new(), threads: 0, idle: 0 });
/// Signalled when a job is queued.
static QUEUED: Condvar = Condvar::new();
/// Signalled when a job has ended.
static ENDED: Condvar = Condvar::new();
/// How long an idle pool thread stays for the next job.
const IDLE: Duration = Duration::from_secs(30);

fn pool() -> MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Queues a listing; a pool thread makes it (one per core at most).
pub fn later(job: Job) {
    let mut p = pool();
    *p.pending.entry((job.state.clone(), job.id.clone())).or_default() += 1;
    p.queue.push_back(job);
    if p.idle == 0 && p.threads < threads() {
        p.threads += 1;
        if std::thread::Builder::new().name("rung-sass".into()).spawn(work).is_err() {
            p.threads -= 1;
            // No thread: made here, so that nothing waits for a job no thread will take.
            let job = p.queue.pop_back().expect("just queued");
            drop(p);
            let _ = make(&job);
            ended(&job);
            return;
        }
    }
    QUEUED.notify_one();
}

/// The pool's threads at most: one per core, or `RUNG_BUILD_THREADS` as the builds have.
fn threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::env::var("RUNG_BUILD_THREADS").ok().and_then(|n| n.trim().parse::<usize>().ok()).unwrap_or(cores).max(1)
}

fn ended(job: &Job) {
    let mut p = pool();
    let key = (job.state.clone(), job.id.clone());
    if let Some(n) = p.pending.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            p.pending.remove(&key);
        }
    }
    ENDED.notify_all();
}

fn work() {
    // Below the builds: on a busy machine the next version's compile goes first. Linux keeps a
    // nice value per thread, and the tools this thread starts inherit it.
    // SAFETY: setpriority(2) on the calling thread (who = 0) with a valid value.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
    let mut p = pool();
    loop {
        let Some(job) = p.queue.pop_front() else {
            p.idle += 1;
            let (guard, waited) = QUEUED.wait_timeout(p, IDLE).unwrap_or_else(|e| e.into_inner());
            p = guard;
            p.idle -= 1;
            if waited.timed_out() && p.queue.is_empty() {
                p.threads -= 1;
                return;
            }
            continue;
        };
        drop(p);
        let _ = make(&job);
        ended(&job);
        p = pool();
    }
}

/// Whether a listing of `id` in `state` is queued or being made in this process.
pub fn pending(state: &Path, id: &str) -> bool {
    pool().pending.contains_key(&(state.to_path_buf(), id.to_string()))
}

/// Waits (at most `limit`) until no listing of `id` in `state` is pending in this process;
/// whether none is.
pub fn wait(state: &Path, id: &str, limit: Duration) -> bool {
    wait_until(limit, |p| !p.pending.contains_key(&(state.to_path_buf(), id.to_string())))
}

/// Waits (at most `limit`) until no listing is pending in this process; whether none is.
pub fn wait_all(limit: Duration) -> bool {
    wait_until(limit, |p| p.pending.is_empty())
}

fn wait_until(limit: Duration, done: impl Fn(&Pool) -> bool) -> bool {
    let deadline = Instant::now() + limit;
    let mut p = pool();
    while !done(&p) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        p = ENDED.wait_timeout(p, left).unwrap_or_else(|e| e.into_inner()).0;
    }
    true
}

/// Why a listing was not made.
#[derive(Debug, thiserror::Error)]
pub enum SassError {
    #[error(transparent)]
    Tool(#[from] super::ToolError),
    #[error("{tool} failed on {cubin} ({how}): {first}")]
    Failed { tool: String, cubin: String, how: String, first: String },
    #[error("writing the SASS of {cubin}: {source}")]
    Io { cubin: String, source: std::io::Error },
}

/// Makes one listing now: the tool on the stored cubin, its output stored and linked beside the
/// cubin, added to the cache's record.
pub fn make(job: &Job) -> Result<(), SassError> {
    let objects = Objects::new(&job.state);
    let mut cmd = job.tool.command(&objects.path_of(&job.hash));
    cmd.current_dir(&job.root);
    let t0 = Instant::now();
    let out = super::run_limited(cmd, job.timeout, "limits.build in rung.toml", None)?;
    let took = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr);
        return Err(SassError::Failed {
            tool: job.tool.label().into(),
            cubin: job.cubin.clone(),
            how: out.status.code().map_or_else(|| "killed by a signal".into(), |c| format!("exit {c}")),
            first: text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("no message").to_string(),
        });
    }
    let io = |source| SassError::Io { cubin: job.cubin.clone(), source };
    // A newer build of the version replaced its dumps: that build's own job lists its cubin.
    if linked_hash(&job.state, &job.id, &job.cubin).as_deref() != Some(job.hash.as_str()) {
        return Ok(());
    }
    let hash = objects.put(&out.stdout).map_err(io)?;
    let name = job.listing_name();
    objects.link_dump(&job.state, &job.id, &name, &hash).map_err(io)?;
    if let Some(key) = &job.cache_key
        && let Ok(mut store) = Store::open(&job.state)
        && let Ok(Some(text)) = store.cached_build(key)
        && let Ok(mut detail) = serde_json::from_str::<BuildDetail>(&text)
        && !detail.artefacts.iter().any(|a| a.name == name)
    {
        detail.artefacts.push(Artefact { name, kind: "sass".into(), hash, bytes: out.stdout.len() as u64 });
        // The record's phases are the first build's: the listing's tool time joins them there
        // (a cached build reports none; `benches/check_builds.sh` sums them).
        *detail.phases.entry(job.tool.label().into()).or_default() += took;
        let _ = store.put_cached_build(key, &serde_json::to_string(&detail).expect("build details serialise"));
    }
    Ok(())
}

/// The object hash `.rung/dumps/<id>/<name>` links to, when it is a link into the objects.
fn linked_hash(state: &Path, id: &str, name: &str) -> Option<String> {
    let target = std::fs::read_link(state.join(crate::store::DUMPS_DIR).join(id).join(name)).ok()?;
    let mut parts = target.iter().rev();
    let rest = parts.next()?.to_str()?;
    let head = parts.next()?.to_str()?;
    Some(format!("{head}{rest}"))
}

/// The jobs for `id`'s cubins in `.rung/dumps/<id>/` that have no listing beside them.
pub fn missing(root: &Path, state: &Path, id: &str, tool: &Disassembler, timeout: Duration) -> Vec<Job> {
    let dir = state.join(crate::store::DUMPS_DIR).join(id);
    let mut jobs = Vec::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".cubin") else { continue };
        if dir.join(format!("{stem}.sass")).exists() {
            continue;
        }
        let Some(hash) = linked_hash(state, id, &name) else { continue };
        jobs.push(Job {
            root: root.to_path_buf(),
            state: state.to_path_buf(),
            id: id.to_string(),
            cubin: name,
            hash,
            cache_key: None,
            tool: tool.clone(),
            timeout,
        });
    }
    jobs.sort_by(|a, b| a.cubin.cmp(&b.cubin));
    jobs
}

/// For a reader about to read `id`'s SASS: waits for this process's pending listing of it, then
/// makes, here and now, any listing still missing beside a cubin. The first error, if any.
pub fn ensure(root: &Path, state: &Path, id: &str, tc: &Toolchain, timeout: Duration) -> Result<(), SassError> {
    wait(state, id, timeout);
    let Some(tool) = Disassembler::of(tc) else { return Ok(()) };
    let mut first = Ok(());
    for job in missing(root, state, id, &tool, timeout) {
        if let Err(e) = make(&job)
            && first.is_ok()
        {
            first = Err(e);
        }
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A workspace's `.rung/` with `v001.cubin` stored and linked, and a disassembler script that
    /// takes `delay` seconds and writes `listing of <its last argument>` (or fails with `fail`).
    fn setup(delay: &str, fail: bool) -> (tempfile::TempDir, Job) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let state = root.join(".rung");
        let objects = Objects::new(&state);
        let hash = objects.put(b"a cubin").unwrap();
        objects.link_dump(&state, "v001", "v001.cubin", &hash).unwrap();
        let tool = root.join("disasm");
        let body = if fail {
            "echo 'nvdisasm fatal : not a cubin' >&2\nexit 3".to_string()
        } else {
            format!("sleep {delay}\nfor a; do last=$a; done\necho \"listing of $(cat \"$last\")\"")
        };
        std::fs::write(&tool, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let job = Job {
            root,
            state,
            id: "v001".into(),
            cubin: "v001.cubin".into(),
            hash,
            cache_key: None,
            tool: Disassembler { path: tool, nvdisasm: true },
            timeout: Duration::from_secs(20),
        };
        (dir, job)
    }

    fn listing(job: &Job) -> Option<String> {
        std::fs::read_to_string(job.state.join("dumps/v001/v001.sass")).ok()
    }

    #[test]
    fn a_queued_listing_is_pending_until_it_lands_linked_and_in_the_cache_record() {
        let (_dir, mut job) = setup("0.3", false);
        let mut store = Store::open(&job.state).unwrap();
        let detail = BuildDetail {
            compiler: "nvcc".into(),
            arch: "sm_90".into(),
            arch_reason: "default".into(),
            ahead_of_time: false,
            cached: false,
            cache_key: "k1".into(),
            commands: vec![],
            artefacts: vec![Artefact {
                name: "v001.cubin".into(),
                kind: "cubin".into(),
                hash: job.hash.clone(),
                bytes: 7,
            }],
            kernels: vec![],
            notes: vec![],
            phases: BTreeMap::new(),
        };
        store.put_cached_build("k1", &serde_json::to_string(&detail).unwrap()).unwrap();
        job.cache_key = Some("k1".into());
        later(job.clone());
        assert!(pending(&job.state, "v001"), "queued: pending");
        assert_eq!(listing(&job), None, "not before the tool has ended");
        assert!(wait(&job.state, "v001", Duration::from_secs(20)));
        assert!(!pending(&job.state, "v001"));
        assert_eq!(listing(&job).as_deref(), Some("listing of a cubin\n"));
        let link = std::fs::read_link(job.state.join("dumps/v001/v001.sass")).unwrap();
        assert!(link.starts_with("../../objects"), "a link into the objects: {link:?}");
        let record: BuildDetail = serde_json::from_str(&store.cached_build("k1").unwrap().unwrap()).unwrap();
        let names: Vec<&str> = record.artefacts.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["v001.cubin", "v001.sass"]);
        assert_eq!(record.artefacts[1].kind, "sass");
        assert!(record.phases["nvdisasm"] >= 0.3, "the listing's time in the record: {:?}", record.phases);
        assert!(Objects::new(&job.state).path_of(&record.artefacts[1].hash).is_file());
    }

    #[test]
    fn a_listing_of_a_cubin_a_newer_build_replaced_is_not_linked() {
        let (_dir, job) = setup("0", false);
        let newer = Objects::new(&job.state).put(b"a newer cubin").unwrap();
        Objects::new(&job.state).link_dump(&job.state, "v001", "v001.cubin", &newer).unwrap();
        make(&job).unwrap();
        assert_eq!(listing(&job), None);
        // The newer build's own job lists its cubin.
        make(&Job { hash: newer, ..job.clone() }).unwrap();
        assert_eq!(listing(&job).as_deref(), Some("listing of a newer cubin\n"));
    }

    #[test]
    fn a_reader_makes_a_missing_listing_and_a_failing_tool_says_why() {
        let (_dir, job) = setup("0", false);
        let found = missing(&job.root, &job.state, "v001", &job.tool, job.timeout);
        assert_eq!(
            found.iter().map(|j| (j.cubin.as_str(), j.hash.as_str())).collect::<Vec<_>>(),
            [("v001.cubin", job.hash.as_str())]
        );
        make(&found[0]).unwrap();
        assert_eq!(listing(&job).as_deref(), Some("listing of a cubin\n"));
        assert!(missing(&job.root, &job.state, "v001", &job.tool, job.timeout).is_empty(), "listed now");

        let (_dir, job) = setup("0", true);
        let e = make(&job).unwrap_err().to_string();
        assert!(e.contains("nvdisasm failed on v001.cubin (exit 3): nvdisasm fatal : not a cubin"), "{e}");
        assert_eq!(listing(&job), None, "nothing linked");
        // Queued, it ends all the same: nothing waits for ever.
        later(job.clone());
        assert!(wait(&job.state, "v001", Duration::from_secs(20)));
        assert_eq!(listing(&job), None);
    }
}
