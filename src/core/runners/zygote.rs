//! The Python zygote: one process that imported the heavy modules once, forking a child per
//! check (or per problem's own code), and the protocol's requests to that child.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::model::protocol::{CallMode, Fork, Hello, Op, Request, Response, WorkerError};

use super::{
    Failure, Live, START_LIMIT, Worker, WorkerEnv, live_add, live_remove, problem_imports, running, signal_kill, worker,
};

/// The Python zygote and its current child.
pub struct Zygote {
    pub(super) worker: Worker,
    live: Live,
    /// Triton's interpreter (TRITON_INTERPRET=1, no CUDA) or real Triton.
    pub interpret: bool,
    /// The zygote whose children run only the problem's own code (a rung.toml problem's Python
    /// reference and checks.py), never a version: see [`Runners::reference`].
    pub reference: bool,
    child: Option<u32>,
    /// The mode the current child was forked in.
    pub(super) child_mode: Option<CallMode>,
    next_id: u64,
    /// The current child's token, on each of its answers.
    token: Option<String>,
    /// The id of a request sent ([`Zygote::send`]) whose answer is not read yet.
    pending: Option<u64>,
    /// A fork sent ahead of need ([`Zygote::fork_ahead`]), its id and mode; its answer is read
    /// by the next request.
    ahead: Option<(u64, CallMode)>,
}

/// 128 bits from std's randomly keyed hasher: a fork's token, new for every check.
fn fork_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let word = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        h.finish()
    };
    format!("{:016x}{:016x}", word(), word())
}

impl Zygote {
    pub(super) fn start(
        python: &Path,
        script: &Path,
        (interpret, reference): (bool, bool),
        env: &WorkerEnv,
        live: Live,
    ) -> Result<Zygote, Failure> {
        let mut cmd = Command::new(python);
        cmd.arg(script).arg(if interpret { "--interpret" } else { "--cuda" });
        env.apply(&mut cmd, crate::sandbox::Seal::ItsChildren);
        if reference {
            cmd.arg("--reference");
            // What the problem's own Python imports that is slow to import: once, in the zygote.
            let imports = problem_imports(&env.cwd);
            if !imports.is_empty() {
                cmd.env("RUNG_REFERENCE_IMPORTS", imports.join(","));
            }
        }
        if interpret {
            cmd.env("TRITON_INTERPRET", "1");
        } else {
            cmd.env_remove("TRITON_INTERPRET");
        }
        let name = match (reference, interpret) {
            (true, true) => "reference",
            (true, false) => "reference-cuda",
            (false, true) => "interpret",
            (false, false) => "cuda",
        };
        let worker = Worker::start(cmd, &env.log(&format!("python-{name}")))?;
        Ok(Zygote {
            worker,
            live,
            interpret,
            reference,
            child: None,
            child_mode: None,
            next_id: 1,
            token: None,
            pending: None,
            ahead: None,
        })
    }

    /// Whether a child is running (forked and not ended).
    pub fn has_child(&self) -> bool {
        self.child.is_some()
    }

    pub fn hello(&self) -> &Hello {
        &self.worker.hello
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Forks the child for one check; in `Cuda` mode it opens the GPU first. Returns the fork's
    /// answer (its phases: fork, cuda_init).
    pub fn fork(&mut self, mode: CallMode, limit: Duration) -> Result<Response, Failure> {
        self.fork_with(Fork { mode, prewarm: vec![], prewarm_seconds: None, prewarm_arch: None, token: None }, limit)
    }

    /// As [`Zygote::fork`], with prewarm calls. The child gets a token of its own to put on
    /// every answer. A child forked ahead in this mode ([`Zygote::fork_ahead`]) is taken
    /// instead when there is nothing to prewarm: the answer's only phase is then `child_ahead`,
    /// the time still waited for it (its fork and CUDA's start were paid while nobody waited).
    pub fn fork_with(&mut self, mut fork: Fork, limit: Duration) -> Result<Response, Failure> {
        if fork.prewarm.is_empty() && self.ahead.is_some_and(|(_, m)| m == fork.mode) {
            let t = Instant::now();
            if let Some(mut resp) = self.adopt(limit)? {
                if resp.pid.is_some_and(running) {
                    resp.phases = BTreeMap::from([("child_ahead".to_string(), t.elapsed().as_secs_f64())]);
                    return Ok(resp);
                }
                // Ended while it waited (killed from outside): the zygote's line saying so is
                // read, and a child forked as usual.
                if let Some(pid) = self.child.take() {
                    live_remove(&self.live, pid);
                }
                if self.worker.receive(Duration::from_secs(10)).is_err() {
                    self.worker.kill();
                }
            }
        }
        self.drain();
        self.end_child();
        let id = self.id();
        let token = fork_token();
        fork.token = Some(token.clone());
        self.token = Some(token);
        let mode = fork.mode;
        let resp = self.worker.call(&Request { id, op: Op::Fork(fork) }, limit)?;
        if resp.ok {
            self.child = resp.pid;
            self.child_mode = Some(mode);
            if let Some(pid) = resp.pid {
                live_add(&self.live, pid);
            }
        }
        Ok(resp)
    }

    /// One request to the current child. On a time-out the child is killed and the zygote's
    /// report of its death read, so the zygote is ready for the next fork.
    pub fn call(&mut self, op: Op, limit: Duration) -> Result<Response, Failure> {
        self.send(op)?;
        self.receive(limit)
    }

    /// Sends one request to the current child and returns at once: [`Zygote::receive`] reads
    /// its answer, while the caller does other work (another process's request). Any other
    /// request to this zygote (a call, a fork, an end) first waits for that answer.
    pub fn send(&mut self, op: Op) -> Result<(), Failure> {
        self.drain();
        let id = self.id();
        self.worker.send(&Request { id, op })?;
        self.pending = Some(id);
        Ok(())
    }

    /// Forks the child the next check will ask for while nobody waits (between checks under
    /// `rung watch`), without waiting for its answer: in `Cuda` mode it opens the GPU in its own
    /// time. Nothing is done while a child runs or a request waits for its answer.
    pub fn fork_ahead(&mut self, mode: CallMode) -> Result<(), Failure> {
        if self.child.is_some() || self.pending.is_some() || self.ahead.is_some() {
            return Ok(());
        }
        let id = self.id();
        let token = fork_token();
        let fork =
            Fork { mode, prewarm: vec![], prewarm_seconds: None, prewarm_arch: None, token: Some(token.clone()) };
        self.worker.send(&Request { id, op: Op::Fork(fork) })?;
        self.token = Some(token);
        self.ahead = Some((id, mode));
        Ok(())
    }

    /// The answer to the fork sent ahead, read: its child becomes the current child. `None`
    /// when there was none, or it did not start (the caller forks as usual and reports why).
    fn adopt(&mut self, limit: Duration) -> Result<Option<Response>, Failure> {
        let Some((id, mode)) = self.ahead.take() else { return Ok(None) };
        let resp = match self.worker.receive(limit) {
            Ok(r) => r,
            Err(e) => {
                // The zygote is stuck or gone, and a late answer would misalign the channel.
                self.worker.kill();
                return Err(e);
            }
        };
        if resp.id != Some(id) {
            self.worker.kill();
            return Err(Failure::Protocol(format!(
                "the zygote answered a fork with another request's id: {:?}",
                resp.id
            )));
        }
        if !resp.ok || resp.pid.is_none() {
            return Ok(None);
        }
        self.child = resp.pid;
        self.child_mode = Some(mode);
        if let Some(pid) = resp.pid {
            live_add(&self.live, pid);
        }
        Ok(Some(resp))
    }

    /// A sent request's answer, read, so the channel lines up for the next one.
    fn drain(&mut self) {
        if self.ahead.is_some() {
            let _ = self.adopt(START_LIMIT);
        }
        if self.pending.is_some() {
            let _ = self.receive(START_LIMIT);
        }
    }

    /// The answer to the request [`Zygote::send`] sent, within `limit` from now; as
    /// [`Zygote::call`]'s.
    pub fn receive(&mut self, limit: Duration) -> Result<Response, Failure> {
        let Some(id) = self.pending.take() else {
            return Err(Failure::Protocol("no request is waiting for an answer".into()));
        };
        match self.worker.receive(limit) {
            Ok(resp) if resp.id.is_none() && !resp.ok => {
                // The zygote's line: the child died while running the request.
                if let Some(pid) = self.child.take() {
                    live_remove(&self.live, pid);
                }
                let e = resp.error.unwrap_or_else(|| WorkerError::new("WorkerDied", "the child died"));
                if e.message.contains("SIGKILL") && worker::oom_kills() > self.worker.oom_at {
                    return Err(Failure::OutOfMemory("the process running the check".into()));
                }
                Err(Failure::Died(format!("{}{}", e.message, self.worker.log_tail())))
            }
            Ok(resp) if resp.id != Some(id) || resp.token != self.token => {
                // Not the child's answer. Whatever else was written is still in the channel, so
                // the child and the zygote both go; the next check starts a new zygote.
                if let Some(pid) = self.child.take() {
                    signal_kill(pid);
                    live_remove(&self.live, pid);
                }
                self.worker.kill();
                Err(Failure::Forged(format!(
                    "a line on rung's channel that is not the child's answer ({}): the version wrote to the channel itself",
                    if resp.id != Some(id) { "another request's id" } else { "without this check's token" }
                )))
            }
            Ok(resp) => Ok(resp),
            Err(Failure::Timeout(d)) => {
                if let Some(pid) = self.child.take() {
                    signal_kill(pid);
                    live_remove(&self.live, pid);
                    // The zygote reports the death; read it so the next answer lines up.
                    if self.worker.receive(Duration::from_secs(10)).is_err() {
                        self.worker.kill();
                    }
                } else {
                    self.worker.kill();
                }
                Err(Failure::Timeout(d))
            }
            Err(e) => Err(e),
        }
    }

    /// Ends the current child, if any, and waits for it to say so.
    pub fn end_child(&mut self) {
        self.drain();
        if let Some(pid) = self.child.take() {
            live_remove(&self.live, pid);
            let id = self.id();
            if self.worker.call(&Request { id, op: Op::Exit }, Duration::from_secs(10)).is_err() {
                self.worker.kill();
            }
        }
    }
}
