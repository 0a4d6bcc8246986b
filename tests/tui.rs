//! The TUI's screen and keys, on workspaces written by `rung new` with results recorded in their
//! history: snapshots of each pane (each also asserting the figures it must show, so an accepted
//! snapshot that lost them still fails), and review keys that must reach the store.

use rung_tui as tui;

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use rung::diag::{Diagnostic, Pos};
use rung::model::report::{Stage, StageDetail, StageResult, Verdict};
use rung::stages::bench::{BenchDetail, Ceilings, RooflineDetail, SizeBench, Speedup};
use rung::store::{NewResult, Status, Store};
use rung::workspace::Workspace;

use tui::action::Action;
use tui::app::App;
use tui::event::Event;
use tui::layout::Pane;

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
        ran_on: None,
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

fn roofline(median_ms: f64, percent: f64) -> StageDetail {
    StageDetail::Roofline(RooflineDetail {
        sizes: Default::default(),
        seconds: median_ms * 1e-3,
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
            timer: "cupti".into(),
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
            result(Stage::Roofline, Verdict::Pass, vec![], roofline(median_ms, percent)),
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

/// The TUI on a workspace, its header as where versions run sandboxed: the warning that they do
/// not depends on the machine (its Landlock) and the user's config.
fn open_app(root: &Path, color: bool) -> anyhow::Result<App> {
    let mut app = App::open(root, color)?;
    app.unsandboxed = None;
    Ok(app)
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
    settings.add_filter(r"\b\d\d:\d\d:\d\d\b", "[TIME]");
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
    let app = open_app(&ws, false).unwrap();
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
    let app = open_app(&ws, false).unwrap();
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
    let app = open_app(&ws, false).unwrap();
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Diagnostics, w, h);
        assert!(text.contains("v001: not checked yet"), "{text}");
        snapshot(&format!("errors_empty_{w}x{h}"), &text);
    }
}

/// A rung.toml that does not load at start opens the TUI anyway, its error at its line in the
/// compile-errors pane; saving the fix (the watcher's change event) loads the versions.
#[test]
fn a_broken_rung_toml_opens_with_its_error_and_the_fix_loads_the_workspace() {
    let (_tmp, ws) = new_workspace();
    let toml = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    std::fs::write(ws.join("rung.toml"), format!("{toml}\n[[inputs]]\nname = 3\n")).unwrap();
    let mut app = open_app(&ws, false).expect("a broken rung.toml still opens");
    assert!(app.versions.is_empty());
    let text = pane_text(&app, Pane::Diagnostics, 120, 20);
    let line = toml.lines().count() + 3;
    assert!(text.contains(&format!("rung.toml:{line}:8")) && text.contains("expected a string"), "{text}");
    std::fs::write(ws.join("rung.toml"), &toml).unwrap();
    app.update(Event::Watch(Box::new(WatchEvent {
        unix_ms: 1_764_633_600_000,
        kind: EventKind::Changed { paths: vec!["rung.toml".into()], versions: vec![], all: true },
    })));
    assert_eq!(app.versions.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(), ["v001", "v002", "v003"]);
    let text = pane_text(&app, Pane::Diagnostics, 120, 20);
    assert!(!text.contains("expected a string"), "the error is gone with the fix: {text}");
}

/// A diagnostic far right on a long line keeps its caret on screen (the line slides left behind
/// a `…`), and a long message wraps rather than being cut at the pane's edge.
#[test]
fn a_caret_far_right_stays_on_screen_and_a_long_message_wraps() {
    let (_tmp, ws) = new_workspace();
    let long = format!(
        "    out[i] = {} + bogus_name;",
        (0..30).map(|k| format!("a[i + {k}]")).collect::<Vec<_>>().join(" + ")
    );
    let column = long.find("bogus_name").unwrap() as u32 + 1;
    let src = std::fs::read_to_string(ws.join("versions/v001-naive.cu")).unwrap();
    std::fs::write(ws.join("versions/v001-naive.cu"), format!("{src}\n{long}\n")).unwrap();
    let line = src.lines().count() as u32 + 2;
    let message = format!(
        "identifier \"bogus_name\" is undefined, and this message goes on for a while so that it needs {} to be read whole",
        "more than one line of the pane"
    );
    let error = Diagnostic::error("versions/v001-naive.cu", Pos::new(line, column), message);
    record(&ws, "v001", &[result(Stage::Build, Verdict::Fail, vec![error], StageDetail::None)]);
    let app = open_app(&ws, false).unwrap();
    let text = pane_text(&app, Pane::Diagnostics, 80, 14);
    let rows: Vec<&str> = text.lines().collect();
    let caret = rows.iter().position(|r| r.contains('^')).unwrap_or_else(|| panic!("the caret is on screen:\n{text}"));
    let above = rows[caret - 1];
    let at = |row: &str, c: char| row.chars().position(|x| x == c).unwrap();
    let col = at(rows[caret], '^');
    let word: String = above.chars().skip(col).take(10).collect();
    assert_eq!(word, "bogus_name", "the caret under the word:\n{text}");
    assert!(above.contains('…'), "the line slid left:\n{text}");
    assert!(text.contains("to be read whole"), "the message's end is shown:\n{text}");
}

#[test]
fn compile_errors_pane_shows_the_failed_version_s_diagnostic_with_its_line() {
    let (_tmp, ws) = checked_workspace();
    let mut app = open_app(&ws, false).unwrap();
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
    let mut app = open_app(&ws, false).unwrap();
    let screen = screen_text(&app, 80, 24);
    assert!(screen.contains("vector-add") && screen.contains("versions") && screen.contains("compile errors"));
    assert!(screen.contains("a approve") && screen.contains("q quit"), "{screen}");
    press(&mut app, "?");
    // Tall enough: a line per action with what it does; at 80x24, every key and name in columns.
    let tall = screen_text(&app, 120, 40);
    let help = screen_text(&app, 80, 24);
    for (action, keys) in app.keymap.by_action() {
        assert!(tall.contains(action.describe()), "{action} missing from help:\n{tall}");
        let short = format!("{} {}", keys.join(", "), action.name());
        assert!(help.contains(&short), "`{short}` missing from help:\n{help}");
    }
    assert!(help.contains("i chat") && tall.contains("/model /context /clear /stop"), "{help}");
    snapshot("screen_help_80x24", &help);
    // Any key closes help.
    app.update(key(KeyCode::Esc));
    assert_eq!(screen_text(&app, 80, 24), screen);
}

#[test]
fn approve_and_reject_by_key_persist_in_the_history() {
    let (_tmp, ws) = checked_workspace();
    let mut app = open_app(&ws, false).unwrap();
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

/// Approving a version whose check did not pass here asks first, saying why; n keeps it as it
/// was, y approves. A version that passed its check is approved at once.
#[test]
fn approving_an_unchecked_version_asks_first() {
    let (_tmp, ws) = new_workspace();
    let pass = |stage| result(stage, Verdict::Pass, vec![], StageDetail::None);
    let mut skipped = result(Stage::Run, Verdict::Skipped, vec![], StageDetail::None);
    skipped.summary = "no GPU: run and check skipped (build, PTX/SASS and diffs work)".into();
    record(&ws, "v001", &[pass(Stage::Prepare), pass(Stage::Build), skipped]);
    record(&ws, "v002", &[pass(Stage::Prepare), pass(Stage::Build), pass(Stage::Run), pass(Stage::Check)]);
    let mut app = open_app(&ws, false).unwrap();
    let status = |id: &str| Store::open(&ws.join(".rung")).unwrap().version(id).unwrap().map(|r| r.status);
    press(&mut app, "a");
    let screen = screen_text(&app, 160, 30);
    assert!(
        screen.contains("approve v001? not checked here: run: no GPU: run and check skipped")
            && screen.contains("y approves"),
        "{screen}"
    );
    press(&mut app, "n");
    assert_eq!(status("v001"), Some(Status::Draft), "n approves nothing");
    press(&mut app, "ay");
    assert_eq!(status("v001"), Some(Status::Approved));
    press(&mut app, "ja");
    assert_eq!(status("v002"), Some(Status::Approved), "a checked version is approved at once");
}

#[test]
fn enter_on_a_diagnostic_shows_the_source_at_its_line_and_e_edits_there() {
    let (_tmp, ws) = checked_workspace();
    let mut app = open_app(&ws, false).unwrap();
    press(&mut app, "jj");
    app.update(key(KeyCode::Enter));
    assert_eq!(app.pane, Pane::Diagnostics, "Enter on a version with diagnostics moves to them");
    app.update(key(KeyCode::Enter));
    let jump = app.jump.clone().expect("a jump target");
    assert_eq!((jump.file, jump.line, jump.column), (PathBuf::from("versions/v003-triton.py"), 8, 39));
    // The source, inside rung: the line marked, a caret under column 39, the message under it.
    let source = std::fs::read_to_string(ws.join("versions/v003-triton.py")).unwrap();
    let line8 = source.lines().nth(7).unwrap();
    let screen = screen_text(&app, 120, 30);
    let rows: Vec<&str> = screen.lines().collect();
    let at = rows.iter().position(|r| r.contains(" 8 ▶ ")).unwrap_or_else(|| panic!("line 8 marked:\n{screen}"));
    assert!(rows[at].contains(line8.trim()), "{screen}");
    let caret = rows[at + 1];
    assert!(caret.contains("^ error: arange's range must be a power of 2"), "{screen}");
    // In characters: the box and the marker are wider than a byte.
    let chars = |s: &str, byte: usize| s[..byte].chars().count();
    let code_start =
        chars(rows[at], rows[at].find(line8.trim_start()).unwrap()) - (line8.len() - line8.trim_start().len());
    assert_eq!(chars(caret, caret.find('^').unwrap()), code_start + 38, "the caret under column 39:\n{screen}");
    assert!(screen.contains("versions/v003-triton.py:8:39 · Esc closes · e edits here"), "{screen}");
    // `e` opens the editor at that line; Esc alone closes the view.
    app.update(key(KeyCode::Char('e')));
    let edit = app.edit.clone().expect("an edit request");
    assert_eq!((edit.file, edit.line), (PathBuf::from("versions/v003-triton.py"), 8));
    app.update(key(KeyCode::Enter));
    app.update(key(KeyCode::Esc));
    assert!(!screen_text(&app, 120, 30).contains(" 8 ▶ "), "Esc closes the source view");
    app.update(key(KeyCode::Tab));
    assert_eq!(app.pane, Pane::Correctness);
    app.update(Event::Key(KeyEvent::new(KeyCode::BackTab, KeyModifiers::SHIFT)));
    app.update(Event::Key(KeyEvent::new(KeyCode::BackTab, KeyModifiers::SHIFT)));
    assert_eq!(app.pane, Pane::Versions);
}

#[test]
fn e_asks_for_the_editor_at_the_diagnostic_or_at_the_version_file() {
    let (_tmp, ws) = checked_workspace();
    let mut app = open_app(&ws, false).unwrap();
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

// ---- correctness, timing, log and profile panes ----

use rung::dtype::Tolerance;
use rung::model::report::VersionReport;
use rung::stages::run::{CheckDetail, OutputCheck, UserRung};
use rung::watch::{EventKind, JobKind, JobState, WatchEvent};

const TOL: Tolerance = Tolerance { atol: 1e-6, rtol: 1e-5, min_psnr: None, min_cosine: None };

fn sizes(n: i64) -> rung::spec::SizeSet {
    [("n".to_string(), n)].into_iter().collect()
}

/// A real comparison, from the metrics the check stage uses: a 64×64 output with two elements
/// off and one NaN when `broken`, exact otherwise.
fn output_check(broken: bool) -> OutputCheck {
    let reference: Vec<f64> = (0..64 * 64).map(|i| (i as f64 * 0.37).sin()).collect();
    let mut output = reference.clone();
    if broken {
        output[3 * 64 + 17] += 0.5;
        output[40 * 64 + 50] -= 0.25;
        output[10 * 64 + 10] = f64::NAN;
    }
    let comparison = rung::metrics::compare(&output, &reference, &[64, 64], &TOL);
    let reason = rung::metrics::judge(&comparison, &TOL);
    OutputCheck { sizes: sizes(4096), output: "c".into(), pass: reason.is_none(), reason, comparison }
}

fn check_detail(broken: bool) -> StageDetail {
    let rung = |name: &str, pass: bool| UserRung {
        sizes: sizes(4096),
        name: name.into(),
        pass,
        error: (!pass).then(|| "AssertionError: c[3, 17] is 0.5 too large".to_string()),
        traceback: (!pass).then(|| {
            "Traceback (most recent call last):\n  File \"checks.py\", line 9, in no_outliers\n    assert err < 0.1"
                .into()
        }),
    };
    StageDetail::Check(CheckDetail {
        seed: 4242,
        results: vec![output_check(broken)],
        user_rungs: vec![rung("finite", true), rung("no_outliers", !broken)],
        own: vec![],
        warnings: vec![],
    })
}

/// v001 checked and passed, v002 checked and failed (two elements off, one NaN).
fn correctness_workspace() -> (tempfile::TempDir, PathBuf) {
    let (tmp, ws) = new_workspace();
    let pass = |stage| result(stage, Verdict::Pass, vec![], StageDetail::None);
    record(
        &ws,
        "v001",
        &[
            pass(Stage::Prepare),
            pass(Stage::Build),
            pass(Stage::Run),
            result(Stage::Check, Verdict::Pass, vec![], check_detail(false)),
        ],
    );
    record(
        &ws,
        "v002",
        &[
            pass(Stage::Prepare),
            pass(Stage::Build),
            pass(Stage::Run),
            result(Stage::Check, Verdict::Fail, vec![], check_detail(true)),
        ],
    );
    (tmp, ws)
}

fn running(app: &mut App, version: &str, job: JobKind) {
    app.update(Event::Watch(Box::new(WatchEvent {
        unix_ms: 1_764_633_600_000,
        kind: EventKind::Job { version: version.into(), job, state: JobState::Running, generation: 1, why: None },
    })));
}

#[test]
fn correctness_pane_empty_and_running() {
    let (_tmp, ws) = new_workspace();
    let mut app = open_app(&ws, false).unwrap();
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Correctness, w, h);
        assert!(text.contains("v001") && text.contains("not checked yet"), "{text}");
        snapshot(&format!("correctness_empty_{w}x{h}"), &text);
    }
    running(&mut app, "v001", JobKind::Gpu);
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Correctness, w, h);
        assert!(text.contains("v001: running and checking…"), "{text}");
        snapshot(&format!("correctness_running_{w}x{h}"), &text);
    }
}

#[test]
fn correctness_pane_shows_the_warnings_of_a_pass() {
    let (_tmp, ws) = new_workspace();
    let mut detail = check_detail(false);
    let StageDetail::Check(d) = &mut detail else { unreachable!() };
    d.warnings =
        vec!["the rule is vacuous here: an all-zero output passes KernelBench's rule too (at the test)".into()];
    let pass = |stage| result(stage, Verdict::Pass, vec![], StageDetail::None);
    record(
        &ws,
        "v001",
        &[
            pass(Stage::Prepare),
            pass(Stage::Build),
            pass(Stage::Run),
            result(Stage::Check, Verdict::Pass, vec![], detail),
        ],
    );
    let app = open_app(&ws, false).unwrap();
    let text = pane_text(&app, Pane::Correctness, 160, 40);
    let line = text.lines().find(|l| l.contains('⚠')).unwrap_or_else(|| panic!("no warning shown: {text}"));
    assert!(line.contains("an all-zero output passes"), "{line}");
    // Above the figures, where it is seen first.
    let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle}: {text}"));
    assert!(at("⚠") < at("n=4096"), "{text}");
}

#[test]
fn correctness_pane_passed_shows_the_metrics_and_the_named_rungs() {
    let (_tmp, ws) = correctness_workspace();
    let app = open_app(&ws, false).unwrap();
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Correctness, w, h);
        assert!(text.contains("check pass") && text.contains("seed 4242"), "{text}");
        let row = text.lines().find(|l| l.contains("n=4096")).unwrap_or_else(|| panic!("{text}"));
        // Exact: no error, infinite PSNR, cosine 1, no mismatches of 4096, no NaN or Inf.
        assert!(row.contains('✓') && row.contains(" 0 ") && row.contains('∞'), "{row}");
        assert!(row.contains("1.000000") && row.contains("0/4096") && row.contains("0/0"), "{row}");
        assert!(!text.contains("mismatches in"), "nothing to list: {text}");
        assert!(text.contains("error map of c: no error in any cell"), "{text}");
        assert!(text.contains("✓ finite (n=4096) ok") && text.contains("✓ no_outliers (n=4096) ok"), "{text}");
        snapshot(&format!("correctness_passed_{w}x{h}"), &text);
    }
}

#[test]
fn correctness_pane_failed_shows_the_mismatch_indices_the_heat_map_and_the_traceback() {
    let (_tmp, ws) = correctness_workspace();
    let mut app = open_app(&ws, false).unwrap();
    press(&mut app, "j");
    assert_eq!(app.selected_version().unwrap().id, "v002");
    let c = output_check(true).comparison;
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Correctness, w, h);
        assert!(text.contains("check fail"), "{text}");
        let row = text.lines().find(|l| l.contains("n=4096")).unwrap_or_else(|| panic!("{text}"));
        assert!(row.contains('✗') && row.contains(&format!("{}/4096", c.mismatches)) && row.contains("1/0"), "{row}");
        assert!(row.contains(&format!("{:.2e}", c.max_abs_err)), "max abs err {}: {row}", c.max_abs_err);
        // The first mismatches in index order, with their two-dimensional indices.
        assert!(text.contains(&format!("first 3 of {} mismatches in c", c.mismatches)), "{text}");
        let first = text.lines().find(|l| l.contains("[3, 17]")).unwrap_or_else(|| panic!("{text}"));
        assert!(first.contains("|diff| 5.00e-1"), "{first}");
        assert!(text.contains("[10, 10]") && text.contains("[40, 50]"), "{text}");
        // The heat map: the 0.5 error's cell is the darkest shade.
        assert!(text.contains("error map of c (32×32 cells; █ = 5.00e-1; NaN/Inf not mapped)"), "{text}");
        assert!(text.contains('█'), "{text}");
        assert!(text.contains("✗ no_outliers (n=4096): AssertionError: c[3, 17] is 0.5 too large"), "{text}");
        if h >= 60 {
            assert!(text.contains("File \"checks.py\", line 9, in no_outliers"), "{text}");
        }
        snapshot(&format!("correctness_failed_{w}x{h}"), &text);
    }
}

#[test]
fn the_heat_map_puts_the_largest_error_in_its_cell() {
    let (_tmp, ws) = correctness_workspace();
    let mut app = open_app(&ws, false).unwrap();
    press(&mut app, "j");
    let text = pane_text(&app, Pane::Correctness, 200, 60);
    let lines: Vec<&str> = text.lines().collect();
    let top = lines.iter().position(|l| l.contains("error map of c")).unwrap();
    // 64×64 in 32×32 cells, two characters a cell: element (3, 17) is in cell (1, 8), the
    // darkest shade; the NaN at (10, 10) is counted, not mapped: cell (5, 5) is blank.
    let row = |r: usize| lines[top + 1 + r].trim_start_matches(['"', '│']).to_string();
    let cell = |r: usize, c: usize| row(r).chars().nth(2 + 2 * c).unwrap();
    assert_eq!(cell(1, 8), '█', "{}", row(1));
    assert_eq!(cell(5, 5), ' ', "{}", row(5));
    assert_eq!(cell(0, 0), ' ', "no error there: {}", row(0));
    // (40, 50): 0.25, half the largest.
    assert_eq!(cell(20, 25), '▒', "{}", row(20));
}

/// A workspace with benches on two GPUs, the reference timed on the first.
fn timing_workspace() -> (tempfile::TempDir, PathBuf) {
    let (tmp, ws) = checked_workspace();
    let mut on_h100 = bench(0.0300, None);
    if let StageDetail::Bench(b) = &mut on_h100 {
        b.gpu = "NVIDIA H100 80GB HBM3".into();
        b.uuid = "GPU-1111aaaa-2222".into();
    }
    let mut with_reference = bench(0.0110, Some(2.2));
    if let StageDetail::Bench(b) = &mut with_reference {
        let mut r = b.speedups[0].clone();
        r.role = "reference".into();
        r.against = "reference.py".into();
        r.other.median = 0.0500;
        b.speedups.push(r);
    }
    let pass = |stage| result(stage, Verdict::Pass, vec![], StageDetail::None);
    record(&ws, "v001", &[pass(Stage::Check), result(Stage::Bench, Verdict::Pass, vec![], on_h100)]);
    record(&ws, "v002", &[pass(Stage::Check), result(Stage::Bench, Verdict::Pass, vec![], with_reference)]);
    (tmp, ws)
}

#[test]
fn timing_pane_empty_and_running() {
    let (_tmp, ws) = new_workspace();
    let mut app = open_app(&ws, false).unwrap();
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Timing, w, h);
        assert!(text.contains("no bench in the history yet"), "{text}");
        snapshot(&format!("timing_empty_{w}x{h}"), &text);
    }
    running(&mut app, "v002", JobKind::Gpu);
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Timing, w, h);
        assert!(text.contains("running v002"), "{text}");
        snapshot(&format!("timing_running_{w}x{h}"), &text);
    }
}

#[test]
fn timing_pane_charts_every_version_with_the_best_marked() {
    let (_tmp, ws) = checked_workspace();
    let app = open_app(&ws, false).unwrap();
    assert_eq!(app.timing.len(), 1);
    let gpu = &app.timing[0];
    assert_eq!(gpu.points.iter().map(|p| p.version.as_str()).collect::<Vec<_>>(), ["v001", "v002"]);
    // 12.3 µs at 82% of the ceiling: the ceiling's time is 10.09 µs.
    assert!((gpu.roofline_us.unwrap() - 12.3 * 0.82).abs() < 1e-9, "{:?}", gpu.roofline_us);
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Timing, w, h);
        assert!(text.contains("★ best v002 12.30 µs"), "{text}");
        assert!(text.contains("NVIDIA H200") && text.contains("roofline 10.09 µs"), "{text}");
        assert!(text.contains("v001") && text.contains("v003"), "every version on the x axis: {text}");
        assert!(!text.contains("reference"), "no bench timed the reference: {text}");
        snapshot(&format!("timing_passed_{w}x{h}"), &text);
    }
}

#[test]
fn timing_pane_splits_by_gpu_and_draws_the_reference_and_baseline() {
    let (_tmp, ws) = timing_workspace();
    let mut app = open_app(&ws, false).unwrap();
    assert_eq!(app.timing.iter().map(|g| g.gpu.as_str()).collect::<Vec<_>>(), ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]);
    // v001's newest bench is on the H100; on the H200 its older one stays.
    assert_eq!(app.timing[1].points.len(), 1);
    press(&mut app, "b");
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Timing, w, h);
        assert!(text.contains("NVIDIA H200") && text.contains("NVIDIA H100 80GB HBM3 GPU-1111aaaa"), "{text}");
        assert!(text.contains("reference 50.00 µs") && text.contains("★ best v002 11.00 µs"), "{text}");
        assert!(text.contains("★ best v001 30.00 µs"), "the H100's own best: {text}");
        assert!(text.contains("baseline v001"), "{text}");
        snapshot(&format!("timing_gpus_{w}x{h}"), &text);
    }
}

#[test]
fn timing_pane_leaves_out_failed_benches() {
    let (_tmp, ws) = checked_workspace();
    record(&ws, "v003", &[result(Stage::Bench, Verdict::Fail, vec![], bench(0.001, None))]);
    let app = open_app(&ws, false).unwrap();
    assert!(app.timing[0].points.iter().all(|p| p.version != "v003"));
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Timing, w, h);
        // A failed bench's 1 µs would have been the best.
        assert!(text.contains("★ best v002") && !text.contains("1.00 µs"), "{text}");
        snapshot(&format!("timing_failed_{w}x{h}"), &text);
    }
}

/// A version's job that ends reloads that version and the history recorded since, without a
/// new scan: a bench recorded after the App opened becomes the timing's point and the best, a
/// failed one after it leaves that point as it was, and the version's own row shows its new rungs.
#[test]
fn a_finished_job_reloads_its_version_and_the_new_history_rows() {
    let (_tmp, ws) = checked_workspace();
    let mut app = open_app(&ws, false).unwrap();
    let best = |app: &App| app.timing[0].best().map(|p| (p.version.clone(), (p.median_us * 100.0).round() / 100.0));
    assert_eq!(best(&app), Some(("v002".to_string(), 12.3)));
    record(&ws, "v001", &[result(Stage::Bench, Verdict::Pass, vec![], bench(0.005, None))]);
    app.update(done("v001", Verdict::Pass, vec![]));
    assert_eq!(best(&app), Some(("v001".to_string(), 5.0)), "the new row is read");
    record(&ws, "v001", &[result(Stage::Bench, Verdict::Fail, vec![], bench(0.001, None))]);
    app.update(done("v001", Verdict::Fail, vec![]));
    assert_eq!(best(&app), Some(("v001".to_string(), 5.0)), "a failed bench is no point");
    let v001 = app.versions.iter().find(|v| v.id == "v001").unwrap();
    assert_eq!(v001.verdicts.get(&Stage::Bench), Some(&Verdict::Fail), "the version's row is reloaded");
    // v003 fails to build; its build passing now shows without any other event.
    record(&ws, "v003", &[result(Stage::Build, Verdict::Pass, vec![], StageDetail::None)]);
    app.update(done("v003", Verdict::Pass, vec![]));
    let v003 = app.versions.iter().find(|v| v.id == "v003").unwrap();
    assert_eq!(v003.verdicts.get(&Stage::Build), Some(&Verdict::Pass));
}

/// What another process records (a `rung check` in another terminal, an agent's check or review
/// over MCP) shows within a tick, with no event from this TUI's watcher: the TUI follows the
/// history itself.
#[test]
fn results_and_reviews_recorded_elsewhere_show_at_the_next_tick() {
    let (_tmp, ws) = new_workspace();
    let mut app = open_app(&ws, false).unwrap();
    let text = pane_text(&app, Pane::Correctness, 100, 30);
    assert!(text.contains("not checked yet"), "{text}");
    assert!(!app.update(Event::Tick), "nothing changed: nothing to draw");
    // Another process: its own handle on the history.
    let pass = |stage| result(stage, Verdict::Pass, vec![], StageDetail::None);
    record(&ws, "v001", &[pass(Stage::Prepare), pass(Stage::Build)]);
    let mut other = Store::open(&ws.join(".rung")).unwrap();
    let w = Workspace::open(&ws).unwrap();
    rung::service::review(&w, &mut other, "v002", Status::Rejected, Some("slower than v001")).unwrap();
    assert!(app.update(Event::Tick), "the tick saw the new rows");
    let v001 = app.versions.iter().find(|v| v.id == "v001").unwrap();
    assert_eq!(v001.verdicts.get(&Stage::Build), Some(&Verdict::Pass));
    let v002 = app.versions.iter().find(|v| v.id == "v002").unwrap();
    assert_eq!(v002.status, Some(Status::Rejected));
    assert_eq!(v002.reason.as_deref(), Some("slower than v001"));
    let screen = screen_text(&app, 160, 40);
    assert!(screen.lines().any(|l| l.contains("v002") && l.contains("✗ reje")), "{screen}");
    assert!(!app.update(Event::Tick), "and once seen, nothing more");
}

fn done(version: &str, verdict: Verdict, stages: Vec<StageResult>) -> Event {
    Event::Watch(Box::new(WatchEvent {
        unix_ms: 1_764_633_601_000,
        kind: EventKind::Done {
            version: version.into(),
            generation: 1,
            report: VersionReport {
                id: version.into(),
                path: PathBuf::from(format!("versions/{version}.cu")),
                kind: rung::workspace::VersionKind::Cuda,
                status: Status::Draft,
                source_hash: "0".repeat(64),
                verdict,
                stages,
                ran_on: None,
            },
        },
    }))
}

#[test]
fn log_pane_in_every_state() {
    let (_tmp, ws) = new_workspace();
    let mut app = open_app(&ws, false).unwrap();
    let states: [(&str, &[&str]); 4] = [
        ("empty", &["nothing yet"]),
        ("running", &["v001 build running"]),
        ("passed", &["v001 done: pass", "  check pass: recorded check"]),
        ("failed", &["v003 done: fail", "  build fail: does not build", "v003 build failed: the compiler crashed"]),
    ];
    for (state, wanted) in states {
        match state {
            "running" => running(&mut app, "v001", JobKind::Build),
            "passed" => {
                let pass = |stage| result(stage, Verdict::Pass, vec![], StageDetail::None);
                app.update(done("v001", Verdict::Pass, vec![pass(Stage::Build), pass(Stage::Check)]));
            }
            "failed" => {
                let mut fail = result(Stage::Build, Verdict::Fail, vec![], StageDetail::None);
                fail.summary = "does not build".into();
                app.update(done("v003", Verdict::Fail, vec![fail]));
                app.update(Event::Watch(Box::new(WatchEvent {
                    unix_ms: 1_764_633_602_000,
                    kind: EventKind::Job {
                        version: "v003".into(),
                        job: JobKind::Build,
                        state: JobState::Failed,
                        generation: 2,
                        why: Some("the compiler crashed".into()),
                    },
                })));
            }
            _ => {}
        }
        for (w, h) in SIZES {
            let text = pane_text(&app, Pane::Log, w, h);
            for line in wanted {
                assert!(text.contains(line), "{state}: `{line}` missing:\n{text}");
            }
            if state != "empty" {
                // Times are the events' own, UTC: 1764633600 s is 00:00:00.
                assert!(text.contains("00:00:00 v001 build running"), "{text}");
            }
            snapshot(&format!("log_{state}_{w}x{h}"), &text);
        }
    }
}

#[test]
fn log_pane_scrolls_back_and_keeps_its_newest_lines() {
    let (_tmp, ws) = new_workspace();
    let mut app = open_app(&ws, false).unwrap();
    for i in 0..tui::app::LOG_LINES + 50 {
        app.log(0, tui::theme::Role::Text, format!("line {i}"));
    }
    assert_eq!(app.log.len(), tui::app::LOG_LINES);
    assert_eq!(app.log.front().unwrap().text, "line 50");
    let text = pane_text(&app, Pane::Log, 80, 24);
    assert!(text.contains(&format!("line {}", tui::app::LOG_LINES + 49)), "{text}");
    app.focus(Pane::Log);
    press(&mut app, "kkk");
    let back = pane_text(&app, Pane::Log, 80, 24);
    assert!(back.contains("3 lines back") && !back.contains(&format!("line {}", tui::app::LOG_LINES + 49)), "{back}");
    assert!(back.contains(&format!("line {}", tui::app::LOG_LINES + 46)), "{back}");
    press(&mut app, "jjj");
    let again = pane_text(&app, Pane::Log, 80, 24);
    assert!(!again.contains("lines back") && again.contains(&format!("line {}", tui::app::LOG_LINES + 49)), "{again}");
}

#[test]
fn profile_pane_in_every_state() {
    let (_tmp, ws) = correctness_workspace();
    let mut app = open_app(&ws, false).unwrap();
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Profile, w, h);
        assert!(text.contains("no profile of v001 yet"), "{text}");
        assert!(text.contains("P profiles it with Nsight Compute"), "{text}");
        snapshot(&format!("profile_empty_{w}x{h}"), &text);
    }
    // A profile running (P): the pane says which and with what.
    app.profiling = Some(("v001".into(), "profile".into()));
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Profile, w, h);
        assert!(text.contains("profile of v001 running…"), "{text}");
        snapshot(&format!("profile_running_{w}x{h}"), &text);
    }
    app.profiling = None;
    // Nsight Compute's real tables (the demo's naive kernel for v001, the float4 one for v002,
    // made from it), and a memcheck finding at its line.
    let kernels = |v: &str| {
        rung::profile::parse_raw(
            &std::fs::read_to_string(format!("{}/tests/fixtures/profile/ncu-raw-{v}.csv", env!("CARGO_MANIFEST_DIR")))
                .unwrap(),
        )
        .unwrap()
    };
    let profiled = |v: &str| {
        let mut r = result(
            Stage::Profile,
            Verdict::Pass,
            vec![],
            StageDetail::Profile(rung::stages::profile::ProfileDetail {
                sizes: sizes(16384),
                kernels: kernels(v),
                report: None,
                csv: None,
                command: "ncu ...".into(),
                formula_bytes: Some(1.0738e9),
                traffic_ratio: Some(if v == "v001" { 1.54 } else { 0.98 }),
            }),
        );
        r.summary = format!("profiled {v}");
        r
    };
    record(&ws, "v001", &[profiled("v001")]);
    let finding = Diagnostic::error(
        "versions/v002-float4.cu",
        Pos::new(14, 0),
        "memcheck: Invalid __global__ write of size 4 bytes in vadd",
    )
    .with_help("by thread (0,0,0) in block (3,0,0)");
    let mut mem = result(Stage::Memcheck, Verdict::Fail, vec![finding], StageDetail::None);
    mem.summary = "memcheck: 1 finding".into();
    record(&ws, "v002", &[profiled("v005"), mem]);
    let mut store = Store::open(&ws.join(".rung")).unwrap();
    store.set_parent("v002", Some("v001")).unwrap();
    app.refresh();
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Profile, w, h);
        assert!(text.contains("profile pass  profiled v001"), "{text}");
        assert!(text.contains("latency-bound") && text.contains("3909 µs"), "{text}");
        assert!(text.contains("DRAM traffic 1.54x the bytes"), "{text}");
        snapshot(&format!("profile_passed_{w}x{h}"), &text);
    }
    app.select(1);
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Profile, w, h);
        // Beside its parent's: 250.9 µs against 3908.5, 93.6% less.
        let row = text.lines().find(|l| l.contains("duration")).unwrap_or_else(|| panic!("{text}"));
        assert!(row.contains("251 µs") && row.contains("3909 µs") && row.contains("-93.6%"), "{row}");
        assert!(text.contains("memory-bound") && text.contains("beside v001 (parent)"), "{text}");
        assert!(text.contains("memcheck fail") && text.contains("versions/v002-float4.cu:14"), "{text}");
        snapshot(&format!("profile_failed_{w}x{h}"), &text);
    }
}

// ---- layout and keys ----

#[test]
fn wide_screens_put_the_detail_pane_beside_the_versions_and_errors() {
    let (_tmp, ws) = correctness_workspace();
    let mut app = open_app(&ws, false).unwrap();
    let wide = screen_text(&app, 200, 60);
    let top = wide.lines().nth(1).unwrap();
    assert!(top.contains("versions") && top.contains("correctness"), "side by side: {top}");
    assert!(wide.contains("compile errors") && wide.contains("seed 4242"), "{wide}");
    snapshot("screen_wide_200x60", &wide);
    // Narrow: the versions on top, the compile errors below; Tab brings the next pane there.
    let narrow = screen_text(&app, 80, 24);
    assert!(narrow.contains("compile errors") && !narrow.contains("seed 4242"), "{narrow}");
    app.update(key(KeyCode::Tab));
    app.update(key(KeyCode::Tab));
    assert_eq!(app.pane, Pane::Correctness);
    let narrow = screen_text(&app, 80, 24);
    assert!(narrow.contains("seed 4242") && !narrow.contains("compile errors"), "{narrow}");
    snapshot("screen_narrow_correctness_80x24", &narrow);
    // On the wide screen the errors stay on the left and the right follows the focus.
    app.update(key(KeyCode::Tab));
    let wide = screen_text(&app, 200, 60);
    assert!(wide.contains("compile errors") && wide.contains("no bench in the history yet"), "{wide}");
}

#[test]
fn z_zooms_the_focused_pane_and_gives_the_screen_back() {
    let (_tmp, ws) = correctness_workspace();
    let mut app = open_app(&ws, false).unwrap();
    app.focus(Pane::Correctness);
    press(&mut app, "z");
    assert!(app.zoomed);
    for (w, h) in SIZES {
        let text = screen_text(&app, w, h);
        assert!(text.contains("[zoom]") && text.contains("seed 4242"), "{text}");
        assert!(!text.contains(" versions ") && !text.contains(" compile errors "), "only the zoomed pane: {text}");
    }
    press(&mut app, "z");
    assert!(screen_text(&app, 80, 24).contains(" versions "));
}

#[test]
fn the_command_palette_runs_an_action_by_name() {
    let (_tmp, ws) = checked_workspace();
    let mut app = open_app(&ws, false).unwrap();
    press(&mut app, ":zo");
    let text = screen_text(&app, 80, 24);
    assert!(text.contains(":zo") && text.contains("zoom the focused pane"), "{text}");
    assert!(!text.contains("approve the selected"), "filtered: {text}");
    snapshot("palette_80x24", &text);
    app.update(key(KeyCode::Enter));
    assert!(app.zoomed && app.mode == tui::app::Mode::Normal);
    // Tab completes; Enter runs the completed name.
    press(&mut app, ":appr");
    app.update(key(KeyCode::Tab));
    assert_eq!(app.mode, tui::app::Mode::Palette { input: "approve".into(), selected: 0 });
    app.update(key(KeyCode::Esc));
    assert_eq!(app.mode, tui::app::Mode::Normal);
    press(&mut app, ":nothing-like-it");
    app.update(key(KeyCode::Enter));
    assert_eq!(app.message.as_deref(), Some("no action matches `nothing-like-it`"));
    // Typed keys are the palette's, not actions: `q` in a name does not quit.
    press(&mut app, ":quiq");
    assert!(!app.quit);
    app.update(key(KeyCode::Esc));
}

/// Versions that run unsandboxed (the mode off, or no Landlock) are named in the header.
#[test]
fn the_header_warns_when_versions_run_unsandboxed() {
    let (_tmp, ws) = checked_workspace();
    let mut app = open_app(&ws, false).unwrap();
    assert!(!screen_text(&app, 120, 24).contains('⚠'));
    app.unsandboxed = Some("sandbox off");
    let text = screen_text(&app, 120, 24);
    assert!(text.lines().next().unwrap().contains("⚠ sandbox off"), "{text}");
}

#[test]
fn b_pins_the_baseline_where_rung_check_can_read_it() {
    let (_tmp, ws) = checked_workspace();
    let mut app = open_app(&ws, false).unwrap();
    press(&mut app, "jb");
    let file = ws.join(".rung").join("baseline");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "v002\n");
    let text = screen_text(&app, 80, 24);
    assert!(text.contains("⚑ baseline v002") && text.contains("v002⚑"), "{text}");
    // A new TUI reads it back; b on the baseline unpins it.
    let mut again = open_app(&ws, false).unwrap();
    assert_eq!(again.baseline.as_deref(), Some("v002"));
    press(&mut again, "jb");
    assert!(!file.exists() && again.baseline.is_none());
}

#[test]
fn clicks_select_versions_and_panes_and_the_wheel_scrolls_the_pane_under_it() {
    use crossterm::event::{MouseButton, MouseEvent, MouseEventKind};
    let (_tmp, ws) = checked_workspace();
    let mut app = open_app(&ws, false).unwrap();
    app.update(Event::Resize(200, 60));
    let mouse = |kind, column, row| Event::Mouse(MouseEvent { kind, column, row, modifiers: KeyModifiers::NONE });
    // Screen row 0 is the title, 1 the versions' border, 2 its header, 3.. its rows.
    app.update(mouse(MouseEventKind::Down(MouseButton::Left), 10, 5));
    assert_eq!(app.selected_version().unwrap().id, "v003");
    app.update(mouse(MouseEventKind::Down(MouseButton::Left), 10, 4));
    assert_eq!(app.selected_version().unwrap().id, "v002");
    // The right half is the detail pane.
    app.update(mouse(MouseEventKind::Down(MouseButton::Left), 150, 30));
    assert_eq!(app.pane, Pane::Correctness);
    // The wheel over the versions moves the selection without taking the focus.
    app.update(mouse(MouseEventKind::ScrollUp, 10, 4));
    assert_eq!((app.selected_version().unwrap().id.as_str(), app.pane), ("v001", Pane::Correctness));
    app.update(mouse(MouseEventKind::ScrollDown, 150, 30));
    assert_eq!(app.scroll.get(&Pane::Correctness), Some(&1));
    // With the mouse off in the settings, clicks do nothing.
    app.mouse = false;
    app.update(mouse(MouseEventKind::Down(MouseButton::Left), 10, 5));
    assert_eq!(app.selected_version().unwrap().id, "v001");
}

// ---- settings and themes ----

use tui::config::{Config, parse_key, problem_line};
use tui::theme::Theme;

fn config_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn keys_of(c: &Config, action: Action) -> Vec<String> {
    c.keymap.by_action().into_iter().find(|(a, _)| *a == action).map(|(_, k)| k).unwrap_or_default()
}

#[test]
fn the_embedded_defaults_bind_every_action() {
    let c = Config::default();
    for a in Action::ALL {
        assert!(!keys_of(&c, a).is_empty(), "{a} has no default key");
    }
    assert_eq!(keys_of(&c, Action::Quit), ["q", "Ctrl-c"]);
    assert_eq!(keys_of(&c, Action::PrevPane), ["Shift-Tab"]);
    assert_eq!(
        (c.theme.name.as_str(), c.syntax_theme.as_str(), c.tick.as_millis(), c.mouse),
        ("dark", "rung-dark", 100, true)
    );
    // A missing file is no problem.
    let (_, problem) = Config::load(Some(Path::new("/nonexistent/rung/config.toml")), None);
    assert!(problem.is_none());
}

#[test]
fn a_user_file_is_laid_over_the_defaults() {
    // The agent's `[agent]` table shares the file; it is the agent's to read.
    let (_dir, path) = config_file(
        "[settings]\ntheme = \"light\"\ntick_ms = 50\nmouse = false\n\n[keys]\napprove = [\"A\", \"Ctrl-y\"]\nzoom = []\nchat = [\"c\"]\n\n\
         [agent]\nprovider = \"local\"\n",
    );
    let (c, problem) = Config::load(Some(&path), None);
    assert!(problem.is_none(), "{problem:?}");
    assert_eq!(keys_of(&c, Action::Approve), ["A", "Ctrl-y"]);
    assert!(keys_of(&c, Action::Zoom).is_empty(), "[] unbinds");
    // What the file does not name keeps its default, less a key the file gives another action.
    assert_eq!(keys_of(&c, Action::Reject), ["r"]);
    assert!(keys_of(&c, Action::Compare).is_empty(), "`c` is the chat's now");
    assert_eq!(
        (c.theme.name.as_str(), c.syntax_theme.as_str(), c.tick.as_millis(), c.mouse),
        ("light", "rung-light", 50, false)
    );
    // The keymap the file gives is the one keys go through, and the one help lists.
    let press = |code| KeyEvent::new(code, KeyModifiers::NONE);
    assert_eq!(c.keymap.action(&press(KeyCode::Char('A'))), Some(Action::Approve));
    assert_eq!(c.keymap.action(&press(KeyCode::Char('a'))), None);
    assert_eq!(c.keymap.action(&press(KeyCode::Char('c'))), Some(Action::Chat));
    assert_eq!(c.keymap.action(&KeyEvent::new(KeyCode::Char('y'), KeyModifiers::CONTROL)), Some(Action::Approve));
    // --theme wins over the file.
    let (c, _) = Config::load(Some(&path), Some("dark"));
    assert_eq!(c.theme.name, "dark");
}

#[test]
fn a_bad_file_names_its_line_column_and_key_and_the_defaults_are_used() {
    let cases: [(&str, &str, &str); 6] = [
        ("[keys]\napprove = [\"a\"]\naprove = [\"x\"]\n", "config.toml:3:1", "keys.aprove: unknown action `aprove`"),
        (
            "[keys]\nreject = [\"r\", \"Ctlr-r\"]\n",
            "config.toml:2:16",
            "keys.reject: `Ctlr` in `Ctlr-r` is not a modifier",
        ),
        (
            "[settings]\ntheme = \"solarized\"\n",
            "config.toml:2:9",
            "settings.theme: no theme `solarized`; the themes are: dark, light",
        ),
        ("[settings]\ntick_ms = 1\n", "config.toml:2:11", "settings.tick_ms: 1 ms is out of range"),
        ("[settings]\ncolour = \"red\"\n", "config.toml:2:1", "settings.colour: unknown field `colour`"),
        ("[keys\napprove = [\"a\"]\n", "config.toml:1:", "invalid TOML"),
    ];
    for (text, at, says) in cases {
        let (_dir, path) = config_file(text);
        let (c, problem) = Config::load(Some(&path), None);
        let d = problem.unwrap_or_else(|| panic!("no problem found in {text:?}"));
        let line = problem_line(&d);
        assert!(line.contains(at), "{text:?}: wanted {at} in {line}");
        assert!(line.contains(says), "{text:?}: wanted `{says}` in {line}");
        assert!(line.ends_with("using the default settings and keys"), "{line}");
        assert_eq!(keys_of(&c, Action::Approve), ["a"], "the defaults are in use");
        assert_eq!(c.theme.name, "dark");
    }
}

#[test]
fn a_bad_file_still_opens_the_tui_and_says_why_on_the_bottom_line() {
    let (_tmp, ws) = checked_workspace();
    let (_dir, path) = config_file("[keys]\napprove = [\"nokey\"]\n");
    let (config, problem) = Config::load(Some(&path), None);
    let mut app = open_app(&ws, false).unwrap();
    app.keymap = config.keymap;
    app.say(tui::theme::Role::Fail, problem_line(&problem.unwrap()));
    let text = screen_text(&app, 200, 60);
    assert!(text.contains("config.toml:2:12: keys.approve: `nokey` is not a key"), "{text}");
    press(&mut app, "a");
    let status = Store::open(&ws.join(".rung")).unwrap().version("v001").unwrap().unwrap().status;
    assert_eq!(status, Status::Approved, "the default `a` still approves");
}

#[test]
fn key_names_parse_and_print_the_same_way() {
    for name in ["a", "?", ":", "Ctrl-z", "Alt-x", "Shift-Tab", "Enter", "Esc", "Tab", "Space", "PageUp", "F5", "-"] {
        let key = parse_key(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let printed = tui::action::key_name(&key);
        assert_eq!(parse_key(&printed), Ok(key), "{name} printed as {printed}");
    }
    assert!(parse_key("Hyper-a").unwrap_err().contains("not a modifier"));
    assert!(parse_key("F13").unwrap_err().contains("not a key"));
}

#[test]
fn the_config_file_follows_xdg_config_home() {
    use rung::agent::config::user_path_in;
    assert_eq!(
        user_path_in(Some("/x/conf".into()), Some("/home/u".into())),
        Some(PathBuf::from("/x/conf/rung/config.toml"))
    );
    assert_eq!(
        user_path_in(Some("".into()), Some("/home/u".into())),
        Some(PathBuf::from("/home/u/.config/rung/config.toml"))
    );
    assert_eq!(user_path_in(None, None), None);
}

#[test]
fn every_embedded_theme_parses_and_has_a_dark_and_a_light() {
    assert_eq!(Theme::names(), ["dark", "light"]);
    for name in Theme::names() {
        let t = Theme::named(&name).unwrap();
        assert_eq!(t.name, name);
        // Its syntax theme is embedded too and colours PTX's instructions.
        let syntax = tui::theme::syntax(&t.syntax).unwrap();
        assert!(syntax.scopes.iter().any(|s| format!("{:?}", s.scope).contains("keyword")), "{name}");
        assert!(syntax.settings.background.is_some(), "{name}");
    }
    assert_eq!(tui::theme::syntax_names(), ["rung-dark", "rung-light"]);
    let (_tmp, ws) = new_workspace();
    let app = open_app(&ws, false).unwrap();
    tui::theme::syntax(&app.syntax_theme).expect("the TUI's default syntax theme is embedded");
    assert!(Theme::named("nope").unwrap_err().contains("the themes are: dark, light"));
    // A theme file with a role missing or a bad colour says which.
    let dark = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/themes/dark.toml")).unwrap();
    let missing = dark.replace("pass = \"green\"\n", "");
    let err = Theme::parse(&missing, Path::new("themes/x.toml")).unwrap_err();
    assert!(err.message.contains("no colour for `pass`"), "{err}");
    let bad = dark.replace("fail = \"red\"", "fail = \"reddish\"");
    let err = Theme::parse(&bad, Path::new("themes/x.toml")).unwrap_err();
    assert!(err.to_string().contains("themes/x.toml:") && err.message.contains("`reddish` is not a colour"), "{err}");
}

/// Every colour on the screen, foreground and background.
fn colours(app: &App, width: u16, height: u16) -> Vec<ratatui::style::Color> {
    let mut term = Terminal::new(TestBackend::new(width, height)).unwrap();
    term.draw(|f| tui::view::draw(app, f)).unwrap();
    let buf = term.backend().buffer().clone();
    buf.content().iter().flat_map(|c| [c.fg, c.bg]).filter(|c| *c != ratatui::style::Color::Reset).collect()
}

#[test]
fn no_color_means_no_colour_at_all_and_themes_differ() {
    let (_tmp, ws) = correctness_workspace();
    let mut app = open_app(&ws, false).unwrap();
    press(&mut app, "j");
    app.focus(Pane::Correctness);
    assert!(colours(&app, 200, 60).is_empty(), "NO_COLOR: {:?}", colours(&app, 200, 60));
    app.theme = Theme::named("dark").unwrap();
    let dark = colours(&app, 200, 60);
    app.theme = Theme::named("light").unwrap();
    let light = colours(&app, 200, 60);
    assert!(!dark.is_empty() && !light.is_empty());
    assert_ne!(dark, light, "the two themes colour the screen differently");
    // The heat map is drawn in the theme's ramp.
    let ramp = Theme::named("light").unwrap().heat;
    assert!(light.contains(ramp.last().unwrap()), "the largest error's colour is on screen");
}

// ---- assembly ----

/// A small listing in cuobjdump's layout: `vadd` loads two floats, or (`vector`) four at a time;
/// `scale` is the same code in both, with other registers.
fn sass(vector: bool) -> String {
    let mut out = String::from("\n\tcode for sm_90\n\n\t\tFunction : vadd\n\t.headerflags\t@\"EF_CUDA_SM90\"\n");
    let body: &[&str] = if vector {
        &[
            "LDC R1, c[0x0][0x28] ;",
            "S2R R0, SR_TID.X ;",
            "LDG.E.128 R4, desc[UR4][R2.64] ;",
            "LDG.E.128 R8, desc[UR4][R6.64] ;",
            "FADD R4, R4, R8 ;",
            "FADD R5, R5, R9 ;",
            "STG.E.128 desc[UR4][R10.64], R4 ;",
            "EXIT ;",
        ]
    } else {
        &[
            "LDC R1, c[0x0][0x28] ;",
            "S2R R0, SR_TID.X ;",
            "LDG.E R4, desc[UR4][R2.64] ;",
            "LDG.E R5, desc[UR4][R6.64] ;",
            "FADD R4, R4, R5 ;",
            "STG.E desc[UR4][R10.64], R4 ;",
            "EXIT ;",
        ]
    };
    for (i, line) in body.iter().enumerate() {
        out.push_str(&format!("        /*{:04x}*/                   {line}  /* 0x000fe20000000800 */\n", i * 16));
    }
    out.push_str("\t\t..........\n\n\n\t\tFunction : scale\n\t.headerflags\t@\"EF_CUDA_SM90\"\n");
    let r = if vector { 12 } else { 3 };
    for (i, line) in [format!("LDG.E R{r}, desc[UR4][R2.64] ;"), format!("FMUL R{r}, R{r}, 2 ;"), "EXIT ;".to_string()]
        .iter()
        .enumerate()
    {
        out.push_str(&format!("        /*{:04x}*/                   {line}  /* 0x000fe20000000800 */\n", i * 16));
    }
    out
}

fn build_detail(registers: u32) -> StageDetail {
    use rung::parsers::KernelResources;
    use rung::stages::build::{BuildDetail, KernelBuild};
    let kernel = |name: &str| KernelBuild {
        resources: KernelResources {
            name: name.into(),
            arch: "sm_90".into(),
            registers,
            barriers: 0,
            shared_bytes: 0,
            stack_frame_bytes: 0,
            spill_store_bytes: 0,
            spill_load_bytes: 0,
            cmem0_bytes: None,
        },
        num_warps: None,
        num_stages: None,
    };
    StageDetail::Build(BuildDetail {
        compiler: "nvcc".into(),
        arch: "sm_90".into(),
        arch_reason: "default".into(),
        ahead_of_time: false,
        cached: false,
        cache_key: String::new(),
        commands: vec![],
        artefacts: vec![],
        kernels: vec![kernel("vadd"), kernel("scale")],
        notes: vec![],
        phases: Default::default(),
    })
}

/// v001 (scalar) and v002 (vectorised, made from v001) built with their SASS in `.rung/dumps/`;
/// v003 does not build.
fn assembly_workspace() -> (tempfile::TempDir, PathBuf) {
    let (tmp, ws) = new_workspace();
    for (id, vector, regs) in [("v001", false, 16), ("v002", true, 24)] {
        let dir = ws.join(".rung/dumps").join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{id}.sass")), sass(vector)).unwrap();
        std::fs::write(
            dir.join(format!("{id}.ptx")),
            format!(".visible .entry vadd(\n)\n{{\nld.global.f32 %f1, [%rd{regs}];\nret;\n}}\n"),
        )
        .unwrap();
        let pass = |stage| result(stage, Verdict::Pass, vec![], StageDetail::None);
        record(&ws, id, &[pass(Stage::Prepare), result(Stage::Build, Verdict::Pass, vec![], build_detail(regs))]);
    }
    let error = Diagnostic::error("versions/v003-triton.py", Pos::new(8, 39), "arange's range must be a power of 2");
    record(&ws, "v003", &[result(Stage::Build, Verdict::Fail, vec![error], StageDetail::None)]);
    let mut store = Store::open(&ws.join(".rung")).unwrap();
    store.set_parent("v002", Some("v001")).unwrap();
    (tmp, ws)
}

/// The app with the assembly pane focused (so it is on screen and its diff is made) on `version`.
fn assembly_app(ws: &Path, version: usize) -> App {
    let mut app = open_app(ws, false).unwrap();
    app.select(version);
    app.focus(Pane::Assembly);
    app.sync_asm();
    app
}

#[test]
fn assembly_pane_empty_running_and_failed() {
    let (_tmp, ws) = assembly_workspace();
    std::fs::remove_dir_all(ws.join(".rung/dumps/v001")).unwrap();
    let mut app = assembly_app(&ws, 0);
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Assembly, w, h);
        assert!(text.contains("v001 has no SASS yet"), "{text}");
        snapshot(&format!("assembly_empty_{w}x{h}"), &text);
    }
    running(&mut app, "v001", JobKind::Build);
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Assembly, w, h);
        assert!(text.contains("building…") && text.contains("it is being built"), "{text}");
        snapshot(&format!("assembly_running_{w}x{h}"), &text);
    }
    // The versions pane takes j and k; the assembly pane stays below it.
    app.focus(Pane::Versions);
    press(&mut app, "jj");
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Assembly, w, h);
        assert!(text.contains("v003 does not build"), "{text}");
        assert!(text.contains("compile errors pane"), "{text}");
        snapshot(&format!("assembly_failed_{w}x{h}"), &text);
    }
}

#[test]
fn assembly_pane_shows_the_diff_against_the_parent_with_resources_and_mix() {
    let (_tmp, ws) = assembly_workspace();
    let app = assembly_app(&ws, 1);
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Assembly, w, h);
        assert!(text.contains("v001 (parent) ◀▶ v002"), "{text}");
        assert!(text.contains("regs 16→24"), "{text}");
        assert!(text.contains("LDG 128-bit 0→2"), "{text}");
        // Aligned: the scalar loads changed into vector loads, row by row.
        let row = text.lines().find(|l| l.contains("LDG.E R4,")).unwrap_or_else(|| panic!("{text}"));
        assert!(row.contains("~ LDG.E R4,") && row.contains("~ LDG.E.128 R4,"), "{row}");
        // The added FADD is only on the right.
        let added = text.lines().find(|l| l.contains("FADD R5, R5, R9")).unwrap_or_else(|| panic!("{text}"));
        assert!(added.contains("+ FADD R5") && added.contains("·"), "{added}");
        snapshot(&format!("assembly_passed_{w}x{h}"), &text);
    }
    let text = pane_text(&app, Pane::Assembly, 200, 60);
    assert!(text.contains("━━ vadd  -4 +5") && text.contains("━━ scale  -2 +2"), "{text}");
}

#[test]
fn assembly_keys_switch_kind_kernel_registers_comparison_and_hunks() {
    let (_tmp, ws) = assembly_workspace();
    let mut app = assembly_app(&ws, 1);
    // n walks the changes: the first, in vadd, is on screen from the start; the second is in scale.
    assert_eq!(app.asm.hunks.len(), 2, "{:?}", app.asm.hunks);
    assert_eq!(app.asm.hunk_at(), 1);
    press(&mut app, "n");
    assert_eq!(app.asm.hunk_at(), 2);
    assert!(matches!(app.asm.rows[app.asm.scroll + 2], tui::asm_view::Flat::Row(1, _)), "scale's change near the top");
    let text = pane_text(&app, Pane::Assembly, 200, 24);
    assert!(text.contains("change 2/2"), "{text}");
    press(&mut app, "n");
    assert_eq!(app.message.as_deref(), Some("no change below: this is the last"));
    press(&mut app, "N");
    assert_eq!((app.asm.hunk_at(), app.asm.scroll), (1, 0));
    // f: one kernel at a time, then both again.
    press(&mut app, "f");
    assert_eq!(app.asm.kernel.as_deref(), Some("vadd"));
    let text = pane_text(&app, Pane::Assembly, 200, 24);
    assert!(text.contains("kernel 1/2: vadd") && !text.contains("━━ scale"), "{text}");
    press(&mut app, "ff");
    assert_eq!(app.asm.kernel, None);
    // R: with registers renamed by first use, scale is the same code.
    press(&mut app, "R");
    let text = pane_text(&app, Pane::Assembly, 200, 60);
    assert!(text.contains("━━ scale  -0 +0") && text.contains("registers renamed"), "{text}");
    press(&mut app, "R");
    // p: the PTX of both.
    press(&mut app, "p");
    let text = pane_text(&app, Pane::Assembly, 200, 24);
    assert!(text.contains("PTX v002"), "{text}");
    assert!(text.contains("ld.global.f32 %f1, [%rd16]") && text.contains("ld.global.f32 %f1, [%rd24]"), "{text}");
    press(&mut app, "p");
    // c: the picker lists parent, best and the other versions; v003 has no listing, so v002 is
    // shown alone, every row added.
    press(&mut app, "c");
    let screen = screen_text(&app, 200, 60);
    assert!(screen.contains("compare the selected version with") && screen.contains("v001 (parent)"), "{screen}");
    assert!(screen.contains("no version has a bench yet"), "{screen}");
    app.update(key(KeyCode::Down));
    app.update(key(KeyCode::Down));
    app.update(key(KeyCode::Down));
    app.update(key(KeyCode::Enter));
    assert_eq!(app.asm.against, tui::asm_view::Against::Version("v003".into()));
    let text = pane_text(&app, Pane::Assembly, 200, 60);
    assert!(text.contains("v003: no SASS ◀▶ v002"), "{text}");
    assert!(text.contains("━━ vadd  -0 +8"), "{text}");
}

#[test]
fn long_assembly_lines_scroll_sideways_with_h_and_l() {
    let (_tmp, ws) = assembly_workspace();
    let mut app = assembly_app(&ws, 1);
    let text = pane_text(&app, Pane::Assembly, 80, 24);
    let at = text.lines().position(|l| l.contains("LDG.E R4,")).unwrap_or_else(|| panic!("{text}"));
    let row = |app: &App| pane_text(app, Pane::Assembly, 80, 24).lines().nth(at).unwrap().to_string();
    let before = row(&app);
    assert!(before.contains("~ LDG.E R4,"), "{before}");
    // l moves both listings 8 characters left; the hidden start is marked.
    press(&mut app, "l");
    assert_eq!(app.asm.column, 8);
    let after = row(&app);
    assert!(!after.contains("LDG.E R4,") && after.contains("~«, desc[UR4][R2.64]"), "{after}");
    // Not past the longest line.
    for _ in 0..100 {
        press(&mut app, "l");
    }
    assert!(app.asm.column + 8 <= app.asm.longest_text().max(8), "{}", app.asm.column);
    // h back to the start, and no further.
    for _ in 0..100 {
        press(&mut app, "h");
    }
    assert_eq!(app.asm.column, 0);
    assert_eq!(row(&app), before);
    // Elsewhere h and l do nothing.
    app.focus(Pane::Versions);
    press(&mut app, "l");
    assert_eq!(app.asm.column, 0);
}

#[test]
fn assembly_diffs_are_made_off_the_ui_thread_and_remade_when_a_listing_changes() {
    let (_tmp, ws) = assembly_workspace();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut app = open_app(&ws, false).unwrap();
    app.events = Some(tx);
    app.select(1);
    app.focus(Pane::Assembly);
    app.sync_asm();
    // Asked for, not made here: the pane says so until the diff arrives as an event.
    assert!(app.asm.shown.is_none() && app.asm.stale());
    let text = pane_text(&app, Pane::Assembly, 80, 24);
    assert!(text.contains("comparing v002 with v001…"), "{text}");
    let arrived = rx.recv_timeout(std::time::Duration::from_secs(20)).unwrap();
    assert!(matches!(arrived, Event::AsmDiff(_)));
    app.update(arrived);
    assert!(!app.asm.stale());
    assert!(pane_text(&app, Pane::Assembly, 80, 24).contains("v001 (parent) ◀▶ v002"));
    // Moving away and back needs no new diff: it is cached.
    app.focus(Pane::Versions);
    press(&mut app, "k");
    let _ = rx.recv_timeout(std::time::Duration::from_secs(20)).unwrap();
    press(&mut app, "j");
    assert!(!app.asm.stale(), "served from the cache");
    assert!(rx.try_recv().is_err());
    // A rebuild rewrites v002's listing: a new diff is made, and the old one stays on screen,
    // marked, until it arrives.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(ws.join(".rung/dumps/v002/v002.sass"), sass(false)).unwrap();
    app.update(Event::Tick);
    app.update(Event::Resize(80, 24));
    assert!(app.asm.stale());
    let text = pane_text(&app, Pane::Assembly, 80, 24);
    assert!(text.contains("updating"), "{text}");
    app.update(rx.recv_timeout(std::time::Duration::from_secs(20)).unwrap());
    let text = pane_text(&app, Pane::Assembly, 200, 60);
    assert!(text.contains("━━ vadd  -0 +0"), "the same code as v001 now: {text}");
}

/// A CUDA version's SASS listing follows its build rung: while it is made the pane says so and
/// each tick looks again, and the tick after it lands (when nothing is pending any more) shows it.
#[test]
fn the_assembly_pane_waits_for_a_listing_that_follows_its_build() {
    use rung::stages::build::sass;
    use std::os::unix::fs::PermissionsExt;
    let (tmp, ws) = assembly_workspace();
    let state = ws.join(".rung");
    std::fs::remove_file(state.join("dumps/v002/v002.sass")).unwrap();
    let objects = rung::store::Objects::new(&state);
    let hash = objects.put(b"v002's cubin").unwrap();
    objects.link_dump(&state, "v002", "v002.cubin", &hash).unwrap();
    // A disassembler that takes a moment and writes v002's listing.
    let listing = tmp.path().join("listing.sass");
    std::fs::write(&listing, sass(true)).unwrap();
    let tool = tmp.path().join("disasm");
    std::fs::write(&tool, format!("#!/bin/sh\nsleep 0.5\ncat '{}'\n", listing.display())).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    sass::later(sass::Job {
        root: ws.clone(),
        state: state.clone(),
        id: "v002".into(),
        cubin: "v002.cubin".into(),
        hash,
        cache_key: None,
        tool: sass::Disassembler { path: tool, nvdisasm: true },
        timeout: std::time::Duration::from_secs(20),
    });
    let mut app = assembly_app(&ws, 1);
    let text = pane_text(&app, Pane::Assembly, 120, 30);
    assert!(text.contains("v002 has no SASS yet: its cubin is being disassembled"), "{text}");
    assert!(app.update(Event::Tick), "a tick looks again while the listing is made");
    assert!(sass::wait(&state, "v002", std::time::Duration::from_secs(20)));
    assert!(app.update(Event::Tick), "the tick after it landed looks once more");
    let text = pane_text(&app, Pane::Assembly, 200, 60);
    assert!(text.contains("v001 (parent) ◀▶ v002"), "{text}");
    assert!(!app.update(Event::Tick), "and then rests");
}

// ---- performance (figures for the README, not run by `cargo test`) ----

/// The p-th percentile of sorted durations, in ms.
fn percentile_ms(sorted: &[std::time::Duration], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p / 100.0).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

/// Key press to frame with two 100,000-line SASS listings diffed in the assembly pane at 200x60,
/// while nvcc builds in the background: each key is applied (`App::update`) and the whole screen
/// drawn (`view::draw` into ratatui's buffer, diffed against the previous frame as the terminal
/// backend does). Run with `cargo test --release --test tui perf_ -- --ignored --nocapture`.
#[test]
#[ignore]
fn perf_key_to_frame_with_a_100k_line_sass_diff_while_a_build_runs() {
    let Some((a, b)) = common::big_sass_pair() else { return };
    let (_tmp, ws) = assembly_workspace();
    std::fs::write(ws.join(".rung/dumps/v001/v001.sass"), &a).unwrap();
    std::fs::write(ws.join(".rung/dumps/v002/v002.sass"), &b).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut app = open_app(&ws, true).unwrap();
    app.events = Some(tx);
    app.area = ratatui::layout::Rect::new(0, 0, 200, 60);
    app.select(1);
    app.focus(Pane::Assembly);
    app.sync_asm();
    let Event::AsmDiff(d) = rx.recv_timeout(std::time::Duration::from_secs(120)).unwrap() else { panic!() };
    let lines: usize = d.diff.kernels.iter().map(|k| k.rows.len()).sum();
    eprintln!(
        "diff: {lines} rows, {} changed lines, made in {} ms off the UI thread",
        d.diff.edit_size(),
        d.took.as_millis()
    );
    assert!(lines >= 100_000, "{lines}");
    app.update(Event::AsmDiff(d));
    // A build runs meanwhile: nvcc compiling the same 100,000-instruction file, again and again.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let nvcc = rung::toolchain::Toolchain::discover().nvcc.unwrap().path;
    let builder = {
        let stop = stop.clone();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/data/big.cu");
        let out = ws.join("big.cubin");
        std::thread::spawn(move || {
            let mut builds = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let ok = Command::new(&nvcc).args(["-arch=sm_90", "-cubin", "-O3", "-o"]).arg(&out).arg(&src).status();
                builds += usize::from(ok.is_ok_and(|s| s.success()));
            }
            builds
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(500));
    let mut term = Terminal::new(TestBackend::new(200, 60)).unwrap();
    term.draw(|f| tui::view::draw(&app, f)).unwrap();
    let script: Vec<KeyCode> = [
        std::iter::repeat_n(KeyCode::Char('j'), 200).collect::<Vec<_>>(),
        std::iter::repeat_n(KeyCode::PageDown, 100).collect(),
        std::iter::repeat_n(KeyCode::Char('n'), 100).collect(),
        std::iter::repeat_n(KeyCode::Char('N'), 50).collect(),
        std::iter::repeat_n(KeyCode::PageUp, 100).collect(),
        std::iter::repeat_n(KeyCode::Char('k'), 200).collect(),
        vec![KeyCode::Char('f'), KeyCode::Char('f'), KeyCode::Char('z'), KeyCode::Char('z')],
    ]
    .concat();
    let mut times = Vec::with_capacity(script.len());
    for code in &script {
        let t = std::time::Instant::now();
        app.update(key(*code));
        term.draw(|f| tui::view::draw(&app, f)).unwrap();
        times.push(t.elapsed());
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let builds = builder.join().unwrap();
    times.sort();
    let (p50, p99, max) = (percentile_ms(&times, 50.0), percentile_ms(&times, 99.0), percentile_ms(&times, 100.0));
    eprintln!(
        "key to frame, {} keys at 200x60 with a {lines}-row SASS diff, {builds} nvcc builds alongside: p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms",
        times.len()
    );
    assert!(p99 < 16.0, "p99 {p99:.2} ms");
}

// ---- the chat side panel ----

use rung::agent::{AgentEvent, ChatStore, Message, Role as MessageRole, ToolCall, Usage};

/// Writes `[agent]` settings to a config file beside the workspace and points the chat at it.
fn agent_config(app: &mut App, ws: &Path, text: &str) -> PathBuf {
    let path = ws.parent().unwrap().join("config").join("rung").join("config.toml");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    app.chat.config_path = Some(path.clone());
    path
}

/// An OpenAI-compatible provider `local` at the test's server `url` (model `gpt-test`, no
/// retries), with `extra` lines for its table.
fn openai_at(url: &str, extra: &str) -> String {
    format!(
        "[agent]\nprovider = \"local\"\n\n[agent.providers.local]\nkind = \"openai\"\nbase_url = \"{url}/v1\"\n\
         model = \"gpt-test\"\nretries = 0\n{extra}\n"
    )
}

/// A provider that is built without a key or a connection (nothing is sent in these tests).
const LOCAL_AGENT: &str = "[agent]\nprovider = \"local\"\n\n[agent.providers.local]\nkind = \"openai\"\n\
base_url = \"http://127.0.0.1:9/v1\"\nmodel = \"gpt-test\"\nretries = 0\n";

fn type_text(app: &mut App, text: &str) {
    for c in text.chars() {
        app.update(key(KeyCode::Char(c)));
    }
}

/// Applies the events turns send until one ends (the loop's part, in a test).
fn until_turn_ends(app: &mut App, rx: &std::sync::mpsc::Receiver<Event>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ev = rx.recv_timeout(left).expect("the turn ends within 30 s");
        let done = matches!(ev, Event::AgentDone(_));
        app.update(ev);
        if done {
            return;
        }
    }
}

/// The chat's newest notice, whole (on screen a long one wraps).
fn last_notice(app: &App) -> String {
    app.chat
        .panel
        .entries
        .iter()
        .rev()
        .find_map(|e| if let tui::chat::Entry::Notice { text, .. } = e { Some(text.clone()) } else { None })
        .unwrap_or_default()
}

fn chat_files(ws: &Path) -> String {
    let store = ChatStore::for_workspace(ws);
    store.list().iter().map(|id| std::fs::read_to_string(store.dir.join(format!("{id}.jsonl"))).unwrap()).collect()
}

#[test]
fn the_chat_without_an_agent_explains_how_to_configure_one_and_the_rest_still_works() {
    if ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"].iter().any(|k| std::env::var_os(k).is_some()) {
        eprintln!("SKIPPED: an API key is set here, so the chat would have an agent without a file");
        return;
    }
    let (_tmp, ws) = checked_workspace();
    let mut app = open_app(&ws, false).unwrap();
    // No file at all: the defaults, whose `openai` has no key here.
    let path = ws.parent().unwrap().join("config").join("rung").join("config.toml");
    app.chat.config_path = Some(path.clone());
    press(&mut app, "i");
    assert_eq!(app.pane, Pane::Chat);
    for (w, h) in SIZES {
        let text = screen_text(&app, w, h);
        assert!(text.contains("no agent: the environment variable OPENAI_API_KEY is not set"), "{text}");
        assert!(text.contains(&format!("Add an agent to {}:", path.display())), "{text}");
        for line in ["[agent]", "provider = \"local\"", "[agent.providers.local]", "api_key_env = \"LOCAL_KEY\""] {
            assert!(text.contains(line), "{line}: {text}");
        }
        assert!(text.contains("Or export OPENAI_API_KEY alone. Esc closes"), "{text}");
        assert!(text.contains("v002") && text.contains("chat · no agent"), "the versions stay: {text}");
        snapshot(&format!("chat_unconfigured_{w}x{h}"), &text.replace(&path.display().to_string(), "[CONFIG]"));
    }
    // Sending says there is no agent; nothing is written.
    type_text(&mut app, "hello?");
    app.update(key(KeyCode::Enter));
    assert!(screen_text(&app, 200, 60).contains("no agent is configured"));
    assert!(ChatStore::for_workspace(&ws).list().is_empty());
    // Tab gives the keys back: `j` moves the selection again instead of being typed.
    app.update(key(KeyCode::Tab));
    assert_eq!(app.pane, Pane::Versions);
    press(&mut app, "j");
    assert_eq!(app.selected_version().unwrap().id, "v002");
    // The chat stays beside the panes on a wide screen; Esc closes it.
    assert!(screen_text(&app, 200, 60).contains("chat · no agent"));
    press(&mut app, "i");
    app.update(key(KeyCode::Esc));
    assert!(!screen_text(&app, 200, 60).contains("chat · no agent"));
    // A configuration written meanwhile is read when it opens again.
    agent_config(&mut app, &ws, LOCAL_AGENT);
    press(&mut app, "i");
    let text = screen_text(&app, 200, 60);
    assert!(text.contains("chat · local gpt-test") && !text.contains("no agent:"), "{text}");
}

#[test]
fn a_bad_agent_table_is_said_in_the_chat_and_leaves_the_keys_alone() {
    let (_tmp, ws) = checked_workspace();
    let mut app = open_app(&ws, false).unwrap();
    let path = agent_config(&mut app, &ws, "[keys]\nchat = [\"Ctrl-a\"]\n\n[agent]\nprovidr = \"local\"\n");
    // The TUI's own loader leaves `[agent]` to the agent: the keys apply.
    let (config, problem) = Config::load(Some(&path), None);
    assert!(problem.is_none(), "{problem:?}");
    app.keymap = config.keymap;
    press(&mut app, "i");
    assert_eq!(app.pane, Pane::Versions, "`i` is no longer the chat's key");
    app.update(Event::Key(KeyEvent::new(KeyCode::Char('a'), KeyModifiers::CONTROL)));
    assert_eq!(app.pane, Pane::Chat);
    let text = screen_text(&app, 200, 60);
    let error = format!("no agent: {}:5:1: unknown field `providr`", path.display());
    assert!(
        app.chat
            .panel
            .entries
            .iter()
            .any(|e| matches!(e, tui::chat::Entry::Notice { text, is_error: true } if text.starts_with(&error)))
    );
    assert!(text.contains("5:1: unknown field"), "{text}");
    assert!(text.contains("[agent.providers.local]"), "and how to write it: {text}");
    // The same Ctrl key gives the keys back; Ctrl-C quits from inside the chat too.
    app.update(Event::Key(KeyEvent::new(KeyCode::Char('a'), KeyModifiers::CONTROL)));
    assert_eq!(app.pane, Pane::Versions);
    app.update(Event::Key(KeyEvent::new(KeyCode::Char('a'), KeyModifiers::CONTROL)));
    type_text(&mut app, "q");
    assert!(!app.quit, "q is text in the chat");
    app.update(Event::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)));
    assert!(app.quit);
}

#[test]
fn the_chat_shows_the_last_conversation_beside_the_panes_and_streams_into_it() {
    let (_tmp, ws) = checked_workspace();
    // An earlier session's conversation: a question, a tool call and its answer, a reply with code.
    let store = ChatStore::for_workspace(&ws);
    let mut conv = store.create("local", "gpt-test").unwrap();
    conv.push(Message::user("Why is v002 twice as fast?")).unwrap();
    let call = ToolCall { id: "c1".into(), name: "get_results".into(), arguments: "{\"version\":\"v002\"}".into() };
    conv.push(Message { role: MessageRole::Assistant, tool_calls: vec![call], ..Message::user("") }).unwrap();
    conv.push(Message {
        role: MessageRole::Tool,
        tool_call_id: Some("c1".into()),
        tool_name: Some("get_results".into()),
        ..Message::user("v002: bench pass, 12.30 µs, 82% of the copy roofline")
    })
    .unwrap();
    let reply = "It moves four floats per load:\n\n```cuda\nfloat4 x = a4[i];\n```\nthat halves the instructions.";
    conv.push(Message { role: MessageRole::Assistant, ..Message::user(reply) }).unwrap();
    conv.account(Usage { input_tokens: 1200, output_tokens: 85 });
    drop(conv);

    let mut app = open_app(&ws, false).unwrap();
    agent_config(&mut app, &ws, LOCAL_AGENT);
    press(&mut app, "i");
    // A reply streaming now, through the loop's events.
    app.chat.panel.push_user("and v003?");
    app.update(Event::Agent(AgentEvent::Text("v003 does not build: `arange`".into())));
    app.update(Event::Agent(AgentEvent::Text(" needs a power of two.".into())));
    app.update(Event::Agent(AgentEvent::ToolCall { index: 0, id: "c2".into(), name: "get_results".into() }));
    app.update(Event::Agent(AgentEvent::ToolArguments { index: 0, fragment: "{\"version\":".into() }));
    app.update(Event::Agent(AgentEvent::ToolArguments { index: 0, fragment: "\"v003\"}".into() }));
    for (w, h) in SIZES {
        let text = screen_text(&app, w, h);
        assert!(text.contains("chat · local gpt-test · 1200 in / 85 out"), "{text}");
        if h > 24 {
            // 80×24 has room for the newest rows only.
            assert!(text.contains("Why is v002 twice as fast?"), "{text}");
            assert!(text.contains("⚙ get_results({\"version\":\"v002\"}) ✓ v002: bench pass, 12.30 µs"), "{text}");
        }
        assert!(text.contains("│ float4 x = a4[i];"), "the code block: {text}");
        assert!(text.contains("v003 does not build: `arange` needs a power of two."), "streamed: {text}");
        assert!(text.contains("⚙ get_results({\"version\":\"v003\"}) ⋯"), "the call streaming: {text}");
        assert!(text.contains("streaming · /stop cancels"), "{text}");
        assert!(text.contains("v001") && text.contains("naive"), "the versions stay: {text}");
        snapshot(&format!("chat_conversation_{w}x{h}"), &text);
    }
    // Wide: a column right of the panes, which keep their layout in what is left.
    let wide = screen_text(&app, 200, 60);
    let top = wide.lines().nth(1).unwrap();
    assert!(top.contains("versions") && top.find("chat ·") > top.find("versions"), "{top}");
    // Tab gives the keys back and the column stays; a click on it takes them again.
    app.update(key(KeyCode::Tab));
    assert_eq!(app.pane, Pane::Versions);
    app.update(Event::Resize(200, 60));
    let click = crossterm::event::MouseEvent {
        kind: crossterm::event::MouseEventKind::Down(crossterm::event::MouseButton::Left),
        column: 190,
        row: 30,
        modifiers: KeyModifiers::NONE,
    };
    app.update(Event::Mouse(click));
    assert_eq!(app.pane, Pane::Chat);
    // Up recalls the restored conversation's question.
    app.update(key(KeyCode::Up));
    assert_eq!(app.chat.panel.input_text(), "Why is v002 twice as fast?");
}

#[test]
fn agent_events_fill_the_panel_one_turn_at_a_time_and_stop_cancels_it() {
    let (_tmp, ws) = checked_workspace();
    let mut app = open_app(&ws, false).unwrap();
    // A CLI agent that reads the prompt and then says nothing until it is killed.
    agent_config(
        &mut app,
        &ws,
        "[agent]\nprovider = \"quiet\"\n\n[agent.providers.quiet]\nkind = \"command\"\n\
         command = [\"sh\", \"-c\", \"cat >/dev/null; exec sleep 60\"]\nmodel = \"cli\"\n",
    );
    let (tx, rx) = std::sync::mpsc::channel();
    app.chat.events = Some(tx);
    press(&mut app, "i");
    type_text(&mut app, "why is v002 faster?");
    app.update(key(KeyCode::Enter));
    assert!(app.chat.busy() && app.chat.panel.busy(), "busy before the first token");
    assert!(screen_text(&app, 80, 24).contains("agent replying"), "the title line says so");
    // The provider's events, as the loop applies them.
    app.update(Event::Agent(AgentEvent::Text("The loads are ".into())));
    app.update(Event::Agent(AgentEvent::Text("coalesced.".into())));
    let text = screen_text(&app, 200, 60);
    assert!(text.contains("you") && text.contains("why is v002 faster?"), "{text}");
    assert!(text.contains("agent …") && text.contains("The loads are coalesced."), "{text}");
    // A second message waits: it stays in the box and no second turn starts.
    let first = app.chat.turn.as_ref().unwrap().cancel.clone();
    type_text(&mut app, "and v003?");
    app.update(key(KeyCode::Enter));
    assert!(screen_text(&app, 200, 60).contains("a reply is still streaming: /stop cancels it"));
    assert_eq!(app.chat.panel.input_text(), "and v003?");
    // /clear and /model wait too.
    for _ in 0.."and v003?".len() {
        app.update(key(KeyCode::Backspace));
    }
    type_text(&mut app, "/clear");
    app.update(key(KeyCode::Enter));
    assert!(screen_text(&app, 200, 60).contains("/stop it first"));
    // /stop sets the running turn's flag; the turn ends cancelled, what arrived kept.
    type_text(&mut app, "/stop");
    app.update(key(KeyCode::Enter));
    assert!(first.is_cancelled(), "/stop cancels the turn");
    until_turn_ends(&mut app, &rx);
    assert!(!app.chat.busy() && !app.chat.panel.busy());
    let text = screen_text(&app, 200, 60);
    assert!(text.contains("! reply cancelled") && text.contains("agent (cut short)"), "{text}");
    assert!(!text.contains("agent replying"), "{text}");
    // The question and the cancellation are in the conversation's file.
    let saved = chat_files(&ws);
    assert!(saved.contains("why is v002 faster?") && saved.contains("reply cancelled"), "{saved}");
    // /stop with nothing running says so.
    type_text(&mut app, "/stop");
    app.update(key(KeyCode::Enter));
    assert!(screen_text(&app, 200, 60).contains("no reply is streaming"));
}

/// A provider whose key comes from a slow `api_key_command` (a keyring asking for a
/// passphrase): the panel opens at once, the key is read on a thread of its own, and a message
/// typed meanwhile goes as soon as the agent is ready, with that key.
#[test]
fn a_slow_key_command_does_not_freeze_the_ui_and_a_message_waits_for_it() {
    use common::loopback::{Reply, Server, fixture};
    let (_tmp, ws) = checked_workspace();
    let server = Server::start(vec![Reply::stream(&fixture("openai-code-block.sse"), &[])]);
    let config = openai_at(&server.url, "api_key_command = [\"sh\", \"-c\", \"sleep 1; echo sk-slow\"]");
    let mut app = open_app(&ws, false).unwrap();
    agent_config(&mut app, &ws, &config);
    let (tx, rx) = std::sync::mpsc::channel();
    app.chat.events = Some(tx);
    let t0 = std::time::Instant::now();
    press(&mut app, "i");
    let opened = t0.elapsed();
    assert!(opened < std::time::Duration::from_millis(500), "the panel opened in {opened:?}");
    assert!(screen_text(&app, 200, 60).contains("reading the API key with `sh -c sleep 1; echo sk-slow`"));
    type_text(&mut app, "a kernel?");
    app.update(key(KeyCode::Enter));
    assert!(last_notice(&app).contains("the message goes when it is ready"), "{}", last_notice(&app));
    assert!(server.requests().is_empty(), "nothing is sent before the key is read");
    // The key arrives; the message goes with it.
    until_turn_ends(&mut app, &rx);
    let req = &server.requests()[0];
    assert_eq!(req.header("authorization"), Some("Bearer sk-slow"), "{:?}", req.headers);
    assert_eq!(req.body["messages"][1], serde_json::json!({"role": "user", "content": "a kernel?"}));
    assert!(screen_text(&app, 200, 60).contains("local gpt-test"), "the model is shown once ready");
    // /model reads the key again, off the UI thread too; the old model serves until it is done.
    let t0 = std::time::Instant::now();
    type_text(&mut app, "/model gpt-next");
    app.update(key(KeyCode::Enter));
    assert!(t0.elapsed() < std::time::Duration::from_millis(500), "/model returned in {:?}", t0.elapsed());
    assert!(screen_text(&app, 200, 60).contains("local gpt-test"), "still the old model");
    let ev = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("the switch arrives");
    assert!(matches!(ev, Event::ModelSwitched(_)), "{ev:?}");
    app.update(ev);
    assert!(screen_text(&app, 200, 60).contains("local gpt-next"), "{}", screen_text(&app, 200, 60));
}

#[test]
fn a_message_sent_from_the_tui_gets_a_real_reply_in_the_panel_and_the_chat_file() {
    use common::loopback::{Reply, Server, fixture, inside};
    let (_tmp, ws) = checked_workspace();
    let body = fixture("openai-code-block.sse");
    // Cut inside the em dash and inside the fence, as a network would.
    let server =
        Server::start(vec![Reply::stream(&body, &[inside(&body, "\u{2014}", 1), inside(&body, "```cuda", 2)])]);
    let config = openai_at(&server.url, "price_input_per_mtok = 2.0\nprice_output_per_mtok = 8.0");
    let mut app = open_app(&ws, false).unwrap();
    agent_config(&mut app, &ws, &config);
    let (tx, rx) = std::sync::mpsc::channel();
    app.chat.events = Some(tx);
    press(&mut app, "i");
    type_text(&mut app, "a kernel?");
    app.update(key(KeyCode::Enter));
    until_turn_ends(&mut app, &rx);
    let text = screen_text(&app, 200, 60);
    assert!(text.contains("Here is a vectorised kernel \u{2014} each thread adds four floats (2.3 µs"), "{text}");
    assert!(text.contains("│ __global__ void add4(const float4* a, float4* out, int n) {"), "{text}");
    assert!(text.contains("chat · local gpt-test · 52 in / 61 out · $0.0006"), "{text}");
    assert!(!app.chat.busy() && !text.contains("streaming"), "{text}");
    // What was sent: the system prompt, the question, and the workspace's tools.
    let req = &server.requests()[0];
    assert_eq!(req.body["messages"][0]["role"], "system");
    assert_eq!(req.body["messages"][1], serde_json::json!({"role": "user", "content": "a kernel?"}));
    let tools: Vec<&str> =
        req.body["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert!(tools.contains(&"read_file") && tools.contains(&"get_results"), "{tools:?}");
    // The passages the prompt quoted are listed under the message, each where it is.
    let places: Vec<String> = app
        .chat
        .panel
        .entries
        .iter()
        .find_map(|e| match e {
            rung_tui::chat::Entry::Context(p) => Some(p.clone()),
            _ => None,
        })
        .expect("the passages in the prompt are listed");
    assert!(!places.is_empty());
    let system = req.body["messages"][0]["content"].as_str().unwrap();
    for p in &places {
        assert!(system.contains(&format!("### {p}\n")), "{p} is not in the prompt");
    }
    assert!(text.contains(&format!("context: {} passage", places.len())) && text.contains(&places[0]), "{text}");
    // The conversation's file has the question and the whole reply.
    let saved = chat_files(&ws);
    assert!(saved.contains("\"a kernel?\"") && saved.contains("It needs `n % 4 == 0`."), "{saved}");

    // /context says what the next request holds.
    type_text(&mut app, "/context");
    app.update(key(KeyCode::Enter));
    let context = last_notice(&app);
    assert!(context.starts_with(&format!("context for openai-compatible gpt-test ({}/v1)", server.url)), "{context}");
    let system = rung::agent::SYSTEM_PROMPT.chars().count();
    let tools = "7 tools (search_context, read_file, get_results, get_asm, diff_asm, get_profile, get_trace)";
    assert!(context.contains(&format!("the system prompt ({system} characters), 2 messages, {tools}")), "{context}");
    assert!(context.ends_with("tokens so far: 52 in / 61 out, $0.0006"), "{context}");
    assert!(screen_text(&app, 200, 60).contains("! context for openai-compatible gpt-test"));
    // /model switches the model, recorded in the file.
    type_text(&mut app, "/model gpt-other");
    app.update(key(KeyCode::Enter));
    assert!(screen_text(&app, 200, 60).contains("chat · local gpt-other"));
    assert!(chat_files(&ws).contains("{\"model\":{\"provider\":\"local\",\"model\":\"gpt-other\"}}"));

    // A new TUI shows the conversation again, on the configuration's model (a /model lasts for
    // the session), and records the switch back.
    let mut again = open_app(&ws, false).unwrap();
    again.chat.config_path = app.chat.config_path.clone();
    press(&mut again, "i");
    let text = screen_text(&again, 200, 60);
    assert!(text.contains("a kernel?") && text.contains("Here is a vectorised kernel"), "{text}");
    assert!(text.contains("chat · local gpt-test · 52 in / 61 out"), "{text}");
    let saved = chat_files(&ws);
    assert!(saved.ends_with("{\"model\":{\"provider\":\"local\",\"model\":\"gpt-test\"}}\n"), "{saved}");
    // /clear empties it; the file keeps the old messages behind a mark.
    type_text(&mut again, "/clear");
    again.update(key(KeyCode::Enter));
    let text = screen_text(&again, 200, 60);
    assert!(!text.contains("Here is a vectorised kernel") && text.contains("cleared"), "{text}");
    let saved = chat_files(&ws);
    assert!(saved.contains("\"clear\"") && saved.contains("It needs"), "{saved}");
}

#[test]
fn a_provider_error_is_a_notice_in_the_panel_without_the_key() {
    use common::loopback::{Reply, Server};
    const KEY: &str = "sk-rung-tui-DO-NOT-LEAK-5678";
    let (_tmp, ws) = checked_workspace();
    // A 401 whose body echoes the key, as some servers do.
    let echo = format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#);
    let server = Server::start(vec![Reply::status(401, &echo)]);
    // The key comes from a keyring command (a file read back here).
    let keyring = ws.parent().unwrap().join("keyring");
    std::fs::write(&keyring, KEY).unwrap();
    let mut app = open_app(&ws, false).unwrap();
    agent_config(
        &mut app,
        &ws,
        &openai_at(&server.url, &format!("api_key_command = [\"cat\", \"{}\"]", keyring.display())),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    app.chat.events = Some(tx);
    press(&mut app, "i");
    type_text(&mut app, "hello");
    app.update(key(KeyCode::Enter));
    until_turn_ends(&mut app, &rx);
    let error = last_notice(&app);
    assert!(error.starts_with("error: ") && error.contains("refused the API key (HTTP 401)"), "{error}");
    assert!(error.contains("[redacted]") && !error.contains(KEY), "{error}");
    let text = screen_text(&app, 200, 60);
    assert!(text.contains("! error:") && !text.contains(KEY), "{text}");
    assert!(!app.chat.busy() && !app.quit, "the TUI carries on");
    let saved = chat_files(&ws);
    assert!(saved.contains("refused the API key") && !saved.contains(KEY), "{saved}");
    // The key went to the server, and nowhere else.
    assert_eq!(server.requests()[0].header("authorization"), Some(format!("Bearer {KEY}").as_str()));
}

#[test]
fn versions_and_compile_errors_panes_while_a_version_runs_and_once_it_passed() {
    let (_tmp, ws) = checked_workspace();
    let mut app = open_app(&ws, false).unwrap();
    // v002 passed every rung: the errors pane says so.
    app.select(1);
    for (w, h) in SIZES {
        let text = pane_text(&app, Pane::Diagnostics, w, h);
        assert!(text.contains("v002: no diagnostics"), "{text}");
        snapshot(&format!("errors_passed_{w}x{h}"), &text);
    }
    // v003 is being rebuilt: a spinner on its row, and the errors pane says it is building.
    running(&mut app, "v003", JobKind::Build);
    app.select(2);
    for (w, h) in SIZES {
        let versions = pane_text(&app, Pane::Versions, w, h);
        let row = versions.lines().find(|l| l.contains("v003")).unwrap_or_else(|| panic!("{versions}"));
        assert!(tui::panes::SPINNER.iter().any(|s| row.contains(s)), "a spinner on the running version: {row}");
        snapshot(&format!("versions_running_{w}x{h}"), &versions);
        let errors = pane_text(&app, Pane::Diagnostics, w, h);
        assert!(errors.contains(":8:39"), "the last diagnostics stay until the new build: {errors}");
        snapshot(&format!("errors_running_{w}x{h}"), &errors);
    }
}

/// A result a remote runner produced says where it ran, above its metrics.
#[test]
fn correctness_pane_says_where_a_remote_result_ran() {
    let (_tmp, ws) = new_workspace();
    let mut check = result(Stage::Check, Verdict::Pass, vec![], check_detail(false));
    check.ran_on = Some(rung::model::report::RanOn {
        host: "gpu-box".into(),
        gpu: Some("NVIDIA H200".into()),
        uuid: Some("GPU-7ab49cf1".into()),
        device: None,
        runner: Some("ssh://me@gpu-box/srv/ws".into()),
    });
    record(&ws, "v001", &[result(Stage::Build, Verdict::Pass, vec![], StageDetail::None), check]);
    let app = open_app(&ws, false).unwrap();
    let text = pane_text(&app, Pane::Correctness, 200, 60);
    assert!(
        text.contains("seed 4242 · ran on gpu-box (NVIDIA H200, GPU-7ab49cf1) via ssh://me@gpu-box/srv/ws"),
        "{text}"
    );
    // A local result says nothing of the kind.
    let (_tmp2, ws2) = correctness_workspace();
    let text = pane_text(&open_app(&ws2, false).unwrap(), Pane::Correctness, 200, 60);
    assert!(!text.contains("ran on"), "{text}");
}

#[test]
fn the_timing_chart_puts_versions_timed_differently_on_one_timer() {
    use rung::stats::Summary;
    use tui::app::{GpuTiming, TimingPoint, one_timer};
    let ms = |us: f64| Summary { median: us / 1e3, min: (us - 1.0) / 1e3, max: (us + 1.0) / 1e3, ..Default::default() };
    let point = |v: &str, basis: &str, headline: f64, events: f64| TimingPoint {
        version: v.into(),
        ordinal: 0,
        median_us: 0.0,
        min_us: 0.0,
        max_us: 0.0,
        current: true,
        bench: SizeBench { headline: ms(headline), gpu: ms(events), basis: basis.into(), ..Default::default() },
    };
    // v003 by CUPTI (259.1 busy, 261.6 between events), v004 Triton by events (263.0), the side
    // stream device-wide: plotted as 259.1 against 263.0, v003 would look 1.5% faster than an
    // interleaved comparison finds.
    let mut g = GpuTiming {
        points: vec![
            point("v003", "cupti", 259.1, 261.6),
            point("v004", "events", 263.0, 263.0),
            point("v101", "device-wide", 101_568.0, 303.0),
        ],
        ..Default::default()
    };
    one_timer(&mut g);
    assert!(g.mixed_timers);
    let medians: Vec<f64> = g.points.iter().map(|p| (p.median_us * 1e3).round() / 1e3).collect();
    assert_eq!(medians, vec![261.6, 263.0, 101_568.0]);
    assert!((g.points[0].min_us - 260.6).abs() < 1e-9 && (g.points[0].max_us - 262.6).abs() < 1e-9);
    // One timer throughout: the headlines stand.
    let mut g = GpuTiming {
        points: vec![point("v003", "cupti", 259.1, 261.6), point("v005", "cupti", 250.1, 252.6)],
        ..Default::default()
    };
    one_timer(&mut g);
    assert!(!g.mixed_timers);
    assert!((g.points[0].median_us - 259.1).abs() < 1e-9);
}

/// The assembly diff's "best" is picked on one timer, as `rung check` picks the best approved
/// version: v001 timed by CUPTI (259.1 µs busy, 261.6 between events) is not faster than v002
/// timed by events (261.0 µs) for its timer alone.
#[test]
fn the_best_to_diff_against_is_picked_on_one_timer() {
    let (_tmp, ws) = new_workspace();
    let ms = |us: f64| rung::stats::summarize(&[us / 1e3]);
    let timed = |basis: &str, headline: f64, events: f64| {
        let size = SizeBench { headline: ms(headline), gpu: ms(events), basis: basis.into(), ..Default::default() };
        let detail = StageDetail::Bench(BenchDetail { sizes: vec![size], ..Default::default() });
        vec![result(Stage::Bench, Verdict::Pass, vec![], detail)]
    };
    record(&ws, "v001", &timed("cupti", 259.1, 261.6));
    record(&ws, "v002", &timed("events", 261.0, 261.0));
    let mut store = Store::open(&ws.join(".rung")).unwrap();
    for v in ["v001", "v002"] {
        store.set_status(v, Status::Approved, None).unwrap();
    }
    let app = open_app(&ws, false).unwrap();
    let (best, what) = app.against_version(&tui::asm_view::Against::Best).unwrap();
    assert_eq!((best.as_str(), what.as_str()), ("v002", "v002 (best approved)"));
}

/// `T` on a version with a trace opens it over the panes: the statistics, then one timeline row
/// per SM where each cell is the section that took most of that slice (its initial); `+` zooms
/// in (the axis ends at half the span), `l` scrolls right, Esc closes. Without a trace, `T` says
/// how to record one.
#[test]
fn t_shows_the_trace_statistics_and_a_timeline_that_zooms_and_scrolls() {
    use rung::trace::{Kind, Record, chrome_trace, decode, hash, names_in, summarise};
    let (_tmp, ws) = new_workspace();
    let r = |t: u64, name: &str, kind, sm: u32| Record {
        time_ns: t,
        tag: hash(name),
        kind,
        sm,
        block: sm,
        warp: 0,
        per_block: true,
    };
    // SM 0: load for 600 ns, then store for 400 ns; SM 1: load alone, 1000 ns.
    let rs = [
        r(0, "load", Kind::Begin, 0),
        r(600, "load", Kind::End, 0),
        r(600, "store", Kind::Begin, 0),
        r(1_000, "store", Kind::End, 0),
        r(0, "load", Kind::Begin, 1),
        r(1_000, "load", Kind::End, 1),
    ];
    let d = decode(&rs, &names_in("RUNG_TRACE_BEGIN(load) RUNG_TRACE_BEGIN(store)"), 6, 1024);
    let w = rung::workspace::Workspace::open(&ws).unwrap();
    let dumps = ws.join(".rung/dumps/v001");
    std::fs::create_dir_all(&dumps).unwrap();
    std::fs::write(
        dumps.join("v001.trace.json"),
        serde_json::to_vec(&chrome_trace(&d, rung::trace::Leader::Warp)).unwrap(),
    )
    .unwrap();
    let record = rung::model::trace::TraceRecord {
        version: "v001".into(),
        source_hash: w.source_hash(w.version("v001").unwrap()).unwrap(),
        sizes: [("n".to_string(), 1 << 20)].into_iter().collect(),
        arch: "sm_90".into(),
        seed: 7,
        recorded_at: "2026-12-05T00:00:00Z".into(),
        launch_ms: 0.012,
        untraced_median_ms: None,
        untraced_basis: None,
        chrome_trace: ".rung/dumps/v001/v001.trace.json".into(),
        summary: summarise(&d, rung::trace::HEADER_MECHANISM),
        leader: rung::trace::Leader::Block,
        first_capacity: None,
    };
    std::fs::write(rung::stages::trace::record_path(&w, "v001"), serde_json::to_vec(&record).unwrap()).unwrap();

    let mut app = open_app(&ws, false).unwrap();
    assert_eq!(app.selected_version().map(|v| v.id.as_str()), Some("v001"));
    press(&mut app, "T");
    let text = screen_text(&app, 100, 30);
    assert!(text.contains("v001 trace · n=1048576 · sm_90 · Esc closes"), "{text}");
    assert!(text.contains("2 block leaders on 2 SMs, 1.0 µs from the first record to the last"), "{text}");
    let row = |text: &str, sm: &str| text.lines().find(|l| l.contains(sm)).unwrap_or_default().to_string();
    let (sm0, sm1) = (row(&text, "SM 0 "), row(&text, "SM 1 "));
    // SM 0 is load then store, about 6 to 4; SM 1 is load throughout.
    let (l0, s0) = (sm0.matches('L').count(), sm0.matches('S').count() - 1);
    assert!(l0 > 0 && s0 > 0 && (l0 as f64 / (l0 + s0) as f64 - 0.6).abs() < 0.05, "{sm0}");
    assert!(sm0.find('L') < sm0.rfind('S'), "load comes first: {sm0}");
    assert!(sm1.matches('S').count() == 1 && sm1.matches('L').count() > l0, "only its label has an S: {sm1}");
    assert!(text.contains("0.0 µs") && text.contains("1.0 µs"), "the axis spans the trace: {text}");
    snapshot("trace_overlay_100x30", &text);
    // Zoom in: half the span; then scroll right.
    press(&mut app, "+");
    let zoomed = screen_text(&app, 100, 30);
    assert!(zoomed.contains("0.5 µs") && zoomed.contains("×2"), "{zoomed}");
    press(&mut app, "l");
    let scrolled = screen_text(&app, 100, 30);
    assert!(scrolled.contains("0.1 µs") && scrolled.contains("0.6 µs"), "{scrolled}");
    app.update(key(KeyCode::Esc));
    assert!(!screen_text(&app, 100, 30).contains("v001 trace ·"));
    // v002 has none.
    press(&mut app, "jT");
    assert!(
        app.message.as_deref().unwrap_or_default().starts_with("no trace of v002 yet: `rung trace v002`"),
        "{:?}",
        app.message
    );
}

/// The log pane says where each rung's time went, longest first, when the rung recorded it
/// (the build's tools, the run's phases, the bench's).
#[test]
fn the_log_pane_shows_where_the_run_and_bench_time_went() {
    let (_tmp, ws) = new_workspace();
    let mut app = open_app(&ws, false).unwrap();
    let StageDetail::Build(mut build) = build_detail(32) else { unreachable!() };
    build.phases =
        [("nvcc", 0.32), ("nvdisasm", 0.43), ("ptxas", 0.02)].into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let run = rung::model::run::RunDetail {
        mode: "cuda".into(),
        sizes: vec![],
        phases: [("fork".to_string(), 0.01), ("import".to_string(), 0.42)].into_iter().collect(),
        launched: vec![],
        sandbox: None,
    };
    let bench = rung::model::bench::BenchDetail {
        phases: [("inputs", 0.31), ("series", 2.5), ("interleaved", 6.25), ("device_state", 0.02)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        sizes: vec![rung::model::bench::SizeBench {
            sizes: [("n".to_string(), 1024)].into_iter().collect(),
            phases: [("timed", 1.75), ("upload", 0.5)].into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            ..Default::default()
        }],
        ..Default::default()
    };
    app.update(done(
        "v001",
        Verdict::Pass,
        vec![
            result(Stage::Build, Verdict::Pass, vec![], StageDetail::Build(build)),
            result(Stage::Run, Verdict::Pass, vec![], StageDetail::Run(run)),
            result(Stage::Bench, Verdict::Pass, vec![], StageDetail::Bench(bench)),
        ],
    ));
    let text = pane_text(&app, Pane::Log, 120, 20);
    assert!(text.contains("time: nvdisasm 0.43 s · nvcc 0.32 s · ptxas 0.02 s"), "{text}");
    assert!(text.contains("time: import 0.42 s · fork 0.01 s"), "{text}");
    assert!(text.contains("time: interleaved 6.25 s · series 2.50 s · inputs 0.31 s · device_state 0.02 s"), "{text}");
    assert!(text.contains("series at n=1024: timed 1.75 s · upload 0.50 s"), "{text}");
}
