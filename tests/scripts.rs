//! The GPU runs' measuring scripts, on this machine with a stand-in for Nsight Compute: what they
//! print is what a note quotes, so their sums and matching are tested where CI can run them.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// A stand-in `ncu` printing `--csv` rows as Nsight Compute does: ten calls of three kernels
/// (4.0, 2.5 and 1.5 µs under `--cache-control all`, 3.0, 2.0 and 1.0 µs under `none`), each
/// with its three metrics, one of them in another unit.
const FAKE_NCU: &str = r#"#!/usr/bin/env python3
import sys
cache = sys.argv[sys.argv.index("--cache-control") + 1]
per = [4.0, 2.5, 1.5] if cache == "all" else [3.0, 2.0, 1.0]
print("==PROF== Connected to process")
print('"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"')
for i in range(30):
    d = per[i % 3]
    print('"%d","k%d","gpc__cycles_elapsed.avg.per_second","cycle/nsecond","2.00"' % (i, i % 3))
    print('"%d","k%d","gpc__cycles_elapsed.max","cycle","%s"' % (i, i % 3, format(int(d * 2000), ",")))
    print('"%d","k%d","gpu__time_duration.sum","nsecond","%s"' % (i, i % 3, format(int(d * 1000), ",")))
"#;

#[test]
fn ncu_agree_sums_each_calls_kernels_in_both_cache_modes() {
    // rung's Python (the script needs only the standard library): skipped without it, a failure
    // under RUNG_REQUIRE_TOOLCHAIN.
    let Some(python) = common::python_with_module("csv") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("ncu"), FAKE_NCU).unwrap();
    std::fs::set_permissions(bin.join("ncu"), std::fs::Permissions::from_mode(0o755)).unwrap();
    // A KernelBench-like workspace (no rung.toml, no task.yml): one benchmark, called through
    // problem_launch.py, which the stand-in never runs.
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let report = tmp.path().join("report.json");
    let bench = serde_json::json!({"stage": "bench", "verdict": "pass", "detail": {"sizes": [
        {"sizes": {}, "basis": "cupti", "headline": {"median": 0.0061, "ci_rel": 0.001}}]}});
    let doc = serde_json::json!({"versions": [
        {"id": "v001", "path": "versions/v001-torch.py", "stages": [bench]},
        {"id": "v002", "path": "versions/v002-wrong.py", "stages": [{"stage": "run", "verdict": "fail"}]},
    ]});
    std::fs::write(&report, doc.to_string()).unwrap();
    let out = tmp.path().join("out");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ncu_agree.py");
    let run = Command::new(&python).arg(&script).arg(&ws).arg(&report).arg(&out).env("PATH", path).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));

    let rows: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("ncu-agree.json")).unwrap()).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let v1 = &rows[0];
    assert_eq!(v1["kernels_per_call"], 3);
    let close = |v: &serde_json::Value, want: f64| (v.as_f64().unwrap() - want).abs() < 1e-6;
    // Each call's three kernels summed: 8.0 µs with every cache flushed before every kernel,
    // 6.0 µs under rung's conditions; rung's median 6.1 µs.
    assert!(close(&v1["ncu_us"], 8.0), "{v1}");
    assert!(close(&v1["ncu_call_flush_us"], 6.0), "{v1}");
    assert!(close(&v1["ncu_gpc_us"], 8.0), "{v1}");
    assert!(close(&v1["delta"], 8.0 / 6.1 - 1.0), "{v1}");
    assert!(close(&v1["delta_call_flush"], 6.0 / 6.1 - 1.0), "{v1}");
    // Per kernel, what ncu·call reads over rung: (6.0 − 6.1) / 3.
    assert!(close(&v1["offset_per_kernel_us"], -0.1 / 3.0), "{v1}");
    assert!(stdout.contains("  3  -0.03\n"), "{stdout}");
    // A version whose bench did not pass is listed, not timed.
    assert_eq!(rows[1]["note"], "no passing bench");
    assert!(stdout.contains("+31.15%") && stdout.contains("-1.64%"), "{stdout}");
    assert!(stdout.contains("1 timed, largest |Δ| 31.15% (ncu), 1.64% (ncu·call)"), "{stdout}");
}
