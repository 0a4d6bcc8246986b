//! The TUI's screen and keys, on workspaces written by `rung new` with results recorded in their
//! history: snapshots of each pane (each also asserting the figures it must show, so an accepted
//! snapshot that lost them still fails), and review keys that must reach the store.

// The TUI lives in the binary; this test compiles the same module against the library.
#[path = "../src/tui/mod.rs"]
#[allow(dead_code)] // `run` and the terminal's setup are the binary's, not these tests'
mod tui;

use std::path::{Path, PathBuf};
use std::process::Command;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use rung::diag::{Diagnostic, Pos};
use rung::report::{Stage, StageDetail, StageResult, Verdict};
use rung::stages::bench::{BenchDetail, Ceilings, RooflineDetail, SizeBench, Speedup};
use rung::store::{NewResult, Status, Store};
use rung::workspace::Workspace;

use tui::action::Action;
use tui::app::App;
use tui::event::Event;
use tui::panes::Pane;

fn new_workspace() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let out = Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(["new", ws.to_str().unwrap(), "--template", "vector-add"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (tmp, ws)
}

fn result(stage: Stage, verdict: Verdict, diagnostics: Vec<Diagnostic>, detail: StageDetail) -> StageResult {
    StageResult {
        stage,
        verdict,
        summary: format!("recorded {stage}"),
        started_at: "2026-12-02T00:00:00.000Z".into(),
        duration_ms: 1.0,
        diagnostics,
        tools: Default::default(),
        result_id: None,
        reason: None,
        detail,
    }
}

fn bench(median_ms: f64, speedup: Option<f64>) -> StageDetail {
    let samples: Vec<f64> = (0..101).map(|i| median_ms * (1.0 + 0.01 * ((i as f64) / 50.0 - 1.0))).collect();
    let s = rung::stats::summarize(&samples);
    StageDetail::Bench(BenchDetail {
        gpu: "NVIDIA H200".into(),
        sizes: vec![SizeBench { headline: s.clone(), basis: "events".into(), ..Default::default() }],
        speedups: speedup
            .map(|x| Speedup {
                role: "best approved".into(),
                against: "v001".into(),
                sizes: Default::default(),
                this: s.clone(),
                other: s.clone(),
                speedup: x,
                speedup_low: x,
                speedup_high: x,
                rounds: 10,
                suspicious: false,
            })
            .into_iter()
            .collect(),
        ..Default::default()
    })
}

fn roofline(percent: f64) -> StageDetail {
    StageDetail::Roofline(RooflineDetail {
        sizes: Default::default(),
        seconds: 1e-5,
        bytes: Some(1e9),
        flops: None,
        achieved_gbs: Some(percent * 48.0),
        achieved_tflops: None,
        bound: "memory".into(),
        percent_of_ceiling: Some(percent),
        ceilings: Ceilings {
            uuid: "GPU-x".into(),
            gpu: "NVIDIA H200".into(),
            copy_gbs: 4800.0,
            copy_methods: Default::default(),
            gemm_bf16_tflops: None,
            datasheet_gbs: None,
            datasheet_bf16_tflops: None,
            measured_at: "2026-12-02T00:00:00.000Z".into(),
        },
    })
}

fn record(ws: &Path, version: &str, results: &[StageResult]) {
    let w = Workspace::open(ws).unwrap();
    let v = w.version(version).unwrap();
    let hash = rung::store::sha256_hex(&std::fs::read(w.root.join(&v.path)).unwrap());
    let mut store = Store::open(&w.state_dir()).unwrap();
    store.sync_version(v, &hash, Status::Draft).unwrap();
    for r in results {
        let payload = serde_json::to_string(r).unwrap();
        store
            .record(&NewResult {
                version,
                stage: r.stage.name(),
                verdict: r.verdict.name(),
                source_hash: &hash,
                seed: Some(1),
                payload: &payload,
                tools: "{}",
                started_at_ms: 1,
                finished_at_ms: 2,
            })
            .unwrap();
    }
}

/// v001 passed every rung and is approved; v002 passed, twice as fast; v003 does not build.
fn checked_workspace() -> (tempfile::TempDir, PathBuf) {
    let (tmp, ws) = new_workspace();
    let pass = |stage| result(stage, Verdict::Pass, vec![], StageDetail::None);
    let climbed = |median_ms, speedup, percent| {
        vec![
            pass(Stage::Prepare),
            pass(Stage::Build),
            pass(Stage::Run),
            pass(Stage::Check),
            result(Stage::Bench, Verdict::Pass, vec![], bench(median_ms, speedup)),
            result(Stage::Roofline, Verdict::Pass, vec![], roofline(percent)),
        ]
    };
    record(&ws, "v001", &climbed(0.0246, None, 41.0));
    record(&ws, "v002", &climbed(0.0123, Some(2.0), 82.0));
    let error = Diagnostic::error("versions/v003-triton.py", Pos::new(8, 39), "arange's range must be a power of 2")
        .with_help("make BLOCK a power of two");
    record(&ws, "v003", &[pass(Stage::Prepare), result(Stage::Build, Verdict::Fail, vec![error], StageDetail::None)]);
    let mut store = Store::open(&ws.join(".rung")).unwrap();
    store.set_status("v001", Status::Approved, None).unwrap();
    (tmp, ws)
}

fn key(code: KeyCode) -> Event {
    Event::Key(KeyEvent::new(code, KeyModifiers::NONE))
}

fn press(app: &mut App, keys: &str) {
    for c in keys.chars() {
        app.update(key(KeyCode::Char(c)));
    }
}

fn pane_text(app: &App, pane: Pane, width: u16, height: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(width, height)).unwrap();
    term.draw(|f| pane.draw(app, f.area(), f.buffer_mut())).unwrap();
    term.backend().to_string()
}

fn screen_text(app: &App, width: u16, height: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(width, height)).unwrap();
    term.draw(|f| tui::view::draw(app, f)).unwrap();
    term.backend().to_string()
}

fn snapshot(name: &str, text: &str) {
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"/[^\s│┃]*/ws\b", "[WS]");
    settings.bind(|| insta::assert_snapshot!(name, text));
}

const SIZES: [(u16, u16); 2] = [(80, 24), (200, 60)];

#[test]
fn every_action_round_trips_through_its_name() {
    for a in Action::ALL {
        assert_eq!(a.name().parse::<Action>(), Ok(a));
        assert_eq!(a.to_string(), a.name());
    }
    assert_eq!("approve".parse::<Action>(), Ok(Action::Approve));
    assert_eq!("next-pane".parse::<Action>(), Ok(Action::NextPane));
    let err = "aprove".parse::<Action>().unwrap_err().to_string();
    assert!(err.contains("`aprove`") && err.contains("next-pane"), "{err}");
}

#[test]
fn versions_pane_before_any_check() {
    let (_tmp, ws) = new_workspace();
    let app = App::open(&ws, false).unwrap();
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Versions, w, h);
        for id in ["v001", "v002", "v003"] {
            let row = text.lines().find(|l| l.contains(id)).unwrap_or_else(|| panic!("{id}: {text}"));
            assert!(row.contains("new"), "not in the history yet: {row}");
        }
        assert!(!text.contains('✓') && !text.contains('✗'), "nothing ran yet: {text}");
        snapshot(&format!("versions_empty_{w}x{h}"), &text);
    }
}

#[test]
fn versions_pane_with_passed_and_failed_versions() {
    let (_tmp, ws) = checked_workspace();
    let app = App::open(&ws, false).unwrap();
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Versions, w, h);
        let line = |id: &str| text.lines().find(|l| l.contains(id)).unwrap_or_else(|| panic!("{id}: {text}"));
        let v001 = line("v001");
        assert!(v001.contains("✓ approved") && v001.contains("24.60") && v001.contains("41%"), "{v001}");
        assert_eq!(v001.matches('✓').count(), 7, "the approved mark and six rungs passed: {v001}");
        let v002 = line("v002");
        assert!(v002.contains("12.30") && v002.contains("2.00×") && v002.contains("82%"), "{v002}");
        let v003 = line("v003");
        assert!(v003.contains('✗') && v003.matches('✓').count() == 1 && !v003.contains("µs"), "{v003}");
        snapshot(&format!("versions_checked_{w}x{h}"), &text);
    }
}

#[test]
fn compile_errors_pane_before_any_check() {
    let (_tmp, ws) = new_workspace();
    let app = App::open(&ws, false).unwrap();
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Diagnostics, w, h);
        assert!(text.contains("v001: not checked yet"), "{text}");
        snapshot(&format!("errors_empty_{w}x{h}"), &text);
    }
}

#[test]
fn compile_errors_pane_shows_the_failed_version_s_diagnostic_with_its_line() {
    let (_tmp, ws) = checked_workspace();
    let mut app = App::open(&ws, false).unwrap();
    let passed = pane_text(&app, Pane::Diagnostics, 80, 24);
    assert!(passed.contains("v001: no diagnostics"), "{passed}");
    press(&mut app, "jj");
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Diagnostics, w, h);
        assert!(text.contains("versions/v003-triton.py:8:39"), "{text}");
        assert!(text.contains("arange's range must be a power of 2"), "{text}");
        assert!(text.contains("help: make BLOCK a power of two"), "{text}");
        // The excerpt is the file's own line 8, with the caret under column 39.
        let excerpt = text.lines().find(|l| l.contains("  8 │ ")).unwrap_or_else(|| panic!("{text}"));
        assert!(excerpt.contains("offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)"), "{excerpt}");
        let caret = text.lines().find(|l| l.contains('^')).unwrap_or_else(|| panic!("{text}"));
        let col = |l: &str, pat: &str| l.find(pat).map(|i| l[..i].chars().count());
        assert_eq!(col(caret, "^"), col(excerpt, "tl.arange"), "{excerpt}\n{caret}");
        snapshot(&format!("errors_failed_{w}x{h}"), &text);
    }
}

#[test]
fn the_whole_screen_with_help_lists_every_bound_key() {
    let (_tmp, ws) = checked_workspace();
    let mut app = App::open(&ws, false).unwrap();
    let screen = screen_text(&app, 80, 24);
    assert!(screen.contains("vector-add") && screen.contains("versions") && screen.contains("compile errors"));
    assert!(screen.contains("a approve") && screen.contains("q quit"), "{screen}");
    press(&mut app, "?");
    let help = screen_text(&app, 80, 24);
    for (action, _) in app.keymap.by_action() {
        assert!(help.contains(action.describe()), "{action} missing from help:\n{help}");
    }
    snapshot("screen_help_80x24", &help);
    // Any key closes help.
    app.update(key(KeyCode::Esc));
    assert_eq!(screen_text(&app, 80, 24), screen);
}

#[test]
fn approve_and_reject_by_key_persist_in_the_history() {
    let (_tmp, ws) = checked_workspace();
    let mut app = App::open(&ws, false).unwrap();
    // v002 (second row) approved; v003 was never reviewed and gets the status all the same.
    press(&mut app, "ja");
    let status = |id: &str| Store::open(&ws.join(".rung")).unwrap().version(id).unwrap().map(|r| (r.status, r.reason));
    assert_eq!(status("v002"), Some((Status::Approved, None)));
    // Reject v003 with a reason; Backspace edits it.
    press(&mut app, "jr");
    press(&mut app, "too slowx");
    app.update(key(KeyCode::Backspace));
    assert!(screen_text(&app, 80, 24).contains("reject v003, reason: too slow"));
    app.update(key(KeyCode::Enter));
    assert_eq!(status("v003"), Some((Status::Rejected, Some("too slow".into()))));
    assert!(pane_text(&app, Pane::Versions, 80, 24).contains("✗ rejected"));
    // Esc cancels: v001 stays approved.
    press(&mut app, "kkrno");
    app.update(key(KeyCode::Esc));
    assert_eq!(status("v001"), Some((Status::Approved, None)));
    // An empty reason rejects nothing.
    press(&mut app, "r");
    app.update(key(KeyCode::Enter));
    assert_eq!(status("v001"), Some((Status::Approved, None)));
    press(&mut app, "q");
    assert!(app.quit);
}

#[test]
fn enter_on_a_diagnostic_records_the_jump() {
    let (_tmp, ws) = checked_workspace();
    let mut app = App::open(&ws, false).unwrap();
    press(&mut app, "jj");
    app.update(key(KeyCode::Enter));
    assert_eq!(app.pane, Pane::Diagnostics, "Enter on a version with diagnostics moves to them");
    app.update(key(KeyCode::Enter));
    let jump = app.jump.clone().expect("a jump target");
    assert_eq!((jump.file, jump.line, jump.column), (PathBuf::from("versions/v003-triton.py"), 8, 39));
    app.update(key(KeyCode::Tab));
    assert_eq!(app.pane, Pane::Versions);
}

#[test]
fn e_asks_for_the_editor_at_the_diagnostic_or_at_the_version_file() {
    let (_tmp, ws) = checked_workspace();
    let mut app = App::open(&ws, false).unwrap();
    press(&mut app, "jj");
    // In the versions pane: the version's own file, from its first line.
    press(&mut app, "e");
    let target = app.edit.take().expect("an edit request");
    assert_eq!((target.file, target.line), (PathBuf::from("versions/v003-triton.py"), 1));
    // In the compile-errors pane: the diagnostic's line and column.
    app.update(key(KeyCode::Enter));
    press(&mut app, "e");
    let target = app.edit.take().expect("an edit request");
    assert_eq!((target.file, target.line, target.column), (PathBuf::from("versions/v003-triton.py"), 8, 39));
    assert!(app.message.as_deref().unwrap_or("").contains("versions/v003-triton.py:8"));
}

#[test]
fn the_caret_stays_under_its_column_on_a_line_with_tabs() {
    use tui::app::caret_offset;
    // Column 3 of "\t\tx = 1" is `x`: two tabs of four cells each before it.
    assert_eq!(caret_offset("\t\tx = 1", 3), Some(8));
    assert_eq!(caret_offset("    x = 1", 5), Some(4));
    assert_eq!(caret_offset("ab", 0), None);
    // A column past the end (a missing semicolon at the end of the line) stays past it.
    assert_eq!(caret_offset("ab", 4), Some(3));
}
