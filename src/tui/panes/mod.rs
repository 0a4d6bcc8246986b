//! The panes: one enum, one registry ([`Pane::ALL`], the Tab order), each drawn from `&App`.
//! A new pane is a variant, its place in `ALL`, its title and its `draw`; the layout (`view.rs`)
//! places it by [`Pane::is_detail`]. [`Pane::Chat`], the chat side panel, is the one pane outside
//! `ALL`: it takes the keys it is given (letters are text there), so Tab never lands in it by
//! accident; its own key (or a click) focuses it, and Tab leaves it.

mod assembly;
mod correctness;
mod diagnostics;
mod log;
mod profile;
mod timing;
mod versions;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType};

use super::app::App;
use super::layout::Pane;
use super::theme::Role;

impl Pane {
    pub fn draw(self, app: &App, area: Rect, buf: &mut Buffer) {
        let focused = app.pane == self;
        let theme = &app.theme;
        let mut block = Block::bordered()
            .border_type(if focused { BorderType::Thick } else { BorderType::Plain })
            .border_style(if focused { theme.fg(Role::Focus) } else { Style::new() })
            .title(if self == Pane::Chat { app.chat.panel.title() } else { format!(" {} ", self.title()) });
        if self.is_detail() {
            // The other detail panes, so the user knows Tab reaches them.
            let others: Vec<Span> = Pane::ALL
                .into_iter()
                .filter(|p| p.is_detail() && *p != self)
                .map(|p| Span::styled(format!(" {} ", p.title()), theme.fg(Role::Dim)))
                .collect();
            block = block.title_top(Line::from(others).right_aligned());
        }
        match self {
            Pane::Versions => versions::draw(app, block, area, buf),
            Pane::Diagnostics => diagnostics::draw(app, block, area, buf),
            Pane::Correctness => correctness::draw(app, block, area, buf),
            Pane::Timing => timing::draw(app, block, area, buf),
            Pane::Assembly => assembly::draw(app, block, area, buf),
            Pane::Profile => profile::draw(app, block, area, buf),
            Pane::Log => log::draw(app, block, area, buf),
            Pane::Chat => app.chat.panel.draw(block, area, buf),
        }
    }
}

/// `style`, or without its colours under NO_COLOR.
pub fn paint(app: &App, style: Style) -> Style {
    app.theme.paint(style)
}

/// The selected row's look (with the `▶` beside it, it reads without colour too).
pub fn highlight(app: &App) -> Style {
    app.theme.fg(Role::Selected).add_modifier(Modifier::REVERSED)
}

pub const SELECTED: &str = "▶ ";

/// Spinner frames for a running job.
pub const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// `n=1024, m=64` for a test size.
pub fn sizes_label(sizes: &rung_core::spec::SizeSet) -> String {
    if sizes.is_empty() {
        return "-".into();
    }
    sizes.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}
