//! The TUI's state and the one function that changes it. Drawing reads this state and never
//! writes it.

mod keys;
mod reload;
mod views;

pub use views::*;

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Sender;

use anyhow::{Context, Result};
use crossterm::event::{MouseButton, MouseEventKind};
use ratatui::layout::{Position, Rect};
use rung_core::diag::Diagnostic;
use rung_core::model::report::{Stage, StageResult, Verdict};
use rung_core::stages::bench::SizeBench;
use rung_core::store::{Status, Store};
use rung_core::watch::{EventKind, JobKind, JobState};
use rung_core::workspace::Workspace;

use crate::action::{Action, Keymap};
use crate::asm_view::{Against, AsmView, DiffKey, Listing, Need};
use crate::chat_session::ChatSession;
use crate::event::Event;
use crate::layout::{self, Arrangement, Pane};
use crate::theme::{Role, Theme};

/// Lines the log pane keeps.
pub const LOG_LINES: usize = 2000;
/// Results of one stage read for the timing history.
const HISTORY_ROWS: usize = 5000;
/// Characters the assembly listings move per `h` / `l`.
pub const COLUMN_STEP: usize = 8;
/// The file, in `.rung/`, that holds the pinned baseline's id.
pub const BASELINE_FILE: &str = "baseline";

/// The rungs the versions pane shows, in order.
pub const RUNGS: [Stage; 6] = [Stage::Prepare, Stage::Build, Stage::Run, Stage::Check, Stage::Bench, Stage::Roofline];

/// One version as the panes show it.
#[derive(Debug, Clone)]
pub struct VersionView {
    pub id: String,
    /// The file name without its id and extension: `naive` for `v001-naive.cu`.
    pub name: String,
    /// Relative to the workspace root.
    pub path: PathBuf,
    /// `None`: not in the history yet.
    pub status: Option<Status>,
    /// The version it was made from, as recorded (agent proposals record theirs).
    pub parent: Option<String>,
    pub reason: Option<String>,
    pub verdicts: BTreeMap<Stage, Verdict>,
    /// The newest passing bench's first benchmark size.
    pub bench: Option<SizeBench>,
    /// Over the best approved version, timed interleaved.
    pub speedup: Option<f64>,
    pub roofline_percent: Option<f64>,
    pub diagnostics: Vec<DiagnosticView>,
    /// `stage: summary` of each rung that failed or broke, for when it left no diagnostic.
    pub failures: Vec<String>,
    /// The newest result of each rung, of the file as it is now.
    pub results: BTreeMap<Stage, StageResult>,
    /// The hash of the file as it is now; `None` when it cannot be read.
    pub source_hash: Option<String>,
}

/// One line of the log pane.
#[derive(Debug, Clone)]
pub struct LogLine {
    pub unix_ms: i64,
    pub role: Role,
    pub text: String,
}

/// The timing history of one GPU: every version's newest passing bench on it.
#[derive(Debug, Clone, Default)]
pub struct GpuTiming {
    pub gpu: String,
    pub uuid: String,
    pub points: Vec<TimingPoint>,
    /// The reference's median, µs, from the newest bench that timed it interleaved.
    pub reference_us: Option<f64>,
    /// The time at the ceiling that bounds the kernel (bytes or FLOPs over the measured
    /// ceiling), µs, from the newest roofline on this GPU.
    pub roofline_us: Option<f64>,
    /// The versions were timed by different timers (CUPTI and events), so every point is its
    /// time between events: a change of timer is not shown as a change of speed.
    pub mixed_timers: bool,
}

#[derive(Debug, Clone)]
pub struct TimingPoint {
    pub version: String,
    /// The version's place in the versions pane (the chart's x).
    pub ordinal: usize,
    /// The first benchmark size's headline, µs.
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    /// Of the file as it is now (false: the version was edited since).
    pub current: bool,
    /// The bench's first size as recorded (its timer, headline and time between events).
    pub bench: SizeBench,
}

impl VersionView {
    /// The first benchmark size's headline median, µs.
    pub fn median_us(&self) -> Option<f64> {
        self.bench.as_ref().map(|b| b.headline.median * 1e3)
    }
}

impl GpuTiming {
    /// The fastest version's point.
    pub fn best(&self) -> Option<&TimingPoint> {
        self.points.iter().min_by(|a, b| a.median_us.total_cmp(&b.median_us))
    }
}

#[derive(Debug, Clone)]
pub struct DiagnosticView {
    pub diagnostic: Diagnostic,
    /// The offending line of the file, read when the results were loaded.
    pub excerpt: Option<String>,
    /// Where the caret goes under the excerpt: the column once tabs are expanded.
    pub caret: Option<usize>,
}

/// Where Enter on a diagnostic points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jump {
    pub file: PathBuf,
    pub line: u32,
    pub column: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Normal,
    Help,
    /// Typing the reason for rejecting a version.
    Reject {
        version: String,
        reason: String,
    },
    /// The command palette: an action's name being typed; `selected` among the matches.
    Palette {
        input: String,
        selected: usize,
    },
    /// Choosing what the assembly pane compares the selected version with: `selected` among
    /// [`App::compare_choices`].
    Compare {
        selected: usize,
    },
    /// Approving a version whose check did not pass here: `why` says what ran; y approves.
    ConfirmApprove {
        version: String,
        why: String,
    },
    /// The selected version's trace over the panes ([`App::trace`]): zoomed `zoom` times, the
    /// window starting `offset` thousandths into the span, SM rows from `top`.
    Trace {
        zoom: u32,
        offset: u32,
        top: usize,
    },
    /// The source at a diagnostic (Enter in the compile-errors pane): the file around `at`, its
    /// line marked and the message under the column; `top` is the first line shown (0-based).
    Source {
        at: Jump,
        message: String,
        top: usize,
    },
}

/// The actions whose names contain `input`, in keymap order (the palette's list).
pub fn palette_matches(input: &str) -> Vec<Action> {
    let input = input.trim();
    let mut out: Vec<Action> = Action::ALL.into_iter().filter(|a| *a != Action::Palette).collect();
    out.retain(|a| a.name().contains(input) || a.describe().contains(input));
    // Names that start with the input first.
    out.sort_by_key(|a| !a.name().starts_with(input));
    out
}

pub struct App {
    pub root: PathBuf,
    /// `.rung/`: the history and the logs.
    pub state_dir: PathBuf,
    pub problem: String,
    store: Store,
    pub keymap: Keymap,
    pub theme: Theme,
    /// The syntax theme listings are highlighted with, by name and loaded (`None` when it does
    /// not load: the listings are then plain).
    pub syntax_theme: String,
    pub syntax: Option<Arc<syntect::highlighting::Theme>>,
    /// The assembly pane's listings, comparison and diffs.
    pub asm: AsmView,
    /// The assembly pane waited for a SASS listing at the last tick: the tick after it lands
    /// looks once more.
    asm_awaiting: bool,
    /// The `rung profile` running in the background, if one is: (version, tool).
    pub profiling: Option<(String, String)>,
    /// The trace the trace overlay shows (`T`).
    pub trace: Option<crate::trace_view::TraceView>,
    /// The loop's channel, for work done on other threads (the assembly diffs); without one
    /// (tests), that work is done at once on this thread.
    pub events: Option<Sender<Event>>,
    /// Clicks select and the wheel scrolls.
    pub mouse: bool,
    pub versions: Vec<VersionView>,
    /// Per GPU, in the order first benched.
    pub timing: Vec<GpuTiming>,
    /// The history's bench and roofline rows, parsed once (`timing` is made from them).
    timing_rows: views::TimingRows,
    /// The workspace as the last full reload found it: a version's own reload needs no new scan.
    ws: Option<Workspace>,
    /// The history as last seen: its `data_version` and newest result row ([`App::follow_store`]).
    data_version: i64,
    seen_result: i64,
    pub log: VecDeque<LogLine>,
    /// Problems with the workspace itself (rung.toml, duplicate ids).
    pub workspace_diagnostics: Vec<Diagnostic>,
    pub pane: Pane,
    /// The pane shown below the versions on a narrow screen: the last one focused.
    pub lower: Pane,
    /// The pane shown right of the versions and errors on a wide screen: the last focused of
    /// the detail panes.
    pub right: Pane,
    /// The focused pane takes the whole screen.
    pub zoomed: bool,
    /// Lines scrolled in the text panes (the log: lines back from its end).
    pub scroll: BTreeMap<Pane, u16>,
    /// The screen's size, for mouse hits (the loop sets it before the first event).
    pub area: Rect,
    /// The pinned baseline's id (in `.rung/baseline`, for `rung check --baseline`).
    pub baseline: Option<String>,
    /// Set by Ctrl-Z: the loop gives the terminal back and stops the process.
    pub suspend: bool,
    /// The scheduler has started watching the files: saves from now on are seen.
    pub watching: bool,
    /// Why versions run unsandboxed here (`[sandbox] mode = "off"`, no Landlock), for the
    /// header; `None` when they run sandboxed.
    pub unsandboxed: Option<&'static str>,
    pub selected: usize,
    pub diagnostic_selected: usize,
    pub mode: Mode,
    /// Versions with a job running, and which.
    pub running: BTreeMap<String, JobKind>,
    pub jump: Option<Jump>,
    /// A file to open in the editor: taken by the event loop, which leaves the screen for it.
    pub edit: Option<Jump>,
    /// One line for the bottom of the screen: what the last action did, or what went wrong.
    pub message: Option<String>,
    /// Advanced by ticks; picks the spinner's frame.
    pub frame: usize,
    pub quit: bool,
    /// The chat side panel and its agent.
    pub chat: ChatSession,
    /// The pane Tab goes back to from the chat.
    pub before_chat: Pane,
    /// A version to select once the versions pane lists it (a proposal the agent just wrote).
    pub select_when_listed: Option<String>,
}

impl App {
    /// What the layout is decided from (layout.rs).
    pub fn arrangement(&self) -> Arrangement {
        Arrangement {
            pane: self.pane,
            zoomed: self.zoomed,
            lower: self.lower,
            right: self.right,
            chat_shown: self.chat.shown,
            versions: self.versions.len(),
        }
    }

    pub fn open(root: &Path, color: bool) -> Result<App> {
        // A rung.toml that does not load: open on its errors, and load for real once it is fixed.
        let ws = match Workspace::open(root) {
            Ok(ws) => ws,
            Err(e) if e.is_fixable() => Workspace::broken(root, e.diagnostics(root)),
            Err(e) => return Err(e.into()),
        };
        let store = Store::open(&ws.state_dir())
            .with_context(|| format!("opening the history in {}", ws.state_dir().display()))?;
        let mut app = App {
            root: ws.root.clone(),
            state_dir: ws.state_dir(),
            problem: String::new(),
            store,
            keymap: super::config::Config::default().keymap,
            theme: Theme::default().plain(!color),
            syntax_theme: String::new(),
            syntax: None,
            asm: AsmView::default(),
            asm_awaiting: false,
            profiling: None,
            trace: None,
            select_when_listed: None,
            events: None,
            mouse: true,
            versions: vec![],
            timing: vec![],
            timing_rows: Default::default(),
            ws: None,
            data_version: 0,
            seen_result: 0,
            log: VecDeque::new(),
            workspace_diagnostics: vec![],
            pane: Pane::ALL[0],
            lower: Pane::Diagnostics,
            right: Pane::Correctness,
            zoomed: false,
            scroll: BTreeMap::new(),
            area: Rect::new(0, 0, 80, 24),
            baseline: None,
            suspend: false,
            watching: false,
            unsandboxed: rung_core::sandbox::unsandboxed(),
            selected: 0,
            diagnostic_selected: 0,
            mode: Mode::Normal,
            running: BTreeMap::new(),
            jump: None,
            edit: None,
            message: None,
            frame: 0,
            quit: false,
            chat: ChatSession::new(&ws.root, color),
            before_chat: Pane::ALL[0],
        };
        app.baseline = std::fs::read_to_string(app.state_dir.join(BASELINE_FILE))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        app.set_syntax_theme(&Theme::default().syntax);
        app.load(&ws)?;
        app.ws = Some(ws);
        app.data_version = app.store.data_version().unwrap_or(0);
        app.seen_result = app.store.versions_with_results_after(0).map_or(0, |(_, newest)| newest);
        Ok(app)
    }

    /// Chooses the syntax theme of the listings; one that does not load leaves them plain and
    /// says why.
    pub fn set_syntax_theme(&mut self, name: &str) {
        self.syntax_theme = name.to_string();
        match super::theme::syntax(name) {
            Ok(t) => self.syntax = Some(Arc::new(t)),
            Err(e) => {
                self.syntax = None;
                self.say(Role::Fail, e);
            }
        }
    }

    /// Adds a line to the log pane.
    pub fn log(&mut self, unix_ms: i64, role: Role, text: impl Into<String>) {
        if self.log.len() == LOG_LINES {
            self.log.pop_front();
        }
        self.log.push_back(LogLine { unix_ms, role, text: text.into() });
    }

    /// A message on the bottom line, kept in the log too.
    pub fn say(&mut self, role: Role, text: impl Into<String>) {
        let text = text.into();
        self.log(rung_core::store::now_ms(), role, text.clone());
        self.message = Some(text);
    }

    pub fn selected_version(&self) -> Option<&VersionView> {
        self.versions.get(self.selected)
    }

    /// Applies one event. Returns whether the screen changed.
    pub fn update(&mut self, event: Event) -> bool {
        let changed = self.apply(event);
        if changed {
            self.sync_asm();
        }
        changed
    }

    fn apply(&mut self, event: Event) -> bool {
        match event {
            Event::Key(key) => self.key(key),
            Event::Mouse(m) => {
                if !self.mouse || self.mode != Mode::Normal {
                    return false;
                }
                let at = Position::new(m.column, m.row);
                let Some((pane, rect)) = layout::panes(&self.arrangement(), layout::body(self.area))
                    .into_iter()
                    .find(|(_, r)| r.contains(at))
                else {
                    return false;
                };
                match m.kind {
                    MouseEventKind::Down(MouseButton::Left) => {
                        self.focus(pane);
                        if pane == Pane::Versions {
                            // Below the border and the header; the table scrolls only as far as
                            // the selection needs.
                            let visible = rect.height.saturating_sub(3) as usize;
                            let offset = (self.selected + 1).saturating_sub(visible);
                            let row = (m.row.saturating_sub(rect.y + 2)) as usize + offset;
                            if m.row >= rect.y + 2 && row < self.versions.len() {
                                self.select(row);
                            }
                        }
                        true
                    }
                    MouseEventKind::ScrollDown | MouseEventKind::ScrollUp => {
                        let focused = self.pane;
                        self.pane = pane;
                        let changed =
                            self.act(if m.kind == MouseEventKind::ScrollDown { Action::Down } else { Action::Up });
                        self.pane = focused;
                        changed
                    }
                    _ => false,
                }
            }
            Event::Resize(w, h) => {
                self.area = Rect::new(0, 0, w, h);
                true
            }
            Event::Tick => {
                self.frame = self.frame.wrapping_add(1);
                let awaits = self.asm_awaits_listing();
                let awaited = std::mem::replace(&mut self.asm_awaiting, awaits);
                self.follow_store() | !self.running.is_empty() | awaits | awaited
            }
            Event::Watch(e) => {
                self.log_event(&e);
                match e.kind {
                    EventKind::Job { version, job, state, why, .. } => match state {
                        JobState::Queued | JobState::Running => {
                            self.running.insert(version, job);
                            // A runner's word while running: a rung came home (SSH) or the
                            // job moved (Slurm); what is recorded shows at once.
                            if why.is_some() {
                                self.refresh();
                            }
                        }
                        JobState::Done if job == JobKind::Build => {}
                        JobState::Done | JobState::Failed | JobState::Cancelled => {
                            self.running.remove(&version);
                            self.refresh_version(&version);
                        }
                    },
                    EventKind::Done { version, report, .. } => {
                        self.running.remove(&version);
                        self.chat.report(&report);
                        self.refresh_version(&version);
                    }
                    EventKind::Workspace { diagnostics } => self.workspace_diagnostics = diagnostics,
                    EventKind::Started { .. } => {
                        self.watching = true;
                        self.refresh();
                    }
                    EventKind::Changed { .. } | EventKind::Removed { .. } => self.refresh(),
                }
                true
            }
            Event::WatchFailed(e) => {
                self.watching = false;
                self.say(Role::Fail, format!("the scheduler stopped: {e}"));
                true
            }
            Event::ProfileDone { version, tool, outcome } => {
                self.profiling = None;
                match outcome {
                    Ok(line) => self.say(Role::Pass, format!("{tool} of {version}: {line}")),
                    Err(e) => self.say(Role::Fail, format!("{tool} of {version} did not run: {e}")),
                }
                self.refresh();
                true
            }
            Event::AsmDiff(d) => {
                let now = rung_core::store::now_ms();
                match &d.error {
                    Some(e) => self.log(now, Role::Fail, e.clone()),
                    None => {
                        let against = d.key.left.as_ref().map_or("nothing", |l| l.id.as_str());
                        let text = format!(
                            "{} of {} against {}: diffed in {} ms",
                            d.key.kind.label(),
                            d.key.right.id,
                            against,
                            d.took.as_millis()
                        );
                        self.log(now, Role::Dim, text);
                    }
                }
                self.asm.arrived(d);
                true
            }
            Event::Agent(e) => {
                self.chat.apply(&e);
                true
            }
            Event::AgentDone(end) => {
                let review = format!(
                    "Tab gives the keys back, then {} approves, {} rejects",
                    self.key_of(Action::Approve),
                    self.key_of(Action::Reject)
                );
                match self.chat.finish(*end, &review) {
                    Some(Ok(p)) => {
                        self.proposed(&p.id, &p.path, p.parent.as_deref());
                        if !p.same_as.is_empty() {
                            self.say(Role::Fail, format!("{}: the same source as {}", p.id, p.same_as.join(", ")));
                        }
                    }
                    Some(Err(e)) => self.say(Role::Fail, format!("the agent's code was not written: {e}")),
                    None => {}
                }
                true
            }
            Event::AgentBuilt(built) => {
                self.chat.built(*built);
                true
            }
            Event::ModelSwitched(next) => {
                self.chat.switched(*next);
                true
            }
            Event::AutoAsking(text) => {
                self.chat.panel.push_user(&text);
                true
            }
            Event::AutoProposed { id, path, parent } => {
                self.proposed(&id, &path, parent.as_deref());
                true
            }
            Event::AutoLog(line) => {
                self.chat.panel.push_notice(format!("auto: {line}"), false);
                self.log(rung_core::store::now_ms(), Role::Accent, format!("auto: {line}"));
                true
            }
            Event::AutoDone(done) => {
                let (conv, end) = *done;
                self.chat.auto_done(conv);
                self.say(Role::Pass, format!("auto mode stopped: {}", end.why));
                self.refresh();
                true
            }
        }
    }

    /// The first key bound to `action`, as the key bar names it; "(unbound)" when none is.
    pub fn key_of(&self, action: Action) -> String {
        self.keymap
            .by_action_keys()
            .into_iter()
            .find(|(a, _)| *a == action)
            .and_then(|(_, keys)| keys.first().map(crate::action::key_name))
            .unwrap_or_else(|| "(unbound)".into())
    }

    /// The agent wrote a version: it is selected as soon as the versions pane lists it, so the
    /// user sees it climb and `a`/`r` act on it.
    fn proposed(&mut self, id: &str, path: &Path, parent: Option<&str>) {
        self.select_when_listed = Some(id.to_string());
        let from = parent.map(|p| format!(", made from {p}")).unwrap_or_default();
        self.say(Role::Accent, format!("{id} proposed by the agent ({}{from}): climbing its rungs", path.display()));
        self.refresh();
    }

    /// Runs `rung profile ID [FLAG]` (this binary) on a thread; its end arrives as
    /// `Event::ProfileDone` and the pane reads the recorded result. One at a time: the GPU is
    /// the profiler's while it replays.
    fn start_profile(&mut self, id: &str, flag: Option<&str>) {
        let tool = flag.map_or("profile", |f| f.trim_start_matches('-')).to_string();
        if let Some((v, t)) = &self.profiling {
            self.message = Some(format!("{t} of {v} is still running: one at a time"));
            return;
        }
        let Some(tx) = self.events.clone() else {
            self.message = Some("profiling runs from the TUI (or `rung profile`)".into());
            return;
        };
        let exe = match std::env::current_exe() {
            Ok(e) => e,
            Err(e) => {
                self.say(Role::Fail, format!("cannot find rung's own binary: {e}"));
                return;
            }
        };
        let mut cmd = std::process::Command::new(exe);
        cmd.args(["profile", id]).args(flag).current_dir(&self.root).stdin(std::process::Stdio::null());
        self.profiling = Some((id.to_string(), tool.clone()));
        self.say(
            Role::Accent,
            format!("{tool} of {id} started (rung profile {id}{})", flag.map(|f| format!(" {f}")).unwrap_or_default()),
        );
        let version = id.to_string();
        std::thread::spawn(move || {
            let outcome = match cmd.output() {
                Ok(o) => {
                    let text = String::from_utf8_lossy(&o.stdout);
                    let first = text.lines().next().unwrap_or("").trim().to_string();
                    if o.status.success() || o.status.code() == Some(rung_core::exit::CHECK_FAILED) {
                        Ok(first)
                    } else {
                        let err = String::from_utf8_lossy(&o.stderr);
                        Err(if first.is_empty() { err.lines().last().unwrap_or("").to_string() } else { first })
                    }
                }
                Err(e) => Err(e.to_string()),
            };
            let _ = tx.send(Event::ProfileDone { version, tool, outcome });
        });
    }

    /// What the assembly pane compares the selected version with, in the picker's order.
    pub fn compare_choices(&self) -> Vec<Against> {
        let selected = self.selected_version().map(|v| v.id.as_str());
        let mut out = vec![Against::Parent, Against::Best];
        out.extend(
            self.versions.iter().filter(|v| Some(v.id.as_str()) != selected).map(|v| Against::Version(v.id.clone())),
        );
        out
    }

    /// The version `against` names for the selected one, and how to say so: `v002 (parent)`.
    pub fn against_version(&self, against: &Against) -> Result<(String, String), String> {
        let Some(v) = self.selected_version() else { return Err("no version selected".into()) };
        match against {
            Against::Parent => {
                if let Some(p) = v.parent.as_ref().filter(|p| self.versions.iter().any(|w| &w.id == *p)) {
                    return Ok((p.clone(), format!("{p} (parent)")));
                }
                match self.selected.checked_sub(1).and_then(|i| self.versions.get(i)) {
                    Some(prev) => Ok((prev.id.clone(), format!("{} (previous; no parent recorded)", prev.id))),
                    None => Err(format!(
                        "{} is the first version and has no recorded parent: press c to compare it with another",
                        v.id
                    )),
                }
            }
            Against::Best => {
                // On one timer, as `rung check` picks the best approved version.
                let fastest = |approved: bool| {
                    let benched: Vec<(&VersionView, &SizeBench)> = self
                        .versions
                        .iter()
                        .filter(|w| !approved || w.status == Some(Status::Approved))
                        .filter_map(|w| Some((w, w.bench.as_ref()?)))
                        .collect();
                    rung_core::stages::bench::fastest(&benched)
                };
                let (best, what) = match fastest(true) {
                    Some(b) => (b, "best approved"),
                    None => match fastest(false) {
                        Some(b) => (b, "fastest"),
                        None => {
                            return Err(
                                "no version has a bench yet, so there is no best: press c to choose another".into()
                            );
                        }
                    },
                };
                if best.id == v.id {
                    return Err(format!("{} is the {what} version itself: press c to compare it with another", v.id));
                }
                Ok((best.id.clone(), format!("{} ({what})", best.id)))
            }
            Against::Version(id) => {
                if self.versions.iter().any(|w| &w.id == id) {
                    Ok((id.clone(), id.clone()))
                } else {
                    Err(format!("{id} is no longer in the workspace: press c to choose another"))
                }
            }
        }
    }

    /// Brings the assembly pane's diff in line with the selection, the comparison and the files
    /// on disk. Only while the pane is on screen: a hidden pane costs nothing.
    pub fn sync_asm(&mut self) {
        let visible =
            layout::panes(&self.arrangement(), layout::body(self.area)).iter().any(|(p, _)| *p == Pane::Assembly);
        if !visible {
            return;
        }
        let wanted = self.asm_key();
        if let Need::Compute(key) = self.asm.want(wanted) {
            match &self.events {
                Some(tx) => {
                    let tx = tx.clone();
                    std::thread::spawn(move || {
                        let _ = tx.send(Event::AsmDiff(Arc::new(super::asm_view::compute(key))));
                    });
                }
                None => self.asm.arrived(Arc::new(super::asm_view::compute(key))),
            }
        }
    }

    /// Whether the assembly pane waits for the selected version's SASS listing, which follows
    /// its build: each tick looks again until it lands.
    fn asm_awaits_listing(&self) -> bool {
        self.asm.kind == rung_core::asm::AsmKind::Sass
            && self.selected_version().is_some_and(|v| rung_core::stages::build::sass::pending(&self.state_dir, &v.id))
    }

    fn asm_key(&self) -> Result<DiffKey, String> {
        let v = self.selected_version().ok_or("no version selected")?;
        let kind = self.asm.kind;
        if let Some(b) = v.results.get(&Stage::Build).filter(|b| b.verdict != Verdict::Pass) {
            return Err(format!(
                "{} does not build ({}), so it has no {}: its compile errors are in the compile errors pane",
                v.id,
                b.summary,
                kind.label()
            ));
        }
        let Some(right) = Listing::stat(&self.state_dir, &v.id, kind) else {
            let when = if kind == rung_core::asm::AsmKind::Sass
                && rung_core::stages::build::sass::pending(&self.state_dir, &v.id)
            {
                "its cubin is being disassembled, after its build"
            } else if self.running.contains_key(&v.id) {
                "it is being built"
            } else if kind == rung_core::asm::AsmKind::Sass && v.path.extension().is_some_and(|e| e == "py") {
                "a Triton version's SASS comes from its build with the CUDA toolchain (`rung setup`), or from its run on a GPU"
            } else {
                "it gets one when it builds: save it, or run `rung check` on it"
            };
            return Err(format!("{} has no {} yet: {when}", v.id, kind.label()));
        };
        let left = match self.against_version(&self.asm.against) {
            Ok((id, _)) => Listing::stat(&self.state_dir, &id, kind),
            Err(_) => None,
        };
        Ok(DiffKey { kind, registers: self.asm.registers, left, right })
    }
}
