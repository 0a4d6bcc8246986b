//! The stage contract: every rung a version climbs is a [`Rung`] that reads one context
//! ([`Climb`]) and returns one [`Step`]. [`super::ladder`] holds the tables of rungs and the loop
//! that climbs them.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::RunCtx;
use crate::model::bench::BenchDetail;
use crate::model::report::{Stage, StageResult, Verdict};
use crate::stages::StageOutcome;
use crate::store::StoreError;
use crate::workspace::VersionFile;

/// What a rung gives back.
pub enum Step {
    /// A row for the rung's stage, with the tools that made it. A second rung of a stage (the
    /// kernels a Triton build captured at launch) replaces the first one's row.
    Row(Box<StageOutcome>, BTreeMap<String, String>),
    /// Nothing to record here; the next rung goes on.
    Next,
    /// Nothing to record, and the climb ends (no check to record, `--no-bench`).
    Stop,
}

impl Step {
    /// A row with no tools.
    pub fn row(outcome: StageOutcome) -> Step {
        Step::Row(Box::new(outcome), BTreeMap::new())
    }
}

/// One rung of the ladder.
pub trait Rung {
    /// The stage whose row it writes.
    fn stage(&self) -> Stage;
    /// Whether a verdict other than `pass` ends the climb (the run's does not: a failed run still
    /// hands its check's outcome, when it has one, to the check rung).
    fn gates(&self) -> bool {
        true
    }
    /// Does the rung's work. Store errors end the whole check; everything else is a verdict.
    fn climb(&self, cx: &mut Climb<'_>) -> Result<Step, StoreError>;
}

/// One version's climb: what every rung reads (`at`: the workspace, the history, the machine and
/// its workers, the options, the seed, the flag a newer save sets), the version, what earlier
/// rungs left for later ones, and the rows so far.
pub struct Climb<'a> {
    pub at: RunCtx<'a>,
    pub version: VersionFile,
    pub source: String,
    pub source_hash: String,
    /// Why the source could not be read (prepare's error), when it could not.
    pub read_error: Option<String>,
    /// The rows recorded so far, in ladder order.
    pub stages: Vec<StageResult>,
    /// Left by the run rung: a CUDA reference's build (for the bench too), the kernels that
    /// launched, and the check's outcome.
    pub reference: Option<Result<(VersionFile, String), super::ReferenceError>>,
    pub launched: Vec<crate::model::protocol::CapturedKernel>,
    pub check: Option<StageOutcome>,
    /// Left by a passing bench, for the roofline.
    pub benched: Option<BenchDetail>,
    /// A rung stopped the climb (it failed a gate, or had nothing to record after it).
    pub stopped: bool,
}

impl<'a> Climb<'a> {
    /// A climb of `version` from `at`, after the rows in `stages`, with nothing left by a rung yet.
    pub fn start(
        at: RunCtx<'a>,
        version: VersionFile,
        source: String,
        source_hash: String,
        stages: Vec<StageResult>,
    ) -> Climb<'a> {
        Climb {
            at,
            version,
            source,
            source_hash,
            read_error: None,
            stages,
            reference: None,
            launched: vec![],
            check: None,
            benched: None,
            stopped: false,
        }
    }

    pub fn cancelled(&self) -> bool {
        self.at.cancel.is_some_and(|c| c.load(Ordering::SeqCst))
    }

    /// Whether this version's row of `stage` passed.
    pub fn passed(&self, stage: Stage) -> bool {
        self.stages.iter().any(|s| s.stage == stage && s.verdict == Verdict::Pass)
    }
}
