//! The worker protocol: the committed schema is the one the Rust types generate, every message
//! survives a JSON round trip, and what the Python worker really prints parses as those types
//! and validates against the schema, the zygote's report of a crashed child included.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use rung::dtype::DType;
use rung::model::protocol::*;

mod common;

fn committed() -> serde_json::Value {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schema/worker.schema.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_committed_schema_is_generated_from_the_types() {
    assert_eq!(committed(), schema(), "schema/worker.schema.json is stale: run `rung schema --worker`");
}

fn samples() -> Vec<Message> {
    let tensor = TensorFile { path: "/dev/shm/x.bin".into(), dtype: DType::Bf16, shape: vec![3, 1000] };
    vec![
        Message::Hello(Hello {
            protocol: PROTOCOL,
            worker: WorkerKind::Python,
            pid: 42,
            capabilities: vec![Capability::Call, Capability::Fork, Capability::Cuda],
            gpu: None,
            uuid: None,
            python: Some("3.11.7".into()),
            packages: BTreeMap::from([("torch".into(), "2.11.0".into())]),
            start_seconds: Some(1.5),
            warmed: BTreeMap::from([("triton_key".into(), 0.3)]),
            error: None,
        }),
        Message::Request(Request {
            id: 7,
            op: Op::Launch(Launch {
                cubin: "a.cubin".into(),
                kernel: "k".into(),
                grid: [132, 1, 1],
                block: [256, 1, 1],
                smem: 100_000,
                cluster: Some([2, 1, 1]),
                params: vec![
                    LaunchParam::Buffer { name: "x".into(), path: "/dev/shm/x.bin".into() },
                    LaunchParam::Scalar { name: "eps".into(), ctype: "float".into(), value: 1e-6 },
                ],
                guard_bytes: GUARD_BYTES,
                library: None,
                trace: Some(rung::model::protocol::TraceRequest {
                    capacity: 1 << 20,
                    out: "/dev/shm/trace.bin".into(),
                    regions: 132,
                    markers: None,
                }),
            }),
        }),
        Message::Request(Request {
            id: 71,
            op: Op::Launch(Launch {
                cubin: "v007.cubin".into(),
                kernel: "rung_run".into(),
                grid: [1, 1, 1],
                block: [1, 1, 1],
                smem: 0,
                cluster: None,
                params: vec![LaunchParam::Buffer { name: "y".into(), path: "/dev/shm/y.bin".into() }],
                guard_bytes: GUARD_BYTES,
                library: Some(".rung/dumps/v007/libv007.so".into()),
                trace: None,
            }),
        }),
        Message::Request(Request {
            id: 8,
            op: Op::Call(Call {
                file: "versions/v004.py".into(),
                function: "run".into(),
                mode: CallMode::Cuda,
                args: BTreeMap::from([
                    ("x".into(), Arg::Tensor(tensor.clone())),
                    ("rows".into(), Arg::Value(serde_json::json!(3))),
                ]),
                returns: BTreeMap::new(),
                guard_bytes: 0,
                trace: None,
            }),
        }),
        Message::Request(Request {
            id: 9,
            op: Op::Fork(Fork {
                mode: CallMode::Cuda,
                prewarm: vec![Call {
                    file: "v.py".into(),
                    function: "run".into(),
                    mode: CallMode::Cuda,
                    args: BTreeMap::new(),
                    returns: BTreeMap::new(),
                    guard_bytes: GUARD_BYTES,
                    trace: None,
                }],
                prewarm_seconds: Some(10.0),
                prewarm_arch: Some(90),
                token: None,
            }),
        }),
        Message::Request(Request {
            id: 10,
            op: Op::Problem(Problem {
                format: ProblemFormat::GpuMode,
                problem: "reference.py".into(),
                version: "versions/v001.py".into(),
                args: BTreeMap::from([("size".into(), serde_json::json!(127))]),
                seed: 5,
                seeds: vec![5, 104_734],
                tolerances: BTreeMap::from([("f16".into(), [1e-3, 1e-2])]),
                warmup: false,
                benchmark: false,
                list_kernels: false,
                list_gpu_kernels: true,
                dump: Some("/dev/shm/rung-1-2/judged".into()),
                hints: JudgeHints {
                    output_slots: vec!["data[2]".into()],
                    regenerable: vec!["data[0]".into()],
                    inout_slots: vec![],
                    reads_last: false,
                    sparse: None,
                },
                no_tf32: false,
                sparse_call: false,
            }),
        }),
        // A check's last call: the sparse probe, alone, on a moved draw.
        Message::Request(Request {
            id: 13,
            op: Op::Problem(Problem {
                format: ProblemFormat::KernelBench,
                problem: "99_Mean.py".into(),
                version: "versions/v001.py".into(),
                args: BTreeMap::new(),
                seed: 7,
                seeds: vec![7],
                tolerances: BTreeMap::new(),
                warmup: false,
                benchmark: false,
                list_kernels: false,
                list_gpu_kernels: false,
                dump: Some("/dev/shm/rung-1-2/judged-probe".into()),
                hints: JudgeHints {
                    output_slots: vec![],
                    regenerable: vec!["inputs[0]".into()],
                    inout_slots: vec![],
                    reads_last: false,
                    sparse: Some(SparseProbe { k: 64, factor: 1e3, skip: vec![] }),
                },
                no_tf32: false,
                sparse_call: true,
            }),
        }),
        // The judge's side of that test, in a process that never ran the version.
        Message::Request(Request {
            id: 14,
            op: Op::Judge(Judge {
                format: ProblemFormat::GpuMode,
                problem: "reference.py".into(),
                args: BTreeMap::from([("size".into(), serde_json::json!(127))]),
                seed: 5,
                learn: false,
                observed: vec![serde_json::json!({"seed": 5, "tensors": []})],
                dump: Some("/dev/shm/rung-1-2/judged".into()),
                tolerances: BTreeMap::new(),
                probe: true,
                recheck: false,
                sparse_call: false,
            }),
        }),
        Message::Response(Response {
            id: Some(14),
            ok: true,
            hints: Some(JudgeHints {
                output_slots: vec!["data[2]".into(), "data[3]".into()],
                regenerable: vec![],
                inout_slots: vec!["data[3]".into()],
                reads_last: true,
                sparse: None,
            }),
            redo: vec!["data[1]".into()],
            ..Default::default()
        }),
        Message::Request(Request { id: 11, op: Op::Exit }),
        // The second series of an interleaved comparison, asking for graph replay.
        Message::Request(Request {
            id: 12,
            op: Op::Bench(Bench {
                series: 1,
                samples: 5,
                graph_calls: 100,
                graph_replays: 20,
                flush_ptx: Some(".version 9.0".into()),
                ..Default::default()
            }),
        }),
        Message::Response(Response { id: Some(12), ok: true, graph_ms: vec![0.0041, 0.0040], ..Default::default() }),
        // A GPU MODE version timed on its own inputs; its write-back answers with its own check.
        Message::Request(Request {
            id: 13,
            op: Op::Bench(Bench {
                samples: 10,
                warmup_seconds: 0.3,
                flush_bytes: 1 << 28,
                problem: Some(ProblemBench {
                    format: ProblemFormat::GpuMode,
                    problem: "reference.py".into(),
                    version: "versions/v002-triton.py".into(),
                    reference: false,
                    args: BTreeMap::from([("size".into(), serde_json::json!(4096))]),
                    seed: 7,
                    sets: 3,
                }),
                ..Default::default()
            }),
        }),
        Message::Response(Response {
            id: Some(13),
            ok: true,
            recheck: Some("mismatch at (0, 1)".into()),
            ..Default::default()
        }),
        Message::Response(Response {
            id: Some(8),
            ok: true,
            seconds: Some(0.25),
            guards: vec![GuardBreach { name: "y".into(), before: 0, after: 4, farthest: 4 }],
            pending_ms: Some(101.0),
            kernels: vec![CapturedKernel {
                name: "k".into(),
                hash: "abc".into(),
                compiler: Some("cute-dsl".into()),
                ptx: Some("k.ptx".into()),
                cubin: None,
                grid: None,
                num_warps: Some(4),
            }],
            phases: BTreeMap::from([("cuda_init".into(), 0.3)]),
            ..Default::default()
        }),
        Message::Response(Response {
            id: None,
            ok: false,
            error: Some(WorkerError::new("WorkerDied", "killed by SIGSEGV")),
            ..Default::default()
        }),
    ]
}

#[test]
fn every_message_round_trips_and_validates() {
    let validator = jsonschema::validator_for(&committed()).unwrap();
    for m in samples() {
        let text = serde_json::to_string(&m).unwrap();
        let back: Message = serde_json::from_str(&text).unwrap();
        assert_eq!(back, m, "{text}");
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{text}: {errors:?}");
    }
}

#[test]
fn a_response_with_an_unknown_field_is_refused() {
    let bad = r#"{"id": 1, "ok": true, "secs": 0.1}"#;
    assert!(serde_json::from_str::<Response>(bad).is_err());
}

/// A call of `function` in the workspace's reference.py on the tensor `x`, returning `y`.
fn reference_call(id: u64, function: &str, x: &TensorFile, y: Option<&TensorFile>) -> Request {
    Request {
        id,
        op: Op::Call(Call {
            file: "reference.py".into(),
            function: function.into(),
            mode: CallMode::Reference,
            args: BTreeMap::from([("x".into(), Arg::Tensor(x.clone()))]),
            returns: y.map(|y| BTreeMap::from([("y".into(), y.clone())])).unwrap_or_default(),
            guard_bytes: 0,
            trace: None,
        }),
    }
}

/// The Python worker in Triton's interpreter mode in `dir`, with `env` set: the process, its
/// standard input and its lines out.
fn interpret_worker(
    python: &str,
    dir: &std::path::Path,
    env: &[(&str, &str)],
) -> (std::process::Child, std::process::ChildStdin, std::io::Lines<BufReader<std::process::ChildStdout>>) {
    let mut child = Command::new(python)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/python/rung_worker.py"))
        .arg("--interpret")
        .envs(env.iter().copied())
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, stdin, lines)
}

#[test]
fn the_python_worker_speaks_the_protocol_and_the_zygote_survives_a_crashed_child() {
    let Some(python) = common::python_with_numpy() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(
        dir.join("reference.py"),
        "import os, signal\n\ndef reference(x):\n    return x * 2\n\ndef crash(x):\n    os.kill(os.getpid(), signal.SIGSEGV)\n\ndef leave(x):\n    os._exit(0)\n",
    )
    .unwrap();
    std::fs::write(dir.join("checks.py"), "from rung import rung\n\n@rung(\"positive\")\ndef p(i, o, s):\n    assert (o[\"y\"] > 0).all(), \"not positive\"\n").unwrap();
    let x: Vec<u8> = [1f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join("x.bin"), &x).unwrap();
    let (mut child, mut stdin, mut lines) = interpret_worker(&python, dir, &[]);
    let validator = jsonschema::validator_for(&committed()).unwrap();
    let mut next = |validate: bool| -> serde_json::Value {
        let line = lines.next().unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if validate {
            let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{line}: {errors:?}");
        }
        v
    };
    let hello: Hello = serde_json::from_value(next(true)).unwrap();
    assert_eq!(hello.protocol, PROTOCOL);
    assert!(hello.capabilities.contains(&Capability::Fork));
    let mut send = |req: Request| {
        writeln!(stdin, "{}", serde_json::to_string(&req).unwrap()).unwrap();
        stdin.flush().unwrap();
    };
    let x_file = TensorFile { path: dir.join("x.bin"), dtype: DType::F32, shape: vec![4] };
    let y_file = TensorFile { path: dir.join("y.bin"), dtype: DType::F32, shape: vec![4] };
    // Round 0: a crash; round 1: a clean exit, which the zygote must not report; round 2: the
    // version ends its own process with status 0, reported at once.
    for round in 0..3 {
        send(Request {
            id: 1,
            op: Op::Fork(Fork {
                mode: CallMode::Reference,
                prewarm: vec![],
                prewarm_seconds: None,
                prewarm_arch: None,
                token: Some(format!("token-{round}")),
            }),
        });
        let forked: Response = serde_json::from_value(next(true)).unwrap();
        assert!(forked.ok && forked.pid.is_some(), "{forked:?}");
        // The child's answers carry its fork's token; the zygote's death reports do not.
        assert_eq!(forked.token.as_deref(), Some(format!("token-{round}").as_str()));
        assert!(forked.phases.contains_key("fork"));
        send(reference_call(2, "reference", &x_file, Some(&y_file)));
        let r: Response = serde_json::from_value(next(true)).unwrap();
        assert!(r.ok, "{r:?}");
        let y: Vec<f32> = std::fs::read(dir.join("y.bin"))
            .unwrap()
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(y, vec![2.0, 4.0, 6.0, 8.0]);
        send(Request {
            id: 3,
            op: Op::Checks(Checks {
                file: "checks.py".into(),
                sizes: BTreeMap::new(),
                inputs: BTreeMap::from([("x".into(), x_file.clone())]),
                outputs: BTreeMap::from([("y".into(), y_file.clone())]),
            }),
        });
        let r: Response = serde_json::from_value(next(true)).unwrap();
        assert_eq!(r.rungs.len(), 1);
        assert!(r.rungs[0].ok);
        if round == 2 {
            let t = std::time::Instant::now();
            send(reference_call(7, "leave", &x_file, None));
            let died: Response = serde_json::from_value(next(true)).unwrap();
            let e = died.error.unwrap();
            assert_eq!(e.kind, "WorkerDied");
            assert!(e.message.contains("exited with status 0 before it answered"), "{}", e.message);
            assert!(t.elapsed() < std::time::Duration::from_secs(5), "reported at once, not at a time-out");
        } else if round == 0 {
            // The child dies; the zygote says so, and the next fork works.
            send(reference_call(4, "crash", &x_file, None));
            let died: Response = serde_json::from_value(next(true)).unwrap();
            assert!(!died.ok);
            let e = died.error.unwrap();
            assert_eq!(e.kind, "WorkerDied");
            assert!(e.message.contains("SIGSEGV"), "{}", e.message);
        } else {
            send(Request { id: 5, op: Op::Exit });
            let bye: Response = serde_json::from_value(next(true)).unwrap();
            assert!(bye.ok);
        }
    }
    send(Request { id: 6, op: Op::Exit });
    assert!(child.wait().unwrap().success());
}

/// Under a profiler (RUNG_WORKER_NO_FORK=1) the zygote serves its fork's requests itself, in
/// the process the tool started and attached to, and ends when the child would have.
#[test]
fn an_unforked_zygote_serves_the_check_itself_and_ends_with_it() {
    let Some(python) = common::python_with_numpy() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("reference.py"), "def reference(x):\n    return x * 2\n").unwrap();
    let x: Vec<u8> = [1f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join("x.bin"), &x).unwrap();
    let (mut child, mut stdin, mut lines) = interpret_worker(&python, dir, &[("RUNG_WORKER_NO_FORK", "1")]);
    let _hello = lines.next().unwrap().unwrap();
    let mut next = || -> Response { serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap() };
    let mut send = |req: Request| {
        writeln!(stdin, "{}", serde_json::to_string(&req).unwrap()).unwrap();
        stdin.flush().unwrap();
    };
    let fork = Fork {
        mode: CallMode::Reference,
        prewarm: vec![],
        prewarm_seconds: None,
        prewarm_arch: None,
        token: Some("t".into()),
    };
    send(Request { id: 1, op: Op::Fork(fork) });
    let forked = next();
    assert!(forked.ok, "{forked:?}");
    assert_eq!(forked.pid, Some(child.id()), "the zygote is the child");
    let x_file = TensorFile { path: dir.join("x.bin"), dtype: DType::F32, shape: vec![2] };
    let y_file = TensorFile { path: dir.join("y.bin"), dtype: DType::F32, shape: vec![2] };
    send(reference_call(2, "reference", &x_file, Some(&y_file)));
    let r = next();
    assert!(r.ok && r.token.as_deref() == Some("t"), "{r:?}");
    let y: Vec<u8> = [2f32, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(std::fs::read(dir.join("y.bin")).unwrap(), y);
    send(Request { id: 3, op: Op::Exit });
    assert!(next().ok);
    assert!(child.wait().unwrap().success(), "the child's exit is the zygote's");
}

/// The zygote's compile-only prewarm (what a GPU check of a new Triton source starts with): the
/// prewarm children call run() with fake tensors and compile for the named compute capability
/// into the workspace's Triton cache, without opening a GPU, while the check's child is forked at
/// once; the fork's answer waits for them and reports the prewarm's time. This machine has no GPU,
/// so the test also shows that nothing in that path needs one.
#[test]
fn the_compile_only_prewarm_fills_the_triton_cache_without_a_gpu() {
    let Some(_) = common::real_nvcc() else { return };
    let tc = common::doctor_toolchain();
    let python = tc["python"]["path"].as_str().unwrap().to_string();
    let ptxas = tc["ptxas"]["path"].as_str().unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/demo/versions/v004-triton.py");
    std::fs::copy(demo, dir.join("v004-triton.py")).unwrap();
    let cache = dir.join("triton-cache");
    // The worker's folder as rung lays it out: every Python file beside the worker.
    let data = dir.join("data");
    rung::assets::write_python(&data).unwrap();
    let mut child = Command::new(&python)
        .arg(data.join("rung_worker.py"))
        .current_dir(dir)
        .env("TRITON_CACHE_DIR", &cache)
        .env("TRITON_PTXAS_PATH", &ptxas)
        .env("TRITON_PTXAS_BLACKWELL_PATH", &ptxas)
        .env("CUDA_VISIBLE_DEVICES", "")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let hello: Hello = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(hello.capabilities.contains(&Capability::Fork));
    // The hash of Triton's installation, which every compile and cache lookup asks for, is
    // computed once in the zygote, so neither the prewarm's children nor the check's compute it.
    assert!(hello.warmed.contains_key("triton_key"), "{:?}", hello.warmed);
    // On a thread started as Triton is imported, beside torch's import: the zygote waited for it
    // only as long as it outlasted the imports after Triton's.
    let wait = hello.warmed.get("triton_key wait").copied();
    assert!(wait.is_some_and(|w| w <= hello.warmed["triton_key"] + 0.01), "{:?}", hello.warmed);
    // Two test sizes of the demo, as the run rung builds them (the files' contents do not matter).
    let call = |rows: i64, cols: i64| {
        let t = |name: &str, shape: Vec<i64>| {
            (
                name.to_string(),
                Arg::Tensor(TensorFile { path: dir.join(format!("{name}.bin")), dtype: DType::F32, shape }),
            )
        };
        Call {
            file: "v004-triton.py".into(),
            function: "run".into(),
            mode: CallMode::Cuda,
            args: BTreeMap::from([
                t("x", vec![rows, cols]),
                t("w", vec![cols]),
                t("y", vec![rows, cols]),
                ("eps".to_string(), Arg::Value(serde_json::json!(1e-6))),
                ("rows".to_string(), Arg::Value(serde_json::json!(rows))),
                ("cols".to_string(), Arg::Value(serde_json::json!(cols))),
            ]),
            returns: BTreeMap::new(),
            guard_bytes: 0,
            trace: None,
        }
    };
    let fork = Fork {
        mode: CallMode::Reference,
        prewarm: vec![call(3, 1000), call(256, 4096)],
        prewarm_seconds: Some(120.0),
        prewarm_arch: Some(90),
        token: None,
    };
    let req = Request { id: 1, op: Op::Fork(fork) };
    writeln!(stdin, "{}", serde_json::to_string(&req).unwrap()).unwrap();
    stdin.flush().unwrap();
    let forked: Response = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(forked.ok, "{forked:?}");
    assert!(forked.phases.get("prewarm").is_some_and(|s| *s > 0.0), "{:?}", forked.phases);
    assert!(!forked.phases.contains_key("prewarm_killed"), "{:?}", forked.phases);
    let cubins: Vec<PathBuf> =
        walk(&cache).into_iter().filter(|p| p.extension().is_some_and(|e| e == "cubin")).collect();
    assert!(!cubins.is_empty(), "no cubin in {}", cache.display());
    // Compiled for the capability asked for, by Triton's own compile (its metadata says so).
    let meta: Vec<String> = walk(&cache)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json") && !p.to_string_lossy().contains("__grp__"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert!(meta.iter().any(|m| m.contains("\"arch\": 90") || m.contains("\"arch\":90")), "{meta:?}");
    writeln!(stdin, "{}", serde_json::to_string(&Request { id: 2, op: Op::Exit }).unwrap()).unwrap();
    stdin.flush().unwrap();
    let _ = lines.next();
    writeln!(stdin, "{}", serde_json::to_string(&Request { id: 3, op: Op::Exit }).unwrap()).unwrap();
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

/// A workspace holding `f.py` (`source`) and the workers for it; the folder lives as long as the
/// first value.
fn workers_over(python: String, source: &str) -> (tempfile::TempDir, PathBuf, rung::runners::Runners) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("f.py"), source).unwrap();
    let runners = rung::runners::Runners::new(&root, &root.join(".rung"), Some(python.into())).unwrap();
    (tmp, root, runners)
}

/// A call of `f.py`'s `function(n=1)` in Triton's interpreter mode.
fn call_of(root: &std::path::Path, function: &str) -> Op {
    Op::Call(Call {
        file: root.join("f.py"),
        function: function.into(),
        mode: CallMode::Interpret,
        args: BTreeMap::from([("n".to_string(), Arg::Value(serde_json::json!(1)))]),
        returns: BTreeMap::new(),
        guard_bytes: 0,
        trace: None,
    })
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Both workers time a call from CUPTI's records the same way: the Python worker's `_Tracer`
/// (ctypes) and `rung::cupti::call_ms` agree on busy time and span for the same records,
/// overlaps, gaps, copies and rung's flush kernels included.
#[test]
fn both_workers_turn_cupti_records_into_the_same_busy_time_and_span() {
    let Some(python) = common::python_with_numpy() else { return };
    let cases: Vec<Vec<(u64, u64, Option<&str>)>> = vec![
        vec![
            (0, 400_000, Some("rung_flush")),
            (400_000, 400_300, Some("rung_flush_evict_first")),
            (400_500, 410_000, Some("rung_discard")),
            (411_000, 661_000, Some("k")),
        ],
        vec![(0, 10_000, Some("gemm")), (60_000, 65_000, Some("relu")), (2_000, 4_000, None)],
        vec![(100, 900, Some("a")), (200, 300, Some("b")), (850, 2_000, None), (5_000, 5_001, Some("c"))],
        vec![(0, 400, Some("rung_flush")), (400, 800, Some("rung_flush_evict_first"))],
        // The evict-first read alone: left out by both, or the two disagree.
        vec![(0, 400, Some("rung_flush_evict_first")), (500, 600, Some("k"))],
    ];
    let script = format!(
        "import json, sys\nsys.path.insert(0, {:?})\nimport rung_bench as w\ncases = json.loads(sys.argv[1])\n\
         print(json.dumps([w._Tracer.call_ms([(s, e, n.encode() if n is not None else None) for s, e, n in c]) for c in cases]))",
        concat!(env!("CARGO_MANIFEST_DIR"), "/assets/python")
    );
    let out = Command::new(&python).args(["-c", &script, &serde_json::to_string(&cases).unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: Vec<Option<(f64, f64)>> = serde_json::from_slice(&out.stdout).unwrap();
    for (case, py) in cases.iter().zip(&got) {
        let work: Vec<rung::cupti::Work> = case
            .iter()
            .map(|&(start, end, k)| rung::cupti::Work {
                start,
                end,
                flush: k.is_some_and(|k| rung::cupti::FLUSH_KERNELS.contains(&k)),
            })
            .collect();
        let rust = rung::cupti::call_ms(&work);
        assert_eq!(rust.is_some(), py.is_some(), "{case:?}");
        if let (Some(r), Some(p)) = (rust, py) {
            assert!((r.0 - p.0).abs() < 1e-12 && (r.1 - p.1).abs() < 1e-12, "{case:?}: {r:?} vs {p:?}");
        }
    }
    assert_eq!(rung::cupti::call_ms(&[]), None);
    // The third case: 100..2000 busy once (three overlapping records), then 1 ns more.
    assert_eq!(got[2], Some((1901.0 / 1e6, 4901.0 / 1e6)));
}

/// A child forked ahead (between checks under `rung watch`) is the next fork's child when the
/// mode matches and nothing is to be prewarmed: its only phase is the time still waited for it.
/// Otherwise, and for any other request, its answer is read first and the channel stays in line.
#[test]
fn a_child_forked_ahead_is_taken_by_the_next_fork_of_its_mode() {
    let Some(python) = common::python_with_numpy() else { return };
    let (_tmp, root, mut runners) = workers_over(python, "import os\n\ndef pid(n):\n    print(os.getpid())\n");
    let call = || call_of(&root, "pid");
    let limit = std::time::Duration::from_secs(60);
    let alive = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "));
    let z = runners.zygote(true).unwrap();
    // Ahead, then a fork of its mode: the same child, its start not counted again.
    z.fork_ahead(CallMode::Interpret).unwrap();
    assert!(!z.has_child(), "the fork's answer is read by the next request, not by fork_ahead");
    let taken = z.fork(CallMode::Interpret, limit).unwrap();
    assert!(taken.ok, "{taken:?}");
    assert_eq!(taken.phases.keys().collect::<Vec<_>>(), ["child_ahead"], "{:?}", taken.phases);
    let first = taken.pid.unwrap();
    assert!(z.call(call(), limit).unwrap().ok, "the child forked ahead answers with its token");
    // With a child running, fork_ahead leaves it: the next fork is a fork of its own.
    z.fork_ahead(CallMode::Interpret).unwrap();
    assert!(z.has_child());
    let fresh = z.fork(CallMode::Interpret, limit).unwrap();
    assert!(fresh.ok && fresh.phases.contains_key("fork"), "{fresh:?}");
    let second = fresh.pid.unwrap();
    assert_ne!(first, second);
    z.end_child();
    // Ahead in one mode, asked for another: that child ends and a new one is forked.
    z.fork_ahead(CallMode::Interpret).unwrap();
    let other = z.fork(CallMode::Reference, limit).unwrap();
    assert!(other.ok && other.phases.contains_key("fork"), "{other:?}");
    // Ahead, then a call: the call goes to the child forked ahead.
    z.end_child();
    z.fork_ahead(CallMode::Interpret).unwrap();
    let answer = z.call(call(), limit).unwrap();
    assert!(answer.ok, "{answer:?}");
    assert!(z.has_child());
    let third = z.fork(CallMode::Interpret, limit).unwrap().pid.unwrap();
    // Ahead, then ended: nothing is left running.
    z.end_child();
    z.fork_ahead(CallMode::Interpret).unwrap();
    z.end_child();
    assert!(!z.has_child());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while [first, second, third].iter().any(|&p| alive(p)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for p in [first, second, third] {
        assert!(!alive(p), "child {p} is still running");
    }
    let last = z.fork(CallMode::Interpret, limit).unwrap();
    assert!(last.ok, "the zygote still forks");
    z.end_child();
    // A child forked ahead that is killed while it waits: the next fork reads the zygote's word
    // of it and forks a new one.
    z.fork_ahead(CallMode::Interpret).unwrap();
    let zygote = z.hello().pid;
    let children = |pid: u32| -> Vec<u32> {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|c| c.parse().ok())
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let waiting = loop {
        // Not the child just ended, which may not have gone yet.
        if let Some(&c) = children(zygote).iter().find(|&&c| Some(c) != last.pid) {
            break c;
        }
        assert!(std::time::Instant::now() < deadline, "the zygote forked no child ahead");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: kill(2) on the child this test's zygote forked.
    unsafe { libc::kill(waiting as i32, libc::SIGKILL) };
    while alive(waiting) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let again = z.fork(CallMode::Interpret, limit).unwrap();
    assert!(again.ok && again.phases.contains_key("fork") && again.pid != Some(waiting), "{again:?}");
    let answer = z.call(call(), limit).unwrap();
    assert!(answer.ok, "the new child answers: {answer:?}");
}

/// Which threads a version's call left running (`late-work`): its own thread, a Timer, and a
/// worker started before the call that took the call's work from a queue are; an idle pool's
/// workers, a thread that has ended and one that waits where it waited before are not; a
/// pool's worker still busy with what the call gave it is.
#[test]
fn the_threads_a_call_left_running_are_named_and_idle_ones_are_not() {
    let Some(python) = common::python_with_numpy() else { return };
    let script = format!(
        r#"import json, queue, sys, threading, time, concurrent.futures as cf
sys.path.insert(0, {:?})
import rung_problem as rp
stop = threading.Event()
jobs = queue.Queue()
def serve():
    while True:
        jobs.get()()
def work():
    stop.wait(5)
def later():
    stop.wait(5)
old = threading.Thread(target=stop.wait, args=(5,), name="from-before", daemon=True); old.start()
server = threading.Thread(target=serve, name="server", daemon=True); server.start()
time.sleep(0.05)
before = rp.threads_now()
mine = threading.Thread(target=later, name="mine"); mine.start()
pool = cf.ThreadPoolExecutor(2); pool.submit(lambda: 1).result()
ended = threading.Thread(target=lambda: None); ended.start(); ended.join()
timer = threading.Timer(5, print); timer.name = "timer"; timer.start()
jobs.put(work)
time.sleep(0.05)
out = {{"left": rp.late_threads(before)}}
# Woken by a put and not yet run (no pause, no settle): counted all the same.
jobs2 = queue.Queue()
def serve2():
    while True:
        jobs2.get()()
server2 = threading.Thread(target=serve2, name="server2", daemon=True); server2.start()
time.sleep(0.05)
before2 = rp.threads_now()
jobs2.put(work)
out["woken"] = [t for t in rp.late_threads(before2, 0) if t.startswith("server2")]
pool.submit(stop.wait, 5); time.sleep(0.05)
out["busy"] = rp.late_threads(before)
stop.set(); timer.cancel(); pool.shutdown()
print(json.dumps(out))
"#,
        concat!(env!("CARGO_MANIFEST_DIR"), "/assets/python")
    );
    let out = Command::new(&python).args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let left: Vec<&str> = got["left"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(left.len(), 3, "{left:?}");
    assert_eq!(left[0], "mine at <string>:12 in later()", "{left:?}");
    assert_eq!(
        left[1], "server at <string>:10 in work() (started before the call, and no longer where it waited)",
        "{left:?}"
    );
    assert!(left[2].starts_with("timer at threading.py:"), "{left:?}");
    let woken: Vec<&str> = got["woken"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(woken, vec!["server2 at <string>:28 in serve2() (started before the call, and woken by it)"]);
    let busy: Vec<&str> = got["busy"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(busy.len(), 5, "{busy:?}");
    assert!(busy.iter().any(|t| t.starts_with("ThreadPoolExecutor-")), "{busy:?}");
}

/// A request sent ahead (`Zygote::send`) is answered in order: work in between does not wait
/// for it, its answer is read by `receive`, and a call made before that reads it first (the
/// channel never gives one request another's answer).
#[test]
fn a_request_sent_ahead_is_answered_in_order() {
    let Some(python) = common::python_with_numpy() else { return };
    let (_tmp, root, mut runners) =
        workers_over(python, "import time\n\ndef slow(n):\n    time.sleep(0.5)\n\ndef quick(n):\n    pass\n");
    let call = |function: &str| call_of(&root, function);
    let limit = std::time::Duration::from_secs(60);
    let z = runners.zygote(true).unwrap();
    assert!(z.fork(CallMode::Interpret, limit).unwrap().ok);
    assert!(matches!(z.receive(limit), Err(rung::runners::Failure::Protocol(_))), "nothing was sent");
    // Sent, then received: the time in between is the caller's.
    let t = std::time::Instant::now();
    z.send(call("slow")).unwrap();
    assert!(t.elapsed().as_secs_f64() < 0.4, "send waited for the answer");
    assert!(z.receive(limit).unwrap().ok);
    assert!(t.elapsed().as_secs_f64() >= 0.5);
    // Sent and never received: the next call reads it first, then gets its own answer.
    z.send(call("slow")).unwrap();
    let quick = z.call(call("quick"), limit).unwrap();
    assert!(quick.ok, "{quick:?}");
    assert!(matches!(z.receive(limit), Err(rung::runners::Failure::Protocol(_))), "drained");
    // And the child still answers, and ends cleanly with a request pending.
    z.send(call("quick")).unwrap();
    z.end_child();
    assert!(!z.has_child());
}

/// The bench's fresh-set reference runs ahead of need on a thread, in a reference zygote of its
/// own apart from the check's workers: it answers there, and abandoning it (the check ended
/// without asking) kills its child rather than waiting for it.
#[test]
fn a_detached_reference_runs_apart_and_is_killed_when_abandoned() {
    let Some(python) = common::python_with_numpy() else { return };
    let source = "import os, time\n\ndef quick(n):\n    print(os.getpid())\n\ndef slow(n):\n    time.sleep(120)\n";
    let (_tmp, root, runners) = workers_over(python, source);
    let call = |function: &str| Call {
        file: root.join("f.py"),
        function: function.into(),
        mode: CallMode::Reference,
        args: BTreeMap::from([("n".to_string(), Arg::Value(serde_json::json!(1)))]),
        returns: BTreeMap::new(),
        guard_bytes: 0,
        trace: None,
    };
    let limit = std::time::Duration::from_secs(200);
    let stop = || std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let live = rung::runners::Live::default();
    let run = runners.detached_reference(live.clone(), stop()).unwrap();
    let quick = call("quick");
    let answer = std::thread::spawn(move || run(quick, limit)).join().unwrap().unwrap();
    assert!(answer.ok, "{answer:?}");
    assert!(live.lock().unwrap().is_empty(), "its child ended with the call");

    let (live, flag) = (rung::runners::Live::default(), stop());
    let run = runners.detached_reference(live.clone(), flag.clone()).unwrap();
    let slow = call("slow");
    let t0 = std::time::Instant::now();
    let thread = std::thread::spawn(move || run(slow, limit));
    while live.lock().unwrap().is_empty() {
        assert!(t0.elapsed().as_secs() < 60, "the child never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    flag.store(true, std::sync::atomic::Ordering::SeqCst);
    rung::runners::kill_live(&live);
    let ended = thread.join().unwrap();
    assert!(ended.is_err() || ended.as_ref().is_ok_and(|r| !r.ok), "{ended:?}");
    assert!(t0.elapsed().as_secs() < 60, "abandoning it waited for the call");
}

/// A zygote started ahead (as a check begins, while its versions build) is started on a thread
/// of its own, and the first request for its kind takes it rather than starting another.
#[test]
fn a_zygote_started_ahead_is_the_one_the_first_request_takes() {
    let Some(python) = common::python_with_numpy() else { return };
    let (_tmp, root, mut runners) = workers_over(python, "def f(n):\n    return None\n");
    let t0 = std::time::Instant::now();
    runners.start_ahead(true, false);
    runners.start_ahead(true, false);
    assert!(t0.elapsed().as_secs_f64() < 0.5, "start_ahead waited for the zygote's imports");
    assert!(runners.zygote_starts.is_empty(), "nothing was asked for yet");
    let z = runners.zygote(true).unwrap();
    let pid = z.hello().pid;
    let limit = std::time::Duration::from_secs(60);
    assert!(z.fork(CallMode::Interpret, limit).unwrap().ok);
    assert!(z.call(call_of(&root, "f"), limit).unwrap().ok);
    assert_eq!(runners.zygote(true).unwrap().hello().pid, pid, "the same zygote serves the next request");
    assert_eq!(runners.zygote_starts.len(), 1, "one zygote started: {:?}", runners.zygote_starts);
}
