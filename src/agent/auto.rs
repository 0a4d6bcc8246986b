//! Auto mode: ask the agent for a faster version of the parent, let the proposal climb every
//! rung, judge it, pick the next parent, and go again until a target, a budget or the user stops
//! it. Each judgement is a line of the log that says what was measured and why it chose what it
//! chose; the same lines go into the conversation as notices.
//!
//! The judgement, in order: a failing rung rejects the proposal (its reason, the failing rung's
//! summary, goes into the next prompt); a version whose check or bench could not run here is
//! kept but not built on; a passing version faster than the parent by more than the noise margin
//! becomes the next parent; a passing one that is not is rejected as no faster, with both
//! medians. Only the
//! user approves: auto mode proposes, rejects what fails, and builds on what is faster.
//!
//! The loop is [`run`], blocking; the shells give it the climb: `rung auto` runs the rungs itself
//! ([`rung_core::check`]), the TUI waits for its scheduler's result of the proposal.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::propose::{self, Proposed, Record};
use super::{Agent, AgentError, AgentEvent, Cancel, Conversation, Message, ToolBox};
use rung_core::model::report::{Stage, StageDetail, StageResult, Verdict, VersionReport};
use rung_core::store::{Status, Store};
use rung_core::workspace::Workspace;

/// A proposal must beat the parent's median by this fraction to replace it: less is within the
/// bench's own noise (its stopping rule aims at a 1% confidence interval).
pub const NOISE: f64 = 0.01;
/// Replies in a row without a code block before auto mode gives up.
pub const EMPTY_REPLIES: u32 = 2;

/// When auto mode stops (any one reached). No field: it stops after [`DEFAULT_VERSIONS`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// Percent of the measured ceiling that bounds the kernel (the roofline rung's figure).
    pub roofline_pct: Option<f64>,
    /// Speedup of the best version over the one auto mode started from (medians, same GPU).
    pub speedup: Option<f64>,
    /// Proposals (versions written) at most.
    pub max_versions: Option<u32>,
    /// Tokens (in and out) the conversation may reach.
    pub max_tokens: Option<u64>,
}

/// Why a version without a check result is unchecked.
pub const NOT_RUN: &str = "its check has not run";

/// Proposals when no target says otherwise.
pub const DEFAULT_VERSIONS: u32 = 5;

impl Target {
    fn versions(&self) -> u32 {
        match (self.max_versions, self.roofline_pct, self.speedup) {
            (Some(n), _, _) => n,
            // A performance target alone still has an end.
            (None, Some(_), _) | (None, _, Some(_)) => 4 * DEFAULT_VERSIONS,
            (None, None, None) => DEFAULT_VERSIONS,
        }
    }

    /// `85% of the roofline, 2x, 5 versions, 200000 tokens`: what is set.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = self.roofline_pct {
            parts.push(format!("{p}% of the roofline"));
        }
        if let Some(s) = self.speedup {
            parts.push(format!("{s}x over the start"));
        }
        parts.push(format!("{} versions", self.versions()));
        if let Some(t) = self.max_tokens {
            parts.push(format!("{t} tokens"));
        }
        parts.join(", ")
    }
}

/// What a version's rungs say, for judging it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Measure {
    pub id: String,
    /// The first failing rung: `check failed: max abs error 3.2 at [0, 7]`.
    pub failed: Option<String>,
    /// The check rung passed (the outputs agree with the reference).
    pub checked: bool,
    /// Why the check did not run, when it did not (`no GPU: run and check skipped`).
    pub unchecked_why: Option<String>,
    /// The bench's headline median at its first size, ms.
    pub median_ms: Option<f64>,
    pub roofline_pct: Option<f64>,
    /// `memory` or `compute`, from the roofline rung.
    pub bound: Option<String>,
}

impl Measure {
    /// From the stages of one climb.
    pub fn of(id: &str, stages: &[StageResult]) -> Measure {
        let mut m = Measure { id: id.to_string(), ..Measure::default() };
        for s in stages {
            if matches!(s.verdict, Verdict::Fail | Verdict::Error) && m.failed.is_none() {
                m.failed = Some(format!("{} {}: {}", s.stage.name(), s.verdict.name(), s.summary));
            }
            match (&s.stage, &s.detail) {
                (Stage::Check, _) if s.verdict == Verdict::Pass => m.checked = true,
                (Stage::Run | Stage::Check, _) if s.verdict == Verdict::Skipped && m.unchecked_why.is_none() => {
                    m.unchecked_why = Some(s.summary.clone())
                }
                (Stage::Bench, StageDetail::Bench(b)) if s.verdict == Verdict::Pass => {
                    m.median_ms = b.sizes.first().map(|z| z.headline.median)
                }
                (Stage::Roofline, StageDetail::Roofline(r)) if s.verdict == Verdict::Pass => {
                    m.roofline_pct = r.percent_of_ceiling;
                    m.bound = Some(r.bound.clone());
                }
                _ => {}
            }
        }
        if !m.checked && m.unchecked_why.is_none() && m.failed.is_none() {
            m.unchecked_why = Some(NOT_RUN.into());
        }
        m
    }

    pub fn of_report(r: &VersionReport) -> Measure {
        Measure::of(&r.id, &r.stages)
    }

    /// From the history: the latest results of the file as it is now.
    pub fn recorded(ws: &Workspace, store: &Store, id: &str) -> Option<Measure> {
        let v = ws.version(id)?;
        let results = rung_core::service::results(ws, store, v).ok()?;
        results.source_hash.as_ref()?;
        let stages: Vec<StageResult> =
            results.current().filter_map(|r| serde_json::from_value(r.payload.clone()).ok()).collect();
        (!stages.is_empty()).then(|| Measure::of(&v.id, &stages))
    }

    /// `6.10 µs, 62% of the memory roofline`, or `passes, no timing here`.
    pub fn describe(&self) -> String {
        if let Some(f) = &self.failed {
            return f.clone();
        }
        match (self.median_ms, self.roofline_pct) {
            (Some(t), Some(p)) => {
                format!("{}, {p:.0}% of the {} roofline", micros(t), self.bound.as_deref().unwrap_or("measured"))
            }
            (Some(t), None) => micros(t),
            (None, _) if self.checked => "passes its check, no timing here".into(),
            (None, _) => format!("not checked ({})", self.unchecked_why.as_deref().unwrap_or(NOT_RUN)),
        }
    }
}

fn micros(ms: f64) -> String {
    format!("{:.2} µs", ms * 1000.0)
}

/// A version's measure and its status in the history.
type Ranked = (Measure, Option<Status>);

/// The version auto mode starts from: the fastest approved version, else the fastest passing
/// one, else `fallback` (the selection), else none (the task and the reference alone). With why.
pub fn start_parent(root: &Path, fallback: Option<&str>) -> (Option<Measure>, String) {
    let Ok(ws) = Workspace::open(root) else { return (None, "the workspace does not open".into()) };
    let Ok(store) = Store::open(&ws.state_dir()) else { return (None, "the history does not open".into()) };
    let rows = store.versions().unwrap_or_default();
    let status = |id: &str| rows.iter().find(|r| r.id == id).map(|r| r.status);
    let measured: Vec<Ranked> = ws
        .versions
        .iter()
        .filter_map(|v| Measure::recorded(&ws, &store, &v.id))
        .map(|m| {
            let s = status(&m.id);
            (m, s)
        })
        .collect();
    let fastest = |want: &dyn Fn(&Ranked) -> bool| {
        measured
            .iter()
            .filter(|x| want(x) && x.0.checked && x.0.failed.is_none())
            .filter(|x| x.0.median_ms.is_some())
            .min_by(|a, b| a.0.median_ms.partial_cmp(&b.0.median_ms).unwrap_or(std::cmp::Ordering::Equal))
            .map(|x| x.0.clone())
    };
    if let Some(m) = fastest(&|x| x.1 == Some(Status::Approved)) {
        let why = format!("{} is the fastest approved version ({})", m.id, m.describe());
        return (Some(m), why);
    }
    if let Some(m) = fastest(&|x| x.1 != Some(Status::Rejected)) {
        let why = format!("{} is the fastest passing version ({}); none approved is timed", m.id, m.describe());
        return (Some(m), why);
    }
    if let Some(id) = propose::parent_for(root, fallback) {
        let m = Measure::recorded(&ws, &store, &id).unwrap_or_else(|| Measure::of(&id, &[]));
        let why = format!("{id} is the selected version; no version has a passing bench to rank by");
        return (Some(m), why);
    }
    (None, "no version to start from: the first proposal comes from the task and the reference".into())
}

/// What auto mode made of one proposal.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// Set when the proposal is rejected: the reason recorded with it.
    pub reject: Option<String>,
    /// The proposal is the next parent.
    pub parent: bool,
    /// The log's line.
    pub why: String,
}

/// The loop's state: the parent, the count, the start to measure speedups from.
#[derive(Debug, Clone)]
pub struct Auto {
    pub target: Target,
    pub parent: Option<Measure>,
    pub start: Option<Measure>,
    pub proposed: u32,
}

impl Auto {
    pub fn new(target: Target, start: Option<Measure>) -> Auto {
        Auto { target, parent: start.clone(), start, proposed: 0 }
    }

    /// Judges a proposal that has climbed its rungs (see the module's text for the rules).
    pub fn judge(&mut self, m: &Measure) -> Judgement {
        self.proposed += 1;
        let parent_id = self.parent.as_ref().map_or("the task alone".to_string(), |p| p.id.clone());
        if let Some(f) = &m.failed {
            return Judgement {
                reject: Some(format!("auto: {f}")),
                parent: false,
                why: format!("{}: {f}: rejected; the parent stays {parent_id}", m.id),
            };
        }
        if !m.checked {
            return Judgement {
                reject: None,
                parent: false,
                why: format!(
                    "{}: {}: kept for you to judge, not built on; the parent stays {parent_id}",
                    m.id,
                    m.describe()
                ),
            };
        }
        let parent_time = self.parent.as_ref().and_then(|p| p.median_ms);
        let better = match (&self.parent, m.median_ms, parent_time) {
            (None, _, _) => Err("there is no parent to beat".to_string()),
            (Some(_), Some(t), Some(p)) => Ok(t < p * (1.0 - NOISE)),
            (Some(p), _, _) if p.failed.is_some() => Err(format!("the parent {} fails ({})", p.id, p.describe())),
            (Some(p), _, _) if !p.checked => Err(format!("the parent {} is {}", p.id, p.describe())),
            (Some(p), Some(_), None) => Err(format!("the parent {} has no timing", p.id)),
            (Some(p), None, _) => {
                return Judgement {
                    reject: None,
                    parent: false,
                    why: format!(
                        "{}: passes, but no bench ran to rank it against {}: kept for you to judge; the parent stays {parent_id}",
                        m.id, p.id
                    ),
                };
            }
        };
        match better {
            Ok(true) => {
                let p = parent_time.expect("compared");
                let t = m.median_ms.expect("compared");
                let why = format!(
                    "{}: passes at {}, {:.2}x faster than {parent_id} ({}): the next parent",
                    m.id,
                    m.describe(),
                    p / t,
                    micros(p)
                );
                self.parent = Some(m.clone());
                Judgement { reject: None, parent: true, why }
            }
            Err(because) => {
                let why = format!("{}: passes ({}); {because}: the next parent", m.id, m.describe());
                self.parent = Some(m.clone());
                Judgement { reject: None, parent: true, why }
            }
            Ok(false) => {
                let (t, p) = (m.median_ms.unwrap_or_default(), parent_time.unwrap_or_default());
                let reason = format!(
                    "auto: passes but is not faster than {parent_id}: {} against {} (a new parent must be {:.0}% faster)",
                    micros(t),
                    micros(p),
                    NOISE * 100.0
                );
                let why = format!(
                    "{}: {}: rejected; the parent stays {parent_id}",
                    m.id,
                    reason.trim_start_matches("auto: ")
                );
                Judgement { reject: Some(reason), parent: false, why }
            }
        }
    }

    /// Whether a target is reached, after a judgement: why to stop.
    pub fn reached(&self, tokens: u64) -> Option<String> {
        let p = self.parent.as_ref();
        if let (Some(want), Some(got)) = (self.target.roofline_pct, p.and_then(|p| p.roofline_pct))
            && got >= want
        {
            return Some(format!("target reached: {} is at {got:.1}% of the roofline (target {want}%)", p.unwrap().id));
        }
        if let (Some(want), Some(t), Some(s)) =
            (self.target.speedup, p.and_then(|p| p.median_ms), self.start.as_ref().and_then(|s| s.median_ms))
            && s / t >= want
        {
            let (from, to) = (&self.start.as_ref().unwrap().id, &p.unwrap().id);
            return Some(format!("target reached: {to} is {:.2}x faster than {from} (target {want}x)", s / t));
        }
        self.budget_spent(tokens)
    }

    /// Whether a budget is spent: why to stop before asking again.
    pub fn budget_spent(&self, tokens: u64) -> Option<String> {
        if self.proposed >= self.target.versions() {
            return Some(format!(
                "budget spent: {} versions proposed (limit {})",
                self.proposed,
                self.target.versions()
            ));
        }
        if let Some(max) = self.target.max_tokens
            && tokens >= max
        {
            return Some(format!("budget spent: {tokens} tokens used (limit {max})"));
        }
        None
    }

    /// The message auto mode sends for the next proposal.
    pub fn instruction(&self, last: Option<&(String, Judgement)>) -> String {
        let mut s = String::new();
        if let Some((id, j)) = last
            && let Some(r) = &j.reject
        {
            let _ = write!(s, "{id} was rejected: {}. ", r.trim_start_matches("auto: "));
        }
        match &self.parent {
            Some(p) => {
                let _ = write!(s, "Propose a faster version of {} ({}).", p.id, p.describe());
            }
            None => s.push_str("Propose a first version of the kernel for this task."),
        }
        s.push_str(
            " Reply with the complete file in one fenced code block (```cuda or ```python), and a first line `name: <a few words>`.",
        );
        s
    }
}

/// What the loop tells its shell.
#[derive(Debug)]
pub enum AutoEvent<'a> {
    /// The message sent for the next proposal.
    Asking(&'a str),
    /// The streamed reply.
    Agent(AgentEvent),
    /// A proposal was written and now climbs.
    Proposed(&'a Proposed),
    /// A line of the log: a choice and why.
    Log(&'a str),
}

/// How auto mode ended.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoEnd {
    pub why: String,
    /// The parent when it stopped (the best it found, or where it started).
    pub parent: Option<String>,
    /// Every proposal and what became of it.
    pub steps: Vec<(String, Judgement)>,
}

/// The climb of a proposal here: the workspace read again (the proposal is new), `opts` with
/// the version as the only one, the report measured. The shells that run the rungs themselves
/// (`rung auto`, the selftest, the tests) use it; the TUI waits for its scheduler instead.
pub fn climb_here(
    root: &Path,
    id: &str,
    opts: &rung_core::check::CheckOptions,
    machine: &rung_core::check::Machine,
    runners: &mut Option<rung_core::runners::Runners>,
) -> Result<(Measure, VersionReport), ClimbError> {
    let ws = Workspace::open(root)?;
    let mut store = Store::open(&ws.state_dir())?;
    let opts = rung_core::check::CheckOptions { versions: vec![id.to_string()], ..opts.clone() };
    let report = rung_core::check::check_with(&ws, &mut store, &opts, machine, runners)?;
    let v = report.versions.into_iter().next().ok_or_else(|| ClimbError::NoVersion(id.to_string()))?;
    Ok((Measure::of_report(&v), v))
}

/// The climb the shell provides: the version's rungs, run to the end and measured
/// ([`Measure::of`]), or why they could not run.
pub type Climb<'a> = dyn FnMut(&str) -> Result<Measure, ClimbError> + 'a;

/// Why a proposal's rungs gave no measure.
#[derive(Debug, thiserror::Error)]
pub enum ClimbError {
    #[error(transparent)]
    Open(#[from] rung_core::workspace::OpenError),
    #[error(transparent)]
    Store(#[from] rung_core::store::StoreError),
    #[error("{0} is not a version")]
    NoVersion(String),
    #[error("stopped by the user")]
    Stopped,
    /// The shell's scheduler gave no result in time (minutes).
    #[error("no result from the scheduler in {0} minutes")]
    NoResult(u64),
    #[error("the TUI stopped listening")]
    Disconnected,
}

/// Who auto mode talks to and where: the workspace, the agent, the conversation (the caller's,
/// saved as it goes) and the tools the agent may call.
pub struct Session<'a> {
    pub root: &'a Path,
    pub agent: &'a Agent,
    pub conv: &'a mut Conversation,
    pub tools: &'a dyn ToolBox,
}

/// Runs auto mode from `start` until a target, a budget, `cancel`, an agent error, or replies
/// without code end it.
pub fn run(
    session: Session<'_>,
    target: Target,
    start: (Option<Measure>, String),
    cancel: &Cancel,
    climb: &mut Climb<'_>,
    sink: &mut dyn FnMut(AutoEvent<'_>),
) -> AutoEnd {
    let Session { root, agent, conv, tools } = session;
    let mut auto = Auto::new(target, start.0);
    let mut steps: Vec<(String, Judgement)> = Vec::new();
    let log = |conv: &mut Conversation, sink: &mut dyn FnMut(AutoEvent<'_>), line: String| {
        let _ = conv.push(Message::notice(format!("auto: {line}"), false));
        sink(AutoEvent::Log(&line));
    };
    log(conv, sink, format!("starting from {}; stops at {}", start.1, auto.target.describe()));
    let mut empty = 0;
    let why = loop {
        let tokens = conv.usage.input_tokens + conv.usage.output_tokens;
        if cancel.is_cancelled() {
            break "stopped by the user".to_string();
        }
        if let Some(why) = auto.budget_spent(tokens) {
            break why;
        }
        let ask = auto.instruction(steps.last());
        sink(AutoEvent::Asking(&ask));
        let parent = auto.parent.as_ref().map(|p| p.id.clone());
        let context = super::prompt::workspace_context(root, parent.as_deref(), &ask);
        if let Err(e) = conv.push(Message::user(ask.clone())) {
            break format!("the conversation cannot be saved: {e}");
        }
        let before = conv.messages.len();
        let result = agent.turn(conv, tools, &context, cancel, &mut |ev| sink(AutoEvent::Agent(ev)));
        match result {
            Ok(()) => {}
            Err(AgentError::Cancelled) => break "stopped by the user".to_string(),
            Err(e) => break format!("the agent failed: {e}"),
        }
        let reply = propose::last_reply(&conv.messages[before..]);
        let record = Record::of_turn(conv, agent.system_with(&context), ask.clone(), reply.clone());
        let proposed = match propose::propose(root, parent.as_deref(), &reply, record) {
            Ok(Some(p)) => p,
            Ok(None) => {
                empty += 1;
                log(conv, sink, format!("the reply has no code block ({empty} in a row)"));
                if empty >= EMPTY_REPLIES {
                    break format!("{EMPTY_REPLIES} replies in a row without a code block");
                }
                continue;
            }
            Err(e) => break format!("the proposal could not be written: {e}"),
        };
        empty = 0;
        sink(AutoEvent::Proposed(&proposed));
        let m = match climb(&proposed.id) {
            Ok(m) => m,
            Err(e) => break format!("{} could not climb its rungs: {e}", proposed.id),
        };
        let j = auto.judge(&m);
        if let Some(reason) = &j.reject {
            let stored = Workspace::open(root)
                .ok()
                .and_then(|ws| Store::open(&ws.state_dir()).ok())
                .map(|mut s| s.set_status(&proposed.id, Status::Rejected, Some(reason)));
            if !matches!(stored, Some(Ok(()))) {
                log(conv, sink, format!("{}: the rejection could not be recorded", proposed.id));
            }
        }
        log(conv, sink, j.why.clone());
        steps.push((proposed.id.clone(), j));
        let tokens = conv.usage.input_tokens + conv.usage.output_tokens;
        if let Some(why) = auto.reached(tokens) {
            break why;
        }
    };
    log(conv, sink, format!("stopped: {why}"));
    AutoEnd { why, parent: auto.parent.map(|p| p.id), steps }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed(id: &str, ms: f64) -> Measure {
        Measure { id: id.into(), checked: true, median_ms: Some(ms), ..Measure::default() }
    }

    #[test]
    fn failures_are_rejected_slower_rejected_faster_becomes_the_parent() {
        let mut a = Auto::new(Target { max_versions: Some(3), ..Target::default() }, Some(timed("v001", 0.010)));
        let fail =
            Measure { id: "v002".into(), failed: Some("check fail: y differs at [3, 1]".into()), ..Measure::default() };
        let j = a.judge(&fail);
        assert_eq!(j.reject.as_deref(), Some("auto: check fail: y differs at [3, 1]"));
        assert!(!j.parent && j.why.contains("the parent stays v001"), "{j:?}");
        let j = a.judge(&timed("v003", 0.0099));
        assert!(j.reject.as_deref().unwrap().contains("not faster than v001: 9.90 µs against 10.00 µs"), "{j:?}");
        assert_eq!(a.reached(0), None);
        let j = a.judge(&timed("v004", 0.005));
        assert!(j.parent && j.reject.is_none() && j.why.contains("2.00x faster than v001"), "{j:?}");
        assert_eq!(a.parent.as_ref().unwrap().id, "v004");
        assert_eq!(a.reached(0).unwrap(), "budget spent: 3 versions proposed (limit 3)");
    }

    #[test]
    fn targets_stop_it_and_the_instruction_carries_the_rejection() {
        let mut a = Auto::new(Target { speedup: Some(1.5), ..Target::default() }, Some(timed("v001", 0.010)));
        a.judge(&timed("v002", 0.008));
        assert_eq!(a.reached(0), None, "1.25x is short of 1.5x");
        a.judge(&timed("v003", 0.006));
        assert_eq!(a.reached(0).unwrap(), "target reached: v003 is 1.67x faster than v001 (target 1.5x)");
        let mut a = Auto::new(Target { roofline_pct: Some(85.0), ..Target::default() }, None);
        let m = Measure { roofline_pct: Some(88.0), bound: Some("memory".into()), ..timed("v001", 0.01) };
        let j = a.judge(&m);
        assert!(j.parent, "with nothing to beat, a passing version is the parent: {j:?}");
        assert!(a.reached(0).unwrap().contains("88.0% of the roofline"));
        let b = Auto::new(Target { max_tokens: Some(100), ..Target::default() }, None);
        assert_eq!(b.budget_spent(99), None);
        assert!(b.budget_spent(100).unwrap().contains("100 tokens"));
        let rejected = (
            "v007".to_string(),
            Judgement { reject: Some("auto: run fail: illegal address".into()), parent: false, why: String::new() },
        );
        let ask = a.instruction(Some(&rejected));
        assert!(
            ask.starts_with("v007 was rejected: run fail: illegal address. Propose a faster version of v001"),
            "{ask}"
        );
    }

    #[test]
    fn an_unchecked_version_is_kept_not_built_on() {
        let mut a = Auto::new(Target::default(), Some(timed("v001", 0.01)));
        let m = Measure {
            id: "v002".into(),
            unchecked_why: Some("no GPU: run and check skipped".into()),
            ..Measure::default()
        };
        let j = a.judge(&m);
        assert!(j.reject.is_none() && !j.parent, "{j:?}");
        assert!(j.why.contains("not checked (no GPU: run and check skipped)"), "{}", j.why);
        // Checked but not benched (no bench rung here): kept too, never rejected for it.
        let m = Measure { id: "v003".into(), checked: true, ..Measure::default() };
        let j = a.judge(&m);
        assert!(j.reject.is_none() && !j.parent, "{j:?}");
        assert!(j.why.contains("no bench ran to rank it against v001: kept for you to judge"), "{}", j.why);
        assert_eq!(a.parent.as_ref().unwrap().id, "v001");
    }
}
