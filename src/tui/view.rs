//! The whole screen: a title line, the panes, and a bottom line that is the key bar, the last
//! message, or the reason being typed; help over all of it.

use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Widget};

use super::action::Action;
use super::app::{App, Mode};
use super::panes::{Pane, paint};

pub fn draw(app: &App, frame: &mut Frame) {
    render(app, frame.area(), frame.buffer_mut());
}

pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let [title, body, bottom] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(0), Constraint::Length(1)]).areas(area);
    title_line(app).render(title, buf);
    // The versions pane is as tall as its rows, up to half the screen.
    let wanted = app.versions.len().max(1) as u16 + 3;
    let [top, rest] =
        Layout::vertical([Constraint::Length(wanted.min(body.height / 2).max(3)), Constraint::Min(0)]).areas(body);
    for (pane, area) in Pane::ALL.into_iter().zip([top, rest]) {
        pane.draw(app, area, buf);
    }
    bottom_line(app).render(bottom, buf);
    if app.mode == Mode::Help {
        help(app, area, buf);
    }
}

fn title_line(app: &App) -> Line<'_> {
    let mut spans = vec![
        Span::styled("rung ", paint(app, Style::new().add_modifier(Modifier::BOLD))),
        Span::raw(format!(" {}  {}", app.problem, app.root.display())),
    ];
    if !app.running.is_empty() {
        spans.push(Span::raw(format!("  {} running", app.running.len())));
    }
    Line::from(spans)
}

fn bottom_line(app: &App) -> Line<'_> {
    if let Mode::Reject { version, reason } = &app.mode {
        return Line::from(vec![
            Span::styled(format!("reject {version}, reason: "), paint(app, Style::new().add_modifier(Modifier::BOLD))),
            Span::raw(reason.as_str()),
            Span::styled("▏", paint(app, Style::new().add_modifier(Modifier::SLOW_BLINK))),
            Span::raw("  (Enter confirms, Esc cancels)"),
        ]);
    }
    if let Some(m) = &app.message {
        return Line::from(m.as_str());
    }
    // The first key of each action; moving is left to help, to fit 80 columns.
    let keys: Vec<String> = app
        .keymap
        .by_action()
        .into_iter()
        .filter(|(a, _)| !matches!(a, Action::Up | Action::Down | Action::PrevPane))
        .map(|(a, keys)| format!("{} {}", keys[0], a.name()))
        .collect();
    Line::from(keys.join("  "))
}

/// Every bound key, from the live keymap, and what the glyphs mean.
fn help(app: &App, area: Rect, buf: &mut Buffer) {
    let bindings = app.keymap.by_action();
    let width = area.width.saturating_sub(4).min(72);
    let height = (bindings.len() as u16 + 5).min(area.height);
    let [_, column, _] =
        Layout::horizontal([Constraint::Min(0), Constraint::Length(width), Constraint::Min(0)]).areas(area);
    let [_, popup, _] =
        Layout::vertical([Constraint::Min(0), Constraint::Length(height), Constraint::Min(0)]).areas(column);
    let keys_width = bindings.iter().map(|(_, k)| k.join(", ").chars().count()).max().unwrap_or(0);
    let mut lines: Vec<Line> = bindings
        .iter()
        .map(|(a, keys)| Line::from(format!("{:<keys_width$}  {:<10} {}", keys.join(", "), a.name(), a.describe())))
        .collect();
    lines.push(Line::from(""));
    lines.push(Line::from("✓ pass  ✗ fail  ! error  · skipped  (blank) not run"));
    Clear.render(popup, buf);
    Paragraph::new(lines).block(Block::bordered().title(" keys (any key closes) ")).render(popup, buf);
}
