//! Requests to the judge's process, the one that never runs a version, and what its failures
//! mean: the problem's own code failing is no verdict on the version, nor is the judge dying.

use std::time::Duration;

use crate::diag::{Diagnostic, Pos};
use crate::model::protocol::{self, CallMode, WorkerError};
use crate::model::report::{Reason, Verdict};
use crate::runners::{Failure, Runners};
use crate::stages::reason_for;

use super::failure_reason;
use super::judge::{one_line, shorten};

/// Why the judge's process gave no verdict: its error (the problem's own code raised on the
/// version's answer, say) or its failure (it died, ran out of time).
pub struct JudgeFailed(pub Verdict, pub Option<Reason>, pub String, pub Option<Box<Diagnostic>>);

impl JudgeFailed {
    pub(super) fn at(self, label: &str) -> (Verdict, Option<Reason>, String, Option<Diagnostic>) {
        (self.0, self.1, format!("{} (the judge, at {label})", self.2), self.3.map(|d| *d))
    }
}

/// A worker's error as a message and a diagnostic at its line (in `file` when it names none).
pub(super) fn error_at(e: &WorkerError, file: &std::path::Path) -> (String, Diagnostic) {
    let msg = format!("{}: {}", e.kind, e.message);
    let file = e.file.clone().unwrap_or_else(|| file.to_path_buf());
    let mut d = Diagnostic::error(&file, Pos::new(e.lineno.unwrap_or(0), 0), msg.clone());
    d.tool_text = e.traceback.clone();
    (msg, d)
}

/// One request to the judge's process ([`Runners::judge`]).
pub fn judge_call(
    runners: &mut Runners,
    mode: CallMode,
    req: protocol::Judge,
    limit: Duration,
) -> Result<protocol::Response, JudgeFailed> {
    judge_send(runners, mode, req, limit)?;
    judge_receive(runners, mode, limit)
}

/// Sends a request to the judge's process (forked first if it is not running) and returns at
/// once; [`judge_receive`] reads the answer.
pub fn judge_send(
    runners: &mut Runners,
    mode: CallMode,
    req: protocol::Judge,
    limit: Duration,
) -> Result<(), JudgeFailed> {
    runners
        .judge(mode, limit + Duration::from_secs(30))
        .and_then(|z| z.send(protocol::Op::Judge(req)))
        .map_err(judge_gone)
}

/// The answer to the request [`judge_send`] sent, within `limit`.
pub fn judge_receive(
    runners: &mut Runners,
    mode: CallMode,
    limit: Duration,
) -> Result<protocol::Response, JudgeFailed> {
    judge_failed(runners.judge(mode, limit + Duration::from_secs(30)).and_then(|z| z.receive(limit)))
}

pub(super) fn judge_failed(r: Result<protocol::Response, Failure>) -> Result<protocol::Response, JudgeFailed> {
    match r {
        Ok(r) if r.ok => Ok(r),
        Ok(r) => {
            let e = r.error.unwrap_or_else(|| WorkerError::new("error", ""));
            if let Some((verdict, why)) = problem_code_failed(&e) {
                return Err(JudgeFailed(verdict, None, why, None));
            }
            let d = e.file.as_ref().map(|file| Box::new(error_at(&e, file).1));
            let reason = reason_for(&e);
            if reason == Reason::OutOfMemory {
                // The two processes share the card: which one's memory left the judge none is
                // not known, so there is no verdict rather than the version's failure.
                let why = format!(
                    "the judge's process ran out of device memory, which it shares with the version's: no verdict ({}: {})",
                    e.kind,
                    shorten(&one_line(&e.message), 240)
                );
                return Err(JudgeFailed(Verdict::Error, None, why, d));
            }
            Err(JudgeFailed(Verdict::Fail, Some(reason), format!("{}: {}", e.kind, e.message), d))
        }
        Err(f) => Err(judge_gone(f)),
    }
}

/// The problem's own code failed where none of the version's ran (rung_problem.py's
/// `ProblemCode`: its module's import, its inputs' draw, its reference): no verdict on the
/// version, an error; or, on a machine without a GPU, a problem that asked for CUDA
/// (`ProblemNeedsGpu`): skipped, as a CUDA reference is there.
pub(super) fn problem_code_failed(e: &WorkerError) -> Option<(Verdict, String)> {
    let why = shorten(&one_line(&e.message), 320);
    match e.kind.as_str() {
        "ProblemNeedsGpu" => Some((Verdict::Skipped, format!("no GPU: {why}"))),
        "ProblemCode" => Some((Verdict::Error, format!("{why}: no verdict on the version"))),
        _ => None,
    }
}

/// The judge's process gave no answer (it died, ran out of time): rung's error, not the
/// version's failure.
pub(super) fn judge_gone(f: Failure) -> JudgeFailed {
    let (verdict, _) = failure_reason(&f);
    JudgeFailed(if verdict == Verdict::Fail { Verdict::Error } else { verdict }, None, f.to_string(), None)
}
