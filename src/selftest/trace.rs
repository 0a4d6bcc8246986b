//! The GPU suite's trace rows: traced versions of the vector-add template, one `.cu`
//! (rung_trace.cuh), one Triton (rung_trace.py) and one `.ptx` (marker comments), each with its
//! load and its store as sections and a mark after the store, and, where rung's Python has the
//! DSL, the CuTe DSL and TileLang templates' adds with their markers (one section round the add,
//! a mark after it), checked, benched and traced once, in the same workspace.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::check::{CheckOptions, Machine, check_with};
use crate::model::report::{Stage, Verdict};
use crate::store::Store;
use crate::workspace::Workspace;

/// The naive vector add with two sections and a mark.
pub const TRACED_VERSION: (&str, &str) = (
    "v010-traced.cu",
    r#"// rung: grid="cdiv(n, 256)" block=256
// The naive kernel with rung_trace.cuh's markers: `rung trace v010` times its two sections.
#include <rung_trace.cuh>

extern "C" __global__ void vector_add(const float* a, const float* b, float* out, int n) {
    RUNG_TRACE_BEGIN(load);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float x = 0.f, y = 0.f;
    if (i < n) {
        x = a[i];
        y = b[i];
    }
    RUNG_TRACE_END(load);
    RUNG_TRACE_BEGIN(store);
    if (i < n) out[i] = x + y;
    RUNG_TRACE_END(store);
    RUNG_TRACE_MARK(done);
}
"#,
);

/// The template's Triton version with the same sections and mark (rung_trace.py's markers).
pub const TRACED_TRITON: (&str, &str) = (
    "v011-traced-triton.py",
    r#"# The Triton vector add with rung_trace.py's markers: `rung trace v011` times its two sections.
import triton
import triton.language as tl
import rung_trace as rt

LOAD = rt.section("load")
STORE = rt.section("store")
DONE = rt.section("done")


@triton.jit
def vector_add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    rt.begin(LOAD)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    rt.end(LOAD)
    rt.begin(STORE)
    tl.store(out_ptr + offs, a + b, mask=mask)
    rt.end(STORE)
    rt.mark(DONE)


def run(a, b, out, n):
    BLOCK = 1024
    vector_add_kernel[(triton.cdiv(n, BLOCK),)](a, b, out, n, BLOCK=BLOCK)
"#,
);

/// The naive vector add as PTX with the same sections and mark (`// rung_trace` lines).
pub const TRACED_PTX: (&str, &str) =
    ("v012-traced.ptx", include_str!("../../tests/fixtures/ptx/vector-add-traced.ptx"));

/// The cute-dsl template's vector add with rung_trace_cute.py's markers: a section, `add`,
/// round the add and a mark, `done`, after it.
pub fn cute_add_traced() -> anyhow::Result<String> {
    with_markers(
        include_str!("../../assets/templates/cute-dsl/versions/v004-cute-add.py"),
        &[
            ("import cutlass.cute as cute\n", "import cutlass.cute as cute\nimport rung_trace_cute as rt\n"),
            ("THREADS = 256\n", "THREADS = 256\nADD = rt.section(\"add\")\nDONE = rt.section(\"done\")\n"),
            ("    if i < n:\n", "    rt.begin(ADD)\n    if i < n:\n"),
            ("        gC[i] = gA[i] + gB[i]\n", "        gC[i] = gA[i] + gB[i]\n    rt.end(ADD)\n    rt.mark(DONE)\n"),
        ],
    )
}

/// The tilelang template's vector add with rung_trace_tilelang.py's markers: the record's
/// prelude on the kernel, a section, `add`, round the parallel loop and a mark, `done`, after it.
pub fn tilelang_add_traced() -> anyhow::Result<String> {
    with_markers(
        include_str!("../../assets/templates/tilelang/versions/v004-tilelang-add.py"),
        &[
            (
                "import tilelang.language as T\n",
                "import tilelang.language as T\nimport rung_trace_tilelang as rt\n\nADD = rt.section(\"add\")\nDONE = rt.section(\"done\")\n",
            ),
            ("threads=block_N) as bx:\n", "threads=block_N, prelude=rt.prelude()) as bx:\n            rt.begin(ADD)\n"),
            (
                "                    C[idx] = A[idx] + B[idx]\n",
                "                    C[idx] = A[idx] + B[idx]\n            rt.end(ADD)\n            rt.mark(DONE)\n",
            ),
        ],
    )
}

/// `source` with each edit made once; an edit whose text is not there is an error (the template
/// changed under it).
fn with_markers(source: &str, edits: &[(&str, &str)]) -> anyhow::Result<String> {
    let mut out = source.to_string();
    for (old, new) in edits {
        anyhow::ensure!(out.contains(old), "the template no longer has {old:?}");
        out = out.replacen(old, new, 1);
    }
    Ok(out)
}

/// The traced versions of the trace rows: file name, text, and the sections each marks (each
/// marks `done` after them). The DSL versions only where rung's Python has the DSL.
fn traced_versions(tc: &crate::toolchain::Toolchain) -> anyhow::Result<Vec<(String, String, &'static [&'static str])>> {
    const LOAD_STORE: &[&str] = &["load", "store"];
    let mut out: Vec<(String, String, &[&str])> = [TRACED_VERSION, TRACED_TRITON, TRACED_PTX]
        .into_iter()
        .map(|(name, text)| (name.to_string(), text.to_string(), LOAD_STORE))
        .collect();
    let has = |module: &str| tc.python.as_ref().is_some_and(|p| p.packages.contains_key(module));
    if has("cutlass") {
        out.push(("v013-traced-cute.py".into(), cute_add_traced()?, &["add"]));
    }
    if has("tilelang") {
        out.push(("v014-traced-tilelang.py".into(), tilelang_add_traced()?, &["add"]));
    }
    Ok(out)
}

/// What a trace row found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceRow {
    pub version: String,
    pub ok: bool,
    pub check: String,
    pub summary: Option<crate::trace::TraceSummary>,
    pub launch_ms: Option<f64>,
    pub untraced_ms: Option<f64>,
    pub chrome_trace: Option<String>,
    pub error: Option<String>,
    pub expected: String,
}

/// Checks and benches the traced versions, then traces each.
pub fn run_trace(dir: &Path) -> anyhow::Result<Vec<TraceRow>> {
    let machine = Machine::discover();
    let root = dir.join("vector-add");
    crate::templates::write("vector-add", &root)?;
    let tc = crate::toolchain::Toolchain::discover();
    let versions = traced_versions(&tc)?;
    for (name, text, _) in &versions {
        std::fs::write(root.join("versions").join(name), text)?;
    }
    let ws = Workspace::open(&root)?;
    let mut store = Store::open(&ws.state_dir())?;
    let mut runners = None;
    let ids: Vec<String> = versions.iter().map(|(name, _, _)| name[..4].to_string()).collect();
    let opts = CheckOptions { versions: ids.clone(), ..Default::default() };
    let report = check_with(&ws, &mut store, &opts, &machine, &mut runners)?;
    drop(runners);
    let mut rows = Vec::new();
    for (id, (_, _, sections)) in ids.iter().map(String::as_str).zip(&versions) {
        let rec = report.versions.iter().find(|r| r.id == id);
        let verdict_of = |st: Stage| rec.and_then(|r| r.stages.iter().find(|s| s.stage == st)).map(|s| s.verdict);
        let check = format!("check {:?}, bench {:?}", verdict_of(Stage::Check), verdict_of(Stage::Bench));
        let expected = format!(
            "sections {} over every warp, a mark each, nothing dropped or unpaired, the trace-event file written",
            sections.join(" and ")
        );
        let v = ws.version(id).ok_or_else(|| anyhow::anyhow!("no {id}"))?.clone();
        let untraced_ms = crate::service::latest_bench(&store, id).map(|b| b.headline.median);
        rows.push(match crate::stages::trace::trace_once(&ws, &v, &tc, 7, None, None) {
            Ok(run) => {
                let s = &run.summary;
                let names: Vec<&str> = s.sections.iter().map(|x| x.name.as_str()).collect();
                let parsed = std::fs::read_to_string(root.join(&run.chrome_trace))
                    .ok()
                    .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                    .is_some_and(|v| v["traceEvents"].as_array().is_some_and(|e| !e.is_empty()));
                let ok = verdict_of(Stage::Check) == Some(Verdict::Pass)
                    && names == *sections
                    && s.sections.iter().all(|x| x.calls as usize == s.streams)
                    && s.marks.first().is_some_and(|(n, c)| n == "done" && *c as usize == s.streams)
                    && s.dropped == 0
                    && s.unmatched_begins + s.unmatched_ends + s.unknown_tags == 0
                    && parsed;
                TraceRow {
                    version: id.into(),
                    ok,
                    check,
                    launch_ms: Some(run.launch_ms),
                    untraced_ms: run.untraced_median_ms.or(untraced_ms),
                    chrome_trace: Some(run.chrome_trace.clone()),
                    summary: Some(run.summary),
                    error: None,
                    expected,
                }
            }
            Err(e) => TraceRow {
                version: id.into(),
                ok: false,
                check,
                summary: None,
                launch_ms: None,
                untraced_ms,
                chrome_trace: None,
                error: Some(e.to_string()),
                expected,
            },
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The trace rows: the .cu, Triton and .ptx versions always, each DSL's only where rung's
    /// Python has it; every version's file name starts with its id and its text marks what the
    /// row expects.
    #[test]
    fn the_dsl_rows_join_where_the_dsl_is_installed() {
        let mut tc = crate::toolchain::Toolchain::discover();
        let mut python = tc.python.clone().unwrap_or(crate::toolchain::PythonEnv {
            path: "python3".into(),
            version: "3".into(),
            packages: Default::default(),
            found_via: "test".into(),
        });
        python.packages.retain(|k, _| k != "cutlass" && k != "tilelang");
        tc.python = Some(python.clone());
        let plain: Vec<String> = traced_versions(&tc).unwrap().into_iter().map(|(n, _, _)| n).collect();
        assert_eq!(plain, ["v010-traced.cu", "v011-traced-triton.py", "v012-traced.ptx"]);
        python.packages.insert("cutlass".into(), "4.8.1".into());
        python.packages.insert("tilelang".into(), "0.1.15".into());
        tc.python = Some(python);
        let all = traced_versions(&tc).unwrap();
        let names: Vec<&str> = all.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(&names[3..], ["v013-traced-cute.py", "v014-traced-tilelang.py"]);
        for (name, text, sections) in &all {
            for s in *sections {
                let marked = text.contains(&format!("RUNG_TRACE_BEGIN({s})"))
                    || text.contains(&format!("rung_trace begin {s}"))
                    || text.contains(&format!("rt.section(\"{s}\")"));
                assert!(marked, "{name} marks {s}");
            }
            assert!(text.contains("done"), "{name} marks done");
        }
    }
}
