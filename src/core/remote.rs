//! The SSH runner: the rungs run on another machine and the results come home.
//!
//! `runner = "ssh://user@host[:port]/path"` (rung.toml, or `rung check --runner`) names the
//! machine and the folder the workspace is mirrored to. A check then:
//!
//! 1. asks the remote, in one round trip, which rung it has and what it holds
//!    (`.rung-remote/manifest.json`: each mirrored file's SHA-256);
//! 2. sends the files that differ in one tar stream, removes the ones deleted here, and ships
//!    this binary when the remote has no rung of the same version;
//! 3. runs `rung check --json` there, over the same SSH connection's standard output: the rungs
//!    and their workers run on the remote's GPU, as they would locally;
//! 4. fetches the versions' dumps (PTX, SASS, cubins) and records every stage result in the local
//!    history, each saying where it ran (host, GPU, UUID).
//!
//! The system `ssh` with the user's config, keys and agent, `BatchMode` (no prompt can hang a
//! check) and host key checking as the user has it. Keepalives (`ServerAliveInterval` 5 s, three
//! misses) make a dead link an error within about 15 s; a lost connection is a verdict
//! (`connection-lost`; `connection-failed` when none could be made), and the next check opens a
//! new connection. `RUNG_SSH` replaces the `ssh`
//! command (e.g. `ssh -F /path/to/config`).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime};

use crate::check::CheckOptions;
use crate::model::report::{CheckReport, RanOn, Reason};
use crate::store::{Store, sha256_hex};
use crate::workspace::Workspace;

/// Files above this size are not mirrored (a check never needs them).
const MAX_FILE_BYTES: u64 = 16 << 20;
/// The folder, inside the remote workspace, that holds rung's own files there.
pub const REMOTE_DIR: &str = ".rung-remote";

/// Where an SSH runner runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    /// `user@host` or `host` (an alias of the user's ssh config works too).
    pub host: String,
    pub port: Option<u16>,
    /// The workspace's folder there: absolute, or relative to the remote home (`~/ws`).
    pub path: String,
}

/// A runner that cannot be used as given (an ssh:// URL, `--runner`, rung.toml's `[runner]`): the
/// message names what is wrong and how to write it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct RunnerError(pub String);

impl SshTarget {
    /// Parses `ssh://[user@]host[:port]/path`. `ssh://host/srv/ws` is `/srv/ws`;
    /// `ssh://host/~/ws` is `~/ws` in the remote home.
    pub fn parse(url: &str) -> Result<SshTarget, RunnerError> {
        let help = "write it as ssh://user@host[:port]/path, e.g. ssh://me@gpu-box/home/me/rmsnorm";
        let rest =
            url.strip_prefix("ssh://").ok_or_else(|| RunnerError(format!("`{url}` is not an ssh:// URL: {help}")))?;
        let (authority, path) =
            rest.split_once('/').ok_or_else(|| RunnerError(format!("`{url}` has no path: {help}")))?;
        let path = if let Some(home) = path.strip_prefix('~') { format!("~{home}") } else { format!("/{path}") };
        if path == "/" || path == "~" || path == "~/" {
            return Err(RunnerError(format!("`{url}` names no folder: {help}")));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => {
                (h, Some(p.parse::<u16>().map_err(|_| RunnerError(format!("`{p}` in `{url}` is not a port: {help}")))?))
            }
            None => (authority, None),
        };
        if host.is_empty() || host.trim_start_matches(|c: char| c != '@').len() == 1 {
            return Err(RunnerError(format!("`{url}` names no host: {help}")));
        }
        SshTarget::checked(host, port, path)
            .map_err(|why| RunnerError(format!("`{url}` has {why}, which rung will not pass to ssh: {help}")))
    }

    /// A target whose host and folder are safe to hand to ssh and to the remote shell: a host
    /// that is no ssh option (`-o...`), one word with no quote, a folder with no single quote
    /// (rung quotes it in '...'), neither with a control character. Err: what is wrong.
    pub fn checked(host: &str, port: Option<u16>, path: String) -> Result<SshTarget, RunnerError> {
        let control = |s: &str| s.chars().any(char::is_control);
        if host.starts_with('-') || host.contains(char::is_whitespace) || host.contains(['\'', '"']) || control(host) {
            return Err(RunnerError(format!("the host `{}`", host.escape_debug())));
        }
        // The folder goes to the remote shell inside '...': only a quote or a control character
        // could end it.
        if path.contains('\'') || control(&path) {
            return Err(RunnerError(format!("the folder `{}`", path.escape_debug())));
        }
        Ok(SshTarget { host: host.to_string(), port, path })
    }

    /// `ssh://user@host:2222/path`.
    pub fn url(&self) -> String {
        let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        let path = self.path.strip_prefix('/').unwrap_or(&self.path);
        format!("ssh://{}{port}/{path}", self.host)
    }

    /// The folder as a shell word on the remote: `~` expanded by the remote shell.
    fn dir(&self) -> String {
        match self.path.strip_prefix("~/") {
            Some(rest) => format!("\"$HOME\"/'{rest}'"),
            None => format!("'{}'", self.path),
        }
    }

    /// `ssh [opts] host -- <script>` with the script run by the remote's shell.
    fn ssh(&self, script: &str) -> Command {
        let base = std::env::var("RUNG_SSH").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "ssh".into());
        let mut words = base.split_whitespace();
        let mut cmd = Command::new(words.next().unwrap_or("ssh"));
        cmd.args(words);
        cmd.args(["-o", "BatchMode=yes", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]);
        cmd.args(["-o", "ConnectTimeout=15"]);
        if let Some(p) = self.port {
            cmd.args(["-p", &p.to_string()]);
        }
        cmd.arg(&self.host).arg("--").arg(script);
        cmd.stdin(Stdio::null());
        cmd
    }
}

/// Where a check runs: here, on an SSH host, or as a Slurm job.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOn {
    Here,
    Away(Away),
}

/// A runner elsewhere: an SSH host, or a Slurm job.
#[derive(Debug, Clone, PartialEq)]
pub enum Away {
    Ssh(SshTarget),
    Slurm(crate::spec::RunnerSpec),
}

/// A check on a runner elsewhere that gave no report, by runner.
#[derive(Debug, thiserror::Error)]
pub enum AwayError {
    #[error("the ssh runner failed: {0}")]
    Ssh(#[from] RemoteError),
    #[error("the slurm runner failed: {0}")]
    Slurm(#[from] crate::slurm::SlurmError),
}

impl Away {
    /// Checks what `opts` names on the runner elsewhere (an SSH host or a Slurm job), every
    /// result recorded here as it comes home: the one place the CLI and the watcher send a check
    /// away. `note` hears its progress in words: an SSH host's lines and what the sync sent, a
    /// Slurm job's state. None when `cancel` stopped it or the runner gave no report.
    pub fn check(
        &self,
        ws: &Workspace,
        store: &mut Store,
        opts: &CheckOptions,
        cancel: Option<&std::sync::Arc<std::sync::atomic::AtomicBool>>,
        note: &mut dyn FnMut(&str),
    ) -> Result<Option<CheckReport>, AwayError> {
        match self {
            Away::Slurm(r) => {
                let mut status = |s: &crate::slurm::JobStatus| note(&s.describe());
                Ok(crate::slurm::check(ws, store, opts, r, cancel.map(|c| &**c), &mut status)?)
            }
            Away::Ssh(t) => {
                let (report, synced) = check(ws, store, opts, t, cancel, &mut *note)?;
                if let Some(s) = synced {
                    let rung = if s.shipped_binary {
                        format!("shipped rung to {}", s.rung)
                    } else {
                        format!("using {}", s.rung)
                    };
                    note(&format!("sent {} file(s), removed {}, {rung}", s.sent.len(), s.removed.len()));
                }
                Ok(report)
            }
        }
    }

    /// What its progress lines start with: an SSH host's URL (a Slurm job's state names its job).
    pub fn prefix(&self) -> String {
        match self {
            Away::Ssh(t) => format!("{}: ", t.url()),
            Away::Slurm(_) => String::new(),
        }
    }
}

impl RunOn {
    /// `flag` (`rung check --runner`: `local`, `slurm` or an ssh:// URL), else rung.toml's runner.
    pub fn of(ws: &Workspace, flag: Option<&str>) -> Result<RunOn, RunnerError> {
        use crate::spec::RunnerKind;
        let r = ws.spec.as_ref().map(|s| s.runner.clone()).unwrap_or_default();
        match flag {
            Some("local") => return Ok(RunOn::Here),
            Some("slurm") => return Ok(RunOn::Away(Away::Slurm(r))),
            Some(url) => {
                return SshTarget::parse(url)
                    .map(|t| RunOn::Away(Away::Ssh(t)))
                    .map_err(|e| RunnerError(format!("--runner: {e}")));
            }
            None => {}
        }
        match r.kind {
            RunnerKind::Local => Ok(RunOn::Here),
            RunnerKind::Slurm => Ok(RunOn::Away(Away::Slurm(r))),
            RunnerKind::Ssh => {
                let host = r.host.clone().ok_or_else(|| RunnerError("rung.toml: an ssh runner needs a host".into()))?;
                let name = ws.root.file_name().map_or("workspace".into(), |n| n.to_string_lossy().to_string());
                let path = r.workdir.clone().unwrap_or_else(|| format!("~/rung-workspaces/{name}"));
                let t = SshTarget::checked(&host, r.port, path).map_err(|why| {
                    RunnerError(format!(
                        "rung.toml: [runner] has {why}, which rung will not pass to ssh: write host as user@host and workdir as a folder with no quote in its name"
                    ))
                })?;
                Ok(RunOn::Away(Away::Ssh(t)))
            }
        }
    }
}

/// What went wrong on the way to the remote.
#[derive(Debug, Clone, PartialEq)]
pub enum RemoteError {
    /// ssh itself failed (exit 255): the connection could not be made, or was lost.
    Connection(String),
    /// The remote side failed: a command there, or its output.
    Remote(String),
    /// This side: a file, a process.
    Local(String),
}

impl std::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteError::Connection(s) | RemoteError::Remote(s) | RemoteError::Local(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for RemoteError {}

/// The last non-empty line of ssh's standard error: its own reason (`Connection refused`,
/// `Host key verification failed.`).
fn last_line(stderr: &[u8]) -> String {
    crate::diag::last_line(&String::from_utf8_lossy(stderr))
}

/// Runs a script there with `input` on its standard input; its standard output, or why not.
fn run(t: &SshTarget, script: &str, input: Option<&[u8]>) -> Result<Vec<u8>, RemoteError> {
    let mut cmd = t.ssh(script);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    if input.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn().map_err(|e| RemoteError::Local(format!("cannot start ssh: {e}")))?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        let bytes = bytes.to_vec();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
    }
    let out = child.wait_with_output().map_err(|e| RemoteError::Local(format!("ssh: {e}")))?;
    match out.status.code() {
        Some(0) => Ok(out.stdout),
        Some(255) | None => Err(RemoteError::Connection(format!(
            "ssh to {} failed: {}",
            t.url(),
            match last_line(&out.stderr) {
                l if l.is_empty() => format!("ssh ended with {}", out.status),
                l => l,
            }
        ))),
        Some(code) => Err(RemoteError::Remote(format!(
            "on {} the command exited with {code}: {}",
            t.url(),
            last_line(&out.stderr)
        ))),
    }
}

/// The files a check needs: the workspace less `.rung/`, `context/` and hidden files.
pub fn mirrored_files(ws: &Workspace) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let walker = ignore::WalkBuilder::new(&ws.root).hidden(true).git_ignore(false).ignore(false).build();
    for entry in walker.flatten() {
        let p = entry.path();
        let Ok(rel) = p.strip_prefix(&ws.root) else { continue };
        let first = rel.components().next().map(|c| c.as_os_str().to_string_lossy().to_string());
        if matches!(first.as_deref(), Some("context") | Some(".rung") | Some(REMOTE_DIR)) {
            continue;
        }
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        if entry.metadata().is_ok_and(|m| m.len() > MAX_FILE_BYTES) {
            continue;
        }
        out.push((rel.to_string_lossy().replace('\\', "/"), p.to_path_buf()));
    }
    out.sort();
    out
}

/// What a sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Synced {
    pub sent: Vec<String>,
    pub removed: Vec<String>,
    /// Whether this binary was shipped (the remote had no rung of this version).
    pub shipped_binary: bool,
    /// The rung command there.
    pub rung: String,
}

/// Mirrors the workspace to the target, sending only what changed, and finds (or ships) rung.
pub fn sync(ws: &Workspace, t: &SshTarget) -> Result<Synced, RemoteError> {
    let dir = t.dir();
    let version = format!("rung {}", env!("CARGO_PKG_VERSION"));
    let probe = format!(
        "mkdir -p {dir}/{REMOTE_DIR} && cd {dir} && printf 'path:%s\\n' \"$(rung --version 2>/dev/null)\" && \
         printf 'shipped:%s\\n' \"$(cat {REMOTE_DIR}/rung.id 2>/dev/null)\" && cat {REMOTE_DIR}/manifest.json 2>/dev/null; true"
    );
    let out = String::from_utf8_lossy(&run(t, &probe, None)?).into_owned();
    let mut lines = out.lines();
    let on_path = lines.next().and_then(|l| l.strip_prefix("path:")).unwrap_or("").trim().to_string();
    let shipped = lines.next().and_then(|l| l.strip_prefix("shipped:")).unwrap_or("").trim().to_string();
    let remote: BTreeMap<String, String> =
        serde_json::from_str(&lines.collect::<Vec<_>>().join("\n")).unwrap_or_default();

    let mut manifest = BTreeMap::new();
    let mut sent = Vec::new();
    for (rel, path) in mirrored_files(ws) {
        let bytes = std::fs::read(&path).map_err(|e| RemoteError::Local(format!("{}: {e}", path.display())))?;
        let hash = sha256_hex(&bytes);
        if remote.get(&rel) != Some(&hash) {
            sent.push(rel.clone());
        }
        manifest.insert(rel, hash);
    }
    let removed: Vec<String> = remote.keys().filter(|k| !manifest.contains_key(*k)).cloned().collect();
    if !sent.is_empty() {
        let tar = tar_of(&ws.root, &sent)?;
        run(t, &format!("tar -x -f - -C {dir}"), Some(&tar))?;
    }
    if !removed.is_empty() {
        let words: Vec<String> = removed.iter().map(|r| format!("'{}'", r.replace('\'', ""))).collect();
        run(t, &format!("cd {dir} && rm -f -- {}", words.join(" ")), None)?;
    }
    // rung there: the one on its PATH when it is this version, else this binary, shipped once.
    let (rung, shipped_binary) = if on_path == version {
        ("rung".to_string(), false)
    } else {
        let exe = std::env::current_exe().map_err(|e| RemoteError::Local(format!("cannot find rung itself: {e}")))?;
        // The binary's identity without reading it: its version, size and modification time.
        let meta = std::fs::metadata(&exe).map_err(|e| RemoteError::Local(format!("{}: {e}", exe.display())))?;
        let mtime = meta.modified().ok().and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok());
        let id = format!("{}-{}-{}", env!("CARGO_PKG_VERSION"), meta.len(), mtime.map_or(0, |d| d.as_nanos()));
        let target = format!("{dir}/{REMOTE_DIR}/rung");
        let fresh = shipped != id;
        if fresh {
            let bytes = std::fs::read(&exe).map_err(|e| RemoteError::Local(format!("{}: {e}", exe.display())))?;
            run(
                t,
                &format!(
                    "cat > {target}.part && chmod +x {target}.part && mv -f {target}.part {target} && echo {id} > {target}.id"
                ),
                Some(&bytes),
            )?;
        }
        (target, fresh)
    };
    let json = serde_json::to_vec(&manifest).expect("a manifest serialises");
    run(t, &format!("cat > {dir}/{REMOTE_DIR}/manifest.json"), Some(&json))?;
    Ok(Synced { sent, removed, shipped_binary, rung })
}

/// A tar stream of `files` (relative to `root`), by the system's tar.
fn tar_of(root: &Path, files: &[String]) -> Result<Vec<u8>, RemoteError> {
    let mut child = Command::new("tar")
        .arg("-c")
        .arg("-f")
        .arg("-")
        .arg("-C")
        .arg(root)
        // Every line is a name, even one that looks like an option (a workspace file named
        // `--checkpoint-action=exec=...` would otherwise run a command here).
        .arg("--verbatim-files-from")
        .arg("-T")
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RemoteError::Local(format!("cannot start tar: {e}")))?;
    // One name a line: a name with a line break in it cannot be listed, and is not sent.
    let list = files.iter().filter(|f| !f.contains('\n')).cloned().collect::<Vec<_>>().join("\n") + "\n";
    let mut stdin = child.stdin.take().expect("piped");
    std::thread::spawn(move || {
        let _ = stdin.write_all(list.as_bytes());
    });
    let out = child.wait_with_output().map_err(|e| RemoteError::Local(format!("tar: {e}")))?;
    if !out.status.success() {
        return Err(RemoteError::Local(format!("tar failed: {}", last_line(&out.stderr))));
    }
    Ok(out.stdout)
}

/// Of the ids a remote reported, those of this workspace's own versions: an id is a folder name
/// here (its dumps are replaced), so one that the remote made up (`../..`, a path) names nothing
/// rung would touch.
fn local_ids(ws: &Workspace, reported: &[String]) -> Vec<String> {
    let plain = |id: &str| !id.is_empty() && id != "." && id != ".." && !id.contains(['/', '\\', '\0']);
    reported.iter().filter(|id| plain(id) && ws.versions.iter().any(|v| &v.id == *id)).cloned().collect()
}

/// The versions' dumps from the remote's `.rung/dumps/`, links followed, into the local one.
fn fetch_dumps(ws: &Workspace, t: &SshTarget, ids: &[String]) -> Result<(), RemoteError> {
    if ids.is_empty() {
        return Ok(());
    }
    let dir = t.dir();
    let list: Vec<String> = ids.iter().map(|i| format!("'dumps/{}'", i.replace('\'', ""))).collect();
    let script = format!(
        "cd {dir}/.rung 2>/dev/null && ls -d {} 2>/dev/null | tar -c -h -f - --verbatim-files-from -T - ; true",
        list.join(" ")
    );
    let bytes = run(t, &script, None)?;
    if bytes.is_empty() {
        return Ok(());
    }
    let state = ws.state_dir();
    for id in ids {
        let _ = std::fs::remove_dir_all(state.join("dumps").join(id));
    }
    std::fs::create_dir_all(&state).map_err(|e| RemoteError::Local(format!("{}: {e}", state.display())))?;
    let mut child = Command::new("tar")
        .arg("-x")
        .arg("-f")
        .arg("-")
        .arg("-C")
        .arg(&state)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RemoteError::Local(format!("cannot start tar: {e}")))?;
    child.stdin.take().expect("piped").write_all(&bytes).map_err(|e| RemoteError::Local(format!("tar: {e}")))?;
    let out = child.wait_with_output().map_err(|e| RemoteError::Local(format!("tar: {e}")))?;
    if !out.status.success() {
        return Err(RemoteError::Local(format!("unpacking the dumps: {}", last_line(&out.stderr))));
    }
    Ok(())
}

/// Quotes a script as one word for the remote's shell.
fn sh_word(script: &str) -> String {
    format!("'{}'", script.replace('\'', "'\\''"))
}

/// The remote side of a check: `rung check --json --stream` in its own process group, and a
/// watcher on the connection's standard input. When this side ends the connection (a newer save
/// cancelled the check, or rung here was stopped), the remote sees end of file there and kills
/// the check with its workers, so nothing is left holding the remote GPU.
fn check_script(t: &SshTarget, rung: &str, opts: &CheckOptions, seed: u64) -> String {
    // `--runner local`: the mirrored rung.toml names this very runner, and there it means here.
    let mut check = format!("{rung} check --json --stream --runner local --seed {seed}");
    if opts.no_bench {
        check.push_str(" --no-bench");
    }
    for v in &opts.versions {
        check.push_str(&format!(" '{}'", v.replace('\'', "")));
    }
    let script = format!(
        "cd {dir} || exit 97\n\
         exec 3<&0\n\
         if command -v setsid >/dev/null 2>&1; then setsid {check} </dev/null 3<&- & else {check} </dev/null 3<&- & fi\n\
         p=$!\n\
         (cat <&3 >/dev/null 2>&1; kill -TERM -$p 2>/dev/null || kill -TERM $p 2>/dev/null) >/dev/null 2>&1 &\n\
         w=$!\n\
         exec 3<&-\n\
         wait $p; s=$?\n\
         kill $w 2>/dev/null\n\
         exit $s",
        dir = t.dir()
    );
    format!("sh -c {}", sh_word(&script))
}

/// The check, run there. Each rung's result is handed to `on` as its line arrives; the report
/// comes at the end. `None` when `cancel` was set: the connection is closed, which stops the
/// remote check.
fn remote_check(
    t: &SshTarget,
    rung: &str,
    opts: &CheckOptions,
    seed: u64,
    cancel: Option<&std::sync::Arc<std::sync::atomic::AtomicBool>>,
    on: &mut dyn FnMut(crate::check::Streamed),
) -> Result<Option<CheckReport>, RemoteError> {
    use std::io::BufRead;
    let mut cmd = t.ssh(&check_script(t, rung, opts, seed));
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| RemoteError::Local(format!("cannot start ssh: {e}")))?;
    // Held open for the run: its end is the remote's signal to stop.
    let stdin = child.stdin.take();
    let mut err_pipe = child.stderr.take().expect("piped");
    let err_thread = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = err_pipe.read_to_end(&mut buf);
        buf
    });
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let out_pipe = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out_pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut last = String::new();
    loop {
        if cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst)) {
            drop(stdin);
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        match rx.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok(line) => match serde_json::from_str::<crate::check::Streamed>(&line) {
                Ok(s) => on(s),
                Err(_) if !line.trim().is_empty() => last = line,
                Err(_) => {}
            },
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    drop(stdin);
    let stderr = err_thread.join().unwrap_or_default();
    let status = child.wait().map_err(|e| RemoteError::Local(format!("ssh: {e}")))?;
    if status.code() == Some(255) || status.code().is_none() {
        return Err(RemoteError::Connection(format!(
            "the connection to {} was lost mid-run: {}",
            t.url(),
            match last_line(&stderr) {
                l if l.is_empty() => format!("ssh ended with {status}"),
                l => l,
            }
        )));
    }
    serde_json::from_str::<CheckReport>(&last).map(Some).map_err(|e| {
        RemoteError::Remote(format!(
            "{rung} check on {} did not answer with a report ({e}; exit {status}): {}",
            t.url(),
            last_line(&stderr)
        ))
    })
}

/// `rung check` through the SSH runner: sync, check there, fetch the dumps. Each rung's result
/// is recorded here as it arrives, saying where it ran (host, GPU, UUID), and `note` hears of it
/// (`v003 check pass: ...`). A connection lost on the way is each asked version's verdict
/// (`error`, `connection-lost`), recorded like any other; the next check connects again. `None`
/// when `cancel` was set (a newer save): the remote check is stopped, what came home is kept.
pub fn check(
    ws: &Workspace,
    store: &mut Store,
    opts: &CheckOptions,
    t: &SshTarget,
    cancel: Option<&std::sync::Arc<std::sync::atomic::AtomicBool>>,
    note: &mut dyn FnMut(&str),
) -> Result<(Option<CheckReport>, Option<Synced>), RemoteError> {
    use crate::check::Streamed;
    use crate::model::report::StageResult;
    let seed = match opts.seed {
        Some(s) => s,
        None => store.next_seed(crate::check::draw_seed).map_err(|e| RemoteError::Local(e.to_string()))?,
    };
    let started = SystemTime::now();
    let clock = Instant::now();
    let mut synced = None;
    let mut machine: Option<RanOn> = None;
    // What came home, recorded: version -> its rungs in order.
    let mut streamed: BTreeMap<String, Vec<StageResult>> = BTreeMap::new();
    let mut record_error = None;
    let url = t.url();
    let here_of = |m: &Option<RanOn>| {
        let mut ran =
            m.clone().unwrap_or(RanOn { host: t.host.clone(), gpu: None, uuid: None, device: None, runner: None });
        ran.runner = Some(url.clone());
        ran
    };
    // Whether the check itself started there: a failure before it is `connection-failed`.
    let mut checking = false;
    let attempt = sync(ws, t).and_then(|s| {
        let rung = s.rung.clone();
        synced = Some(s);
        checking = true;
        let mut on = |line: Streamed| match line {
            Streamed::Machine(m) => machine = Some(m),
            Streamed::Stage { version, source_hash, result } => {
                let Some(file) = ws.version(&version) else { return };
                let mut result = *result;
                result.ran_on = Some(here_of(&machine));
                let rungs = streamed.entry(version.clone()).or_default();
                if rungs.is_empty() {
                    let hash = ws.source_hash(file).unwrap_or_else(|| source_hash.clone());
                    if let Err(e) = store.sync_version(file, &hash, crate::store::Status::Draft) {
                        record_error = Some(e.to_string());
                    }
                }
                match crate::check::record(store, file, &source_hash, seed, started, result) {
                    Ok(r) => {
                        note(&format!("{version} {} {}: {}", r.stage, r.verdict.name(), r.summary));
                        rungs.push(r);
                    }
                    Err(e) => record_error = Some(e.to_string()),
                }
            }
        };
        remote_check(t, &rung, opts, seed, cancel, &mut on)
    });
    if let Some(e) = record_error {
        return Err(RemoteError::Local(e));
    }
    let mut report = match attempt {
        Ok(Some(r)) => r,
        Ok(None) => return Ok((None, synced)),
        Err(RemoteError::Connection(why)) => {
            let ms = clock.elapsed().as_secs_f64() * 1e3;
            let reason = if checking { Reason::ConnectionLost } else { Reason::ConnectionFailed };
            return lost(ws, store, opts, seed, t, (&why, reason, ms)).map(|r| (Some(r), synced));
        }
        Err(e) => return Err(e),
    };
    report.workspace = ws.root.clone();
    let reported: Vec<String> = report.versions.iter().map(|v| v.id.clone()).collect();
    if let Err(e) = fetch_dumps(ws, t, &local_ids(ws, &reported)) {
        report.diagnostics.push(crate::diag::Diagnostic::warning(
            ws.state_dir().join("dumps"),
            crate::diag::Pos::WHOLE_FILE,
            format!("the dumps could not be fetched from {}: {e}", t.url()),
        ));
    }
    for v in &mut report.versions {
        let Some(file) = ws.version(&v.id) else { continue };
        let mut ran = v.ran_on.clone().unwrap_or_else(|| here_of(&machine));
        ran.runner = Some(t.url());
        v.ran_on = Some(ran.clone());
        let came = streamed.remove(&v.id).unwrap_or_default();
        if came.is_empty() {
            let hash = ws.source_hash(file).unwrap_or_else(|| v.source_hash.clone());
            store.sync_version(file, &hash, v.status).map_err(|e| RemoteError::Local(e.to_string()))?;
        }
        for s in v.stages.iter_mut() {
            // Recorded as it arrived (the newest of its stage: a Triton build captured at launch
            // is recorded again after the run); a result the stream missed is recorded now.
            if let Some(r) = came.iter().rev().find(|r| r.stage == s.stage) {
                *s = r.clone();
                continue;
            }
            s.ran_on = Some(ran.clone());
            let recorded = crate::check::record(store, file, &v.source_hash, seed, started, s.clone())
                .map_err(|e| RemoteError::Local(e.to_string()))?;
            s.result_id = recorded.result_id;
        }
    }
    report.exit_code = crate::exit::for_report(&report);
    Ok((Some(report), synced))
}

/// The report of a check whose connection was lost: each asked version gets one `error` stage
/// saying so, and whether a new connection works now.
fn lost(
    ws: &Workspace,
    store: &mut Store,
    opts: &CheckOptions,
    seed: u64,
    t: &SshTarget,
    (why, reason, ms): (&str, Reason, f64),
) -> Result<CheckReport, RemoteError> {
    let back = match run(t, "true", None) {
        Ok(_) => "reconnected: the next check runs there again".to_string(),
        Err(e) => format!("reconnecting failed too ({e}); the next check tries again"),
    };
    let ran_on = RanOn { host: t.host.clone(), gpu: None, uuid: None, device: None, runner: Some(t.url()) };
    let failure = crate::check::RunnerFailure { reason, summary: format!("{why}; {back}"), duration_ms: ms, ran_on };
    crate::check::runner_failed(ws, store, &opts.versions, seed, failure).map_err(|e| RemoteError::Local(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_users_ports_and_home_paths() {
        let t = SshTarget::parse("ssh://me@gpu-box:2222/srv/ws").unwrap();
        assert_eq!(t, SshTarget { host: "me@gpu-box".into(), port: Some(2222), path: "/srv/ws".into() });
        assert_eq!(t.url(), "ssh://me@gpu-box:2222/srv/ws");
        let h = SshTarget::parse("ssh://box/~/rmsnorm").unwrap();
        assert_eq!((h.port, h.path.as_str()), (None, "~/rmsnorm"));
        assert_eq!(h.dir(), "\"$HOME\"/'rmsnorm'");
        for bad in [
            "http://box/x",
            "ssh://box",
            "ssh://box/",
            "ssh://:22/x",
            "ssh://me@/x",
            "ssh://box:99999/x",
            "ssh://-oProxy/x",
        ] {
            assert!(SshTarget::parse(bad).is_err(), "{bad} should be refused");
        }
        assert!(SshTarget::parse("ssh://box/it's").unwrap_err().0.contains("will not pass"));
    }

    /// A remote's report names versions by id, and an id becomes a folder rung replaces: only
    /// this workspace's own ids get that far, never `..` or a path.
    #[test]
    fn only_local_version_ids_name_dump_folders() {
        let tmp = tempfile::tempdir().unwrap();
        crate::templates::write("vector-add", tmp.path()).unwrap();
        let ws = Workspace::open(tmp.path()).unwrap();
        let reported: Vec<String> =
            ["v001", "..", "../../home", "/etc", "v999", "", "v002/..", "v003"].iter().map(|s| s.to_string()).collect();
        assert_eq!(local_ids(&ws, &reported), ["v001", "v003"]);
    }

    /// rung.toml's `[runner]` goes through the same checks as an ssh:// URL: a host that is an ssh
    /// option or a folder that would end its quoting is refused, with what is wrong.
    #[test]
    fn a_runner_table_cannot_inject_ssh_options_or_shell() {
        let tmp = tempfile::tempdir().unwrap();
        crate::templates::write("vector-add", tmp.path()).unwrap();
        let toml = std::fs::read_to_string(tmp.path().join("rung.toml")).unwrap();
        for (host, workdir, bad) in [
            ("-oProxyCommand=touch /tmp/pwned", "~/ws", "the host"),
            ("box", "~/ws'; touch /tmp/pwned; '", "the folder"),
            ("box\nx", "~/ws", "the host"),
        ] {
            let text = toml.replace(
                "kind = \"local\"",
                &format!("kind = \"ssh\"\nhost = {}\nworkdir = {}", toml_string(host), toml_string(workdir)),
            );
            std::fs::write(tmp.path().join("rung.toml"), text).unwrap();
            let ws = Workspace::open(tmp.path()).unwrap();
            let e = RunOn::of(&ws, None).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains("will not pass to ssh"), "{host} {workdir}: {e}");
        }
        let plain = toml.replace("kind = \"local\"", "kind = \"ssh\"\nhost = \"me@box\"\nworkdir = \"/srv/$ws\"");
        std::fs::write(tmp.path().join("rung.toml"), plain).unwrap();
        let ws = Workspace::open(tmp.path()).unwrap();
        assert!(matches!(RunOn::of(&ws, None), Ok(RunOn::Away(Away::Ssh(_)))), "a plain table is fine");
    }

    fn toml_string(s: &str) -> String {
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n"))
    }

    /// A workspace file whose name is a tar option is sent as a file, never read as an option.
    #[test]
    fn a_file_named_like_a_tar_option_is_only_a_file() {
        let tmp = tempfile::tempdir().unwrap();
        let marker = tmp.path().join("pwned");
        let evil = format!("--checkpoint-action=exec=touch {}", marker.display());
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let names = ["--checkpoint=1".to_string(), evil.replace('/', "_"), "plain.cu".to_string()];
        for n in &names {
            std::fs::write(ws.join(n), "x").unwrap();
        }
        let bytes = tar_of(&ws, &[names[0].clone(), evil.clone(), names[2].clone()]);
        assert!(!marker.exists(), "tar ran the command in a file name");
        // `evil` names no file (its / are in the name): tar says so rather than obeying it.
        assert!(bytes.is_err(), "a missing file is an error, not an option");
        let ok = tar_of(&ws, &names).unwrap();
        let listed = std::process::Command::new("tar")
            .args(["-t", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write as _;
                c.stdin.take().unwrap().write_all(&ok)?;
                c.wait_with_output()
            })
            .unwrap();
        let listed = String::from_utf8_lossy(&listed.stdout);
        for n in &names {
            assert!(listed.lines().any(|l| l == n), "{n} in {listed}");
        }
    }
}
