//! Profiles and the workspace's history.

use std::fmt::Write as _;

use crate::model::report::Stage;

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

pub fn history(ctx: &Context, args: &HistoryArgs) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    let version = match &args.version {
        Some(want) => Some(find_version(&ws, "version", want).map(|v| v.id.clone()).or_else(|e| {
            // A deleted version's history stays: its id is still a valid question.
            let store = open_store(&ws)?;
            if store.version(want)?.is_some() { Ok(want.clone()) } else { Err(e) }
        })?),
        None => None,
    };
    let store = open_store(&ws)?;
    let limit = args.limit.unwrap_or(DEFAULT_HISTORY).max(1);
    let hashes: std::collections::HashMap<String, String> =
        ws.versions.iter().filter_map(|v| ws.source_hash(v).map(|h| (v.id.clone(), h))).collect();
    let rows = match args.stage {
        // The store filters by version only: read enough rows to find `limit` of this stage.
        Some(stage) => store
            .history(version.as_deref(), limit.saturating_mul(50).max(1000))?
            .into_iter()
            .filter(|r| r.stage == stage.name())
            .take(limit)
            .collect(),
        None => store.history(version.as_deref(), limit)?,
    };
    let results: Vec<ResultEntry> =
        rows.iter().map(|r| result_entry(r, hashes.get(&r.version).map(String::as_str), args.payload)).collect();
    let out = HistoryOut { version, stage: args.stage, results };
    let mut text = format!(
        "{} result{}{}{}, newest first\n",
        out.results.len(),
        if out.results.len() == 1 { "" } else { "s" },
        out.version.as_ref().map(|v| format!(" of {v}")).unwrap_or_default(),
        out.stage.map(|s| format!(" ({s})")).unwrap_or_default()
    );
    for e in &out.results {
        let when = crate::store::rfc3339(
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
