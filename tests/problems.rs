//! GPU MODE problems judged the pmpp_v2 way, with torch on the CPU: the output handed in through
//! `data`, and one fixture per cheat family failing with its own reason code. The same fixture
//! runs on the GPU in `rung selftest --gpu`. torch is not part of rung's setup (its wheels here
//! are CUDA builds of 3 GB), so without it in rung's Python these tests say so and stop.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

fn python_with_torch() -> Option<String> {
    let tc = common::doctor_toolchain();
    let python = tc["python"]["path"].as_str().map(str::to_string);
    if let Some(python) = &python
        && Command::new(python).args(["-c", "import torch"]).output().is_ok_and(|o| o.status.success())
    {
        return Some(python.clone());
    }
    let why = match python {
        Some(python) => format!(
            "rung's Python ({python}) has no torch; GPU MODE and KernelBench problems need it (`{python} -m pip install torch`)"
        ),
        None => format!("rung finds no Python ({})", tc["python"]),
    };
    // CI runs these tests again with a Python that has torch: there a skip is a failure.
    assert!(std::env::var_os("RUNG_REQUIRE_TORCH").is_none(), "RUNG_REQUIRE_TORCH is set: {why}");
    eprintln!("SKIPPED: {why}");
    None
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// A copy of `tests/fixtures/<from>` at `tmp/<to>`.
fn fixture(tmp: &Path, from: &str, to: &str) -> std::path::PathBuf {
    let ws = tmp.join(to);
    copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(from), &ws);
    ws
}

/// A copy of the outslot fixture (pmpp_v2 vector add) at `tmp/name`.
fn outslot(tmp: &Path, name: &str) -> std::path::PathBuf {
    fixture(tmp, "gpu-mode/outslot", name)
}

/// A copy of the outslot fixture with its honest v001 alone.
fn outslot_v001(tmp: &Path) -> std::path::PathBuf {
    let ws = outslot(tmp, "ws");
    for e in std::fs::read_dir(ws.join("versions")).unwrap() {
        let p = e.unwrap().path();
        if !p.file_name().unwrap().to_string_lossy().starts_with("v001") {
            std::fs::remove_file(p).unwrap();
        }
    }
    ws
}

/// Rewrites `file` with its first `from` replaced by `to` (which must be there).
fn rewrite(file: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    assert!(text.contains(from), "{} has no {from:?}", file.display());
    std::fs::write(file, text.replacen(from, to, 1)).unwrap();
}

/// version id → (verdict, reason of the first stage that did not pass, its summary).
fn check(ws: &Path, versions: &[&str]) -> BTreeMap<String, (String, String, String)> {
    let out = Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(["check", "--json", "--no-bench", "-C"])
        .arg(ws)
        .args(versions)
        .output()
        .unwrap();
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    verdicts(&report)
}

/// Each version's verdict, and the reason and summary of its first failing rung (else its last).
fn verdicts(report: &serde_json::Value) -> BTreeMap<String, (String, String, String)> {
    let mut got = BTreeMap::new();
    for v in report["versions"].as_array().unwrap() {
        let stages = v["stages"].as_array().unwrap();
        let bad = stages.iter().find(|s| s["verdict"] != "pass" && s["verdict"] != "skipped");
        let last = bad.or(stages.last()).unwrap();
        got.insert(
            v["id"].as_str().unwrap().to_string(),
            (
                v["verdict"].as_str().unwrap().to_string(),
                last["reason"].as_str().unwrap_or("").to_string(),
                last["summary"].as_str().unwrap_or("").to_string(),
            ),
        );
    }
    got
}

#[test]
fn pmpp_v2_outputs_in_data_and_every_cheat_family_its_reason() {
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = outslot(tmp.path(), "outslot");
    // A version after the forger: the channel it wrote into must not answer for this one.
    std::fs::copy(ws.join("versions/v001-fills-output.py"), ws.join("versions/v099-after-the-forger.py")).unwrap();
    let t = Instant::now();
    let got = check(
        &ws,
        &[
            "v001", "v002", "v003", "v004", "v005", "v006", "v008", "v009", "v011", "v012", "v013", "v014", "v015",
            "v016", "v019", "v020", "v021", "v022", "v023", "v024", "v099",
        ],
    );
    for (id, verdict, reason) in [
        ("v001", "pass", ""),
        ("v002", "pass", ""),
        ("v003", "fail", "input-mutated"),
        ("v004", "fail", "unwritten"),
        ("v005", "fail", "crashed"),
        ("v006", "fail", "memoised"),
        // A thread writes C after the call returned: named, whatever the race with the read.
        ("v008", "fail", "late-work"),
        ("v009", "fail", "timer-patched"),
        ("v011", "fail", "forged-reply"),
        ("v012", "fail", "input-mutated"),
        ("v013", "fail", "harness-patched"),
        ("v014", "fail", "harness-patched"),
        ("v015", "fail", "problem-check"),
        ("v016", "fail", "problem-check"),
        // Remembers answers only once a buffer has been seen 16 times: no check repeats so.
        ("v019", "pass", ""),
        // torch.abs = torch.zeros_like: a swap between two of torch's own functions.
        ("v020", "fail", "harness-patched"),
        // Swaps the helper module's `torch` (not a function: nothing watched changes). The judge
        // runs in a process of its own, where the swap never happened.
        ("v021", "fail", "problem-check"),
        // Leaves a thread working only once a buffer has been seen 16 times: no check repeats so.
        ("v022", "pass", ""),
        // A worker the compile phase started takes the work from a queue: no new thread, but it moved.
        ("v023", "fail", "late-work"),
        // Skips the work once the same buffers held the same values 16 times: no check repeats so.
        ("v024", "pass", ""),
        ("v099", "pass", ""),
    ] {
        let (v, r, summary) = &got[id];
        assert_eq!((v.as_str(), r.as_str()), (verdict, reason), "{id}: {summary}");
    }
    // The writer into C is not an input mutation: the output slot is named.
    assert!(
        got["v003"].2.contains("`data[0]`") && got["v003"].2.contains("outputs are `data[2]`"),
        "{:?}",
        got["v003"]
    );
    assert!(got["v005"].2.contains("exited with status 0"), "{:?}", got["v005"]);
    // Where the thread was: the version's own line.
    assert!(got["v008"].2.contains("v008-wrong-late-work.py:12 in later()"), "{:?}", got["v008"]);
    assert!(
        // At its sleep once it ran, at its get when the put woke it and it has not run yet.
        [
            "v023-wrong-late-work-queue.py:16 in _serve() (started before the call, and no longer where it waited)",
            "v023-wrong-late-work-queue.py:15 in _serve() (started before the call, and woken by it)"
        ]
        .iter()
        .any(|s| got["v023"].2.contains(s)),
        "{:?}",
        got["v023"]
    );
    // Eight versions, one of which ends its own process: no time-out anywhere.
    assert!(t.elapsed() < Duration::from_secs(120), "{:?}", t.elapsed());
}

#[test]
fn the_format_rule_decides_and_a_wrong_answer_fails_by_it() {
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = fixture(tmp.path(), "gpu-mode/vectorsum", "vectorsum");
    let got = check(&ws, &["v001", "v003"]);
    assert_eq!(got["v001"].0, "pass", "{:?}", got["v001"]);
    let (v, r, summary) = &got["v003"];
    assert_eq!((v.as_str(), r.as_str()), ("fail", "problem-check"), "{summary}");
    assert!(summary.starts_with("the problem's check_implementation fails at size="), "{summary}");
    // vectorsum's first test (size=1) is no reduction, its second is: the judge learns the
    // sparse probe there and the third test gets its call, which the honest sum follows.
    let history =
        Command::new(env!("CARGO_BIN_EXE_rung")).args(["history", "--json", "v001", "-C"]).arg(&ws).output().unwrap();
    let text = String::from_utf8_lossy(&history.stdout);
    assert!(text.contains("\"probe\""), "no sparse probe call in v001's run phases: {text}");
}

#[test]
fn the_sparse_probe_is_learnt_again_at_the_largest_test() {
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = fixture(tmp.path(), "gpu-mode/mean", "mean");
    let got = check(&ws, &[]);
    assert_eq!(got["v001"].0, "pass", "{:?}", got["v001"]);
    // The probe learnt at size 1024 (one element at 1e3 moves that mean) barely moves the mean of
    // a million: learnt again there, it moves one element to 1e6, and the formula's answer stays.
    let (v, r, summary) = &got["v002"];
    assert_eq!((v.as_str(), r.as_str()), ("fail", "input-ignored"), "{summary}");
    assert!(summary.contains("at size=1048576") && summary.contains("moved to 1000000x"), "{summary}");
    // A mean computed when the output is read, in GPU MODE's format as in KernelBench's.
    let (v, r, summary) = &got["v003"];
    assert_eq!((v.as_str(), r.as_str()), ("fail", "lazy-output"), "{summary}");
    assert!(summary.contains("output: Later, a torch.Tensor subclass"), "{summary}");
}

#[test]
fn an_output_the_reference_reads_and_writes_in_part_keeps_what_the_draw_put_in_it() {
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = fixture(tmp.path(), "gpu-mode/inout", "inout");
    let got = check(&ws, &[]);
    // Poisoned, `acc` would hold rung's bytes where the honest update reads it and where it
    // leaves it as it was: unwritten, and wrong.
    assert_eq!(got["v001"].0, "pass", "{:?}", got["v001"]);
    for id in ["v002", "v003"] {
        let (v, r, summary) = &got[id];
        assert_eq!((v.as_str(), r.as_str()), ("fail", "problem-check"), "{id}: {summary}");
    }
}

#[test]
fn a_version_that_fills_and_returns_an_input_changed_its_input() {
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = fixture(tmp.path(), "gpu-mode/lastinput", "lastinput");
    let got = check(&ws, &[]);
    assert_eq!(got["v001"].0, "pass", "{:?}", got["v001"]);
    // Taken for pmpp_v2's output buffer, `b` was poisoned from the second call on, and the
    // version failed the check on rung's bytes: the wrong reason.
    let (v, r, summary) = &got["v002"];
    assert_eq!((v.as_str(), r.as_str()), ("fail", "input-mutated"), "{summary}");
    assert!(summary.contains("`data[1]`"), "{summary}");
}

#[test]
fn a_kernelbench_version_may_change_an_input_its_model_changes() {
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = fixture(tmp.path(), "kernelbench-inplace", "kb");
    let out = Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(["check", "--json", "--no-bench", "-C"])
        .arg(&ws)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let got = verdicts(&report);
    assert_eq!(got["v001"].0, "pass", "{:?}", got["v001"]);
    let (v, r, summary) = &got["v002"];
    assert_eq!((v.as_str(), r.as_str()), ("fail", "problem-check"), "{summary}");
    // Its run does not claim the inputs unchanged: it names the one Model changes too.
    let v001 = report["versions"].as_array().unwrap().iter().find(|v| v["id"] == "v001").unwrap();
    let run = v001["stages"].as_array().unwrap().iter().find(|s| s["stage"] == "run").unwrap();
    let summary = run["summary"].as_str().unwrap();
    assert!(summary.contains("inputs unchanged but inputs[0], which Model changes in place too"), "{summary}");
}

#[test]
fn an_output_that_does_its_work_when_read_is_lazy_output() {
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = fixture(tmp.path(), "kernelbench", "kb");
    let got = check(&ws, &["v001", "v005", "v006"]);
    assert_eq!(got["v001"].0, "pass", "{:?}", got["v001"]);
    for (id, what) in [("v005", "Lazy, a torch.Tensor subclass"), ("v006", "Deferred, not a torch.Tensor")] {
        let (v, r, summary) = &got[id];
        assert_eq!((v.as_str(), r.as_str()), ("fail", "lazy-output"), "{id}: {summary}");
        assert!(summary.contains(what), "{id}: {summary}");
    }
}

#[test]
fn kernelbench_reference_is_out_of_the_versions_reach() {
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = fixture(tmp.path(), "kernelbench", "kb");
    let got = check(&ws, &["v001", "v003", "v004"]);
    assert_eq!(got["v001"].0, "pass", "{:?}", got["v001"]);
    // The reference Model is built after ModelNew's call: zeroing every Model it can find
    // changes nothing, and its all-zero answer fails KernelBench's own rule.
    for id in ["v003", "v004"] {
        let (v, r, summary) = &got[id];
        assert_eq!((v.as_str(), r.as_str()), ("fail", "problem-check"), "{id}: {summary}");
    }
}

#[test]
fn a_reduction_that_reads_a_sample_of_its_inputs_fails_the_sparse_probe() {
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = fixture(tmp.path(), "kernelbench-mean", "kb");
    let got = check(&ws, &["v001", "v002", "v003", "v004", "v005", "v006", "v008"]);
    assert_eq!(got["v001"].0, "pass", "{:?}", got["v001"]);
    // KernelBench's rule passes the sampled mean on every draw; the probe's moved element does not
    // move its answer.
    let (v, r, summary) = &got["v002"];
    assert_eq!((v.as_str(), r.as_str()), ("fail", "input-ignored"), "{summary}");
    assert!(
        summary.contains("it matches the answer to the inputs as drawn") && summary.contains("1 of 1 pass"),
        "{summary}"
    );
    let (v, r, summary) = &got["v003"];
    assert_eq!((v.as_str(), r.as_str()), ("fail", "problem-check"), "{summary}");
    assert!(summary.contains("`output` is f64, Model's f32"), "{summary}");
    assert_eq!(summary.matches("is f64").count(), 1, "said once: {summary}");
    // A version that refuses the moved draw passes, and the check says the probe could not judge it.
    let (v, _, summary) = &got["v004"];
    assert_eq!(v, "pass", "{summary}");
    assert!(summary.contains("the version raised on that draw (ValueError: inputs out of range)"), "{summary}");
    // One that crashes its process on that draw passes too: the probe came after every test.
    let (v, _, summary) = &got["v005"];
    assert_eq!(v, "pass", "{summary}");
    assert!(summary.contains("the sparse probe at the test was not judged: the version's process"), "{summary}");
    // The rule's message names the shapes; the summary does not say it twice.
    let (v, r, summary) = &got["v006"];
    assert_eq!((v.as_str(), r.as_str()), ("fail", "shape-mismatch"), "{summary}");
    assert_eq!(summary.matches("shape").count(), 1, "{summary}");
    assert!(summary.contains("output shape (1,) is not Model's ()"), "{summary}");
    // Read through f16, every draw's mean is the same value: right for both draws, so the same
    // bits are no remembered answer; the probe's element overflows f16, and its answer differs.
    let (v, _, summary) = &got["v008"];
    assert_eq!(v, "pass", "{summary}");
    assert!(summary.contains("the rule passes it for both"), "{summary}");
    // A version that reads every other element: under this seed the first moved element is one it
    // reads (its answer differs from both references), and the probe's second draw catches it.
    let got = check(&ws, &["--seed", "3", "v007"]);
    let (v, r, summary) = &got["v007"];
    assert_eq!((v.as_str(), r.as_str()), ("fail", "input-ignored"), "{summary}");
    assert!(summary.contains("(on its moved draw 2 of 4: the ones before moved an element it read)"), "{summary}");
}

#[test]
fn the_sparse_probe_is_learnt_only_where_it_can_judge() {
    let Some(python) = python_with_torch() else { return };
    // Each reference on the same draw: the probe chosen (k, factor), or None.
    let script = r#"
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import rung_problem as rp
def draw():
    torch.manual_seed(7)
    return [torch.rand(4096, 64)]
def refuses(x):
    if float(x[0].max()) > 1.0:
        raise ValueError("out of range")
    return x[0].mean()
refs = {
    "mean": lambda x: x[0].mean(),
    "row sums": lambda x: x[0].sum(dim=1),
    "elementwise": lambda x: torch.relu(x[0]),
    "histc": lambda x: torch.histc(x[0], bins=16, min=0.0, max=1.0),
    "bincount": lambda x: torch.bincount((x[0] * 16).long().reshape(-1)),
    "refuses": refuses,
}
out = {}
for name, ref in refs.items():
    spec = rp.learn_probe(draw, ref, "inputs", (), 11, "cpu")
    out[name] = None if spec is None else [spec["k"], spec["factor"]]
moved = rp.sparse_probe(draw(), "inputs", rp.probe_seed(11), {"k": 1, "factor": 1e3})
again = rp.sparse_probe(draw(), "inputs", rp.probe_seed(11), {"k": 1, "factor": 1e3})
out["moved"] = int((moved[0] != draw()[0]).sum())
out["same twice"] = bool(torch.equal(moved[0], again[0]))
print(json.dumps(out))
"#;
    let assets = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/python");
    let out = Command::new(&python).args(["-c", script, assets]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // A mean of 262,144 elements: one element at 1e3 times the largest moves it by about 0.004,
    // not past the margin; at 1e6, far past it.
    assert_eq!(got["mean"], serde_json::json!([1, 1e6]), "{got}");
    // 64 elements a row: no reduction by the ratio (256 inputs an output).
    assert_eq!(got["row sums"], serde_json::Value::Null, "{got}");
    assert_eq!(got["elementwise"], serde_json::Value::Null, "{got}");
    // A reference that ignores out-of-range values cannot tell; one whose answer changes shape,
    // or that refuses the draw, changed the problem: no probe.
    assert_eq!(got["histc"], serde_json::Value::Null, "{got}");
    assert_eq!(got["bincount"], serde_json::Value::Null, "{got}");
    assert_eq!(got["refuses"], serde_json::Value::Null, "{got}");
    assert_eq!(got["moved"], 1, "{got}");
    assert_eq!(got["same twice"], true, "{got}");
}

#[test]
fn a_forward_that_draws_is_seeded_alike_in_both_processes() {
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = fixture(tmp.path(), "kernelbench-dropout", "kb");
    let got = check(&ws, &[]);
    assert_eq!(got["v001"].0, "pass", "{:?}", got["v001"]);
    let (v, r, summary) = &got["v002"];
    assert_eq!((v.as_str(), r.as_str()), ("fail", "problem-check"), "{summary}");
}

/// Runs `body` (Python) in a copy of the outslot fixture with torch and rung's worker modules
/// imported (`rp`, `w`), `WS` and `KB` naming the outslot and KernelBench fixture copies: what it
/// prints, as JSON. None (the test skips) without torch.
fn worker_script(body: &str) -> Option<serde_json::Value> {
    let python = python_with_torch()?;
    let tmp = tempfile::tempdir().unwrap();
    let ws = outslot(tmp.path(), "outslot");
    let kb = fixture(tmp.path(), "kernelbench", "kb");
    let script = format!(
        "import json, sys\nsys.path.insert(0, {assets:?})\nimport torch\nimport rung_problem as rp\nimport rung_bench as w\nWS = {ws:?}\nKB = {kb:?}\n{body}",
        assets = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/python"),
        ws = ws.display().to_string(),
        kb = kb.display().to_string(),
    );
    let out = Command::new(python).args(["-c", &script]).current_dir(&ws).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn a_bench_re_check_refills_the_timed_buffers_and_names_a_remembered_result() {
    // The worker's bench set-up on the CPU: the timed calls, then the re-check on set 0.
    let Some(v) = worker_script(
        r#"
from rung_host import RUNG_DTYPES
rp.save_timers()
rp.watch_torch()
out = {}

def recheck(b, judge):
    # The version's side on set 0's buffers and on new ones, then the judge's.
    with torch.no_grad():
        recs = [b["observe"](next(iter(b["sets"][0][0].values())), hints, None), b["observe"](None, hints, None)]
        return rp.recheck_verdict(*judge(recs))

for v in ["v001-fills-output.py", "v019-memoised-in-bench.py", "v002-new-tensor.py"]:
    b = w._problem_bench_setup({"series": 0, "problem": {"problem": WS + "/reference.py",
        "version": WS + "/versions/" + v, "format": "gpu-mode", "seed": 5,
        "args": {"size": 64, "seed": 5}, "sets": 2, "device": "cpu"}})
    prob = w._problem_module(WS + "/reference.py", "gpu-mode")
    st = {}
    draw = lambda: (torch.manual_seed(9), prob.generate_input(size=64, seed=9))[1]
    rp.learn_ref_slots(prob, draw(), st, "cpu", draw)
    hints = {"output_slots": sorted(st["ref_slots"]), "regenerable": sorted(st["regenerable"])}
    for _ in range(20):
        b["fn"](**b["sets"][0][0])
    out[v] = recheck(b, lambda recs: rp.judge_gpu_mode(prob, {"size": 64, "seed": 5}, recs, {}, RUNG_DTYPES,
                                                          False, "cpu", st))
kb = KB
for v in ["v001-torch.py", "v003-wrong.py"]:
    b = w._problem_bench_setup({"series": 0, "problem": {"problem": kb + "/19_Linear_ReLU.py",
        "version": kb + "/versions/" + v, "format": "kernel-bench", "seed": 5, "sets": 2, "device": "cpu"}})
    prob = w._problem_module(kb + "/19_Linear_ReLU.py", "kernel-bench")
    hints = {}
    torch.manual_seed(5)
    init = prob.get_init_inputs()
    b["fn"](**b["sets"][0][0])
    out[v] = recheck(b, lambda recs: rp.judge_kernelbench(prob, lambda: w._seeded_model(prob.Model, init, 5, "cpu"),
                                                            recs, {}, RUNG_DTYPES, "cpu"))
print(json.dumps(out))
"#,
    ) else {
        return;
    };
    assert!(v["v001-fills-output.py"].is_null(), "{v}");
    assert!(v["v002-new-tensor.py"].is_null(), "{v}");
    // KernelBench: Model beside the timed ModelNew; a wrong version is wrong by the rule.
    assert!(v["v001-torch.py"].is_null(), "{v}");
    assert_eq!(v["v003-wrong.py"][0], "problem-check", "{v}");
    let memo = &v["v019-memoised-in-bench.py"];
    assert_eq!(memo[0], "memoised", "{v}");
    assert!(memo[1].as_str().unwrap().contains("refilled with fresh values"), "{v}");
}

/// A GPU MODE bench poisons the output slots the judge named, in every input set, before each
/// timed call (the version's and the reference's alike): a call cannot find the last call's
/// answer still in its output. Slots the reference also reads keep their values, and a
/// KernelBench bench, whose model returns new tensors, poisons nothing.
#[test]
fn a_problem_bench_poisons_the_output_slots_before_each_timed_call() {
    let Some(v) = worker_script(
        r#"
out = {}

def setup(hints, reference=False):
    return w._problem_bench_setup({"series": 0, "hints": hints, "problem": {"problem": WS + "/reference.py",
        "version": WS + "/versions/v001-fills-output.py", "format": "gpu-mode", "seed": 5, "reference": reference,
        "args": {"size": 8, "seed": 5}, "sets": 3, "device": "cpu"}})

b = setup({"output_slots": ["data[2]"]})
out["poisoned"] = len(b["poison"])
for g in b["poison"]:
    g.refill()
out["all_poison"] = all(bool((kw["data"][2].view(torch.uint8) == 0xFF).all()) for kw, _ in b["sets"])
out["inputs_kept"] = all(bool(torch.isfinite(kw["data"][0]).all()) for kw, _ in b["sets"])
c = b["fn"](**b["sets"][1][0])
a, bb, _ = b["sets"][1][0]["data"]
out["recomputed"] = bool(torch.equal(c, a + bb))
out["reference"] = len(setup({"output_slots": ["data[2]"]}, reference=True)["poison"])
out["inout"] = len(setup({"output_slots": ["data[2]"], "inout_slots": ["data[2]"]})["poison"])
out["no_hints"] = len(setup({})["poison"])
kb = KB
k = w._problem_bench_setup({"series": 0, "hints": {"output_slots": ["inputs[0]"]}, "problem": {
    "problem": kb + "/19_Linear_ReLU.py", "version": kb + "/versions/v001-torch.py", "format": "kernel-bench",
    "seed": 5, "sets": 2, "device": "cpu"}})
out["kernelbench"] = len(k["poison"])
print(json.dumps(out))
"#,
    ) else {
        return;
    };
    assert_eq!(v["poisoned"], 3, "one output per set: {v}");
    assert_eq!((v["all_poison"].as_bool(), v["inputs_kept"].as_bool()), (Some(true), Some(true)), "{v}");
    assert_eq!(v["recomputed"], true, "{v}");
    assert_eq!((v["reference"].as_u64(), v["inout"].as_u64()), (Some(3), Some(0)), "{v}");
    assert_eq!((v["no_hints"].as_u64(), v["kernelbench"].as_u64()), (Some(0), Some(0)), "{v}");
}

/// A problem bench keeps one input set when one is past `ONE_SET_BYTES` (KernelBench's published
/// inputs are 6.4-7.5 GB: three would be drawn and held for nothing an L2 could tell apart), says
/// how many it kept, and draws KernelBench's sets as the check does, on the device it runs on.
#[test]
fn a_problem_bench_keeps_one_input_set_when_one_is_huge() {
    let Some(v) = worker_script(
        r#"
out = {}
w.ONE_SET_BYTES = 1024

def gpu_mode(size):
    b = w._problem_bench_setup({"series": 0, "problem": {"problem": WS + "/reference.py",
        "version": WS + "/versions/v001-fills-output.py", "format": "gpu-mode", "seed": 5,
        "args": {"size": size, "seed": 5}, "sets": 3, "device": "cpu"}})
    return len(b["sets"])

out["small"], out["large"] = gpu_mode(8), gpu_mode(512)
kb = w._problem_bench_setup({"series": 0, "problem": {"problem": KB + "/19_Linear_ReLU.py",
    "version": KB + "/versions/v001-torch.py", "format": "kernel-bench", "seed": 5, "sets": 3, "device": "cpu"}})
out["kernelbench"] = len(kb["sets"])
prob = w._problem_module(KB + "/19_Linear_ReLU.py", "kernel-bench")
again = rp.kernelbench_inputs(prob, 5, "cpu")
out["same_draw"] = all(bool(torch.equal(a, b)) for a, b in zip(kb["sets"][0][0]["inputs"], again))
w.ONE_SET_BYTES = 1 << 30
out["kernelbench_small"] = len(w._problem_bench_setup({"series": 0, "problem": {"problem": KB + "/19_Linear_ReLU.py",
    "version": KB + "/versions/v001-torch.py", "format": "kernel-bench", "seed": 5, "sets": 3, "device": "cpu"}})["sets"])
print(json.dumps(out))
"#,
    ) else {
        return;
    };
    // size 8: three f32 tensors of 8 (96 bytes); size 512: 6 KiB, past the lowered threshold.
    assert_eq!((v["small"].as_u64(), v["large"].as_u64()), (Some(3), Some(1)), "{v}");
    assert_eq!((v["kernelbench"].as_u64(), v["kernelbench_small"].as_u64()), (Some(1), Some(3)), "{v}");
    assert_eq!(v["same_draw"], true, "the bench draws KernelBench's inputs as the check does: {v}");
}

#[test]
fn an_input_the_problem_cannot_draw_twice_is_not_a_mutation() {
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = outslot(tmp.path(), "drifting");
    // generate_input draws A the same way twice in the compile phase, then never again (as a
    // draw through a nondeterministic GPU reduction might): drawing it again after the call
    // cannot stand for a copy, and an honest version must still pass.
    rewrite(
        &ws.join("reference.py"),
        "    return A, B, C",
        "    _draws.append(1)\n    if len(_draws) > 2:\n        A = A + 1e-3 * len(_draws)\n    return A, B, C",
    );
    rewrite(&ws.join("reference.py"), "\ndef generate_input", "\n_draws = []\n\n\ndef generate_input");
    let got = check(&ws, &["v001", "v003"]);
    assert_eq!(got["v001"].0, "pass", "{:?}", got["v001"]);
    // A real mutation is still one.
    assert_eq!((got["v003"].0.as_str(), got["v003"].1.as_str()), ("fail", "input-mutated"), "{:?}", got["v003"]);
}

#[test]
fn a_problem_that_uses_deterministic_algorithms_finds_inductor_imported_in_its_child() {
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = outslot(tmp.path(), "deterministic");
    // A reference that runs under GPU MODE's DeterministicContext, as nearly every pmpp_v2 one
    // does: torch.use_deterministic_algorithms imports torch._inductor.config on first use.
    rewrite(
        &ws.join("reference.py"),
        "    A, B, output = data\n",
        "    torch.use_deterministic_algorithms(True)\n    torch.use_deterministic_algorithms(False)\n    A, B, output = data\n",
    );
    assert_child_finds(&ws, "torch._inductor.config", "");
}

/// v001 of an outslot workspace passes only if its child found `module` already imported (by the
/// zygote); `also` is put in the version's source beside that check.
fn assert_child_finds(ws: &Path, module: &str, also: &str) {
    rewrite(
        &ws.join("versions").join("v001-fills-output.py"),
        "from task import",
        &format!("import sys\n{also}assert '{module}' in sys.modules, 'not preimported'\nfrom task import"),
    );
    let got = check(ws, &["v001"]);
    assert_eq!(got["v001"].0, "pass", "{:?}", got["v001"]);
}

/// The judge reads (and then removes) the files a version's record names: the record comes from
/// the version's process, so a file outside the folder rung gave it is refused, a link that
/// leads out included.
#[test]
fn the_judge_reads_no_file_outside_the_versions_folder() {
    let tc = common::doctor_toolchain();
    let Some(python) = tc["python"]["path"].as_str() else {
        eprintln!("SKIPPED: no Python for the worker (rung setup)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dump = tmp.path().join("judged");
    std::fs::create_dir_all(dump.join("case-0")).unwrap();
    std::fs::write(dump.join("case-0/out-1.bin"), [0u8; 4]).unwrap();
    std::fs::write(tmp.path().join("secret"), "x").unwrap();
    std::os::unix::fs::symlink(tmp.path().join("secret"), dump.join("case-0/out-2.bin")).unwrap();
    let script = format!(
        r#"
import sys
sys.path.insert(0, {assets:?})
import rung_judge
def rec(f):
    return [{{"tensors": [{{"file": f, "dtype": "float32", "shape": [1], "stride": [1]}}], "kept": {{}}, "slots": []}}]
out = []
for f in [{dump:?} + "/case-0/out-1.bin", {dump:?} + "/../secret", {dump:?} + "/case-0/out-2.bin", "/etc/passwd"]:
    try:
        rung_judge._within(rec(f), {dump:?})
        out.append("read")
    except ValueError:
        out.append("refused")
print(",".join(out))
"#,
        assets = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/python"),
        dump = dump.display().to_string(),
    );
    let out = Command::new(python).args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "read,refused,refused,refused");
}

/// A version that calls `torch.compile` finds torch._inductor.compile_fx imported by the zygote
/// (its first call imports about 600 modules otherwise, in every check's child).
#[test]
fn a_version_that_calls_torch_compile_finds_compile_fx_imported_in_its_child() {
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = outslot(tmp.path(), "compile-fx");
    assert_child_finds(&ws, "torch._inductor.compile_fx", "# as torch.compile would need it\n");
}

/// A preimport that opens CUDA would leave every forked child unable to use it: the zygote
/// starts again without it, once, and answers its handshake.
#[test]
fn a_preimport_that_opens_cuda_restarts_the_zygote_without_it() {
    let Some(python) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("rung_opens_cuda.py"),
        "import torch\ntorch.cuda.is_initialized = lambda: True  # as a module that opened CUDA leaves it\n",
    )
    .unwrap();
    // torch._inductor asks torch.cuda.is_available() as it is imported: torch counts devices
    // through NVML (no cuInit) while the zygote preimports, and only then.
    std::fs::write(
        tmp.path().join("rung_sees_env.py"),
        "import os\nwith open('seen.txt', 'a') as f:\n    f.write(os.environ.get('PYTORCH_NVML_BASED_CUDA_CHECK', '-') + '\\n')\n",
    )
    .unwrap();
    let out = Command::new(&python)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/python/rung_worker.py"))
        .arg("--interpret")
        .current_dir(tmp.path())
        .env("PYTHONPATH", tmp.path())
        .env_remove("PYTORCH_NVML_BASED_CUDA_CHECK")
        .env("RUNG_PREIMPORT", "rung_sees_env,torch._inductor.config,rung_opens_cuda")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let hello: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap_or("{}")).unwrap();
    assert!(hello["error"].is_null() && hello["protocol"].is_number(), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().filter(|l| l.contains("\"protocol\"")).count(), 1, "one handshake: {stdout}");
    let said = "rung: preimport rung_opens_cuda opened CUDA in the zygote; starting again without it";
    assert_eq!(stderr.matches(said).count(), 1, "{stderr}");
    // Imported by the zygote and again by the one that replaced it, with NVML's count both times.
    let seen = std::fs::read_to_string(tmp.path().join("seen.txt")).unwrap();
    assert_eq!(seen, "1\n1\n", "{stderr}");
}

/// How a tensor crosses from the version's process to the judge's: on the CPU through a file
/// that the judge reads back bit for bit; the version's copies handed over by CUDA IPC are kept
/// until the judge removes their markers; a record's IPC handle that is malformed, or meant for
/// a judge on the CPU, is an error that says so; the judge accepts a marker only inside the
/// folder rung gave the version.
#[test]
fn tensors_cross_to_the_judge_and_held_copies_go_when_judged() {
    let Some(python) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let script = format!(
        r#"
import json, os, sys
sys.path.insert(0, {assets:?})
import torch
import rung_problem as rp, rung_judge
d = {dump:?}
out = {{}}
x = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
meta = rp._put(x, d, "out", {{}})
out["file"] = os.path.basename(meta["file"])
back = rp.load(meta, "cpu")
out["same"] = bool(torch.equal(back, x)) and list(back.stride()) == list(x.stride())
for m in ("a.ipc", "b.ipc"):
    open(os.path.join(d, m), "wb").close()
    rp._IPC["held"].append((os.path.join(d, m), m))
os.remove(os.path.join(d, "a.ipc"))
rp._release_judged()
out["held"] = [c for _, c in rp._IPC["held"]]
ipc = {{"file": os.path.join(d, "b.ipc"), "ipc": "00" * 64, "offset": 0, "dtype": "float32", "shape": [4], "stride": [1]}}
def err(meta, device):
    try:
        rp.load(meta, device)
    except ValueError as e:
        return str(e)
out["cpu"] = err(ipc, "cpu")
out["short"] = err(dict(ipc, ipc="00" * 8), "cuda")
rung_judge._within([{{"tensors": [ipc]}}], d)
try:
    rung_judge._within([{{"tensors": [dict(ipc, file="/etc/passwd")]}}], d)
    out["outside"] = "accepted"
except ValueError as e:
    out["outside"] = str(e)
print(json.dumps(out))
"#,
        assets = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/python"),
        dump = tmp.path().display().to_string(),
    );
    let out = Command::new(&python).args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["file"], "out-1.bin", "{got}");
    assert_eq!(got["same"], true, "{got}");
    assert_eq!(got["held"], serde_json::json!(["b.ipc"]), "{got}");
    assert!(got["cpu"].as_str().unwrap().contains("judge on the CPU"), "{got}");
    assert!(got["short"].as_str().unwrap().contains("malformed CUDA IPC handle"), "{got}");
    assert!(got["outside"].as_str().unwrap().contains("outside its folder"), "{got}");
}

/// The worker judges GPU MODE and KernelBench outputs where they live (rung_problem.py's
/// `compare`, in torch); metrics.rs judges everything else. Both must give the same figures for
/// the same tensors, NaN, infinities, zeros, the error map and the first mismatches included,
/// with chunks of 7 elements so every running total crosses chunk boundaries. The format's own
/// rule (allclose) and its vacuity counts are held to torch's `isclose` on the same tensors.
#[test]
fn the_workers_on_device_metrics_match_metrics_rs() {
    let Some(python) = python_with_torch() else { return };
    let cases: Vec<(Vec<f64>, Vec<f64>, Vec<usize>)> = vec![
        (vec![1.0, 2.5, -4.0, 0.1], vec![1.0, 2.0, -4.0, 0.0], vec![2, 2]),
        (vec![f64::NAN, f64::NAN, 2.0, f64::INFINITY], vec![1.0, f64::NAN, 2.0, f64::INFINITY], vec![4]),
        (vec![0.0; 6], vec![0.0; 6], vec![1, 2, 3]),
        (
            (0..4800).map(|i| (i as f64 * 0.37).sin() + if i == 4000 { 0.5 } else { 0.0 }).collect(),
            (0..4800).map(|i| (i as f64 * 0.37).sin()).collect(),
            vec![60, 80],
        ),
        (vec![3.0], vec![3.5], vec![1]),
        // Columns that split evenly into the map's cells: the map is reduced a segment at a time.
        (
            (0..10240).map(|i| (i as f64 * 0.11).cos() + if i == 777 || i == 10000 { 0.25 } else { 0.0 }).collect(),
            (0..10240).map(|i| (i as f64 * 0.11).cos()).collect(),
            vec![40, 256],
        ),
        (
            (0..2048).map(|i| i as f64 + if i == 2047 { 1.0 } else { 0.0 }).collect(),
            (0..2048).map(|i| i as f64).collect(),
            vec![2048],
        ),
        // More mismatches than are listed, spread over many chunks, with non-finite pairs among
        // them: the list is the first eight in order.
        (
            (0..300)
                .map(|i| match i % 23 {
                    0 => f64::NAN,
                    5 => f64::NEG_INFINITY,
                    _ => (i as f64 * 0.5).sin() + if i % 11 == 3 { 0.01 } else { 0.0 },
                })
                .collect(),
            (0..300).map(|i| if i == 46 { f64::NAN } else { (i as f64 * 0.5).sin() }).collect(),
            vec![3, 100],
        ),
    ];
    let enc = |v: &Vec<f64>| v.iter().map(|x| format!("float('{x}')")).collect::<Vec<_>>().join(",");
    let mut script = String::from(
        "import json, sys, torch\nsys.path.insert(0, sys.argv[1])\nimport rung_problem as rp\nrp.CHUNK = 7\nout = []\n",
    );
    for (o, r, shape) in &cases {
        script.push_str(&format!(
            "o = torch.tensor([{}], dtype=torch.float64).reshape({shape:?})\nr = torch.tensor([{}], dtype=torch.float64).reshape({shape:?})\n",
            enc(o),
            enc(r)
        ));
        script.push_str(
            "c, x = rp.compare(o, r, 1e-5, 1e-4, (1e-2, 1e-3))\n\
             fin = torch.isfinite(r)\n\
             mean = float(torch.where(fin, r, 0).sum() / max(int(fin.sum()), 1))\n\
             want = [int((~torch.isclose(o, r, 1e-3, 1e-2)).sum()),\n\
                     int((fin & torch.isclose(torch.zeros_like(r), r, 1e-3, 1e-2)).sum()),\n\
                     int((fin & torch.isclose(torch.full_like(r, mean), r, 1e-3, 1e-2)).sum()), mean]\n\
             out.append([c, [x['mismatches'], x['zero_pass'], x['constant_pass'], x['constant']], want])\n",
        );
    }
    script.push_str("print(json.dumps(out))\n");
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("parity.py");
    std::fs::write(&file, &script).unwrap();
    let p =
        Command::new(&python).arg(&file).arg(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/python")).output().unwrap();
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    let got: Vec<(rung::metrics::Comparison, [f64; 4], [f64; 4])> = serde_json::from_slice(&p.stdout).unwrap();
    let tol = rung::dtype::Tolerance { atol: 1e-5, rtol: 1e-4, min_psnr: None, min_cosine: None };
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-300) || (a.is_nan() && b.is_nan());
    // Python lists a non-finite value as null (NaN once read back); Rust keeps it.
    let finite = |x: f64| x.is_finite().then_some(x);
    let listed = |c: &rung::metrics::Comparison| {
        c.first_mismatches.iter().map(|m| (m.index.clone(), finite(m.output), finite(m.reference))).collect::<Vec<_>>()
    };
    for ((o, r, shape), (py, rule, want)) in cases.iter().zip(&got) {
        let rs = rung::metrics::compare(o, r, shape, &tol);
        assert_eq!(
            (py.elements, py.mismatches, py.nan_count, py.inf_count),
            (rs.elements, rs.mismatches, rs.nan_count, rs.inf_count),
            "{shape:?}"
        );
        for (name, a, b) in [
            ("max_abs_err", py.max_abs_err, rs.max_abs_err),
            ("max_rel_err", py.max_rel_err, rs.max_rel_err),
            ("mean_abs_err", py.mean_abs_err, rs.mean_abs_err),
            ("mse", py.mse, rs.mse),
            ("cosine", py.cosine, rs.cosine),
        ] {
            assert!(close(a, b), "{name} {shape:?}: python {a}, rust {b}");
        }
        assert_eq!(py.psnr.is_some(), rs.psnr.is_some());
        if let (Some(a), Some(b)) = (py.psnr, rs.psnr) {
            assert!(close(a, b), "psnr {a} {b}");
        }
        assert_eq!(py.map_shape, rs.map_shape);
        assert!(
            py.error_map.iter().zip(&rs.error_map).all(|(a, b)| close(*a, *b)),
            "{:?} {:?}",
            py.error_map,
            rs.error_map
        );
        assert_eq!(listed(py), listed(&rs), "{shape:?}");
        assert_eq!(rule[..3], want[..3], "the rule's mismatches, zero and constant passes {shape:?}");
        assert!(close(rule[3], want[3]), "the reference's mean {shape:?}: {} against {}", rule[3], want[3]);
    }
    // The last case lists eight of its mismatches, in order, across chunks of seven.
    let last = &got.last().unwrap().0;
    assert_eq!(last.first_mismatches.len(), 8);
    assert!(last.mismatches > 8, "{}", last.mismatches);
}

/// Under `rung watch`, a GPU MODE problem's next check finds its children (the version's and
/// the judge's) forked while nobody waited: the warm re-check's run says `child_ahead`, not
/// `fork`, and its verdict is the same as the first check's.
#[test]
fn a_warm_re_check_takes_the_children_forked_ahead() {
    use std::io::BufRead;
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = outslot_v001(tmp.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(["watch", "--json", "--no-bench", "-C"])
        .arg(&ws)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (tx, events) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    let done = |generation: u64| -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let e = events
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("a check's result within 300 s");
            if e["event"] == "done" && e["generation"] == generation {
                return e;
            }
        }
    };
    let run_of = |e: &serde_json::Value| {
        e["report"]["stages"].as_array().unwrap().iter().find(|s| s["stage"] == "run").cloned().unwrap()
    };
    let first = done(1);
    // The children are forked after the result is out: give them a moment, as a person would.
    std::thread::sleep(Duration::from_millis(1500));
    let file = std::fs::read_dir(ws.join("versions")).unwrap().next().unwrap().unwrap().path();
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("\n# saved again\n");
    std::fs::write(&file, text).unwrap();
    let again = done(2);
    let _ = child.kill();
    let _ = child.wait();
    let (one, two) = (run_of(&first), run_of(&again));
    eprintln!("run phases, first check: {}\nwarm re-check: {}", one["detail"]["phases"], two["detail"]["phases"]);
    assert_eq!(one["verdict"], "pass", "{one}");
    assert_eq!(two["verdict"], one["verdict"], "{two}");
    let phases = two["detail"]["phases"].as_object().unwrap();
    assert!(phases.contains_key("child_ahead"), "{phases:?}");
    assert!(!phases.contains_key("fork"), "the version's child was forked again: {phases:?}");
    assert!(one["detail"]["phases"].as_object().unwrap().contains_key("fork"), "{one}");
}

/// The agent's and MCP's `check` keeps its workers between calls: the second check of a GPU MODE
/// problem takes the children forked after the first, as a watch does.
#[test]
fn a_second_check_through_the_tools_takes_the_children_forked_ahead() {
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = outslot_v001(tmp.path());
    let ctx = rung::verbs::Context::new(ws.clone());
    let args = rung::verbs::CheckArgs { versions: vec!["v001".into()], seed: None, no_bench: true };
    let phases = |reply: &rung::verbs::Reply| {
        let v = &reply.data["versions"][0];
        assert_eq!(v["verdict"], "pass", "{}", reply.text);
        let run = v["stages"].as_array().unwrap().iter().find(|s| s["stage"] == "run").unwrap().clone();
        run["detail"]["phases"].as_object().unwrap().keys().cloned().collect::<Vec<_>>()
    };
    let first = phases(&rung::verbs::check(&ctx, &args).unwrap());
    assert!(first.iter().any(|k| k == "fork"), "{first:?}");
    let second = phases(&rung::verbs::check(&ctx, &args).unwrap());
    assert!(second.iter().any(|k| k == "child_ahead") && !second.iter().any(|k| k == "fork"), "{second:?}");
    ctx.shutdown();
}

/// When the problem's own code fails where none of the version's ran, the version gets no
/// verdict: on a machine without a GPU, a problem that draws its inputs on the GPU (pmpp_v2's
/// generate_input does) is skipped as needing one; a generate_input, ref_kernel, get_inputs()
/// or Model that raises is an error that names it. Neither fails the version (a correct one was
/// `exception` before). The problem's check raising on the version's output stays its failure.
#[test]
fn a_problem_whose_own_code_fails_gives_no_verdict_on_the_version() {
    let Some(_) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let run_of = |ws: &Path| -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_rung"))
            .args(["check", "--json", "--no-bench", "-C"])
            .arg(ws)
            .arg("v001")
            .output()
            .unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let v = report["versions"][0].clone();
        v["stages"].as_array().unwrap().iter().find(|s| s["stage"] == "run").cloned().unwrap_or(v)
    };
    let check = "check_implementation = make_match_reference(ref_kernel, rtol=1e-5, atol=1e-5)";
    let kernelbench = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kernelbench");
    // (case, fixture, file, from, to, verdict, what the run's summary says)
    let cases: [(&str, &str, &str, &str, &str, &str, &str); 9] = [
        (
            "generate_input on CUDA",
            "outslot",
            "reference.py",
            r#"DEVICE = "cuda" if torch.cuda.is_available() else "cpu""#,
            r#"DEVICE = "cuda""#,
            "skipped",
            "no GPU: the problem's generate_input() needs a GPU",
        ),
        (
            "generate_input raises",
            "outslot",
            "reference.py",
            "    gen = torch.Generator(device=DEVICE)\n",
            "    raise ValueError(\"no such size\")\n",
            "error",
            "the problem's generate_input() failed (ValueError: no such size): no verdict on the version",
        ),
        (
            "ref_kernel raises (in the judge's process)",
            "outslot",
            "reference.py",
            "    A, B, output = data\n",
            "    A, B, output = data\n    raise KeyError(\"ref\")\n",
            "error",
            "the problem's ref_kernel() failed (KeyError: 'ref'): no verdict on the version",
        ),
        (
            "check_implementation asks for CUDA",
            "outslot",
            "reference.py",
            check,
            "def check_implementation(data, output):\n    torch.cuda.synchronize()\n    return True",
            "skipped",
            "no GPU: the problem's check_implementation() needs a GPU",
        ),
        (
            "check_implementation raises on the output: the version's failure",
            "outslot",
            "reference.py",
            check,
            "def check_implementation(data, output):\n    return output.no_such_attribute",
            "fail",
            "",
        ),
        (
            "the version asks for CUDA",
            "outslot",
            "versions/v001-fills-output.py",
            "    A, B, C = data\n",
            "    A, B, C = data\n    import torch\n    torch.cuda.synchronize()\n",
            "skipped",
            "no GPU: the version asked for one (",
        ),
        (
            "the version raises an exception named as rung's own: still its failure",
            "outslot",
            "versions/v001-fills-output.py",
            "    A, B, C = data\n",
            "    A, B, C = data\n    class ProblemCode(Exception):\n        pass\n    raise ProblemCode(\"the problem's generate_input() failed (no)\")\n",
            "fail",
            "which the judge's process drawing the same test did not",
        ),
        (
            "KernelBench get_inputs() raises",
            kernelbench,
            "19_Linear_ReLU.py",
            "def get_inputs():\n",
            "def get_inputs():\n    raise RuntimeError(\"inputs\")\n",
            "error",
            "the problem's get_inputs() failed (RuntimeError: inputs): no verdict on the version",
        ),
        (
            "KernelBench Model raises",
            kernelbench,
            "19_Linear_ReLU.py",
            "        return torch.relu(self.linear(x))\n",
            "        raise ZeroDivisionError(\"model\")\n",
            "error",
            "the problem's Model failed (ZeroDivisionError: model): no verdict on the version",
        ),
    ];
    for (i, (case, fixture, file, from, to, verdict, said)) in cases.into_iter().enumerate() {
        let ws = if fixture == "outslot" {
            outslot(tmp.path(), &format!("case-{i}"))
        } else {
            let ws = tmp.path().join(format!("case-{i}"));
            copy_dir(Path::new(fixture), &ws);
            ws
        };
        rewrite(&ws.join(file), from, to);
        let run = run_of(&ws);
        assert_eq!(run["verdict"], verdict, "{case}: {run}");
        assert!(run["summary"].as_str().unwrap().contains(said), "{case}: {run}");
    }
}

/// The Python worker's buffers (`rung_host.Guarded`) load and write back through pinned staging
/// buffers in parts, small ones at once: on the CPU, with torch's CUDA parts stood in for
/// (`tests/fixtures/python/guarded_staging.py` says what it checks).
#[test]
fn python_worker_buffers_load_and_write_back_whole() {
    let Some(python) = python_with_torch() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(python)
        .arg(root.join("tests/fixtures/python/guarded_staging.py"))
        .arg(root.join("assets/python"))
        .arg(tmp.path())
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim_end().ends_with("ok"), "{said}");
}
