//! What a key, a mouse event or an action does to the state: focus, selection, review,
//! the baseline, the log of watch events.

use anyhow::Result;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use rung_core::store::Status;
use rung_core::watch::{EventKind, JobKind, JobState, WatchEvent};
use rung_core::workspace::Workspace;

use crate::action::Action;
use crate::chat::ChatOutcome;
use crate::layout::Pane;
use crate::theme::Role;

use super::*;

impl App {
    pub(super) fn key(&mut self, key: KeyEvent) -> bool {
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
            Mode::ConfirmApprove { version, .. } => {
                let version = version.clone();
                match key.code {
                    KeyCode::Char('y' | 'Y') => {
                        self.mode = Mode::Normal;
                        self.review(&version, Status::Approved, None);
                    }
                    KeyCode::Char('n' | 'N') | KeyCode::Esc => {
                        self.mode = Mode::Normal;
                        self.message = Some(format!("{version} not approved"));
                    }
                    _ => return false,
                }
                true
            }
            Mode::Trace { zoom, offset, top } => {
                let step = 250 / *zoom;
                match (key.code, self.keymap.action(&key)) {
                    (KeyCode::Esc, _) | (_, Some(Action::Quit | Action::Trace)) => {
                        self.mode = Mode::Normal;
                        self.trace = None;
                    }
                    (KeyCode::Char('+' | '='), _) => *zoom = (*zoom * 2).min(64),
                    (KeyCode::Char('-'), _) => {
                        *zoom = (*zoom / 2).max(1);
                        *offset = (*offset).min(1000 - 1000 / *zoom);
                    }
                    (_, Some(Action::Left)) => *offset = offset.saturating_sub(step),
                    (_, Some(Action::Right)) => *offset = (*offset + step).min(1000 - 1000 / *zoom),
                    (_, Some(Action::Down)) => *top += 1,
                    (_, Some(Action::Up)) => *top = top.saturating_sub(1),
                    _ => return false,
                }
                true
            }
            Mode::Source { at, top, .. } => {
                let page = usize::from(self.area.height.saturating_sub(6)).max(1);
                match (key.code, self.keymap.action(&key)) {
                    (KeyCode::Esc | KeyCode::Enter, _) | (_, Some(Action::Quit)) => self.mode = Mode::Normal,
                    (_, Some(Action::Down)) => *top += 1,
                    (_, Some(Action::Up)) => *top = top.saturating_sub(1),
                    (_, Some(Action::PageDown)) => *top += page,
                    (_, Some(Action::PageUp)) => *top = top.saturating_sub(page),
                    (_, Some(Action::Edit)) => {
                        let target = at.clone();
                        self.mode = Mode::Normal;
                        self.message = Some(format!("editing {}:{}", target.file.display(), target.line));
                        self.edit = Some(target);
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
                        self.chat.focus = rung_agent::propose::parent_for(&self.root, selected.as_deref());
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
            Action::Trace => {
                let Some(id) = self.selected_version().map(|v| v.id.clone()) else { return false };
                let hash = rung_core::workspace::Workspace::open(&self.root)
                    .ok()
                    .and_then(|ws| ws.version(&id).and_then(|v| ws.source_hash(v)));
                match crate::trace_view::TraceView::load(&self.root, &self.state_dir, &id, hash.as_deref()) {
                    Ok(view) => {
                        self.trace = Some(view);
                        self.mode = Mode::Trace { zoom: 1, offset: 0, top: 0 };
                    }
                    Err(why) => self.message = Some(why),
                }
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
                    rung_core::asm::AsmKind::Sass => rung_core::asm::AsmKind::Ptx,
                    rung_core::asm::AsmKind::Ptx => rung_core::asm::AsmKind::Sass,
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
                        let at = Jump { file: d.file.clone(), line: d.line.max(1), column: d.column };
                        // The diagnostic's line a third of the way down the view.
                        let above = usize::from(self.area.height.saturating_sub(6)) / 3;
                        let top = (at.line as usize).saturating_sub(1 + above);
                        self.message = None;
                        self.jump = Some(at.clone());
                        self.mode = Mode::Source { at, message: format!("{}: {}", d.severity, d.message), top };
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
            Action::Approve => match self.selected_version() {
                // Approving what was never checked (no GPU, or a check that failed) is allowed,
                // after a question.
                Some(v) => match unchecked(v) {
                    Some(why) => self.mode = Mode::ConfirmApprove { version: v.id.clone(), why },
                    None => {
                        let id = v.id.clone();
                        self.review(&id, Status::Approved, None)
                    }
                },
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
    pub(super) fn review(&mut self, id: &str, status: Status, reason: Option<&str>) {
        let done = (|| -> Result<()> {
            let ws = Workspace::open(&self.root)?;
            match rung_core::service::review(&ws, &mut self.store, id, status, reason) {
                Err(rung_core::service::VersionError::NoVersion { .. }) => {
                    anyhow::bail!("no version `{id}` in the workspace any more")
                }
                r => r?,
            };
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
    pub(super) fn pin_baseline(&mut self, id: &str) {
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
    pub(super) fn log_event(&mut self, e: &WatchEvent) {
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
                    // Where the rung's time went, when it says.
                    let phases = match &s.detail {
                        rung_core::model::report::StageDetail::Build(b) => Some(&b.phases),
                        rung_core::model::report::StageDetail::Run(r) => Some(&r.phases),
                        rung_core::model::report::StageDetail::Bench(b) => Some(&b.phases),
                        _ => None,
                    };
                    let longest_first = |p: &std::collections::BTreeMap<String, f64>| {
                        let mut by: Vec<(&String, &f64)> = p.iter().collect();
                        by.sort_by(|a, b| b.1.total_cmp(a.1));
                        by.iter().map(|(k, v)| format!("{k} {v:.2} s")).collect::<Vec<_>>().join(" · ")
                    };
                    if let Some(p) = phases.filter(|p| !p.is_empty()) {
                        self.log(t, Role::Dim, format!("    time: {}", longest_first(p)));
                    }
                    // The first size's series, as the worker spent it.
                    if let rung_core::model::report::StageDetail::Bench(b) = &s.detail
                        && let Some(first) = b.sizes.first().filter(|f| !f.phases.is_empty())
                    {
                        let at = rung_core::spec::size_label(&first.sizes);
                        self.log(t, Role::Dim, format!("    series at {at}: {}", longest_first(&first.phases)));
                    }
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

    pub(super) fn clamp_diagnostic(&mut self) {
        let n = self.selected_version().map_or(0, |v| v.diagnostics.len());
        self.diagnostic_selected = self.diagnostic_selected.min(n.saturating_sub(1));
    }
}

/// Why approving `v` deserves a question: its check did not pass on the file as it is (it did
/// not run here, or failed); `None` when it passed.
fn unchecked(v: &VersionView) -> Option<String> {
    use rung_core::model::report::{Stage, Verdict};
    if v.verdicts.get(&Stage::Check) == Some(&Verdict::Pass) {
        return None;
    }
    let said = |stage: Stage| v.results.get(&stage).map(|r| format!("{}: {}", r.stage, r.summary));
    Some(match (v.verdicts.get(&Stage::Check), v.verdicts.get(&Stage::Run)) {
        (Some(Verdict::Fail | Verdict::Error), _) => said(Stage::Check).unwrap_or_else(|| "its check failed".into()),
        (_, Some(Verdict::Fail | Verdict::Error | Verdict::Skipped)) => {
            said(Stage::Run).unwrap_or_else(|| "it did not run".into())
        }
        _ => "it has not been checked against the reference".into(),
    })
}
