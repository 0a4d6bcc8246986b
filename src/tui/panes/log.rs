//! The scheduler's events as they arrive (jobs queued, running, done, cancelled; files changed),
//! each finished version's rungs with their summaries, and what the keys did. Newest at the
//! bottom; scrolling goes back from the end.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Widget};

use crate::app::App;
use crate::layout::Pane;
use crate::theme::Role;

pub fn draw(app: &App, block: Block, area: Rect, buf: &mut Buffer) {
    if app.log.is_empty() {
        Paragraph::new("nothing yet: the scheduler's events and each version's rungs show here as they happen")
            .block(block)
            .render(area, buf);
        return;
    }
    let height = area.height.saturating_sub(2) as usize;
    let back = app.scroll.get(&Pane::Log).copied().unwrap_or(0) as usize;
    let end = app.log.len().saturating_sub(back);
    let start = end.saturating_sub(height);
    let block = if back > 0 { block.title(format!(" {back} lines back ")) } else { block };
    let lines: Vec<Line> = app
        .log
        .range(start..end)
        .map(|l| {
            Line::from(vec![
                Span::styled(format!("{} ", clock(l.unix_ms)), app.theme.fg(Role::Dim)),
                Span::styled(l.text.as_str(), app.theme.fg(l.role)),
            ])
        })
        .collect();
    Paragraph::new(lines).block(block).render(area, buf);
}

/// `HH:MM:SS` of a Unix time in milliseconds, UTC (as the history records times).
fn clock(unix_ms: i64) -> String {
    let s = unix_ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}
