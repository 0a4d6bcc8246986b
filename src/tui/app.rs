//! The TUI's state and the one function that changes it. Drawing reads this state and never
//! writes it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use crossterm::event::{KeyCode, KeyEvent, MouseEventKind};
use rung::diag::Diagnostic;
use rung::report::{Stage, StageDetail, StageResult, Verdict};
use rung::store::{Status, Store};
use rung::watch::{EventKind, JobKind, JobState};
use rung::workspace::{VersionFile, Workspace};

use super::action::{Action, Keymap};
use super::event::Event;
use super::panes::Pane;

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
    pub reason: Option<String>,
    pub verdicts: BTreeMap<Stage, Verdict>,
    /// The first benchmark size's headline median, µs.
    pub median_us: Option<f64>,
    /// Over the best approved version, timed interleaved.
    pub speedup: Option<f64>,
    pub roofline_percent: Option<f64>,
    pub diagnostics: Vec<DiagnosticView>,
    /// `stage: summary` of each rung that failed or broke, for when it left no diagnostic.
    pub failures: Vec<String>,
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
}

pub struct App {
    pub root: PathBuf,
    /// `.rung/`: the history and the logs.
    pub state_dir: PathBuf,
    pub problem: String,
    store: Store,
    pub keymap: Keymap,
    pub versions: Vec<VersionView>,
    /// Problems with the workspace itself (rung.toml, duplicate ids).
    pub workspace_diagnostics: Vec<Diagnostic>,
    pub pane: Pane,
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
    pub color: bool,
    /// Advanced by ticks; picks the spinner's frame.
    pub frame: usize,
    pub quit: bool,
}

impl App {
    pub fn open(root: &Path, color: bool) -> Result<App> {
        let ws = Workspace::open(root)?;
        let store = Store::open(&ws.state_dir())
            .with_context(|| format!("opening the history in {}", ws.state_dir().display()))?;
        let mut app = App {
            root: ws.root.clone(),
            state_dir: ws.state_dir(),
            problem: String::new(),
            store,
            keymap: Keymap::default(),
            versions: vec![],
            workspace_diagnostics: vec![],
            pane: Pane::ALL[0],
            selected: 0,
            diagnostic_selected: 0,
            mode: Mode::Normal,
            running: BTreeMap::new(),
            jump: None,
            edit: None,
            message: None,
            color,
            frame: 0,
            quit: false,
        };
        app.load(&ws)?;
        Ok(app)
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
        self.selected = selected_id
            .and_then(|id| self.versions.iter().position(|v| v.id == id))
            .unwrap_or(self.selected)
            .min(self.versions.len().saturating_sub(1));
        self.clamp_diagnostic();
        Ok(())
    }

    pub fn selected_version(&self) -> Option<&VersionView> {
        self.versions.get(self.selected)
    }

    /// Applies one event. Returns whether the screen changed.
    pub fn update(&mut self, event: Event) -> bool {
        match event {
            Event::Key(key) => self.key(key),
            Event::Mouse(m) => match m.kind {
                MouseEventKind::ScrollDown => self.act(Action::Down),
                MouseEventKind::ScrollUp => self.act(Action::Up),
                _ => false,
            },
            Event::Resize => true,
            Event::Tick => {
                self.frame = self.frame.wrapping_add(1);
                !self.running.is_empty()
            }
            Event::Watch(e) => {
                match e.kind {
                    EventKind::Job { version, job, state, .. } => match state {
                        JobState::Queued | JobState::Running => {
                            self.running.insert(version, job);
                        }
                        JobState::Done if job == JobKind::Build => {}
                        JobState::Done | JobState::Failed | JobState::Cancelled => {
                            self.running.remove(&version);
                            self.refresh();
                        }
                    },
                    EventKind::Done { version, .. } => {
                        self.running.remove(&version);
                        self.refresh();
                    }
                    EventKind::Workspace { diagnostics } => self.workspace_diagnostics = diagnostics,
                    EventKind::Started { .. } | EventKind::Changed { .. } | EventKind::Removed { .. } => self.refresh(),
                }
                true
            }
            Event::WatchFailed(e) => {
                self.message = Some(format!("the scheduler stopped: {e}"));
                true
            }
        }
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
            Mode::Help => {
                // Any key closes help; the one that quits also quits.
                self.mode = Mode::Normal;
                if self.keymap.action(&key) == Some(Action::Quit) {
                    self.quit = true;
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
            Action::NextPane | Action::PrevPane => {
                let i = Pane::ALL.iter().position(|p| *p == self.pane).unwrap_or(0);
                let n = Pane::ALL.len();
                self.pane = Pane::ALL[if action == Action::NextPane { (i + 1) % n } else { (i + n - 1) % n }];
            }
            Action::Up | Action::Down => {
                let down = action == Action::Down;
                match self.pane {
                    Pane::Versions => {
                        self.selected = step(self.selected, self.versions.len(), down);
                        self.diagnostic_selected = 0;
                    }
                    Pane::Diagnostics => {
                        let n = self.selected_version().map_or(0, |v| v.diagnostics.len());
                        self.diagnostic_selected = step(self.diagnostic_selected, n, down);
                    }
                }
            }
            Action::Jump => {
                let target = self.selected_version().and_then(|v| v.diagnostics.get(self.diagnostic_selected)).cloned();
                match (self.pane, target) {
                    (Pane::Diagnostics, Some(d)) => {
                        let d = d.diagnostic;
                        self.message = Some(format!("jump: {}", d.location()));
                        self.jump = Some(Jump { file: d.file, line: d.line, column: d.column });
                    }
                    (Pane::Versions, Some(_)) => self.pane = Pane::Diagnostics,
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
        self.message = Some(match done {
            Ok(()) => format!("{id} {}", status.as_str()),
            Err(e) => format!("{id} not {}: {e:#}", status.as_str()),
        });
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
        reason: row.and_then(|r| r.reason),
        verdicts: BTreeMap::new(),
        median_us: None,
        speedup: None,
        roofline_percent: None,
        diagnostics: vec![],
        failures: vec![],
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
                view.median_us = b.sizes.first().map(|s| s.headline.median * 1e3);
                view.speedup = b.speedups.iter().find(|s| s.role == "best approved").map(|s| s.speedup);
            }
            StageDetail::Roofline(r) => view.roofline_percent = r.percent_of_ceiling,
            _ => {}
        }
        view.diagnostics.extend(result.diagnostics.into_iter().map(|d| {
            let (excerpt, caret) = excerpt(root, &d).unzip();
            DiagnosticView { excerpt, caret: caret.flatten(), diagnostic: d }
        }));
    }
    Ok(view)
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
