//! What every shell asks of the history beside a check, written once: a version's results of the
//! file as it is now, approving or rejecting it, the comparison of a check's versions with a
//! baseline, the history ([`history`]) and PTX/SASS listings and diffs ([`listing`]). The CLI, the
//! TUI, the MCP server and the agent call these rather than each doing it its own way.

pub mod history;
pub mod listing;

pub use history::{History, HistoryQuery, history};
pub use listing::{AsmComparison, DiffQuery, Listing, ListingError, diff, listing};

use crate::model::report::CheckReport;
use crate::stages::bench::{SizeBench, compare_benches, passing_bench};
use crate::store::{ResultRow, Status, Store, StoreError};
use crate::workspace::{VersionFile, Workspace};

/// A version's latest result of each rung, and the hash of its file as it is now.
pub struct Results {
    pub all: Vec<ResultRow>,
    /// `None` when the file cannot be read: then no result is current.
    pub source_hash: Option<String>,
}

impl Results {
    /// The results of the file as it is now: a rung that passed before an edit says nothing about
    /// the edited version.
    pub fn current(&self) -> impl Iterator<Item = &ResultRow> {
        self.all.iter().filter(|r| self.source_hash.as_ref() == Some(&r.source_hash))
    }
}

/// A version's latest results, with what makes one current.
pub fn results(ws: &Workspace, store: &Store, v: &VersionFile) -> Result<Results, StoreError> {
    Ok(Results { all: store.latest_results(&v.id)?, source_hash: ws.source_hash(v) })
}

/// The newest passing bench of a version in the history.
pub fn latest_bench(store: &Store, id: &str) -> Option<SizeBench> {
    let rows = store.history(Some(id), 200).ok()?;
    passing_bench(&rows)
}

/// `--baseline`: each version of `report` but the baseline compared with the baseline's newest
/// passing bench, allowed `max_regression` percent; the comparisons go into the report, and what
/// could not be compared comes back as notes.
pub fn compare_with_baseline(
    ws: &Workspace,
    store: &Store,
    report: &mut CheckReport,
    baseline: &str,
    max_regression: f64,
) -> Vec<String> {
    let mut notes = Vec::new();
    let base_id = ws.version(baseline).map_or_else(|| baseline.to_string(), |v| v.id.clone());
    let Some(b) = latest_bench(store, &base_id) else {
        notes.push(format!("no bench of the baseline {base_id} in the history: nothing compared"));
        return notes;
    };
    for v in report.versions.iter().filter(|v| v.id != base_id) {
        match latest_bench(store, &v.id) {
            Some(c) => report.comparisons.push(compare_benches(&v.id, &c, &base_id, &b, max_regression)),
            None => notes.push(format!("{}: no bench in the history: not compared", v.id)),
        }
    }
    notes
}

/// Why a version could not be found, read, approved or rejected.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    /// No version by that id or path; `known` lists the ones there are.
    #[error("no version `{id}`")]
    NoVersion { id: String, known: Vec<String> },
    #[error("reading {}: {source}", path.display())]
    Read { path: std::path::PathBuf, source: std::io::Error },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Approves or rejects a version as its file is now (the review records that file's hash, so an
/// edit afterwards is a new draft). Returns the version reviewed.
pub fn review(
    ws: &Workspace,
    store: &mut Store,
    id: &str,
    status: Status,
    reason: Option<&str>,
) -> Result<VersionFile, VersionError> {
    let Some(v) = ws.version(id) else {
        return Err(VersionError::NoVersion {
            id: id.to_string(),
            known: ws.versions.iter().map(|v| v.id.clone()).collect(),
        });
    };
    let source = ws.read_source(v).map_err(|source| VersionError::Read { path: v.path.clone(), source })?;
    store.review(v, &crate::store::sha256_hex(source.as_bytes()), status, reason)?;
    Ok(v.clone())
}
