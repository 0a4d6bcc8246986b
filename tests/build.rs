//! The build rung with the real CUDA toolchain (installed by `rung setup`, as `.ci/run` does).
//! Without it these tests say so and pass, unless RUNG_REQUIRE_TOOLCHAIN is set (CI sets it),
//! in which case a missing toolchain is a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::real_nvcc;

fn rung(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rung"));
    cmd.args(args).current_dir(dir).env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("rung runs")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn workspace(template: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    assert!(rung(tmp.path(), &["new", ws.to_str().unwrap(), "--template", template], &[]).status.success());
    (tmp, ws)
}

/// CuTe DSL and TileLang versions are traced through their own markers' modules: without the
/// markers `rung trace` says how to add them, with them (and no GPU) it names them in one line,
/// and it refuses block leaders as it does for Triton. Nothing here needs the DSLs installed.
#[test]
fn a_dsl_version_is_told_how_to_mark_its_sections_and_which_leaders_it_has() {
    type Marked = fn() -> String;
    let cases: [(&str, Marked, &str, &str); 2] = [
        ("cute-dsl", common::cute_add_with_markers, "rung_trace_cute", "CuTe DSL"),
        ("tilelang", common::tilelang_add_with_markers, "rung_trace_tilelang", "TileLang"),
    ];
    for (template, marked, module, dsl) in cases {
        let (_tmp, ws) = workspace(template);
        let file = std::fs::read_dir(ws.join("versions"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("v004"))
            .unwrap();
        let out = rung(&ws, &["trace", "v004"], &[]);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(rung::exit::USAGE), "{template}: {said}");
        assert!(said.contains(&format!(r#"has no rt.section("name"): `import {module} as rt`"#)), "{said}");
        std::fs::write(&file, marked()).unwrap();
        let out = rung(&ws, &["trace", "v004"], &[]);
        let said = String::from_utf8_lossy(&out.stdout);
        if rung::check::Machine::discover().gpu.first().is_none() {
            assert_eq!(out.status.code(), Some(0), "{template}: {said}{}", String::from_utf8_lossy(&out.stderr));
            assert!(said.starts_with("no GPU here: v004's kernels compile with its markers ("), "{said}");
            assert!(said.contains("add") && said.contains("done"), "{said}");
            assert_eq!(said.lines().count(), 1, "{said}");
        }
        let out = rung(&ws, &["trace", "v004", "--leader", "block"], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(rung::exit::USAGE), "{template}: {err}");
        assert!(err.contains(&format!("{dsl} versions are traced by lane 0 of every warp")), "{err}");
    }
}

/// A `.ptx` version marks its sections with `// rung_trace` comment lines: its own build sees
/// comments (it passes and its PTX has no clock read), the traced variant builds with ptxas with
/// one record per marker, `rung trace` without a GPU names the markers in one line, and a `.ptx`
/// version with none is told how to add them.
#[test]
fn a_ptx_versions_marker_comments_become_records_only_when_traced() {
    let Some(_) = real_nvcc() else { return };
    let (_tmp, ws) = workspace("vector-add");
    let traced = include_str!("fixtures/ptx/vector-add-traced.ptx");
    std::fs::write(ws.join("versions/v004-traced.ptx"), traced).unwrap();
    let plain: String = traced.lines().filter(|l| !l.contains("// rung_trace ")).map(|l| format!("{l}\n")).collect();
    std::fs::write(ws.join("versions/v005-plain.ptx"), plain).unwrap();
    let v = json(&rung(&ws, &["check", "--json", "v004"], &[]));
    let build = &v["versions"][0]["stages"][1];
    assert_eq!((build["stage"].as_str(), build["verdict"].as_str()), (Some("build"), Some("pass")), "{v}");
    let out = rung(&ws, &["trace", "v004"], &[]);
    let said = String::from_utf8_lossy(&out.stdout);
    if rung::check::Machine::discover().gpu.first().is_none() {
        assert_eq!(out.status.code(), Some(0), "{said}{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(said.lines().count(), 1, "{said}");
        assert!(said.starts_with("no GPU here: v004's traced variant builds for sm_90 (markers: "), "{said}");
        for name in ["load", "store", "done"] {
            assert!(said.contains(name), "{name}: {said}");
        }
    }
    let tc = rung::toolchain::Toolchain::discover();
    let scratch = tempfile::tempdir().unwrap();
    let t = rung::trace::build_traced_ptx(
        &tc.ptxas.as_ref().expect("ptxas beside nvcc").path,
        &ws.join("versions/v004-traced.ptx"),
        "sm_90",
        scratch.path(),
        rung::trace::Leader::Warp,
    )
    .unwrap();
    assert_eq!(t.ptx.matches("%globaltimer").count(), 5, "two sections and a mark: {}", t.ptx);
    assert!(t.ptx.contains(rung::trace::PTX_BUFFER) && !t.cubin.is_empty());
    let out = rung(&ws, &["trace", "v005"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(rung::exit::USAGE), "{err}");
    assert!(err.contains("versions/v005-plain.ptx has no `// rung_trace begin NAME` line"), "{err}");
}

#[test]
fn every_version_of_a_fresh_workspace_has_ptx_cubin_and_sass() {
    let Some(_) = real_nvcc() else { return };
    for template in ["rmsnorm", "vector-add"] {
        let (_tmp, ws) = workspace(template);
        let out = rung(&ws, &["check", "--all", "--json"], &[]);
        let v = json(&out);
        let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
        assert!(!text.contains("not implemented"), "{template}");
        for rec in v["versions"].as_array().unwrap() {
            let id = rec["id"].as_str().unwrap();
            let build = &rec["stages"][1];
            assert_eq!(build["stage"], "build", "{id}");
            assert_eq!(build["verdict"], "pass", "{id}: {build}");
            let kernels = build["detail"]["kernels"].as_array().unwrap();
            assert!(!kernels.is_empty(), "{id}: a resource report per kernel");
            assert!(kernels[0]["resources"]["registers"].as_u64().unwrap() > 0, "{id}");
            let dumps = ws.join(".rung/dumps").join(id);
            let names: Vec<String> = std::fs::read_dir(&dumps)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            let mut wanted = vec!["ptx", "cubin", "sass"];
            if rec["kind"] == "triton" {
                wanted.extend(["ttir", "ttgir", "llir"]);
                assert_eq!(build["detail"]["ahead_of_time"], true);
                // The kernel run() really launches at the bench size, not a guess: the demo's
                // wrapper picks 32 warps for 8192 columns.
                assert!(
                    build["detail"]["notes"][0].as_str().unwrap().starts_with("kernels captured from run()"),
                    "{build}"
                );
                if template == "rmsnorm" {
                    assert_eq!(kernels[0]["num_warps"], 32, "{build}");
                }
                // The script parses no report: rung reads the cubin's registers (cuobjdump, run
                // here independently) and keeps ptxas's report beside the dumps.
                assert!(names.iter().any(|n| n.ends_with(".ptxas.txt")), "{id}: {names:?}");
                let cuobjdump = common::doctor_toolchain()["cuobjdump"]["path"].as_str().unwrap().to_string();
                let cubin = dumps.join(names.iter().find(|n| n.ends_with(".cubin")).unwrap());
                let usage = Command::new(cuobjdump).arg("--dump-resource-usage").arg(&cubin).output().unwrap();
                let usage = String::from_utf8_lossy(&usage.stdout);
                let regs = usage.split_whitespace().find_map(|w| w.strip_prefix("REG:")).unwrap();
                assert_eq!(kernels[0]["resources"]["registers"].as_u64().unwrap().to_string(), regs, "{id}: {usage}");
                assert!(kernels[0]["resources"]["arch"].as_str().unwrap().starts_with("sm_"), "{build}");
            }
            for ext in wanted {
                let f = names
                    .iter()
                    .find(|n| n.ends_with(&format!(".{ext}")))
                    .unwrap_or_else(|| panic!("{id}: no .{ext} in {names:?}"));
                let content = std::fs::read(dumps.join(f)).unwrap();
                assert!(!content.is_empty(), "{id}: {f} is empty");
            }
            let sass =
                std::fs::read_to_string(dumps.join(names.iter().find(|n| n.ends_with(".sass")).unwrap())).unwrap();
            assert!(sass.contains("EXIT"), "{id}: the SASS is a disassembly");
        }
        assert_eq!(out.status.code(), Some(0), "{template}");
    }
}

#[test]
fn an_unchanged_version_is_not_rebuilt_and_a_changed_option_is() {
    let Some(nvcc) = real_nvcc() else { return };
    let (tmp, ws) = workspace("vector-add");
    // A counting nvcc first in the search order (CUDA_HOME), forwarding to the real one, with the
    // real ptxas and cuobjdump beside it.
    let root = tmp.path().join("cuda");
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let count = tmp.path().join("nvcc-calls");
    std::fs::write(
        bin.join("nvcc"),
        format!("#!/bin/sh\necho call >> '{}'\nexec '{}' \"$@\"\n", count.display(), nvcc.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("nvcc"), std::fs::Permissions::from_mode(0o755)).unwrap();
    for tool in ["ptxas", "cuobjdump", "nvdisasm"] {
        std::os::unix::fs::symlink(nvcc.parent().unwrap().join(tool), bin.join(tool)).unwrap();
    }
    let env = [("CUDA_HOME", root.to_str().unwrap())];
    let calls = || std::fs::read_to_string(&count).map_or(0, |s| s.lines().count());

    let first = json(&rung(&ws, &["check", "--json", "v001"], &env));
    assert_eq!(first["versions"][0]["stages"][1]["verdict"], "pass", "{first}");
    assert!(
        first["versions"][0]["stages"][1]["detail"]["commands"][0]
            .as_str()
            .unwrap()
            .starts_with(&bin.join("nvcc").display().to_string())
    );
    // The first check compiles (and asks nvcc its version once, remembered from then on).
    let n = calls();
    assert!(n >= 1);
    // Where the build's time went, by tool, within the rung's own time.
    let build = &first["versions"][0]["stages"][1];
    let phases = build["detail"]["phases"].as_object().unwrap();
    for tool in ["nvcc", "ptxas", "store"] {
        assert!(phases.get(tool).and_then(|t| t.as_f64()).is_some_and(|t| t > 0.0), "no {tool} time: {phases:?}");
    }
    // The SASS listing follows the rung: the run does not wait for it.
    assert!(!phases.contains_key("nvdisasm") && !phases.contains_key("cuobjdump"), "SASS in the rung: {phases:?}");
    let commands = build["detail"]["commands"].as_array().unwrap();
    assert!(!commands.iter().any(|c| c.as_str().unwrap().contains("nvdisasm")), "{commands:?}");
    let artefacts = |b: &serde_json::Value| -> Vec<String> {
        b["detail"]["artefacts"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(artefacts(build), ["v001.ptx", "v001.cubin"], "{build}");
    // ... and is in the dumps by the time rung has ended.
    let sass = std::fs::read_to_string(ws.join(".rung/dumps/v001/v001.sass")).unwrap();
    assert!(sass.contains("EXIT"), "{sass}");
    let summed: f64 = phases.values().filter_map(|t| t.as_f64()).sum();
    let rung_s = build["duration_ms"].as_f64().unwrap() / 1000.0;
    assert!(summed <= rung_s + 0.005, "the phases ({summed} s) exceed the build rung ({rung_s} s): {phases:?}");

    let second = json(&rung(&ws, &["check", "--json", "v001"], &env));
    assert_eq!(calls(), n, "an unchanged version calls nvcc zero times");
    assert_eq!(second["versions"][0]["stages"][1]["detail"]["cached"], true);
    let phases = &second["versions"][0]["stages"][1]["detail"]["phases"];
    assert!(phases.as_object().unwrap().is_empty(), "a cached build ran no tool: {phases}");
    assert!(ws.join(".rung/dumps/v001/v001.sass").is_file());
    // The listing made after the first build joined the cache's record: the cached build lists it.
    let cached = &second["versions"][0]["stages"][1];
    assert_eq!(artefacts(cached), ["v001.ptx", "v001.cubin", "v001.sass"], "{cached}");

    // One build option changes: rebuilt.
    let toml = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    std::fs::write(ws.join("rung.toml"), toml.replace("# flags = [\"-O3\"]", "flags = [\"-DRUNG_TEST=1\"]")).unwrap();
    let third = json(&rung(&ws, &["check", "--json", "v001"], &env));
    assert_eq!(calls(), n + 1, "a changed flag rebuilds");
    assert_eq!(third["versions"][0]["stages"][1]["detail"]["cached"], false);
    assert!(third["versions"][0]["stages"][1]["detail"]["commands"][0].as_str().unwrap().contains("-DRUNG_TEST=1"));

    // So does a change to a header the version includes.
    std::fs::write(ws.join("versions/common.cuh"), "#define RUNG_UNUSED 1\n").unwrap();
    let src = std::fs::read_to_string(ws.join("versions/v001-naive.cu")).unwrap();
    std::fs::write(ws.join("versions/v001-naive.cu"), format!("#include \"common.cuh\"\n{src}")).unwrap();
    rung(&ws, &["check", "--json", "v001"], &env);
    assert_eq!(calls(), n + 2);
    rung(&ws, &["check", "--json", "v001"], &env);
    assert_eq!(calls(), n + 2);
    std::fs::write(ws.join("versions/common.cuh"), "#define RUNG_UNUSED 2\n").unwrap();
    rung(&ws, &["check", "--json", "v001"], &env);
    assert_eq!(calls(), n + 3, "a changed header rebuilds");
}

/// Adds a version file and returns its build stage's diagnostics (file, line, column, message).
fn build_diagnostics(ws: &Path, name: &str, source: &str) -> (serde_json::Value, Vec<(String, u64, u64, String)>) {
    std::fs::write(ws.join("versions").join(name), source).unwrap();
    let id = name.split('-').next().unwrap();
    let v = json(&rung(ws, &["check", "--json", id], &[]));
    let stages = v["versions"][0]["stages"].as_array().unwrap();
    // The build stage when there is one (a failed prepare stops before it).
    let stage = stages.iter().find(|s| s["stage"] == "build").unwrap_or(&stages[0]).clone();
    let diags = stage["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["severity"] == "error")
        .map(|d| {
            (
                d["file"].as_str().unwrap().to_string(),
                d["line"].as_u64().unwrap(),
                d["column"].as_u64().unwrap(),
                d["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (stage, diags)
}

const TYPE_ERROR: &str = r#"// rung: grid="cdiv(n, 256)" block=256
extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int wrong = out;
    if (i < n) out[i] = a[i] + b[i] + wrong;
}
"#;

#[test]
fn a_type_error_is_reported_at_its_line_in_the_version() {
    let Some(_) = real_nvcc() else { return };
    let (_tmp, ws) = workspace("vector-add");
    let (stage, d) = build_diagnostics(&ws, "v010-type-error.cu", TYPE_ERROR);
    assert_eq!(stage["verdict"], "fail");
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!((d[0].0.as_str(), d[0].1, d[0].2), ("versions/v010-type-error.cu", 5, 17));
    assert!(d[0].3.contains("cannot be used to initialize an entity of type \"int\""));
}

/// nvcc splits an `-I` folder at commas: a workspace under `kernels,v2/` still finds rung's
/// tracer header, in its build and in its traced variant; and a header nobody has (the host
/// preprocessor's error, in GCC's format) is an error at its line with the fix, not "the build
/// failed".
#[test]
fn a_workspace_under_a_folder_with_a_comma_builds_and_a_missing_header_is_named_at_its_line() {
    let Some(nvcc) = real_nvcc() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("kernels,v2").join("ws");
    std::fs::create_dir_all(ws.parent().unwrap()).unwrap();
    assert!(rung(tmp.path(), &["new", ws.to_str().unwrap(), "--template", "vector-add"], &[]).status.success());
    let src = std::fs::read_to_string(ws.join("versions/v001-naive.cu")).unwrap();
    let body_at = src.find("int i = ").expect("the naive kernel's index line");
    let mut traced = format!("#include <rung_trace.cuh>\n{}RUNG_TRACE_BEGIN(index);\n    ", &src[..body_at]);
    traced.push_str(&src[body_at..].replacen(";\n", ";\n    RUNG_TRACE_END(index);\n", 1));
    let (stage, d) = build_diagnostics(&ws, "v010-traced.cu", &traced);
    assert_eq!(stage["verdict"], "pass", "{stage}");
    assert!(d.is_empty(), "{d:?}");
    let scratch = ws.join(".rung/tmp/traced");
    let t = rung::trace::build_traced(
        &nvcc,
        &ws.join("versions/v010-traced.cu"),
        "sm_90",
        &[],
        &scratch,
        &ws,
        rung::trace::Leader::Warp,
    )
    .unwrap();
    assert_eq!(t.ptx.matches("%globaltimer").count(), 2, "one clock read per marker");

    let (stage, d) = build_diagnostics(&ws, "v011-missing-header.cu", &format!("#include \"tiles.cuh\"\n{src}"));
    assert_eq!(stage["verdict"], "fail");
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!((d[0].0.as_str(), d[0].1, d[0].2), ("versions/v011-missing-header.cu", 1, 10));
    assert_eq!(d[0].3, "tiles.cuh: No such file or directory");
    assert!(stage["summary"].as_str().unwrap().contains("tiles.cuh"), "{stage}");
}

const WGMMA: &str = r#"// rung: grid="cdiv(n, 256)" block=256
extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    if (i < n) out[i] = a[i] + b[i];
}
"#;

#[test]
fn wgmma_builds_for_sm_90a_and_on_plain_sm_90_points_at_the_asm_line() {
    let Some(_) = real_nvcc() else { return };
    let (_tmp, ws) = workspace("vector-add");
    // rung picks sm_90a by itself...
    let (stage, d) = build_diagnostics(&ws, "v011-wgmma.cu", WGMMA);
    assert!(d.is_empty(), "{d:?}");
    assert_eq!(stage["detail"]["arch"], "sm_90a");
    assert!(stage["detail"]["arch_reason"].as_str().unwrap().contains("wgmma"));
    // ...and when rung.toml pins plain sm_90, the error lands on the asm line with the fix.
    let toml = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    std::fs::write(ws.join("rung.toml"), toml.replace("# arch = \"sm_90a\"", "arch = \"sm_90\"")).unwrap();
    let (stage, d) = build_diagnostics(&ws, "v011-wgmma.cu", WGMMA);
    assert_eq!(stage["verdict"], "fail");
    assert!(!d.is_empty());
    assert_eq!((d[0].0.as_str(), d[0].1), ("versions/v011-wgmma.cu", 5), "{d:?}");
    assert!(d[0].3.contains("wgmma.fence"), "{d:?}");
    assert!(stage["diagnostics"][0]["help"].as_str().unwrap().contains("sm_90a"));
}

const TRITON_ERROR: &str = r#"import triton
import triton.language as tl


@triton.jit
def vector_add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a + bee, mask=mask)


def run(a, b, out, n):
    vector_add_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
"#;

#[test]
fn a_triton_error_is_reported_at_its_line() {
    let Some(_) = real_nvcc() else { return };
    let (_tmp, ws) = workspace("vector-add");
    let (stage, d) = build_diagnostics(&ws, "v012-triton-error.py", TRITON_ERROR);
    assert_eq!(stage["verdict"], "fail");
    assert_eq!((d[0].0.as_str(), d[0].1), ("versions/v012-triton-error.py", 10), "{d:?}");
    assert!(d[0].3.contains("bee"), "{d:?}");
}

/// A Triton version that imports a module found only through the user's PYTHONPATH (a package
/// installed with `pip --target`): the ahead-of-time build keeps that path after the
/// workspace's own root.
#[test]
fn the_ahead_of_time_build_keeps_the_users_pythonpath() {
    let Some(_) = real_nvcc() else { return };
    let (tmp, ws) = workspace("vector-add");
    let site = tmp.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("rung_pythonpath_probe.py"), "BLOCK = 1024\n").unwrap();
    let src = std::fs::read_to_string(ws.join("versions/v003-triton.py")).unwrap();
    let with_import = format!("import rung_pythonpath_probe  # noqa: F401\n{src}");
    std::fs::write(ws.join("versions/v003-triton.py"), with_import).unwrap();
    let out = rung(&ws, &["check", "--json", "--no-bench", "v003"], &[("PYTHONPATH", site.to_str().unwrap())]);
    let v = json(&out);
    let build = v["versions"][0]["stages"].as_array().unwrap().iter().find(|s| s["stage"] == "build").unwrap().clone();
    assert_eq!(build["verdict"], "pass", "{build}");
}

/// ptxas rejects a Triton kernel's inline PTX: rung parses ptxas's messages itself (the script
/// only saves the rejected PTX) and places them at the version's line through its `.loc`s.
#[test]
fn a_triton_ptxas_error_is_placed_at_the_inline_asm_line() {
    let Some(_) = real_nvcc() else { return };
    let (_tmp, ws) = workspace("vector-add");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/build/triton-ptxas-error/version.py");
    let src = std::fs::read_to_string(fixture).unwrap();
    // Bound to the workspace's parameters (a, b, out, n); the kernel stays as it was captured.
    let run = src.find("def run(").unwrap();
    let src = format!(
        "{}def run(a, b, out, n):\n    square_kernel[(triton.cdiv(n, 256),)](a, out, n, BLOCK=256)\n",
        &src[..run]
    );
    let (stage, d) = build_diagnostics(&ws, "v014-ptxas.py", &src);
    assert_eq!(stage["verdict"], "fail", "{stage}");
    assert_eq!((d[0].0.as_str(), d[0].1), ("versions/v014-ptxas.py", 10), "the error itself, at the asm line: {d:?}");
    let ptxas: Vec<_> = d.iter().filter(|x| x.3.starts_with("ptxas: ")).collect();
    assert!(!ptxas.is_empty(), "ptxas's own messages: {d:?}");
    assert!(ptxas.iter().all(|x| x.0 == "versions/v014-ptxas.py" && x.1 == 10), "{ptxas:?}");
    assert!(ptxas.iter().any(|x| x.3.contains(".f32x")), "{ptxas:?}");
}

#[test]
fn a_python_syntax_error_is_reported_at_its_line() {
    let Some(_) = real_nvcc() else { return };
    let (_tmp, ws) = workspace("vector-add");
    let src = TRITON_ERROR.replace("def run(a, b, out, n):", "def run(a, b, out, n)").replace("a + bee", "a");
    let (stage, d) = build_diagnostics(&ws, "v013-syntax.py", &src);
    // Prepare fails, not passes: Python itself is asked whether the file parses.
    assert_eq!((stage["stage"].as_str(), stage["verdict"].as_str()), (Some("prepare"), Some("fail")), "{stage}");
    assert_eq!((d[0].0.as_str(), d[0].1), ("versions/v013-syntax.py", 13), "{d:?}");
    assert!(d[0].3.starts_with("SyntaxError: ") && d[0].3.matches("SyntaxError").count() == 1, "said once: {d:?}");
    assert!(d[0].2 > 0, "at a column: {d:?}");
}

#[test]
fn a_ptx_version_assembles_and_its_errors_cite_its_lines() {
    let Some(_) = real_nvcc() else { return };
    let (_tmp, ws) = workspace("vector-add");
    // Make a PTX version from the CUDA one, through rung itself.
    assert!(rung(&ws, &["check", "v001"], &[]).status.success());
    let ptx = std::fs::read_to_string(ws.join(".rung/dumps/v001/v001.ptx")).unwrap();
    std::fs::write(ws.join("versions/v020-hand.ptx"), &ptx).unwrap();
    let v = json(&rung(&ws, &["check", "--json", "v020"], &[]));
    assert_eq!(v["versions"][0]["kind"], "ptx");
    assert_eq!(v["versions"][0]["stages"][1]["verdict"], "pass", "{v}");
    // Break one instruction.
    let (line_no, _) =
        ptx.lines().enumerate().find(|(_, l)| l.trim_start().starts_with("add.f32")).expect("an add.f32");
    let broken: String = ptx
        .lines()
        .enumerate()
        .map(|(i, l)| if i == line_no { "\tadd.f32 %f99, %f1;\n".to_string() } else { format!("{l}\n") })
        .collect();
    let (stage, d) = build_diagnostics(&ws, "v020-hand.ptx", &broken);
    assert_eq!(stage["verdict"], "fail");
    assert_eq!((d[0].0.as_str(), d[0].1), ("versions/v020-hand.ptx", line_no as u64 + 1), "{d:?}");
}

#[test]
fn nvrtc_builds_and_reports_errors_like_nvcc() {
    let Some(_) = real_nvcc() else { return };
    let (_tmp, ws) = workspace("vector-add");
    let toml = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    std::fs::write(ws.join("rung.toml"), toml.replace("# flags = [\"-O3\"]", "compiler = \"nvrtc\"")).unwrap();
    let v = json(&rung(&ws, &["check", "--json", "v002"], &[]));
    let build = &v["versions"][0]["stages"][1];
    assert_eq!(build["verdict"], "pass", "{build}");
    assert_eq!(build["detail"]["compiler"], "nvrtc");
    assert!(build["detail"]["commands"][0].as_str().unwrap().contains(" internal-nvrtc versions/v002-float4.cu "));
    assert!(ws.join(".rung/dumps/v002/v002.sass").is_file());
    let (stage, d) = build_diagnostics(&ws, "v010-type-error.cu", TYPE_ERROR);
    assert_eq!(stage["detail"]["compiler"], "nvrtc");
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!((d[0].0.as_str(), d[0].1, d[0].2), ("versions/v010-type-error.cu", 5, 17));
}

const HOST_ENTRY: &str = r#"// Two kernels and a host entry: rung calls rung_run instead of launching a kernel itself.
__global__ void half_add(const float* a, const float* b, float* out, int n, int offset) {
    int i = offset + blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

extern "C" int rung_run(const float* a, const float* b, float* out, int n) {
    int half = n / 2;
    half_add<<<(half + 255) / 256, 256>>>(a, b, out, half, 0);
    half_add<<<(n - half + 255) / 256, 256>>>(a, b, out, n, half);
    return 0;
}
"#;

#[test]
fn a_rung_run_host_entry_builds_as_a_shared_object() {
    let Some(_) = real_nvcc() else { return };
    let (_tmp, ws) = workspace("vector-add");
    std::fs::write(ws.join("versions/v030-host.cu"), HOST_ENTRY).unwrap();
    let v = json(&rung(&ws, &["check", "--json", "v030"], &[]));
    let rec = &v["versions"][0];
    assert_eq!(rec["kind"], "cuda-host");
    assert_eq!(rec["stages"][0]["detail"]["entry"], "rung_run");
    let build = &rec["stages"][1];
    assert_eq!(build["verdict"], "pass", "{build}");
    let kinds: Vec<&str> =
        build["detail"]["artefacts"].as_array().unwrap().iter().map(|a| a["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"so") && kinds.contains(&"cubin"), "{kinds:?}");
    assert!(ws.join(".rung/dumps/v030/v030.sass").is_file(), "the listing follows the rung");
    let so = std::fs::read(ws.join(".rung/dumps/v030/libv030.so")).unwrap();
    assert_eq!(&so[..4], b"\x7fELF");
    let commands = build["detail"]["commands"].as_array().unwrap();
    let shared = commands.iter().filter_map(|c| c.as_str()).find(|c| c.contains("-shared")).unwrap();
    // The shared object is the version plus the packed entry the worker calls.
    assert!(shared.contains("-packed.cu"), "{shared}");
    assert!(rung::hostentry::HostEntry::open(&ws.join(".rung/dumps/v030/libv030.so")).is_ok());
}

#[test]
fn a_host_entry_links_against_a_toolchain_whose_folder_has_a_comma() {
    // nvcc splits -L values at commas: the CUDA runtime beside a toolchain under `cuda,13/`
    // reaches the host linker another way.
    let Some(nvcc) = real_nvcc() else { return };
    let (tmp, ws) = workspace("vector-add");
    let root = nvcc.parent().and_then(Path::parent).unwrap();
    let comma = tmp.path().join("cuda,13");
    std::os::unix::fs::symlink(root, &comma).unwrap();
    std::fs::write(ws.join("versions/v030-host.cu"), HOST_ENTRY).unwrap();
    let out = rung(&ws, &["check", "--json", "v030"], &[("CUDA_HOME", comma.to_str().unwrap())]);
    let v = json(&out);
    let build = &v["versions"][0]["stages"][1];
    assert_eq!(build["verdict"], "pass", "{build}");
    let commands = build["detail"]["commands"].as_array().unwrap();
    assert!(commands.iter().filter_map(|c| c.as_str()).any(|c| c.contains("cuda,13")), "{commands:?}");
}

/// A host entry that touches no GPU, so the packed call the worker makes can be checked here:
/// every parameter type the worker passes (pointers, int, float, a 64-bit integer, `__half`)
/// must arrive as the bytes rung bound, in order.
const HOST_ONLY_ENTRY: &str = r#"#include <cuda_fp16.h>
extern "C" int rung_run(const float* a, float* out, int n, float scale, long long big, __half h, double d) {
    for (int i = 0; i < n; ++i) out[i] = a[i] * scale;
    out[n] = (float)big;
    out[n + 1] = __half2float(h);
    out[n + 2] = (float)d;
    return n == 3 ? 0 : 40 + n;
}
"#;

#[test]
fn a_rung_run_entry_is_called_through_the_packed_shim_with_every_parameter_in_place() {
    let Some(_) = real_nvcc() else { return };
    let (_tmp, ws) = workspace("vector-add");
    std::fs::write(ws.join("versions/v031-host-only.cu"), HOST_ONLY_ENTRY).unwrap();
    // Scalars of every width the entry takes, so its parameters all bind by name.
    let toml = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    let scalars = "\n[[scalars]]\nname = \"scale\"\ndtype = \"f32\"\nvalue = 2.5\n\n[[scalars]]\nname = \"big\"\ndtype = \"i64\"\nvalue = 1099511627776\n\n[[scalars]]\nname = \"h\"\ndtype = \"f16\"\nvalue = -0.75\n\n[[scalars]]\nname = \"d\"\ndtype = \"f64\"\nvalue = 0.125\n";
    let at = toml.find("\n[sizes]").unwrap() + 1;
    std::fs::write(ws.join("rung.toml"), format!("{}{scalars}\n{}", &toml[..at], &toml[at..])).unwrap();
    let v = json(&rung(&ws, &["check", "--json", "v031"], &[]));
    let build = &v["versions"][0]["stages"][1];
    assert_eq!(build["verdict"], "pass", "{v}");
    let so = ws.join(".rung/dumps/v031/libv031.so");
    assert!(so.is_file(), "no shared object at {}", so.display());
    let entry = rung::hostentry::HostEntry::open(&so).expect("the packed entry loads");
    let a = [1.0f32, 2.0, 3.0];
    let mut out = [0f32; 6];
    let mut a_ptr = a.as_ptr() as u64;
    let mut out_ptr = out.as_mut_ptr() as u64;
    let mut n = 3i32;
    let mut scale = 2.5f32;
    let mut big = 1i64 << 40;
    let mut h = half::f16::from_f32(-0.75).to_bits();
    let mut d = 0.125f64;
    let mut args: Vec<*mut std::ffi::c_void> = vec![
        (&mut a_ptr) as *mut u64 as *mut _,
        (&mut out_ptr) as *mut u64 as *mut _,
        (&mut n) as *mut i32 as *mut _,
        (&mut scale) as *mut f32 as *mut _,
        (&mut big) as *mut i64 as *mut _,
        (&mut h) as *mut u16 as *mut _,
        (&mut d) as *mut f64 as *mut _,
    ];
    // SAFETY: one pointer per parameter of the entry above, each at bytes of its type; the
    // buffers are host memory, which this entry only reads and writes on the host.
    let code = unsafe { entry.call(&mut args) };
    assert_eq!(code, 0);
    assert_eq!(out, [2.5, 5.0, 7.5, (1u64 << 40) as f32, -0.75, 0.125]);
    // What rung_run returns comes back: the worker turns a non-zero code into the verdict.
    // SAFETY: args[2] points at `n`, an i32 that outlives the call.
    let code = unsafe {
        *(args[2] as *mut i32) = 2;
        entry.call(&mut args)
    };
    assert_eq!(code, 42);
}

/// Whether rung's Python has the CuTe DSL (`rung setup --with cute-dsl`).
fn cute_dsl() -> bool {
    common::python_with_package("cutlass", "cute-dsl").is_some()
}

#[test]
fn cute_dsl_versions_compile_ahead_of_time_and_report_errors_at_their_line() {
    if real_nvcc().is_none() || !cute_dsl() {
        return;
    }
    let (_tmp, ws) = workspace("vector-add");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cute");
    let good = std::fs::read_to_string(fixtures.join("v001-cute-add.py")).unwrap();
    let v = {
        std::fs::write(ws.join("versions/v040-cute.py"), &good).unwrap();
        json(&rung(&ws, &["check", "--json", "v040"], &[]))
    };
    let rec = &v["versions"][0];
    assert_eq!(rec["kind"], "cute-dsl");
    let build = &rec["stages"][1];
    assert_eq!(build["verdict"], "pass", "{build}");
    assert_eq!(build["detail"]["compiler"], "cute-dsl");
    assert_eq!(build["detail"]["arch"], "sm_90a");
    assert!(build["detail"]["kernels"][0]["resources"]["registers"].as_u64().unwrap() > 0);
    for ext in ["ptx", "cubin", "sass", "mlir"] {
        assert!(ws.join(format!(".rung/dumps/v040/add.{ext}")).is_file(), "{ext}");
    }
    let bad = std::fs::read_to_string(fixtures.join("v002-cute-error.py")).unwrap();
    let (stage, d) = build_diagnostics(&ws, "v041-cute-error.py", &bad);
    assert_eq!(stage["verdict"], "fail");
    assert_eq!((d[0].0.as_str(), d[0].1, d[0].2), ("versions/v041-cute-error.py", 19, 25), "{d:?}");
    assert!(d[0].3.contains("name 'bb' is not defined"), "{d:?}");
}

/// Whether rung's Python has TileLang (`rung setup --with tilelang`).
fn tilelang() -> bool {
    common::python_with_package("tilelang", "tilelang").is_some()
}

/// `rung new --template tilelang`: its TileLang version compiles ahead of time here, with no GPU
/// and no torch (its CUDA, PTX, cubin and SASS kept, the SASS citing the version's lines), the
/// notes are found by the context search, and a kernel with an undefined name fails its build
/// at that name's line and column.
#[test]
fn tilelang_versions_compile_ahead_of_time_and_report_errors_at_their_line() {
    if real_nvcc().is_none() || !tilelang() {
        return;
    }
    let (_tmp, ws) = workspace("tilelang");
    assert!(ws.join("versions/v001-naive.cu").is_file(), "laid over the vector add");
    let v = json(&rung(&ws, &["check", "--json", "v004"], &[]));
    let rec = &v["versions"][0];
    assert_eq!(rec["kind"], "tilelang", "{rec}");
    let build = rec["stages"].as_array().unwrap().iter().find(|s| s["stage"] == "build").unwrap();
    assert_eq!(build["verdict"], "pass", "{build}");
    assert_eq!(build["detail"]["compiler"], "tilelang");
    assert_eq!(build["detail"]["arch"], "sm_90a");
    assert!(build["detail"]["kernels"][0]["resources"]["registers"].as_u64().unwrap() > 0, "{build}");
    for ext in ["cu", "ptx", "cubin", "sass"] {
        assert!(ws.join(format!(".rung/dumps/v004/vector_add.{ext}")).is_file(), "{ext}");
    }
    let sass = std::fs::read_to_string(ws.join(".rung/dumps/v004/vector_add.sass")).unwrap();
    assert!(sass.contains("v004-tilelang-add.py") && sass.contains("line 21"), "the SASS cites the version's lines");
    let found = rung::context::search(&ws, &ws.join(".rung"), "T.Pipelined gemm example", 3, 2000).unwrap();
    assert_eq!(found[0].path, PathBuf::from("context/tilelang.md"), "{found:?}");
    // How to time sections, for the agent that searches for it.
    let found = rung::context::search(&ws, &ws.join(".rung"), "time sections rung_trace_tilelang", 3, 2000).unwrap();
    assert!(found[0].text.contains("prelude=rt.prelude()"), "{found:?}");

    let good = std::fs::read_to_string(ws.join("versions/v004-tilelang-add.py")).unwrap();
    let bad = good.replace("C[idx] = A[idx] + B[idx]", "C[idx] = A[idx] + D[idx]");
    assert_ne!(bad, good, "the template's kernel line changed: update this test");
    let (stage, d) = build_diagnostics(&ws, "v005-tilelang-error.py", &bad);
    assert_eq!(stage["verdict"], "fail");
    assert_eq!((d[0].0.as_str(), d[0].1, d[0].2), ("versions/v005-tilelang-error.py", 21, 39), "{d:?}");
    assert!(d[0].3.contains("name 'D' is not defined"), "{d:?}");
}

/// The ahead-of-time scripts' reply is what `schema/aot.schema.json` says, and that schema is
/// the one generated from the types rung reads it into.
#[test]
fn the_aot_scripts_reply_matches_the_committed_schema() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schema/aot.schema.json")).unwrap();
    let committed: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        committed,
        rung::model::aot::schema(),
        "schema/aot.schema.json is stale: run `cargo run -- schema --aot > schema/aot.schema.json`"
    );
    if real_nvcc().is_none() {
        return;
    }
    let validator = jsonschema::validator_for(&committed).expect("the committed schema is valid");
    let tc = common::doctor_toolchain();
    let path = |tool: &str| PathBuf::from(tc[tool]["path"].as_str().unwrap());
    let (tmp, ws) = workspace("vector-add");
    let scripts = tmp.path().join("scripts");
    rung::assets::write_python(&scripts).unwrap();
    let triton = std::fs::read_dir(ws.join("versions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "py"))
        .expect("the template has a Triton version");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cute");
    let mut cases = vec![("triton_aot.py", triton)];
    if cute_dsl() {
        cases.push(("cute_aot.py", fixtures.join("v001-cute-add.py")));
    }
    let bin = path("ptxas").parent().unwrap().to_path_buf();
    let search = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    for (script, version) in cases {
        let out = Command::new(path("python"))
            .arg(scripts.join(script))
            .args(["--version-file", version.to_str().unwrap(), "--arch", "90", "--out"])
            .arg(tmp.path().join(format!("out-{script}")))
            .env("TRITON_PTXAS_PATH", path("ptxas"))
            .env("TRITON_PTXAS_BLACKWELL_PATH", path("ptxas"))
            .env("TRITON_CACHE_DIR", tmp.path().join("triton-cache"))
            .env("PATH", &search)
            .current_dir(&ws)
            .output()
            .unwrap();
        let reply: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{script}: not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
        let errors: Vec<String> =
            validator.iter_errors(&reply).map(|e| format!("{e} at {}", e.instance_path())).collect();
        assert!(errors.is_empty(), "{script}'s reply does not match schema/aot.schema.json:\n{}", errors.join("\n"));
        let report: rung::model::aot::AotReport = serde_json::from_value(reply).unwrap();
        assert!(report.errors.is_empty() && !report.kernels.is_empty(), "{script}: {report:?}");
        for k in &report.kernels {
            assert!(k.files.contains_key("cubin") && k.files.contains_key("ptxas"), "{script}: {k:?}");
        }
    }
}

/// rung's tracer is on every CUDA build's include path: a version that includes it and marks its
/// sections builds as written, its markers compiled to nothing (no %globaltimer in its PTX); the
/// traced variant reads %globaltimer and %smid at each marker and has the `rung_trace` symbol
/// the worker writes the buffer's address into; the names the decoder finds hash to the
/// constants nvcc compiled.
#[test]
fn the_tracer_header_is_found_and_compiles_to_nothing_until_traced() {
    let Some(nvcc) = real_nvcc() else { return };
    let (_tmp, ws) = workspace("vector-add");
    let src = std::fs::read_to_string(ws.join("versions/v001-naive.cu")).unwrap();
    let body_at = src.find("int i = ").expect("the naive kernel's index line");
    let mut traced = format!("#include <rung_trace.cuh>\n{}", &src[..body_at]);
    traced.push_str("RUNG_TRACE_BEGIN(index);\n    ");
    traced.push_str(&src[body_at..].replacen(
        ";\n",
        ";\n    RUNG_TRACE_END(index);\n    RUNG_TRACE_MARK(indexed);\n",
        1,
    ));
    std::fs::write(ws.join("versions/v004-traced.cu"), &traced).unwrap();
    let v = json(&rung(&ws, &["check", "--json", "v004"], &[]));
    let build = &v["versions"][0]["stages"][1];
    assert_eq!(build["verdict"], "pass", "{build}");
    let ptx = std::fs::read_to_string(ws.join(".rung/dumps/v004/v004.ptx")).unwrap();
    assert!(!ptx.contains("globaltimer") && !ptx.contains("rung_trace"), "the markers are nothing untraced");

    let scratch = tempfile::tempdir().unwrap();
    let traced_as = |leader| {
        rung::trace::build_traced(&nvcc, &ws.join("versions/v004-traced.cu"), "sm_90", &[], scratch.path(), &ws, leader)
            .unwrap()
    };
    let t = traced_as(rung::trace::Leader::Warp);
    // One leader per block: thread 0 writes (no lane test, no warp index), as many clock reads.
    let b = traced_as(rung::trace::Leader::Block);
    assert_eq!(b.ptx.matches("%globaltimer").count(), 3, "{}", b.ptx);
    assert!(t.ptx.contains(", 31;") && !b.ptx.contains(", 31;"), "the lane test is per warp only:\n{}", b.ptx);
    assert_eq!(t.ptx.matches("%globaltimer").count(), 3, "one clock read per marker");
    assert!(t.ptx.contains("%smid") && t.ptx.contains(".global .align 8 .b8 rung_trace[32]"), "{}", t.ptx);
    // One counter per SM's part of the buffer (%smid modulo the parts), not one for the kernel.
    assert_eq!(t.ptx.matches("rem.u32").count(), 3, "a part per marker's record: {}", t.ptx);
    assert!(!t.cubin.is_empty());
    for name in ["index", "indexed"] {
        let h = rung::trace::hash(name);
        assert_eq!(t.names.get(&h).map(String::as_str), Some(name));
        assert!(t.ptx.contains(&format!(", {};", h as i32)), "{name}'s hash {} is a constant in the PTX", h as i32);
    }
    // Without a GPU, `rung trace` says so in one line, after building the traced variant.
    let out = rung(&ws, &["trace", "v004"], &[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.starts_with(
            "no GPU here: v004's traced variant builds for sm_90 (markers: index, indexed; one leader per warp)"
        ),
        "{said}"
    );
    let out = rung(&ws, &["trace", "v001"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("versions/v001-naive.cu has no RUNG_TRACE_BEGIN"));
    // A Triton version without rung_trace.py's markers is told how to add them; with them, their
    // names are listed.
    let out = rung(&ws, &["trace", "v003"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains(r#"versions/v003-triton.py has no rt.section("name"): `import rung_trace as rt`"#), "{said}");
    let triton = std::fs::read_to_string(ws.join("versions/v003-triton.py")).unwrap();
    let marked = triton
        .replace(
            "import triton.language as tl\n",
            "import triton.language as tl\nimport rung_trace as rt\n\nLOAD = rt.section(\"load\")\n",
        )
        .replace("    mask = offs < n\n", "    mask = offs < n\n    rt.begin(LOAD)\n")
        .replace("    tl.store(", "    rt.end(LOAD)\n    tl.store(");
    assert!(marked.contains("rt.end(LOAD)"), "{marked}");
    std::fs::write(ws.join("versions/v003-triton.py"), marked).unwrap();
    let out = rung(&ws, &["trace", "v003"], &[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.starts_with("no GPU here: v003's kernels compile with its markers (load)"), "{said}");
    // Triton's markers are written by every warp's lane 0: asking for block leaders is refused.
    let out = rung(&ws, &["trace", "v003", "--leader", "block"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(rung::exit::USAGE), "{err}");
    assert!(err.contains("Triton versions are traced by lane 0 of every warp"), "{err}");

    // The demo's traced version: its three sections build into the traced variant, and its
    // checked build (markers compiled to nothing) passes.
    let (_demo_tmp, demo) = workspace("rmsnorm");
    let out = rung(&demo, &["trace", "v002"], &[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("(markers: reduce, sum_squares, normalise; one leader per block)"), "{said}");
    // Its source defines RUNG_TRACE_PER_BLOCK; --leader overrides it, in what is built too.
    let out = rung(&demo, &["trace", "v002", "--leader", "warp"], &[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("; one leader per warp)"), "{said}");
    let v002 = std::fs::read_dir(demo.join("versions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("v002"))
        .unwrap();
    let demo_as = |leader| {
        let dir = tempfile::tempdir().unwrap();
        rung::trace::build_traced(&nvcc, &v002, "sm_90", &[], dir.path(), &demo, leader).unwrap().ptx
    };
    let (warp, block) = (demo_as(rung::trace::Leader::Warp), demo_as(rung::trace::Leader::Block));
    assert!(warp.contains(", 31;") && !block.contains(", 31;"), "the lane test is per warp only:\n{warp}");
    let v = json(&rung(&demo, &["check", "--json", "v002"], &[]));
    assert_eq!(v["versions"][0]["stages"][1]["verdict"], "pass", "{v}");

    let plain = std::fs::read_to_string(ws.join("versions/v001-naive.cu")).unwrap();
    std::fs::write(scratch.path().join("plain.cu"), plain).unwrap();
    let e = rung::trace::build_traced(
        &nvcc,
        &scratch.path().join("plain.cu"),
        "sm_90",
        &[],
        scratch.path(),
        scratch.path(),
        rung::trace::Leader::Warp,
    )
    .unwrap_err();
    assert!(e.to_string().contains("has no RUNG_TRACE_BEGIN"), "{e}");
}

/// `rung new --template cute-dsl`: the vector add with a CuTe DSL version that builds ahead of
/// time here (its PTX, cubin and SASS kept) and notes on where in CUTLASS to look, which the
/// context search finds.
#[test]
fn the_cute_dsl_template_builds_its_dsl_version_and_carries_its_notes() {
    if real_nvcc().is_none() || !cute_dsl() {
        return;
    }
    let (_tmp, ws) = workspace("cute-dsl");
    assert!(ws.join("versions/v001-naive.cu").is_file(), "laid over the vector add");
    let v = json(&rung(&ws, &["check", "--json", "v004"], &[]));
    let rec = &v["versions"][0];
    assert_eq!(rec["kind"], "cute-dsl", "{rec}");
    let build = rec["stages"].as_array().unwrap().iter().find(|s| s["stage"] == "build").unwrap();
    assert_eq!(build["verdict"], "pass", "{build}");
    let dumps: Vec<String> = std::fs::read_dir(ws.join(".rung/dumps/v004"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for ext in [".ptx", ".cubin", ".sass"] {
        assert!(dumps.iter().any(|d| d.ends_with(ext)), "no {ext} in {dumps:?}");
    }
    let found = rung::context::search(&ws, &ws.join(".rung"), "wgmma_tma_sm90 example", 3, 2000).unwrap();
    assert_eq!(found[0].path, PathBuf::from("context/cute-dsl.md"), "{found:?}");
    let found = rung::context::search(&ws, &ws.join(".rung"), "time sections rung_trace_cute", 3, 2000).unwrap();
    assert!(found[0].text.contains("import rung_trace_cute as rt"), "{found:?}");
}
