//! The kernels a CuTe DSL or TileLang version launched, captured as the GPU run captures them
//! (`assets/python/rung_launched.py`), driven here with no GPU by
//! `tests/fixtures/launched/capture.py`: the hooks go in when the version imports the DSL, a
//! CuTe DSL function's cubin comes out of the fatbin its host module embeds, and a TileLang
//! kernel its cache served (no nvcc run) is found again by its source.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn capture(python: &str, version: &str, mode: &str, cache: &Path) -> serde_json::Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().unwrap();
    let scripts = work.path().join("scripts");
    rung::assets::write_python(&scripts).unwrap();
    let out = Command::new(python)
        .arg(root.join("tests/fixtures/launched/capture.py"))
        .arg(&scripts)
        .arg(root.join(version))
        .arg(mode)
        .arg(work.path())
        .arg(cache)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // The reply is the last line that is a JSON object (TileLang prints on its way out).
    let reply = text.lines().rev().find(|l| l.starts_with('{')).unwrap_or_default();
    let mut v: serde_json::Value = serde_json::from_str(reply)
        .unwrap_or_else(|e| panic!("{mode}: no JSON ({e}): {text}\n{}", String::from_utf8_lossy(&out.stderr)));
    // The files, read before the work folder goes.
    for k in v["kernels"].as_array_mut().unwrap() {
        for ext in ["cubin", "ptx"] {
            if let Some(p) = k[ext].as_str() {
                let bytes = std::fs::read(PathBuf::from(p)).unwrap();
                k[format!("{ext}_head")] = serde_json::json!(bytes[..4.min(bytes.len())].to_vec());
                k[format!("{ext}_text")] =
                    serde_json::json!(String::from_utf8_lossy(&bytes).contains(".entry main_kernel"));
            }
        }
    }
    v
}

const ELF: [u8; 4] = [0x7f, b'E', b'L', b'F'];

#[test]
fn a_cute_dsl_function_s_cubin_comes_out_of_its_host_module() {
    let Some(python) = common::python_with_package("cutlass", "cute-dsl") else { return };
    let cache = tempfile::tempdir().unwrap();
    let v = capture(&python, "assets/templates/cute-dsl/versions/v004-cute-add.py", "cute", cache.path());
    assert_eq!(v["hooked"], true, "the import hook patched JitCompiledFunction: {v}");
    let kernels = v["kernels"].as_array().unwrap();
    let names: Vec<&str> = kernels.iter().map(|k| k["name"].as_str().unwrap()).collect();
    let info: Vec<&str> = v["kernel_info"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert_eq!(names, info, "one capture per device kernel, named as the DSL names it");
    for k in kernels {
        assert_eq!(k["compiler"], "cute-dsl");
        assert_eq!(k["cubin_head"], serde_json::json!(ELF), "an ELF cubin: {k}");
        assert!(k.get("ptx").is_none(), "the DSL's runtime module holds no PTX: {k}");
    }
}

#[test]
fn a_tilelang_kernel_its_cache_served_is_found_again_by_its_source() {
    if common::real_nvcc().is_none() {
        return;
    }
    let Some(python) = common::python_with_package("tilelang", "tilelang") else { return };
    let cache = tempfile::tempdir().unwrap();
    let version = "assets/templates/tilelang/versions/v004-tilelang-add.py";
    let first = capture(&python, version, "tilelang", cache.path());
    assert_eq!(first["hooked"], true, "{first}");
    assert_eq!(first["compiled"], 1, "a cold cache compiles once: {first}");
    let second = capture(&python, version, "tilelang", cache.path());
    assert_eq!(second["compiled"], 0, "the second process is served by TileLang's cache: {second}");
    for v in [&first, &second] {
        let k = &v["kernels"][0];
        assert_eq!((k["name"].as_str(), k["compiler"].as_str()), (Some("main_kernel"), Some("tilelang")), "{v}");
        assert_eq!(k["cubin_head"], serde_json::json!(ELF), "{k}");
        assert_eq!(k["ptx_text"], true, "nvcc's PTX of the kernel kept beside it: {k}");
    }
    assert_eq!(first["kernels"][0]["hash"], second["kernels"][0]["hash"], "the cubin that was built is the one found");
}
