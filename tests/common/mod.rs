//! What the test files share: whether this machine has the toolchain a test needs (a test that
//! needs a missing tool is skipped with a message, unless RUNG_REQUIRE_TOOLCHAIN is set (CI sets
//! it after `rung setup`), in which case the missing tool fails the test), and the loopback
//! server that replays recorded model streams (`loopback`).

#![allow(dead_code)] // each test file uses some of these

use std::path::{Path, PathBuf};
use std::process::Command;

pub mod loopback;

/// `rung doctor --json`'s toolchain.
pub fn doctor_toolchain() -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_rung")).args(["doctor", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["toolchain"].clone()
}

fn skip(what: &str) {
    assert!(
        std::env::var_os("RUNG_REQUIRE_TOOLCHAIN").is_none(),
        "RUNG_REQUIRE_TOOLCHAIN is set but {what} is missing"
    );
    eprintln!("SKIPPED: no {what} here (run `rung setup`)");
}

/// The real nvcc, when this machine has nvcc and Triton.
pub fn real_nvcc() -> Option<PathBuf> {
    let tc = doctor_toolchain();
    let nvcc = tc["nvcc"]["path"].as_str().map(PathBuf::from);
    if nvcc.is_none() || !tc["python"]["packages"]["triton"].is_string() {
        skip("nvcc or Triton");
        return None;
    }
    nvcc
}

/// Whether this machine has nvcc and Triton.
pub fn toolchain_here() -> bool {
    real_nvcc().is_some()
}

/// rung's Python, when it has numpy.
pub fn python_with_numpy() -> Option<String> {
    let tc = doctor_toolchain();
    if tc["python"]["packages"]["numpy"].is_string() {
        return tc["python"]["path"].as_str().map(str::to_string);
    }
    skip("Python with numpy");
    None
}

/// rung's Python (`rung doctor`'s), when it can import `module`. Without it the test is skipped
/// with the command that installs it, unless RUNG_REQUIRE_TOOLCHAIN is set (.ci/run installs the
/// test-only packages into that Python).
pub fn python_with_module(module: &str) -> Option<String> {
    let tc = doctor_toolchain();
    let python = tc["python"]["path"].as_str().map(str::to_string);
    if let Some(py) = &python
        && Command::new(py).args(["-c", &format!("import {module}")]).output().is_ok_and(|o| o.status.success())
    {
        return python;
    }
    let fix = match &python {
        Some(py) => format!("{py} -m pip install {module}"),
        None => format!("rung setup, then pip install {module} into rung's Python"),
    };
    assert!(
        std::env::var_os("RUNG_REQUIRE_TOOLCHAIN").is_none(),
        "RUNG_REQUIRE_TOOLCHAIN is set but rung's Python cannot import `{module}` (install it: {fix})"
    );
    eprintln!("SKIPPED: rung's Python cannot import `{module}` (install it: {fix})");
    None
}

/// rung's Python, when `rung doctor` finds `package` in it (a `rung setup --with extra`
/// package, such as TileLang, that cannot be imported alone: TileLang imports torch, which
/// rung's stub stands in for when rung runs it). Skipped without it, unless
/// RUNG_REQUIRE_TOOLCHAIN is set.
pub fn python_with_package(package: &str, extra: &str) -> Option<String> {
    let tc = doctor_toolchain();
    if tc["python"]["packages"][package].is_string() {
        return tc["python"]["path"].as_str().map(str::to_string);
    }
    assert!(
        std::env::var_os("RUNG_REQUIRE_TOOLCHAIN").is_none(),
        "RUNG_REQUIRE_TOOLCHAIN is set but rung's Python has no {package}: run `rung setup --with {extra}`"
    );
    eprintln!("SKIPPED: rung's Python has no {package} (run `rung setup --with {extra}`)");
    None
}

/// A workspace written by `rung new DIR --template TEMPLATE` in a fresh temporary folder (kept
/// alive by the returned guard).
pub fn new_workspace(template: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let out = Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(["new", ws.to_str().unwrap(), "--template", template])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (tmp, ws)
}

/// Two real 100,000-line SASS listings: benches/data/big.cu built with VARIANT 0 and 1 by the
/// CUDA toolchain rung finds and disassembled by nvdisasm (a few percent of the instructions
/// differ), cached under target/bench-data. `None` without nvcc and nvdisasm.
pub fn big_sass_pair() -> Option<(String, String)> {
    let tc = rung::toolchain::Toolchain::discover();
    let (Some(nvcc), Some(nvdisasm)) = (tc.nvcc, tc.nvdisasm) else {
        eprintln!("SKIPPED: no nvcc/nvdisasm (run `rung setup`)");
        return None;
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/data/big.cu");
    let text = std::fs::read(&src).ok()?;
    let key = rung::store::sha256_hex(&text);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-data").join(&key[..12]);
    std::fs::create_dir_all(&dir).ok()?;
    let mut out = Vec::new();
    for v in [0, 1] {
        let sass = dir.join(format!("big{v}.sass"));
        if !sass.is_file() {
            let cubin = dir.join(format!("big{v}.cubin"));
            let ok = Command::new(&nvcc.path)
                .args(["-arch=sm_90", "-cubin", "-O3", &format!("-DVARIANT={v}"), "-o"])
                .arg(&cubin)
                .arg(&src)
                .status()
                .ok()?
                .success();
            assert!(ok, "nvcc failed on {}", src.display());
            let dis = Command::new(&nvdisasm.path).arg("-c").arg(&cubin).output().ok()?;
            std::fs::write(&sass, dis.stdout).ok()?;
        }
        out.push(std::fs::read_to_string(&sass).ok()?);
    }
    Some((out.remove(0), out.remove(0)))
}

/// The cute-dsl template's vector add with rung_trace_cute.py's markers (the selftest's): a
/// section, `add`, and a mark, `done`.
pub fn cute_add_with_markers() -> String {
    rung::selftest::cute_add_traced().unwrap()
}

/// The tilelang template's vector add with rung_trace_tilelang.py's markers (the selftest's).
pub fn tilelang_add_with_markers() -> String {
    rung::selftest::tilelang_add_traced().unwrap()
}

/// A check report as one line per version, `ID STAGE; STAGE; ...`, each stage written by
/// `stage`: for comparing two checks' verdicts version by version.
pub fn stage_lines(report: &serde_json::Value, stage: impl Fn(&serde_json::Value) -> String) -> Vec<String> {
    let versions = report["versions"].as_array().expect("a report's versions");
    versions
        .iter()
        .map(|v| {
            let stages: Vec<String> = v["stages"].as_array().expect("a version's stages").iter().map(&stage).collect();
            format!("{} {}", v["id"], stages.join("; "))
        })
        .collect()
}
