//! The run and check rungs without a GPU: Triton versions in Triton's interpreter against the
//! Python reference, and the faults that need no GPU, each with its exact verdict.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

fn rung(dir: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_rung")).args(args).current_dir(dir).output().unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn workspace(template: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let out =
        Command::new(env!("CARGO_BIN_EXE_rung")).args(["new", ws.to_str().unwrap(), "-t", template]).output().unwrap();
    assert!(out.status.success());
    (tmp, ws)
}

/// The vector-add template's Triton version with its launch line replaced by `with`.
fn triton_launch_replaced(ws: &Path, with: &str) -> String {
    let src = std::fs::read_to_string(ws.join("versions/v003-triton.py")).unwrap();
    let launch = "    vector_add_kernel[(triton.cdiv(n, BLOCK),)](a, b, out, n, BLOCK=BLOCK)\n";
    assert!(src.contains(launch), "the template's launch line changed: update this test");
    src.replace(launch, with)
}

/// The stage (run or check) of a version, by name.
fn stage<'a>(rec: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    rec["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == name)
        .unwrap_or_else(|| panic!("no {name} stage in {rec}"))
}

#[test]
fn triton_versions_are_checked_in_the_interpreter_and_cuda_ones_say_no_gpu() {
    if !common::toolchain_here() {
        return;
    }
    let (_tmp, ws) = workspace("rmsnorm");
    let v = rung(&ws, &["check", "--json", "--seed", "11", "v004", "v001"]);
    let triton = &v["versions"][0];
    assert_eq!(stage(triton, "run")["verdict"], "pass", "{triton}");
    assert_eq!(stage(triton, "run")["detail"]["mode"], "triton-interpreter");
    // The check waited for the zygote it started as it began: its start is in the run's phases,
    // step by step as the zygote timed it, so a slow start says where its time went.
    let phases = stage(triton, "run")["detail"]["phases"].as_object().unwrap();
    for key in ["zygote_start", "zygote_started", "zygote: import numpy", "zygote: import triton"] {
        assert!(phases.contains_key(key), "no `{key}` in {phases:?}");
    }
    let check = stage(triton, "check");
    assert_eq!(check["verdict"], "pass", "{check}");
    let results = check["detail"]["results"].as_array().unwrap();
    assert_eq!(results.len(), 5, "one per test size");
    assert!(results.iter().all(|r| r["comparison"]["max_abs_err"].as_f64().unwrap() < 1e-5));
    let cuda = &v["versions"][1];
    assert_eq!(stage(cuda, "run")["verdict"], "skipped");
    assert!(stage(cuda, "run")["summary"].as_str().unwrap().starts_with("no GPU"));
    // The reference is cached by (reference, seed, size): a second check reuses it.
    let cached = std::fs::read_dir(ws.join(".rung/cache/reference")).unwrap().count();
    assert_eq!(cached, 5);
    rung(&ws, &["check", "--json", "--seed", "11", "v004"]);
    assert_eq!(std::fs::read_dir(ws.join(".rung/cache/reference")).unwrap().count(), 5);
}

#[test]
fn an_edited_input_in_rung_toml_is_not_judged_against_the_old_inputs_reference() {
    if !common::toolchain_here() {
        eprintln!("skipped: no toolchain here (rung setup)");
        return;
    }
    let (_tmp, ws) = workspace("vector-add");
    let first = rung(&ws, &["check", "--json", "--no-bench", "--seed", "7", "v003"]);
    assert_eq!(stage(&first["versions"][0], "check")["verdict"], "pass", "{first}");
    // The same seed and sizes, other inputs: the cached reference outputs no longer apply.
    let toml = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    let edited = toml.replace("low = -2.0, high = 2.0", "low = 5.0, high = 9.0");
    assert_ne!(edited, toml, "the template's `b` init changed: update this test");
    std::fs::write(ws.join("rung.toml"), edited).unwrap();
    let second = rung(&ws, &["check", "--json", "--no-bench", "--seed", "7", "v003"]);
    let check = stage(&second["versions"][0], "check");
    assert_eq!(check["verdict"], "pass", "a correct version judged against stale reference outputs: {check}");
    assert_eq!(std::fs::read_dir(ws.join(".rung/cache/reference")).unwrap().count(), 6, "3 sizes, twice");
}

/// A version that writes its own (wrong) answer into rung's cached reference outputs while it
/// runs is judged against the reference, not against what it wrote: in the check where it did
/// it, and in the next one.
#[test]
fn a_version_that_overwrites_the_cached_reference_is_not_judged_against_it() {
    if !common::toolchain_here() {
        eprintln!("skipped: no toolchain here (rung setup)");
        return;
    }
    let (_tmp, ws) = workspace("vector-add");
    let honest = rung(&ws, &["check", "--json", "--no-bench", "--seed", "7", "v003"]);
    assert_eq!(stage(&honest["versions"][0], "check")["verdict"], "pass", "{honest}");
    let src = std::fs::read_to_string(ws.join("versions/v003-triton.py")).unwrap();
    let launch = "    vector_add_kernel[(triton.cdiv(n, BLOCK),)](a, b, out, n, BLOCK=BLOCK)\n";
    assert!(src.contains(launch), "the template's launch line changed: update this test");
    let cheat = src.replace(
        launch,
        "    import glob, os, numpy as np\n\
         \x20   out.arr[...] = 1.0\n\
         \x20   for f in glob.glob('.rung/cache/reference/*/out.bin'):\n\
         \x20       if os.path.getsize(f) == out.arr.nbytes:\n\
         \x20           open(f, 'wb').write(np.asarray(out.arr, dtype=np.float32).tobytes())\n",
    );
    std::fs::write(ws.join("versions/v004-cheat.py"), cheat).unwrap();
    for round in ["while it writes", "the next check"] {
        let v = rung(&ws, &["check", "--json", "--no-bench", "--seed", "7", "v004"]);
        let check = stage(&v["versions"][0], "check");
        assert_eq!(check["verdict"], "fail", "{round}: judged against its own answer: {check}");
    }
    // The honest version still passes (the cache was rebuilt, not left as the cheat wrote it).
    let again = rung(&ws, &["check", "--json", "--no-bench", "--seed", "7", "v003"]);
    assert_eq!(stage(&again["versions"][0], "check")["verdict"], "pass", "{again}");
}

/// A version that patches its own process so the reference agrees with it (the worker's module
/// loader, or the reference's module if it is already loaded) is still judged against the real
/// reference: the reference runs in a process no version ran in.
#[test]
fn a_version_that_patches_its_process_cannot_change_the_reference() {
    if !common::toolchain_here() {
        eprintln!("skipped: no toolchain here (rung setup)");
        return;
    }
    let (_tmp, ws) = workspace("vector-add");
    // out = a (wrong, but it follows the inputs), and a reference that says the same.
    let cheat = triton_launch_replaced(
        &ws,
        "    import sys, numpy as np\n\
         \x20   np.asarray(out.arr)[...] = np.asarray(a.arr)\n\
         \x20   fake = lambda a, b, **_: np.array(a, dtype=np.float32)\n\
         \x20   main = sys.modules['__main__']\n\
         \x20   load = main._load\n\
         \x20   class Fake:\n\
         \x20       reference = staticmethod(fake)\n\
         \x20   if not hasattr(main, 'cheated'):\n\
         \x20       main._load = lambda f: Fake if str(f).endswith('reference.py') else load(f)\n\
         \x20       main.cheated = True\n\
         \x20   for m in list(sys.modules.values()):\n\
         \x20       if callable(getattr(m, 'reference', None)):\n\
         \x20           m.reference = fake\n",
    );
    std::fs::write(ws.join("versions/v004-cheat.py"), cheat).unwrap();
    // Alone, so the reference is run in this check (not read from the cache an honest check
    // left), once per test size.
    let v = rung(&ws, &["check", "--json", "--no-bench", "v004"]);
    assert_eq!(stage(&v["versions"][0], "run")["verdict"], "pass", "the cheat runs: {v}");
    let check = stage(&v["versions"][0], "check");
    assert_eq!(check["verdict"], "fail", "judged against the reference it patched: {check}");
    assert!(check["summary"].as_str().unwrap().contains("differ"), "{check}");
    let v = rung(&ws, &["check", "--json", "--no-bench", "v003"]);
    assert_eq!(stage(&v["versions"][0], "check")["verdict"], "pass", "the honest version: {v}");
}

#[test]
fn a_version_that_leaves_its_work_to_a_thread_is_late_work_at_its_line() {
    if !common::toolchain_here() {
        eprintln!("skipped: no toolchain here (rung setup)");
        return;
    }
    let (_tmp, ws) = workspace("vector-add");
    // run() returns at once; a thread launches the kernel a little later. Its answer may well be
    // written by the time rung reads it: the verdict must not depend on that race.
    let late = triton_launch_replaced(
        &ws,
        "    import threading, time\n\
         \x20   def later():\n\
         \x20       time.sleep(0.3)\n\
         \x20       vector_add_kernel[(triton.cdiv(n, BLOCK),)](a, b, out, n, BLOCK=BLOCK)\n\
         \x20   threading.Thread(target=later, name='helper').start()\n",
    );
    std::fs::write(ws.join("versions/v004-late.py"), &late).unwrap();
    let line = late.lines().position(|l| l.contains("time.sleep(0.3)")).unwrap() + 1;
    let v = rung(&ws, &["check", "--json", "--no-bench", "v004", "v003"]);
    let run = stage(&v["versions"][0], "run");
    assert_eq!((run["verdict"].as_str(), run["reason"].as_str()), (Some("fail"), Some("late-work")), "{run}");
    let summary = run["summary"].as_str().unwrap();
    assert!(summary.contains(&format!("helper at v004-late.py:{line} in later()")), "{summary}");
    // The honest version beside it, in the same worker, passes.
    assert_eq!(stage(&v["versions"][1], "check")["verdict"], "pass", "{v}");
}

/// The versions of one check run on the same input sets, drawn once and kept in rung's memory
/// for the next version: one that changes its inputs fails `input-mutated`, and the version
/// after it still gets the inputs as drawn (and passes), whichever runs first.
#[test]
fn versions_of_one_check_share_its_drawn_inputs_and_a_mutating_one_spoils_nothing() {
    if !common::toolchain_here() {
        eprintln!("skipped: no toolchain here (rung setup)");
        return;
    }
    let (_tmp, ws) = workspace("vector-add");
    let mutates = triton_launch_replaced(
        &ws,
        "    vector_add_kernel[(triton.cdiv(n, BLOCK),)](a, b, out, n, BLOCK=BLOCK)\n\
         \x20   a.arr[...] = 0.0\n",
    );
    std::fs::write(ws.join("versions/v004-mutates.py"), mutates).unwrap();
    let honest = std::fs::read_to_string(ws.join("versions/v003-triton.py")).unwrap();
    std::fs::write(ws.join("versions/v005-honest.py"), honest).unwrap();
    let v = rung(&ws, &["check", "--json", "--no-bench", "--seed", "5", "v004", "v005", "v003"]);
    let run = stage(&v["versions"][0], "run");
    assert_eq!((run["verdict"].as_str(), run["reason"].as_str()), (Some("fail"), Some("input-mutated")), "{run}");
    for k in [1, 2] {
        assert_eq!(stage(&v["versions"][k], "check")["verdict"], "pass", "{}", v["versions"][k]);
    }
    // One version drew the sets; the others found them kept.
    let drew: Vec<f64> = (0..3)
        .map(|k| stage(&v["versions"][k], "run")["detail"]["phases"]["inputs_drawn"].as_f64().unwrap_or(0.0))
        .collect();
    assert_eq!(drew.iter().filter(|s| **s > 0.0).count(), 1, "inputs drawn per version: {drew:?}");
}

/// A vector-add Triton version whose kernel body line `BODY` replaces the store.
#[test]
fn user_rungs_from_checks_py_are_named_results() {
    if !common::toolchain_here() {
        return;
    }
    let (_tmp, ws) = workspace("rmsnorm");
    let v = rung(&ws, &["check", "--json", "v004"]);
    let check = stage(&v["versions"][0], "check");
    assert_eq!(check["verdict"], "pass", "{check}");
    let rungs = check["detail"]["user_rungs"].as_array().unwrap();
    assert_eq!(rungs.len(), 5, "the demo's one rung at each of the five test sizes");
    assert!(rungs.iter().all(|r| r["name"] == "rows are unit RMS after dividing by w" && r["pass"] == true));
    assert!(check["summary"].as_str().unwrap().ends_with("user rungs passed: rows are unit RMS after dividing by w"));

    // A rung that fails names itself, the size and the user's message.
    let extra = "\n\n@rung(\"every output is below 3\")\ndef small(inputs, outputs, sizes):\n    assert abs(outputs['y']).max() < 3, 'an output reached %s' % abs(outputs['y']).max()\n";
    let checks = std::fs::read_to_string(ws.join("checks.py")).unwrap();
    std::fs::write(ws.join("checks.py"), format!("{checks}{extra}")).unwrap();
    let v = rung(&ws, &["check", "--json", "v004"]);
    let check = stage(&v["versions"][0], "check");
    assert_eq!(check["verdict"], "fail");
    let summary = check["summary"].as_str().unwrap();
    assert!(summary.starts_with("user rung \"every output is below 3\" at cols="), "{summary}");
    assert!(summary.contains(": an output reached "), "{summary}");

    // A checks.py that does not load says so.
    std::fs::write(ws.join("checks.py"), "from rung import rung\n\ndef broken(:\n").unwrap();
    let v = rung(&ws, &["check", "--json", "v004"]);
    let summary = stage(&v["versions"][0], "check")["summary"].as_str().unwrap().to_string();
    assert!(summary.starts_with("checks.py does not load: SyntaxError"), "{summary}");
}

const PTX_V006: &str = include_str!("fixtures/ptx/v006-ptx.ptx");

#[test]
fn a_ptx_version_binds_its_declared_signature_builds_and_says_no_gpu() {
    if !common::toolchain_here() {
        return;
    }
    let (_tmp, ws) = workspace("rmsnorm");
    std::fs::write(ws.join("versions/v006-ptx.ptx"), PTX_V006).unwrap();
    let v = rung(&ws, &["check", "--json", "v006"]);
    let rec = &v["versions"][0];
    let prep = stage(rec, "prepare");
    assert_eq!(prep["verdict"], "pass", "{prep}");
    assert_eq!(prep["detail"]["entry"], "rmsnorm");
    let bound: Vec<&str> =
        prep["detail"]["bindings"].as_array().unwrap().iter().map(|b| b["param"].as_str().unwrap()).collect();
    assert_eq!(bound, ["x", "w", "y", "eps", "rows", "cols"], "{prep}");
    assert_eq!(prep["detail"]["launches"][0]["launch"]["block"][0], 1024, "the header's block=1024");
    assert_eq!(stage(rec, "build")["verdict"], "pass", "{}", stage(rec, "build"));
    let run = stage(rec, "run");
    assert_eq!(run["verdict"], "skipped");
    assert!(run["summary"].as_str().unwrap().starts_with("no GPU"), "{run}");
}

#[test]
fn a_ptx_signature_that_disagrees_with_its_entry_is_an_error_at_its_line_and_column() {
    let (_tmp, ws) = workspace("rmsnorm");
    // rows declared 64-bit: binding a size variable to it is fine, but the entry's fifth
    // parameter is a 32-bit .u32, so a launch would misread the arguments after it.
    let wrong = PTX_V006.replace("float eps, int rows", "float eps, long long rows");
    std::fs::write(ws.join("versions/v006-ptx.ptx"), &wrong).unwrap();
    let v = rung(&ws, &["check", "--json", "v006"]);
    let prep = stage(&v["versions"][0], "prepare");
    assert_eq!(prep["verdict"], "fail", "{prep}");
    let d = prep["diagnostics"].as_array().unwrap().iter().find(|d| d["severity"] == "error").unwrap();
    assert_eq!(d["file"], "versions/v006-ptx.ptx");
    assert_eq!(d["line"], 4, "{d}");
    let start = wrong.lines().nth(3).unwrap().find("long long rows").unwrap() as u64 + 1;
    let col = d["column"].as_u64().unwrap();
    assert!((start..start + 14).contains(&col), "column {col} is not on `long long rows` ({start}): {d}");
    let msg = d["message"].as_str().unwrap();
    assert!(msg.contains("`rows`") && msg.contains(".u32") && msg.contains("8 bytes"), "{msg}");
    // One parameter too few.
    let short = PTX_V006.replace(", int rows, int cols)", ", int rows)");
    std::fs::write(ws.join("versions/v006-ptx.ptx"), &short).unwrap();
    let v = rung(&ws, &["check", "--json", "v006"]);
    let prep = stage(&v["versions"][0], "prepare");
    let msg = prep["summary"].as_str().unwrap();
    assert!(msg.contains("declares 5 parameters but `.entry rmsnorm` takes 6"), "{msg}");
}

#[test]
fn a_ptx_without_a_signature_builds_with_a_warning_and_is_not_run() {
    let (_tmp, ws) = workspace("rmsnorm");
    let bare: String = PTX_V006.lines().filter(|l| !l.starts_with("// extern")).collect::<Vec<_>>().join("\n");
    std::fs::write(ws.join("versions/v006-ptx.ptx"), bare).unwrap();
    let v = rung(&ws, &["check", "--json", "v006"]);
    let rec = &v["versions"][0];
    let prep = stage(rec, "prepare");
    assert_eq!(prep["verdict"], "pass", "{prep}");
    let d = &prep["diagnostics"][0];
    assert_eq!(d["severity"], "warning");
    assert!(d["help"].as_str().unwrap().contains("// extern \"C\" __global__ void rmsnorm("), "{d}");
}

/// A workspace whose reference is CUDA: without a GPU the reference cannot run, so neither the
/// Triton version (which the interpreter could run) nor the CUDA one is judged; both say why,
/// and the builds still pass. On a GPU, `rung selftest --gpu` checks the same layout.
#[test]
fn a_cuda_reference_without_a_gpu_is_named_as_why_nothing_is_judged() {
    if !common::toolchain_here() {
        return;
    }
    let (_tmp, ws) = workspace("vector-add");
    std::fs::remove_file(ws.join("reference.py")).unwrap();
    std::fs::write(
        ws.join("reference.cu"),
        "extern \"C\" __global__ void reference_add(const float* a, const float* b, float* out, int n) {\n\
         \x20   int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = a[i] + b[i];\n}\n",
    )
    .unwrap();
    let v = rung(&ws, &["check", "--json", "--seed", "2", "v001", "v003"]);
    let (cuda, triton) = (&v["versions"][0], &v["versions"][1]);
    assert_eq!(stage(cuda, "build")["verdict"], "pass", "{cuda}");
    assert_eq!(stage(triton, "build")["verdict"], "pass", "{triton}");
    assert_eq!(stage(cuda, "run")["verdict"], "skipped");
    let why = stage(triton, "run")["summary"].as_str().unwrap();
    assert_eq!(stage(triton, "run")["verdict"], "skipped", "{triton}");
    assert!(why.contains("no GPU: the CUDA reference reference.cu runs only on a GPU"), "{why}");
    assert!(cuda["stages"].as_array().unwrap().iter().all(|s| s["stage"] != "check"), "{cuda}");
    assert_eq!(v["exit_code"], 0, "skipped is not a failure: {v}");
}

/// A test size whose tensors cannot be held here is named as the run's error before anything
/// is drawn (an allocation that fails would abort rung).
#[test]
fn a_test_size_past_memory_is_an_error_that_names_it() {
    if !common::toolchain_here() {
        return;
    }
    let (_tmp, ws) = workspace("vector-add");
    let toml = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    std::fs::write(ws.join("rung.toml"), toml.replace("{ n = 1048577 }", "{ n = 1099511627776 }")).unwrap();
    let v = rung(&ws, &["check", "--json", "v003"]);
    let run = stage(&v["versions"][0], "run");
    assert_eq!(run["verdict"], "error", "{run}");
    let summary = run["summary"].as_str().unwrap();
    assert!(summary.contains("n = 1099511627776") && summary.contains("lower [sizes]"), "{summary}");
}

/// A vector-add workspace beside a fake home folder holding an SSH key and rung's config, for the
/// sandbox's tests: `(tmp, workspace, home)`; `None` (saying why) where they cannot run.
fn sandbox_workspace() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    if !common::toolchain_here() {
        return None;
    }
    if rung::sandbox::kernel_abi() == 0 {
        eprintln!("SKIPPED: this kernel has no Landlock");
        return None;
    }
    let (tmp, ws) = workspace("vector-add");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::create_dir_all(home.join(".config/rung")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY\n").unwrap();
    std::fs::write(home.join(".config/rung/config.toml"), "[agent]\n").unwrap();
    Some((tmp, ws, home))
}

/// Writes `versions/{name}.py`: the template's Triton version with `line` first in its run().
fn hostile_version(ws: &Path, name: &str, line: &str) {
    rung::selftest::write_hostile(ws, name, line).unwrap();
}

/// `rung check --json ARGS` in `ws` with HOME at `home`, the sandbox's variable as given (`None`
/// removes it) and the config file at `config`. rung's own folder (by default under the real
/// HOME) is named outright, or the version would not find the toolchain.
fn check_as(ws: &Path, home: &Path, args: &[&str], mode: Option<&str>, config: &Path) -> serde_json::Value {
    rung::selftest::check_as(Path::new(env!("CARGO_BIN_EXE_rung")), ws, home, config, mode, args).unwrap()
}

/// Under `RUNG_SANDBOX=strict` a version reads and writes only its workspace and scratch: one
/// that reads `~/.ssh/id_ed25519` or rung's config, writes outside, or connects to a local port
/// gets the denial as its verdict (`sandbox-denied`, with the path), while the honest version
/// beside it passes. Skipped, saying so, where the kernel has no Landlock.
#[test]
fn the_sandbox_refuses_secrets_writes_outside_and_the_network() {
    let Some((tmp, ws, home)) = sandbox_workspace() else { return };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let outside = tmp.path().join("outside.txt");
    // The GPU suite's own cases (`rung selftest --gpu --only sandbox`).
    let cases = rung::selftest::hostile_cases(&home, &outside, port);
    // The resource limits: no core dumps, a file-size and a private-memory cap (passes only
    // with all three in place).
    hostile_version(
        &ws,
        "v011-limits",
        "import resource as r; assert r.getrlimit(r.RLIMIT_CORE) == (0, 0) and all(0 < r.getrlimit(x)[0] != r.RLIM_INFINITY for x in (r.RLIMIT_FSIZE, r.RLIMIT_DATA)), [r.getrlimit(x) for x in (r.RLIMIT_CORE, r.RLIMIT_FSIZE, r.RLIMIT_DATA)]",
    );
    for c in &cases {
        hostile_version(&ws, c.name, &c.line);
    }
    let no_config = tmp.path().join("no-config.toml");
    let versions = ["v003", "v004", "v005", "v006", "v007", "v008", "v009", "v010", "v011"];
    let v = check_as(&ws, &home, &versions, Some("strict"), &no_config);
    assert_eq!(stage(&v["versions"][0], "check")["verdict"], "pass", "the honest version passes inside: {v}");
    for (i, c) in cases.iter().enumerate() {
        let run = stage(&v["versions"][i + 1], "run");
        assert_eq!(
            (run["verdict"].as_str(), run["reason"].as_str()),
            (Some("fail"), Some("sandbox-denied")),
            "{}: {run}",
            c.name
        );
        assert!(run["summary"].as_str().unwrap().contains(c.reaches), "{}: {run}", c.name);
    }
    assert!(!outside.exists(), "nothing was written outside");
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "no connection reached the port");
    assert_eq!(stage(&v["versions"][8], "check")["verdict"], "pass", "the limits are in place: {v}");
    let recorded = stage(&v["versions"][0], "run")["detail"]["sandbox"].as_str().unwrap().to_string();
    assert!(recorded.starts_with("strict: Landlock ABI") && recorded.contains("no core dumps"), "{recorded}");

    // Strict is the default: without the variable or a config file, the same denial; the
    // config file's `[sandbox] mode = "off"` turns it off (the user's own version then reads
    // what the user can).
    let run_of = |config: &Path| stage(&check_as(&ws, &home, &["v004"], None, config)["versions"][0], "run").clone();
    let run = run_of(&no_config);
    assert_eq!(run["reason"], "sandbox-denied", "{run}");
    assert!(run["detail"]["sandbox"].as_str().unwrap().ends_with("(from default)"), "{run}");
    let config = tmp.path().join("config.toml");
    std::fs::write(&config, "[sandbox]\nmode = \"off\"\n").unwrap();
    let run = run_of(&config);
    assert_eq!(run["verdict"], "pass", "{run}");
    assert!(run["detail"]["sandbox"].as_str().unwrap().starts_with("off"), "{run}");
}

/// An agent's proposal runs sandboxed even with the sandbox off: the same version that reads a
/// planted `~/.ssh/id_ed25519` unsandboxed as the user's own is refused once it is a proposal.
#[test]
fn an_agents_proposal_runs_sandboxed_with_the_sandbox_off() {
    let Some((tmp, ws, home)) = sandbox_workspace() else { return };
    hostile_version(
        &ws,
        "v004-agent-read",
        &format!("open({:?}).read()", home.join(".ssh/id_ed25519").to_str().unwrap()),
    );
    let no_config = tmp.path().join("no-config.toml");
    let check = || check_as(&ws, &home, &["--no-bench", "v004"], Some("off"), &no_config);
    let v = check();
    let run = stage(&v["versions"][0], "run");
    assert_eq!(run["verdict"], "pass", "the user's own version runs with the user's rights (sandbox off): {run}");
    assert!(run["detail"]["sandbox"].as_str().unwrap().starts_with("off"), "{run}");
    let mut store = rung::store::Store::open(&ws.join(".rung")).unwrap();
    store.set_status("v004", rung::store::Status::Proposed, None).unwrap();
    drop(store);
    let v = check();
    let run = stage(&v["versions"][0], "run");
    assert_eq!((run["verdict"].as_str(), run["reason"].as_str()), (Some("fail"), Some("sandbox-denied")), "{run}");
    let said = run["detail"]["sandbox"].as_str().unwrap();
    assert!(said.starts_with("strict: Landlock ABI") && said.contains("proposal"), "{said}");
}

/// Whether a process is gone (or only a zombie no one has reaped yet).
fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |s| s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
}

/// Whatever a version starts is killed with it: a process it leaves running when its check ends,
/// and one it started before hanging past `limits.run`. Each zygote child leads its own process
/// group, and rung and the zygote kill the group.
#[test]
fn what_a_version_starts_does_not_outlive_its_check() {
    if !common::toolchain_here() {
        return;
    }
    let (_tmp, ws) = workspace("vector-add");
    let toml = std::fs::read_to_string(ws.join("rung.toml")).unwrap().replace("run = \"30s\"", "run = \"4s\"");
    std::fs::write(ws.join("rung.toml"), toml).unwrap();
    let src = std::fs::read_to_string(ws.join("versions/v003-triton.py")).unwrap();
    let spawn = |file: &str| {
        format!(
            "import subprocess; p = subprocess.Popen(['sleep', '600']); open({:?}, 'w').write(str(p.pid))",
            ws.join(".rung/tmp").join(file).to_str().unwrap()
        )
    };
    for (name, line) in
        [("v004-leaves", spawn("leaves.pid")), ("v005-hangs", spawn("hangs.pid") + "\n    while True: pass")]
    {
        let bad = src.replace("def run(a, b, out, n):\n", &format!("def run(a, b, out, n):\n    {line}\n"));
        assert_ne!(bad, src);
        std::fs::write(ws.join(format!("versions/{name}.py")), bad).unwrap();
    }
    let v = rung(&ws, &["check", "--json", "v004", "v005"]);
    assert_eq!(stage(&v["versions"][0], "check")["verdict"], "pass", "{v}");
    assert_eq!(stage(&v["versions"][1], "run")["reason"], "timeout", "{v}");
    for file in ["leaves.pid", "hangs.pid"] {
        let pid: u32 = std::fs::read_to_string(ws.join(".rung/tmp").join(file)).unwrap().trim().parse().unwrap();
        let t = std::time::Instant::now();
        while !gone(pid) && t.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(gone(pid), "the `sleep 600` of {file} (pid {pid}) outlived its check");
    }
}

/// The Python worker's bulk copies (rung_host.Guarded) of a buffer larger than one staging
/// part: loaded from its file and written back in parts, the file work on several threads at
/// once and every CUDA call on the calling thread alone (as profilers and sanitizers that wrap
/// each call expect), byte for byte, the guard zones kept; a link planted at the write-back path
/// replaced, not written through; a part's error raised.
/// torch's CUDA side is a stand-in over host memory (rung's CI has no GPU), so what is tested is
/// the parts, the threads and the files.
#[test]
fn the_workers_bulk_copies_go_in_parts_on_several_threads_byte_for_byte() {
    let Some(python) = common::python_with_numpy() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let scripts = tmp.path().join("scripts");
    rung::assets::write_python(&scripts).unwrap();
    let script = r#"
import os, sys, threading, time, types
import numpy as np

CUDA = set()  # the threads that called the stand-in's CUDA side

class T:
    """A tensor over host memory, with the little of torch's API that rung_host uses."""
    def __init__(self, a): self.a = a
    device = "cuda:0"
    def __getitem__(self, k): return T(self.a[k])
    def copy_(self, src, non_blocking=False):
        CUDA.add(threading.current_thread().name)
        self.a[...] = src.a if isinstance(src, T) else src
        return self
    def fill_(self, v): self.a[...] = v; return self
    def numpy(self): return self.a
    def cpu(self): return T(self.a.copy())
    def view(self, x): return T(self.a.reshape(x) if isinstance(x, tuple) else self.a.view(x))

class Event:
    def record(self): CUDA.add(threading.current_thread().name)
    def synchronize(self): CUDA.add(threading.current_thread().name)

torch = types.ModuleType("torch")
torch.uint8, torch.float32 = np.uint8, np.float32
torch.empty = lambda n, dtype=None, device=None, pin_memory=False: T(np.empty(n, dtype))
torch.frombuffer = lambda b, dtype=None: T(np.frombuffer(b, dtype))
torch.cuda = types.SimpleNamespace(Event=Event, current_stream=lambda: Event())
sys.modules["torch"] = torch
sys.path.insert(0, sys.argv[1])
import rung_host as h
h.STAGE_BYTES, h.DIRECT_BYTES = 64 << 10, 1 << 10

# Each part's file work takes a moment, so that the parts overlap; the most at once is counted.
busy, most, lock, fail_at, workers = [0], [0], threading.Lock(), [None], set()
def slowed(work):
    def wrapped(*args):
        with lock:
            workers.add(threading.current_thread().name)
            busy[0] += 1
            most[0] = max(most[0], busy[0])
        try:
            time.sleep(0.005)
            if args[-2 if work is read else 1] == fail_at[0]:
                raise OSError("part at %d" % fail_at[0])
            return work(*args)
        finally:
            with lock:
                busy[0] -= 1
    return wrapped
read, fill = h._read_exact, h._fill
h._read_exact, h._fill = slowed(read), slowed(fill)

d = sys.argv[2]
n = (1 << 20) + 12344  # 17 parts of 64 KiB, the last short
data = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8)
src = os.path.join(d, "x.bin")
data.tofile(src)
g = h.Guarded(src, "f32", [n // 4], 64)
assert (g.raw.a[64:64 + n] == data).all(), "loaded bytes differ"
assert (g.raw.a[:64] == h.GUARD_BYTE).all() and (g.raw.a[64 + n:] == h.GUARD_BYTE).all()
assert most[0] == h.IO_LANES, "at most %d parts read at once" % most[0]
g.raw.a[64:64 + n] = data[::-1]
g.path = os.path.join(d, "y.bin")
planted = os.path.join(d, "planted")
open(planted, "wb").write(b"keep")
os.symlink(planted, g.path)
most[0] = 0
assert g.write_back() is None
assert most[0] == h.IO_LANES, "at most %d parts filled at once" % most[0]
assert open(planted, "rb").read() == b"keep", "written through a link"
assert not os.path.islink(g.path)
assert (np.fromfile(g.path, np.uint8) == data[::-1]).all(), "written-back bytes differ"
assert CUDA == {"MainThread"}, CUDA
if h.IO_LANES == 1:
    assert workers == {"MainThread"} and threading.active_count() == 1, workers
else:
    assert len(workers) == h.IO_LANES and "MainThread" not in workers, workers
g.raw.a[64 + n + 3] = 0
assert g.write_back() == {"before": 0, "after": 1, "farthest": 4}
for what in (lambda: g.load(src), g.write_back):
    fail_at[0] = 5 * h.STAGE_BYTES
    try:
        what()
        raise AssertionError("no error")
    except OSError as e:
        assert str(e) == "part at %d" % fail_at[0], e
print("ok", h.IO_LANES)
"#;
    let files = tempfile::tempdir().unwrap();
    let out = Command::new(&python)
        .args(["-c", script, scripts.to_str().unwrap(), files.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok 4",
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `rung selftest --gpu --only sandbox`'s hostile rows, without a GPU (the versions run in
/// Triton's interpreter, inside the same sandbox): every hostile version refused with what it
/// reached for, the honest Triton one passing with the sandbox recorded, nothing reached
/// outside. Its CUDA and bench rows need a GPU and are left to the GPU suite.
#[test]
fn the_sandbox_selftest_refuses_every_hostile_version() {
    let Some((tmp, _, _)) = sandbox_workspace() else { return };
    let rows =
        rung::selftest::run_sandbox(&tmp.path().join("selftest"), Path::new(env!("CARGO_BIN_EXE_rung"))).unwrap();
    let (bench, mut rows): (Vec<_>, Vec<_>) = rows.iter().partition(|r| r.name.ends_with(" bench"));
    // The CUDA version (v002) runs only on a GPU.
    rows.retain(|r| !r.name.starts_with("v002"));
    assert_eq!((rows.len(), bench.len()), (9, 2), "{rows:?} {bench:?}");
    for r in rows {
        assert!(r.ok, "{r:?}");
    }
}

/// With check lanes (CUDA versions' check rungs on threads of their own, each with its own
/// workers and history connection) a check gives the same verdicts in the same order as without.
/// Without a GPU the lanes open once the Triton version's check has kept the reference's outputs
/// and take the CUDA versions after it, whose runs are skipped; on a GPU, `rung selftest --gpu
/// --only faults` checks the CUDA fault cases in lanes against their expected verdicts.
#[test]
fn check_lanes_give_the_verdicts_and_order_of_one_queue() {
    if !common::toolchain_here() {
        eprintln!("skipped: no toolchain here (rung setup)");
        return;
    }
    let (_tmp, ws) = workspace("vector-add");
    let naive = std::fs::read_to_string(ws.join("versions/v001-naive.cu")).unwrap();
    let mut ids = vec!["v003".to_string(), "v001".into(), "v002".into()];
    for i in 4..=9 {
        std::fs::write(ws.join(format!("versions/v00{i}-copy.cu")), format!("// copy {i}\n{naive}")).unwrap();
        ids.push(format!("v00{i}"));
    }
    // One that does not build, among them: the queue keeps it (no lane takes it), in its place.
    std::fs::write(ws.join("versions/v010-broken.cu"), naive.replacen("{", "{ not_declared = 1;", 1)).unwrap();
    ids.insert(5, "v010".into());
    let check = |lanes: &str| {
        let args = ["check", "--json", "--no-bench", "--seed", "7"].into_iter().chain(ids.iter().map(String::as_str));
        let out = Command::new(env!("CARGO_BIN_EXE_rung"))
            .args(args)
            .current_dir(&ws)
            .env("RUNG_CHECK_LANES", lanes)
            .env("RUNG_BUILD_THREADS", "2")
            .output()
            .unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // The second check finds the first one's builds cached.
        let verdicts = common::stage_lines(&report, |s| {
            format!("{} {} {}", s["stage"], s["verdict"], s["summary"]).replace(" [cached]", "")
        });
        (verdicts, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (alone, _) = check("0");
    let (laned, said) = check("2");
    assert_eq!(alone.len(), ids.len(), "{alone:#?}");
    assert!(alone.iter().zip(&ids).all(|(line, id)| line.starts_with(&format!("\"{id}\""))), "{alone:#?}");
    assert!(alone[0].contains("\"check\" \"pass\""), "the Triton version keeps the reference: {}", alone[0]);
    assert_eq!(alone, laned, "the same verdicts, in the same order, with lanes");
    // The lanes open once the Triton version has kept the reference and take the eight CUDA
    // versions that built.
    assert!(alone[5].contains("\"build\" \"fail\""), "{}", alone[5]);
    assert!(said.contains("rung: 2 check lanes climbed the check rungs of 8 versions"), "{said}");
}
