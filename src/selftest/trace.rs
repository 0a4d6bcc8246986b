//! The GPU suite's trace row: a traced `.cu` version of the vector-add template (its index
//! computation and load as sections, a mark after the store) checked, benched and traced once.

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

/// What the trace row found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceRow {
    pub ok: bool,
    pub check: String,
    pub summary: Option<crate::trace::TraceSummary>,
    pub launch_ms: Option<f64>,
    pub untraced_ms: Option<f64>,
    pub chrome_trace: Option<String>,
    pub error: Option<String>,
    pub expected: String,
}

/// Checks and benches the traced version, then traces it.
pub fn run_trace(dir: &Path) -> anyhow::Result<TraceRow> {
    let machine = Machine::discover();
    let root = dir.join("vector-add");
    crate::templates::write("vector-add", &root)?;
    std::fs::write(root.join("versions").join(TRACED_VERSION.0), TRACED_VERSION.1)?;
    let ws = Workspace::open(&root)?;
    let mut store = Store::open(&ws.state_dir())?;
    let mut runners = None;
    let opts = CheckOptions { versions: vec!["v010".into()], ..Default::default() };
    let report = check_with(&ws, &mut store, &opts, &machine, &mut runners)?;
    drop(runners);
    let rec = report.versions.iter().find(|r| r.id == "v010");
    let verdict_of = |st: Stage| rec.and_then(|r| r.stages.iter().find(|s| s.stage == st)).map(|s| s.verdict);
    let check = format!("check {:?}, bench {:?}", verdict_of(Stage::Check), verdict_of(Stage::Bench));
    let expected = "sections load and store over every warp, a mark each, nothing dropped or unpaired, \
                    the trace-event file written"
        .to_string();
    let v = ws.version("v010").ok_or_else(|| anyhow::anyhow!("no v010"))?.clone();
    let tc = crate::toolchain::Toolchain::discover();
    let untraced_ms = crate::service::latest_bench(&store, "v010").map(|b| b.headline.median);
    match crate::stages::trace::trace_once(&ws, &v, &tc, 7, None) {
        Ok(run) => {
            let s = &run.summary;
            let names: Vec<&str> = s.sections.iter().map(|x| x.name.as_str()).collect();
            let parsed = std::fs::read_to_string(root.join(&run.chrome_trace))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .is_some_and(|v| v["traceEvents"].as_array().is_some_and(|e| !e.is_empty()));
            let ok = verdict_of(Stage::Check) == Some(Verdict::Pass)
                && names == ["load", "store"]
                && s.sections.iter().all(|x| x.calls as usize == s.streams)
                && s.marks.first().is_some_and(|(n, c)| n == "done" && *c as usize == s.streams)
                && s.dropped == 0
                && s.unmatched_begins + s.unmatched_ends + s.unknown_tags == 0
                && parsed;
            Ok(TraceRow {
                ok,
                check,
                launch_ms: Some(run.launch_ms),
                untraced_ms: run.untraced_median_ms.or(untraced_ms),
                chrome_trace: Some(run.chrome_trace.clone()),
                summary: Some(run.summary),
                error: None,
                expected,
            })
        }
        Err(e) => Ok(TraceRow {
            ok: false,
            check,
            summary: None,
            launch_ms: None,
            untraced_ms,
            chrome_trace: None,
            error: Some(e.to_string()),
            expected,
        }),
    }
}
