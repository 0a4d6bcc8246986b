//! Where each pane goes: the [`Pane`] registry and the layout rules, decided from an
//! [`Arrangement`] (what is focused, zoomed, open), so the app state, the drawing and the mouse
//! hits all ask one place and none of them needs the others.
//!
//! Layouts: on a narrow screen the versions on top and the last focused other pane below, large;
//! from [`WIDE`] columns the versions and compile errors on the left and the last focused detail
//! pane on the right; `z` gives the focused pane the whole body. The chat side panel, once open,
//! is a column on the right of a wide screen (the rest laid out by the same rules in what is
//! left); on a narrow one it takes the lower pane's place while it has the keys.

use ratatui::layout::{Constraint, Layout, Rect};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pane {
    Versions,
    Diagnostics,
    Correctness,
    Timing,
    Assembly,
    Profile,
    Log,
    /// The chat side panel (`app.chat`): not in `ALL`, see above.
    Chat,
}

impl Pane {
    pub const ALL: [Pane; 7] =
        [Pane::Versions, Pane::Diagnostics, Pane::Correctness, Pane::Timing, Pane::Assembly, Pane::Profile, Pane::Log];

    pub fn title(self) -> &'static str {
        match self {
            Pane::Versions => "versions",
            Pane::Diagnostics => "compile errors",
            Pane::Correctness => "correctness",
            Pane::Timing => "timing",
            Pane::Assembly => "assembly",
            Pane::Profile => "profile",
            Pane::Log => "log",
            Pane::Chat => "chat",
        }
    }

    /// A detail pane of the selected version or of the whole history: on a wide screen they take
    /// turns right of the versions and the compile errors.
    pub fn is_detail(self) -> bool {
        !matches!(self, Pane::Versions | Pane::Diagnostics | Pane::Chat)
    }
}

/// What the layout depends on: the focused pane, whether it is zoomed, the pane below the
/// versions (narrow) and right of them (wide), whether the chat is open, how many versions.
#[derive(Debug, Clone, Copy)]
pub struct Arrangement {
    pub pane: Pane,
    pub zoomed: bool,
    pub lower: Pane,
    pub right: Pane,
    pub chat_shown: bool,
    pub versions: usize,
}

/// From this many columns the detail pane sits beside the versions and compile errors.
pub const WIDE: u16 = 140;

/// The screen less its title and bottom lines.
pub fn body(area: Rect) -> Rect {
    let [_, body, _] = Layout::vertical([Constraint::Length(1), Constraint::Min(0), Constraint::Length(1)]).areas(area);
    body
}

/// The chat column's width on a wide screen.
pub fn chat_width(body: u16) -> u16 {
    (body * 2 / 5).clamp(48, 96)
}

/// Where each visible pane goes in `body`.
pub fn panes(app: &Arrangement, body: Rect) -> Vec<(Pane, Rect)> {
    if app.zoomed {
        return vec![(app.pane, body)];
    }
    if app.chat_shown && body.width >= WIDE {
        let [rest, chat] =
            Layout::horizontal([Constraint::Min(0), Constraint::Length(chat_width(body.width))]).areas(body);
        let mut out = workbench(app, rest, app.lower);
        out.push((Pane::Chat, chat));
        return out;
    }
    // Narrow: the chat has the lower pane's place while it has the keys.
    workbench(app, body, if app.pane == Pane::Chat { Pane::Chat } else { app.lower })
}

/// The versions, the compile errors and the detail panes in `body`, `lower` below the versions
/// when it is narrow.
fn workbench(app: &Arrangement, body: Rect, lower: Pane) -> Vec<(Pane, Rect)> {
    // The versions pane is as tall as its rows, up to half (narrow: a third) of its column.
    let wanted = app.versions.max(1) as u16 + 3;
    if body.width >= WIDE {
        let [left, right] = Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(body);
        let [top, rest] =
            Layout::vertical([Constraint::Length(wanted.min(left.height / 2).max(3)), Constraint::Min(0)]).areas(left);
        vec![(Pane::Versions, top), (Pane::Diagnostics, rest), (app.right, right)]
    } else {
        let cap = match lower {
            Pane::Diagnostics => body.height / 2,
            // The chat's how-to and replies need the rows more than the versions do.
            Pane::Chat => body.height / 4,
            _ => body.height / 3,
        };
        let [top, rest] =
            Layout::vertical([Constraint::Length(wanted.min(cap).max(3)), Constraint::Min(0)]).areas(body);
        vec![(Pane::Versions, top), (lower, rest)]
    }
}
