//! The selected version's profile beside its parent's: per kernel, what bounds it and the numbers
//! behind that (Nsight Compute's duration, SM and memory throughput, DRAM bandwidth and traffic
//! against the roofline formula, occupancy and its limiter, registers, shared memory, cache hit
//! rates, tensor pipe), the changes coloured (better green, worse red), the stall reasons and
//! the SASS hot spots; above it all, the sanitizers' findings at their lines. `P` profiles, `M` runs
//! memcheck, Ctrl-r racecheck.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Widget, Wrap};
use rung_core::model::report::{Stage, StageDetail, StageResult};
use rung_core::profile::KernelProfile;
use rung_core::stages::profile::ProfileDetail;

use super::SPINNER;
use crate::app::{App, VersionView, verdict_role};
use crate::asm_view::Against;
use crate::layout::Pane;
use crate::theme::Role;

pub fn draw(app: &App, block: Block, area: Rect, buf: &mut Buffer) {
    let t = &app.theme;
    let Some(v) = app.selected_version() else {
        Paragraph::new("no version selected").block(block).render(area, buf);
        return;
    };
    let block = block.title(format!(" {} ", v.id));
    let mut lines: Vec<Line> = Vec::new();
    if let Some((id, tool)) = &app.profiling {
        lines.push(Line::styled(
            format!("{} {tool} of {id} running…", SPINNER[app.frame % SPINNER.len()]),
            t.fg(Role::Accent),
        ));
    }
    let parent = app
        .against_version(&Against::Parent)
        .ok()
        .and_then(|(id, label)| app.versions.iter().find(|w| w.id == id).map(|w| (w, label)));
    // The sanitizers' findings first: a bad access matters before any figure.
    for stage in [Stage::Memcheck, Stage::Racecheck] {
        if let Some(r) = v.results.get(&stage) {
            lines.push(Line::from(vec![
                Span::styled(
                    format!("{stage} {}", r.verdict.name()),
                    t.fg(verdict_role(r.verdict)).add_modifier(Modifier::BOLD),
                ),
                Span::raw(format!("  {}", r.summary)),
            ]));
            for d in &r.diagnostics {
                lines.push(Line::styled(format!("  {}: {}", d.location(), d.message), t.fg(Role::Fail)));
                if let Some(h) = &d.help {
                    lines.push(Line::styled(format!("    {h}"), t.fg(Role::Dim)));
                }
            }
            lines.push(Line::from(""));
        }
    }
    match v.results.get(&Stage::Profile) {
        Some(r) => profile_lines(app, v, r, parent, &mut lines),
        None => {
            lines.push(Line::from(format!("no profile of {} yet.", v.id)));
            lines.push(Line::styled(
                "P profiles it with Nsight Compute (one call at the first benchmark size), M runs memcheck, Ctrl-r racecheck. \
                 They need a GPU, and ncu or compute-sanitizer; `rung profile` does the same.",
                t.fg(Role::Dim),
            ));
        }
    }
    let scroll = app.scroll.get(&Pane::Profile).copied().unwrap_or(0);
    Paragraph::new(lines).block(block).wrap(Wrap { trim: false }).scroll((scroll, 0)).render(area, buf);
}

fn detail(r: &StageResult) -> Option<&ProfileDetail> {
    match &r.detail {
        StageDetail::Profile(p) => Some(p),
        _ => None,
    }
}

/// Which way is better for a figure: lower (time, registers, spills) or higher (throughput,
/// occupancy, hit rates); `None`: neither (it only describes).
#[derive(Clone, Copy)]
enum Better {
    Lower,
    Higher,
    Neither,
}

fn profile_lines<'a>(
    app: &'a App,
    v: &'a VersionView,
    r: &'a StageResult,
    parent: Option<(&'a VersionView, String)>,
    lines: &mut Vec<Line<'a>>,
) {
    let t = &app.theme;
    lines.push(Line::from(vec![
        Span::styled(
            format!("profile {}", r.verdict.name()),
            t.fg(verdict_role(r.verdict)).add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!("  {}", r.summary)),
    ]));
    let Some(p) = detail(r) else {
        lines.push(Line::styled(format!("recorded {}", r.started_at), t.fg(Role::Dim)));
        return;
    };
    let other = parent.as_ref().and_then(|(w, label)| Some((detail(w.results.get(&Stage::Profile)?)?, label.clone())));
    let sizes = p.sizes.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ");
    lines.push(Line::styled(
        match &other {
            Some((_, label)) => format!("at {sizes}; beside {label}, whose profile is the second column"),
            None => match &parent {
                Some((_, label)) => format!("at {sizes}; {label} has no profile to compare with"),
                None => format!("at {sizes}; no parent to compare with"),
            },
        },
        t.fg(Role::Dim),
    ));
    for k in &p.kernels {
        let theirs = other.as_ref().and_then(|(o, _)| {
            o.kernels.iter().find(|ok| ok.kernel == k.kernel).or_else(|| (o.kernels.len() == 1).then(|| &o.kernels[0]))
        });
        lines.push(Line::from(""));
        lines.push(Line::styled(
            format!("━━ {}  grid {} block {}  {}-bound", k.kernel, k.grid, k.block, k.bound.name()),
            t.fg(Role::Accent).add_modifier(Modifier::BOLD),
        ));
        lines.push(Line::from(format!("   {}", k.why)));
        let row = |name: &'static str, get: fn(&KernelProfile) -> Option<f64>, unit: &'static str, better: Better| {
            figure_line(app, name, get(k), theirs.and_then(get), unit, better)
        };
        lines.push(row("duration", |k| Some(k.duration_us), " µs", Better::Lower));
        lines.push(row("SM throughput", |k| k.sm_percent, "%", Better::Neither));
        lines.push(row("memory throughput", |k| k.memory_percent, "%", Better::Neither));
        lines.push(row("DRAM", |k| k.dram_gbs, " GB/s", Better::Neither));
        lines.push(row("achieved occupancy", |k| k.achieved_occupancy_percent, "%", Better::Higher));
        lines.push(row("registers/thread", |k| k.registers_per_thread, "", Better::Lower));
        lines.push(row("shared B/block", |k| k.shared_bytes_per_block, "", Better::Neither));
        lines.push(row("L1 hit", |k| k.l1_hit_percent, "%", Better::Higher));
        lines.push(row("L2 hit", |k| k.l2_hit_percent, "%", Better::Higher));
        lines.push(row("tensor pipe", |k| k.tensor_percent, "%", Better::Neither));
        if let Some(limit) = &k.occupancy_limiter {
            lines.push(Line::styled(format!("   occupancy limited by {limit}"), t.fg(Role::Dim)));
        }
        if !k.stalls.is_empty() {
            let stalls: Vec<String> = k.stalls.iter().take(3).map(|(s, c)| format!("{s} {c:.1}")).collect();
            lines.push(Line::from(format!("   stalls (cycles/instr): {}", stalls.join(", "))));
        }
        for h in k.hot_spots.iter().take(4) {
            lines.push(Line::styled(format!("   hot {:5.1}%  {}", h.percent, h.sass), t.fg(Role::Warning)));
        }
    }
    if let Some(ratio) = p.traffic_ratio {
        let role = if ratio > 1.05 { Role::Warning } else { Role::Pass };
        lines.push(Line::styled(
            format!("DRAM traffic {ratio:.2}x the bytes rung.toml's roofline formula counts"),
            t.fg(role),
        ));
    }
    lines.push(Line::styled(format!("recorded {} ({})", r.started_at, v.id), t.fg(Role::Dim)));
}

/// `   name       this   other   Δ` with the change coloured by which way is better.
fn figure_line<'a>(
    app: &App,
    name: &str,
    this: Option<f64>,
    other: Option<f64>,
    unit: &str,
    better: Better,
) -> Line<'a> {
    let t = &app.theme;
    let show = |x: Option<f64>| {
        x.map_or("-".to_string(), |x| if x.abs() >= 100.0 { format!("{x:.0}{unit}") } else { format!("{x:.1}{unit}") })
    };
    let mut spans = vec![Span::raw(format!("   {name:<19}{:>12}", show(this)))];
    if let (Some(a), Some(b)) = (this, other) {
        spans.push(Span::styled(format!("{:>12}", show(other)), t.fg(Role::Dim)));
        if (a - b).abs() > 1e-9 {
            // Shares of a peak change by points; other figures by their ratio.
            let change = if unit == "%" {
                format!("  {:+.1} pt", a - b)
            } else if b != 0.0 {
                format!("  {:+.1}%", 100.0 * (a - b) / b.abs())
            } else {
                String::new()
            };
            let role = match better {
                Better::Lower if a < b => Role::Pass,
                Better::Higher if a > b => Role::Pass,
                Better::Neither => Role::Text,
                _ => Role::Fail,
            };
            spans.push(Span::styled(change, t.fg(role)));
        }
    }
    Line::from(spans)
}
