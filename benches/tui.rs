//! The TUI under load, as issue targets state it: a key press to its frame (p99 at most 16 ms)
//! and resident memory (at most 150 MB) with 200 versions in the history, while a build and a
//! bench run. Not criterion: one long session of keys, with the watcher's events arriving
//! between them as they do while versions build and bench, timed key by key.
//!
//! `cargo bench --bench tui` (release profile). The workspace: the vector-add template with 200
//! CUDA versions, each with six rungs recorded (a bench and a roofline among them) in three
//! generations, 3,600 rows. The load: a real `rung check --no-bench` of the same workspace in
//! another process (compilers on every core, rows landing in the history), and job events
//! (running, done) for a version every 25 keys, each of which makes the App reload from the
//! history, as the watcher's do. Each sample is `App::update(key)` plus every pending event and
//! one `Terminal::draw` into a 200×50 crossterm backend writing to nowhere (escape sequences
//! encoded, not displayed).

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::CrosstermBackend;
use ratatui::layout::Rect;
use ratatui::{Terminal, TerminalOptions, Viewport};
use rung::model::report::{Stage, StageDetail, StageResult, Verdict, VersionReport};
use rung::stages::bench::{BenchDetail, Ceilings, RooflineDetail, SizeBench};
use rung::store::{NewResult, Status, Store};
use rung::watch::{EventKind, JobKind, JobState, WatchEvent};
use rung::workspace::Workspace;
use rung_tui::app::App;
use rung_tui::event::Event;

const VERSIONS: usize = 200;
const GENERATIONS: usize = 3;
const KEYS: usize = 3000;

fn result(stage: Stage, detail: StageDetail) -> StageResult {
    StageResult {
        stage,
        verdict: Verdict::Pass,
        summary: format!("recorded {stage}"),
        started_at: "2026-12-02T00:00:00.000Z".into(),
        duration_ms: 1.0,
        diagnostics: vec![],
        tools: Default::default(),
        result_id: None,
        reason: None,
        detail,
        ran_on: None,
    }
}

fn climbed(median_ms: f64) -> Vec<StageResult> {
    let samples: Vec<f64> = (0..101).map(|i| median_ms * (1.0 + 0.01 * ((i as f64) / 50.0 - 1.0))).collect();
    let s = rung::stats::summarize(&samples);
    let bench = StageDetail::Bench(BenchDetail {
        gpu: "NVIDIA H200".into(),
        sizes: vec![SizeBench { headline: s, basis: "cupti".into(), ..Default::default() }],
        ..Default::default()
    });
    let roofline = StageDetail::Roofline(RooflineDetail {
        sizes: Default::default(),
        seconds: median_ms * 1e-3,
        bytes: Some(1e9),
        flops: None,
        achieved_gbs: Some(1e9 / (median_ms * 1e-3) / 1e9),
        achieved_tflops: None,
        bound: "memory".into(),
        percent_of_ceiling: Some(50.0),
        ceilings: Ceilings {
            uuid: "GPU-x".into(),
            gpu: "NVIDIA H200".into(),
            copy_gbs: 4300.0,
            copy_methods: Default::default(),
            gemm_bf16_tflops: None,
            datasheet_gbs: None,
            datasheet_bf16_tflops: None,
            measured_at: "2026-12-02T00:00:00.000Z".into(),
            timer: "cupti".into(),
        },
    });
    let pass = |stage| result(stage, StageDetail::None);
    vec![
        pass(Stage::Prepare),
        pass(Stage::Build),
        pass(Stage::Run),
        pass(Stage::Check),
        result(Stage::Bench, bench),
        result(Stage::Roofline, roofline),
    ]
}

/// The vector-add template with `VERSIONS` CUDA versions, each with its history recorded.
fn workspace(dir: &Path) {
    rung::templates::write("vector-add", dir).expect("the template writes");
    let versions = dir.join("versions");
    let naive = std::fs::read_dir(&versions)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("naive.cu"))
        .expect("the template's naive version");
    let text = std::fs::read_to_string(&naive).unwrap();
    for e in std::fs::read_dir(&versions).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    for i in 1..=VERSIONS {
        std::fs::write(versions.join(format!("v{i:03}-naive.cu")), format!("// variant {i}\n{text}")).unwrap();
    }
    let ws = Workspace::open(dir).unwrap();
    let mut store = Store::open(&ws.state_dir()).unwrap();
    for (i, v) in ws.versions.iter().enumerate() {
        let hash = rung::store::sha256_hex(&std::fs::read(ws.root.join(&v.path)).unwrap());
        store.sync_version(v, &hash, Status::Draft).unwrap();
        for g in 0..GENERATIONS {
            for r in climbed(0.25 + 0.001 * i as f64 + 0.01 * g as f64) {
                let payload = serde_json::to_string(&r).unwrap();
                let at = 1_764_633_600_000 + (g * VERSIONS + i) as i64 * 1000;
                store
                    .record(&NewResult {
                        version: &v.id,
                        stage: r.stage.name(),
                        verdict: r.verdict.name(),
                        source_hash: &hash,
                        seed: Some(1),
                        payload: &payload,
                        tools: "{}",
                        started_at_ms: at,
                        finished_at_ms: at + 500,
                    })
                    .unwrap();
            }
        }
    }
}

fn key(c: char) -> Event {
    let code = match c {
        '\t' => KeyCode::Tab,
        'J' => KeyCode::Down,
        'K' => KeyCode::Up,
        c => KeyCode::Char(c),
    };
    Event::Key(KeyEvent::new(code, KeyModifiers::NONE))
}

fn job(version: &str, state: JobState) -> Event {
    Event::Watch(Box::new(WatchEvent {
        unix_ms: 1_764_633_600_000,
        kind: EventKind::Job { version: version.into(), job: JobKind::Gpu, state, generation: 1, why: None },
    }))
}

fn done(version: &str) -> Event {
    let report = VersionReport {
        id: version.into(),
        path: format!("versions/{version}-naive.cu").into(),
        kind: rung::model::version::VersionKind::Cuda,
        status: Status::Draft,
        source_hash: String::new(),
        verdict: Verdict::Pass,
        stages: climbed(0.25),
        ran_on: None,
    };
    Event::Watch(Box::new(WatchEvent {
        unix_ms: 1_764_633_600_000,
        kind: EventKind::Done { version: version.into(), generation: 1, report },
    }))
}

/// The process's resident set now and at its peak, in MB (Linux).
fn memory_mb() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// This thread's CPU time: what a sample cost the TUI itself, apart from waiting for a core the
/// compilers beside it hold.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which lives on this stack frame.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this too, briefly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ws");
    let t = Instant::now();
    workspace(&dir);
    let setup = t.elapsed();

    // A real build beside the TUI: compilers on every core, results landing in the history. With
    // TUI_BENCH_BENCHES=N (a machine with a GPU), the check builds and benches v001..vN instead,
    // and the keys go on until it ends: the TUI during builds and then benches. RUNG names the
    // rung binary where this one was built elsewhere.
    let rung = std::env::var_os("RUNG").map_or_else(|| env!("CARGO_BIN_EXE_rung").into(), std::path::PathBuf::from);
    let benches: usize = std::env::var("TUI_BENCH_BENCHES").ok().and_then(|n| n.parse().ok()).unwrap_or(0);
    let mut args: Vec<String> = vec!["check".into(), "--json".into()];
    if benches == 0 {
        args.push("--no-bench".into());
    } else {
        args.extend((1..=benches.min(VERSIONS)).map(|i| format!("v{i:03}")));
    }
    let mut load = std::process::Command::new(&rung)
        .args(&args)
        .current_dir(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok();

    // Start timing once the build is under way: its first row is in the history.
    let recorded = (VERSIONS * GENERATIONS * 6) as i64;
    let history = Store::open(&dir.join(".rung")).unwrap();
    let wait = Instant::now();
    while load.is_some() && history.result_count().unwrap() <= recorded && wait.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let building = history.result_count().unwrap() > recorded;

    let t = Instant::now();
    let mut app = App::open(&dir, true).expect("the App opens");
    let open = t.elapsed();
    let backend = CrosstermBackend::new(std::io::sink());
    let mut term =
        Terminal::with_options(backend, TerminalOptions { viewport: Viewport::Fixed(Rect::new(0, 0, 200, 50)) })
            .unwrap();
    term.draw(|f| rung_tui::view::draw(&app, f)).unwrap();

    let keys: Vec<char> = "jjjjkk\tjj\tJJK\tjjj\t".chars().collect();
    let n = if quick { 200 } else { KEYS };
    let mut samples = Vec::with_capacity(n);
    let mut cpu = Vec::with_capacity(n);
    let mut refreshes = Vec::new();
    let benched = || -> i64 {
        history
            .connection()
            .query_row("SELECT COUNT(*) FROM results WHERE stage = 'bench'", [], |r| r.get(0))
            .unwrap_or(0)
    };
    let benched_before = benched();
    let keys_from = Instant::now();
    // With benches beside, keys every 2 ms until the check ends (at most 5 minutes).
    let load_running = |load: &mut Option<std::process::Child>| {
        load.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
            && keys_from.elapsed() < Duration::from_secs(300)
    };
    let mut i = 0;
    while i < n || (benches > 0 && load_running(&mut load)) {
        if benches > 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
        let version = format!("v{:03}", 1 + (i / 25) % VERSIONS);
        let mut pending = Vec::new();
        match i % 25 {
            0 => pending.push(job(&version, JobState::Running)),
            24 => pending.push(done(&version)),
            _ => {}
        }
        if i % 5 == 0 {
            pending.push(Event::Tick);
        }
        let reloads = !pending.is_empty() && i % 25 == 24;
        let (t, c) = (Instant::now(), thread_cpu());
        app.update(key(keys[i % keys.len()]));
        for e in pending {
            app.update(e);
        }
        term.draw(|f| rung_tui::view::draw(&app, f)).unwrap();
        let took = t.elapsed();
        samples.push(took);
        cpu.push(thread_cpu() - c);
        if reloads {
            refreshes.push(took);
        }
        i += 1;
    }
    let keys_for = keys_from.elapsed();
    let benched_beside = benched() - benched_before;
    let (rss, peak) = memory_mb();
    if let Some(mut child) = load {
        let _ = child.kill();
        let _ = child.wait();
    }
    samples.sort();
    cpu.sort();
    refreshes.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "tui: {VERSIONS} versions, {} history rows; setup {:.1} s, App::open {:.1} ms",
        VERSIONS * GENERATIONS * 6,
        setup.as_secs_f64(),
        ms(open)
    );
    let _ = writeln!(
        out,
        "key to frame over {} keys ({}): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (target p99 <= 16 ms)",
        samples.len(),
        if building { "`rung check` building beside" } else { "no build beside: rung found no compiler" },
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.99)),
        ms(*samples.last().unwrap())
    );
    let _ = writeln!(
        out,
        "  the TUI's own CPU time per key: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (the rest is waiting for a core)",
        ms(percentile(&cpu, 0.5)),
        ms(percentile(&cpu, 0.99)),
        ms(*cpu.last().unwrap())
    );
    if !refreshes.is_empty() {
        let _ = writeln!(
            out,
            "  the {} keys that came with a version's done event (a reload from the history): p50 {:.2} ms, max {:.2} ms",
            refreshes.len(),
            ms(percentile(&refreshes, 0.5)),
            ms(*refreshes.last().unwrap())
        );
    }
    if benches > 0 {
        let _ = writeln!(
            out,
            "  beside: `rung check` of v001..v{benches:03} with benches; {benched_beside} bench rows landed during the {:.1} s of keys",
            keys_for.as_secs_f64()
        );
    }
    let _ = writeln!(out, "resident memory: {rss:.0} MB now, {peak:.0} MB at the peak (target <= 150 MB)");
}
