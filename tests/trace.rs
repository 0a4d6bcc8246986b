//! The trace rung's record as the agent and MCP clients read it (`get_trace`): absent, current,
//! and of an earlier file after an edit. The traced launch itself needs a GPU (`rung selftest
//! --gpu` has its row); the decoder's own tests are in src/core/trace.rs.

use std::path::Path;

use rung::trace::{Kind, Record, decode, hash, names_in, summarise};
use rung::verbs::{Context, VersionArgs, get_trace};

mod common;

/// A record as `rung trace` writes it, from two warps' records.
fn record(ws: &Path, id: &str) -> rung::model::trace::TraceRecord {
    let w = rung::workspace::Workspace::open(ws).unwrap();
    let v = w.version(id).unwrap();
    let r = |t, name: &str, kind, warp| Record { time_ns: t, tag: hash(name), kind, sm: warp, block: 0, warp };
    let rs = [
        r(1_000, "load", Kind::Begin, 0),
        r(1_000, "load", Kind::Begin, 1),
        r(1_600, "load", Kind::End, 0),
        r(1_900, "load", Kind::End, 1),
    ];
    let d = decode(&rs, &names_in("RUNG_TRACE_BEGIN(load)"), 4, 1024);
    rung::model::trace::TraceRecord {
        version: id.into(),
        source_hash: w.source_hash(v).unwrap(),
        sizes: [("n".to_string(), 1 << 20)].into_iter().collect(),
        arch: "sm_90".into(),
        seed: 7,
        recorded_at: "2026-12-05T00:00:00Z".into(),
        launch_ms: 0.05,
        untraced_median_ms: Some(0.0008),
        untraced_basis: Some("gpu".into()),
        chrome_trace: format!(".rung/dumps/{id}/{id}.trace.json"),
        summary: summarise(&d, rung::trace::HEADER_MECHANISM),
        first_capacity: None,
    }
}

#[test]
fn get_trace_says_what_is_recorded_and_whether_it_is_of_the_file_as_it_is() {
    let (_tmp, ws) = common::new_workspace("vector-add");
    let ctx = Context::new(ws.clone());
    let args = VersionArgs { version: "v001".into() };
    let none = get_trace(&ctx, &args).unwrap();
    assert!(none.text.starts_with("not available yet: no trace has been recorded for v001"), "{}", none.text);
    assert_eq!(none.data["available"], false);

    let w = rung::workspace::Workspace::open(&ws).unwrap();
    let path = rung::stages::trace::record_path(&w, "v001");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_vec(&record(&ws, "v001")).unwrap()).unwrap();
    let got = get_trace(&ctx, &args).unwrap();
    assert_eq!((got.data["available"].as_bool(), got.data["current"].as_bool()), (Some(true), Some(true)));
    let text = &got.text;
    assert!(text.contains("v001 traced at n=1048576 (sm_90, rung_trace.cuh): 2 leaders on 2 SMs, 0.9 µs"), "{text}");
    // load: 600 and 900 ns; median (nearest rank) 600, p99 900; all of each leader's time.
    assert!(
        text.contains("load") && text.contains("0.6 µs") && text.contains("0.9 µs") && text.contains("100.0%"),
        "{text}"
    );
    assert!(
        text.contains("untraced: gpu median 0.0008 ms at the same size; the traced span is +12.5% of it"),
        "{text}"
    );
    assert_eq!(got.data["trace"]["summary"]["sections"][0]["calls"], 2);

    // The prompt carries the table while it is of the file as it is.
    let prompt = rung::agent::prompt::workspace_context(&ws, Some("v001"), "");
    assert!(
        prompt.contains("### Its trace (sections timed inside the kernel)") && prompt.contains("v001 traced at"),
        "{prompt}"
    );

    // An edit makes it a trace of an earlier file, said so, and the prompt leaves it out.
    let file = ws.join(&w.version("v001").unwrap().path);
    let src = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("{src}\n// edited\n")).unwrap();
    let stale = get_trace(&ctx, &args).unwrap();
    assert_eq!(stale.data["current"], false);
    assert!(stale.text.starts_with("the trace of v001 (2026-12-05T00:00:00Z) is of an earlier file"), "{}", stale.text);
    assert!(!rung::agent::prompt::workspace_context(&ws, Some("v001"), "").contains("### Its trace"));
}

/// `rung trace --json` prints a TraceRecord: the committed schema is the one generated from it,
/// and a record (with and without a second launch) validates against it.
#[test]
fn the_trace_record_matches_the_committed_schema() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schema/trace.schema.json")).unwrap();
    let committed: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        committed,
        rung::model::trace::schema(),
        "schema/trace.schema.json is stale: run `cargo run -- schema --trace > schema/trace.schema.json`"
    );
    let validator = jsonschema::validator_for(&committed).expect("the committed schema is valid");
    let (_tmp, ws) = common::new_workspace("vector-add");
    let mut rec = record(&ws, "v001");
    let plain = serde_json::to_value(&rec).unwrap();
    assert!(plain.get("first_capacity").is_none(), "absent unless there was a second launch");
    assert!(validator.is_valid(&plain), "{plain}");
    rec.first_capacity = Some(1 << 20);
    let twice = serde_json::to_value(&rec).unwrap();
    assert!(validator.is_valid(&twice), "{twice}");
    assert!(rec.table().contains("launched twice: the first launch asked for"), "{}", rec.table());
    let mut bad = twice.clone();
    bad["summary"]["requested"] = serde_json::json!("many");
    assert!(!validator.is_valid(&bad), "the schema rejects a wrong type");
}
