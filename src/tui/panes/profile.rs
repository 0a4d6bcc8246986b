//! The profile rung's result for the selected version, when the history has one. The profile
//! rung (Nsight Compute summarised, compute-sanitizer's memcheck and racecheck) is not built yet:
//! until it is, this pane says so rather than show anything made up.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Widget, Wrap};
use rung::report::Stage;

use super::Pane;
use crate::tui::app::{App, verdict_role};

pub fn draw(app: &App, block: Block, area: Rect, buf: &mut Buffer) {
    let t = &app.theme;
    let Some(v) = app.selected_version() else {
        Paragraph::new("no version selected").block(block).render(area, buf);
        return;
    };
    let block = block.title(format!(" {} ", v.id));
    let lines: Vec<Line> = match v.results.get(&Stage::Profile) {
        Some(r) => {
            let mut lines = vec![Line::from(vec![
                Span::styled(
                    format!("profile {}", r.verdict.name()),
                    t.fg(verdict_role(r.verdict)).add_modifier(Modifier::BOLD),
                ),
                Span::raw(format!("  {}", r.summary)),
            ])];
            lines.extend(r.diagnostics.iter().map(|d| Line::from(format!("{}: {}", d.location(), d.message))));
            lines.push(Line::styled(format!("recorded {}", r.started_at), t.fg(crate::tui::theme::Role::Dim)));
            lines
        }
        None => vec![
            Line::from(format!("no profile of {} in the history.", v.id)),
            Line::from(""),
            Line::from(
                "The profile rung is not built yet. When it is, it will run on demand on a machine with a GPU: \
                 Nsight Compute (ncu --csv) summarised, and compute-sanitizer memcheck and racecheck as optional \
                 rungs; its result will show here.",
            ),
        ],
    };
    let scroll = app.scroll.get(&Pane::Profile).copied().unwrap_or(0);
    Paragraph::new(lines).block(block).wrap(Wrap { trim: false }).scroll((scroll, 0)).render(area, buf);
}
