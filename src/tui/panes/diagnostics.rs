//! The selected version's diagnostics, each with the offending line of its file, then the
//! workspace's own (rung.toml and the like).

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, List, ListItem, ListState, Paragraph, StatefulWidget, Widget};
use rung_core::diag::{Diagnostic, Severity};

use super::{SELECTED, highlight, paint};
use crate::app::App;
use crate::theme::Role;

pub fn draw(app: &App, block: Block, area: Rect, buf: &mut Buffer) {
    let version = app.selected_version();
    let block = match version {
        Some(v) => match &v.reason {
            Some(reason) => block.title(format!(" {}, rejected: {reason} ", v.id)),
            None => block.title(format!(" {} ", v.id)),
        },
        None => block,
    };
    let own = version.map_or(&[][..], |v| v.diagnostics.as_slice());
    if own.is_empty() && app.workspace_diagnostics.is_empty() {
        let text = match version {
            Some(v) if v.verdicts.is_empty() => format!("{}: not checked yet", v.id),
            Some(v) if !v.failures.is_empty() => format!("{}: no diagnostics; {}", v.id, v.failures.join("; ")),
            Some(v) => format!("{}: no diagnostics", v.id),
            None => "no version selected".to_string(),
        };
        Paragraph::new(text).block(block).render(area, buf);
        return;
    }
    // Inside the border, after the selection marker.
    let width = usize::from(area.width.saturating_sub(2)).saturating_sub(SELECTED.chars().count()).max(20);
    let mut items: Vec<ListItem> =
        own.iter().map(|d| item(app, &d.diagnostic, d.excerpt.as_deref(), d.caret, width)).collect();
    items.extend(
        app.workspace_diagnostics
            .iter()
            .map(|d| item(app, d, None, None, width).style(paint(app, Style::new().italic()))),
    );
    let list = List::new(items).block(block).highlight_style(highlight(app)).highlight_symbol(SELECTED);
    let mut state = ListState::default().with_selected((!own.is_empty()).then_some(app.diagnostic_selected));
    StatefulWidget::render(list, area, buf, &mut state);
}

/// A diagnostic as lines `width` cells wide: the message wrapped under its start (a long one is
/// never cut off), the source line slid left when its caret would fall past the edge.
fn item<'a>(
    app: &App,
    d: &'a Diagnostic,
    excerpt: Option<&'a str>,
    caret: Option<usize>,
    width: usize,
) -> ListItem<'a> {
    let color = match d.severity {
        Severity::Error => Role::Fail,
        Severity::Warning => Role::Warning,
        Severity::Note => Role::Note,
    };
    let head = format!("{:<7} ", d.severity);
    let location = d.location();
    let message = format!("  {}{}", d.key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default(), d.message);
    let first = width.saturating_sub(head.chars().count() + location.chars().count());
    let mut wrapped = wrap(&message, first, width.saturating_sub(head.chars().count()));
    let mut lines = vec![Line::from(vec![
        Span::styled(head.clone(), app.theme.fg(color).add_modifier(Modifier::BOLD)),
        Span::styled(location, paint(app, Style::new().add_modifier(Modifier::BOLD))),
        Span::raw(wrapped.remove(0)),
    ])];
    lines.extend(
        wrapped.into_iter().map(|l| Line::from(format!("{}{}", " ".repeat(head.chars().count()), l.trim_start()))),
    );
    let gutter = d.line.to_string().len().max(3);
    if let Some(text) = excerpt {
        let dim = app.theme.fg(Role::Dim);
        // Slide the line left, behind a `…`, when the caret would be past the right edge.
        let room = width.saturating_sub(gutter + 3);
        let shift = match caret {
            Some(offset) if offset + 4 > room => offset + 1 - room * 2 / 3,
            _ => 0,
        };
        let shown: String = if shift == 0 {
            text.to_string()
        } else {
            format!("…{}", text.chars().skip(shift + 1).collect::<String>())
        };
        let caret = caret.map(|c| c - shift);
        lines.push(Line::from(vec![Span::styled(format!("{:>gutter$} │ ", d.line), dim), Span::raw(shown)]));
        if let Some(offset) = caret {
            let caret = format!("{}^", " ".repeat(offset));
            lines.push(Line::from(vec![
                Span::styled(format!("{:>gutter$} │ ", ""), dim),
                Span::styled(caret, app.theme.fg(color)),
            ]));
        }
    }
    if let Some(help) = &d.help {
        lines.push(Line::from(vec![
            Span::raw(format!("{:>gutter$}   ", "")),
            Span::styled("help: ", app.theme.fg(Role::Help)),
            Span::raw(help.as_str()),
        ]));
    }
    ListItem::new(lines)
}

/// `text` in lines: the first at most `first` characters wide, the rest `rest`, broken at spaces
/// where there is one (a long word is cut where the line ends).
fn wrap(text: &str, first: usize, rest: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = String::new();
    let mut limit = first.max(8);
    for word in text.split_inclusive(' ') {
        if line.chars().count() + word.trim_end().chars().count() > limit && !line.trim().is_empty() {
            out.push(std::mem::take(&mut line));
            limit = rest.max(8);
        }
        line.push_str(word);
        while line.chars().count() > limit {
            let cut: String = line.chars().take(limit).collect();
            line = line.chars().skip(limit).collect();
            out.push(cut);
            limit = rest.max(8);
        }
    }
    out.push(line);
    out
}
