//! The Slurm runner: each check is a cluster job.
//!
//! `[runner] kind = "slurm"` with `partition`, `gres` (`gpu:h100:1`), `time` (`"10:00"`, Slurm's
//! format), `account` and `srun_args` runs `rung check --json --runner local` as one `srun` job
//! in the workspace's folder. Clusters share their home and project file systems between the
//! login node and the compute nodes, so the job reads the workspace where it is; its history it
//! keeps on the node's own disk (SQLite's write-ahead log does not work across hosts), and its
//! report comes back on srun's standard output, whose results are recorded here. The job's state (pending with
//! Slurm's reason, running on a node) is polled with `squeue` and reported as it changes; a
//! newer save cancels the job with `scancel`; a job killed at its time limit is the verdict
//! `time-limit`, with the limit, rather than a silent failure.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::check::CheckOptions;
use crate::model::report::{CheckReport, RanOn, Reason};
use crate::spec::RunnerSpec;
use crate::store::Store;
use crate::workspace::Workspace;

/// How often the job's state is asked for.
const POLL: Duration = Duration::from_millis(500);

/// A job's state as squeue reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStatus {
    pub id: String,
    /// `PENDING`, `RUNNING`, `COMPLETING`...
    pub state: String,
    /// Slurm's reason for a pending job (`Resources`, `Priority`, `QOSMaxJobsPerUserLimit`).
    pub reason: String,
    pub node: String,
}

impl JobStatus {
    /// `slurm job 12 pending (Resources)`, `slurm job 12 running on node7`.
    pub fn describe(&self) -> String {
        let state = self.state.to_lowercase();
        match state.as_str() {
            "pending" => format!("slurm job {} pending ({})", self.id, self.reason),
            _ if !self.node.is_empty() && self.node != "(null)" => {
                format!("slurm job {} {state} on {}", self.id, self.node)
            }
            _ => format!("slurm job {} {state}", self.id),
        }
    }

    /// Parses a line of `squeue -h -o '%i|%T|%r|%N'`.
    pub fn parse(line: &str) -> Option<JobStatus> {
        let mut f = line.trim().split('|');
        let id = f.next()?.trim().to_string();
        if id.is_empty() {
            return None;
        }
        Some(JobStatus {
            id,
            state: f.next()?.trim().to_string(),
            reason: f.next().unwrap_or("").trim().to_string(),
            node: f.next().unwrap_or("").trim().to_string(),
        })
    }
}

/// The srun command line for a check, before rung's own arguments.
pub fn srun_args(r: &RunnerSpec, name: &str, root: &std::path::Path) -> Vec<String> {
    let mut a = vec!["--job-name".to_string(), name.to_string(), "--chdir".into(), root.display().to_string()];
    let mut opt = |flag: &str, v: &Option<String>| {
        if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
            a.push(flag.to_string());
            a.push(v.clone());
        }
    };
    opt("--partition", &r.partition);
    opt("--gres", &r.gres);
    opt("--time", &r.time);
    opt("--account", &r.account);
    a.extend(r.srun_args.iter().cloned());
    a.push("--ntasks".into());
    a.push("1".into());
    a
}

fn squeue(name: &str) -> Option<JobStatus> {
    let out = Command::new("squeue").args(["-h", "-n", name, "-o", "%i|%T|%r|%N"]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(JobStatus::parse)
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Why a Slurm check gave no report.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("cannot find rung itself: {0}")]
    NoRung(std::io::Error),
    #[error("cannot start srun (is Slurm's client installed?): {0}")]
    Srun(std::io::Error),
    #[error("srun: {0}")]
    Wait(std::io::Error),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// `rung check` as a Slurm job. `status` hears every change of the job's state; `cancel`
/// (a newer save) cancels the job: `Ok(None)`.
pub fn check(
    ws: &Workspace,
    store: &mut Store,
    opts: &CheckOptions,
    r: &RunnerSpec,
    cancel: Option<&AtomicBool>,
    status: &mut dyn FnMut(&JobStatus),
) -> Result<Option<CheckReport>, SlurmError> {
    let seed = match opts.seed {
        Some(s) => s,
        None => store.next_seed(crate::check::draw_seed)?,
    };
    let exe = match r.rung.as_deref().filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe().map_err(SlurmError::NoRung)?,
    };
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let name = format!("rung-{}-{n}", std::process::id());
    let mut cmd = Command::new("srun");
    cmd.args(srun_args(r, &name, &ws.root));
    cmd.arg("--").arg(&exe).args(["check", "--json", "--runner", "local", "--seed", &seed.to_string()]);
    // The job's history on the node's own disk (srun passes the environment on): the workspace's
    // history.db stays this host's alone, and the report's results are recorded here.
    let key = crate::store::sha256_hex(ws.root.to_string_lossy().as_bytes());
    cmd.env(crate::store::HISTORY_ELSEWHERE, format!("/tmp/rung-history-{}.db", &key[..16]));
    if opts.no_bench {
        cmd.arg("--no-bench");
    }
    cmd.args(&opts.versions);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(SlurmError::Srun)?;
    let mut out_pipe = child.stdout.take().expect("piped");
    let mut err_pipe = child.stderr.take().expect("piped");
    let out_thread = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out_pipe.read_to_end(&mut b);
        b
    });
    let err_thread = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err_pipe.read_to_end(&mut b);
        b
    });
    let mut last: Option<JobStatus> = None;
    let mut cancelled = false;
    let exit = loop {
        if let Some(code) = child.try_wait().map_err(SlurmError::Wait)? {
            break code;
        }
        if let Some(s) = squeue(&name)
            && last.as_ref() != Some(&s)
        {
            status(&s);
            last = Some(s);
        }
        if !cancelled && cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
            cancelled = true;
            let _ = Command::new("scancel").args(["-n", &name]).status();
        }
        std::thread::sleep(POLL);
    };
    let stdout = out_thread.join().unwrap_or_default();
    let stderr = String::from_utf8_lossy(&err_thread.join().unwrap_or_default()).into_owned();
    if cancelled {
        return Ok(None);
    }
    let job = last.as_ref().map_or_else(|| "?".to_string(), |s| s.id.clone());
    let node = last.as_ref().map(|s| s.node.clone()).filter(|n| !n.is_empty() && n != "(null)");
    if let Ok(mut report) = serde_json::from_slice::<CheckReport>(&stdout) {
        for v in &mut report.versions {
            let ran = v.ran_on.get_or_insert_with(|| RanOn {
                host: node.clone().unwrap_or_default(),
                gpu: None,
                uuid: None,
                device: None,
                runner: None,
            });
            ran.runner = Some(format!("slurm job {job}"));
        }
        report.workspace = ws.root.clone();
        // The job kept its history on the node: every result goes into this one here.
        let started = std::time::SystemTime::now();
        for v in &mut report.versions {
            let Some(file) = ws.version(&v.id).cloned() else { continue };
            let hash = ws.source_hash(&file).unwrap_or_else(|| v.source_hash.clone());
            store.sync_version(&file, &hash, v.status)?;
            for s in v.stages.iter_mut() {
                *s = crate::check::record(store, &file, &v.source_hash, seed, started, s.clone())?;
            }
        }
        return Ok(Some(report));
    }
    // No report: the job died. Say how, in Slurm's words.
    let last = crate::diag::last_line(&stderr);
    let (reason, why) = if stderr.contains("DUE TO TIME LIMIT") {
        let limit = r.time.as_deref().unwrap_or("the partition's default");
        (
            Reason::TimeLimit,
            format!(
                "slurm job {job} was killed at its time limit ({limit}): raise `time` under [runner], or make the check faster"
            ),
        )
    } else if stderr.contains("execve") || (stderr.contains(&*exe.to_string_lossy()) && stderr.contains("No such file"))
    {
        (
            Reason::Crashed,
            format!(
                "slurm job {job} could not start {} on the compute node ({last}): put rung on a filesystem the nodes share, or name the binary there with rung = \"/path/to/rung\" under [runner]",
                exe.display()
            ),
        )
    } else if stderr.contains("CANCELLED") {
        (Reason::Crashed, format!("slurm job {job} was cancelled outside rung: {last}"))
    } else {
        (Reason::Crashed, format!("slurm job {job} ended with {exit} and no report: {last}"))
    };
    let ran = RanOn {
        host: node.unwrap_or_default(),
        gpu: None,
        uuid: None,
        device: None,
        runner: Some(format!("slurm job {job}")),
    };
    let failure = crate::check::RunnerFailure { reason, summary: why, duration_ms: 0.0, ran_on: ran };
    Ok(crate::check::runner_failed(ws, store, &opts.versions, seed, failure).map(Some)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeue_lines_and_their_words() {
        let p = JobStatus::parse("12|PENDING|Resources|\n").unwrap();
        assert_eq!(p.describe(), "slurm job 12 pending (Resources)");
        let r = JobStatus::parse("12|RUNNING|None|gpu7").unwrap();
        assert_eq!(r.describe(), "slurm job 12 running on gpu7");
        assert!(JobStatus::parse("").is_none());
    }

    #[test]
    fn srun_gets_every_option_that_is_set() {
        let r = RunnerSpec {
            partition: Some("gpu".into()),
            gres: Some("gpu:h100:1".into()),
            time: Some("10:00".into()),
            account: None,
            srun_args: vec!["--exclusive".into()],
            ..RunnerSpec::default()
        };
        let a = srun_args(&r, "rung-1-0", std::path::Path::new("/ws"));
        assert_eq!(
            a.join(" "),
            "--job-name rung-1-0 --chdir /ws --partition gpu --gres gpu:h100:1 --time 10:00 --exclusive --ntasks 1"
        );
    }
}
