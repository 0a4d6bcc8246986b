//! The SSH runner against a real sshd that the test starts on loopback, with its own host key, a
//! throwaway user key and a known_hosts file (host key checking on), reached through a TCP relay
//! the test controls. A workspace checked through it (build, dumps, Triton's interpreter, no GPU)
//! gets the verdicts and metrics of a local check, its dumps fetched and its results recorded with
//! where they ran; a second check sends nothing; the relay cutting the connection mid-run gives
//! the `connection-lost` verdict within seconds, and the next check passes through a new one.
//!
//! Needs sshd (openssh-server; `.ci/run` installs it), ssh, nvcc and Triton.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

const RUNG: &str = env!("CARGO_BIN_EXE_rung");

fn sshd_here() -> Option<PathBuf> {
    let sshd = PathBuf::from("/usr/sbin/sshd");
    let ok = sshd.exists() && Command::new("ssh").arg("-V").output().is_ok();
    if !ok {
        assert!(
            std::env::var_os("RUNG_REQUIRE_TOOLCHAIN").is_none(),
            "RUNG_REQUIRE_TOOLCHAIN is set but sshd or ssh is missing"
        );
        eprintln!("SKIPPED: no /usr/sbin/sshd or ssh here (apt-get install openssh-server openssh-client)");
        return None;
    }
    Some(sshd)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn keygen(path: &Path) {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "rung-test", "-f"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "ssh-keygen: {}", String::from_utf8_lossy(&out.stderr));
}

/// A TCP relay from its own port to sshd's, whose connections the test can cut.
struct Relay {
    port: u16,
    live: Arc<Mutex<Vec<(TcpStream, Instant)>>>,
    stop: Arc<AtomicBool>,
}

impl Relay {
    fn start(to: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let live: Arc<Mutex<Vec<(TcpStream, Instant)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (live.clone(), stop.clone());
        std::thread::spawn(move || {
            for inbound in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(inbound) = inbound else { continue };
                let Ok(outbound) = TcpStream::connect(("127.0.0.1", to)) else { continue };
                l.lock().unwrap().push((inbound.try_clone().unwrap(), Instant::now()));
                l.lock().unwrap().push((outbound.try_clone().unwrap(), Instant::now()));
                for (mut from, mut to) in
                    [(inbound.try_clone().unwrap(), outbound.try_clone().unwrap()), (outbound, inbound)]
                {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 65536];
                        loop {
                            match from.read(&mut buf) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => {
                                    if to.write_all(&buf[..n]).is_err() {
                                        break;
                                    }
                                }
                            }
                        }
                        let _ = to.shutdown(Shutdown::Write);
                    });
                }
            }
        });
        Relay { port, live, stop }
    }

    /// Connections open for at least `age`.
    fn older_than(&self, age: Duration) -> usize {
        self.live.lock().unwrap().iter().filter(|(s, t)| t.elapsed() >= age && s.peer_addr().is_ok()).count()
    }

    /// Cuts every connection, as a network failure would.
    fn cut(&self) {
        for (s, _) in self.live.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        self.cut();
    }
}

/// sshd on loopback with its own keys, and an ssh config that reaches it through the relay.
struct Sshd {
    child: Child,
    _dir: tempfile::TempDir,
    config: PathBuf,
    relay: Relay,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_sshd(sshd: &Path) -> Sshd {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    keygen(&d.join("hostkey"));
    keygen(&d.join("userkey"));
    std::fs::copy(d.join("userkey.pub"), d.join("authorized_keys")).unwrap();
    let port = free_port();
    let _ = std::fs::create_dir_all("/run/sshd");
    let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout).unwrap().trim().to_string();
    std::fs::write(
        d.join("sshd_config"),
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nPidFile {pid}\nAuthorizedKeysFile {ak}\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
             PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nAcceptEnv RUNG_HOME\nLogLevel ERROR\n",
            hk = d.join("hostkey").display(),
            pid = d.join("sshd.pid").display(),
            ak = d.join("authorized_keys").display(),
        ),
    )
    .unwrap();
    let child = Command::new(sshd)
        .args(["-D", "-e", "-f"])
        .arg(d.join("sshd_config"))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(start.elapsed() < Duration::from_secs(20), "sshd did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let relay = Relay::start(port);
    let host_key = std::fs::read_to_string(d.join("hostkey.pub")).unwrap();
    let key_line = host_key.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    std::fs::write(d.join("known_hosts"), format!("[127.0.0.1]:{} {key_line}\n", relay.port)).unwrap();
    let set_env = std::env::var("RUNG_HOME").map(|h| format!("  SetEnv RUNG_HOME={h}\n")).unwrap_or_default();
    let config = d.join("ssh_config");
    std::fs::write(
        &config,
        format!(
            "Host rung-test\n  HostName 127.0.0.1\n  Port {}\n  User {user}\n  IdentityFile {}\n  IdentitiesOnly yes\n\
             \x20 UserKnownHostsFile {}\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n{set_env}",
            relay.port,
            d.join("userkey").display(),
            d.join("known_hosts").display(),
        ),
    )
    .unwrap();
    Sshd { child, _dir: dir, config, relay }
}

fn rung(dir: &Path, args: &[&str], sshd: &Sshd) -> (serde_json::Value, String) {
    let out = Command::new(RUNG)
        .args(args)
        .current_dir(dir)
        .env("RUNG_SSH", format!("ssh -F {}", sshd.config.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    (v, stderr)
}

/// rung.toml's `[runner]` table set to the test's sshd, mirroring into `mirror`.
fn runner_in_toml(ws: &Path, mirror: &Path) {
    let spec = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    let table = "[runner]\nkind = \"local\"";
    assert!(spec.contains(table), "the template's [runner] changed");
    let ssh = format!("[runner]\nkind = \"ssh\"\nhost = \"rung-test\"\nworkdir = \"{}\"", mirror.display());
    std::fs::write(ws.join("rung.toml"), spec.replace(table, &ssh)).unwrap();
}

/// `rung watch --json --no-bench` in `ws`, its ssh through the test's config; events on stdout.
fn watch_through(ws: &Path, sshd: &Sshd) -> Child {
    Command::new(RUNG)
        .args(["watch", "--json", "--no-bench", "--seed", "3"])
        .current_dir(ws)
        .env("RUNG_SSH", format!("ssh -F {}", sshd.config.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn stages(v: &serde_json::Value) -> Vec<(String, String)> {
    v["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["stage"].as_str().unwrap().to_string(), s["verdict"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn a_check_through_ssh_matches_the_local_one_and_survives_a_cut_connection() {
    let Some(sshd_bin) = sshd_here() else { return };
    if !common::toolchain_here() {
        return;
    }
    let sshd = start_sshd(&sshd_bin);
    let (_tmp, local) = common::new_workspace("vector-add");
    let remote_root = tempfile::tempdir().unwrap();
    let there = remote_root.path().join("mirror");
    let url = format!("ssh://rung-test{}", there.display());

    // The same workspace, checked here and through the runner, with the same seed.
    let (here, _) = rung(&local, &["check", "--json", "--seed", "5", "--no-bench", "v001", "v003"], &sshd);
    let (away, stderr) =
        rung(&local, &["check", "--json", "--seed", "5", "--no-bench", "--runner", &url, "v001", "v003"], &sshd);
    assert!(stderr.contains(&format!("{url}: sent ")) && stderr.contains("shipped rung to"), "{stderr}");
    for i in 0..2 {
        let (h, a) = (&here["versions"][i], &away["versions"][i]);
        assert_eq!(h["id"], a["id"]);
        assert_eq!(stages(h), stages(a), "{} here and there", h["id"]);
        assert!(h["ran_on"]["runner"].is_null(), "a local result says no runner: {}", h["ran_on"]);
        assert_eq!(a["ran_on"]["runner"], url.as_str(), "{}", a["ran_on"]);
        assert!(a["ran_on"]["host"].as_str().is_some_and(|h| !h.is_empty()));
    }
    let metrics = |v: &serde_json::Value| {
        let check = v["stages"].as_array().unwrap().iter().find(|s| s["stage"] == "check").cloned().unwrap();
        check["detail"]["results"].clone()
    };
    assert_eq!(metrics(&here["versions"][1]), metrics(&away["versions"][1]), "the interpreter's metrics, identical");
    assert_eq!(away["versions"][1]["stages"][2]["detail"]["mode"], "triton-interpreter");
    // The files went there; the dumps came back; the history here has the results.
    assert!(there.join("versions/v003-triton.py").exists() && there.join("rung.toml").exists());
    let sass: Vec<_> = std::fs::read_dir(local.join(".rung/dumps/v001")).unwrap().flatten().collect();
    assert!(sass.iter().any(|e| e.path().extension().is_some_and(|x| x == "sass")), "{sass:?}");
    let store = rung::store::Store::open(&local.join(".rung")).unwrap();
    let rows = store.latest_results("v003").unwrap();
    assert!(rows.iter().any(|r| r.stage == "check" && r.verdict == "pass"), "{rows:?}");

    // Nothing changed: nothing is sent again. An edit sends that file alone.
    let (_, stderr) = rung(&local, &["check", "--json", "--seed", "5", "--no-bench", "--runner", &url, "v003"], &sshd);
    assert!(stderr.contains("sent 0 file(s), removed 0, using"), "{stderr}");
    let v3 = local.join("versions/v003-triton.py");
    let src = std::fs::read_to_string(&v3).unwrap();
    std::fs::write(&v3, src.replace("BLOCK = 1024", "BLOCK = 512")).unwrap();
    let (again, stderr) =
        rung(&local, &["check", "--json", "--seed", "5", "--no-bench", "--runner", &url, "v003"], &sshd);
    assert!(stderr.contains("sent 1 file(s)"), "{stderr}");
    assert_eq!(again["versions"][0]["verdict"], "pass", "{again}");
    assert_eq!(
        std::fs::read_to_string(there.join("versions/v003-triton.py")).unwrap(),
        std::fs::read_to_string(&v3).unwrap()
    );

    // A version that sleeps in its run; the relay cuts the connection while it does.
    let slow = src.replace("def run(a, b, out, n):\n", "def run(a, b, out, n):\n    import time\n    time.sleep(60)\n");
    assert_ne!(slow, src, "the template's run() changed");
    std::fs::write(local.join("versions/v004-sleepy.py"), slow).unwrap();
    let child = Command::new(RUNG)
        .args(["check", "--json", "--seed", "5", "--no-bench", "--runner", &url, "v004"])
        .current_dir(&local)
        .env("RUNG_SSH", format!("ssh -F {}", sshd.config.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while sshd.relay.older_than(Duration::from_secs(3)) == 0 {
        assert!(start.elapsed() < Duration::from_secs(60), "the check's connection never stayed open");
        std::thread::sleep(Duration::from_millis(100));
    }
    let cut_at = Instant::now();
    sshd.relay.cut();
    let out = child.wait_with_output().unwrap();
    let waited = cut_at.elapsed();
    assert!(waited < Duration::from_secs(30), "the lost connection was noticed after {waited:?}");
    let lost: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    let v = &lost["versions"][0];
    assert_eq!((v["id"].as_str(), v["verdict"].as_str()), (Some("v004"), Some("error")), "{lost}");
    let stage = &v["stages"][0];
    assert_eq!(stage["reason"], "connection-lost", "{stage}");
    let summary = stage["summary"].as_str().unwrap();
    assert!(summary.contains("was lost mid-run") && summary.contains("reconnected"), "{summary}");
    assert_eq!(lost["exit_code"], 5, "rung or a tool broke, not the version: {lost}");

    // The next check goes through a new connection.
    let (after, _) = rung(&local, &["check", "--json", "--seed", "5", "--no-bench", "--runner", &url, "v003"], &sshd);
    assert_eq!(after["versions"][0]["verdict"], "pass", "{after}");
    eprintln!("the cut was noticed in {waited:?}");
}

#[test]
fn a_host_key_that_does_not_match_is_refused() {
    let Some(sshd_bin) = sshd_here() else { return };
    let sshd = start_sshd(&sshd_bin);
    let (_tmp, ws) = common::new_workspace("vector-add");
    // Another key in known_hosts: ssh must refuse, and rung must say so, not prompt or go on.
    let kh = sshd.config.parent().unwrap().join("known_hosts");
    let other = sshd.config.parent().unwrap().join("otherkey");
    keygen(&other);
    let line = std::fs::read_to_string(&kh).unwrap();
    let host = line.split_whitespace().next().unwrap().to_string();
    let pubkey = std::fs::read_to_string(other.with_extension("pub")).unwrap();
    let key: Vec<&str> = pubkey.split_whitespace().take(2).collect();
    std::fs::write(&kh, format!("{host} {}\n", key.join(" "))).unwrap();
    let out = Command::new(RUNG)
        .args(["check", "--json", "--no-bench", "--runner", "ssh://rung-test/tmp/rung-never", "v001"])
        .current_dir(&ws)
        .env("RUNG_SSH", format!("ssh -F {}", sshd.config.display()))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let summary = v["versions"][0]["stages"][0]["summary"].as_str().unwrap_or_default().to_string();
    assert_eq!(v["versions"][0]["stages"][0]["reason"], "connection-failed", "nothing ran there: {v}");
    assert!(summary.contains("Host key verification failed"), "ssh's own reason is kept: {summary}");
}

/// rung.toml's `runner = "ssh://..."` sends the scheduler's checks there too: `rung watch`'s
/// `done` event for a version says where its rungs ran, and the metrics are the remote's.
#[test]
fn the_scheduler_runs_the_rungs_through_rung_toml_s_runner() {
    use std::io::BufRead;
    let Some(sshd_bin) = sshd_here() else { return };
    if !common::toolchain_here() {
        return;
    }
    let sshd = start_sshd(&sshd_bin);
    let (_tmp, ws) = common::new_workspace("vector-add");
    let remote_root = tempfile::tempdir().unwrap();
    let url = format!("ssh://rung-test{}", remote_root.path().join("mirror").display());
    runner_in_toml(&ws, &remote_root.path().join("mirror"));
    let mut child = watch_through(&ws, &sshd);
    let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut done = None;
    for line in lines {
        let ev: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if ev["event"] == "done" && ev["version"] == "v003" {
            done = Some(ev);
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let ev = done.expect("a done event for v003");
    let report = &ev["report"];
    assert_eq!(report["verdict"], "pass", "{report}");
    assert_eq!(report["ran_on"]["runner"], url.as_str(), "{report}");
    let check = report["stages"].as_array().unwrap().iter().find(|s| s["stage"] == "check").unwrap();
    assert_eq!(check["ran_on"]["runner"], url.as_str(), "each result keeps where it ran: {check}");
    assert!(remote_root.path().join("mirror/versions/v003-triton.py").exists());
}

/// Through the scheduler, each rung's result comes home as the remote records it (a `running`
/// job event naming it, before the version is done), and a newer save stops the remote check:
/// its worker process is gone within seconds, and the new version passes.
#[test]
fn results_come_home_rung_by_rung_and_a_newer_save_stops_the_remote_check() {
    use std::io::BufRead;
    let Some(sshd_bin) = sshd_here() else { return };
    if !common::toolchain_here() {
        return;
    }
    let sshd = start_sshd(&sshd_bin);
    let (_tmp, ws) = common::new_workspace("vector-add");
    for v in ["v001-naive.cu", "v002-float4.cu"] {
        std::fs::remove_file(ws.join("versions").join(v)).unwrap();
    }
    let remote_root = tempfile::tempdir().unwrap();
    runner_in_toml(&ws, &remote_root.path().join("mirror"));
    // A version whose run() writes its process id, then sleeps far past the test, when it runs in
    // Triton's interpreter (the build's ahead-of-time capture calls it too). Into the mirror's
    // build scratch, which a sandboxed version may write.
    let pid_file = remote_root.path().join("mirror/.rung/tmp/sleeper.pid");
    let src = std::fs::read_to_string(ws.join("versions/v003-triton.py")).unwrap();
    let sleepy = src.replace(
        "def run(a, b, out, n):\n",
        &format!(
            "def run(a, b, out, n):\n    import os, time\n    if os.environ.get('TRITON_INTERPRET') == '1':\n        open({:?}, 'w').write(str(os.getpid()))\n        time.sleep(600)\n",
            pid_file.display().to_string()
        ),
    );
    assert_ne!(sleepy, src, "the template's run() changed");
    std::fs::remove_file(ws.join("versions/v003-triton.py")).unwrap();
    let v4 = ws.join("versions/v004-sleepy.py");
    std::fs::write(&v4, &sleepy).unwrap();

    let mut child = watch_through(&ws, &sshd);
    let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                break;
            }
        }
    });
    let next = |what: &str, f: &dyn Fn(&serde_json::Value) -> bool| -> serde_json::Value {
        let start = Instant::now();
        loop {
            let left = Duration::from_secs(180).saturating_sub(start.elapsed());
            let ev = rx.recv_timeout(left).unwrap_or_else(|_| panic!("no {what} within 180 s"));
            if ev["event"] == "done" && ev["version"] == "v004" && ev["generation"] == 1 {
                panic!("v004's first run finished instead of sleeping: {ev}");
            }
            if f(&ev) {
                return ev;
            }
        }
    };
    // The build's result, announced while the job still runs (the run rung sleeps).
    let note = next("a streamed build result", &|ev| {
        ev["event"] == "job"
            && ev["version"] == "v004"
            && ev["state"] == "running"
            && ev["why"].as_str().is_some_and(|w| w.starts_with("v004 build pass"))
    });
    let store = rung::store::Store::open(&ws.join(".rung")).unwrap();
    let rows = store.latest_results("v004").unwrap();
    let build = rows.iter().find(|r| r.stage == "build").unwrap_or_else(|| panic!("{note} but {rows:?}"));
    assert_eq!(build.verdict, "pass");
    assert!(build.payload["ran_on"]["runner"].as_str().is_some_and(|r| r.starts_with("ssh://")), "{:?}", build.payload);
    // The worker is in run(), asleep, on the remote side.
    let start = Instant::now();
    let pid: i32 = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse().ok()) {
            break p;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "run() never started there");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    // A newer save: the old job is cancelled, and the remote process with it.
    std::fs::write(&v4, &src).unwrap();
    let saved = Instant::now();
    next("the cancelled job", &|ev| {
        ev["event"] == "job" && ev["version"] == "v004" && ev["generation"] == 1 && ev["state"] == "cancelled"
    });
    while Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
    {
        assert!(saved.elapsed() < Duration::from_secs(20), "the remote run() (pid {pid}) is still alive");
        std::thread::sleep(Duration::from_millis(100));
    }
    let stopped = saved.elapsed();
    let done = next("the new version's result", &|ev| {
        ev["event"] == "done" && ev["version"] == "v004" && ev["generation"] == 2
    });
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(done["report"]["verdict"], "pass", "{done}");
    eprintln!("the remote run was stopped {stopped:?} after the save");
}
