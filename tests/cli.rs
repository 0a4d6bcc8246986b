//! The `rung` binary end to end, on workspaces written by `rung new`: JSON that matches the
//! committed schema, exit codes, errors that name the file and line, history across renames.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn rung(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        // Keep the machine's own rung environment and Python out of these tests.
        .env("RUNG_HOME", dir.join(".rung-home"))
        .output()
        .expect("rung runs")
}

fn new_workspace(template: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let out = rung(tmp.path(), &["new", ws.to_str().unwrap(), "--template", template]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (tmp, ws)
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn committed_schema() -> serde_json::Value {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schema/check.schema.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn assert_matches_schema(value: &serde_json::Value) {
    let schema = committed_schema();
    let validator = jsonschema::validator_for(&schema).expect("the committed schema is valid");
    let errors: Vec<String> = validator.iter_errors(value).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "output does not match schema/check.schema.json:\n{}", errors.join("\n"));
}

#[test]
fn committed_schema_is_generated_from_the_types() {
    assert_eq!(
        committed_schema(),
        rung::model::report::check_schema(),
        "schema/check.schema.json is stale: run `cargo run -- schema > schema/check.schema.json`"
    );
}

#[test]
fn check_all_json_matches_the_schema_with_one_record_per_version() {
    for template in ["vector-add", "rmsnorm"] {
        let (_tmp, ws) = new_workspace(template);
        let n_versions = std::fs::read_dir(ws.join("versions")).unwrap().count();
        let out = rung(&ws, &["check", "--all", "--json"]);
        let v = json(&out);
        assert_matches_schema(&v);
        assert_eq!(v["schema"], 1);
        assert_eq!(v["versions"].as_array().unwrap().len(), n_versions, "{template}");
        assert_eq!(out.status.code(), Some(v["exit_code"].as_i64().unwrap() as i32));
        // This test's rung home is empty, so builds report the missing toolchain (tests/build.rs
        // covers them with the real one).
        for rec in v["versions"].as_array().unwrap() {
            assert_eq!(rec["stages"][1]["verdict"], "error", "{template}: {rec}");
            assert!(rec["stages"][1]["summary"].as_str().unwrap().contains("rung setup"), "{template}: {rec}");
            assert_eq!(rec["stages"][0]["stage"], "prepare", "{template}: {rec}");
            assert_eq!(rec["stages"][0]["verdict"], "pass", "{template}: {rec}");
        }
    }
}

#[test]
fn seed_is_recorded_and_reproducible() {
    let (_tmp, ws) = new_workspace("vector-add");
    let v = json(&rung(&ws, &["check", "--json", "--seed", "1234", "v001"]));
    assert_eq!(v["seed"], 1234);
    let h = json(&rung(&ws, &["history", "--json"]));
    assert_eq!(h["results"][0]["seed"], 1234);
}

#[test]
fn invalid_rung_toml_exits_4_and_names_file_line_and_key() {
    let (_tmp, ws) = new_workspace("vector-add");
    let toml = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    std::fs::write(ws.join("rung.toml"), toml.replacen("dtype = \"f32\"", "dtype = \"f23\"", 1)).unwrap();
    let out = rung(&ws, &["check"]);
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rung.toml:13:9: error: inputs[0].dtype: unknown variant `f23`"), "{err}");
    // Agents still get JSON, valid against the schema.
    let out = rung(&ws, &["check", "--json"]);
    assert_eq!(out.status.code(), Some(4));
    let v = json(&out);
    assert_matches_schema(&v);
    assert_eq!(v["diagnostics"][0]["line"], 13);
    assert_eq!(v["diagnostics"][0]["key"], "inputs[0].dtype");
    // The user's file is untouched.
    assert!(std::fs::read_to_string(ws.join("rung.toml")).unwrap().contains("f23"));
}

#[test]
fn signature_mismatch_exits_3_with_the_parameter_position() {
    let (_tmp, ws) = new_workspace("vector-add");
    let path = ws.join("versions/v001-naive.cu");
    let src = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, src.replace("float* __restrict__ out", "const float* __restrict__ out")).unwrap();
    let out = rung(&ws, &["check", "--json", "v001"]);
    assert_eq!(out.status.code(), Some(3));
    let v = json(&out);
    assert_eq!(v["versions"][0]["stages"].as_array().unwrap().len(), 1, "no build after a failed prepare");
    let d = &v["versions"][0]["stages"][0]["diagnostics"][0];
    assert_eq!(d["file"], "versions/v001-naive.cu");
    assert_eq!((d["line"].as_i64(), d["column"].as_i64()), (Some(4), Some(65)));
    assert!(d["message"].as_str().unwrap().contains("cannot write it"));
    // People get the line itself with a caret under the parameter.
    let text = String::from_utf8_lossy(&rung(&ws, &["check", "v001"]).stdout).into_owned();
    let at = text.find("      4 |").unwrap_or_else(|| panic!("{text}"));
    let caret_line = text[at..].lines().nth(1).unwrap();
    assert_eq!(caret_line.find('^'), Some("      4 | ".len() + 64), "{text}");
    // Other versions are unaffected.
    let v = json(&rung(&ws, &["check", "--json", "v002"]));
    assert_eq!(v["versions"][0]["stages"][0]["verdict"], "pass");
}

#[test]
fn unknown_version_is_a_usage_level_error() {
    let (_tmp, ws) = new_workspace("vector-add");
    let out = rung(&ws, &["check", "v042"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no version `v042`"));
}

#[test]
fn rename_keeps_the_history_of_a_version() {
    let (_tmp, ws) = new_workspace("vector-add");
    rung(&ws, &["check", "v002"]);
    std::fs::rename(ws.join("versions/v002-float4.cu"), ws.join("versions/v002-wide-loads.cu")).unwrap();
    let v = json(&rung(&ws, &["check", "--json", "v002"]));
    assert_eq!(v["versions"][0]["path"], "versions/v002-wide-loads.cu");
    let h = json(&rung(&ws, &["history", "--json", "v002"]));
    let paths: Vec<&str> = h["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["stage"] == "prepare")
        .map(|r| r["version"].as_str().unwrap())
        .collect();
    assert_eq!(paths, vec!["v002", "v002"], "both checks belong to v002");
}

#[test]
fn discovery_skips_editor_files_and_reports_duplicates() {
    let (_tmp, ws) = new_workspace("vector-add");
    let versions = ws.join("versions");
    std::fs::write(versions.join(".v001-naive.cu.swp"), "junk").unwrap();
    std::fs::write(versions.join("v001-naive.cu~"), "junk").unwrap();
    std::fs::write(versions.join("common.cuh"), "// shared").unwrap();
    std::fs::copy(versions.join("v001-naive.cu"), versions.join("v001-copy.cu")).unwrap();
    let out = rung(&ws, &["check", "--json"]);
    let v = json(&out);
    assert_eq!(v["versions"].as_array().unwrap().len(), 3);
    let d = &v["diagnostics"][0];
    assert_eq!(d["file"], "versions/v001-naive.cu");
    assert!(d["message"].as_str().unwrap().contains("already used by versions/v001-copy.cu"), "{d}");
    assert_eq!(out.status.code(), Some(4));
}

#[test]
fn new_never_overwrites() {
    let (tmp, ws) = new_workspace("vector-add");
    let out = rung(tmp.path(), &["new", ws.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists and is not empty"));
    let out = rung(tmp.path(), &["new", "other", "--template", "nope"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("the templates are: vector-add, rmsnorm, cute-dsl"));
    assert!(!tmp.path().join("other").exists());
}

#[test]
fn status_screen_lists_versions_with_their_rungs() {
    let (_tmp, ws) = new_workspace("rmsnorm");
    rung(&ws, &["check"]);
    let out = rung(&ws, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.starts_with("rmsnorm"), "{text}");
    assert!(text.contains("v001     cuda      draft     ✓"), "{text}");
    // After an edit, the old results say nothing about the file as it is.
    let path = ws.join("versions/v001-naive.cu");
    let source = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{source}\n// edited\n")).unwrap();
    let text = String::from_utf8_lossy(&rung(&ws, &[]).stdout).to_string();
    let row = text.lines().find(|l| l.trim_start().starts_with("v001")).unwrap();
    assert!(row.contains("draft     ·"), "{row}");
    assert!(row.contains("edited since its last check: `rung check v001`"), "{row}");
    let other = text.lines().find(|l| l.trim_start().starts_with("v002")).unwrap();
    assert!(other.contains("draft     ✓"), "an unedited version keeps its results: {other}");
    // Outside a workspace: a clear pointer to `rung demo`.
    let out = rung(ws.parent().unwrap(), &[]);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rung demo"));
}

#[test]
fn diff_of_sources_and_missing_sass() {
    let (_tmp, ws) = new_workspace("vector-add");
    let out = rung(&ws, &["diff", "v001", "v002"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--- versions/v001-naive.cu") && text.contains("+++ versions/v002-float4.cu"), "{text}");
    assert!(text.contains("+        float4 x"), "{text}");
    // This test's rung home has no toolchain: diff tries to build, and says why it cannot.
    let out = rung(&ws, &["diff", "v001", "v002", "--sass"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("run `rung setup`"), "{err}");
    assert!(err.contains("v001 does not build, so it has no SASS"), "{err}");
    assert!(err.contains("the version is not at fault"), "no compiler is the machine's fault: {err}");
}

fn write(dir: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

#[test]
fn gpu_mode_problem_folders_open_unmodified() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    write(
        ws,
        &[
            (
                "reference.py",
                "import torch\n\ndef ref_kernel(data):\n    a, b = data\n    return a + b\n\ndef generate_input(size, seed):\n    pass\n\ndef check_implementation(data, output):\n    pass\n",
            ),
            ("task.yml", "tests:\n  - {size: 1024, seed: 1}\nbenchmarks:\n  - {size: 1048576, seed: 2}\n"),
            ("submission.py", "import torch\n\ndef custom_kernel(data):\n    a, b = data\n    return a + b\n"),
            ("submission_bad.py", "import torch\n\ndef kernel(data):\n    return data\n"),
        ],
    );
    let before: Vec<_> = std::fs::read_dir(ws).unwrap().map(|e| e.unwrap().file_name()).collect();
    let v = json(&rung(ws, &["check", "--json"]));
    assert_eq!(v["format"], "gpu-mode");
    let ids: Vec<&str> = v["versions"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec!["submission", "submission_bad"]);
    assert_eq!(v["versions"][0]["stages"][0]["verdict"], "pass");
    assert_eq!(v["versions"][0]["stages"][0]["detail"]["entry"], "custom_kernel");
    let bad = &v["versions"][1]["stages"][0];
    assert_eq!(bad["verdict"], "fail");
    assert!(bad["diagnostics"][0]["help"].as_str().unwrap().contains("def custom_kernel(data):"));
    // Nothing of the user's was changed: only rung's own .rung/ was added.
    let mut after: Vec<_> = std::fs::read_dir(ws).unwrap().map(|e| e.unwrap().file_name()).collect();
    after.retain(|n| n != ".rung" && n != ".rung-home");
    assert_eq!(after.len(), before.len());
}

#[test]
fn kernelbench_problem_files_open_unmodified() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    write(
        ws,
        &[
            (
                "19_ReLU.py",
                "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\ndef get_inputs():\n    return [torch.randn(16, 16384)]\n\ndef get_init_inputs():\n    return []\n",
            ),
            (
                "versions/v001-relu.py",
                "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.clamp_min(x, 0)\n",
            ),
        ],
    );
    let v = json(&rung(ws, &["check", "--json"]));
    assert_eq!(v["format"], "kernel-bench");
    assert_eq!(v["versions"][0]["id"], "v001");
    assert_eq!(v["versions"][0]["kind"], "pytorch");
    assert_eq!(v["versions"][0]["stages"][0]["detail"]["entry"], "ModelNew");
    // The problem file itself also opens as the workspace.
    let v = json(&rung(ws, &["-C", "19_ReLU.py", "check", "--json"]));
    assert_eq!(v["format"], "kernel-bench");
}

#[test]
fn the_native_worker_says_why_it_cannot_run_without_a_gpu() {
    let out =
        Command::new(env!("CARGO_BIN_EXE_rung")).arg("worker").stdin(std::process::Stdio::null()).output().unwrap();
    let hello: rung::model::protocol::Hello =
        serde_json::from_slice(out.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(hello.protocol, rung::model::protocol::PROTOCOL);
    assert_eq!(hello.worker, rung::model::protocol::WorkerKind::Native);
    if rung::gpu::probe().first().is_none() {
        assert_eq!(out.status.code(), Some(1));
        let e = hello.error.expect("the reason it cannot run");
        assert_eq!(e.kind, "NoGpu");
        assert!(!e.message.is_empty());
        assert!(hello.capabilities.is_empty());
    } else {
        assert!(hello.capabilities.contains(&rung::model::protocol::Capability::Launch));
    }
}

#[test]
fn checks_rotate_through_a_pool_of_seeds() {
    let (_tmp, ws) = new_workspace("vector-add");
    let seeds: Vec<u64> =
        (0..9).map(|_| json(&rung(&ws, &["check", "--json", "v001"]))["seed"].as_u64().unwrap()).collect();
    let mut distinct = seeds[..8].to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 8, "eight different seeds: {seeds:?}");
    assert_eq!(seeds[8], seeds[0], "then the pool comes round again");
    // --seed still reproduces any check.
    assert_eq!(json(&rung(&ws, &["check", "--json", "--seed", "5", "v001"]))["seed"], 5);
}

/// A bench result as the bench rung records it, with `n` samples around `median_ms`.
fn record_bench(ws: &Path, version: &str, median_ms: f64, spread: f64) {
    use rung::stages::bench::{BenchDetail, SizeBench};
    let samples: Vec<f64> = (0..101).map(|i| median_ms + spread * ((i as f64) / 50.0 - 1.0)).collect();
    let s = rung::stats::summarize(&samples);
    let result = rung::model::report::StageResult {
        stage: rung::model::report::Stage::Bench,
        verdict: rung::model::report::Verdict::Pass,
        summary: "synthetic".into(),
        started_at: "2026-12-02T00:00:00.000Z".into(),
        duration_ms: 1.0,
        diagnostics: vec![],
        tools: Default::default(),
        result_id: None,
        reason: None,
        detail: rung::model::report::StageDetail::Bench(BenchDetail {
            gpu: "NVIDIA H200".into(),
            sizes: vec![SizeBench { headline: s, basis: "events".into(), ..Default::default() }],
            ..Default::default()
        }),
        ran_on: None,
    };
    let mut store = rung::store::Store::open(&ws.join(".rung")).unwrap();
    let payload = serde_json::to_string(&result).unwrap();
    store
        .record(&rung::store::NewResult {
            version,
            stage: "bench",
            verdict: "pass",
            source_hash: "synthetic",
            seed: Some(1),
            payload: &payload,
            tools: "{}",
            started_at_ms: 1,
            finished_at_ms: 2,
        })
        .unwrap();
}

#[test]
fn a_regression_beyond_the_confidence_intervals_exits_6() {
    let (_tmp, ws) = new_workspace("vector-add");
    // The versions exist in the history (no GPU here: their benches are recorded by hand).
    let out = rung(&ws, &["check", "--no-bench", "--json", "v001", "v002"]);
    assert!(out.status.code().is_some());
    record_bench(&ws, "v001", 0.100, 0.001);
    record_bench(&ws, "v002", 0.112, 0.001);
    let out = rung(&ws, &["check", "--no-bench", "--json", "--baseline", "v001", "--max-regression", "5", "v002"]);
    let v = json(&out);
    assert_matches_schema(&v);
    assert_eq!(out.status.code(), Some(6), "{v}");
    let c = &v["comparisons"][0];
    assert_eq!(
        (c["version"].as_str(), c["baseline"].as_str(), c["regressed"].as_bool()),
        (Some("v002"), Some("v001"), Some(true))
    );
    assert!((c["change_percent"].as_f64().unwrap() - 12.0).abs() < 0.01, "{c}");
    // Noisy enough that the intervals allow no slowdown beyond 5%: not a regression.
    record_bench(&ws, "v002", 0.104, 0.010);
    let out = rung(&ws, &["check", "--no-bench", "--json", "--baseline", "v001", "--max-regression", "5", "v002"]);
    let v = json(&out);
    assert_eq!(v["comparisons"][0]["regressed"], false, "{v}");
    assert_ne!(out.status.code(), Some(6));
}

#[test]
fn approve_and_reject_set_the_review_status_in_the_history() {
    let (_tmp, ws) = new_workspace("vector-add");
    // Never checked: approving adds it to the history first.
    let out = rung(&ws, &["approve", "v002"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("v002 (versions/v002-float4.cu) approved"));
    let out = rung(&ws, &["reject", "v001", "--reason", "uncoalesced loads"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let store = rung::store::Store::open(&ws.join(".rung")).unwrap();
    assert_eq!(store.version("v002").unwrap().unwrap().status, rung::store::Status::Approved);
    let v1 = store.version("v001").unwrap().unwrap();
    assert_eq!(v1.status, rung::store::Status::Rejected);
    assert_eq!(v1.reason.as_deref(), Some("uncoalesced loads"));
    // A check keeps the status a person gave.
    rung(&ws, &["check", "v002"]);
    let store = rung::store::Store::open(&ws.join(".rung")).unwrap();
    assert_eq!(store.version("v002").unwrap().unwrap().status, rung::store::Status::Approved);
    // An unknown version: a usage error that lists the versions there are.
    let out = rung(&ws, &["approve", "v042"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no version `v042`") && err.contains("v001, v002, v003"), "{err}");
}

#[test]
fn profile_without_a_gpu_says_so_and_records_it() {
    if rung::gpu::probe().first().is_some() {
        eprintln!("SKIPPED: a GPU is here; `rung selftest --gpu` profiles on it");
        return;
    }
    let (_tmp, ws) = new_workspace("vector-add");
    let out = rung(&ws, &["profile", "v001"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("v001 profile: no GPU: the profile rung runs the version, so it needs one"), "{text}");
    // Recorded, in the JSON the check's schema describes.
    let out = rung(&ws, &["profile", "v001", "--memcheck", "--json"]);
    let doc = json(&out);
    assert_eq!(doc["result"]["stage"], "memcheck");
    assert_eq!(doc["result"]["verdict"], "skipped");
    let history = json(&rung(&ws, &["history", "v001", "--json"]));
    let stages: Vec<&str> = history["results"].as_array().unwrap().iter().filter_map(|r| r["stage"].as_str()).collect();
    assert!(stages.contains(&"profile") && stages.contains(&"memcheck"), "{stages:?}");
    // One tool at a time; an unknown version names the ones there are.
    assert_eq!(rung(&ws, &["profile", "v001", "--memcheck", "--racecheck"]).status.code(), Some(2));
    let out = rung(&ws, &["profile", "v009"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("versions here: v001, v002, v003"));
}

/// A missing reference is one error, the same whether rung.toml names it or not: at the line
/// that names it when it does, every version's run skipped for that reason (never a Python
/// FileNotFoundError from the check), and a last line that does not say "passed" beside exit 4.
#[test]
fn a_missing_reference_is_one_clear_error_both_ways() {
    let (_tmp, ws) = new_workspace("vector-add");
    std::fs::remove_file(ws.join("reference.py")).unwrap();
    let unnamed = rung(&ws, &["check"]);
    let toml = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    let named = toml.replace("# reference = \"reference.py\"", "reference = \"ref_missing.py\"");
    assert_ne!(named, toml, "the template names its reference in a comment");
    std::fs::write(ws.join("rung.toml"), &named).unwrap();
    let line = named.lines().position(|l| l.starts_with("reference =")).unwrap() + 1;
    let with_name = rung(&ws, &["check"]);
    for (out, error) in [
        (&unnamed, "rung.toml: error: no reference".to_string()),
        (&with_name, format!("rung.toml:{line}:13: error: the reference `ref_missing.py` does not exist")),
    ] {
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(4), "{text}");
        assert!(text.contains(&error), "{error}\n{text}");
        assert!(!text.contains("FileNotFoundError"), "{text}");
        let last = text.lines().last().unwrap();
        assert!(last.starts_with("the workspace is invalid (1 error above)"), "{last}");
        assert!(!last.contains("passed"), "{last}");
        // Each version that got as far as the run rung skipped it for that reason.
        let runs: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("– run")).collect();
        assert!(
            runs.iter().all(|l| l.contains("no reference") || l.contains("no GPU") || l.contains("no nvcc")),
            "{runs:?}"
        );
    }
}

/// Looking for Python runs nothing of the workspace's: a `json.py` planted there (the probe
/// imports json) is not imported when rung merely opens the folder.
#[test]
fn a_module_planted_in_the_workspace_does_not_run_when_rung_probes_python() {
    let (_tmp, ws) = new_workspace("vector-add");
    let marker = ws.join("planted-ran");
    std::fs::write(ws.join("json.py"), format!("open({:?}, 'w').write('ran')\n", marker.to_str().unwrap())).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(["doctor", "--json"])
        .current_dir(&ws)
        .env("RUNG_PYTHON", "python3")
        .env("RUNG_HOME", ws.join(".rung-home"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doctor: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doctor["toolchain"]["python"]["path"].is_string(), "python3 was probed: {doctor}");
    assert!(!marker.exists(), "the planted json.py ran");
}

#[test]
fn a_reader_that_stops_early_ends_rung_quietly() {
    // `rung schema --worker | head -1`: the reader closes the pipe before rung has written it
    // all (the schema, about 70 KB, is more than a pipe holds, so the write cannot succeed).
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(["schema", "--worker"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
}
