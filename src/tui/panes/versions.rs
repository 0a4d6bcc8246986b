//! Every version: its review status, a glyph per rung, its median, speedup and share of the
//! roofline.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, StatefulWidget, Table, TableState, Widget};
use rung_core::model::report::{Stage, Verdict};
use rung_core::store::Status;
use rung_core::watch::JobKind;

use super::{SELECTED, SPINNER, highlight, paint};
use crate::app::{App, RUNGS, VersionView};
use crate::theme::Role;

pub fn draw(app: &App, block: Block, area: Rect, buf: &mut Buffer) {
    if app.versions.is_empty() {
        Paragraph::new("no versions yet: add one to versions/, e.g. versions/v001-naive.cu")
            .block(block)
            .render(area, buf);
        return;
    }
    let header = ["id", "name", "status", "prep", "bld", "run", "chk", "bnch", "roof", "µs", "speed", "roof%"];
    let header = Row::new(header.into_iter().enumerate().map(|(i, h)| match i {
        0..3 => Line::from(h),
        3..9 => Line::from(h).centered(),
        _ => Line::from(h).right_aligned(),
    }))
    .style(paint(app, Style::new().add_modifier(Modifier::BOLD)));
    let rows = app.versions.iter().map(|v| row(app, v));
    let widths = [
        Constraint::Length(5),
        Constraint::Min(6),
        Constraint::Length(10),
        Constraint::Length(4),
        Constraint::Length(4),
        Constraint::Length(4),
        Constraint::Length(4),
        Constraint::Length(4),
        Constraint::Length(4),
        Constraint::Length(8),
        Constraint::Length(6),
        Constraint::Length(5),
    ];
    let table = Table::new(rows, widths)
        .header(header)
        .block(block)
        .row_highlight_style(highlight(app))
        .highlight_symbol(SELECTED);
    let mut state = TableState::default().with_selected(Some(app.selected));
    StatefulWidget::render(table, area, buf, &mut state);
}

fn row<'a>(app: &App, v: &'a VersionView) -> Row<'a> {
    let (mark, color) = match v.status {
        None => ("  new", Role::Text),
        Some(Status::Draft) => ("· draft", Role::Text),
        Some(Status::Proposed) => ("? proposed", Role::Warning),
        Some(Status::Approved) => ("✓ approved", Role::Pass),
        Some(Status::Rejected) => ("✗ rejected", Role::Fail),
    };
    let id = if app.baseline.as_deref() == Some(v.id.as_str()) {
        Line::from(vec![Span::raw(v.id.as_str()), Span::styled("⚑", app.theme.fg(Role::Baseline))])
    } else {
        Line::from(v.id.as_str())
    };
    let mut cells =
        vec![Cell::from(id), Cell::from(v.name.as_str()), Cell::from(Span::styled(mark, app.theme.fg(color)))];
    let running = app.running.get(&v.id).copied();
    cells.extend(
        RUNGS.iter().map(|&stage| {
            Cell::from(Line::from(glyph(app, stage, v.verdicts.get(&stage).copied(), running)).centered())
        }),
    );
    cells.push(Cell::from(Line::from(v.median_us().map(format_us).unwrap_or_default()).right_aligned()));
    cells.push(Cell::from(Line::from(v.speedup.map(|s| format!("{s:.2}×")).unwrap_or_default()).right_aligned()));
    cells.push(Cell::from(
        Line::from(v.roofline_percent.map(|p| format!("{p:.0}%")).unwrap_or_default()).right_aligned(),
    ));
    Row::new(cells)
}

fn glyph(app: &App, stage: Stage, verdict: Option<Verdict>, running: Option<JobKind>) -> Span<'static> {
    let job = if matches!(stage, Stage::Prepare | Stage::Build) { JobKind::Build } else { JobKind::Gpu };
    if running == Some(job) {
        return Span::styled(SPINNER[app.frame % SPINNER.len()], app.theme.fg(Role::Accent));
    }
    let (text, color) = match verdict {
        None => (" ", Role::Text),
        Some(Verdict::Pass) => ("✓", Role::Pass),
        Some(Verdict::Fail) => ("✗", Role::Fail),
        Some(Verdict::Error) => ("!", Role::Error),
        Some(Verdict::Skipped) => ("·", Role::Skipped),
    };
    Span::styled(text, app.theme.fg(color))
}

pub fn format_us(us: f64) -> String {
    if us < 100.0 { format!("{us:.2}") } else { format!("{us:.1}") }
}
