//! Everything a key can do, by name, and the keymap that binds keys to it. The help overlay and
//! the key bar are built from the keymap, so they list exactly what the keys do.

use std::fmt;
use std::str::FromStr;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    Up,
    Down,
    /// A screenful up or down in the focused pane.
    PageUp,
    PageDown,
    NextPane,
    PrevPane,
    /// Enter: in the compile-errors pane, the source at the diagnostic, its line marked.
    Jump,
    /// Open $VISUAL or $EDITOR at the selected diagnostic's line (or the version's file).
    Edit,
    Approve,
    /// Asks for the reason on the bottom line first.
    Reject,
    /// Pins the selected version as the baseline (again: unpins it).
    Baseline,
    /// The focused pane takes the whole screen, or gives it back.
    Zoom,
    /// The assembly pane shows PTX, or SASS.
    AsmKind,
    /// Chooses what the assembly pane compares the selected version with.
    Compare,
    /// The assembly pane's next (previous) run of changes.
    NextHunk,
    PrevHunk,
    /// The assembly pane shows one kernel, the next, ..., then every kernel again.
    NextKernel,
    /// Renames registers by first use before comparing listings, or stops.
    Registers,
    /// The assembly pane's listings scroll sideways, both sides as one (long SASS lines).
    Left,
    Right,
    /// Runs `rung profile` on the selected version: Nsight Compute, memcheck or racecheck.
    Profile,
    Memcheck,
    Racecheck,
    /// Shows the selected version's latest trace (`rung trace`): statistics and a timeline.
    Trace,
    /// Runs any action by name.
    Palette,
    Help,
    /// Gives the terminal back to the shell (Ctrl-Z); `fg` resumes.
    Suspend,
    Quit,
    /// Opens the chat side panel and gives it the keys (Tab gives them back, Esc closes it).
    Chat,
    /// Starts auto mode (propose, climb, judge, repeat until `[agent.auto]`'s target), or stops it.
    Auto,
}

impl Action {
    pub const ALL: [Action; 30] = [
        Action::Up,
        Action::Down,
        Action::PageUp,
        Action::PageDown,
        Action::NextPane,
        Action::PrevPane,
        Action::Jump,
        Action::Edit,
        Action::Approve,
        Action::Reject,
        Action::Baseline,
        Action::Zoom,
        Action::AsmKind,
        Action::Compare,
        Action::NextHunk,
        Action::PrevHunk,
        Action::NextKernel,
        Action::Registers,
        Action::Left,
        Action::Right,
        Action::Profile,
        Action::Memcheck,
        Action::Racecheck,
        Action::Trace,
        Action::Palette,
        Action::Help,
        Action::Suspend,
        Action::Quit,
        Action::Chat,
        Action::Auto,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Action::Up => "up",
            Action::Down => "down",
            Action::PageUp => "page-up",
            Action::PageDown => "page-down",
            Action::NextPane => "next-pane",
            Action::PrevPane => "prev-pane",
            Action::Jump => "jump",
            Action::Edit => "edit",
            Action::Approve => "approve",
            Action::Reject => "reject",
            Action::Baseline => "baseline",
            Action::Zoom => "zoom",
            Action::AsmKind => "ptx-sass",
            Action::Compare => "compare",
            Action::NextHunk => "next-hunk",
            Action::PrevHunk => "prev-hunk",
            Action::NextKernel => "kernel",
            Action::Registers => "registers",
            Action::Left => "left",
            Action::Right => "right",
            Action::Profile => "profile",
            Action::Memcheck => "memcheck",
            Action::Racecheck => "racecheck",
            Action::Trace => "trace",
            Action::Palette => "palette",
            Action::Help => "help",
            Action::Suspend => "suspend",
            Action::Quit => "quit",
            Action::Chat => "chat",
            Action::Auto => "auto",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Action::Up => "previous row",
            Action::Down => "next row",
            Action::PageUp => "a screenful up",
            Action::PageDown => "a screenful down",
            Action::NextPane => "next pane",
            Action::PrevPane => "previous pane",
            Action::Jump => "show the source at the selected diagnostic; edit opens it there",
            Action::Edit => "open $EDITOR at the selected diagnostic's line",
            Action::Approve => "approve the selected version",
            Action::Reject => "reject the selected version, with a reason",
            Action::Baseline => "pin or unpin the selected version as the baseline",
            Action::Zoom => "zoom the focused pane, or unzoom",
            Action::AsmKind => "assembly: switch between PTX and SASS",
            Action::Compare => "assembly: compare with the parent, the best or any version",
            Action::NextHunk => "assembly: next change",
            Action::PrevHunk => "assembly: previous change",
            Action::NextKernel => "assembly: one kernel at a time, then all",
            Action::Registers => "assembly: rename registers before comparing, or not",
            Action::Left => "assembly: scroll the listings left",
            Action::Right => "assembly: scroll the listings right (long lines)",
            Action::Profile => "profile the selected version with Nsight Compute (needs a GPU)",
            Action::Memcheck => "run compute-sanitizer's memcheck on the selected version",
            Action::Racecheck => "run compute-sanitizer's racecheck on the selected version",
            Action::Trace => "show the selected version's trace: its sections timed inside the kernel",
            Action::Palette => "run any action by name",
            Action::Help => "this help",
            Action::Suspend => "suspend to the shell (fg resumes)",
            Action::Quit => "quit",
            Action::Chat => "talk to the agent in the chat side panel",
            Action::Auto => "auto mode: the agent proposes until the target, or stop it",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown action `{0}`; the actions are: {list}", list = Action::ALL.map(Action::name).join(", "))]
pub struct UnknownAction(pub String);

impl FromStr for Action {
    type Err = UnknownAction;

    fn from_str(s: &str) -> Result<Action, UnknownAction> {
        Action::ALL.into_iter().find(|a| a.name() == s).ok_or_else(|| UnknownAction(s.to_string()))
    }
}

/// Keys bound to actions, in the order help lists them.
#[derive(Debug, Clone)]
pub struct Keymap {
    bindings: Vec<(KeyEvent, Action)>,
}

impl Keymap {
    pub fn empty() -> Keymap {
        Keymap { bindings: vec![] }
    }

    /// Each action's keys, in this order.
    pub fn from_bindings(bindings: impl IntoIterator<Item = (Action, Vec<KeyEvent>)>) -> Keymap {
        Keymap { bindings: bindings.into_iter().flat_map(|(a, keys)| keys.into_iter().map(move |k| (k, a))).collect() }
    }

    /// Every action that has a key, with its keys.
    pub fn by_action_keys(&self) -> Vec<(Action, Vec<KeyEvent>)> {
        let mut out: Vec<(Action, Vec<KeyEvent>)> = Vec::new();
        for (k, a) in &self.bindings {
            match out.iter_mut().find(|(b, _)| b == a) {
                Some((_, keys)) => keys.push(*k),
                None => out.push((*a, vec![*k])),
            }
        }
        out
    }

    pub fn action(&self, key: &KeyEvent) -> Option<Action> {
        let key = normalise(key);
        self.bindings.iter().find(|(k, _)| normalise(k) == key).map(|(_, a)| *a)
    }

    /// Every action that has a key, with its keys' names, in binding order.
    pub fn by_action(&self) -> Vec<(Action, Vec<String>)> {
        let mut out: Vec<(Action, Vec<String>)> = Vec::new();
        for (k, a) in &self.bindings {
            match out.iter_mut().find(|(b, _)| b == a) {
                Some((_, keys)) => keys.push(key_name(k)),
                None => out.push((*a, vec![key_name(k)])),
            }
        }
        out
    }
}

/// Terminals differ in whether a shifted character (`?`) carries SHIFT; the character says it.
pub fn normalise(key: &KeyEvent) -> (KeyCode, KeyModifiers) {
    match key.code {
        KeyCode::Char(c) => (KeyCode::Char(c), key.modifiers - KeyModifiers::SHIFT),
        KeyCode::BackTab => (KeyCode::BackTab, KeyModifiers::NONE),
        code => (code, key.modifiers),
    }
}

pub fn key_name(key: &KeyEvent) -> String {
    let base = match key.code {
        KeyCode::Char(' ') => "Space".to_string(),
        KeyCode::Char(c) => c.to_string(),
        KeyCode::Up => "↑".into(),
        KeyCode::Down => "↓".into(),
        KeyCode::Left => "←".into(),
        KeyCode::Right => "→".into(),
        KeyCode::BackTab => return "Shift-Tab".into(),
        KeyCode::Esc => "Esc".into(),
        KeyCode::PageUp => "PageUp".into(),
        KeyCode::PageDown => "PageDown".into(),
        other => other.to_string(),
    };
    let mut name = base;
    if key.modifiers.contains(KeyModifiers::SHIFT) && !matches!(key.code, KeyCode::Char(_)) {
        name = format!("Shift-{name}");
    }
    if key.modifiers.contains(KeyModifiers::ALT) {
        name = format!("Alt-{name}");
    }
    if key.modifiers.contains(KeyModifiers::CONTROL) { format!("Ctrl-{name}") } else { name }
}
