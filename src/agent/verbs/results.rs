//! Checking versions and reading their results.

use std::fmt::Write as _;

use rung_core::check::{self, CheckOptions, Machine};
use rung_core::diag::Diagnostic;
use rung_core::model::report::{CheckReport, Verdict};
use rung_core::store::{ResultRow, VersionRow, sha256_hex};
use rung_core::workspace::{self};

use super::*;

pub(super) fn exit_words(code: i32) -> &'static str {
    match code {
        rung_core::exit::OK => "every rung that could run here passed",
        rung_core::exit::CHECK_FAILED => "a version ran but is wrong",
        rung_core::exit::BUILD_FAILED => "a version does not build",
        rung_core::exit::WORKSPACE_INVALID => "the workspace is invalid",
        rung_core::exit::INTERNAL => "rung or a tool broke (not the version's fault)",
        rung_core::exit::REGRESSION => "a benchmark regressed",
        _ => "see the versions below",
    }
}

pub(super) fn diagnostics_text(out: &mut String, diagnostics: &[Diagnostic], indent: &str) {
    for d in diagnostics.iter().take(TEXT_DIAGNOSTICS) {
        for line in d.to_string().lines() {
            let _ = writeln!(out, "{indent}{line}");
        }
    }
    if diagnostics.len() > TEXT_DIAGNOSTICS {
        let _ = writeln!(out, "{indent}… {} more in the structured result", diagnostics.len() - TEXT_DIAGNOSTICS);
    }
}

/// The text of a check: one line per stage, the diagnostics under the stage that produced them.
pub fn check_text(r: &CheckReport) -> String {
    let mut text = format!(
        "checked {} version{} · seed {} · exit code {}: {}\n",
        r.versions.len(),
        if r.versions.len() == 1 { "" } else { "s" },
        r.seed,
        r.exit_code,
        exit_words(r.exit_code)
    );
    diagnostics_text(&mut text, &r.diagnostics, "");
    for v in &r.versions {
        let _ = writeln!(
            text,
            "{} {} {} ({}, {}): {}",
            v.verdict.symbol(),
            v.id,
            v.path.display(),
            v.kind,
            v.status.as_str(),
            v.verdict
        );
        for s in &v.stages {
            let reason = s.reason.map(|r| format!(" [{}]", r.name())).unwrap_or_default();
            let _ = writeln!(text, "  {} {:<9} {}{reason}", s.verdict.symbol(), s.stage.name(), s.summary);
            diagnostics_text(&mut text, &s.diagnostics, "      ");
        }
    }
    text
}

pub fn check(ctx: &Context, args: &CheckArgs) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    for want in &args.versions {
        find_version(&ws, "versions", want)?;
    }
    if ws.versions.is_empty() {
        return Err(ToolError::new(
            None,
            format!("there are no versions in {} to check", ws.root.join(workspace::VERSIONS_DIR).display()),
            "write one with submit_version",
        ));
    }
    let mut store = open_store(&ws)?;
    let opts = CheckOptions { versions: args.versions.clone(), seed: args.seed, no_bench: args.no_bench };
    // Where rung.toml's [runner] says, as `rung check` does: an SSH host or a Slurm job climbs
    // the rungs and every result is recorded here.
    let on = rung_core::remote::RunOn::of(&ws, None)
        .map_err(|e| ToolError::new(None, e.to_string(), "fix [runner] in rung.toml, or check with it removed"))?;
    let report = match on {
        rung_core::remote::RunOn::Here => {
            let mut engine = ctx.engine();
            let Engine { machine, runners } = &mut *engine;
            let machine = machine.get_or_insert_with(Machine::discover);
            let report = check::check_with(&ws, &mut store, &opts, machine, runners)?;
            // The next check's children start while the client reads this one's result.
            check::fork_ahead(&ws, machine, runners);
            report
        }
        rung_core::remote::RunOn::Away(away) => {
            let url = away.prefix();
            match away.check(&ws, &mut store, &opts, None, &mut |_| {}) {
                Ok(Some(r)) => r,
                Ok(None) => {
                    return Err(ToolError::new(
                        None,
                        format!("the runner {url}gave no report"),
                        "get_results shows what it recorded; check again",
                    ));
                }
                Err(e) => return Err(ToolError::new(None, e.to_string(), "see [runner] in rung.toml")),
            }
        }
    };
    Reply::new(check_text(&report), &report)
}

pub(super) fn result_entry(row: &ResultRow, current_hash: Option<&str>, payload: bool) -> ResultEntry {
    ResultEntry {
        result_id: row.id,
        version: row.version.clone(),
        stage: row.stage.clone(),
        verdict: row.verdict.clone(),
        summary: summary_of(row),
        source_hash: row.source_hash.clone(),
        current: current_hash.map(|h| h == row.source_hash),
        seed: row.seed,
        started_at_ms: row.started_at_ms,
        finished_at_ms: row.finished_at_ms,
        payload: payload.then(|| row.payload.clone()),
    }
}

pub(super) fn result_line(text: &mut String, e: &ResultEntry) {
    let stale = if e.current == Some(false) { " (for an older source)" } else { "" };
    let _ = writeln!(text, "  {} {:<9} {}{stale}", symbol(&e.verdict), e.stage, e.summary);
}

pub fn get_results(ctx: &Context, args: &VersionArgs) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    let v = find_version(&ws, "version", &args.version)?;
    let source = read_source(&ws, v)?;
    let hash = sha256_hex(source.as_bytes());
    let store = open_store(&ws)?;
    let row: Option<VersionRow> = store.version(&v.id)?;
    let results: Vec<ResultEntry> =
        store.latest_results(&v.id)?.iter().map(|r| result_entry(r, Some(&hash), true)).collect();
    let verdict = worst(results.iter().filter(|r| r.current == Some(true)).filter_map(|r| Verdict::parse(&r.verdict)));
    let out = ResultsOut { head: VersionHead::of(v, row.as_ref()), source_hash: hash, verdict, results };
    let mut text = format!(
        "{}): {}\n",
        out.head.opening(),
        match (out.verdict, out.results.is_empty()) {
            (Some(v), _) => v.name(),
            (None, true) => "not checked yet: call check",
            (None, false) => "changed since its last check: call check",
        }
    );
    for e in &out.results {
        result_line(&mut text, e);
        let diags: Vec<Diagnostic> = e
            .payload
            .as_ref()
            .and_then(|p| p.get("diagnostics"))
            .and_then(|d| serde_json::from_value(d.clone()).ok())
            .unwrap_or_default();
        diagnostics_text(&mut text, &diags, "      ");
    }
    Reply::new(text, &out)
}
