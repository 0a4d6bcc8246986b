//! Several processes share one history (DESIGN.md, "Results and history"): the TUI, `rung check`
//! and the MCP server write at once, and nothing is lost.
//!
//! The writers are real processes: this test binary re-runs itself with `RUNG_STORE_CHILD` set,
//! and the `child` test below then acts as a writer instead of a test.

use std::path::Path;
use std::process::{Child, Command};

use rung::store::{NewResult, Status, Store};
use rung::workspace::{VersionFile, VersionKind};

const ROWS_PER_WRITER: usize = 2000;

fn spawn_child(dir: &Path, writer: usize, rows: usize) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env("RUNG_STORE_CHILD", format!("{}|{writer}|{rows}", dir.display()))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Not a test on its own: the body of a writer process, run only by the tests below.
#[test]
#[ignore = "a writer process for the tests below, not a test by itself"]
fn child() {
    let Ok(spec) = std::env::var("RUNG_STORE_CHILD") else { return };
    let mut parts = spec.split('|');
    let dir = parts.next().unwrap().to_string();
    let writer: usize = parts.next().unwrap().parse().unwrap();
    let rows: usize = parts.next().unwrap().parse().unwrap();
    let mut store = Store::open(Path::new(&dir)).unwrap();
    let id = format!("v{writer:03}");
    let vf = VersionFile { id: id.clone(), path: format!("versions/{id}.cu").into(), kind: VersionKind::Cuda };
    store.sync_version(&vf, "hash", Status::Draft).unwrap();
    for i in 0..rows {
        let payload = format!("{{\"writer\": {writer}, \"i\": {i}}}");
        store
            .record(&NewResult {
                version: &id,
                stage: "build",
                verdict: "pass",
                source_hash: "hash",
                seed: Some(i as u64),
                payload: &payload,
                tools: "{}",
                started_at_ms: 0,
                finished_at_ms: 0,
            })
            .unwrap();
    }
}

fn wait_all(children: Vec<Child>) {
    for mut c in children {
        let status = c.wait().unwrap();
        assert!(status.success(), "a writer process failed: {status}");
    }
}

#[test]
fn four_writers_and_a_reader_holding_a_transaction_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let reader = Store::open(dir.path()).unwrap();
    // A reader with a transaction open across all the writes (the TUI reading history).
    reader.connection().execute_batch("BEGIN").unwrap();
    let before: i64 = reader.connection().query_row("SELECT COUNT(*) FROM results", [], |r| r.get(0)).unwrap();
    assert_eq!(before, 0);

    let children: Vec<Child> = (0..4).map(|w| spawn_child(dir.path(), w, ROWS_PER_WRITER)).collect();
    wait_all(children);

    // Still inside its snapshot, the reader sees none of the new rows...
    let during: i64 = reader.connection().query_row("SELECT COUNT(*) FROM results", [], |r| r.get(0)).unwrap();
    assert_eq!(during, 0);
    reader.connection().execute_batch("COMMIT").unwrap();

    // ...and afterwards every row of every writer is there, each exactly once.
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.result_count().unwrap(), 4 * ROWS_PER_WRITER as i64);
    for w in 0..4 {
        let rows = store.history(Some(&format!("v{w:03}")), 10_000).unwrap();
        let mut seen: Vec<i64> = rows.iter().map(|r| r.payload["i"].as_i64().unwrap()).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..ROWS_PER_WRITER as i64).collect::<Vec<_>>(), "writer {w}");
    }
    assert_eq!(store.versions().unwrap().len(), 4);
}

#[test]
fn two_processes_create_a_fresh_database_at_once() {
    for _round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join(".rung");
        let children: Vec<Child> = (0..2).map(|w| spawn_child(&state, w, 20)).collect();
        wait_all(children);
        let store = Store::open(&state).unwrap();
        assert_eq!(store.schema_version().unwrap(), rung::store::SCHEMA_VERSION);
        assert_eq!(store.result_count().unwrap(), 40);
        let mode: String = store.connection().query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
    }
}
