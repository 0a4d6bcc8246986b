//! The panes: one enum, one registry ([`Pane::ALL`], the Tab order), each drawn from `&App`.

mod diagnostics;
mod versions;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, BorderType};

use super::app::App;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    Versions,
    Diagnostics,
}

impl Pane {
    pub const ALL: [Pane; 2] = [Pane::Versions, Pane::Diagnostics];

    pub fn title(self) -> &'static str {
        match self {
            Pane::Versions => "versions",
            Pane::Diagnostics => "compile errors",
        }
    }

    pub fn draw(self, app: &App, area: Rect, buf: &mut Buffer) {
        let focused = app.pane == self;
        let block = Block::bordered()
            .border_type(if focused { BorderType::Thick } else { BorderType::Plain })
            .border_style(paint(app, if focused { Style::new().fg(Color::Cyan) } else { Style::new() }))
            .title(format!(" {} ", self.title()));
        match self {
            Pane::Versions => versions::draw(app, block, area, buf),
            Pane::Diagnostics => diagnostics::draw(app, block, area, buf),
        }
    }
}

/// `style`, or no style at all under NO_COLOR.
pub fn paint(app: &App, style: Style) -> Style {
    if app.color { style } else { Style::new() }
}

/// The selected row's look (with the `▶` beside it, it reads without colour too).
pub fn highlight(app: &App) -> Style {
    paint(app, Style::new().fg(Color::Cyan)).add_modifier(Modifier::REVERSED)
}

pub const SELECTED: &str = "▶ ";
