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
    let r = |t, name: &str, kind, warp| Record {
        time_ns: t,
        tag: hash(name),
        kind,
        sm: warp,
        block: 0,
        warp,
        per_block: false,
    };
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
        leader: rung::trace::Leader::Warp,
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
    assert!(
        text.contains("v001 traced at n=1048576 (sm_90, rung_trace.cuh): 2 warp leaders on 2 SMs, 0.9 µs"),
        "{text}"
    );
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

/// A Triton version's markers (`rung_trace.py`): compiled ahead of time for sm_90 with Triton
/// and ptxas, they are nothing until the buffer is given (no clock read, no atomic), and then one
/// record each (a `%globaltimer` read, `%smid`, one atomic add on the SM's part, ptxas accepts
/// it). The names rung finds in the source are the ones the markers hash, the same way.
#[test]
fn a_triton_versions_markers_compile_to_nothing_until_armed_then_to_a_record_each() {
    let Some(python) = common::python_with_module("triton") else { return };
    let tc = common::doctor_toolchain();
    let Some(ptxas) = tc["ptxas"]["path"].as_str().map(str::to_string) else {
        assert!(std::env::var_os("RUNG_REQUIRE_TOOLCHAIN").is_none(), "no ptxas: {}", tc["ptxas"]);
        eprintln!("SKIPPED: no ptxas (run `rung setup`)");
        return;
    };
    let version = r#"import triton
import triton.language as tl
import rung_trace as rt

LOAD = rt.section("load")
DONE = rt.section('done')


@triton.jit
def add(a, b, c, n, BLOCK: tl.constexpr):
    rt.begin(LOAD)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(a + offs, mask=m) + tl.load(b + offs, mask=m)
    rt.end(LOAD)
    tl.store(c + offs, x, mask=m)
    rt.mark(DONE)
"#;
    let script = r#"import json, os, sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
os.environ["TRITON_PTXAS_PATH"] = os.environ["TRITON_PTXAS_BLACKWELL_PATH"] = sys.argv[3]
import triton
import triton.language as tl
import rung_trace as rt
import rung_trace_ptx
if sys.argv[4] == "armed":
    rt.RECORDS, rt.COUNTS = tl.constexpr(0x7F0000001000), tl.constexpr(0x7F0000002000)
    rt.REGIONS, rt.PER_REGION = tl.constexpr(132), tl.constexpr(8000)
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import version
sig = {"a": "*fp32", "b": "*fp32", "c": "*fp32", "n": "i32", "BLOCK": "constexpr"}
k = triton.compile(ASTSource(version.add, sig, {"BLOCK": 1024}), target=GPUTarget("cuda", 90, 32))
ptx = k.asm["ptx"]
print(json.dumps({"timer": ptx.count("%globaltimer"), "smid": ptx.count("%smid"),
                  "atom": ptx.count("atom.global.add.u64"), "cubin": len(k.asm["cubin"]),
                  "tags": {n: rung_trace_ptx.tag(n) for n in ("load", "done", "x")}}))
"#;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("version.py"), version).unwrap();
    let compile = |how: &str| {
        let cache = tmp.path().join(format!("cache-{how}"));
        compile_markers(&python, tmp.path(), script, &[&ptxas, how], ("TRITON_CACHE_DIR", cache.to_str().unwrap()))
    };
    let (plain, armed) = plain_and_armed(compile);
    assert!(armed["cubin"].as_u64().unwrap() > plain["cubin"].as_u64().unwrap(), "{armed} {plain}");
    // The names rung finds are the markers' hashes.
    let names = names_in(version);
    assert_eq!(names.values().map(String::as_str).collect::<Vec<_>>().len(), 2);
    for name in ["load", "done", "x"] {
        assert_eq!(armed["tags"][name].as_u64(), Some(u64::from(hash(name))), "{name}");
    }
    for name in ["load", "done"] {
        assert_eq!(names.get(&hash(name)).map(String::as_str), Some(name));
    }
}

/// A CuTe DSL version's markers (`rung_trace_cute.py`): compiled for sm_90a in this process (the
/// DSL traces the kernel here, no GPU needed), nothing until the buffer is given, then one record
/// each (a `%globaltimer` read, `%smid`, one atomic add), the tags the names rung finds.
#[test]
fn a_cute_dsl_versions_markers_compile_to_nothing_until_armed_then_to_a_record_each() {
    let Some(python) = common::python_with_module("cutlass.cute") else { return };
    let version = common::cute_add_with_markers();
    let script = r#"import glob, json, os, sys, tempfile
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
os.environ["CUTE_DSL_ARCH"] = "sm_90a"
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor
import rung_trace_cute as rt
if sys.argv[3] == "armed":
    rt.RECORDS, rt.COUNTS, rt.REGIONS, rt.PER_REGION = 0x7F0000001000, 0x7F0000002000, 132, 8000
import version
dump = tempfile.mkdtemp()
fake = lambda: make_fake_compact_tensor(cutlass.Float32, (cute.sym_int32(),))
cute.compile(version.add, fake(), fake(), fake(), cutlass.Int32(1024),
             options="--gpu-arch sm_90a --keep-ptx --dump-dir " + dump)
ptx = "".join(open(p).read() for p in glob.glob(dump + "/**/*.ptx", recursive=True))
print(json.dumps({"ptx": len(ptx), "timer": ptx.count("%globaltimer"), "smid": ptx.count("%smid"),
                  "atom": ptx.count("atom.global.add.u64"), "records": ptx.count("139637976731648")}))
"#;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("version.py"), &version).unwrap();
    let compile =
        |how: &str| compile_markers(&python, tmp.path(), script, &[how], ("CUTE_DSL_DISABLE_FILE_CACHING", "1"));
    let (plain, armed) = plain_and_armed(compile);
    assert!(plain["ptx"].as_u64() > Some(0), "{plain}");
    assert!(armed["records"].as_u64() > Some(0), "the buffer's address is in the kernel: {armed}");
    let names = names_in(&version);
    for name in ["add", "done"] {
        assert_eq!(names.get(&hash(name)).map(String::as_str), Some(name));
    }
}

/// A TileLang version's markers (`rung_trace_tilelang.py`): the template's kernel compiled for
/// sm_90a by tilelang_aot.py (no GPU), nothing until the buffer is given (armed at the compile's
/// start through a `sitecustomize`, as `rung trace` arms it before the import), then one record
/// each, the tags the names rung finds.
#[test]
fn a_tilelang_versions_markers_compile_to_nothing_until_armed_then_to_a_record_each() {
    if common::real_nvcc().is_none() {
        return;
    }
    let Some(python) = common::python_with_package("tilelang", "tilelang") else { return };
    let version = common::tilelang_add_with_markers();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("version.py"), &version).unwrap();
    let assets = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/python");
    let arm = tmp.path().join("arm");
    std::fs::create_dir_all(&arm).unwrap();
    std::fs::write(
        arm.join("sitecustomize.py"),
        format!(
            "import sys\nsys.path.insert(0, {assets:?})\nimport rung_trace_tilelang as rt\n\
             rt.RECORDS, rt.COUNTS, rt.REGIONS, rt.PER_REGION = 0x7F0000001000, 0x7F0000002000, 132, 8000\n"
        ),
    )
    .unwrap();
    let compile = |how: &str| -> serde_json::Value {
        let out_dir = tmp.path().join(format!("out-{how}"));
        let path = if how == "armed" { format!("{}:{assets}", arm.display()) } else { assets.to_string() };
        let out = std::process::Command::new(&python)
            .arg(format!("{assets}/tilelang_aot.py"))
            .args(["--version-file", tmp.path().join("version.py").to_str().unwrap(), "--arch", "90a", "--out"])
            .arg(&out_dir)
            .env("PYTHONPATH", path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{how}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let ptx = std::fs::read_to_string(out_dir.join("vector_add/vector_add.ptx")).unwrap();
        serde_json::json!({"timer": ptx.matches("%globaltimer").count(), "smid": ptx.matches("%smid").count(),
                           "atom": ptx.matches("atom.global.add.u64").count()})
    };
    plain_and_armed(compile);
    let names = names_in(&version);
    for name in ["add", "done"] {
        assert_eq!(names.get(&hash(name)).map(String::as_str), Some(name));
    }
}

/// A marker test's two compiles, plain then armed: the plain one without a record (no clock
/// read, no atomic), the armed one with one per each of its three markers (a `%globaltimer`
/// read, `%smid`, an atomic add).
fn plain_and_armed(compile: impl Fn(&str) -> serde_json::Value) -> (serde_json::Value, serde_json::Value) {
    let plain = compile("plain");
    assert_eq!((plain["timer"].as_u64(), plain["atom"].as_u64()), (Some(0), Some(0)), "{plain}");
    let armed = compile("armed");
    assert_eq!(
        (armed["timer"].as_u64(), armed["smid"].as_u64(), armed["atom"].as_u64()),
        (Some(3), Some(3), Some(3)),
        "one record per marker: {armed}"
    );
    (plain, armed)
}

/// Runs a marker test's `script` (Python) from `dir` (which holds its `version.py`) with
/// `dir`, rung's Python assets and `args` as its arguments and `env` set: the JSON of its last
/// line of output.
fn compile_markers(python: &str, dir: &Path, script: &str, args: &[&str], env: (&str, &str)) -> serde_json::Value {
    let path = dir.join("compile.py");
    std::fs::write(&path, script).unwrap();
    let assets = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/python");
    let out = std::process::Command::new(python)
        .arg(&path)
        .args([dir.to_str().unwrap(), assets])
        .args(args)
        .env(env.0, env.1)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or_default()).unwrap()
}

/// Dropped records with one part per SM: the Python tracers' buffer (`rung_trace_ptx.py`, which
/// imports no DSL) splits and reads back as the native worker does.
#[test]
fn the_python_tracer_splits_and_reads_back_the_buffer_as_the_native_worker_does() {
    let script = "import sys, json\nsys.path.insert(0, sys.argv[1])\nimport rung_trace_ptx as rt\n\
                  print(json.dumps([rt.parts(1000, 132), rt.parts(0, 0), rt.kept([3, 6, 0], 4), rt.kept([], 4)]))\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script, concat!(env!("CARGO_MANIFEST_DIR"), "/assets/python")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got, serde_json::json!([[132, 8], [1, 1], [[[0, 3], [1, 4]], 9, 18], [[], 0, 0]]));
}

/// A record written before the leader was recorded reads back as one of warp leaders (all
/// traces were then), and the leader round-trips as the schema names it.
#[test]
fn a_record_without_a_leader_was_per_warp() {
    let (_tmp, ws) = common::new_workspace("vector-add");
    let mut v = serde_json::to_value(record(&ws, "v001")).unwrap();
    assert_eq!(v["leader"], "warp");
    v["leader"] = "block".into();
    let back: rung::model::trace::TraceRecord = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(back.leader, rung::trace::Leader::Block);
    v.as_object_mut().unwrap().remove("leader");
    let old: rung::model::trace::TraceRecord = serde_json::from_value(v).unwrap();
    assert_eq!(old.leader, rung::trace::Leader::Warp);
}
