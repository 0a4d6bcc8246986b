//! The sparse probe's call and its verdict: a check's last request to each process, so that a
//! version that breaks on the moved draw loses nothing but the probe's verdict.

use std::time::Duration;

use crate::model::protocol::{self, CallMode, ProbeOutcome, WorkerError};
use crate::runners::{Failure, Runners};

use super::judge::{one_line, shorten};
use super::judging::{JudgeFailed, judge_call};

/// Why the sparse probe gave no judged case.
pub(super) enum ProbeLost {
    /// Something wrote on the protocol's stream in the version's name: a forged reply.
    Forged(String),
    /// The version's process raised, died or hung on the moved draw, or the judge could not
    /// judge it: a warning, since the draw is out of the problem's range.
    Unjudged(String),
}

/// What the sparse probe asks of the two processes ([`sparse_probe`]).
pub(super) struct ProbeRequests {
    pub learn: Option<(protocol::Judge, Duration)>,
    pub call: protocol::Problem,
    pub judge: protocol::Judge,
    /// Seeds of fresh draws of the same test, for the probe made again.
    pub more: Vec<u64>,
    pub limit: Duration,
}

/// The sparse probe's call (`call`, the version's process) and its verdict (`judge`, the
/// judge's process): the judged case, `None` when there is no probe to make, or why there is no
/// verdict. With `learn`, the judge first learns the probe at the call's own test (a GPU MODE
/// probe is learnt at the first test that is a reduction, and a larger test may need elements
/// moved further to move its reference), and the call takes what it learnt.
///
/// An answer that `differs` (neither the moved reference's nor the unmoved one's) is what a
/// version that reads part of its inputs gives when a moved element is among those it reads, as
/// well as an honest one whose arithmetic breaks at the moved magnitude: the probe is made again
/// on each of `more` (fresh draws of the same test, other positions) while it differs. One
/// that then says `ignored` fails the version; otherwise the first answer stands.
pub(super) fn sparse_probe(
    runners: &mut Runners,
    interpret: bool,
    mode: CallMode,
    asked: ProbeRequests,
) -> Result<Option<Vec<protocol::ProblemCase>>, ProbeLost> {
    let ProbeRequests { learn, mut call, judge, more, limit } = asked;
    if let Some((req, learn_limit)) = learn {
        match judge_call(runners, mode, req, learn_limit) {
            Ok(r) => call.hints = r.hints.unwrap_or_default(),
            Err(JudgeFailed(_, _, why, _)) => {
                return Err(ProbeLost::Unjudged(format!("the judge could not choose it there: {why}")));
            }
        }
        if call.hints.sparse.is_none() {
            return Ok(None);
        }
    }
    let outcome = |cases: &[protocol::ProblemCase]| cases.iter().find_map(|c| c.probe.as_ref().map(|p| p.outcome));
    let first = once(runners, interpret, mode, call.clone(), judge.clone(), limit)?;
    if outcome(&first) != Some(ProbeOutcome::Differs) {
        return Ok(Some(first));
    }
    for (n, &seed) in more.iter().enumerate() {
        let again = protocol::Problem { seeds: vec![seed], ..call.clone() };
        let Ok(mut cases) = once(runners, interpret, mode, again, judge.clone(), limit) else { break };
        match outcome(&cases) {
            Some(ProbeOutcome::Differs) => continue,
            Some(ProbeOutcome::Ignored) => {
                for p in cases.iter_mut().filter_map(|c| c.probe.as_mut()) {
                    p.message.push_str(&format!(
                        " (on its moved draw {} of {}: the ones before moved an element it read)",
                        n + 2,
                        more.len() + 1
                    ));
                }
                return Ok(Some(cases));
            }
            _ => break,
        }
    }
    // The first answer's warning stands.
    Ok(Some(first))
}

/// One probe call and its verdict.
fn once(
    runners: &mut Runners,
    interpret: bool,
    mode: CallMode,
    call: protocol::Problem,
    judge: protocol::Judge,
    limit: Duration,
) -> Result<Vec<protocol::ProblemCase>, ProbeLost> {
    let answer = runners.zygote(interpret).and_then(|z| z.call(protocol::Op::Problem(call), limit));
    let observed = match answer {
        Ok(r) if r.ok => r.problem.map(|p| p.observed).unwrap_or_default(),
        Ok(r) => {
            let e = r.error.unwrap_or_else(|| WorkerError::new("error", ""));
            let why = shorten(&one_line(&format!("{}: {}", e.kind, e.message)), 240);
            return Err(ProbeLost::Unjudged(format!("the version's process failed on that draw ({why})")));
        }
        Err(Failure::Forged(why)) => return Err(ProbeLost::Forged(why)),
        Err(f) => return Err(ProbeLost::Unjudged(format!("the version's process on that draw: {f}"))),
    };
    if observed.is_empty() {
        return Err(ProbeLost::Unjudged("the version's process returned no record".into()));
    }
    match judge_call(runners, mode, protocol::Judge { observed, ..judge }, limit) {
        Ok(r) => match r.problem {
            Some(p) if !p.cases.is_empty() => Ok(p.cases),
            _ => Err(ProbeLost::Unjudged("the judge returned no verdict".into())),
        },
        Err(JudgeFailed(_, _, why, _)) => Err(ProbeLost::Unjudged(format!("the judge: {why}"))),
    }
}
