//! The selected version's PTX or SASS side by side with another version's (its parent, the best,
//! or one picked with `c`): the resources and the instruction mix of the kernel on screen with
//! their changes above, then the aligned rows, both sides scrolling as one, changed rows marked
//! (`-` only on the left, `+` only on the right, `~` changed, the changed words reversed) and
//! unchanged rows highlighted with the PTX and SASS grammars. Only the rows on screen are drawn,
//! so a 100,000-line listing draws as fast as a short one.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Widget, Wrap};
use rung_core::asm::diff::{KernelDiff, Row, RowKind, Side};
use rung_core::asm::mix;
use rung_core::model::report::{Stage, StageDetail};
use rung_core::parsers::KernelResources;

use super::{SPINNER, paint};
use crate::app::App;
use crate::asm_view::kernel_name;
use crate::theme::Role;

/// Lines above the listing: what is compared, the resources, the instruction mix.
const HEADER: u16 = 3;
/// The source-line gutter of each side.
const GUTTER: usize = 5;

pub fn draw(app: &App, block: Block, area: Rect, buf: &mut Buffer) {
    let t = &app.theme;
    let v = app.selected_version();
    let title = match v {
        Some(v) => format!(" {} {} ", app.asm.kind.label(), v.id),
        None => format!(" {} ", app.asm.kind.label()),
    };
    let block = block.title(title);
    let inner = block.inner(area);
    block.render(area, buf);
    let building = v.is_some_and(|v| app.running.contains_key(&v.id));
    let spinner = SPINNER[app.frame % SPINNER.len()];
    let (Some(v), Some(d)) = (v, app.asm.shown.as_ref()) else {
        let mut lines = Vec::new();
        if building {
            lines.push(Line::styled(format!("{spinner} building…"), t.fg(Role::Accent)));
        }
        match (&app.asm.why_not, app.asm.wanted.as_ref()) {
            (Some(why), _) => lines.push(Line::from(why.as_str())),
            (None, Some(k)) => lines.push(Line::styled(
                format!(
                    "{spinner} comparing {} with {}…",
                    k.right.id,
                    k.left.as_ref().map_or("nothing", |l| l.id.as_str())
                ),
                t.fg(Role::Dim),
            )),
            (None, None) => lines.push(Line::from("no listing to show")),
        }
        lines.push(Line::from(""));
        lines.push(Line::styled(
            "p PTX/SASS · c compare with · n/N next/previous change · f one kernel · R rename registers",
            t.fg(Role::Dim),
        ));
        Paragraph::new(lines).wrap(Wrap { trim: false }).render(inner, buf);
        return;
    };
    if inner.height == 0 || inner.width < 8 {
        return;
    }
    let against = app.against_version(&app.asm.against).map(|(_, label)| label);
    let left_label = match (&d.key.left, &against) {
        (Some(_), Ok(label)) => label.clone(),
        (None, Ok(label)) => format!("{label}: no {}", app.asm.kind.label()),
        (_, Err(_)) => "nothing".into(),
    };
    // Line 1: what is compared, where the screen is, and the state of the diff.
    let mut head = vec![
        Span::styled(left_label, t.fg(Role::Fail)),
        Span::raw(" ◀▶ "),
        Span::styled(v.id.clone(), t.fg(Role::Pass)),
    ];
    let names = app.asm.kernel_names();
    head.push(Span::raw(match &app.asm.kernel {
        Some(k) => {
            let i = names.iter().position(|n| n == k).map_or(0, |i| i + 1);
            format!("  kernel {i}/{}: {k}", names.len())
        }
        None if names.len() == 1 => format!("  kernel {}", names[0]),
        None => format!("  {} kernels", names.len()),
    }));
    let (deleted, inserted): (usize, usize) = d
        .diff
        .kernels
        .iter()
        .filter(|k| app.asm.kernel.as_ref().is_none_or(|n| kernel_name(k) == n))
        .fold((0, 0), |(a, b), k| (a + k.deleted, b + k.inserted));
    head.push(Span::raw(format!("  change {}/{}", app.asm.hunk_at(), app.asm.hunks.len())));
    head.push(Span::styled(format!("  -{deleted}"), t.fg(Role::Fail)));
    head.push(Span::styled(format!(" +{inserted}"), t.fg(Role::Pass)));
    if app.asm.registers {
        head.push(Span::styled("  registers renamed", t.fg(Role::Dim)));
    }
    if !v.results.contains_key(&Stage::Build) {
        head.push(Span::styled("  from an earlier build", t.fg(Role::Warning)));
    }
    if building || app.asm.stale() {
        head.push(Span::styled(format!("  {spinner} updating"), t.fg(Role::Accent)));
    }
    if let Some(e) = &d.error {
        head.push(Span::styled(format!("  {e}"), t.fg(Role::Fail)));
    }
    buf.set_line(inner.x, inner.y, &Line::from(head), inner.width);
    // Lines 2 and 3: the resources and instruction mix of the kernel at the top of the screen.
    let on_screen = app.asm.kernel_on_screen();
    if inner.height > 1 {
        let line = on_screen.map(|k| resources_line(app, &d.key, k)).unwrap_or_default();
        buf.set_line(inner.x, inner.y + 1, &line, inner.width);
    }
    if inner.height > 2 {
        let line = on_screen.map(|k| mix_line(app, k)).unwrap_or_default();
        buf.set_line(inner.x, inner.y + 2, &line, inner.width);
    }
    let rows = Rect { y: inner.y + HEADER.min(inner.height), height: inner.height.saturating_sub(HEADER), ..inner };
    listing(app, rows, buf);
}

/// One figure of a ptxas resource report.
type Field = fn(&KernelResources) -> u32;

/// Registers, shared memory, spills and stack of the kernel in both versions, from their builds.
fn resources_line(app: &App, key: &crate::asm_view::DiffKey, k: &KernelDiff) -> Line<'static> {
    let t = &app.theme;
    let of = |id: Option<&str>, name: Option<&str>| -> Option<KernelResources> {
        let v = app.versions.iter().find(|v| Some(v.id.as_str()) == id)?;
        let StageDetail::Build(b) = &v.results.get(&Stage::Build)?.detail else { return None };
        b.kernels.iter().find(|kb| Some(kb.resources.name.as_str()) == name).map(|kb| kb.resources.clone())
    };
    let left = of(key.left.as_ref().map(|l| l.id.as_str()), k.left.as_deref());
    let right = of(Some(key.right.id.as_str()), k.right.as_deref());
    if left.is_none() && right.is_none() {
        return Line::styled("resources: no ptxas report for this kernel", t.fg(Role::Dim));
    }
    let mut spans = Vec::new();
    let fields: [(&str, Field, &str); 5] = [
        ("regs", |r| r.registers, ""),
        ("smem", |r| r.shared_bytes, " B"),
        ("spill st", |r| r.spill_store_bytes, " B"),
        ("spill ld", |r| r.spill_load_bytes, " B"),
        ("stack", |r| r.stack_frame_bytes, " B"),
    ];
    for (name, get, unit) in fields {
        let (a, b) = (left.as_ref().map(get), right.as_ref().map(get));
        let show = |x: Option<u32>| x.map_or("?".to_string(), |x| x.to_string());
        spans.push(Span::raw(format!("{name} ")));
        match (a, b) {
            (Some(a), Some(b)) if a == b => spans.push(Span::raw(format!("{b}{unit}"))),
            _ => {
                // More registers, memory or spills cost: red; fewer: green.
                let role = match (a, b) {
                    (Some(a), Some(b)) if b > a => Role::Fail,
                    (Some(_), Some(_)) => Role::Pass,
                    _ => Role::Text,
                };
                spans.push(Span::styled(format!("{}→{}{unit}", show(a), show(b)), t.fg(role)));
            }
        }
        spans.push(Span::raw("  "));
    }
    Line::from(spans)
}

/// The counts that changed, most telling first as `asm::mix::changes` orders them; or the total
/// when nothing changed.
fn mix_line(app: &App, k: &KernelDiff) -> Line<'static> {
    let t = &app.theme;
    let (l, r) = (k.left_mix.clone().unwrap_or_default(), k.right_mix.clone().unwrap_or_default());
    let changes = mix::changes(&l, &r);
    if changes.is_empty() {
        return Line::styled(format!("mix unchanged: {} instructions", r.instructions), t.fg(Role::Dim));
    }
    let mut spans = vec![Span::styled("mix ", t.fg(Role::Dim))];
    for c in changes {
        let role = if c.b > c.a { Role::Pass } else { Role::Fail };
        spans.push(Span::raw(format!("{} ", c.what)));
        spans.push(Span::styled(format!("{}→{}", c.a, c.b), t.fg(role)));
        spans.push(Span::raw("  "));
    }
    Line::from(spans)
}

/// The rows on screen, both sides.
fn listing(app: &App, area: Rect, buf: &mut Buffer) {
    let t = &app.theme;
    let asm = &app.asm;
    let end = (asm.scroll + area.height as usize).min(asm.rows.len());
    let visible = &asm.rows[asm.scroll.min(end)..end];
    let half = area.width.saturating_sub(1) / 2;
    let left_area = Rect { width: half, ..area };
    let right_area = Rect { x: area.x + half + 1, width: area.width - half - 1, ..area };
    let rows: Vec<(Option<&KernelDiff>, Option<&Row>)> =
        visible.iter().map(|f| asm.row(*f).map_or((None, None), |(k, r)| (Some(k), r))).collect();
    // Unchanged rows in the grammar's colours: each side's on-screen lines highlighted in one
    // pass, so the grammar's state carries from line to line.
    let colours = |pick: fn(&Row) -> Option<&Side>| -> Vec<Option<Vec<Span<'static>>>> {
        let (Some(theme), true) = (app.syntax.as_ref(), app.theme.color) else { return vec![None; rows.len()] };
        let texts: Vec<&str> = rows
            .iter()
            .map(|(_, r)| r.filter(|r| r.kind == RowKind::Equal).and_then(pick).map_or("", |s| s.text.as_str()))
            .collect();
        let Some(runs) = rung_core::highlight::colour_runs_with(theme, asm.kind.ext(), texts.iter().copied()) else {
            return vec![None; rows.len()];
        };
        runs.into_iter()
            .map(|line| {
                Some(
                    line.into_iter()
                        .map(|r| {
                            let mut style = Style::new().fg(Color::Rgb(r.rgb.0, r.rgb.1, r.rgb.2));
                            if r.bold {
                                style = style.add_modifier(Modifier::BOLD);
                            }
                            Span::styled(r.text, style)
                        })
                        .collect(),
                )
            })
            .collect()
    };
    let left_colours = colours(|r| r.left.as_ref());
    let right_colours = colours(|r| r.right.as_ref());
    let mut last_source = (None, None);
    for (i, (k, row)) in rows.iter().enumerate() {
        let y = area.y + i as u16;
        match (k, row) {
            (Some(k), None) => {
                let name = kernel_name(k);
                let text = format!("━━ {name}  -{} +{} ", k.deleted, k.inserted);
                let fill = "━".repeat((area.width as usize).saturating_sub(text.chars().count()));
                let style = paint(app, t.fg(Role::Accent).add_modifier(Modifier::BOLD));
                buf.set_line(area.x, y, &Line::styled(format!("{text}{fill}"), style), area.width);
                last_source = (None, None);
            }
            (Some(_), Some(row)) => {
                let l = side(app, row, row.left.as_ref(), true, &mut last_source.0, left_colours[i].clone());
                let r = side(app, row, row.right.as_ref(), false, &mut last_source.1, right_colours[i].clone());
                buf.set_line(left_area.x, y, &l, left_area.width);
                buf.set_string(area.x + half, y, "│", t.fg(Role::Dim));
                buf.set_line(right_area.x, y, &r, right_area.width);
            }
            _ => {}
        }
    }
}

/// One side of a row: the source line when it changes, the mark, the text.
fn side(
    app: &App,
    row: &Row,
    s: Option<&Side>,
    left: bool,
    last_source: &mut Option<u32>,
    colours: Option<Vec<Span<'static>>>,
) -> Line<'static> {
    let t = &app.theme;
    let Some(s) = s else {
        return Line::styled(format!("{:GUTTER$} ·", ""), t.fg(Role::Dim));
    };
    let gutter = match s.source_line {
        Some(n) if Some(n) != *last_source => format!("{n:>w$} ", w = GUTTER - 1),
        _ => " ".repeat(GUTTER),
    };
    *last_source = s.source_line.or(*last_source);
    let (mark, role) = match row.kind {
        RowKind::Equal => (' ', None),
        RowKind::Delete => ('-', Some(Role::Fail)),
        RowKind::Insert => ('+', Some(Role::Pass)),
        RowKind::Replace => ('~', Some(if left { Role::Fail } else { Role::Pass })),
    };
    let mut spans = vec![Span::styled(gutter, t.fg(Role::Dim))];
    let mark_style = role.map_or(Style::new(), |r| t.fg(r).add_modifier(Modifier::BOLD));
    // Scrolled sideways: `«` where the mark's space was says text is hidden to the left.
    let scrolled = if app.asm.column > 0 { '«' } else { ' ' };
    spans.push(Span::styled(format!("{mark}{scrolled}"), paint(app, mark_style)));
    let fixed = spans.len();
    match (row.kind, role) {
        (RowKind::Equal, _) => match colours {
            Some(c) => spans.extend(c),
            None => spans.push(Span::raw(s.text.clone())),
        },
        (RowKind::Replace, Some(role)) => {
            // The words that differ, reversed: they read without colour too.
            let base = t.fg(role);
            let piece = |a: usize, b: usize| s.text.get(a..b).unwrap_or_default().to_string();
            let mut at = 0;
            for &(a, b) in &s.changed {
                let (a, b) = (a.clamp(at, s.text.len()), b.min(s.text.len()));
                if a > at {
                    spans.push(Span::styled(piece(at, a), base));
                }
                if b > a {
                    spans.push(Span::styled(piece(a, b), paint(app, base.add_modifier(Modifier::REVERSED))));
                }
                at = b.max(at);
            }
            if at < s.text.len() {
                spans.push(Span::styled(piece(at, s.text.len()), base));
            }
        }
        (_, role) => spans.push(Span::styled(s.text.clone(), role.map_or(Style::new(), |r| t.fg(r)))),
    }
    let text = spans.split_off(fixed);
    spans.extend(skip_chars(text, app.asm.column));
    Line::from(spans)
}

/// Spans less their first `n` characters, styles kept.
fn skip_chars(spans: Vec<Span<'static>>, mut n: usize) -> Vec<Span<'static>> {
    let mut out = Vec::with_capacity(spans.len());
    for span in spans {
        let len = span.content.chars().count();
        if n >= len {
            n -= len;
            continue;
        }
        if n == 0 {
            out.push(span);
        } else {
            let rest: String = span.content.chars().skip(n).collect();
            out.push(Span::styled(rest, span.style));
            n = 0;
        }
    }
    out
}
