//! The real binary's TUI in a real terminal (tmux), on a workspace written by `rung new`: an
//! atomic-rename save (a temporary file renamed over the version, as editors save) turns the
//! screen from building to the new verdict; a compile error shows at its line in the errors
//! pane; approve and reject by key survive a restart of the TUI; quitting, Ctrl-Z and SIGTERM
//! give the terminal back (and `fg` takes it again). The screen is polled with a deadline, never read after a fixed sleep.
//! And the chat: a message typed in the side panel gets a real provider's reply (the loopback
//! server replaying a recorded OpenAI stream) streamed on screen and saved in `.rung/chat/`.
//!
//! Needs tmux and a CUDA compiler (nvcc or NVRTC, for the build rung); no GPU: without one the
//! run rung is skipped, which is a verdict like any other. The chat's test needs tmux only.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rung::store::{Status, Store};

const RUNG: &str = env!("CARGO_BIN_EXE_rung");
/// How long one state may take to appear (an nvcc build is a few seconds on a busy machine).
const DEADLINE: Duration = Duration::from_secs(90);

/// A tmux server of its own (its own socket), killed when the test ends however it ends.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(env: &[(&str, &Path)], width: u16, height: u16) -> Tmux {
        let socket = format!("rung-test-{}-{}", std::process::id(), rand_suffix());
        let mut cmd = Command::new("tmux");
        cmd.args(["-L", &socket, "-f", "/dev/null", "new-session", "-d", "-s", "t"])
            .args(["-x", &width.to_string(), "-y", &height.to_string(), "sh"])
            .env("NO_COLOR", "1")
            .env("PS1", "$ ")
            .env("TERM", "xterm-256color");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("tmux runs");
        assert!(out.status.success(), "tmux new-session: {}", String::from_utf8_lossy(&out.stderr));
        let t = Tmux { socket };
        // The pane stays after its process exits, so the restored screen can be read.
        t.tmux(&["set-option", "-t", "t", "remain-on-exit", "on"]);
        t
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux").args(["-L", &self.socket]).args(args).output().expect("tmux runs");
        assert!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "t"])
    }

    /// Types text literally (no key names).
    fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "t", "-l", text]);
    }

    /// Presses keys by tmux's names (`Enter`, `Escape`, `j`).
    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend(keys);
        self.tmux(&args);
    }

    /// Polls the screen until `ready` holds; fails with the last screen after the deadline.
    fn wait_for(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(start.elapsed() < DEADLINE, "waited {DEADLINE:?} for {what}; the screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn pane(&self, format: &str) -> String {
        self.tmux(&["display-message", "-p", "-t", "t", format]).trim().to_string()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.socket, "kill-server"]).output();
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() % 1_000_000)
}

/// Whether tmux and a CUDA compiler are here; says why not otherwise.
fn can_run() -> bool {
    if Command::new("tmux").arg("-V").output().is_err() {
        assert!(
            std::env::var_os("RUNG_REQUIRE_TOOLCHAIN").is_none(),
            "RUNG_REQUIRE_TOOLCHAIN is set but tmux is missing"
        );
        eprintln!("SKIPPED: tmux is not installed (apt-get install tmux): the TUI's end-to-end test needs a terminal");
        return false;
    }
    let tc = common::doctor_toolchain();
    if tc["nvcc"]["path"].is_null() && tc["nvrtc"]["path"].is_null() {
        assert!(
            std::env::var_os("RUNG_REQUIRE_TOOLCHAIN").is_none(),
            "RUNG_REQUIRE_TOOLCHAIN is set but no CUDA compiler"
        );
        eprintln!("SKIPPED: no nvcc or NVRTC here (run `rung setup`): the build rung cannot run");
        return false;
    }
    true
}

/// Saves as editors do: the new text into a temporary file beside it, renamed over the version.
fn atomic_save(path: &Path, text: &str) {
    let tmp = path.with_file_name(format!(".{}.tmp", path.file_name().unwrap().to_string_lossy()));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The versions pane's row of `id` (its left half: the detail pane is beside it).
fn row<'a>(screen: &'a str, id: &str) -> &'a str {
    let line = screen.lines().find(|l| l.starts_with('┃') && l.contains(&format!(" {id} "))).unwrap_or("");
    line.char_indices().skip(1).find(|(_, c)| *c == '┃').map_or(line, |(i, _)| &line[..i])
}

const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

#[test]
fn a_save_a_compile_error_and_reviews_in_the_real_tui() {
    if !can_run() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let out = Command::new(RUNG).args(["new", ws.to_str().unwrap(), "--template", "vector-add"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let config = tmp.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    let t = Tmux::start(&[("XDG_CONFIG_HOME", &config)], 200, 50);
    t.type_text(&format!("cd '{}' && '{RUNG}' tui; echo TUI-EXITED=$?", ws.display()));
    t.keys(&["Enter"]);
    // Saves are seen once the scheduler watches the files.
    t.wait_for("the TUI", |s| s.contains("compile errors") && s.contains("watching") && row(s, "v003").contains("new"));

    // A save with an undeclared name on line 6: the error at that line (nvcc stops at it within
    // a frame or two, too fast to be sure to see the spinner; the fix below is watched building).
    let file: PathBuf = ws.join("versions/v001-naive.cu");
    let good = std::fs::read_to_string(&file).unwrap();
    assert!(good.lines().nth(5).unwrap().contains("out[i] = a[i] + b[i];"), "line 6 of the template changed");
    atomic_save(&file, &good.replace("out[i] = a[i] + b[i];", "out[i] = a[i] + bb[i];"));
    let s = t.wait_for("the compile error", |s| s.contains("versions/v001-naive.cu:6:"));
    let error = s.lines().find(|l| l.contains("versions/v001-naive.cu:6:")).unwrap();
    assert!(error.contains("error") && error.contains("bb"), "{error}");
    assert!(s.contains("  6 │     if (i < n) out[i] = a[i] + bb[i];"), "the offending line under it:\n{s}");
    assert!(row(&s, "v001").contains('✗'), "the build failed:\n{s}");

    // The fix, saved the same way: building again, then the new verdict and no error.
    atomic_save(&file, &good.replace("// One element per thread", "// One element per thread (fixed)"));
    let s = t.wait_for("v001 building", |s| row(s, "v001").contains(SPINNER));
    assert!(s.contains("v001: building"), "the correctness pane says so too:\n{s}");
    let s = t.wait_for("the new verdict", |s| {
        let r = row(s, "v001");
        !r.contains(SPINNER) && !r.contains('✗') && r.matches('✓').count() >= 2
    });
    assert!(s.contains("v001: no diagnostics"), "{s}");
    assert!(!s.contains("v001-naive.cu:6:"), "the old error is gone:\n{s}");

    // Approve v001, reject v002 with a reason, by key. v001 was not checked here (no GPU): the
    // TUI asks first, saying so, and y approves.
    t.keys(&["a"]);
    t.wait_for("the question", |s| s.contains("approve v001? not checked here: run: no GPU"));
    t.keys(&["y"]);
    t.wait_for("v001 approved", |s| row(s, "v001").contains("✓ approved"));
    t.keys(&["j", "r"]);
    t.wait_for("the reason prompt", |s| s.contains("reject v002, reason:"));
    t.type_text("too slow");
    t.keys(&["Enter"]);
    t.wait_for("v002 rejected", |s| row(s, "v002").contains("✗ rejected"));

    // q gives the terminal back to the shell.
    t.keys(&["q"]);
    let s = t.wait_for("the shell", |s| s.contains("TUI-EXITED=0"));
    assert!(!s.contains("compile errors"), "the TUI's screen is gone:\n{s}");

    // Ctrl-Z stops it with the shell's screen back; `fg` brings it back, repainted.
    t.type_text(&format!("'{RUNG}' tui"));
    t.keys(&["Enter"]);
    t.wait_for("the TUI", |s| s.contains("compile errors") && s.contains("watching"));
    t.keys(&["C-z"]);
    t.wait_for("the stopped job", |s| s.contains("Stopped") && !s.contains("compile errors"));
    t.type_text("fg; echo FG-DONE=$?");
    t.keys(&["Enter"]);
    t.wait_for("the TUI resumed", |s| s.contains("compile errors") && row(s, "v002").contains("✗ rejected"));
    t.keys(&["q"]);
    // The shell's own word that the TUI has exited: a frame without the panes (the TUI leaving
    // its screen) can come first, and keys typed then would go to the TUI.
    t.wait_for("the shell", |s| s.contains("FG-DONE=0"));

    // A new TUI shows both reviews; so does the history.
    t.type_text(&format!("exec '{RUNG}' tui"));
    t.keys(&["Enter"]);
    let s = t.wait_for("the TUI again", |s| s.contains("compile errors") && row(s, "v003").contains("v003"));
    assert!(row(&s, "v001").contains("✓ approved") && row(&s, "v002").contains("✗ rejected"), "{s}");
    let store = Store::open(&ws.join(".rung")).unwrap();
    let v002 = store.version("v002").unwrap().unwrap();
    assert_eq!((v002.status, v002.reason.as_deref()), (Status::Rejected, Some("too slow")));
    assert_eq!(store.version("v001").unwrap().unwrap().status, Status::Approved);
    t.keys(&["j"]);
    t.wait_for("v002's reason", |s| s.contains("v002, rejected: too slow"));

    // SIGTERM ends it cleanly too: the shell's screen is back and it exits 0.
    let pid: i32 = t.pane("#{pane_pid}").parse().unwrap();
    // SAFETY: a signal to the process this test started in the pane.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let s = t.wait_for("the terminal restored after SIGTERM", |s| !s.contains("compile errors"));
    assert!(s.contains("TUI-EXITED=0"), "the main screen is back:\n{s}");
    // The process is gone (or a zombie waiting for tmux to reap it). tmux does not always record
    // the status of a pane's process by the time it marks the pane dead; when it has, it is 0.
    let start = Instant::now();
    let gone = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |st| st.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
    };
    while !gone(pid) {
        assert!(start.elapsed() < DEADLINE, "the TUI did not exit on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    let dead = t.pane("#{pane_dead}:#{pane_dead_status}:#{pane_dead_signal}");
    assert!(dead == "1:0:" || dead == "1::", "dead, exit status 0 and no signal: {dead}");
}

/// Start to first frame and resident memory of the real TUI on a workspace whose history holds
/// 200 versions, each with every rung recorded. The clock starts when the shell is about to exec
/// rung (it writes the time first) and stops when tmux's screen first shows the versions; the
/// memory is the process's VmRSS once the scheduler has settled, and its peak (VmHWM). Not run
/// by `cargo test`: `cargo test --release --test tui_tmux perf_ -- --ignored --nocapture`.
#[test]
#[ignore]
fn perf_start_to_first_frame_and_memory_with_200_versions() {
    if !can_run() {
        return;
    }
    let (_tmp, ws) = common::new_workspace("vector-add");
    let template = std::fs::read_to_string(ws.join("versions/v001-naive.cu")).unwrap();
    for f in std::fs::read_dir(ws.join("versions")).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    let w = {
        for i in 1..=200 {
            // Each its own source, so each has its own hash and its own results.
            std::fs::write(ws.join(format!("versions/v{i:03}-try.cu")), format!("{template}\n// try {i}\n")).unwrap();
        }
        rung::workspace::Workspace::open(&ws).unwrap()
    };
    let mut store = Store::open(&w.state_dir()).unwrap();
    let stages = ["prepare", "build", "run", "check", "bench", "roofline"];
    for v in &w.versions {
        let hash = w.source_hash(v).unwrap();
        store.sync_version(v, &hash, Status::Draft).unwrap();
        for stage in stages {
            use rung::model::report::{StageDetail, StageResult, Verdict};
            use rung::stages::bench::{BenchDetail, SizeBench};
            // The bench as recorded, with a summary of 400 samples.
            let samples: Vec<f64> = (0..400).map(|i| 0.0123 + f64::from(i) * 1e-7).collect();
            let headline = rung::stats::summarize(&samples);
            let detail = if stage == "bench" {
                StageDetail::Bench(BenchDetail {
                    gpu: "NVIDIA H200".into(),
                    sizes: vec![SizeBench { headline, basis: "events".into(), ..Default::default() }],
                    ..Default::default()
                })
            } else {
                StageDetail::None
            };
            let result = StageResult {
                stage: serde_json::from_value(serde_json::json!(stage)).unwrap(),
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
            };
            let payload = serde_json::to_string(&result).unwrap();
            store
                .record(&rung::store::NewResult {
                    version: &v.id,
                    stage,
                    verdict: "pass",
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
    drop(store);
    let t = Tmux::start(&[], 200, 60);
    let t0 = ws.join("t0");
    t.type_text(&format!("cd '{}' && date +%s%N > '{}' && exec '{RUNG}' tui", ws.display(), t0.display()));
    t.keys(&["Enter"]);
    // Polled as fast as tmux answers.
    let seen = loop {
        let screen = t.screen();
        if screen.contains("versions") && screen.contains(" v001 ") {
            break std::time::SystemTime::now();
        }
    };
    let started: u128 = std::fs::read_to_string(&t0).unwrap().trim().parse().unwrap();
    let seen = seen.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let first_frame_ms = (seen - started) as f64 / 1e6;
    t.wait_for("the scheduler", |s| s.contains("watching"));
    std::thread::sleep(Duration::from_secs(2));
    let pid = t.pane("#{pane_pid}");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = |key: &str| -> u64 {
        status.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)).unwrap().parse().unwrap()
    };
    let (rss, hwm) = (kb("VmRSS:") as f64 / 1024.0, kb("VmHWM:") as f64 / 1024.0);
    eprintln!(
        "200 versions, {} results in the history: first frame after {first_frame_ms:.0} ms; VmRSS {rss:.1} MiB, peak {hwm:.1} MiB",
        200 * stages.len()
    );
    assert!(hwm < 150.0, "peak resident memory {hwm:.1} MiB");
}

/// Whether tmux is here; says why not otherwise.
fn tmux_here() -> bool {
    if Command::new("tmux").arg("-V").output().is_ok() {
        return true;
    }
    assert!(std::env::var_os("RUNG_REQUIRE_TOOLCHAIN").is_none(), "RUNG_REQUIRE_TOOLCHAIN is set but tmux is missing");
    eprintln!("SKIPPED: tmux is not installed (apt-get install tmux): the chat's end-to-end test needs a terminal");
    false
}

#[test]
fn a_message_typed_in_the_chat_streams_the_reply_on_screen() {
    use common::loopback::{Reply, Server, fixture, inside};
    if !tmux_here() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let out = Command::new(RUNG).args(["new", ws.to_str().unwrap(), "--template", "vector-add"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The recorded OpenAI stream, served in pieces cut inside a character and inside the fence.
    let body = fixture("openai-code-block.sse");
    let server =
        Server::start(vec![Reply::stream(&body, &[inside(&body, "\u{2014}", 1), inside(&body, "```cuda", 2)])]);
    let config = tmp.path().join("config");
    std::fs::create_dir_all(config.join("rung")).unwrap();
    std::fs::write(
        config.join("rung/config.toml"),
        format!(
            "[keys]\nchat = [\"c\"]\n\n[agent]\nprovider = \"local\"\n\n[agent.providers.local]\nkind = \"openai\"\n\
             base_url = \"{}/v1\"\nmodel = \"gpt-test\"\nretries = 0\n",
            server.url
        ),
    )
    .unwrap();
    let t = Tmux::start(&[("XDG_CONFIG_HOME", &config)], 200, 50);
    t.type_text(&format!("cd '{}' && '{RUNG}' tui; echo TUI-EXITED=$?", ws.display()));
    t.keys(&["Enter"]);
    // The file's [keys] apply beside its [agent]: the chat is on `c` here.
    let s = t.wait_for("the TUI", |s| s.contains("compile errors") && s.contains("c chat"));
    assert!(!s.contains("using the default settings"), "{s}");
    t.keys(&["c"]);
    t.wait_for("the chat", |s| s.contains("chat · local gpt-test · 0 in / 0 out"));
    t.type_text("a kernel?");
    t.keys(&["Enter"]);
    let s = t.wait_for("the reply", |s| s.contains("It needs `n % 4 == 0`.") && s.contains("52 in / 61 out"));
    assert!(s.contains("Here is a vectorised kernel \u{2014} each thread adds four floats"), "{s}");
    assert!(s.contains("│ __global__ void add4(const float4* a, float4* out, int n) {"), "{s}");
    assert!(s.contains("you") && s.contains("a kernel?"), "{s}");
    // Tab gives the keys back: `q` quits instead of being typed.
    t.keys(&["Tab"]);
    t.keys(&["q"]);
    t.wait_for("the shell", |s| s.contains("TUI-EXITED=0"));
    let chat = ws.join(".rung/chat");
    let saved: String =
        std::fs::read_dir(&chat).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap()).collect();
    assert!(saved.contains("a kernel?") && saved.contains("It needs `n % 4 == 0`."), "{saved}");
}

/// The vector-add workspace with an agent on the loopback server `url` (`extra`: more TOML for
/// the `[agent]` table), its TUI started in tmux and watching.
fn agent_tui(tmp: &Path, ws: &Path, url: &str, extra: &str) -> Tmux {
    let config = tmp.join("config");
    std::fs::create_dir_all(config.join("rung")).unwrap();
    std::fs::write(
        config.join("rung/config.toml"),
        format!(
            "[agent]\nprovider = \"local\"\n{extra}\n[agent.providers.local]\nkind = \"openai\"\n\
             base_url = \"{url}/v1\"\nmodel = \"gpt-test\"\nretries = 0\n"
        ),
    )
    .unwrap();
    let t = Tmux::start(&[("XDG_CONFIG_HOME", &config)], 200, 50);
    t.type_text(&format!("cd '{}' && '{RUNG}' tui; echo TUI-EXITED=$?", ws.display()));
    t.keys(&["Enter"]);
    t.wait_for("the TUI", |s| s.contains("compile errors") && s.contains("watching") && row(s, "v003").contains("new"));
    t
}

/// The agent's loop in the real TUI: a message asks for a faster v003; the reply streams on
/// screen; its code becomes v004-agent-bigger-blocks.py, which is selected and climbs the rungs
/// (Triton's interpreter here); `a` approves it; the next message's request carries v004 as the
/// version in focus, where the first carried v003.
#[test]
fn an_agent_proposal_climbs_is_approved_and_becomes_the_next_parent() {
    use common::loopback::{Reply, Server, openai_text};
    if !can_run() || !common::toolchain_here() {
        return;
    }
    let (tmp, ws) = common::new_workspace("vector-add");
    let v003 = std::fs::read_to_string(ws.join("versions/v003-triton.py")).unwrap();
    let faster = v003.replace("BLOCK = 1024", "BLOCK = 4096");
    assert_ne!(faster, v003, "the template's block size changed");
    let first = format!(
        "name: bigger blocks\n\nFour times the block: a quarter of the programs, each loading more.\n\n```python\n{faster}```\n"
    );
    let server = Server::start(vec![
        Reply::stream(&openai_text(&first), &[]),
        Reply::stream(&openai_text("Next I would try num_warps=8."), &[]),
    ]);
    let t = agent_tui(tmp.path(), &ws, &server.url, "");
    t.keys(&["j", "j"]);
    t.keys(&["i"]);
    t.wait_for("the chat", |s| s.contains("chat · local gpt-test"));
    t.type_text("make v003 faster");
    t.keys(&["Enter"]);
    // The whole notice: a capture can land while the terminal is half drawn.
    let s =
        t.wait_for("the reply and the proposal", |s| s.contains("proposed v004") && s.contains("Tab gives the keys"));
    assert!(s.contains("Four times the block: a quarter of the programs"), "the reply streamed:\n{s}");
    assert!(s.contains("made from v003"), "{s}");
    // The chat has the keys: the notice says how to get them back before `a` approves.
    assert!(s.contains("Tab gives the keys") && !s.contains("now; a approves"), "{s}");
    let file = ws.join("versions/v004-agent-bigger-blocks.py");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), faster, "the reply's block, byte for byte");

    // It climbs: run and check pass in the interpreter, the bench is skipped (no GPU).
    t.keys(&["Tab"]);
    let s = t.wait_for("v004's verdicts", |s| {
        let r = row(s, "v004");
        !r.contains(SPINNER) && r.matches('✓').count() >= 4
    });
    assert!(row(&s, "v004").contains("proposed"), "{s}");
    assert!(s.contains("v004 proposed by the agent"), "the log says so:\n{s}");

    // `a` approves the selected version: the proposal.
    t.keys(&["a"]);
    t.wait_for("v004 approved", |s| row(s, "v004").contains("✓ approved"));
    t.keys(&["i"]);
    t.type_text("and now?");
    t.keys(&["Enter"]);
    t.wait_for("the second reply", |s| s.contains("Next I would try num_warps=8."));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    let system = |i: usize| reqs[i].body["messages"][0]["content"].as_str().unwrap().to_string();
    assert!(system(0).contains("## The version in focus: v003 ("), "{}", system(0));
    assert!(
        system(1)
            .contains("## The version in focus: v004 (versions/v004-agent-bigger-blocks.py, approved, made from v003)"),
        "{}",
        system(1)
    );
    let store = Store::open(&ws.join(".rung")).unwrap();
    let row4 = store.version("v004").unwrap().unwrap();
    assert_eq!((row4.status, row4.parent.as_deref()), (Status::Approved, Some("v003")));
    let record = rung::agent::propose::record_of(&ws.join(".rung"), "v004").unwrap();
    assert_eq!(record.request, "make v003 faster");
    assert!(record.reply.starts_with("name: bigger blocks"));
    t.keys(&["Tab", "q"]);
    t.wait_for("the shell", |s| s.contains("TUI-EXITED=0"));
}

/// Auto mode in the real TUI: `A` starts it; a wrong proposal climbs in the scheduler, fails its
/// check and is rejected with the reason; the next request says so; a correct one passes; the
/// budget of `[agent.auto]` (two versions) stops it, and the log says why.
#[test]
fn auto_mode_in_the_tui_rejects_the_wrong_proposal_and_stops_at_its_budget() {
    use common::loopback::{Reply, Server, openai_text};
    if !can_run() || !common::toolchain_here() {
        return;
    }
    let (tmp, ws) = common::new_workspace("vector-add");
    let v003 = std::fs::read_to_string(ws.join("versions/v003-triton.py")).unwrap();
    let wrong = v003.replace("a + b, mask=mask", "a - b, mask=mask");
    assert_ne!(wrong, v003, "the template's store changed");
    let reply =
        |name: &str, src: &str| Reply::stream(&openai_text(&format!("name: {name}\n\n```python\n{src}```\n")), &[]);
    let server = Server::start(vec![reply("minus", &wrong), reply("same again", &v003)]);
    let t = agent_tui(tmp.path(), &ws, &server.url, "\n[agent.auto]\nmax_versions = 2\n");
    t.keys(&["j", "j", "A"]);
    let s = t.wait_for("auto mode to stop", |s| s.contains("auto mode stopped"));
    assert!(s.contains("auto mode stopped: budget spent: 2 versions proposed (limit 2)"), "{s}");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    let body = |i: usize| reqs[i].body.to_string();
    assert!(body(0).contains("The version in focus: v003"), "starts from the selection: {}", body(0));
    assert!(body(1).contains("- v004: auto: check fail"), "the reason in the next request: {}", body(1));
    assert!(body(1).contains("v004 was rejected: check fail"), "{}", body(1));
    let store = Store::open(&ws.join(".rung")).unwrap();
    let v4 = store.version("v004").unwrap().unwrap();
    assert_eq!(v4.status, Status::Rejected);
    assert!(v4.reason.as_deref().unwrap().starts_with("auto: check fail"), "{v4:?}");
    assert_eq!(store.version("v005").unwrap().unwrap().status, Status::Proposed);
    t.keys(&["Tab", "q"]);
    t.wait_for("the shell", |s| s.contains("TUI-EXITED=0"));
}
