//! The history store: `.rung/history.db` and `.rung/objects/`.
//!
//! SQLite in WAL mode so readers never block the writer; every write is a `BEGIN IMMEDIATE`
//! transaction (it takes the write lock up front, so two writers never deadlock upgrading a
//! read lock) and a busy timeout lets the TUI, several `rung check` processes and the MCP server
//! write at once without losing a row. The schema is migrated from day one through
//! `PRAGMA user_version`, inside the same kind of transaction, so two processes opening a fresh
//! database at once apply each migration exactly once.
//!
//! Large artefacts (PTX, cubins, SASS, profiles) live in `objects/` under their SHA-256; rows
//! refer to them by hash. `dumps/<version>/` holds links to a version's latest artefacts.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use crate::model::version::Status;
use crate::model::version::VersionFile;

pub const DB_FILE: &str = "history.db";

/// The history a process keeps somewhere other than the workspace's `.rung/history.db`: a check
/// run as a Slurm job keeps it on the compute node's own disk, since SQLite's write-ahead log
/// cannot be shared between hosts over a network file system; the submitting side records the
/// job's results in the workspace's history from its report.
pub const HISTORY_ELSEWHERE: &str = "RUNG_HISTORY_DB";
pub const OBJECTS_DIR: &str = "objects";
pub const DUMPS_DIR: &str = "dumps";

/// How many seeds a workspace's checks rotate through.
pub const SEED_POOL: usize = 8;

/// How long a writer waits for another process's transaction before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Each entry moves the schema from version `i` to `i + 1`. Never edit a shipped entry; append.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE versions (
    id          TEXT PRIMARY KEY,
    path        TEXT NOT NULL,
    kind        TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('draft', 'proposed', 'approved', 'rejected')),
    reason      TEXT,
    parent      TEXT,
    source_hash TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE TABLE status_changes (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    version TEXT NOT NULL,
    status  TEXT NOT NULL,
    reason  TEXT,
    at      INTEGER NOT NULL
);
CREATE TABLE results (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    version     TEXT NOT NULL,
    stage       TEXT NOT NULL,
    verdict     TEXT NOT NULL,
    source_hash TEXT NOT NULL,
    seed        INTEGER,
    payload     TEXT NOT NULL,
    tools       TEXT NOT NULL DEFAULT '{}',
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    pid         INTEGER NOT NULL
);
CREATE INDEX results_by_version ON results (version, stage, id);
"#,
    r#"
CREATE TABLE build_cache (
    key        TEXT PRIMARY KEY,
    detail     TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
"#,
    r#"
CREATE TABLE seed_pool (
    slot INTEGER PRIMARY KEY,
    seed INTEGER NOT NULL,
    uses INTEGER NOT NULL DEFAULT 0
);
"#,
];

pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{}: {source}", path.display())]
    Sqlite { path: PathBuf, source: rusqlite::Error },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "{}: the history was written by a newer rung (schema {found}, this rung knows {SCHEMA_VERSION})\n  help: upgrade rung",
        path.display()
    )]
    TooNew { path: PathBuf, found: i64 },
    #[error("no version `{0}` in the history")]
    UnknownVersion(String),
}

/// A version as the history knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VersionRow {
    pub id: String,
    pub path: String,
    pub kind: String,
    pub status: Status,
    pub reason: Option<String>,
    pub parent: Option<String>,
    pub source_hash: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// One stage result to record.
#[derive(Debug, Clone)]
pub struct NewResult<'a> {
    pub version: &'a str,
    pub stage: &'a str,
    pub verdict: &'a str,
    pub source_hash: &'a str,
    pub seed: Option<u64>,
    /// The stage result, serialised as JSON.
    pub payload: &'a str,
    /// Tool name → version, as JSON.
    pub tools: &'a str,
    pub started_at_ms: i64,
    pub finished_at_ms: i64,
}

/// One stored stage result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResultRow {
    pub id: i64,
    pub version: String,
    pub stage: String,
    pub verdict: String,
    pub source_hash: String,
    pub seed: Option<i64>,
    pub payload: serde_json::Value,
    pub tools: serde_json::Value,
    pub started_at_ms: i64,
    pub finished_at_ms: i64,
    pub pid: i64,
}

pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// `rung check --stream`: each stage result is also printed as it is recorded
    /// (`check::Streamed`).
    stream: bool,
}

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl Store {
    /// From now on every stage result this handle records is also printed on standard output
    /// as one JSON line (`rung check --stream`; the SSH runner reads them to bring results home
    /// rung by rung).
    pub fn stream_results(&mut self) {
        self.stream = true;
    }

    pub fn streams(&self) -> bool {
        self.stream
    }

    /// Opens (creating if needed) `state_dir/history.db` and brings its schema up to date; with
    /// [`HISTORY_ELSEWHERE`] set, the file it names instead.
    pub fn open(state_dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(state_dir)
            .map_err(|source| StoreError::Io { path: state_dir.to_path_buf(), source })?;
        let path = match std::env::var_os(HISTORY_ELSEWHERE).filter(|p| !p.is_empty()) {
            Some(p) => PathBuf::from(p),
            None => state_dir.join(DB_FILE),
        };
        let sql = |source| StoreError::Sqlite { path: path.clone(), source };
        let conn = Connection::open(&path).map_err(sql)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
        // Switching a fresh file to WAL needs a brief exclusive lock that the busy handler does
        // not always cover; retry while another process holds it.
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        loop {
            match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
                Ok(_) => break,
                Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => return Err(sql(e)),
            }
        }
        conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;").map_err(sql)?;
        let mut store = Store { conn, path, stream: false };
        store.migrate()?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        |source| StoreError::Sqlite { path: self.path.clone(), source }
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sqlite { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        let current: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(sql)?;
        if current > SCHEMA_VERSION {
            return Err(StoreError::TooNew { path: path.clone(), found: current });
        }
        for (i, m) in MIGRATIONS.iter().enumerate().skip(current as usize) {
            tx.execute_batch(m).map_err(sql)?;
            tx.execute_batch(&format!("PRAGMA user_version = {}", i + 1)).map_err(sql)?;
        }
        tx.commit().map_err(sql)
    }

    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(self.err())
    }

    /// Records a version file: new ids become drafts (or `status` when given, e.g. proposed);
    /// known ids get their current path, kind and hash (a rename keeps the history).
    pub fn sync_version(
        &mut self,
        v: &VersionFile,
        source_hash: &str,
        new_status: Status,
    ) -> Result<VersionRow, StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sqlite { path: path.clone(), source };
        let now = now_ms();
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        tx.execute(
            "INSERT INTO versions (id, path, kind, status, source_hash, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
             ON CONFLICT (id) DO UPDATE SET path = excluded.path, kind = excluded.kind,
                 source_hash = excluded.source_hash,
                 updated_at = CASE WHEN versions.source_hash IS excluded.source_hash
                                   AND versions.path = excluded.path THEN versions.updated_at
                                   ELSE excluded.updated_at END",
            params![v.id, v.path.to_string_lossy(), v.kind.name(), new_status.as_str(), source_hash, now],
        )
        .map_err(sql)?;
        let row = tx.query_row("SELECT * FROM versions WHERE id = ?1", [&v.id], version_row).map_err(sql)?;
        tx.commit().map_err(sql)?;
        Ok(row)
    }

    pub fn set_status(&mut self, id: &str, status: Status, reason: Option<&str>) -> Result<(), StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sqlite { path: path.clone(), source };
        let now = now_ms();
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        let n = tx
            .execute(
                "UPDATE versions SET status = ?2, reason = ?3, updated_at = ?4 WHERE id = ?1",
                params![id, status.as_str(), reason, now],
            )
            .map_err(sql)?;
        if n == 0 {
            return Err(StoreError::UnknownVersion(id.to_string()));
        }
        tx.execute(
            "INSERT INTO status_changes (version, status, reason, at) VALUES (?1, ?2, ?3, ?4)",
            params![id, status.as_str(), reason, now],
        )
        .map_err(sql)?;
        tx.commit().map_err(sql)
    }

    /// Sets a version's review status, adding the version to the history first when it was
    /// never checked (`source_hash`: its file as it is now).
    pub fn review(
        &mut self,
        v: &VersionFile,
        source_hash: &str,
        status: Status,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        self.sync_version(v, source_hash, Status::Draft)?;
        self.set_status(&v.id, status, reason)
    }

    pub fn set_parent(&mut self, id: &str, parent: Option<&str>) -> Result<(), StoreError> {
        let n = self
            .conn
            .execute("UPDATE versions SET parent = ?2 WHERE id = ?1", params![id, parent])
            .map_err(self.err())?;
        if n == 0 { Err(StoreError::UnknownVersion(id.to_string())) } else { Ok(()) }
    }

    pub fn record(&mut self, r: &NewResult) -> Result<i64, StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sqlite { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        tx.execute(
            "INSERT INTO results (version, stage, verdict, source_hash, seed, payload, tools, started_at, finished_at, pid)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                r.version,
                r.stage,
                r.verdict,
                r.source_hash,
                r.seed.map(|s| s as i64),
                r.payload,
                r.tools,
                r.started_at_ms,
                r.finished_at_ms,
                std::process::id()
            ],
        )
        .map_err(sql)?;
        let id = tx.last_insert_rowid();
        tx.commit().map_err(sql)?;
        Ok(id)
    }

    pub fn versions(&self) -> Result<Vec<VersionRow>, StoreError> {
        let mut st = self.conn.prepare("SELECT * FROM versions").map_err(self.err())?;
        let rows = st.query_map([], version_row).map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    pub fn version(&self, id: &str) -> Result<Option<VersionRow>, StoreError> {
        self.conn.query_row("SELECT * FROM versions WHERE id = ?1", [id], version_row).optional().map_err(self.err())
    }

    /// The newest result of every stage of a version.
    pub fn latest_results(&self, version: &str) -> Result<Vec<ResultRow>, StoreError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT * FROM results WHERE id IN (SELECT MAX(id) FROM results WHERE version = ?1 GROUP BY stage) ORDER BY id",
            )
            .map_err(self.err())?;
        let rows = st.query_map([version], result_row).map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// Results, newest first; optionally of one version.
    pub fn history(&self, version: Option<&str>, limit: usize) -> Result<Vec<ResultRow>, StoreError> {
        self.results_of(version, None, limit)
    }

    /// One stage's results of every version, newest first.
    pub fn stage_history(&self, stage: &str, limit: usize) -> Result<Vec<ResultRow>, StoreError> {
        self.results_of(None, Some(stage), limit)
    }

    /// One stage's results recorded after the row `after`, oldest first, at most the newest
    /// `limit` of them.
    pub fn stage_results_after(&self, stage: &str, after: i64, limit: usize) -> Result<Vec<ResultRow>, StoreError> {
        let mut st = self
            .conn
            .prepare("SELECT * FROM (SELECT * FROM results WHERE stage = ?1 AND id > ?2 ORDER BY id DESC LIMIT ?3) ORDER BY id")
            .map_err(self.err())?;
        let rows = st.query_map(params![stage, after, limit as i64], result_row).map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// Results, newest first, of one version or all, of one stage or all.
    pub fn results_of(
        &self,
        version: Option<&str>,
        stage: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ResultRow>, StoreError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT * FROM results WHERE (?1 IS NULL OR version = ?1) AND (?2 IS NULL OR stage = ?2) \
                 ORDER BY id DESC LIMIT ?3",
            )
            .map_err(self.err())?;
        let rows = st.query_map(params![version, stage, limit as i64], result_row).map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// A successful build's details, by its cache key (source, headers, options, tool versions).
    pub fn cached_build(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .query_row("SELECT detail FROM build_cache WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(self.err())
    }

    pub fn put_cached_build(&mut self, key: &str, detail: &str) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO build_cache (key, detail, created_at) VALUES (?1, ?2, ?3)",
                params![key, detail, now_ms()],
            )
            .map(|_| ())
            .map_err(self.err())
    }

    /// The next seed of the workspace's pool (drawn once, `SEED_POOL` of them): checks rotate
    /// through it, least used first, so a kernel cannot learn one input set, and reference
    /// outputs, cached by seed, are reused.
    pub fn next_seed(&mut self, draw: impl Fn() -> u64) -> Result<u64, StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sqlite { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        let n: i64 = tx.query_row("SELECT COUNT(*) FROM seed_pool", [], |r| r.get(0)).map_err(sql)?;
        for slot in n..SEED_POOL as i64 {
            tx.execute("INSERT INTO seed_pool (slot, seed) VALUES (?1, ?2)", params![slot, draw() as i64])
                .map_err(sql)?;
        }
        let (slot, seed): (i64, i64) = tx
            .query_row("SELECT slot, seed FROM seed_pool ORDER BY uses, slot LIMIT 1", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .map_err(sql)?;
        tx.execute("UPDATE seed_pool SET uses = uses + 1 WHERE slot = ?1", [slot]).map_err(sql)?;
        tx.commit().map_err(sql)?;
        Ok(seed as u64)
    }

    pub fn result_count(&self) -> Result<i64, StoreError> {
        self.conn.query_row("SELECT COUNT(*) FROM results", [], |r| r.get(0)).map_err(self.err())
    }

    /// Direct access for read-only queries and tests (e.g. holding a read transaction open).
    /// SQLite's `data_version`: it changes when another connection (another process, or another
    /// thread's handle) commits to the database, and not for this handle's own writes.
    pub fn data_version(&self) -> Result<i64, StoreError> {
        self.conn.query_row("PRAGMA data_version", [], |r| r.get(0)).map_err(self.err())
    }

    /// The versions with a result recorded after the row `after`, and the newest row id.
    pub fn versions_with_results_after(&self, after: i64) -> Result<(Vec<String>, i64), StoreError> {
        let mut st = self
            .conn
            .prepare("SELECT version, MAX(id) FROM results WHERE id > ?1 GROUP BY version")
            .map_err(self.err())?;
        let rows =
            st.query_map(params![after], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))).map_err(self.err())?;
        let mut versions = Vec::new();
        let mut newest = after;
        for row in rows {
            let (v, id) = row.map_err(self.err())?;
            newest = newest.max(id);
            versions.push(v);
        }
        Ok((versions, newest))
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

fn version_row(r: &rusqlite::Row) -> rusqlite::Result<VersionRow> {
    Ok(VersionRow {
        id: r.get("id")?,
        path: r.get("path")?,
        kind: r.get("kind")?,
        status: Status::parse(&r.get::<_, String>("status")?),
        reason: r.get("reason")?,
        parent: r.get("parent")?,
        source_hash: r.get("source_hash")?,
        created_at_ms: r.get("created_at")?,
        updated_at_ms: r.get("updated_at")?,
    })
}

fn result_row(r: &rusqlite::Row) -> rusqlite::Result<ResultRow> {
    let json = |col: &str| -> rusqlite::Result<serde_json::Value> {
        let s: String = r.get(col)?;
        Ok(serde_json::from_str(&s).unwrap_or(serde_json::Value::String(s)))
    };
    Ok(ResultRow {
        id: r.get("id")?,
        version: r.get("version")?,
        stage: r.get("stage")?,
        verdict: r.get("verdict")?,
        source_hash: r.get("source_hash")?,
        seed: r.get("seed")?,
        payload: json("payload")?,
        tools: json("tools")?,
        started_at_ms: r.get("started_at")?,
        finished_at_ms: r.get("finished_at")?,
        pid: r.get("pid")?,
    })
}

/// A name part no other temporary file of any thread or process here has: the process id and a
/// counter of this process (a per-process name let two threads write one file).
pub fn unique() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!("{}-{}", std::process::id(), NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// SHA-256 of bytes, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Content-addressed artefacts under `.rung/objects/`.
pub struct Objects {
    dir: PathBuf,
}

impl Objects {
    pub fn new(state_dir: &Path) -> Objects {
        Objects { dir: state_dir.join(OBJECTS_DIR) }
    }

    pub fn path_of(&self, hash: &str) -> PathBuf {
        self.dir.join(&hash[..2]).join(&hash[2..])
    }

    /// Stores bytes and returns their hash. Concurrent writers of the same content are safe:
    /// each writes a private temporary file and renames it into place.
    pub fn put(&self, bytes: &[u8]) -> std::io::Result<String> {
        let hash = sha256_hex(bytes);
        let dest = self.path_of(&hash);
        if dest.is_file() {
            return Ok(hash);
        }
        let parent = dest.parent().expect("object paths have a parent");
        std::fs::create_dir_all(parent)?;
        let tmp = parent.join(format!(".{}.{}.tmp", &hash[2..], unique()));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &dest)?;
        Ok(hash)
    }

    pub fn get(&self, hash: &str) -> std::io::Result<Vec<u8>> {
        std::fs::read(self.path_of(hash))
    }

    /// Points `dumps/<version>/<name>` at an object (a relative symlink where the platform has
    /// them, else a copy), replacing what was there.
    pub fn link_dump(&self, state_dir: &Path, version: &str, name: &str, hash: &str) -> std::io::Result<PathBuf> {
        let dir = state_dir.join(DUMPS_DIR).join(version);
        std::fs::create_dir_all(&dir)?;
        let link = dir.join(name);
        let tmp = dir.join(format!(".{name}.{}.tmp", unique()));
        let _ = std::fs::remove_file(&tmp);
        #[cfg(unix)]
        {
            let target = Path::new("../..").join(OBJECTS_DIR).join(&hash[..2]).join(&hash[2..]);
            std::os::unix::fs::symlink(target, &tmp)?;
        }
        #[cfg(not(unix))]
        std::fs::copy(self.path_of(hash), &tmp)?;
        std::fs::rename(&tmp, &link)?;
        Ok(link)
    }
}

/// Formats a wall-clock time as RFC 3339 with milliseconds, UTC.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::version::VersionKind;

    fn vf(id: &str, path: &str) -> VersionFile {
        VersionFile { id: id.into(), path: path.into(), kind: VersionKind::Cuda }
    }

    #[test]
    fn rename_keeps_history_and_status() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        s.sync_version(&vf("v002", "versions/v002-vec.cu"), "h1", Status::Draft).unwrap();
        s.set_status("v002", Status::Approved, None).unwrap();
        let payload = "{}";
        s.record(&NewResult {
            version: "v002",
            stage: "build",
            verdict: "pass",
            source_hash: "h1",
            seed: None,
            payload,
            tools: "{}",
            started_at_ms: 1,
            finished_at_ms: 2,
        })
        .unwrap();
        let row = s.sync_version(&vf("v002", "versions/v002-float4.cu"), "h1", Status::Draft).unwrap();
        assert_eq!(row.path, "versions/v002-float4.cu");
        assert_eq!(row.status, Status::Approved, "a rename does not reset the review");
        assert_eq!(s.latest_results("v002").unwrap().len(), 1);
        assert!(matches!(s.set_status("v999", Status::Approved, None), Err(StoreError::UnknownVersion(_))));
    }

    #[test]
    fn objects_are_content_addressed_and_linked() {
        let dir = tempfile::tempdir().unwrap();
        let o = Objects::new(dir.path());
        let h = o.put(b"sass").unwrap();
        assert_eq!(h, sha256_hex(b"sass"));
        assert_eq!(o.put(b"sass").unwrap(), h);
        let link = o.link_dump(dir.path(), "v001", "kernel.sass", &h).unwrap();
        assert_eq!(std::fs::read(&link).unwrap(), b"sass");
        let h2 = o.put(b"sass2").unwrap();
        o.link_dump(dir.path(), "v001", "kernel.sass", &h2).unwrap();
        assert_eq!(std::fs::read(&link).unwrap(), b"sass2");
    }

    #[test]
    fn seeds_rotate_through_the_pool() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        let counter = std::cell::Cell::new(100u64);
        let draw = || {
            counter.set(counter.get() + 1);
            counter.get()
        };
        let seeds: Vec<u64> = (0..SEED_POOL * 2).map(|_| s.next_seed(draw).unwrap()).collect();
        let first: Vec<u64> = seeds[..SEED_POOL].to_vec();
        assert_eq!(first, (101..101 + SEED_POOL as u64).collect::<Vec<_>>(), "the pool is drawn once");
        assert_eq!(&seeds[SEED_POOL..], &first[..], "then reused in rotation");
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(Store::open(dir.path()).unwrap());
        let c = Connection::open(dir.path().join(DB_FILE)).unwrap();
        c.execute_batch("PRAGMA user_version = 99").unwrap();
        drop(c);
        let e = Store::open(dir.path()).err().unwrap();
        assert!(e.to_string().contains("newer rung"), "{e}");
    }

    /// Threads of one process storing the same bytes at once each write a file of their own
    /// before the rename (a name per process let them write one file together).
    #[test]
    fn one_object_stored_by_many_threads_at_once_is_whole() {
        let dir = tempfile::tempdir().unwrap();
        let objects = Objects::new(dir.path());
        let bytes: Vec<u8> = (0..4 << 20).map(|i| (i % 251) as u8).collect();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| objects.put(&bytes).unwrap());
            }
        });
        let hash = objects.put(&bytes).unwrap();
        let stored = objects.get(&hash).unwrap();
        assert!(stored == bytes, "the stored object is the bytes put");
        assert!(unique() != unique());
    }
}
