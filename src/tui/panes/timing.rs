//! The timing history: one chart per GPU (the bench records its name and UUID), every version's
//! newest passing bench median (first benchmark size) with its min–max whisker, the reference's
//! and the roofline's times as lines where the results have them, the pinned baseline, and the
//! fastest version marked.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, LegendPosition, Paragraph, Widget};
use rung_core::watch::JobKind;

use super::SPINNER;
use super::versions::format_us;
use crate::app::{App, GpuTiming};
use crate::theme::Role;

/// Charts side by side at most; more GPUs are listed by name.
const MAX_CHARTS: usize = 3;

pub fn draw(app: &App, block: Block, area: Rect, buf: &mut Buffer) {
    let benching: Vec<&str> =
        app.running.iter().filter(|(_, j)| **j == JobKind::Gpu).map(|(v, _)| v.as_str()).collect();
    let block = if benching.is_empty() {
        block
    } else {
        block.title(Span::styled(
            format!(" {} running {} ", SPINNER[app.frame % SPINNER.len()], benching.join(", ")),
            app.theme.fg(Role::Accent),
        ))
    };
    if app.timing.is_empty() {
        Paragraph::new(
            "no bench in the history yet: a version is benched once it passes its check, on a machine with a GPU",
        )
        .block(block)
        .render(area, buf);
        return;
    }
    let inner = block.inner(area);
    block.render(area, buf);
    let shown = &app.timing[..app.timing.len().min(MAX_CHARTS)];
    let mut rows = vec![Constraint::Fill(1); shown.len()];
    let more = app.timing.len() > MAX_CHARTS;
    if more {
        rows.push(Constraint::Length(1));
    }
    let areas = Layout::vertical(rows).split(inner);
    for (i, (gpu, area)) in shown.iter().zip(areas.iter()).enumerate() {
        chart(app, i, gpu, *area, buf);
    }
    if more {
        let rest: Vec<&str> = app.timing[MAX_CHARTS..].iter().map(|g| g.gpu.as_str()).collect();
        Line::from(format!("also benched on: {} (zoom does not show them yet)", rest.join(", ")))
            .render(areas[areas.len() - 1], buf);
    }
}

fn chart(app: &App, i: usize, gpu: &GpuTiming, area: Rect, buf: &mut Buffer) {
    let t = &app.theme;
    let n = app.versions.len().max(1);
    let (x0, x1) = if n == 1 { (-1.0, 1.0) } else { (0.0, (n - 1) as f64) };
    let medians: Vec<(f64, f64)> = gpu.points.iter().map(|p| (p.ordinal as f64, p.median_us)).collect();
    // Every point's min–max whisker as dots one braille row apart, all in one dataset: a dataset
    // per whisker made a canvas each, and 200 versions took 10 ms a frame.
    let rows = (area.height as usize * 4).max(2);
    let whiskers: Vec<(f64, f64)> = gpu
        .points
        .iter()
        .flat_map(|p| {
            let steps = if p.max_us > p.min_us { rows } else { 1 };
            (0..steps).map(move |j| {
                (p.ordinal as f64, p.min_us + (p.max_us - p.min_us) * j as f64 / (steps - 1).max(1) as f64)
            })
        })
        .collect();
    let best = gpu.best();
    let best_point: Vec<(f64, f64)> = best.map(|b| vec![(b.ordinal as f64, b.median_us)]).unwrap_or_default();
    let level = |y: f64| vec![(x0, y), (x1, y)];
    let reference = gpu.reference_us.map(level);
    let roofline = gpu.roofline_us.map(level);
    let baseline = app.baseline.as_ref().and_then(|id| gpu.points.iter().find(|p| &p.version == id));
    let baseline_line = baseline.map(|p| level(p.median_us));

    let mut sets = Vec::new();
    sets.push(
        Dataset::default()
            .data(&whiskers)
            .graph_type(GraphType::Scatter)
            .marker(Marker::Braille)
            .style(t.fg(Role::Dim)),
    );
    if let (Some(r), Some(us)) = (&reference, gpu.reference_us) {
        sets.push(
            Dataset::default()
                .name(format!("reference {} µs", format_us(us)))
                .data(r)
                .graph_type(GraphType::Line)
                .marker(Marker::Braille)
                .style(t.fg(Role::Reference)),
        );
    }
    if let (Some(r), Some(us)) = (&roofline, gpu.roofline_us) {
        sets.push(
            Dataset::default()
                .name(format!("roofline {} µs", format_us(us)))
                .data(r)
                .graph_type(GraphType::Line)
                .marker(Marker::Braille)
                .style(t.fg(Role::Roofline)),
        );
    }
    if let (Some(l), Some(p)) = (&baseline_line, baseline) {
        sets.push(
            Dataset::default()
                .name(format!("baseline {}", p.version))
                .data(l)
                .graph_type(GraphType::Line)
                .marker(Marker::Braille)
                .style(t.fg(Role::Baseline)),
        );
    }
    sets.push(
        Dataset::default()
            .name("median (min–max)")
            .data(&medians)
            .graph_type(GraphType::Line)
            .marker(Marker::Braille)
            .style(Style::new().fg(t.series(i))),
    );
    if let Some(b) = best {
        sets.push(
            Dataset::default()
                .name(format!("★ best {} {} µs", b.version, format_us(b.median_us)))
                .data(&best_point)
                .graph_type(GraphType::Scatter)
                .marker(Marker::Block)
                .style(t.fg(Role::Best).add_modifier(Modifier::BOLD)),
        );
    }

    let top = gpu
        .points
        .iter()
        .map(|p| p.max_us)
        .chain(gpu.reference_us)
        .chain(gpu.roofline_us)
        .fold(0f64, f64::max)
        .max(1e-3)
        * 1.1;
    // Every version's id under its x, thinned to fit.
    let every = (n * 6).div_ceil(area.width.max(1) as usize).max(1);
    let x_labels: Vec<Line> = if n == 1 {
        vec![Line::from(""), Line::from(app.versions.first().map_or("", |v| v.id.as_str())), Line::from("")]
    } else {
        app.versions
            .iter()
            .enumerate()
            .map(|(i, v)| Line::from(if i % every == 0 || i == n - 1 { v.id.as_str() } else { "" }))
            .collect()
    };
    let name = if gpu.uuid.is_empty() { gpu.gpu.clone() } else { format!("{} {}", gpu.gpu, short_uuid(&gpu.uuid)) };
    let edited = gpu.points.iter().filter(|p| !p.current).map(|p| p.version.as_str()).collect::<Vec<_>>();
    let mut title = vec![Span::styled(name, t.paint(Style::new().add_modifier(Modifier::BOLD)))];
    if !edited.is_empty() {
        title.push(Span::styled(format!("  edited since benched: {}", edited.join(", ")), t.fg(Role::Dim)));
    }
    if gpu.mixed_timers {
        title.push(Span::styled("  between events: the versions had different timers", t.fg(Role::Dim)));
    }
    let chart = Chart::new(sets)
        .block(Block::new().title(Line::from(title)))
        .x_axis(Axis::default().bounds([x0, x1]).labels(x_labels).style(t.fg(Role::Dim)))
        .y_axis(
            Axis::default()
                .title("µs")
                .bounds([0.0, top])
                .labels(vec![Line::from("0"), Line::from(format_us(top / 2.0)), Line::from(format_us(top))])
                .style(t.fg(Role::Dim)),
        )
        .legend_position(Some(LegendPosition::TopRight))
        // Always show the legend: it carries the figures the chart's lines stand for.
        .hidden_legend_constraints((Constraint::Percentage(100), Constraint::Percentage(100)));
    chart.render(area, buf);
}

/// `GPU-1a2b3c4d` of a longer UUID.
fn short_uuid(uuid: &str) -> String {
    uuid.chars().take(12).collect()
}
