//! Plain-terminal renderings. Pure functions of their inputs, so they are easy to test.

use std::fmt::Write as _;

use rung::diag::Severity;
use rung::exit;
use rung::gpu::GpuProbe;
use rung::model::report::{CheckReport, Stage, Verdict};
use rung::store::{ResultRow, Store, StoreError};
use rung::toolchain::{PYTHON_PACKAGES, Toolchain};
use rung::workspace::Workspace;

fn paint(code: &str, text: &str, on: bool) -> String {
    if on { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_string() }
}

fn verdict_cell(v: Option<Verdict>, on: bool) -> String {
    match v {
        None => paint("2", "·", on),
        Some(v) => {
            let code = match v {
                Verdict::Pass => "32",
                Verdict::Skipped => "2",
                Verdict::Fail => "31",
                Verdict::Error => "35",
            };
            paint(code, v.symbol(), on)
        }
    }
}

/// The stages shown as columns of the status table.
const COLUMNS: [Stage; 6] = [Stage::Prepare, Stage::Build, Stage::Run, Stage::Check, Stage::Bench, Stage::Roofline];

pub fn status(ws: &Workspace, store: &Store, on: bool) -> Result<String, StoreError> {
    let mut out = String::new();
    let name = ws.spec.as_ref().map_or("(unnamed problem)", |s| s.name.as_str());
    let _ = writeln!(out, "{}  {}  ({:?} workspace)", paint("1", name, on), ws.root.display(), ws.format);
    if let Some(desc) = ws.spec.as_ref().map(|s| s.description.as_str()).filter(|d| !d.is_empty()) {
        let _ = writeln!(out, "{desc}");
    }
    for d in &ws.diagnostics {
        let _ = writeln!(out, "{}", paint(if d.is_error() { "31" } else { "33" }, &d.to_string(), on));
    }
    let _ = writeln!(out);
    let head: Vec<String> =
        ["prep", "build", "run", "check", "bench", "roof"].iter().map(|h| format!("{h:<5}")).collect();
    let _ = writeln!(out, "  {:<8} {:<9} {:<9} {}  LATEST", "VERSION", "KIND", "STATUS", head.join(" "));
    for v in &ws.versions {
        // Only results of the file as it is now.
        let results = rung::service::results(ws, store, v)?;
        let all = &results.all;
        let latest: Vec<&ResultRow> = results.current().collect();
        let verdict_of =
            |stage: Stage| latest.iter().find(|r| r.stage == stage.name()).and_then(|r| Verdict::parse(&r.verdict));
        let cells: Vec<String> = COLUMNS.iter().map(|s| format!("{:<5}", verdict_cell(verdict_of(*s), on))).collect();
        let status = store.version(&v.id)?.map_or("new", |r| r.status.as_str());
        let last = match (latest.last(), all.is_empty()) {
            (Some(r), _) => summary_of(r),
            (None, true) => "not checked yet".into(),
            (None, false) => format!("edited since its last check: `rung check {}`", v.id),
        };
        let _ = writeln!(out, "  {:<8} {:<9} {:<9} {}  {}", v.id, v.kind.name(), status, cells.join(" "), last);
    }
    if ws.versions.is_empty() {
        let _ = writeln!(out, "  (no versions yet: add one to versions/, e.g. versions/v001-naive.cu)");
    }
    let _ = writeln!(
        out,
        "\n  {} pass  {} skipped  {} fail  {} error  · not run",
        Verdict::Pass.symbol(),
        Verdict::Skipped.symbol(),
        Verdict::Fail.symbol(),
        Verdict::Error.symbol(),
    );
    Ok(out)
}

fn summary_of(r: &ResultRow) -> String {
    let s = r.payload.get("summary").and_then(|s| s.as_str()).unwrap_or("");
    format!("{}: {s}", r.stage)
}

pub fn check_report(r: &CheckReport, on: bool) -> String {
    let mut out = String::new();
    for d in &r.diagnostics {
        let _ = writeln!(out, "{}", paint(if d.is_error() { "31" } else { "33" }, &d.to_string(), on));
    }
    for v in &r.versions {
        let _ = writeln!(
            out,
            "{} {}  {}  ({})",
            verdict_cell(Some(v.verdict), on),
            paint("1", &v.id, on),
            v.path.display(),
            v.kind
        );
        if let Some(ran) = v.ran_on.as_ref().filter(|r| r.runner.is_some()) {
            let via = ran.runner.as_deref().unwrap_or_default();
            let _ = writeln!(out, "    {}", paint("2", &format!("ran on {} via {via}", ran.describe()), on));
        }
        for s in &v.stages {
            let _ = writeln!(
                out,
                "    {} {:<9} {}  {}",
                verdict_cell(Some(s.verdict), on),
                s.stage.name(),
                s.summary,
                paint("2", &format!("{:.0} ms", s.duration_ms), on)
            );
            for d in &s.diagnostics {
                let code = match d.severity {
                    Severity::Error => "31",
                    Severity::Warning => "33",
                    Severity::Note => "36",
                };
                let text = d.to_string();
                let mut lines = text.lines();
                if let Some(first) = lines.next() {
                    let _ = writeln!(out, "      {}", paint(code, first, on));
                }
                out.push_str(&snippet(&r.workspace, d, code, on));
                for line in lines {
                    let _ = writeln!(out, "      {line}");
                }
            }
        }
    }
    out.push_str(&summary_line(r));
    out.push('\n');
    out
}

/// The check's last line. It says "passed" only when the exit code does: a check that exits
/// otherwise leads with why.
pub fn summary_line(r: &CheckReport) -> String {
    // A skipped rung did not run: a version whose other rungs passed has passed what ran.
    let pass = r.versions.iter().filter(|v| matches!(v.verdict, Verdict::Pass | Verdict::Skipped)).count();
    let skipped = r.versions.iter().filter(|v| v.verdict == Verdict::Skipped).count();
    let note = if skipped > 0 { format!(", {skipped} with rungs skipped") } else { String::new() };
    let n = r.versions.len();
    let tail = format!("(seed {}, exit {})", r.seed, r.exit_code);
    if r.exit_code == exit::OK {
        return format!("{pass} of {n} versions passed every rung that ran{note} {tail}");
    }
    let why = match r.exit_code {
        exit::WORKSPACE_INVALID => {
            let errors = r.diagnostics.iter().filter(|d| d.is_error()).count();
            format!("the workspace is invalid ({errors} error{} above)", if errors == 1 { "" } else { "s" })
        }
        exit::INTERNAL => "rung or a tool broke (see above)".into(),
        exit::BUILD_FAILED => "a version does not build".into(),
        exit::CHECK_FAILED => "a version is wrong".into(),
        exit::REGRESSION => "a bench regressed".into(),
        _ => "the check did not pass".into(),
    };
    let failed = n - pass;
    format!("{why}: {failed} of {n} versions failed a rung{note} {tail}")
}

/// The diagnostic's source line with a caret under its column, as compilers print it.
fn snippet(root: &std::path::Path, d: &rung::diag::Diagnostic, code: &str, on: bool) -> String {
    if d.line == 0 {
        return String::new();
    }
    let Ok(text) = std::fs::read_to_string(root.join(&d.file)) else { return String::new() };
    let Some(src) = text.lines().nth(d.line as usize - 1) else { return String::new() };
    let num = d.line.to_string();
    let mut out = format!("      {} | {}\n", paint("2", &num, on), src.trim_end());
    if d.column > 0 {
        // Tabs keep their width so the caret lines up.
        let pad: String = src.chars().take(d.column as usize - 1).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
        let _ = writeln!(out, "      {} | {pad}{}", " ".repeat(num.len()), paint(code, "^", on));
    }
    out
}

pub fn history(rows: &[ResultRow], on: bool) -> String {
    let mut out = String::new();
    if rows.is_empty() {
        return "no results yet: run `rung check`\n".into();
    }
    for r in rows {
        let when = humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(r.started_at_ms.max(0) as u64),
        );
        let v = Verdict::parse(&r.verdict);
        let summary = r.payload.get("summary").and_then(|s| s.as_str()).unwrap_or("");
        let _ = writeln!(out, "{:>6}  {when}  {:<6} {:<9} {} {summary}", r.id, r.version, r.stage, verdict_cell(v, on));
    }
    out
}

pub fn unified_diff(a: &(String, String), b: &(String, String), on: bool) -> String {
    let diff = similar::TextDiff::from_lines(&a.1, &b.1);
    let text = diff.unified_diff().context_radius(3).header(&a.0, &b.0).to_string();
    if !on {
        return text;
    }
    text.lines()
        .map(|l| {
            let code = if l.starts_with("+++") || l.starts_with("---") {
                "1"
            } else if l.starts_with('+') {
                "32"
            } else if l.starts_with('-') {
                "31"
            } else if l.starts_with("@@") {
                "36"
            } else {
                ""
            };
            if code.is_empty() { format!("{l}\n") } else { format!("{}\n", paint(code, l, true)) }
        })
        .collect()
}

pub fn doctor(tc: &Toolchain, gpu: &GpuProbe, on: bool) -> String {
    let mut out = String::new();
    let mut line = |ok: bool, what: &str, found: String, missing: &str| {
        let mark = if ok { paint("32", "✓", on) } else { paint("33", "✗", on) };
        let text = if ok { found } else { paint("33", missing, on) };
        let _ = writeln!(out, "{mark} {what:<18} {text}");
    };
    let tool = |t: &Option<rung::toolchain::Tool>| {
        t.as_ref()
            .map(|t| format!("{} {} (via {})", t.path.display(), t.version.as_deref().unwrap_or("?"), t.found_via))
            .unwrap_or_default()
    };
    match gpu.first() {
        Some(g) => line(
            true,
            "GPU",
            format!(
                "{} ({}, {} SMs, {:.0} GiB, {})",
                g.name,
                g.arch(),
                g.sm_count,
                g.memory_bytes as f64 / (1u64 << 30) as f64,
                g.uuid
            ),
            "",
        ),
        None => line(
            false,
            "GPU",
            String::new(),
            &format!(
                "none: {}; run, check and bench are skipped, build and diffs work",
                gpu.absent_reason.as_deref().unwrap_or("unknown")
            ),
        ),
    }
    line(
        tc.nvcc.is_some(),
        "nvcc",
        tool(&tc.nvcc),
        "not found: CUDA versions build through NVRTC if present; run `rung setup`",
    );
    line(
        tc.ptxas.is_some(),
        "ptxas",
        tool(&tc.ptxas),
        "not found: .ptx versions cannot be assembled; run `rung setup`",
    );
    line(
        tc.cuobjdump.is_some() || tc.nvdisasm.is_some(),
        "cuobjdump/nvdisasm",
        format!("{} {}", tool(&tc.cuobjdump), tool(&tc.nvdisasm)),
        "not found: no SASS; run `rung setup`",
    );
    line(
        tc.nvrtc_lib_dir.is_some(),
        "NVRTC",
        tc.nvrtc_lib_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default(),
        "not found: no in-process CUDA compiles; run `rung setup`",
    );
    line(
        tc.cupti.is_some(),
        "CUPTI",
        tc.cupti.as_ref().map(|d| d.display().to_string()).unwrap_or_default(),
        "not found: benches are timed by events (set RUNG_CUPTI to libcupti.so.13)",
    );
    match &tc.python {
        Some(p) => {
            line(true, "python", format!("{} {} (via {})", p.path.display(), p.version, p.found_via), "");
            for (import, dist, enables) in PYTHON_PACKAGES {
                let v = p.packages.get(*import);
                line(v.is_some(), dist, v.cloned().unwrap_or_default(), &format!("not installed: disables {enables}"));
            }
        }
        None => {
            line(false, "python", String::new(), "no python3: Python references, Triton and user checks are disabled")
        }
    }
    line(tc.ncu.is_some(), "ncu", tool(&tc.ncu), "not found: the profile rung is disabled (install Nsight Compute)");
    line(
        tc.compute_sanitizer.is_some(),
        "compute-sanitizer",
        tool(&tc.compute_sanitizer),
        "not found: memcheck/racecheck rungs are disabled",
    );
    let sandbox = rung::sandbox::describe();
    line(sandbox.starts_with("strict: "), "sandbox", sandbox.clone(), &sandbox);
    out
}

/// Pads or cuts `s` to `w` display columns.
fn fit(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n <= w {
        format!("{s}{}", " ".repeat(w - n))
    } else {
        format!("{}…", s.chars().take(w.saturating_sub(1)).collect::<String>())
    }
}

/// A side's text with its changed spans emphasised.
fn emphasise(side: &rung::asm::diff::Side, base: &str, on: bool) -> String {
    if !on || side.changed.is_empty() {
        return paint(base, &side.text, on);
    }
    let mut out = String::new();
    let mut at = 0;
    for &(s, e) in &side.changed {
        out.push_str(&paint(base, &side.text[at..s], on));
        out.push_str(&paint(&format!("{base};1;4"), &side.text[s..e], on));
        at = e;
    }
    out.push_str(&paint(base, &side.text[at..], on));
    out
}

/// The mix table: every class and memory width that differs, then the rest.
fn mix_table(k: &rung::asm::diff::KernelDiff, a: &str, b: &str, on: bool) -> String {
    use std::collections::BTreeSet;
    let (Some(l), Some(r)) = (&k.left_mix, &k.right_mix) else { return String::new() };
    let mut out = format!("  {:<32} {:>8} {:>8}\n", "instruction mix", a, b);
    let row = |name: &str, x: usize, y: usize| {
        let text = format!(
            "  {:<32} {:>8} {:>8}{}\n",
            name,
            x,
            y,
            if x != y { format!("  {:+}", y as i64 - x as i64) } else { String::new() }
        );
        if x != y { paint("1", &text, on) } else { text }
    };
    out.push_str(&row("instructions", l.instructions, r.instructions));
    let classes: BTreeSet<&String> = l.classes.keys().chain(r.classes.keys()).collect();
    for c in classes {
        out.push_str(&row(c, l.count(c), r.count(c)));
    }
    for (ml, mr) in [(&l.memory, &r.memory), (&l.tensor, &r.tensor)] {
        let keys: BTreeSet<&String> = ml.keys().chain(mr.keys()).collect();
        for key in keys {
            out.push_str(&row(
                &format!("  {key}"),
                ml.get(key).copied().unwrap_or(0),
                mr.get(key).copied().unwrap_or(0),
            ));
        }
    }
    out
}

/// A run of changed rows in unified layout: all removed lines, then all added ones.
fn flush_unified(out: &mut String, pending: &mut Vec<&rung::asm::diff::Row>, on: bool) {
    for x in pending.iter().filter_map(|r| r.left.as_ref()) {
        let _ = writeln!(out, "{} {}", paint("31", "-", on), emphasise(x, "31", on));
    }
    for x in pending.iter().filter_map(|r| r.right.as_ref()) {
        let _ = writeln!(out, "{} {}", paint("32", "+", on), emphasise(x, "32", on));
    }
    pending.clear();
}

pub fn asm_diff(d: &rung::asm::diff::AsmDiff, a: &str, b: &str, side_by_side: bool, width: usize, on: bool) -> String {
    use rung::asm::diff::RowKind;
    let mut out = String::new();
    for k in &d.kernels {
        let name = match (&k.left, &k.right) {
            (Some(l), Some(r)) if l == r => l.clone(),
            (Some(l), Some(r)) => format!("{l} → {r}"),
            (Some(l), None) => format!("{l} (only in {a})"),
            (None, Some(r)) => format!("{r} (only in {b})"),
            (None, None) => continue,
        };
        let _ = writeln!(
            out,
            "{}",
            paint("1;36", &format!("━━ {name}  {a} → {b}  −{} +{} lines", k.deleted, k.inserted), on)
        );
        out.push_str(&mix_table(k, a, b, on));
        if k.hunks.is_empty() {
            let _ = writeln!(out, "  (no differences)");
            continue;
        }
        let col = width.saturating_sub(5) / 2;
        for &(s, e) in &k.hunks {
            let block = k.rows[s].block.as_deref().map(|b| format!(" in {b}")).unwrap_or_default();
            let first = |f: fn(&rung::asm::diff::Row) -> Option<&rung::asm::diff::Side>| {
                k.rows[s..e].iter().find_map(|r| f(r).map(|x| x.line + 1)).unwrap_or(0)
            };
            let _ = writeln!(
                out,
                "{}",
                paint(
                    "36",
                    &format!("@@ {a}:{} {b}:{}{block} @@", first(|r| r.left.as_ref()), first(|r| r.right.as_ref())),
                    on
                )
            );
            let mut pending: Vec<&rung::asm::diff::Row> = Vec::new();
            for r in &k.rows[s..e] {
                let (code, mark) = match r.kind {
                    RowKind::Equal => ("", ' '),
                    RowKind::Delete => ("31", '-'),
                    RowKind::Insert => ("32", '+'),
                    RowKind::Replace => ("33", '~'),
                };
                if side_by_side {
                    let l = r.left.as_ref().map(|x| fit(&x.text, col)).unwrap_or_else(|| " ".repeat(col));
                    let rt = r.right.as_ref().map(|x| fit(&x.text, col)).unwrap_or_default();
                    let (l, rt) = if on && r.kind != RowKind::Equal {
                        let lcode = if r.kind == RowKind::Insert {
                            ""
                        } else if r.kind == RowKind::Replace {
                            "33"
                        } else {
                            "31"
                        };
                        let rcode = if r.kind == RowKind::Delete {
                            ""
                        } else if r.kind == RowKind::Replace {
                            "33"
                        } else {
                            "32"
                        };
                        let ls = r.left.as_ref().map_or(l.clone(), |x| {
                            let fitted = rung::asm::diff::Side {
                                text: fit(&x.text, col),
                                changed: x.changed.iter().copied().filter(|&(_, e)| e <= col).collect(),
                                ..x.clone()
                            };
                            emphasise(&fitted, lcode, on)
                        });
                        let rs = r.right.as_ref().map_or(rt.clone(), |x| {
                            let fitted = rung::asm::diff::Side {
                                text: fit(&x.text, col),
                                changed: x.changed.iter().copied().filter(|&(_, e)| e <= col).collect(),
                                ..x.clone()
                            };
                            emphasise(&fitted, rcode, on)
                        });
                        (ls, rs)
                    } else {
                        (l, rt)
                    };
                    let _ = writeln!(out, "{mark} {l} │ {rt}");
                } else if r.kind == RowKind::Equal {
                    flush_unified(&mut out, &mut pending, on);
                    let text = r.left.as_ref().map_or("", |x| x.text.as_str());
                    let ext = if d.kind == rung::asm::AsmKind::Sass { "sass" } else { "ptx" };
                    let shown = if on { rung::highlight::ansi_lines(ext, [text]).remove(0) } else { text.to_string() };
                    let _ = writeln!(out, "  {shown}");
                } else {
                    let _ = code;
                    pending.push(r);
                }
            }
            flush_unified(&mut out, &mut pending, on);
        }
    }
    out
}

/// A percentage, or `-` when the tool did not report it.
fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:.1}%"))
}

/// `rung profile`'s result: per kernel, what bounds it and the figures behind that, the stall
/// reasons and the SASS hot spots; or the sanitizer's findings at their lines.
pub fn profile(version: &str, r: &rung::model::report::StageResult, on: bool) -> String {
    use rung::model::report::StageDetail;
    let mut out = String::new();
    let _ = writeln!(out, "{} {} {}: {}", verdict_cell(Some(r.verdict), on), version, r.stage, r.summary);
    match &r.detail {
        StageDetail::Profile(p) => {
            let at = p.sizes.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ");
            for k in &p.kernels {
                let _ = writeln!(out, "\n{}  grid {} block {}  at {at}", paint("1", &k.kernel, on), k.grid, k.block);
                let _ = writeln!(out, "  duration            {:.2} µs", k.duration_us);
                let _ = writeln!(out, "  bound               {}-bound: {}", k.bound.name(), k.why);
                let _ = writeln!(
                    out,
                    "  throughput          SM {}  memory {}  DRAM {}",
                    pct(k.sm_percent),
                    pct(k.memory_percent),
                    pct(k.dram_percent)
                );
                if let (Some(rd), Some(wr)) = (k.dram_read_bytes, k.dram_write_bytes) {
                    let gbs = k.dram_gbs.map(|g| format!("  ({g:.0} GB/s)")).unwrap_or_default();
                    let _ =
                        writeln!(out, "  DRAM bytes          {:.1} MB read, {:.1} MB written{gbs}", rd / 1e6, wr / 1e6);
                }
                let _ = writeln!(
                    out,
                    "  occupancy           {} achieved, {} theoretical{}",
                    pct(k.achieved_occupancy_percent),
                    pct(k.theoretical_occupancy_percent),
                    k.occupancy_limiter.as_deref().map(|l| format!(", limited by {l}")).unwrap_or_default()
                );
                let _ = writeln!(
                    out,
                    "  per thread / block  {} registers, {} B shared",
                    k.registers_per_thread.map_or("-".into(), |x| format!("{x:.0}")),
                    k.shared_bytes_per_block.map_or("-".into(), |x| format!("{x:.0}"))
                );
                let _ = writeln!(
                    out,
                    "  hit rates           L1 {}  L2 {}   tensor pipe {}",
                    pct(k.l1_hit_percent),
                    pct(k.l2_hit_percent),
                    pct(k.tensor_percent)
                );
                if !k.stalls.is_empty() {
                    let stalls: Vec<String> = k.stalls.iter().map(|(s, c)| format!("{s} {c:.1}")).collect();
                    let _ = writeln!(out, "  stalls (cycles per issued instruction)  {}", stalls.join(", "));
                }
                for h in k.hot_spots.iter().take(5) {
                    let _ = writeln!(out, "  hot  {:5.1}%  {}", h.percent, h.sass);
                }
            }
            if let Some(hash) = &p.report {
                let _ = writeln!(out, "\nreport: .rung/objects/{}/{} (ncu-ui opens it)", &hash[..2], &hash[2..]);
            }
        }
        StageDetail::Sanitizer(s) => {
            for d in &r.diagnostics {
                let _ = writeln!(out, "  {}: {}", d.location(), d.message);
                if let Some(h) = &d.help {
                    let _ = writeln!(out, "      {h}");
                }
            }
            if let Some(sum) = &s.summary {
                let _ = writeln!(out, "  {sum}");
            }
        }
        _ => {}
    }
    out
}
