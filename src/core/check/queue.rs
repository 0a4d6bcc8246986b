//! The GPU rungs of a check's versions, in the order chosen: each version's run and check rungs
//! as soon as it is built, its bench and roofline after them, except that while the first
//! bench's input sets are still being drawn (the check began drawing them as it started:
//! gigabytes at a real size), the versions built meanwhile climb their run and check rungs first,
//! and the bench waits for the sets with that work done.
//!
//! Only a bench needs the GPU to itself. With check lanes ([`spawn_lanes`]: threads with a native
//! worker each), CUDA versions climb their check rungs there, several at once, beside the builds;
//! a bench takes the GPU alone (`gpu`, written) while checks share it (read). Lanes open once the
//! reference's outputs at every test size are kept ([`crate::stages::run::reference_kept`]):
//! until then a check may write them, and checks go one at a time here.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use super::{Built, CheckOptions, Machine, Parked, RunCtx, climb_benches, climb_checks};
use crate::model::report::{RanOn, VersionReport};
use crate::runners::Runners;
use crate::store::{Store, StoreError};
use crate::workspace::Workspace;

/// How often a parked bench looks again whether its sets are drawn, while nothing arrives.
const LOOK_AGAIN: Duration = Duration::from_millis(20);

/// How often a queue waiting for builds or checks looks whether their threads are still there.
const LOOK_ALIVE: Duration = Duration::from_millis(200);

/// What the queue hears from the threads beside it: a version built (index in the order
/// chosen), or its check rungs climbed in a lane.
pub(super) enum Arrived {
    Built(usize, Result<Built, StoreError>),
    Checked(usize, Result<Parked, StoreError>),
}

/// Threads still at work: a builder or a lane leaving (returning or panicking) counts itself out,
/// so the queue never waits for one that is gone.
#[derive(Default, Clone)]
pub(super) struct AtWork(Arc<AtomicUsize>);

impl AtWork {
    /// Counts one thread in; the guard counts it out when dropped.
    pub fn enter(&self) -> Leaving {
        self.0.fetch_add(1, Ordering::SeqCst);
        Leaving(self.0.clone())
    }

    fn any(&self) -> bool {
        self.count() > 0
    }

    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

pub(super) struct Leaving(Arc<AtomicUsize>);

impl Drop for Leaving {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The check lanes as the queue holds them: where to send a built CUDA version, how many are
/// out, whether they are open yet.
pub(super) struct Lanes {
    to_lanes: Sender<(usize, Built)>,
    in_flight: usize,
    open: bool,
    at_work: AtWork,
    spawned: usize,
    /// How many versions were sent to the lanes.
    sent: usize,
}

impl Lanes {
    /// Every lane is still there. One that is gone (it could not open the history, or it
    /// panicked with a version) takes no more, and what was out is not waited for: the scope
    /// that joins it says why.
    fn whole(&self) -> bool {
        self.at_work.count() == self.spawned
    }
}

/// How many check lanes a check of these versions gets: none unless it runs CUDA versions of a
/// rung.toml problem on a GPU against a Python reference and without checks.py (whose calls
/// would start a Python process per lane), and at least [`LANES_FROM`] of them; then one per four
/// cores, at most four (each is a native worker with a CUDA context of its own);
/// [`LANES_VAR`] overrides the count (0 for none), on a machine without a GPU too, where the
/// lanes take CUDA versions whose run is skipped (so their workings can be tested there), and
/// says on standard error how many versions they took.
pub fn check_lanes(ws: &Workspace, machine: &Machine, native_versions: usize) -> usize {
    let wanted = std::env::var(LANES_VAR).ok().and_then(|n| n.trim().parse::<usize>().ok());
    let py_reference = ws.reference.as_ref().is_some_and(|r| r.extension().is_some_and(|e| e == "py"));
    let fits = ws.format == crate::workspace::Format::Rung
        && (!machine.gpu.devices.is_empty() || wanted.is_some())
        && py_reference
        && ws.checks.is_none()
        && native_versions >= LANES_FROM;
    if !fits {
        return 0;
    }
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    wanted.unwrap_or(if cores >= 8 { (cores / 4).min(4) } else { 0 })
}

/// The check lanes' count, asked for by name.
pub const LANES_VAR: &str = "RUNG_CHECK_LANES";

/// The fewest CUDA versions in one check for which check lanes are worth their workers' start.
pub const LANES_FROM: usize = 4;

/// The shared parts a lane works with.
pub(super) struct LaneEnv<'a> {
    pub ws: &'a Workspace,
    pub machine: &'a Machine,
    pub opts: &'a CheckOptions,
    pub seed: u64,
    pub gpu: Arc<RwLock<()>>,
    pub streams: bool,
}

/// Starts `count` check lanes in `scope`: each opens its own connection to the history and its
/// own workers (the native worker started at once, while the versions build), then climbs the
/// check rungs of every version sent to it, sharing the GPU with the others (`gpu`, read), and
/// sends back what it parked. They end when the queue drops its sender.
pub(super) fn spawn_lanes<'scope, 'env: 'scope>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    count: usize,
    env: LaneEnv<'env>,
    arrived: Sender<Arrived>,
) -> Lanes {
    let (to_lanes, work) = std::sync::mpsc::channel::<(usize, Built)>();
    let work = Arc::new(Mutex::new(work));
    let at_work = AtWork::default();
    let env = Arc::new(env);
    for lane in 0..count {
        let (work, arrived, env, leaving) = (work.clone(), arrived.clone(), env.clone(), at_work.enter());
        scope.spawn(move || {
            let _leaving = leaving;
            let LaneEnv { ws, machine, opts, seed, .. } = *env;
            // A lane without its history is a lane less: the queue sees it gone and checks here.
            let Ok(mut store) = Store::open(&ws.state_dir()) else { return };
            if env.streams {
                store.stream_results();
            }
            let mut runners: Option<Runners> = None;
            if let Ok(r) = super::runners_for(ws, machine, &mut runners) {
                r.env.lane = Some(lane);
                if !machine.gpu.devices.is_empty() {
                    r.start_native_ahead();
                }
            }
            while let Some((i, built)) = next_job(&work) {
                let parked = {
                    let _shared = env.gpu.read().unwrap_or_else(|e| e.into_inner());
                    let cx = RunCtx { ws, store: &mut store, machine, runners: &mut runners, opts, seed, cancel: None };
                    climb_checks(cx, built).map(|p| p.expect("not cancelled"))
                };
                if arrived.send(Arrived::Checked(i, parked)).is_err() {
                    return;
                }
            }
        });
    }
    Lanes { to_lanes, in_flight: 0, open: false, at_work, spawned: count, sent: 0 }
}

/// A lane's next version, or `None` once the queue has dropped its sender.
fn next_job(work: &Mutex<Receiver<(usize, Built)>>) -> Option<(usize, Built)> {
    work.lock().unwrap_or_else(|e| e.into_inner()).recv().ok()
}

pub(super) struct GpuRungs<'a> {
    ws: &'a Workspace,
    machine: &'a Machine,
    runners: &'a mut Option<Runners>,
    opts: &'a CheckOptions,
    seed: u64,
    here: RanOn,
    /// Versions whose check rungs are climbed, their bench rungs not yet, by index.
    checked: BTreeMap<usize, Parked>,
    /// The index of the next version to bench.
    bench_next: usize,
    /// Held written by a bench, read by every check: checks share the GPU, a bench has it alone.
    pub gpu: Arc<RwLock<()>>,
    /// The reports, in the order chosen.
    pub versions: Vec<VersionReport>,
}

impl<'a> GpuRungs<'a> {
    pub fn new(
        ws: &'a Workspace,
        machine: &'a Machine,
        runners: &'a mut Option<Runners>,
        opts: &'a CheckOptions,
        seed: u64,
        here: RanOn,
    ) -> GpuRungs<'a> {
        GpuRungs {
            ws,
            machine,
            runners,
            opts,
            seed,
            here,
            checked: BTreeMap::new(),
            bench_next: 0,
            gpu: Arc::default(),
            versions: Vec::new(),
        }
    }

    fn cx<'s>(&'s mut self, store: &'s mut Store) -> RunCtx<'s> {
        RunCtx {
            ws: self.ws,
            store,
            machine: self.machine,
            runners: self.runners,
            opts: self.opts,
            seed: self.seed,
            cancel: None,
        }
    }

    /// The run, captured and check rungs of `built` (index `i` in the order chosen), here; it
    /// then waits for its bench rungs.
    pub fn check(&mut self, i: usize, built: Built, store: &mut Store) -> Result<(), StoreError> {
        let gpu = self.gpu.clone();
        let _shared = gpu.read().unwrap_or_else(|e| e.into_inner());
        let parked = climb_checks(self.cx(store), built)?.expect("not cancelled");
        self.checked.insert(i, parked);
        Ok(())
    }

    /// The bench and roofline rungs of the next version in order, if its checks are done.
    pub fn bench(&mut self, store: &mut Store) -> Result<(), StoreError> {
        let Some(parked) = self.checked.remove(&self.bench_next) else { return Ok(()) };
        self.bench_next += 1;
        let gpu = self.gpu.clone();
        let _alone = gpu.write().unwrap_or_else(|e| e.into_inner());
        let mut r = climb_benches(self.cx(store), parked)?.expect("not cancelled");
        r.ran_on.get_or_insert_with(|| self.here.clone());
        self.versions.push(r);
        Ok(())
    }

    /// Whether work started ahead of the benches (their input sets, the reference's outputs on
    /// the fresh set) still runs: a bench now would wait for it.
    fn ahead_busy(&self) -> bool {
        self.runners.as_ref().is_some_and(|r| r.kept.ahead_busy())
    }

    /// A built version's check rungs: in a lane when lanes are open and it is a CUDA version
    /// that built, else here. Lanes open once the reference's outputs are kept.
    fn dispatch(
        &mut self,
        i: usize,
        built: Built,
        lanes: Option<&mut Lanes>,
        store: &mut Store,
    ) -> Result<(), StoreError> {
        let Some(lanes) = lanes else { return self.check(i, built, store) };
        if lanes.open && lanes.whole() && built.runnable && built.version.kind.is_native() {
            match lanes.to_lanes.send((i, built)) {
                Ok(()) => {
                    lanes.in_flight += 1;
                    lanes.sent += 1;
                    return Ok(());
                }
                // No lane left to take it: checked here.
                Err(std::sync::mpsc::SendError((_, built))) => return self.check(i, built, store),
            }
        }
        self.check(i, built, store)?;
        if !lanes.open {
            lanes.open = crate::stages::run::reference_kept(self.ws, self.seed);
        }
        Ok(())
    }

    /// What arrived: a build waits in `built` for its turn; a lane's checks join the benches'
    /// queue.
    fn take(
        &mut self,
        built: &mut BTreeMap<usize, Built>,
        lanes: &mut Option<Lanes>,
        got: Arrived,
    ) -> Result<(), StoreError> {
        match got {
            Arrived::Built(i, b) => {
                built.insert(i, b?);
            }
            Arrived::Checked(i, p) => {
                if let Some(l) = lanes.as_mut() {
                    l.in_flight -= 1;
                }
                self.checked.insert(i, p?);
            }
        }
        Ok(())
    }

    /// Climbs every one of `n` versions as its build (index in the order chosen) arrives, its
    /// check rungs here or in `lanes`, until every version has climbed. `building` counts the
    /// builders still at work.
    pub fn climb_as_built(
        &mut self,
        arrived: Receiver<Arrived>,
        n: usize,
        building: &AtWork,
        mut lanes: Option<Lanes>,
        store: &mut Store,
    ) -> Result<(), StoreError> {
        // Builds not yet taken, by index; every one before `due` was taken, in order.
        let mut built: BTreeMap<usize, Built> = BTreeMap::new();
        let mut due = 0;
        loop {
            // A thread counts itself out after its last send: once none is at work, whatever
            // they sent is already here to take.
            let builders = building.any();
            let whole = lanes.as_ref().is_none_or(Lanes::whole);
            if !builders || !whole {
                while let Ok(got) = arrived.try_recv() {
                    self.take(&mut built, &mut lanes, got)?;
                }
            }
            let waiting = Waiting {
                parked: self.checked.contains_key(&self.bench_next),
                ahead_busy: self.ahead_busy(),
                due_built: built.contains_key(&due),
                builds_open: due + built.len() < n && builders,
                in_flight: whole && lanes.as_ref().is_some_and(|l| l.in_flight > 0),
            };
            match next_move(waiting) {
                Move::Bench => self.bench(store)?,
                Move::Check => {
                    let b = built.remove(&due).expect("built");
                    self.dispatch(due, b, lanes.as_mut(), store)?;
                    due += 1;
                }
                Move::Done => {
                    // Asked for by name: say what the lanes did.
                    if let Some(l) = &lanes
                        && std::env::var_os(LANES_VAR).is_some()
                    {
                        eprintln!("rung: {} check lanes climbed the check rungs of {} versions", l.spawned, l.sent);
                    }
                    return Ok(());
                }
                Move::Wait(look_again) => {
                    if let Ok(got) = arrived.recv_timeout(look_again.unwrap_or(LOOK_ALIVE)) {
                        self.take(&mut built, &mut lanes, got)?;
                    }
                }
            }
        }
    }
}

/// What the GPU rungs' queue sees when it chooses its next move.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    /// A version's bench rungs are due.
    parked: bool,
    /// Work started ahead of the benches still runs: a bench now would wait for it.
    ahead_busy: bool,
    /// The next version in the order chosen is built.
    due_built: bool,
    /// More builds may come.
    builds_open: bool,
    /// Versions are climbing their check rungs in lanes.
    in_flight: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Move {
    /// The first parked version's bench rungs.
    Bench,
    /// The next version's check rungs.
    Check,
    /// Wait for a build: at most this long (to look at the bench again), or until one comes.
    Wait(Option<Duration>),
    Done,
}

/// The queue's rule: a parked bench first unless it would wait for work started ahead; then
/// the next version's checks; a bench that would wait waits in itself once nothing else can
/// come; while a bench waits, builds and lanes are waited for a moment at a time.
fn next_move(w: Waiting) -> Move {
    if w.parked && !w.ahead_busy {
        Move::Bench
    } else if w.due_built {
        Move::Check
    } else if !w.builds_open && !w.in_flight {
        if w.parked { Move::Bench } else { Move::Done }
    } else if w.parked {
        Move::Wait(Some(LOOK_AGAIN))
    } else {
        Move::Wait(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays the rule over versions that are all built from the start, recording what climbs.
    fn play(n: usize, draw_busy_for: usize) -> Vec<String> {
        let (mut parked, mut due, mut moves, mut out) = (Vec::new(), 0, 0, Vec::new());
        loop {
            let w = Waiting {
                parked: !parked.is_empty(),
                ahead_busy: !parked.is_empty() && moves < draw_busy_for,
                due_built: due < n,
                builds_open: false,
                in_flight: false,
            };
            moves += 1;
            match next_move(w) {
                Move::Bench => out.push(format!("bench v{}", parked.remove(0))),
                Move::Check => {
                    parked.push(due);
                    out.push(format!("check v{due}"));
                    due += 1;
                }
                Move::Done => return out,
                Move::Wait(_) => unreachable!("every version is built"),
            }
        }
    }

    #[test]
    fn with_nothing_drawn_ahead_each_version_checks_then_benches_in_order() {
        assert_eq!(play(3, 0), ["check v0", "bench v0", "check v1", "bench v1", "check v2", "bench v2"]);
    }

    #[test]
    fn while_the_first_benchs_sets_are_drawn_the_built_versions_check_first_and_benches_keep_order() {
        assert_eq!(play(3, 3), ["check v0", "check v1", "check v2", "bench v0", "bench v1", "bench v2"]);
        // The draw ends after two versions checked: the benches catch up, in order.
        assert_eq!(play(3, 2), ["check v0", "check v1", "bench v0", "bench v1", "check v2", "bench v2"]);
    }

    #[test]
    fn a_waiting_bench_looks_again_while_builds_may_come_and_waits_in_itself_once_they_cannot() {
        let w = Waiting { parked: true, ahead_busy: true, due_built: false, builds_open: true, in_flight: false };
        assert_eq!(next_move(w), Move::Wait(Some(LOOK_AGAIN)));
        assert_eq!(next_move(Waiting { builds_open: false, ..w }), Move::Bench);
        let idle = Waiting { parked: false, ahead_busy: false, due_built: false, builds_open: true, in_flight: false };
        assert_eq!(next_move(idle), Move::Wait(None));
        assert_eq!(next_move(Waiting { builds_open: false, ..idle }), Move::Done);
    }

    #[test]
    fn the_queue_is_not_done_while_lanes_still_check_and_benches_wait_for_their_turn() {
        // Every build arrived, two versions out in lanes, nothing to bench yet: wait for them.
        let out = Waiting { parked: false, ahead_busy: false, due_built: false, builds_open: false, in_flight: true };
        assert_eq!(next_move(out), Move::Wait(None));
        // The next version in order is back: it benches although others are still out.
        assert_eq!(next_move(Waiting { parked: true, ..out }), Move::Bench);
        // A bench that would wait for the sets drawn ahead looks again while lanes work.
        assert_eq!(next_move(Waiting { parked: true, ahead_busy: true, ..out }), Move::Wait(Some(LOOK_AGAIN)));
        // A built version is dispatched (to a lane or here) before anything waits.
        assert_eq!(next_move(Waiting { due_built: true, ..out }), Move::Check);
        assert_eq!(next_move(Waiting { in_flight: false, ..out }), Move::Done);
    }
}
