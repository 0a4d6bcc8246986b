//! The GPU rungs of a check's versions, one version at a time in the order chosen: each
//! version's run and check rungs as soon as it is built, its bench and roofline after them, except
//! that while the first bench's input sets are still being drawn (the check began drawing them
//! as it started: gigabytes at a real size), the versions built meanwhile climb their run and
//! check rungs first, and the bench waits for the sets with that work done.

use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use super::{Built, CheckOptions, Machine, Parked, RunCtx, climb_benches, climb_checks};
use crate::model::report::{RanOn, VersionReport};
use crate::runners::Runners;
use crate::store::{Store, StoreError};
use crate::workspace::Workspace;

/// How often a parked bench looks again whether its sets are drawn, while no build arrives.
const LOOK_AGAIN: Duration = Duration::from_millis(20);

pub(super) struct GpuRungs<'a> {
    ws: &'a Workspace,
    machine: &'a Machine,
    runners: &'a mut Option<Runners>,
    opts: &'a CheckOptions,
    seed: u64,
    here: RanOn,
    /// Versions whose check rungs are climbed, their bench rungs not yet, in order.
    parked: VecDeque<Parked>,
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
        GpuRungs { ws, machine, runners, opts, seed, here, parked: VecDeque::new(), versions: Vec::new() }
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

    /// The run, captured and check rungs of `built`, which then waits for its bench rungs.
    pub fn check(&mut self, built: Built, store: &mut Store) -> Result<(), StoreError> {
        let parked = climb_checks(self.cx(store), built)?.expect("not cancelled");
        self.parked.push_back(parked);
        Ok(())
    }

    /// The bench and roofline rungs of the first version waiting for them, if any.
    pub fn bench(&mut self, store: &mut Store) -> Result<(), StoreError> {
        let Some(parked) = self.parked.pop_front() else { return Ok(()) };
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

    /// Climbs every version as its build (index in the order chosen) arrives on `built`, until
    /// the builds are done and every version has climbed.
    pub fn climb_as_built(
        &mut self,
        built: Receiver<(usize, Result<Built, StoreError>)>,
        store: &mut Store,
    ) -> Result<(), StoreError> {
        let mut done: BTreeMap<usize, Built> = BTreeMap::new();
        let (mut due, mut open) = (0, true);
        loop {
            let waiting = Waiting {
                parked: !self.parked.is_empty(),
                ahead_busy: self.ahead_busy(),
                due_built: done.contains_key(&due),
                builds_open: open,
            };
            match next_move(waiting) {
                Move::Bench => self.bench(store)?,
                Move::Check => {
                    let b = done.remove(&due).expect("built");
                    self.check(b, store)?;
                    due += 1;
                }
                Move::Done => return Ok(()),
                Move::Wait(look_again) => {
                    let next = match look_again {
                        Some(d) => built.recv_timeout(d),
                        None => built.recv().map_err(|_| RecvTimeoutError::Disconnected),
                    };
                    match next {
                        Ok((i, b)) => {
                            done.insert(i, b?);
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => open = false,
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
/// come; while a bench waits, builds are waited for a moment at a time.
fn next_move(w: Waiting) -> Move {
    if w.parked && !w.ahead_busy {
        Move::Bench
    } else if w.due_built {
        Move::Check
    } else if !w.builds_open {
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
        let w = Waiting { parked: true, ahead_busy: true, due_built: false, builds_open: true };
        assert_eq!(next_move(w), Move::Wait(Some(LOOK_AGAIN)));
        assert_eq!(next_move(Waiting { builds_open: false, ..w }), Move::Bench);
        let idle = Waiting { parked: false, ahead_busy: false, due_built: false, builds_open: true };
        assert_eq!(next_move(idle), Move::Wait(None));
        assert_eq!(next_move(Waiting { builds_open: false, ..idle }), Move::Done);
    }
}
