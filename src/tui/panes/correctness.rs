//! The selected version's check rung, as the check stage recorded it: per test size and output,
//! the metrics (max abs and rel error, PSNR, cosine, mismatches, NaN/Inf) and why it failed; the
//! first mismatching elements with their multi-dimensional indices; the downsampled error map as a
//! heat map; then the user's `checks.py` rungs (ok, or the error and its traceback) and the
//! format's own check (GPU MODE, KernelBench).

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Widget, Wrap};
use rung_core::metrics::Comparison;
use rung_core::model::report::{Stage, StageDetail, Verdict};
use rung_core::stages::run::{CheckDetail, OutputCheck};
use rung_core::watch::JobKind;

use super::{SPINNER, sizes_label};
use crate::app::{App, VersionView, verdict_role};
use crate::layout::Pane;
use crate::theme::{Role, Theme};

/// Shades of the heat map, from no error to the largest.
const SHADES: [char; 5] = [' ', '░', '▒', '▓', '█'];

pub fn draw(app: &App, block: Block, area: Rect, buf: &mut Buffer) {
    let Some(v) = app.selected_version() else {
        Paragraph::new("no version selected").block(block).render(area, buf);
        return;
    };
    let block = block.title(format!(" {} ", v.id));
    let width = area.width.saturating_sub(2) as usize;
    let lines = lines(app, v, width, area.height.saturating_sub(2) as usize);
    let scroll = app.scroll.get(&Pane::Correctness).copied().unwrap_or(0);
    Paragraph::new(lines).block(block).wrap(Wrap { trim: false }).scroll((scroll, 0)).render(area, buf);
}

fn lines<'a>(app: &'a App, v: &'a VersionView, width: usize, height: usize) -> Vec<Line<'a>> {
    let t = &app.theme;
    let mut out = Vec::new();
    if app.running.get(&v.id) == Some(&JobKind::Gpu) || app.running.get(&v.id) == Some(&JobKind::Build) {
        let what = if app.running.get(&v.id) == Some(&JobKind::Build) { "building" } else { "running and checking" };
        out.push(Line::from(Span::styled(
            format!("{} {}: {what}…", SPINNER[app.frame % SPINNER.len()], v.id),
            t.fg(Role::Accent),
        )));
    }
    let Some(check) = v.results.get(&Stage::Check) else {
        let why = match RUNG_BEFORE_CHECK.iter().find_map(|s| v.results.get(s).filter(|r| r.verdict != Verdict::Pass)) {
            Some(r) => format!("not checked: {} {}: {}", r.stage, r.verdict.name(), r.summary),
            None => "not checked yet".to_string(),
        };
        out.push(Line::from(why));
        return out;
    };
    out.push(Line::from(vec![
        Span::styled(
            format!("check {}", check.verdict.name()),
            t.fg(verdict_role(check.verdict)).add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!("  {}", check.summary)),
    ]));
    let StageDetail::Check(detail) = &check.detail else { return out };
    let place = check
        .ran_on
        .as_ref()
        .map(|r| format!(" · ran on {} via {}", r.describe(), r.runner.as_deref().unwrap_or("this machine")))
        .unwrap_or_default();
    out.push(Line::styled(format!("seed {}{place}", detail.seed), t.fg(Role::Dim)));
    // A pass that deserves a second look says so before the figures.
    for w in &detail.warnings {
        out.push(Line::from(vec![
            Span::styled("⚠ ", t.fg(Role::Warning).add_modifier(Modifier::BOLD)),
            Span::styled(w.as_str(), t.fg(Role::Warning)),
        ]));
    }
    out.push(Line::from(""));
    metrics(t, detail, width, &mut out);
    // The error map and mismatches of the first output that failed, else of the first.
    // The named rungs before the map, so they stay on a small screen.
    let shown = detail.results.iter().find(|r| !r.pass).or(detail.results.first());
    if let Some(shown) = shown {
        mismatches(t, shown, &mut out);
    }
    user_rungs(t, detail, &mut out);
    if let Some(shown) = shown {
        let rows = height.saturating_sub(out.len() + 2).clamp(4, 32);
        heat_map(t, shown, width, rows, &mut out);
    }
    out
}

const RUNG_BEFORE_CHECK: [Stage; 3] = [Stage::Prepare, Stage::Build, Stage::Run];

/// One row per test size and output. The widths fit 80 columns with the sizes column shortened.
fn metrics<'a>(t: &Theme, d: &'a CheckDetail, width: usize, out: &mut Vec<Line<'a>>) {
    let fixed = 2 + 8 + 10 + 10 + 8 + 10 + 12 + 8;
    let size_w = width.saturating_sub(fixed).clamp(6, 24);
    let header = format!(
        "  {:<size_w$} {:<7} {:>9} {:>9} {:>7} {:>9} {:>11} {:>7}",
        "size", "output", "max abs", "max rel", "PSNR", "cosine", "mismatch", "NaN/Inf"
    );
    out.push(Line::styled(header, t.paint(Style::new().add_modifier(Modifier::BOLD))));
    for r in &d.results {
        let c = &r.comparison;
        let (mark, role) = if r.pass { ("✓", Role::Pass) } else { ("✗", Role::Fail) };
        let psnr = c.psnr.map_or_else(|| "∞".to_string(), |p| format!("{p:.1}"));
        let mut size = sizes_label(&r.sizes);
        if size.chars().count() > size_w {
            size = format!("{}…", size.chars().take(size_w - 1).collect::<String>());
        }
        let row = format!(
            " {:<size_w$} {:<7} {:>9} {:>9} {:>7} {:>9} {:>11} {:>7}",
            size,
            clip(&r.output, 7),
            sci(c.max_abs_err),
            sci(c.max_rel_err),
            psnr,
            format!("{:.6}", c.cosine),
            format!("{}/{}", c.mismatches, c.elements),
            format!("{}/{}", c.nan_count, c.inf_count),
        );
        out.push(Line::from(vec![Span::styled(mark, t.fg(role)), Span::raw(row)]));
        if let Some(reason) = &r.reason {
            out.push(Line::from(vec![Span::raw("    "), Span::styled(reason.as_str(), t.fg(Role::Fail))]));
        }
    }
}

fn mismatches<'a>(t: &Theme, r: &'a OutputCheck, out: &mut Vec<Line<'a>>) {
    let c = &r.comparison;
    if c.first_mismatches.is_empty() {
        return;
    }
    out.push(Line::from(""));
    // The check records the first mismatches it meets, in index order (not the largest).
    out.push(Line::styled(
        format!(
            "first {} of {} mismatches in {} at {}:",
            c.first_mismatches.len(),
            c.mismatches,
            r.output,
            sizes_label(&r.sizes)
        ),
        t.paint(Style::new().add_modifier(Modifier::BOLD)),
    ));
    let idx: Vec<String> = c.first_mismatches.iter().map(|m| format!("{:?}", m.index)).collect();
    let w = idx.iter().map(String::len).max().unwrap_or(0);
    for (m, i) in c.first_mismatches.iter().zip(idx) {
        out.push(Line::from(vec![
            Span::raw(format!("  {i:<w$}  output ")),
            Span::styled(format!("{:<12}", num(m.output)), t.fg(Role::Fail)),
            Span::raw(format!(" reference {:<12} |diff| {}", num(m.reference), sci((m.output - m.reference).abs()))),
        ]));
    }
}

/// The error map: each cell the max abs error of its block of elements, shaded against the
/// largest cell. Rows and columns are merged (by max) to fit the space given.
fn heat_map<'a>(t: &Theme, r: &'a OutputCheck, width: usize, max_rows: usize, out: &mut Vec<Line<'a>>) {
    let c: &Comparison = &r.comparison;
    let [rows, cols] = c.map_shape;
    if rows * cols == 0 || c.error_map.len() != rows * cols {
        return;
    }
    let top = c.error_map.iter().copied().filter(|e| e.is_finite()).fold(0f64, f64::max);
    out.push(Line::from(""));
    if top == 0.0 {
        out.push(Line::styled(format!("error map of {}: no error in any cell", r.output), t.fg(Role::Dim)));
        return;
    }
    // The check maps finite errors only; NaN and Inf are counted in the table instead.
    let left_out = if c.nan_count + c.inf_count > 0 { "; NaN/Inf not mapped" } else { "" };
    out.push(Line::styled(
        format!("error map of {} ({rows}×{cols} cells; █ = {}{left_out}):", r.output, sci(top)),
        t.paint(Style::new().add_modifier(Modifier::BOLD)),
    ));
    // Two characters per cell when there is room, so cells look square.
    let avail = width.saturating_sub(2).max(1);
    let cell_w = if cols * 2 <= avail { 2 } else { 1 };
    let shown_cols = cols.min(avail / cell_w).max(1);
    let shown_rows = rows.min(max_rows).max(1);
    for y in 0..shown_rows {
        let mut spans = vec![Span::raw("  ")];
        for x in 0..shown_cols {
            let e = block_max(c, rows, cols, (y, shown_rows), (x, shown_cols));
            let share = if top > 0.0 { e / top } else { 0.0 };
            let shade = SHADES[(share * (SHADES.len() - 1) as f64).ceil() as usize];
            spans.push(Span::styled(shade.to_string().repeat(cell_w), Style::new().fg(t.heat(share))));
        }
        out.push(Line::from(spans));
    }
}

/// The largest error of the map cells that fall in shown cell (y, x).
fn block_max(c: &Comparison, rows: usize, cols: usize, (y, ny): (usize, usize), (x, nx): (usize, usize)) -> f64 {
    let (r0, r1) = (y * rows / ny, ((y + 1) * rows / ny).max(y * rows / ny + 1));
    let (c0, c1) = (x * cols / nx, ((x + 1) * cols / nx).max(x * cols / nx + 1));
    let mut m = 0f64;
    for r in r0..r1.min(rows) {
        for col in c0..c1.min(cols) {
            let e = c.error_map[r * cols + col];
            m = m.max(e);
        }
    }
    m
}

fn user_rungs<'a>(t: &Theme, d: &'a CheckDetail, out: &mut Vec<Line<'a>>) {
    if d.user_rungs.is_empty() && d.own.is_empty() {
        return;
    }
    out.push(Line::from(""));
    out.push(Line::styled("named rungs (checks.py):", t.paint(Style::new().add_modifier(Modifier::BOLD))));
    if d.user_rungs.is_empty() {
        out.push(Line::styled("  none", t.fg(Role::Dim)));
    }
    for r in &d.user_rungs {
        let (mark, role) = if r.pass { ("✓", Role::Pass) } else { ("✗", Role::Fail) };
        let mut spans = vec![
            Span::raw("  "),
            Span::styled(mark, t.fg(role)),
            Span::raw(format!(" {} ({})", r.name, sizes_label(&r.sizes))),
        ];
        match &r.error {
            Some(e) => spans.push(Span::styled(format!(": {e}"), t.fg(Role::Fail))),
            None if r.pass => spans.push(Span::styled(" ok", t.fg(Role::Pass))),
            None => {}
        }
        out.push(Line::from(spans));
        if let Some(tb) = &r.traceback {
            out.extend(tb.lines().map(|l| Line::styled(format!("      {l}"), t.fg(Role::Dim))));
        }
    }
    for o in &d.own {
        let (mark, role) = if o.verdict.pass { ("✓", Role::Pass) } else { ("✗", Role::Fail) };
        out.push(Line::from(vec![
            Span::raw("  "),
            Span::styled(mark, t.fg(role)),
            Span::raw(format!(" the format's own check ({}): {}", sizes_label(&o.sizes), o.verdict.message)),
        ]));
    }
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}

/// Three significant digits in scientific notation; 0 as 0.
fn sci(x: f64) -> String {
    if x == 0.0 { "0".into() } else { format!("{x:.2e}") }
}

fn num(x: f64) -> String {
    if x.is_finite() && x.abs() >= 1e-3 && x.abs() < 1e6 { format!("{x:.6}") } else { format!("{x:.4e}") }
}
