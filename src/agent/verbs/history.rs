//! Profiles, traces and the workspace's history.

use std::fmt::Write as _;

use rung_core::model::report::Stage;
use rung_core::service::{self, HistoryQuery, VersionError};

use super::*;

pub fn get_profile(ctx: &Context, args: &VersionArgs) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    let v = find_version(&ws, "version", &args.version)?;
    let hash = ws.source_hash(v);
    let store = open_store(&ws)?;
    let profile = store
        .latest_results(&v.id)?
        .iter()
        .find(|r| r.stage == Stage::Profile.name())
        .map(|r| result_entry(r, hash.as_deref(), true));
    let out = match profile {
        Some(p) => ProfileOut {
            version: v.id.clone(),
            available: true,
            message: format!("profile of {} ({}): {}", v.id, p.verdict, p.summary),
            profile: Some(p),
        },
        None => ProfileOut {
            version: v.id.clone(),
            available: false,
            message: format!(
                "not available yet: no profile has been recorded for {id}; `rung profile {id}` (or P in the TUI) \
                 records one on a machine with a GPU and Nsight Compute; nothing is invented",
                id = v.id
            ),
            profile: None,
        },
    };
    let mut text = format!("{}\n", out.message);
    if let Some(p) = &out.profile {
        result_line(&mut text, p);
    }
    // The sanitizers' latest findings, when there are any, in the text the model reads.
    for r in store.latest_results(&v.id)?.iter().filter(|r| r.stage == "memcheck" || r.stage == "racecheck") {
        result_line(&mut text, &result_entry(r, hash.as_deref(), false));
    }
    Reply::new(text, &out)
}

/// A version's latest trace (`rung trace`): its sections' statistics, said to be of an older
/// file when the version changed since.
pub fn get_trace(ctx: &Context, args: &VersionArgs) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    let v = find_version(&ws, "version", &args.version)?;
    let record = rung_core::stages::trace::latest(&ws, &v.id);
    let current = record.as_ref().is_some_and(|r| ws.source_hash(v).as_deref() == Some(r.source_hash.as_str()));
    let message = match &record {
        None => format!(
            "not available yet: no trace has been recorded for {id}; `rung trace {id}` records one on a machine with a \
             GPU, for a .cu version with rung_trace.cuh's markers, a .ptx version with `// rung_trace` lines, or a \
             Triton, CuTe DSL or TileLang version with rung_trace.py's, rung_trace_cute.py's or rung_trace_tilelang.py's; \
             nothing \
             is invented",
            id = v.id
        ),
        Some(r) if !current => format!(
            "the trace of {} ({}) is of an earlier file: the version has changed since; `rung trace {}` traces it as it is",
            v.id, r.recorded_at, v.id
        ),
        Some(r) => format!("trace of {} ({})", v.id, r.recorded_at),
    };
    let out = TraceOut { version: v.id.clone(), available: record.is_some(), current, message, trace: record };
    let mut text = format!("{}\n", out.message);
    if let Some(r) = &out.trace {
        text.push_str(&r.table());
    }
    Reply::new(text, &out)
}

pub fn history(ctx: &Context, args: &HistoryArgs) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    let store = open_store(&ws)?;
    let limit = args.limit.unwrap_or(DEFAULT_HISTORY).max(1);
    let q = HistoryQuery { version: args.version.as_deref(), stage: args.stage, limit };
    let h = service::history(&ws, &store, &q).map_err(|e| match e {
        VersionError::NoVersion { id, .. } => no_version(&ws, "version", &id),
        e => ToolError::new(None, e.to_string(), "`rung doctor` says more"),
    })?;
    let results: Vec<ResultEntry> = h
        .rows
        .iter()
        .map(|r| ResultEntry { current: h.is_current(r), ..result_entry(r, None, args.payload) })
        .collect();
    let version = h.version;
    let out = HistoryOut { version, stage: args.stage, results };
    let mut text = format!(
        "{} result{}{}{}, newest first\n",
        out.results.len(),
        if out.results.len() == 1 { "" } else { "s" },
        out.version.as_ref().map(|v| format!(" of {v}")).unwrap_or_default(),
        out.stage.map(|s| format!(" ({s})")).unwrap_or_default()
    );
    for e in &out.results {
        let when = rung_core::store::rfc3339(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(e.started_at_ms.max(0) as u64),
        );
        let stale = if e.current == Some(false) { " (older source)" } else { "" };
        let _ = writeln!(
            text,
            "#{} {} {} {:<9} {} {}{stale}",
            e.result_id,
            when,
            e.version,
            e.stage,
            symbol(&e.verdict),
            e.summary
        );
    }
    Reply::new(text, &out)
}
