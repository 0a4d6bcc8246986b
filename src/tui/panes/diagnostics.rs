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
    let mut items: Vec<ListItem> =
        own.iter().map(|d| item(app, &d.diagnostic, d.excerpt.as_deref(), d.caret)).collect();
    items.extend(
        app.workspace_diagnostics.iter().map(|d| item(app, d, None, None).style(paint(app, Style::new().italic()))),
    );
    let list = List::new(items).block(block).highlight_style(highlight(app)).highlight_symbol(SELECTED);
    let mut state = ListState::default().with_selected((!own.is_empty()).then_some(app.diagnostic_selected));
    StatefulWidget::render(list, area, buf, &mut state);
}

fn item<'a>(app: &App, d: &'a Diagnostic, excerpt: Option<&'a str>, caret: Option<usize>) -> ListItem<'a> {
    let color = match d.severity {
        Severity::Error => Role::Fail,
        Severity::Warning => Role::Warning,
        Severity::Note => Role::Note,
    };
    let mut lines = vec![Line::from(vec![
        Span::styled(format!("{:<7} ", d.severity), app.theme.fg(color).add_modifier(Modifier::BOLD)),
        Span::styled(d.location(), paint(app, Style::new().add_modifier(Modifier::BOLD))),
        Span::raw(format!("  {}{}", d.key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default(), d.message)),
    ])];
    let gutter = d.line.to_string().len().max(3);
    if let Some(text) = excerpt {
        let dim = app.theme.fg(Role::Dim);
        lines.push(Line::from(vec![Span::styled(format!("{:>gutter$} │ ", d.line), dim), Span::raw(text)]));
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
