//! The Slurm runner against a real single-node cluster that the test configures and starts on
//! loopback: munged with its own key, slurmctld and slurmd with their own ports, state and spool
//! folders (Debian's packages; `.ci/run` installs them). Checks run as `srun` jobs with the
//! CPU-capable rungs (build, Triton's interpreter); a second save cancels the first job (seen in
//! `squeue`/`scontrol`); a job killed at its time limit is the verdict `time-limit`.
//!
//! Needs root (slurmd runs jobs as their user), the Slurm and munge daemons, nvcc and Triton.

use std::io::BufRead;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

const RUNG: &str = env!("CARGO_BIN_EXE_rung");

fn slurm_here() -> bool {
    let bins = ["/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "/usr/bin/srun", "/usr/bin/squeue"];
    let missing: Vec<&str> = bins.iter().copied().filter(|b| !Path::new(b).exists()).collect();
    // SAFETY: getuid has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    if missing.is_empty() && root {
        return true;
    }
    assert!(
        std::env::var_os("RUNG_REQUIRE_TOOLCHAIN").is_none() || !root,
        "RUNG_REQUIRE_TOOLCHAIN is set but {missing:?} are missing"
    );
    eprintln!(
        "SKIPPED: the Slurm test needs root and slurmctld, slurmd, munge (apt-get install slurmctld slurmd slurm-client munge); missing: {missing:?}, root: {root}"
    );
    false
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// munged, slurmctld and slurmd of a one-node cluster, stopped when dropped.
struct Cluster {
    dir: tempfile::TempDir,
    daemons: Vec<Child>,
}

impl Cluster {
    fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", self.conf());
        c
    }

    fn out(&self, program: &str, args: &[&str]) -> String {
        let o = self.cmd(program).args(args).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// `JobState=...` of a job, from scontrol (kept for MinJobAge after it ends).
    fn job_state(&self, id: &str) -> String {
        let text = self.out("scontrol", &["show", "job", "-o", id]);
        text.split_whitespace().find_map(|w| w.strip_prefix("JobState=")).unwrap_or("").to_string()
    }

    /// Waits (30 s at most) for a job to reach `want`: an ending job is COMPLETING for a moment.
    fn wait_state(&self, id: &str, want: &str) {
        let start = Instant::now();
        while self.job_state(id) != want {
            assert!(start.elapsed() < Duration::from_secs(30), "job {id}: {} (waited for {want})", self.job_state(id));
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["state", "spool", "log"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        let key: Vec<u8> = (0..1024u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        std::fs::write(d.join("munge.key"), key).unwrap();
        std::fs::set_permissions(d.join("munge.key"), std::os::unix::fs::PermissionsExt::from_mode(0o400)).unwrap();
        let munge = d.join("munge.sock");
        let st = Command::new("/usr/sbin/munged")
            .arg("--force")
            .arg(format!("--key-file={}", d.join("munge.key").display()))
            .arg(format!("--socket={}", munge.display()))
            .arg(format!("--pid-file={}", d.join("munged.pid").display()))
            .arg(format!("--log-file={}", d.join("log/munged.log").display()))
            .arg(format!("--seed-file={}", d.join("munged.seed").display()))
            .status()
            .unwrap();
        assert!(st.success(), "munged did not start");
        let host = String::from_utf8(Command::new("hostname").output().unwrap().stdout).unwrap().trim().to_string();
        let (ctld, slurmd) = (free_port(), free_port());
        let p = |s: &str| d.join(s).display().to_string();
        std::fs::write(
            d.join("slurm.conf"),
            format!(
                "ClusterName=rungtest\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={ctld}\nSlurmdPort={slurmd}\n\
                 SlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={sock}\n\
                 StateSaveLocation={state}\nSlurmdSpoolDir={spool}\nSlurmctldPidFile={cpid}\nSlurmdPidFile={dpid}\n\
                 SlurmctldLogFile={clog}\nSlurmdLogFile={dlog}\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
                 MpiDefault=none\nSchedulerType=sched/builtin\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
                 ReturnToService=2\nAccountingStorageType=accounting_storage/none\nJobAcctGatherType=jobacct_gather/none\n\
                 JobCompType=jobcomp/none\nMinJobAge=600\nKillWait=5\nOverTimeLimit=0\nInactiveLimit=0\n\
                 NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
                 PartitionName=rung Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n",
                sock = munge.display(),
                state = p("state"),
                spool = p("spool"),
                cpid = p("slurmctld.pid"),
                dpid = p("slurmd.pid"),
                clog = p("log/slurmctld.log"),
                dlog = p("log/slurmd.log"),
                cpus = std::thread::available_parallelism().map_or(2, |n| n.get()),
            ),
        )
        .unwrap();
        let mut c = Cluster { dir, daemons: vec![] };
        for daemon in ["/usr/sbin/slurmctld", "/usr/sbin/slurmd"] {
            let child = c
                .cmd(daemon)
                .args(["-D", "-f"])
                .arg(c.conf())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            c.daemons.push(child);
        }
        let start = Instant::now();
        loop {
            let state = c.out("sinfo", &["-h", "-o", "%T"]);
            if state.trim() == "idle" {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "the node never became idle: {state:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
        c
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.cmd("scancel").args(["--user", "root"]).status();
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        if let Ok(pid) = std::fs::read_to_string(self.dir.path().join("munged.pid")) {
            // SAFETY: a signal to the munged this test started.
            unsafe { libc::kill(pid.trim().parse().unwrap_or(0), libc::SIGTERM) };
        }
    }
}

/// The workspace with a Slurm `[runner]` (and `[limits]` run raised, so Slurm's limit acts first).
fn workspace(runner: &str) -> (tempfile::TempDir, PathBuf) {
    let (tmp, ws) = common::new_workspace("vector-add");
    let spec = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    let table = "[runner]\nkind = \"local\"";
    assert!(spec.contains(table) && spec.contains("run = \"30s\""), "the template's [runner] or [limits] changed");
    let spec = spec.replace(table, &format!("[runner]\nkind = \"slurm\"\npartition = \"rung\"\n{runner}"));
    std::fs::write(ws.join("rung.toml"), spec.replace("run = \"30s\"", "run = \"600s\"")).unwrap();
    (tmp, ws)
}

/// v004: the template's Triton version, sleeping in its run.
fn sleepy(ws: &Path, seconds: u32, tag: &str) {
    let src = std::fs::read_to_string(ws.join("versions/v003-triton.py")).unwrap();
    let slow = src.replace(
        "def run(a, b, out, n):\n",
        &format!("def run(a, b, out, n):\n    import time  # {tag}\n    time.sleep({seconds})\n"),
    );
    assert_ne!(slow, src, "the template's run() changed");
    std::fs::write(ws.join("versions/v004-sleepy.py"), slow).unwrap();
}

#[test]
fn checks_run_as_slurm_jobs_a_save_cancels_the_running_job_and_the_time_limit_is_a_verdict() {
    if !slurm_here() || !common::toolchain_here() {
        return;
    }
    let cluster = Cluster::start();

    // A check as a job: the verdicts of a local check, and where it ran.
    let (_tmp, ws) = workspace("time = \"5:00\"");
    let run = |args: &[&str]| {
        let o = cluster.cmd(RUNG).args(args).current_dir(&ws).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
        });
        (v, String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (job, stderr) = run(&["check", "--json", "--no-bench", "--seed", "5", "v003", "v001"]);
    let verdicts = |v: &serde_json::Value| common::stage_lines(v, |s| format!("{}:{}", s["stage"], s["verdict"]));
    assert_eq!(job["versions"][0]["verdict"], "pass", "{job}");
    let runner = job["versions"][0]["ran_on"]["runner"].as_str().unwrap().to_string();
    assert!(runner.starts_with("slurm job "), "{runner}");
    let id = runner.trim_start_matches("slurm job ").to_string();
    assert!(stderr.contains(&format!("rung check: slurm job {id} running on")), "{stderr}");
    cluster.wait_state(&id, "COMPLETED");
    // The job kept its own history on the node's disk (SQLite's log is not for a shared file
    // system); its results came home in the report and are in the workspace's history, each
    // saying where it ran.
    let store = rung::store::Store::open(&ws.join(".rung")).unwrap();
    let check = store.latest_results("v003").unwrap().into_iter().find(|r| r.stage == "check").unwrap();
    assert_eq!(check.payload["ran_on"]["runner"], runner.as_str(), "{}", check.payload);
    drop(store);
    let key = rung::store::sha256_hex(ws.canonicalize().unwrap().to_string_lossy().as_bytes());
    let node_db = std::path::PathBuf::from(format!("/tmp/rung-history-{}.db", &key[..16]));
    let node = rusqlite_count(&node_db, "v003");
    assert!(node > 0, "the job's own history at {} holds its rows", node_db.display());
    let _ = std::fs::remove_file(&node_db);
    let (here, _) = run(&["check", "--json", "--no-bench", "--seed", "5", "--runner", "local", "v003", "v001"]);
    assert_eq!(verdicts(&job), verdicts(&here), "a job's verdicts are a local check's");

    // The scheduler: a save while v004's job runs cancels that job and submits a new one.
    sleepy(&ws, 300, "first");
    let mut watch = cluster
        .cmd(RUNG)
        .args(["watch", "--json", "--no-bench", "--changes-only"])
        .current_dir(&ws)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    let running_job = |lines: &mut std::io::Lines<std::io::BufReader<std::process::ChildStdout>>, not: Option<&str>| {
        for line in lines.by_ref() {
            let ev: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            let why = ev["why"].as_str().unwrap_or_default();
            if ev["version"] == "v004" && why.starts_with("slurm job ") && why.contains(" running on ") {
                let id = why.split_whitespace().nth(2).unwrap().to_string();
                if Some(id.as_str()) != not {
                    return id;
                }
            }
        }
        panic!("the watch ended before v004's job ran");
    };
    // The watch sees files that change from now on: touch v004 to start it.
    std::thread::sleep(Duration::from_millis(500));
    sleepy(&ws, 300, "second");
    let first = running_job(&mut lines, None);
    assert_eq!(cluster.out("squeue", &["-h", "-j", &first, "-o", "%T"]).trim(), "RUNNING");
    sleepy(&ws, 300, "third");
    let second = running_job(&mut lines, Some(&first));
    cluster.wait_state(&first, "CANCELLED");
    assert_eq!(cluster.job_state(&second), "RUNNING", "the new save's job runs");
    let _ = watch.kill();
    let _ = watch.wait();
    let _ = cluster.cmd("scancel").arg(&second).status();

    // A job over its time limit (1 minute; Slurm enforces it within about 30 s after).
    let (_tmp2, ws2) = workspace("time = \"1\"");
    sleepy(&ws2, 600, "limit");
    let o = cluster.cmd(RUNG).args(["check", "--json", "--no-bench", "v004"]).current_dir(&ws2).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let stage = &v["versions"][0]["stages"][0];
    assert_eq!((stage["verdict"].as_str(), stage["reason"].as_str()), (Some("error"), Some("time-limit")), "{v}");
    let summary = stage["summary"].as_str().unwrap();
    assert!(summary.contains("was killed at its time limit (1)"), "{summary}");
    let id = summary.split_whitespace().nth(2).unwrap();
    cluster.wait_state(id, "TIMEOUT");
    // The verdict is in the history too, so the TUI shows it like any other.
    let store = rung::store::Store::open(&ws2.join(".rung")).unwrap();
    let run = store.latest_results("v004").unwrap().into_iter().find(|r| r.stage == "run").unwrap();
    assert_eq!((run.verdict.as_str(), &run.payload["reason"]), ("error", &serde_json::json!("time-limit")), "{run:?}");

    // A binary the compute node cannot run (`rung` under [runner], or this binary off the
    // shared filesystem) is a failure that names it and the fix.
    let (_tmp3, ws3) = workspace("time = \"5:00\"\nrung = \"/nonexistent/rung\"");
    let o = cluster.cmd(RUNG).args(["check", "--json", "--no-bench", "v001"]).current_dir(&ws3).output().unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    let summary = v["versions"][0]["stages"][0]["summary"].as_str().unwrap_or_default().to_string();
    assert!(
        summary.contains("could not start /nonexistent/rung on the compute node") && summary.contains("under [runner]"),
        "{v}"
    );
}

/// How many result rows of `version` a history file holds (0 when it cannot be read).
fn rusqlite_count(db: &std::path::Path, version: &str) -> usize {
    if !db.is_file() {
        return 0;
    }
    // Opened through rung's own store, pointed at the file.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join(rung::store::DB_FILE);
    std::fs::copy(db, &copy).unwrap();
    for side in ["-wal", "-shm"] {
        let from = std::path::PathBuf::from(format!("{}{side}", db.display()));
        if from.is_file() {
            std::fs::copy(&from, format!("{}{side}", copy.display())).unwrap();
        }
    }
    let store = rung::store::Store::open(dir.path()).unwrap();
    store.history(Some(version), 1000).map(|r| r.len()).unwrap_or(0)
}
