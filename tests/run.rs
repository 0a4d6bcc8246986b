//! The run and check rungs without a GPU: Triton versions in Triton's interpreter against the
//! Python reference, and the faults that need no GPU, each with its exact verdict.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

fn rung(dir: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_rung")).args(args).current_dir(dir).output().unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn workspace(template: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let out =
        Command::new(env!("CARGO_BIN_EXE_rung")).args(["new", ws.to_str().unwrap(), "-t", template]).output().unwrap();
    assert!(out.status.success());
    (tmp, ws)
}

/// The stage (run or check) of a version, by name.
fn stage<'a>(rec: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    rec["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == name)
        .unwrap_or_else(|| panic!("no {name} stage in {rec}"))
}

#[test]
fn triton_versions_are_checked_in_the_interpreter_and_cuda_ones_say_no_gpu() {
    if !common::toolchain_here() {
        return;
    }
    let (_tmp, ws) = workspace("rmsnorm");
    let v = rung(&ws, &["check", "--json", "--seed", "11", "v004", "v001"]);
    let triton = &v["versions"][0];
    assert_eq!(stage(triton, "run")["verdict"], "pass", "{triton}");
    assert_eq!(stage(triton, "run")["detail"]["mode"], "triton-interpreter");
    let check = stage(triton, "check");
    assert_eq!(check["verdict"], "pass", "{check}");
    let results = check["detail"]["results"].as_array().unwrap();
    assert_eq!(results.len(), 5, "one per test size");
    assert!(results.iter().all(|r| r["comparison"]["max_abs_err"].as_f64().unwrap() < 1e-5));
    let cuda = &v["versions"][1];
    assert_eq!(stage(cuda, "run")["verdict"], "skipped");
    assert!(stage(cuda, "run")["summary"].as_str().unwrap().starts_with("no GPU"));
    // The reference is cached by (reference, seed, size): a second check reuses it.
    let cached = std::fs::read_dir(ws.join(".rung/cache/reference")).unwrap().count();
    assert_eq!(cached, 5);
    rung(&ws, &["check", "--json", "--seed", "11", "v004"]);
    assert_eq!(std::fs::read_dir(ws.join(".rung/cache/reference")).unwrap().count(), 5);
}

/// A vector-add Triton version whose kernel body line `BODY` replaces the store.
#[test]
fn user_rungs_from_checks_py_are_named_results() {
    if !common::toolchain_here() {
        return;
    }
    let (_tmp, ws) = workspace("rmsnorm");
    let v = rung(&ws, &["check", "--json", "v004"]);
    let check = stage(&v["versions"][0], "check");
    assert_eq!(check["verdict"], "pass", "{check}");
    let rungs = check["detail"]["user_rungs"].as_array().unwrap();
    assert_eq!(rungs.len(), 5, "the demo's one rung at each of the five test sizes");
    assert!(rungs.iter().all(|r| r["name"] == "rows are unit RMS after dividing by w" && r["pass"] == true));
    assert!(check["summary"].as_str().unwrap().ends_with("user rungs passed: rows are unit RMS after dividing by w"));

    // A rung that fails names itself, the size and the user's message.
    let extra = "\n\n@rung(\"every output is below 3\")\ndef small(inputs, outputs, sizes):\n    assert abs(outputs['y']).max() < 3, 'an output reached %s' % abs(outputs['y']).max()\n";
    let checks = std::fs::read_to_string(ws.join("checks.py")).unwrap();
    std::fs::write(ws.join("checks.py"), format!("{checks}{extra}")).unwrap();
    let v = rung(&ws, &["check", "--json", "v004"]);
    let check = stage(&v["versions"][0], "check");
    assert_eq!(check["verdict"], "fail");
    let summary = check["summary"].as_str().unwrap();
    assert!(summary.starts_with("user rung \"every output is below 3\" at cols="), "{summary}");
    assert!(summary.contains(": an output reached "), "{summary}");

    // A checks.py that does not load says so.
    std::fs::write(ws.join("checks.py"), "from rung import rung\n\ndef broken(:\n").unwrap();
    let v = rung(&ws, &["check", "--json", "v004"]);
    let summary = stage(&v["versions"][0], "check")["summary"].as_str().unwrap().to_string();
    assert!(summary.starts_with("checks.py does not load: SyntaxError"), "{summary}");
}
