//! The pipeline scheduler and the watcher: the core `rung watch`, the TUI and the MCP server
//! drive. It knows nothing of terminals.
//!
//! Every save becomes jobs for the versions it touches. A version's pipeline is two jobs: a
//! build job (prepare + build, on a pool of CPU threads, in parallel) and a GPU job (run, check,
//! bench, roofline, one at a time on the thread that owns the workers). Newest wins: a save of a
//! version that has a job queued or running bumps its generation, cancels the old job (killing
//! only that version's tool or worker child) and queues a new one. A change to rung.toml, the
//! reference, checks.py or task.yml re-runs every version. Each job goes queued → running →
//! done | failed | cancelled, and each transition is an event with a timestamp.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::check::{self, CheckOptions, Machine};
use crate::diag::Diagnostic;
use crate::model::report::VersionReport;
use crate::runners::Runners;
use crate::store::Store;
use crate::workspace::{VersionFile, Workspace};

mod poll;
pub use poll::POLL;

/// Bumped on any incompatible change to the events.
pub const WATCH_SCHEMA: u32 = 1;

/// The file-event debouncer's window (it merges the events of one save: a write, or a rename).
pub const DEBOUNCE: Duration = Duration::from_millis(20);

/// Then the watcher waits for this much quiet before starting jobs, so a burst of saves (an
/// agent writing a file in pieces, an editor saving twice) is one pipeline run.
pub const QUIET: Duration = Duration::from_millis(25);

/// One line of `rung watch --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WatchEvent {
    /// Wall clock, milliseconds since the Unix epoch.
    pub unix_ms: i64,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// Prepare and build, on the CPU.
    Build,
    /// Run, check, bench, roofline, under the worker lane (the GPU when there is one).
    Gpu,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Queued,
    Running,
    Done,
    Failed,
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum EventKind {
    /// The watch began; every version is listed.
    Started { schema: u32, workspace: PathBuf, versions: Vec<String> },
    /// Files changed (after debouncing); `all` when the change re-runs every version.
    Changed { paths: Vec<PathBuf>, versions: Vec<String>, all: bool },
    /// A job changed state.
    Job {
        version: String,
        job: JobKind,
        state: JobState,
        generation: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<String>,
    },
    /// A version's pipeline finished: every stage it climbed.
    Done { version: String, generation: u64, report: VersionReport },
    /// A version's file was deleted (its history stays in the store).
    Removed { version: String },
    /// The workspace itself has problems (rung.toml invalid...): nothing runs until fixed.
    Workspace { diagnostics: Vec<Diagnostic> },
}

/// The JSON schema of the events, as committed in `schema/watch.schema.json`.
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(WatchEvent)).expect("a schema serialises")
}

#[derive(Debug, Clone, Default)]
pub struct WatchOptions {
    /// Check every version when the watch starts (otherwise only what changes).
    pub initial: bool,
    pub seed: Option<u64>,
    pub no_bench: bool,
    /// Build threads (default: the CPU count, at most 8).
    pub build_threads: Option<usize>,
    /// The version the user is looking at: its jobs go to the front of both queues.
    pub focus: Focus,
    /// No file events: the scan every [`POLL`] alone (for file systems that send none). It runs
    /// beside the events either way, to catch one they lose.
    pub poll: bool,
}

/// The version the user is looking at, which may change while the watch runs (the TUI's
/// selection): clones share it.
#[derive(Debug, Clone, Default)]
pub struct Focus(Arc<std::sync::Mutex<Option<String>>>);

impl Focus {
    pub fn new(id: Option<String>) -> Focus {
        Focus(Arc::new(std::sync::Mutex::new(id)))
    }

    pub fn set(&self, id: Option<String>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = id;
    }

    pub fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether `id` is the focused version.
    pub fn is(&self, id: &str) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).as_deref() == Some(id)
    }
}

struct BuildJob {
    ws: Arc<Workspace>,
    version: VersionFile,
    generation: u64,
    cancel: Arc<AtomicBool>,
}

struct GpuJob {
    ws: Arc<Workspace>,
    built: check::Built,
    seed: u64,
    generation: u64,
    cancel: Arc<AtomicBool>,
}

enum Msg {
    Files(Vec<PathBuf>),
    /// A job started: for the worker lanes, which lane runs it.
    Running(String, JobKind, u64, usize),
    /// A word on the running GPU job: a Slurm job's state.
    Note(String, u64, String),
    Built(String, u64, Result<Option<(check::Built, u64)>, JobError>),
    Ran(String, u64, Result<Option<VersionReport>, JobError>, usize),
}

/// A queue threads take jobs from, newest-wins aware (a job whose version has a newer
/// generation is skipped when taken).
struct Queue<T> {
    items: Mutex<(VecDeque<T>, bool)>,
    ready: Condvar,
}

impl<T> Queue<T> {
    fn new() -> Arc<Self> {
        Arc::new(Queue { items: Mutex::new((VecDeque::new(), false)), ready: Condvar::new() })
    }

    fn push(&self, item: T, front: bool) {
        let mut g = self.items.lock().expect("queue lock");
        if front {
            g.0.push_front(item);
        } else {
            g.0.push_back(item);
        }
        self.ready.notify_one();
    }

    /// The next item, or None once closed.
    fn pop(&self) -> Option<T> {
        let mut g = self.items.lock().expect("queue lock");
        loop {
            if let Some(item) = g.0.pop_front() {
                return Some(item);
            }
            if g.1 {
                return None;
            }
            g = self.ready.wait(g).expect("queue lock");
        }
    }

    fn close(&self) {
        self.items.lock().expect("queue lock").1 = true;
        self.ready.notify_all();
    }
}

struct VersionState {
    generation: u64,
    cancel: Arc<AtomicBool>,
}

/// Whether a changed file is part of the problem rather than a version (so every version
/// re-runs): rung.toml or task.yml, the reference and checks.py as the workspace names them
/// (a KernelBench problem file is its reference), and any other Python module at the root that
/// a reference may import (GPU MODE's task.py and utils.py).
fn is_problem_file(ws: &Workspace, rel: &Path) -> bool {
    let at_root = rel.components().count() == 1;
    ws.reference.as_deref() == Some(rel)
        || ws.checks.as_deref() == Some(rel)
        || (at_root && matches!(rel.to_str(), Some("rung.toml" | "task.yml")))
        || (at_root && rel.extension().is_some_and(|e| e == "py") && !ws.versions.iter().any(|v| v.path == rel))
}

/// The path with `.` and `..` taken out as written (`versions/../include/x.cuh` is
/// `include/x.cuh`), for comparing an include as found with a path an event names.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// Whether a changed path matters to the pipeline.
fn relevant(root: &Path, path: &Path, ignore: &ignore::gitignore::Gitignore) -> Option<PathBuf> {
    let rel = path.strip_prefix(root).ok()?.to_path_buf();
    let first = rel.components().next()?.as_os_str().to_string_lossy().into_owned();
    if first == crate::workspace::STATE_DIR || first == ".git" || first == "__pycache__" {
        return None;
    }
    let name = rel.file_name()?.to_string_lossy().into_owned();
    if crate::workspace::is_ignored_name(&name) {
        return None;
    }
    if ignore.matched_path_or_any_parents(&rel, false).is_ignore() {
        return None;
    }
    Some(rel)
}

/// Why a version's job (its build, or its GPU rungs here or away) gave no result.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Runner(#[from] crate::remote::RunnerError),
    #[error(transparent)]
    Away(#[from] crate::remote::AwayError),
}

/// Why a watch could not start.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("{}: {source}", path.display())]
    Root { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Workspace(#[from] crate::workspace::OpenError),
}

/// Runs the pipeline on the workspace at `root` until `stop` is set, calling `emit` for every
/// event (from this thread).
pub fn watch(
    root: &Path,
    opts: &WatchOptions,
    stop: Arc<AtomicBool>,
    mut emit: impl FnMut(&WatchEvent),
) -> Result<(), WatchError> {
    let root = root.canonicalize().map_err(|source| WatchError::Root { path: root.to_path_buf(), source })?;
    let machine = Arc::new(Machine::discover());
    let (tx, rx): (Sender<Msg>, Receiver<Msg>) = channel();

    // The watcher: debounced, recursive, forwarding relevant paths.
    let gitignore = {
        let mut b = ignore::gitignore::GitignoreBuilder::new(&root);
        b.add(root.join(".gitignore"));
        b.build().unwrap_or_else(|_| ignore::gitignore::Gitignore::empty())
    };
    let keep: poll::Keep = {
        let (root, gitignore) = (root.clone(), gitignore.clone());
        Arc::new(move |p: &Path| relevant(&root, p, &gitignore))
    };
    let (ftx, frx) = channel();
    let events = || -> notify::Result<_> {
        let mut d = notify_debouncer_full::new_debouncer(DEBOUNCE, Some(Duration::from_millis(5)), ftx)?;
        d.watch(&root, notify::RecursiveMode::Recursive)?;
        Ok(d)
    };
    // Kept alive for the watch's life; without it, the scan alone finds the changes.
    let debouncer = match opts.poll {
        true => None,
        false => events()
            .map_err(|e| eprintln!("rung: no file events ({e}); scanning the workspace every {} ms", POLL.as_millis()))
            .ok(),
    };
    {
        let tx = tx.clone();
        poll::spawn(root.clone(), keep.clone(), stop.clone(), move |paths| tx.send(Msg::Files(paths)).is_ok());
    }
    {
        let tx = tx.clone();
        let keep = keep.clone();
        std::thread::spawn(move || {
            let collect = |result: notify_debouncer_full::DebounceEventResult, paths: &mut BTreeSet<PathBuf>| {
                let Ok(events) = result else { return };
                for e in events {
                    if matches!(e.kind, notify::EventKind::Access(_)) {
                        continue;
                    }
                    for p in &e.paths {
                        if let Some(rel) = keep(p) {
                            paths.insert(rel);
                        }
                    }
                }
            };
            while let Ok(first) = frx.recv() {
                let mut paths = BTreeSet::new();
                collect(first, &mut paths);
                // Until the burst is over.
                while let Ok(more) = frx.recv_timeout(QUIET) {
                    collect(more, &mut paths);
                }
                if !paths.is_empty() && tx.send(Msg::Files(paths.into_iter().collect())).is_err() {
                    break;
                }
            }
        });
    }

    // Build threads.
    let builds: Arc<Queue<BuildJob>> = Queue::new();
    let threads = opts.build_threads.unwrap_or_else(|| crate::check::build_lanes(usize::MAX));
    for _ in 0..threads.max(1) {
        let (q, tx, machine, seed) = (builds.clone(), tx.clone(), machine.clone(), opts.seed);
        std::thread::spawn(move || {
            while let Some(job) = q.pop() {
                if job.cancel.load(Ordering::SeqCst) {
                    let _ = tx.send(Msg::Built(job.version.id.clone(), job.generation, Ok(None)));
                    continue;
                }
                let _ = tx.send(Msg::Running(job.version.id.clone(), JobKind::Build, job.generation, 0));
                let out = (|| -> Result<Option<(check::Built, u64)>, JobError> {
                    let mut store = Store::open(&job.ws.state_dir())?;
                    let seed = match seed {
                        Some(s) => s,
                        None => store.next_seed(check::draw_seed)?,
                    };
                    // A remote runner builds there, for its GPU: building here too would double it.
                    if !matches!(crate::remote::RunOn::of(&job.ws, None), Ok(crate::remote::RunOn::Here)) {
                        let b = check::handed_over(&mut store, &job.ws, &job.version)?;
                        return Ok(Some((b, seed)));
                    }
                    let b = check::build_phase(&job.ws, &mut store, &job.version, seed, &machine, Some(&job.cancel))?;
                    Ok(b.map(|b| (b, seed)))
                })();
                let _ = tx.send(Msg::Built(job.version.id.clone(), job.generation, out));
            }
        });
    }

    // The worker lanes: one per GPU (each thread owns its runners, whose workers see that GPU
    // alone), else one; a job goes to whichever lane is free, so N versions run on N GPUs at once
    // and one GPU is a queue.
    // A rung.toml that does not load is fixed in place: watch an empty workspace until it is.
    let mut ws = Arc::new(match Workspace::open(&root) {
        Ok(w) => w,
        Err(e) if e.is_fixable() => Workspace::broken(&root, e.diagnostics(&root)),
        Err(e) => return Err(e.into()),
    });

    let gpu: Arc<Queue<GpuJob>> = Queue::new();
    let lanes = machine.lanes();
    // Each lane's live children: killed to cancel the version it is running.
    let lives: Vec<crate::runners::Live> = lanes.iter().map(|_| crate::runners::Live::default()).collect();
    for (index, lane_machine) in lanes.into_iter().enumerate() {
        let (q, tx, machine, no_bench) = (gpu.clone(), tx.clone(), lane_machine, opts.no_bench);
        let live = lives[index].clone();
        let opened = ws.clone();
        std::thread::spawn(move || {
            let mut runners: Option<Runners> = None;
            // Start the Python zygote while nobody waits (its imports take seconds), so the first
            // save's check finds it warm: when the workspace has Python to run here.
            let python = opened.versions.iter().any(|v| v.kind.is_python())
                || opened.reference.as_ref().is_some_and(|r| r.extension().is_some_and(|e| e == "py"));
            if python
                && matches!(crate::remote::RunOn::of(&opened, None), Ok(crate::remote::RunOn::Here))
                && let Ok(r) = check::runners_for(&opened, &machine, &mut runners)
            {
                r.live = live.clone();
                check::start_workers_ahead(&opened, &machine, &mut runners, true);
            }
            drop(opened);
            while let Some(job) = q.pop() {
                if job.cancel.load(Ordering::SeqCst) {
                    let _ = tx.send(Msg::Ran(job.built.version.id.clone(), job.generation, Ok(None), index));
                    continue;
                }
                let id = job.built.version.id.clone();
                let _ = tx.send(Msg::Running(id.clone(), JobKind::Gpu, job.generation, index));
                let out = (|| -> Result<Option<VersionReport>, JobError> {
                    let mut store = Store::open(&job.ws.state_dir())?;
                    let opts = CheckOptions { no_bench, ..Default::default() };
                    let one = CheckOptions { versions: vec![id.clone()], seed: Some(job.seed), ..opts.clone() };
                    match crate::remote::RunOn::of(&job.ws, None)? {
                        crate::remote::RunOn::Here => {}
                        // An SSH host climbs the rungs (its build too), a Slurm job likewise;
                        // each result is recorded here and announced as it comes home, and a
                        // newer save stops the check.
                        crate::remote::RunOn::Away(away) => {
                            let (tx, generation) = (tx.clone(), job.generation);
                            let mut note = |line: &str| {
                                let _ = tx.send(Msg::Note(id.clone(), generation, line.to_string()));
                            };
                            let report = away.check(&job.ws, &mut store, &one, Some(&job.cancel), &mut note)?;
                            return Ok(report.and_then(|r| r.versions.into_iter().next()));
                        }
                    }
                    // Here: the lane's workers, started on first need.
                    if runners.is_none()
                        && let Ok(r) = check::runners_for(&job.ws, &machine, &mut runners)
                    {
                        r.live = live.clone();
                    }
                    let cx = check::RunCtx {
                        ws: &job.ws,
                        store: &mut store,
                        machine: &machine,
                        runners: &mut runners,
                        opts: &opts,
                        seed: job.seed,
                        cancel: Some(&job.cancel),
                    };
                    Ok(check::run_phase(cx, job.built)?)
                })();
                let _ = tx.send(Msg::Ran(id, job.generation, out, index));
                // The next check of a GPU MODE or KernelBench problem finds its two children
                // forked, CUDA open in each, while nobody waited (a queued job takes them at once).
                check::fork_ahead(&job.ws, &machine, &mut runners);
            }
        });
    }

    let now = || crate::store::now_ms();
    let mut states: BTreeMap<String, VersionState> = BTreeMap::new();
    // Versions seen so far: a file that is none of them is a new version.
    let mut known: BTreeSet<String> = ws.versions.iter().map(|v| v.id.clone()).collect();
    // What each file held when it last started jobs: a change that both the file events and
    // the scan report starts them once.
    let mut seen = poll::Seen::default();
    emit(&WatchEvent {
        unix_ms: now(),
        kind: EventKind::Started {
            schema: WATCH_SCHEMA,
            workspace: root.clone(),
            versions: ws.versions.iter().map(|v| v.id.clone()).collect(),
        },
    });
    let mut broken = ws.spec.is_none() && ws.format == crate::workspace::Format::Rung;
    if broken {
        emit(&WatchEvent { unix_ms: now(), kind: EventKind::Workspace { diagnostics: ws.diagnostics.clone() } });
    }

    // The version each worker lane is running, and its generation.
    let mut lane: BTreeMap<usize, (String, u64)> = BTreeMap::new();
    let focus = opts.focus.clone();
    let schedule = |ws: &Arc<Workspace>,
                    states: &mut BTreeMap<String, VersionState>,
                    lane: &BTreeMap<usize, (String, u64)>,
                    v: &VersionFile,
                    emit: &mut dyn FnMut(&WatchEvent)| {
        let st = states
            .entry(v.id.clone())
            .or_insert(VersionState { generation: 0, cancel: Arc::new(AtomicBool::new(false)) });
        // Newest wins: the old job stops, and its child with it (a build's tool stops through
        // the flag; the worker lane's child is killed when it is this version's).
        st.cancel.store(true, Ordering::SeqCst);
        for (k, (id, g)) in lane {
            if id == &v.id && *g == st.generation {
                crate::runners::kill_live(&lives[*k]);
            }
        }
        st.generation += 1;
        st.cancel = Arc::new(AtomicBool::new(false));
        builds.push(
            BuildJob { ws: ws.clone(), version: v.clone(), generation: st.generation, cancel: st.cancel.clone() },
            focus.is(&v.id),
        );
        emit(&WatchEvent {
            unix_ms: now(),
            kind: EventKind::Job {
                version: v.id.clone(),
                job: JobKind::Build,
                state: JobState::Queued,
                generation: st.generation,
                why: None,
            },
        });
    };
    if opts.initial {
        let mut all = ws.versions.clone();
        all.sort_by_key(|v| !focus.is(&v.id));
        for v in all {
            schedule(&ws, &mut states, &lane, &v, &mut emit);
        }
    }

    while !stop.load(Ordering::SeqCst) {
        let msg = match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(m) => m,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(_) => break,
        };
        match msg {
            Msg::Files(paths) => {
                let paths = seen.fresh(&root, paths);
                if paths.is_empty() {
                    continue;
                }
                let fresh = match Workspace::open(&root) {
                    Ok(w) => Arc::new(w),
                    Err(e) => {
                        let diagnostics = e.diagnostics(&root);
                        emit(&WatchEvent { unix_ms: now(), kind: EventKind::Workspace { diagnostics } });
                        broken = true;
                        continue;
                    }
                };
                if std::mem::take(&mut broken) {
                    // Fixed: what is wrong now (perhaps nothing) replaces the errors shown.
                    let diagnostics = fresh.diagnostics.clone();
                    emit(&WatchEvent { unix_ms: now(), kind: EventKind::Workspace { diagnostics } });
                }
                for gone in ws.versions.iter().filter(|v| fresh.version(&v.id).is_none()) {
                    if let Some(st) = states.get(&gone.id) {
                        st.cancel.store(true, Ordering::SeqCst);
                    }
                    emit(&WatchEvent { unix_ms: now(), kind: EventKind::Removed { version: gone.id.clone() } });
                }
                ws = fresh;
                let all = paths.iter().any(|p| is_problem_file(&ws, p));
                // A saved header rebuilds the versions that include it.
                let headers: Vec<PathBuf> = paths
                    .iter()
                    .filter(|p| p.file_name().is_some_and(|n| crate::workspace::is_header_name(&n.to_string_lossy())))
                    .map(|p| lexical(&root.join(p)))
                    .collect();
                let includes_one = |v: &VersionFile| {
                    !headers.is_empty()
                        && ws.read_source(v).is_ok_and(|src| {
                            crate::stages::build::local_headers(&root, v, &src)
                                .iter()
                                .any(|h| headers.contains(&lexical(h)))
                        })
                };
                let touched: Vec<VersionFile> = ws
                    .versions
                    .iter()
                    .filter(|v| all || paths.iter().any(|p| p == &v.path) || !known.contains(&v.id) || includes_one(v))
                    .cloned()
                    .collect();
                known.extend(ws.versions.iter().map(|v| v.id.clone()));
                emit(&WatchEvent {
                    unix_ms: now(),
                    kind: EventKind::Changed {
                        paths: paths.clone(),
                        versions: touched.iter().map(|v| v.id.clone()).collect(),
                        all,
                    },
                });
                // The focused version first: a free build thread takes the first job at once.
                let mut ordered: Vec<&VersionFile> = touched.iter().collect();
                ordered.sort_by_key(|v| !focus.is(&v.id));
                for v in ordered {
                    schedule(&ws, &mut states, &lane, v, &mut emit);
                }
            }
            Msg::Running(id, job, generation, index) => {
                if job == JobKind::Gpu {
                    lane.insert(index, (id.clone(), generation));
                }
                if states.get(&id).is_some_and(|s| s.generation == generation) {
                    emit(&WatchEvent {
                        unix_ms: now(),
                        kind: EventKind::Job { version: id, job, state: JobState::Running, generation, why: None },
                    });
                }
            }
            Msg::Note(id, generation, why) => {
                if states.get(&id).is_some_and(|s| s.generation == generation) {
                    emit(&WatchEvent {
                        unix_ms: now(),
                        kind: EventKind::Job {
                            version: id,
                            job: JobKind::Gpu,
                            state: JobState::Running,
                            generation,
                            why: Some(why),
                        },
                    });
                }
            }
            Msg::Built(id, generation, out) => {
                let current = states.get(&id).filter(|s| s.generation == generation);
                let job_event = |state: JobState, why: Option<String>| WatchEvent {
                    unix_ms: now(),
                    kind: EventKind::Job { version: id.clone(), job: JobKind::Build, state, generation, why },
                };
                match (current, out) {
                    (None, _) | (_, Ok(None)) => {
                        emit(&job_event(JobState::Cancelled, Some("a newer save of this version arrived".into())))
                    }
                    (Some(_), Err(e)) => emit(&job_event(JobState::Failed, Some(e.to_string()))),
                    (Some(st), Ok(Some((built, seed)))) => {
                        emit(&job_event(JobState::Done, None));
                        if built.runnable {
                            let cancel = st.cancel.clone();
                            let front = opts.focus.is(&id);
                            gpu.push(GpuJob { ws: ws.clone(), built, seed, generation, cancel }, front);
                            emit(&WatchEvent {
                                unix_ms: now(),
                                kind: EventKind::Job {
                                    version: id.clone(),
                                    job: JobKind::Gpu,
                                    state: JobState::Queued,
                                    generation,
                                    why: None,
                                },
                            });
                        } else {
                            let report = built.into_report();
                            emit(&WatchEvent {
                                unix_ms: now(),
                                kind: EventKind::Done { version: id, generation, report },
                            });
                        }
                    }
                }
            }
            Msg::Ran(id, generation, out, index) => {
                lane.remove(&index);
                let current = states.get(&id).is_some_and(|s| s.generation == generation);
                let job_event = |state: JobState, why: Option<String>| WatchEvent {
                    unix_ms: now(),
                    kind: EventKind::Job { version: id.clone(), job: JobKind::Gpu, state, generation, why },
                };
                match out {
                    Ok(Some(report)) if current => {
                        emit(&job_event(JobState::Done, None));
                        emit(&WatchEvent { unix_ms: now(), kind: EventKind::Done { version: id, generation, report } });
                    }
                    Err(e) if current => emit(&job_event(JobState::Failed, Some(e.to_string()))),
                    _ => emit(&job_event(JobState::Cancelled, Some("a newer save of this version arrived".into()))),
                }
            }
        }
    }
    // Stopping (the TUI quits): running jobs are cancelled and their children killed, as a
    // newer save would, so nothing outlives the watch.
    for st in states.values() {
        st.cancel.store(true, Ordering::SeqCst);
    }
    for live in &lives {
        crate::runners::kill_live(live);
    }
    builds.close();
    gpu.close();
    drop(debouncer);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(rel: &str) -> Workspace {
        Workspace::open(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(rel)).unwrap()
    }

    #[test]
    fn a_focus_moved_through_one_clone_is_seen_by_the_others() {
        let focus = Focus::new(Some("v001".into()));
        let scheduler_copy = focus.clone();
        assert!(scheduler_copy.is("v001"));
        focus.set(Some("v003".into()));
        assert!(scheduler_copy.is("v003") && !scheduler_copy.is("v001"));
        focus.set(None);
        assert_eq!(scheduler_copy.get(), None);
        assert!(!Focus::default().is("v001"));
    }

    #[test]
    fn problem_files_are_what_the_workspace_names_whatever_its_format() {
        let kb = fixture("kernelbench");
        assert!(is_problem_file(&kb, Path::new("19_Linear_ReLU.py")), "a KernelBench problem file is its reference");
        assert!(!is_problem_file(&kb, Path::new("versions/v001-torch.py")));
        let gm = fixture("gpu-mode/vectoradd");
        for f in ["reference.py", "task.yml", "task.py", "utils.py"] {
            assert!(is_problem_file(&gm, Path::new(f)), "{f}");
        }
        assert!(!is_problem_file(&gm, Path::new("versions/v002-triton.py")));
        assert!(!is_problem_file(&gm, Path::new("README.md")));
    }
}
