//! The fault cases that need no GPU (tests/fixtures/faults, `where = "cpu"`), through
//! `rung selftest`: each in a fresh demo workspace under a neutral name, in random order, with its
//! exact verdict, and a good version passing after each. The expectations are read here from
//! faults.toml, independently of the selftest's own judgement.

use std::process::Command;

mod common;

#[derive(serde::Deserialize)]
struct Manifest {
    fault: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    file: String,
    #[serde(rename = "where")]
    place: String,
    stage: String,
    verdict: String,
    reason: Option<String>,
    summary: Option<String>,
}

#[test]
fn every_cpu_fault_gets_its_exact_verdict_and_the_next_good_version_passes() {
    if !common::toolchain_here() {
        return;
    }
    let manifest: Manifest = toml::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/faults/faults.toml")).unwrap(),
    )
    .unwrap();
    let cpu: Vec<&Case> = manifest.fault.iter().filter(|c| c.place == "cpu").collect();
    let t0 = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(["selftest", "--json", "--run-limit", "4s", "--order-seed", "7"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    let runs = doc["faults"].as_array().unwrap();
    assert_eq!(runs.len(), cpu.len(), "every cpu case ran once");
    // Neutral names, not the files' own.
    assert!(runs.iter().all(|r| r["name"].as_str().unwrap().contains("-candidate.")));
    let order: Vec<&str> = runs.iter().map(|r| r["file"].as_str().unwrap()).collect();
    let manifest_order: Vec<&str> = cpu.iter().map(|c| c.file.as_str()).collect();
    assert_ne!(order, manifest_order, "the cases run in a shuffled order");
    for case in &cpu {
        let run = runs.iter().find(|r| r["file"] == case.file.as_str()).unwrap();
        let want = match &case.reason {
            Some(r) => format!("{}: {} ({r})", case.stage, case.verdict),
            None => format!("{}: {}", case.stage, case.verdict),
        };
        assert_eq!(run["got"], want.as_str(), "{}: {run}", case.file);
        if let Some(s) = case.summary.as_deref().filter(|s| !s.is_empty()) {
            assert!(run["summary"].as_str().unwrap().contains(s), "{}: {run}", case.file);
        }
        assert_eq!(run["recovered"], true, "the good version after {} passes", case.file);
    }
    assert_eq!(doc["ok"], true);
    assert!(out.status.success());
    // The hang is cut at the limit, not left running.
    let hang = runs.iter().find(|r| r["file"] == "t-hang.py").unwrap();
    assert!(hang["summary"].as_str().unwrap().contains("no answer within 4.0 s"), "{hang}");
    assert!(t0.elapsed().as_secs() < 300);
}
