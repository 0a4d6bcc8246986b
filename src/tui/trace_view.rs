//! The trace overlay (`T` on a version): its latest `rung trace`, the sections' statistics over
//! a timeline with one row per SM. A timeline cell shows the section that took most of that
//! slice of time on that SM (its initial, in its colour); `+`/`-` zoom, left/right scroll,
//! up/down move through the SMs.

use std::path::Path;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Widget};

use rung_core::model::trace::TraceRecord;

use crate::theme::{Role, Theme};

/// A loaded trace: the record, and its intervals from the trace-event file.
#[derive(Debug, Clone)]
pub struct TraceView {
    pub record: TraceRecord,
    /// The record is of the version's file as it is now.
    pub current: bool,
    /// (SM, section index in `record.summary.sections`, start µs, end µs).
    pub events: Vec<(u32, usize, f64, f64)>,
    pub sms: Vec<u32>,
    pub span_us: f64,
}

impl TraceView {
    /// The latest trace of version `id`, or why there is none to show.
    pub fn load(root: &Path, state_dir: &Path, id: &str, source_hash: Option<&str>) -> Result<TraceView, String> {
        let record = rung_core::stages::trace::latest_in(state_dir, id).ok_or_else(|| {
            format!("no trace of {id} yet: `rung trace {id}` records one on a machine with a GPU (a .cu version with rung_trace.cuh's markers, a .ptx version with `// rung_trace` lines, a Triton, CuTe DSL or TileLang version with rung_trace.py's, rung_trace_cute.py's or rung_trace_tilelang.py's)")
        })?;
        let names: Vec<&str> = record.summary.sections.iter().map(|s| s.name.as_str()).collect();
        let events_file = root.join(&record.chrome_trace);
        let v: serde_json::Value = std::fs::read(&events_file)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| format!("the trace's event file {} cannot be read", events_file.display()))?;
        let mut events = Vec::new();
        for e in v["traceEvents"].as_array().into_iter().flatten().filter(|e| e["ph"] == "X") {
            let (Some(name), Some(sm), Some(ts), Some(dur)) =
                (e["name"].as_str(), e["pid"].as_u64(), e["ts"].as_f64(), e["dur"].as_f64())
            else {
                continue;
            };
            if let Some(i) = names.iter().position(|n| *n == name) {
                events.push((sm as u32, i, ts, ts + dur));
            }
        }
        let mut sms: Vec<u32> = events.iter().map(|e| e.0).collect();
        sms.sort_unstable();
        sms.dedup();
        let span_us = events.iter().map(|e| e.3).fold(record.summary.span_ns as f64 / 1e3, f64::max);
        let current = source_hash == Some(record.source_hash.as_str());
        Ok(TraceView { record, current, events, sms, span_us })
    }
}

/// Microseconds as the trace's tables print durations.
fn time(us: f64) -> String {
    rung_core::model::trace::duration_label(us * 1e3)
}

/// The overlay: title, statistics, then the timeline from `offset` (a share of the span) over
/// a window of `1/zoom` of it, rows from SM index `top`.
pub fn draw(view: &TraceView, theme: &Theme, zoom: u32, offset: f64, top: usize, body: Rect, buf: &mut Buffer) {
    let r = &view.record;
    let s = &r.summary;
    let sizes: Vec<String> = r.sizes.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let stale = if view.current { "" } else { " · of an earlier file" };
    let title =
        format!(" {} trace · {} · {}{stale} · Esc closes · +/- zoom · h/l scroll ", r.version, sizes.join(" "), r.arch);
    let block =
        Block::bordered().title(title).border_style(theme.fg(if view.current { Role::Accent } else { Role::Warning }));
    let inner = block.inner(body);
    Clear.render(body, buf);
    block.render(body, buf);
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let mut lines = vec![Line::from(format!(
        "{} {} leaders on {} SMs, {} from the first record to the last; launch {:.3} ms{}",
        s.streams,
        r.leader.as_str(),
        s.sms,
        time(s.span_ns as f64 / 1e3),
        r.launch_ms,
        match (r.untraced_median_ms, &r.untraced_basis) {
            (Some(m), Some(b)) => format!("; untraced {b} median {:.1} µs", m * 1e3),
            _ => String::new(),
        }
    ))];
    lines.push(Line::from(Span::styled(
        format!("  {:16} {:>7} {:>10} {:>10} {:>6}  per-SM mean", "section", "calls", "median", "p99", "share"),
        bold,
    )));
    for (i, x) in s.sections.iter().enumerate() {
        let colour = theme.paint(Style::new().fg(theme.series(i)));
        lines.push(Line::from(vec![
            Span::styled(format!("{} ", initial(&x.name)), colour.add_modifier(Modifier::REVERSED)),
            Span::styled(format!("{:16}", x.name), colour),
            Span::raw(format!(
                " {:>7} {:>10} {:>10} {:>5.1}%  {}–{}",
                x.calls,
                time(x.median_ns / 1e3),
                time(x.p99_ns / 1e3),
                x.share * 100.0,
                time(x.sm_mean_min_ns / 1e3),
                time(x.sm_mean_max_ns / 1e3)
            )),
        ]));
    }
    if s.dropped > 0 || s.unmatched_begins + s.unmatched_ends > 0 {
        lines.push(Line::from(Span::styled(
            format!(
                "! {} records dropped (buffer {}); unmatched begins {}, ends {}",
                s.dropped, s.capacity, s.unmatched_begins, s.unmatched_ends
            ),
            theme.fg(Role::Warning),
        )));
    }
    // The timeline under the table.
    let label = 8usize;
    let cols = usize::from(inner.width).saturating_sub(label + 1).max(1);
    let window = view.span_us / f64::from(zoom.max(1));
    let start = offset.clamp(0.0, 1.0 - 1.0 / f64::from(zoom.max(1))) * view.span_us;
    lines.push(Line::from(""));
    let axis_end = time(start + window);
    let axis_start = time(start);
    let pad = cols.saturating_sub(axis_start.chars().count() + axis_end.chars().count());
    lines.push(Line::from(Span::styled(
        format!("{:label$} {axis_start}{}{axis_end}", "", " ".repeat(pad)),
        theme.fg(Role::Dim),
    )));
    let room = usize::from(inner.height).saturating_sub(lines.len());
    for &sm in view.sms.iter().skip(top).take(room) {
        // Per column, the time each section spent in it on this SM.
        let mut cells = vec![vec![0.0f64; s.sections.len()]; cols];
        let width = window / cols as f64;
        for &(_, i, a, b) in view.events.iter().filter(|e| e.0 == sm) {
            let (a, b) = (a.max(start), b.min(start + window));
            if b <= a {
                continue;
            }
            let first = ((a - start) / width).floor() as usize;
            let last = (((b - start) / width).ceil() as usize).min(cols);
            for (c, cell) in cells.iter_mut().enumerate().take(last).skip(first) {
                let (lo, hi) = (start + c as f64 * width, start + (c + 1) as f64 * width);
                cell[i] += (b.min(hi) - a.max(lo)).max(0.0);
            }
        }
        let mut spans = vec![Span::styled(format!("{:>label$} ", format!("SM {sm}")), theme.fg(Role::Dim))];
        for cell in cells {
            let best =
                cell.iter().enumerate().filter(|(_, t)| **t > 0.0).max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i);
            spans.push(match best {
                Some(i) => Span::styled(
                    initial(&s.sections[i].name).to_string(),
                    theme.paint(Style::new().fg(theme.series(i)).add_modifier(Modifier::REVERSED)),
                ),
                None => Span::raw("·"),
            });
        }
        lines.push(Line::from(spans));
    }
    if view.sms.len() > top + room {
        let below = view.sms.len() - top - room;
        if let Some(last) = lines.last_mut() {
            last.spans.push(Span::styled(format!(" +{below} SMs"), theme.fg(Role::Dim)));
        }
    }
    Paragraph::new(lines).render(inner, buf);
}

/// A section's letter in the timeline.
fn initial(name: &str) -> char {
    name.chars().next().map_or('?', |c| c.to_ascii_uppercase())
}
