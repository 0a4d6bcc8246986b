//! The whole screen: a title line, the panes, and a bottom line that is the key bar, the last
//! message, the reason being typed or the command palette's input; help over all of it.
//!
//! Where each pane goes is [`super::layout`]'s to say, for drawing and for mouse hits alike.

use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Widget};

use super::action::Action;
use super::app::{App, Mode, palette_matches};
use super::layout::panes;
use super::panes::paint;
use super::theme::Role;

/// The key bar's actions, in the order they are dropped from the end on a narrow screen.
const KEY_BAR: [Action; 11] = [
    Action::Help,
    Action::Approve,
    Action::Reject,
    Action::Baseline,
    Action::Zoom,
    Action::Palette,
    Action::Edit,
    Action::Quit,
    Action::Chat,
    Action::NextPane,
    Action::Jump,
];

pub fn draw(app: &App, frame: &mut Frame) {
    render(app, frame.area(), frame.buffer_mut());
}

pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let [title, body, bottom] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(0), Constraint::Length(1)]).areas(area);
    title_line(app).render(title, buf);
    for (pane, area) in panes(&app.arrangement(), body) {
        pane.draw(app, area, buf);
    }
    bottom_line(app, bottom.width).render(bottom, buf);
    match &app.mode {
        Mode::Help => help(app, area, buf),
        Mode::Palette { input, selected } => palette(app, input, *selected, body, buf),
        Mode::Compare { selected } => compare(app, *selected, body, buf),
        Mode::Source { at, message, top } => source(app, at, message, *top, body, buf),
        Mode::Trace { zoom, offset, top } => {
            if let Some(t) = &app.trace {
                crate::trace_view::draw(t, &app.theme, *zoom, f64::from(*offset) / 1000.0, *top, body, buf);
            }
        }
        _ => {}
    }
}

/// The file at a diagnostic, over the panes: line numbers, the diagnostic's line marked, a caret
/// under its column and the message under that, as a compiler prints it; scrolled sideways when
/// the column would be off the right edge.
fn source(app: &App, at: &super::app::Jump, message: &str, top: usize, body: Rect, buf: &mut Buffer) {
    let path = app.root.join(&at.file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| format!("cannot read {}: {e}", path.display()));
    let lines: Vec<&str> = text.lines().collect();
    let edit = app.key_of(Action::Edit);
    let title = format!(" {}:{}:{} · Esc closes · {edit} edits here ", at.file.display(), at.line, at.column);
    let block = Block::bordered().title(title).border_style(app.theme.fg(Role::Accent));
    let inner = block.inner(body);
    Clear.render(body, buf);
    block.render(body, buf);
    let gutter = lines.len().max(1).to_string().len();
    let width = usize::from(inner.width).saturating_sub(gutter + 3);
    // The column on screen (a tab shows as four spaces), kept in view with room for the start
    // of the message.
    let target = lines.get((at.line as usize).saturating_sub(1)).copied().unwrap_or("");
    let col: usize =
        target.chars().take(at.column.saturating_sub(1) as usize).map(|c| if c == '\t' { 4 } else { 1 }).sum();
    let left = (col + 8).saturating_sub(width);
    let marked = app.theme.fg(Role::Fail).add_modifier(Modifier::BOLD);
    let mut out: Vec<Line> = Vec::new();
    let top = top.min(lines.len().saturating_sub(1));
    for (i, l) in lines.iter().enumerate().skip(top) {
        if out.len() >= usize::from(inner.height) {
            break;
        }
        let number = i + 1;
        let shown: String = l.replace('\t', "    ").chars().skip(left).take(width).collect();
        let here = number == at.line as usize;
        let gutter_style = if here { marked } else { app.theme.fg(Role::Dim) };
        out.push(Line::from(vec![
            Span::styled(format!("{:>gutter$} {} ", number, if here { "▶" } else { "│" }), gutter_style),
            Span::styled(shown, if here { Style::new().add_modifier(Modifier::BOLD) } else { Style::new() }),
        ]));
        if here {
            let caret_at = col.saturating_sub(left);
            let pad = " ".repeat(gutter + 3 + caret_at);
            out.push(Line::from(Span::styled(format!("{pad}^ {message}"), marked)));
        }
    }
    Paragraph::new(out).render(inner, buf);
}

fn title_line(app: &App) -> Line<'_> {
    let mut spans = vec![
        Span::styled("rung ", paint(app, Style::new().add_modifier(Modifier::BOLD))),
        Span::raw(format!(" {}  {}", app.problem, app.root.display())),
    ];
    if let Some(b) = &app.baseline {
        spans.push(Span::styled(format!("  ⚑ baseline {b}"), app.theme.fg(Role::Baseline)));
    }
    if app.watching {
        spans.push(Span::styled("  watching", app.theme.fg(Role::Dim)));
    }
    if let Some(why) = app.unsandboxed {
        spans.push(Span::styled(format!("  ⚠ {why}"), app.theme.fg(Role::Warning)));
    }
    if !app.running.is_empty() {
        spans.push(Span::raw(format!("  {} running", app.running.len())));
    }
    if app.zoomed {
        spans.push(Span::styled("  [zoom]", app.theme.fg(Role::Accent)));
    }
    if app.chat.busy() {
        spans.push(Span::styled("  agent replying", app.theme.fg(Role::Accent)));
    }
    Line::from(spans)
}

fn bottom_line(app: &App, width: u16) -> Line<'_> {
    let bold = paint(app, Style::new().add_modifier(Modifier::BOLD));
    let cursor = Span::styled("▏", paint(app, Style::new().add_modifier(Modifier::SLOW_BLINK)));
    match &app.mode {
        Mode::Reject { version, reason } => {
            return Line::from(vec![
                Span::styled(format!("reject {version}, reason: "), bold),
                Span::raw(reason.as_str()),
                cursor,
                Span::raw("  (Enter confirms, Esc cancels)"),
            ]);
        }
        Mode::ConfirmApprove { version, why } => {
            return Line::from(vec![
                Span::styled(format!("approve {version}? not checked here: "), bold),
                Span::raw(why.as_str()),
                Span::raw("  (y approves, n or Esc cancels)"),
            ]);
        }
        Mode::Trace { zoom, .. } => {
            return Line::from(vec![
                Span::styled("trace", bold),
                Span::raw(format!(
                    "  ×{zoom}  (+/- zoom, {}/{} scroll, {}/{} SMs, Esc closes)",
                    app.key_of(Action::Left),
                    app.key_of(Action::Right),
                    app.key_of(Action::Down),
                    app.key_of(Action::Up)
                )),
            ]);
        }
        Mode::Source { .. } => {
            return Line::from(vec![
                Span::styled("source", bold),
                Span::raw(format!(
                    "  ({}/{} scroll, {} edits at the line, Esc closes)",
                    app.key_of(Action::Down),
                    app.key_of(Action::Up),
                    app.key_of(Action::Edit)
                )),
            ]);
        }
        Mode::Compare { .. } => {
            return Line::from(vec![
                Span::styled("compare with", bold),
                Span::raw("  (↑↓ choose, Enter compares, Esc cancels)"),
            ]);
        }
        Mode::Palette { input, .. } => {
            return Line::from(vec![
                Span::styled(":", bold),
                Span::raw(input.as_str()),
                cursor,
                Span::raw("  (Enter runs, Tab completes, ↑↓ choose, Esc cancels)"),
            ]);
        }
        _ => {}
    }
    if let Some(m) = &app.message {
        return Line::from(m.as_str());
    }
    // The first key of each action, the most used first: what does not fit whole is left to help.
    let bound = app.keymap.by_action();
    let mut bar = String::new();
    for (a, keys) in KEY_BAR.iter().filter_map(|a| bound.iter().find(|(b, _)| b == a)) {
        let item = format!("{}{} {}", if bar.is_empty() { "" } else { "  " }, keys[0], a.name());
        if bar.chars().count() + item.chars().count() > usize::from(width) {
            break;
        }
        bar.push_str(&item);
    }
    Line::from(bar)
}

/// The actions matching what was typed, above the bottom line.
fn palette(app: &App, input: &str, selected: usize, body: Rect, buf: &mut Buffer) {
    let matches = palette_matches(input);
    let keys = app.keymap.by_action();
    let height = (matches.len().max(1) as u16 + 2).min(body.height);
    let width = body.width.min(72);
    let popup = Rect::new(body.x, body.bottom().saturating_sub(height), width, height);
    let lines: Vec<Line> = if matches.is_empty() {
        vec![Line::from(format!("no action matches `{input}`"))]
    } else {
        matches
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let key = keys.iter().find(|(b, _)| b == a).map(|(_, k)| k.join(", ")).unwrap_or_default();
                let line = Line::from(format!("{:<10} {:<12} {}", a.name(), key, a.describe()));
                if i == selected { line.style(super::panes::highlight(app)) } else { line }
            })
            .collect()
    };
    Clear.render(popup, buf);
    Paragraph::new(lines).block(Block::bordered().title(" run an action ")).render(popup, buf);
}

/// What the assembly pane can compare the selected version with, over the body's top right.
fn compare(app: &App, selected: usize, body: Rect, buf: &mut Buffer) {
    let choices = app.compare_choices();
    let lines: Vec<Line> = choices
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let what = match app.against_version(a) {
                Ok((_, label)) => label,
                Err(why) => why,
            };
            let line = Line::from(format!("{:<8} {what}", a.name()));
            if i == selected { line.style(super::panes::highlight(app)) } else { line }
        })
        .collect();
    let height = (lines.len() as u16 + 2).min(body.height);
    let width = body.width.min(72);
    // Keep the selected choice on screen when there are more than fit.
    let inner = height.saturating_sub(2) as usize;
    let skip = (selected + 1).saturating_sub(inner);
    let popup = Rect::new(body.right().saturating_sub(width), body.y, width, height);
    Clear.render(popup, buf);
    Paragraph::new(lines.into_iter().skip(skip).collect::<Vec<_>>())
        .block(Block::bordered().title(" compare the selected version with "))
        .render(popup, buf);
}

/// Every bound key, from the live keymap, and what the glyphs mean.
fn help(app: &App, area: Rect, buf: &mut Buffer) {
    let bindings = app.keymap.by_action();
    let width = area.width.saturating_sub(4).min(96);
    let [_, column, _] =
        Layout::horizontal([Constraint::Min(0), Constraint::Length(width), Constraint::Min(0)]).areas(area);
    let keys_width = bindings.iter().map(|(_, k)| k.join(", ").chars().count()).max().unwrap_or(0);
    // The keys, then a blank line and three lines of legend, inside a border.
    const AROUND: u16 = 6;
    let mut lines: Vec<Line> = if bindings.len() as u16 + AROUND <= area.height {
        bindings
            .iter()
            .map(|(a, keys)| Line::from(format!("{:<keys_width$}  {:<10} {}", keys.join(", "), a.name(), a.describe())))
            .collect()
    } else {
        // Too short for a line each: keys and names in columns, the descriptions in the palette.
        let entries: Vec<String> =
            bindings.iter().map(|(a, keys)| format!("{} {}", keys.join(", "), a.name())).collect();
        let col = entries.iter().map(|e| e.chars().count()).max().unwrap_or(0) + 2;
        let per_row = (usize::from(width.saturating_sub(2)) / col.max(1)).max(1);
        let mut lines: Vec<Line> = entries
            .chunks(per_row)
            .map(|row| Line::from(row.iter().map(|e| format!("{e:<col$}")).collect::<String>()))
            .collect();
        lines.push(Line::from(": palette describes every action"));
        lines
    };
    let height = (lines.len() as u16 + AROUND).min(area.height);
    let [_, popup, _] =
        Layout::vertical([Constraint::Min(0), Constraint::Length(height), Constraint::Min(0)]).areas(column);
    lines.push(Line::from(""));
    lines.push(Line::from("✓ pass  ✗ fail  ! error  · skipped  (blank) not run  ⚑ baseline"));
    lines.push(Line::from("mouse: click a pane or a version, wheel scrolls"));
    lines.push(Line::from("chat: Enter sends, Alt-Enter a new line; /model /context /clear /stop"));
    Clear.render(popup, buf);
    Paragraph::new(lines).block(Block::bordered().title(" keys (any key closes) ")).render(popup, buf);
}
