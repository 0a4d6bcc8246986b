//! The history of results, as every shell asks for it: of one version (by id, by path, or by the
//! id of a version whose file is gone) or of all, of one rung or all, each row marked current or
//! not against the file as it is now.

use std::collections::HashMap;

use crate::model::report::Stage;
use crate::store::{ResultRow, Store};
use crate::workspace::Workspace;

use super::VersionError;

/// What to list.
#[derive(Debug, Clone, Default)]
pub struct HistoryQuery<'a> {
    /// A version's id or path; `None` for every version.
    pub version: Option<&'a str>,
    pub stage: Option<Stage>,
    pub limit: usize,
}

/// Results, newest first, with the hash of each version's file as it is now.
pub struct History {
    /// The version asked about, resolved to its id.
    pub version: Option<String>,
    pub rows: Vec<ResultRow>,
    hashes: HashMap<String, String>,
}

impl History {
    /// Whether a row is of its version's file as it is now; `None` when that file is gone or
    /// unreadable.
    pub fn is_current(&self, r: &ResultRow) -> Option<bool> {
        self.hashes.get(&r.version).map(|h| *h == r.source_hash)
    }
}

/// The results `q` asks for. A version that is neither in the workspace nor in the history is an
/// error naming the ones there are.
pub fn history(ws: &Workspace, store: &Store, q: &HistoryQuery<'_>) -> Result<History, VersionError> {
    let version = match q.version {
        None => None,
        Some(want) => match ws.version(want) {
            Some(v) => Some(v.id.clone()),
            // A deleted version's history stays: its id is still a valid question.
            None if store.version(want)?.is_some() => Some(want.to_string()),
            None => {
                return Err(VersionError::NoVersion {
                    id: want.to_string(),
                    known: ws.versions.iter().map(|v| v.id.clone()).collect(),
                });
            }
        },
    };
    let rows = store.results_of(version.as_deref(), q.stage.map(Stage::name), q.limit.max(1))?;
    let hashes = ws.versions.iter().filter_map(|v| ws.source_hash(v).map(|h| (v.id.clone(), h))).collect();
    Ok(History { version, rows, hashes })
}
