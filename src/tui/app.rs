//! The TUI's state and the one function that changes it. Drawing reads this state and never
//! writes it.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Sender;

use anyhow::{Context, Result};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseButton, MouseEventKind};
use ratatui::layout::{Position, Rect};
use rung::diag::Diagnostic;
use rung::model::report::{Stage, StageDetail, StageResult, Verdict};
use rung::stages::bench::{ROLE_REFERENCE, SizeBench};
use rung::store::{Status, Store};
use rung::watch::{EventKind, JobKind, JobState, WatchEvent};
use rung::workspace::{VersionFile, Workspace};

use super::action::{Action, Keymap};
use super::asm_view::{Against, AsmView, DiffKey, Listing, Need};
use super::chat::ChatOutcome;
use super::chat_session::ChatSession;
use super::event::Event;
use super::layout::{self, Arrangement, Pane};
use super::theme::{Role, Theme};

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
    /// The `rung profile` running in the background, if one is: (version, tool).
    pub profiling: Option<(String, String)>,
    /// The loop's channel, for work done on other threads (the assembly diffs); without one
    /// (tests), that work is done at once on this thread.
    pub events: Option<Sender<Event>>,
    /// Clicks select and the wheel scrolls.
    pub mouse: bool,
    pub versions: Vec<VersionView>,
    /// Per GPU, in the order first benched.
    pub timing: Vec<GpuTiming>,
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
        let ws = Workspace::open(root)?;
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
            profiling: None,
            select_when_listed: None,
            events: None,
            mouse: true,
            versions: vec![],
            timing: vec![],
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
        self.log(rung::store::now_ms(), role, text.clone());
        self.message = Some(text);
    }

    /// Reads the workspace and the history again.
    pub fn refresh(&mut self) {
        let loaded = Workspace::open(&self.root).map_err(anyhow::Error::from).and_then(|ws| self.load(&ws));
        if let Err(e) = loaded {
            self.message = Some(format!("{e:#}"));
        }
    }

    fn load(&mut self, ws: &Workspace) -> Result<()> {
        let selected_id = self.selected_version().map(|v| v.id.clone());
        self.problem = ws.spec.as_ref().map_or_else(|| format!("{:?} problem", ws.format), |s| s.name.clone());
        self.workspace_diagnostics = ws.diagnostics.clone();
        self.versions = ws.versions.iter().map(|v| version_view(ws, &self.store, v)).collect::<Result<Vec<_>>>()?;
        self.timing = timing(ws, &self.store, &self.versions)?;
        let listed = |id: &String| self.versions.iter().position(|v| &v.id == id);
        let wanted = self.select_when_listed.as_ref().and_then(listed);
        if wanted.is_some() {
            self.select_when_listed = None;
        }
        self.selected =
            selected_id.as_ref().and_then(listed).unwrap_or(self.selected).min(self.versions.len().saturating_sub(1));
        if let Some(row) = wanted {
            self.select(row);
        }
        self.clamp_diagnostic();
        Ok(())
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
                !self.running.is_empty()
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
                            self.refresh();
                        }
                    },
                    EventKind::Done { version, report, .. } => {
                        self.running.remove(&version);
                        self.chat.report(&report);
                        self.refresh();
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
                let now = rung::store::now_ms();
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
                match self.chat.finish(*end) {
                    Some(Ok(p)) => self.proposed(&p.id, &p.path, p.parent.as_deref()),
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
                self.log(rung::store::now_ms(), Role::Accent, format!("auto: {line}"));
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
                    if o.status.success() || o.status.code() == Some(rung::exit::CHECK_FAILED) {
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
                    rung::stages::bench::fastest(&benched)
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
            let when = if self.running.contains_key(&v.id) {
                "it is being built"
            } else if kind == rung::asm::AsmKind::Sass && v.path.extension().is_some_and(|e| e == "py") {
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

    fn key(&mut self, key: KeyEvent) -> bool {
        match &mut self.mode {
            Mode::Reject { version, reason } => {
                match key.code {
                    KeyCode::Esc => {
                        self.message = Some(format!("{version} not rejected"));
                        self.mode = Mode::Normal;
                    }
                    KeyCode::Enter => {
                        let (version, reason) = (version.clone(), reason.trim().to_string());
                        self.mode = Mode::Normal;
                        if reason.is_empty() {
                            self.message = Some(format!("{version} not rejected: a rejection needs a reason"));
                        } else {
                            self.review(&version, Status::Rejected, Some(&reason));
                        }
                    }
                    KeyCode::Backspace => {
                        reason.pop();
                    }
                    KeyCode::Char(c) => reason.push(c),
                    _ => return false,
                }
                true
            }
            Mode::Palette { input, selected } => {
                let matches = palette_matches(input);
                match key.code {
                    KeyCode::Esc => self.mode = Mode::Normal,
                    KeyCode::Enter => {
                        let chosen = matches.get(*selected).copied();
                        let typed = input.trim().to_string();
                        self.mode = Mode::Normal;
                        match chosen {
                            Some(a) => {
                                self.message = None;
                                self.act(a);
                            }
                            None => self.message = Some(format!("no action matches `{typed}`")),
                        }
                    }
                    KeyCode::Tab => {
                        if let Some(a) = matches.get(*selected) {
                            *input = a.name().to_string();
                            *selected = 0;
                        }
                    }
                    KeyCode::Up => *selected = selected.saturating_sub(1),
                    KeyCode::Down => *selected = (*selected + 1).min(matches.len().saturating_sub(1)),
                    KeyCode::Backspace => {
                        input.pop();
                        *selected = 0;
                    }
                    KeyCode::Char(c) => {
                        input.push(c);
                        *selected = 0;
                    }
                    _ => return false,
                }
                true
            }
            Mode::Compare { selected } => {
                let selected = *selected;
                let choices = self.compare_choices();
                match key.code {
                    KeyCode::Esc => self.mode = Mode::Normal,
                    KeyCode::Up | KeyCode::Char('k') => {
                        self.mode = Mode::Compare { selected: selected.saturating_sub(1) };
                    }
                    KeyCode::Down | KeyCode::Char('j') => {
                        self.mode = Mode::Compare { selected: (selected + 1).min(choices.len().saturating_sub(1)) };
                    }
                    KeyCode::Enter => {
                        let chosen = choices.get(selected).cloned();
                        self.mode = Mode::Normal;
                        if let Some(a) = chosen {
                            self.message = Some(format!("comparing with {}", a.name()));
                            self.asm.against = a;
                            self.focus(Pane::Assembly);
                        }
                    }
                    _ => return false,
                }
                true
            }
            Mode::Help => {
                // Any key closes help; the one that quits also quits.
                self.mode = Mode::Normal;
                if self.keymap.action(&key) == Some(Action::Quit) {
                    self.quit = true;
                }
                true
            }
            // The chat's keys are its own (letters are text), except Ctrl keys the keymap binds
            // (Ctrl-C, Ctrl-Z); Tab gives the keys back, Esc closes the chat.
            Mode::Normal
                if self.pane == Pane::Chat
                    && !(key.modifiers.contains(KeyModifiers::CONTROL) && self.keymap.action(&key).is_some()) =>
            {
                match self.chat.panel.handle_key(key) {
                    ChatOutcome::Consumed => {}
                    ChatOutcome::Send(text) => {
                        // The selection, unless it was rejected: then what it was made from.
                        let selected = self.selected_version().map(|v| v.id.clone());
                        self.chat.focus = rung::agent::propose::parent_for(&self.root, selected.as_deref());
                        self.chat.send(text)
                    }
                    ChatOutcome::Command(c) => self.chat.command(c),
                    ChatOutcome::Ignored => match key.code {
                        KeyCode::Esc => {
                            self.chat.shown = false;
                            self.focus(self.before_chat);
                        }
                        KeyCode::Tab | KeyCode::BackTab => self.focus(self.before_chat),
                        _ => return false,
                    },
                }
                true
            }
            Mode::Normal => {
                let Some(a) = self.keymap.action(&key) else { return false };
                self.message = None;
                self.act(a);
                true
            }
        }
    }

    pub fn act(&mut self, action: Action) -> bool {
        match action {
            Action::Quit => self.quit = true,
            Action::Help => self.mode = Mode::Help,
            Action::Profile | Action::Memcheck | Action::Racecheck => {
                let Some(id) = self.selected_version().map(|v| v.id.clone()) else { return false };
                self.focus(Pane::Profile);
                let flag = match action {
                    Action::Memcheck => Some("--memcheck"),
                    Action::Racecheck => Some("--racecheck"),
                    _ => None,
                };
                self.start_profile(&id, flag);
            }
            Action::Chat if self.pane == Pane::Chat => self.focus(self.before_chat),
            Action::Chat => self.focus(Pane::Chat),
            Action::Auto => match &self.chat.auto {
                Some(a) => {
                    a.cancel.cancel();
                    self.say(Role::Accent, "auto mode stops after the step in progress");
                }
                None => {
                    if !self.chat.shown || self.pane != Pane::Chat {
                        self.focus(Pane::Chat);
                    }
                    let selected = self.selected_version().map(|v| v.id.clone());
                    self.chat.start_auto(selected.as_deref());
                    if self.chat.auto.is_some() {
                        self.say(Role::Accent, "auto mode started: A stops it");
                    }
                }
            },
            Action::NextPane | Action::PrevPane if self.pane == Pane::Chat => self.focus(self.before_chat),
            Action::NextPane | Action::PrevPane => {
                let i = Pane::ALL.iter().position(|p| *p == self.pane).unwrap_or(0);
                let n = Pane::ALL.len();
                self.focus(Pane::ALL[if action == Action::NextPane { (i + 1) % n } else { (i + n - 1) % n }]);
            }
            Action::Up | Action::Down | Action::PageUp | Action::PageDown => {
                let down = matches!(action, Action::Down | Action::PageDown);
                let page = matches!(action, Action::PageUp | Action::PageDown);
                let by = if page { usize::from(self.area.height / 2).max(1) } else { 1 };
                match self.pane {
                    Pane::Versions => {
                        let mut i = self.selected;
                        for _ in 0..by {
                            i = step(i, self.versions.len(), down);
                        }
                        self.select(i);
                    }
                    Pane::Diagnostics => {
                        let n = self.selected_version().map_or(0, |v| v.diagnostics.len());
                        for _ in 0..by {
                            self.diagnostic_selected = step(self.diagnostic_selected, n, down);
                        }
                    }
                    // Its rows outnumber a u16, and both sides scroll as one.
                    Pane::Assembly => self.asm.scroll_by(down, by),
                    Pane::Chat => {
                        let code = if down { KeyCode::PageDown } else { KeyCode::PageUp };
                        self.chat.panel.handle_key(KeyEvent::new(code, KeyModifiers::NONE));
                    }
                    pane => {
                        // The log counts back from its end, so down (newer) is towards zero.
                        let back = pane == Pane::Log;
                        let s = self.scroll.entry(pane).or_default();
                        let by = by as u16;
                        *s = if down != back { s.saturating_add(by) } else { s.saturating_sub(by) };
                        if back {
                            *s = (*s).min(self.log.len().saturating_sub(1) as u16);
                        }
                    }
                }
            }
            Action::Zoom => self.zoomed = !self.zoomed,
            Action::AsmKind => {
                self.asm.kind = match self.asm.kind {
                    rung::asm::AsmKind::Sass => rung::asm::AsmKind::Ptx,
                    rung::asm::AsmKind::Ptx => rung::asm::AsmKind::Sass,
                };
                self.focus(Pane::Assembly);
            }
            Action::Compare => {
                let current = self.compare_choices().iter().position(|a| *a == self.asm.against).unwrap_or(0);
                self.focus(Pane::Assembly);
                self.mode = Mode::Compare { selected: current };
            }
            Action::NextHunk | Action::PrevHunk => {
                self.focus(Pane::Assembly);
                if !self.asm.hunk(action == Action::NextHunk) {
                    self.message = Some(if self.asm.hunks.is_empty() {
                        "no changes to jump to".into()
                    } else if action == Action::NextHunk {
                        "no change below: this is the last".into()
                    } else {
                        "no change above: this is the first".into()
                    });
                }
            }
            Action::NextKernel => {
                self.focus(Pane::Assembly);
                self.asm.next_kernel();
                self.message = Some(match &self.asm.kernel {
                    Some(k) => format!("kernel {k} only"),
                    None => "every kernel".into(),
                });
            }
            Action::Left | Action::Right => {
                if self.pane != Pane::Assembly {
                    return false;
                }
                let longest = self.asm.longest_text();
                self.asm.column = if action == Action::Right {
                    (self.asm.column + COLUMN_STEP).min(longest.saturating_sub(COLUMN_STEP))
                } else {
                    self.asm.column.saturating_sub(COLUMN_STEP)
                };
            }
            Action::Registers => {
                self.focus(Pane::Assembly);
                self.asm.registers = !self.asm.registers;
                self.message = Some(if self.asm.registers {
                    "registers renamed by first use before comparing".into()
                } else {
                    "registers compared as allocated".into()
                });
            }
            Action::Palette => self.mode = Mode::Palette { input: String::new(), selected: 0 },
            Action::Suspend => self.suspend = true,
            Action::Baseline => match self.selected_version().map(|v| v.id.clone()) {
                Some(id) => self.pin_baseline(&id),
                None => return false,
            },
            Action::Jump => {
                let target = self.selected_version().and_then(|v| v.diagnostics.get(self.diagnostic_selected)).cloned();
                match (self.pane, target) {
                    (Pane::Diagnostics, Some(d)) => {
                        let d = d.diagnostic;
                        self.message = Some(format!("jump: {}", d.location()));
                        self.jump = Some(Jump { file: d.file, line: d.line, column: d.column });
                    }
                    (Pane::Versions, Some(_)) => self.focus(Pane::Diagnostics),
                    _ => return false,
                }
            }
            Action::Edit => {
                let version = self.selected_version();
                let diagnostic = version.and_then(|v| v.diagnostics.get(self.diagnostic_selected));
                let target = match (self.pane, diagnostic, version) {
                    (Pane::Diagnostics, Some(d), _) => {
                        let d = &d.diagnostic;
                        Jump { file: d.file.clone(), line: d.line.max(1), column: d.column.max(1) }
                    }
                    (_, _, Some(v)) => Jump { file: v.path.clone(), line: 1, column: 1 },
                    _ => return false,
                };
                self.message = Some(format!("editing {}:{}", target.file.display(), target.line));
                self.edit = Some(target);
            }
            Action::Approve => match self.selected_version().map(|v| v.id.clone()) {
                Some(id) => self.review(&id, Status::Approved, None),
                None => return false,
            },
            Action::Reject => match self.selected_version().map(|v| v.id.clone()) {
                Some(version) => self.mode = Mode::Reject { version, reason: String::new() },
                None => return false,
            },
        }
        true
    }

    /// Sets a version's status in the history (adding the version to it first when it was never
    /// checked), then reloads.
    fn review(&mut self, id: &str, status: Status, reason: Option<&str>) {
        let done = (|| -> Result<()> {
            let ws = Workspace::open(&self.root)?;
            let v = ws.version(id).with_context(|| format!("no version `{id}` in the workspace any more"))?;
            let hash = ws.source_hash(v).with_context(|| format!("reading {}", v.path.display()))?;
            self.store.review(v, &hash, status, reason)?;
            self.load(&ws)
        })();
        match done {
            Ok(()) => self.say(Role::Pass, format!("{id} {}", status.as_str())),
            Err(e) => self.say(Role::Fail, format!("{id} not {}: {e:#}", status.as_str())),
        }
    }

    /// Focuses a pane; the layout keeps showing the last focused ones. The chat opens when it
    /// is focused (the first time, reading the agent's configuration and the last conversation).
    pub fn focus(&mut self, pane: Pane) {
        if pane == Pane::Chat && self.pane != Pane::Chat {
            self.before_chat = self.pane;
            self.chat.open(self.theme.color);
        }
        self.chat.panel.focused = pane == Pane::Chat;
        self.pane = pane;
        if pane != Pane::Versions && pane != Pane::Chat {
            self.lower = pane;
        }
        if pane.is_detail() {
            self.right = pane;
        }
    }

    pub fn select(&mut self, row: usize) {
        if row != self.selected {
            self.selected = row;
            self.diagnostic_selected = 0;
            self.scroll.remove(&Pane::Correctness);
            self.scroll.remove(&Pane::Profile);
        }
    }

    /// Pins `id` as the baseline in `.rung/baseline`, or unpins it when it is the baseline.
    fn pin_baseline(&mut self, id: &str) {
        let path = self.state_dir.join(BASELINE_FILE);
        let unpin = self.baseline.as_deref() == Some(id);
        let done = if unpin {
            std::fs::remove_file(&path)
                .or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) })
        } else {
            std::fs::write(&path, format!("{id}\n"))
        };
        match done {
            Ok(()) if unpin => {
                self.baseline = None;
                self.say(Role::Baseline, format!("{id} is no longer the baseline"));
            }
            Ok(()) => {
                self.baseline = Some(id.to_string());
                self.say(Role::Baseline, format!("{id} pinned as the baseline (in {})", path.display()));
            }
            Err(e) => self.say(Role::Fail, format!("cannot write {}: {e}", path.display())),
        }
    }

    /// The scheduler's events, one line each; a finished version's rungs one line each below.
    fn log_event(&mut self, e: &WatchEvent) {
        let t = e.unix_ms;
        match &e.kind {
            EventKind::Started { versions, .. } => {
                self.log(t, Role::Accent, format!("watching {} versions", versions.len()))
            }
            EventKind::Changed { paths, versions, all } => {
                let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                let what = if *all { "every version".to_string() } else { versions.join(", ") };
                self.log(t, Role::Dim, format!("changed {}: re-running {what}", paths.join(", ")));
            }
            EventKind::Job { version, job, state, why, .. } => {
                let role = match state {
                    JobState::Failed => Role::Fail,
                    JobState::Cancelled => Role::Warning,
                    _ => Role::Dim,
                };
                let job = match job {
                    JobKind::Build => "build",
                    JobKind::Gpu => "run/check/bench",
                };
                let state = format!("{state:?}").to_lowercase();
                let why = why.as_ref().map(|w| format!(": {w}")).unwrap_or_default();
                self.log(t, role, format!("{version} {job} {state}{why}"));
            }
            EventKind::Done { version, report, .. } => {
                self.log(t, verdict_role(report.verdict), format!("{version} done: {}", report.verdict.name()));
                for s in &report.stages {
                    self.log(t, verdict_role(s.verdict), format!("  {} {}: {}", s.stage, s.verdict.name(), s.summary));
                }
            }
            EventKind::Removed { version } => self.log(t, Role::Warning, format!("{version} removed")),
            EventKind::Workspace { diagnostics } => {
                for d in diagnostics {
                    self.log(t, Role::Fail, format!("{}: {}", d.location(), d.message));
                }
            }
        }
    }

    fn clamp_diagnostic(&mut self) {
        let n = self.selected_version().map_or(0, |v| v.diagnostics.len());
        self.diagnostic_selected = self.diagnostic_selected.min(n.saturating_sub(1));
    }
}

fn step(i: usize, n: usize, down: bool) -> usize {
    if n == 0 {
        0
    } else if down {
        (i + 1).min(n - 1)
    } else {
        i.saturating_sub(1)
    }
}

fn version_view(ws: &Workspace, store: &Store, v: &VersionFile) -> Result<VersionView> {
    let root = ws.root.as_path();
    let row = store.version(&v.id)?;
    // Only results of the file as it is now, as on the text status screen.
    let current = ws.source_hash(v);
    let mut results = store.latest_results(&v.id)?;
    results.retain(|r| current.as_ref() == Some(&r.source_hash));
    let mut view = VersionView {
        id: v.id.clone(),
        name: display_name(v),
        path: v.path.clone(),
        status: row.as_ref().map(|r| r.status),
        parent: row.as_ref().and_then(|r| r.parent.clone()),
        reason: row.and_then(|r| r.reason),
        verdicts: BTreeMap::new(),
        bench: None,
        speedup: None,
        roofline_percent: None,
        diagnostics: vec![],
        failures: vec![],
        results: BTreeMap::new(),
    };
    for r in &results {
        let Ok(stage) = serde_json::from_value::<Stage>(serde_json::Value::String(r.stage.clone())) else { continue };
        if let Some(verdict) = Verdict::parse(&r.verdict) {
            view.verdicts.insert(stage, verdict);
        }
        // A payload from an older layout still gives its verdict.
        let Ok(result) = serde_json::from_value::<StageResult>(r.payload.clone()) else { continue };
        if matches!(result.verdict, Verdict::Fail | Verdict::Error) {
            view.failures.push(format!("{}: {}", result.stage, result.summary));
        }
        match &result.detail {
            StageDetail::Bench(b) => {
                view.bench = b.sizes.first().cloned();
                view.speedup = b.speedups.iter().find(|s| s.role == "best approved").map(|s| s.speedup);
            }
            StageDetail::Roofline(r) => view.roofline_percent = r.percent_of_ceiling,
            _ => {}
        }
        view.diagnostics.extend(result.diagnostics.iter().cloned().map(|d| {
            let (excerpt, caret) = excerpt(root, &d).unzip();
            DiagnosticView { excerpt, caret: caret.flatten(), diagnostic: d }
        }));
        view.results.insert(stage, result);
    }
    Ok(view)
}

pub fn verdict_role(v: Verdict) -> Role {
    match v {
        Verdict::Pass => Role::Pass,
        Verdict::Fail => Role::Fail,
        Verdict::Error => Role::Error,
        Verdict::Skipped => Role::Skipped,
    }
}

/// Every version's newest passing bench per GPU, with the reference's time and the roofline's
/// floor on that GPU. This is history: a version edited since keeps its old point, marked.
fn timing(ws: &Workspace, store: &Store, versions: &[VersionView]) -> Result<Vec<GpuTiming>> {
    let mut gpus: Vec<GpuTiming> = Vec::new();
    // Oldest first, so GPUs keep the order they were first benched in and newer rows win.
    let mut rows = store.stage_history(Stage::Bench.name(), HISTORY_ROWS)?;
    rows.reverse();
    for row in rows.iter().filter(|r| r.verdict == Verdict::Pass.name()) {
        let Some(ordinal) = versions.iter().position(|v| v.id == row.version) else { continue };
        let Ok(result) = serde_json::from_value::<StageResult>(row.payload.clone()) else { continue };
        let StageDetail::Bench(b) = result.detail else { continue };
        let Some(first) = b.sizes.first() else { continue };
        let key = if b.uuid.is_empty() { &b.gpu } else { &b.uuid };
        let gpu = match gpus.iter().position(|g| (if g.uuid.is_empty() { &g.gpu } else { &g.uuid }) == key) {
            Some(i) => &mut gpus[i],
            None => {
                gpus.push(GpuTiming { gpu: b.gpu.clone(), uuid: b.uuid.clone(), ..Default::default() });
                gpus.last_mut().expect("just pushed")
            }
        };
        let current = ws.version(&row.version).and_then(|v| ws.source_hash(v)).as_ref() == Some(&row.source_hash);
        let point = TimingPoint {
            version: row.version.clone(),
            ordinal,
            median_us: 0.0,
            min_us: 0.0,
            max_us: 0.0,
            current,
            bench: first.clone(),
        };
        gpu.points.retain(|p| p.version != row.version);
        gpu.points.push(point);
        if let Some(r) = b.speedups.iter().find(|s| s.role == ROLE_REFERENCE) {
            gpu.reference_us = Some(r.other.median * 1e3);
        }
    }
    let mut roofs = store.stage_history(Stage::Roofline.name(), HISTORY_ROWS)?;
    roofs.reverse();
    for row in roofs.iter().filter(|r| r.verdict == Verdict::Pass.name()) {
        let Ok(result) = serde_json::from_value::<StageResult>(row.payload.clone()) else { continue };
        let StageDetail::Roofline(r) = result.detail else { continue };
        let (Some(g), Some(pct)) = (
            gpus.iter_mut()
                .find(|g| if g.uuid.is_empty() { g.gpu == r.ceilings.gpu } else { g.uuid == r.ceilings.uuid }),
            r.percent_of_ceiling,
        ) else {
            continue;
        };
        g.roofline_us = Some(r.seconds * pct / 100.0 * 1e6);
    }
    for g in &mut gpus {
        g.points.sort_by_key(|p| p.ordinal);
        one_timer(g);
    }
    Ok(gpus)
}

/// Puts a GPU's points on one timer: when versions were timed by different ones (a CUDA version
/// by CUPTI, a Triton one or an older bench by events), each point becomes its time between
/// events, which every bench records; a device-wide point keeps its headline (its event time
/// misses the work left on another stream).
pub fn one_timer(g: &mut GpuTiming) {
    let benches: Vec<&SizeBench> = g.points.iter().map(|p| &p.bench).collect();
    g.mixed_timers = rung::stages::bench::mixed_timers(&benches);
    let figures: Vec<(f64, f64, f64)> = rung::stages::bench::one_timer(&benches)
        .0
        .into_iter()
        .map(|s| (s.median * 1e3, s.min * 1e3, s.max * 1e3))
        .collect();
    for (p, f) in g.points.iter_mut().zip(figures) {
        (p.median_us, p.min_us, p.max_us) = f;
    }
}

/// The newest result of each stage, kept only when it is of the same source as the newest result
/// of all: after an edit that fails to build, the old source's bench is not this version's.
fn display_name(v: &VersionFile) -> String {
    let stem = v.path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let rest = stem.strip_prefix(&v.id).unwrap_or(&stem).trim_start_matches(['-', '_']);
    if rest.is_empty() { stem.clone() } else { rest.to_string() }
}

/// The diagnostic's line with tabs expanded to four spaces, and the caret's offset in it.
fn excerpt(root: &Path, d: &Diagnostic) -> Option<(String, Option<usize>)> {
    let line = d.line.checked_sub(1)? as usize;
    let text = std::fs::read_to_string(root.join(&d.file)).ok()?;
    let raw = text.lines().nth(line)?;
    Some((raw.replace('\t', "    "), caret_offset(raw, d.column)))
}

/// Display offset of 1-based `column` in `line` once each tab takes four cells.
pub fn caret_offset(line: &str, column: u32) -> Option<usize> {
    let before = column.checked_sub(1)? as usize;
    Some(
        line.chars().take(before).map(|c| if c == '\t' { 4 } else { 1 }).sum::<usize>()
            + before.saturating_sub(line.chars().count()),
    )
}
