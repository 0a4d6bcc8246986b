//! The protocol's processes at their lowest level: a child speaking JSON lines on its standard
//! input and output, and why a request to one got no answer.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

use crate::model::protocol::{self, Hello, Op, Request, Response, WorkerKind};

use super::START_LIMIT;

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// No answer within the limit; the process running it was killed.
    Timeout(Duration),
    /// The process died; the text says how (signal, status) and what it printed last.
    Died(String),
    /// The worker answered something that is not the protocol, or could not start.
    Protocol(String),
    /// A line on the protocol's stream that is not the child's answer to the request: another
    /// id, or without the fork's token. Something else wrote it (the version, to its inherited
    /// descriptors); the child was killed.
    Forged(String),
    /// The process was killed outright while the kernel's out-of-memory killer ended a process
    /// ([`oom_kills`] grew since the request was sent): the machine's memory ran out, which says
    /// nothing sure of the version. The text says which process.
    OutOfMemory(String),
}

/// How many processes the kernel's out-of-memory killer has ended since boot (`oom_kill` in
/// /proc/vmstat; 0 where it is not said).
pub fn oom_kills() -> u64 {
    std::fs::read_to_string("/proc/vmstat").map(|t| vmstat_oom_kills(&t)).unwrap_or(0)
}

fn vmstat_oom_kills(text: &str) -> u64 {
    text.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Timeout(d) => {
                write!(f, "no answer within {:.1} s (limits.run in rung.toml); the worker was killed", d.as_secs_f64())
            }
            Failure::Died(why) => write!(f, "{why}"),
            Failure::Protocol(why) => write!(f, "{why}"),
            Failure::Forged(why) => write!(f, "{why}"),
            Failure::OutOfMemory(what) => write!(
                f,
                "the kernel's out-of-memory killer ended {what}: this machine ran out of memory (the problem's \
                 tensors, held by the version's process and the judge's): no verdict on the version"
            ),
        }
    }
}

impl std::error::Error for Failure {}

/// A child process speaking the protocol on its standard input and output; its standard error
/// goes to a log file, whose tail is quoted when it dies.
pub struct Worker {
    pub(super) child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    log: PathBuf,
    pub hello: Hello,
    /// [`oom_kills`] when the last request was sent.
    pub(super) oom_at: u64,
}

impl Worker {
    pub fn start(mut cmd: Command, log: &Path) -> Result<Worker, Failure> {
        let what = cmd.get_program().to_string_lossy().into_owned();
        if let Some(dir) = log.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let stderr = std::fs::File::create(log).map(Stdio::from).unwrap_or_else(|_| Stdio::null());
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| Failure::Protocol(format!("cannot start the worker ({what}): {e}")))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let placeholder = Hello {
            protocol: 0,
            worker: WorkerKind::Native,
            pid: 0,
            capabilities: vec![],
            gpu: None,
            uuid: None,
            python: None,
            packages: Default::default(),
            start_seconds: None,
            warmed: Default::default(),
            error: None,
        };
        let mut w = Worker { child, stdin, lines, log: log.to_path_buf(), hello: placeholder, oom_at: oom_kills() };
        let line = w.read(START_LIMIT).map_err(|e| match e {
            Failure::Timeout(_) => Failure::Protocol(format!(
                "the worker ({what}) did not start within {} s; its log: {}",
                START_LIMIT.as_secs(),
                w.log.display()
            )),
            other => other,
        })?;
        let hello: Hello = serde_json::from_str(&line)
            .map_err(|e| Failure::Protocol(format!("bad handshake from the worker ({what}): {e}: {line}")))?;
        if hello.protocol != protocol::PROTOCOL {
            return Err(Failure::Protocol(format!(
                "the worker speaks protocol {}, rung speaks {}",
                hello.protocol,
                protocol::PROTOCOL
            )));
        }
        if let Some(e) = &hello.error {
            return Err(Failure::Protocol(format!("the worker cannot run: {}: {}", e.kind, e.message)));
        }
        w.hello = hello;
        Ok(w)
    }

    pub(super) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(6)..].join("\n");
        if tail.is_empty() { String::new() } else { format!("; it printed:\n{tail}") }
    }

    pub(super) fn read(&mut self, limit: Duration) -> Result<String, Failure> {
        self.lines.recv_timeout(limit).map_err(|e| match e {
            RecvTimeoutError::Timeout => Failure::Timeout(limit),
            RecvTimeoutError::Disconnected => {
                let status = self.child.wait();
                let killed = status.as_ref().is_ok_and(|s| std::os::unix::process::ExitStatusExt::signal(s) == Some(9));
                if killed && oom_kills() > self.oom_at {
                    return Failure::OutOfMemory("the worker".into());
                }
                let status = status.map(|s| s.to_string()).unwrap_or_default();
                Failure::Died(format!("the worker died ({status}){}", self.log_tail()))
            }
        })
    }

    pub(super) fn send(&mut self, req: &Request) -> Result<(), Failure> {
        self.oom_at = oom_kills();
        let line = serde_json::to_string(req).expect("requests serialise") + "\n";
        self.stdin
            .write_all(line.as_bytes())
            .and_then(|_| self.stdin.flush())
            .map_err(|_| Failure::Died(format!("the worker is gone{}", self.log_tail())))
    }

    pub(super) fn receive(&mut self, limit: Duration) -> Result<Response, Failure> {
        let line = self.read(limit)?;
        serde_json::from_str(&line).map_err(|e| Failure::Protocol(format!("bad answer from the worker: {e}: {line}")))
    }

    /// One request and its answer. A time-out leaves the worker running: the caller decides
    /// what to kill.
    pub fn call(&mut self, req: &Request, limit: Duration) -> Result<Response, Failure> {
        self.send(req)?;
        self.receive(limit)
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    /// Asks the worker to exit (its standard input closes as this ends too) and leaves its end
    /// to [`super::ending`]: nothing here waits for a CUDA context's teardown. A worker already
    /// reaped (killed, or found dead) is not handed over.
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        let _ = self.send(&Request { id: 0, op: Op::Exit });
        let grace = if self.hello.worker == WorkerKind::Native { Duration::ZERO } else { super::ending::GRACE };
        super::ending::hand_over(self.child.id(), grace);
    }
}

#[cfg(test)]
mod tests {
    use super::{Failure, vmstat_oom_kills};

    /// The kernel's count of out-of-memory kills is read from /proc/vmstat's text, and a
    /// process it ended is said to be no verdict on the version.
    #[test]
    fn oom_kills_are_read_from_vmstat_and_an_oom_kill_is_no_verdict() {
        assert_eq!(vmstat_oom_kills("pgfault 12\noom_kill 3\nnr_foo 1\n"), 3);
        assert_eq!(vmstat_oom_kills("pgfault 12\n"), 0);
        let said = Failure::OutOfMemory("the process running the check".into()).to_string();
        assert!(said.starts_with("the kernel's out-of-memory killer ended the process running the check"), "{said}");
        assert!(said.ends_with("no verdict on the version"), "{said}");
    }
}
