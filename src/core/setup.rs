//! `rung setup`: the CUDA 13 toolchain, Triton and numpy from Python wheels, in a virtual
//! environment under rung's home, with no GPU and no system CUDA needed.
//!
//! Each environment lives in `envs/<key>-<time>/`, where the key hashes the requirement list and
//! the Python version; `env` is a symbolic link to the newest complete one. An environment counts as
//! complete only once it is verified (nvcc answers, triton and numpy import) and marked with a
//! `.complete` file; only then does the link move, atomically. So a failed or interrupted install
//! leaves the previous environment in use, and running setup again is a no-op.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::store::sha256_hex;
use crate::toolchain::{SETUP_REQUIREMENTS, rung_env, rung_home};

const COMPLETE_MARK: &str = ".complete";

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(
        "no Python 3.9+ found ({0})\n  help: install Python 3 with its venv module (e.g. `apt install python3 python3-venv`), or point RUNG_PYTHON at one"
    )]
    NoPython(String),
    #[error("{step} failed (exit {code:?}); the previous environment, if any, is still in use\n{tail}\n  full log: {}\n  help: {help}", log.display())]
    Step { step: String, code: Option<i32>, tail: String, log: PathBuf, help: String },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("unknown extra `{0}`\n  help: the extras are: {1}")]
    UnknownExtra(String, String),
}

/// What setup reports while it works, for a progress display.
#[derive(Debug, Clone, PartialEq)]
pub enum SetupEvent {
    /// A step starts (e.g. "creating the virtual environment").
    Step(String),
    /// A line of the installer's output (e.g. "Collecting nvidia-cuda-nvcc==13.0.88").
    Line(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct SetupOutcome {
    pub env: PathBuf,
    /// True when a complete environment for these requirements already existed.
    pub already_done: bool,
    pub log: Option<PathBuf>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> SetupError + '_ {
    move |source| SetupError::Io { path: path.to_path_buf(), source }
}

/// The interpreter that creates the environment: `RUNG_PYTHON`, else `python3` on PATH.
fn base_python() -> Result<(PathBuf, String), SetupError> {
    let py = std::env::var_os("RUNG_PYTHON")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| "python3".into());
    let out = Command::new(&py)
        .args(["-c", "import sys, venv; print('%d.%d.%d' % sys.version_info[:3]); assert sys.version_info >= (3, 9)"])
        .output()
        .map_err(|e| SetupError::NoPython(format!("{}: {e}", py.display())))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("").to_string();
        return Err(SetupError::NoPython(format!("{}: {why}", py.display())));
    }
    Ok((py, String::from_utf8_lossy(&out.stdout).trim().to_string()))
}

/// Optional packages `rung setup --with NAME` adds: name, pip requirements, what it enables. A
/// requirement marked [`NO_DEPS`] is installed without its declared dependencies (the ones it
/// needs are listed beside it).
pub const EXTRAS: &[(&str, &[&str], &str)] = &[
    ("cute-dsl", &["nvidia-cutlass-dsl==4.8.1"], "CuTe DSL versions (about 300 MB)"),
    // TileLang declares torch (about 3 GB from this index) but compiles without it: rung's
    // compile script gives it a stand-in when torch is absent. Its other dependencies are named.
    (
        "tilelang",
        &[
            "no-deps:tilelang==0.1.15",
            "apache-tvm-ffi>=0.1.11,<0.1.13",
            "z3-solver>=4.13.0,<4.15.5",
            "cloudpickle",
            "ml-dtypes>=0.5.1",
            "psutil",
            "tqdm>=4.62.3",
            "typing-extensions>=4.10.0",
        ],
        "TileLang versions (about 340 MB; without torch they compile, and run where torch is)",
    ),
];

/// The prefix of a requirement installed with `pip install --no-deps`.
pub const NO_DEPS: &str = "no-deps:";

/// The pip requirements for the base set plus `extras`, or an error naming the known extras.
pub fn requirements(extras: &[String]) -> Result<Vec<String>, SetupError> {
    let mut reqs: Vec<String> = SETUP_REQUIREMENTS.iter().map(|r| r.to_string()).collect();
    for e in extras {
        let Some((_, wanted, _)) = EXTRAS.iter().find(|(n, _, _)| n == e) else {
            return Err(SetupError::UnknownExtra(
                e.clone(),
                EXTRAS.iter().map(|(n, _, _)| *n).collect::<Vec<_>>().join(", "),
            ));
        };
        for req in wanted.iter() {
            if !reqs.iter().any(|r| r == req) {
                reqs.push(req.to_string());
            }
        }
    }
    Ok(reqs)
}

/// The environment folder's name prefix for these requirements and this Python.
pub fn env_key(python_version: &str, reqs: &[String]) -> String {
    let text = format!("{python_version}\n{}", reqs.join("\n"));
    sha256_hex(text.as_bytes())[..12].to_string()
}

/// Complete environments for this Python holding at least `reqs`, newest first. Their
/// `.complete` file lists the Python version, then one requirement per line.
fn complete_envs(envs: &Path, python_version: &str, reqs: &[String]) -> Vec<PathBuf> {
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(envs)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let mark = std::fs::read_to_string(p.join(COMPLETE_MARK)).ok()?;
            let mut lines = mark.lines();
            let holds = lines.next() == Some(&format!("python {python_version}")[..]) && {
                let have: Vec<&str> = lines.collect();
                reqs.iter().all(|r| have.contains(&r.as_str()))
            };
            let when = e.metadata().ok()?.modified().ok()?;
            holds.then_some((when, p))
        })
        .collect();
    found.sort();
    found.into_iter().rev().map(|(_, p)| p).collect()
}

/// Installs the base requirements plus `extras` (names from [`EXTRAS`]).
pub fn setup(force: bool, extras: &[String], progress: &mut dyn FnMut(SetupEvent)) -> Result<SetupOutcome, SetupError> {
    let reqs = requirements(extras)?;
    let home = rung_home();
    let (python, py_version) = base_python()?;
    let envs = home.join("envs");
    let key = env_key(&py_version, &reqs);
    let link = rung_env();

    // An environment that already holds everything asked for (e.g. one made with more extras).
    if !force && let Some(existing) = complete_envs(&envs, &py_version, &reqs).into_iter().next() {
        let already = std::fs::canonicalize(&link).ok() == std::fs::canonicalize(&existing).ok();
        if !already {
            switch_link(&link, &existing)?;
        }
        return Ok(SetupOutcome { env: existing, already_done: already, log: None });
    }
    sweep_abandoned(&envs);
    // A fresh folder for every attempt: virtual environments cannot be moved, and the one in use
    // must survive a failed attempt untouched.
    let target = envs.join(format!("{key}-{}", crate::store::now_ms()));

    let logs = home.join("logs");
    std::fs::create_dir_all(&logs).map_err(io(&logs))?;
    let log_path = logs.join(format!("setup-{}.log", crate::store::now_ms()));
    let mut log = std::fs::File::create(&log_path).map_err(io(&log_path))?;

    std::fs::create_dir_all(&envs).map_err(io(&envs))?;

    progress(SetupEvent::Step(format!("creating a virtual environment with Python {py_version}")));
    let mut venv = Command::new(&python);
    venv.args(["-m", "venv"]).arg(&target);
    run_step("creating the virtual environment", venv, &mut log, &log_path, progress, "install python3-venv")
        .inspect_err(|_| discard(&target))?;

    progress(SetupEvent::Step(format!("installing {} packages (about 1.6 GB): {}", reqs.len(), reqs.join(" "))));
    let (bare, with_deps): (Vec<&String>, Vec<&String>) = reqs.iter().partition(|r| r.starts_with(NO_DEPS));
    let bare: Vec<&str> = bare.iter().map(|r| &r[NO_DEPS.len()..]).collect();
    for (what, no_deps, list) in
        [("pip install", false, with_deps.iter().map(|r| r.as_str()).collect()), ("pip install --no-deps", true, bare)]
    {
        if list.is_empty() {
            continue;
        }
        let mut pip = Command::new(target.join("bin/python"));
        pip.args(["-m", "pip", "install", "--progress-bar", "off", "--disable-pip-version-check"]);
        if no_deps {
            pip.arg("--no-deps");
        }
        pip.args(&list);
        run_step(what, pip, &mut log, &log_path, progress, "check the network access to PyPI and the free disk space")
            .inspect_err(|_| discard(&target))?;
    }

    progress(SetupEvent::Step("verifying nvcc, triton and numpy".into()));
    let mut verify = Command::new(target.join("bin/python"));
    verify.args([
        "-c",
        "import os, subprocess, importlib.util as u, numpy, nvidia; \
         d = os.path.join(list(nvidia.__path__)[0], 'cu13', 'bin'); \
         print(subprocess.run([os.path.join(d, 'nvcc'), '--version'], check=True, capture_output=True, text=True).stdout.splitlines()[-1]); \
         assert u.find_spec('triton'), 'triton is missing'",
    ]);
    run_step(
        "verifying the environment",
        verify,
        &mut log,
        &log_path,
        progress,
        "run `rung setup --force` to reinstall",
    )
    .inspect_err(|_| discard(&target))?;

    let mark = target.join(COMPLETE_MARK);
    std::fs::write(&mark, format!("python {py_version}\n{}\n", reqs.join("\n"))).map_err(io(&mark))?;
    let previous = std::fs::canonicalize(&link).ok();
    switch_link(&link, &target)?;
    // The environment replaced by --force is no longer used by anything rung starts.
    if let Some(old) = previous.filter(|old| old.starts_with(&envs) && *old != target) {
        discard(&old);
    }
    Ok(SetupOutcome { env: target, already_done: false, log: Some(log_path) })
}

/// Removes environments an interrupted setup left incomplete. One younger than an hour may be
/// another setup's work in progress, so it stays.
fn sweep_abandoned(envs: &Path) {
    let Ok(entries) = std::fs::read_dir(envs) else { return };
    for e in entries.flatten() {
        let p = e.path();
        let old = e
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() > 3600);
        if p.is_dir() && old && !p.join(COMPLETE_MARK).is_file() {
            discard(&p);
        }
    }
}

fn discard(target: &Path) {
    let _ = std::fs::remove_dir_all(target);
}

/// Points `link` at `target` atomically (a new link renamed over the old one).
fn switch_link(link: &Path, target: &Path) -> Result<(), SetupError> {
    let tmp = link.with_extension(format!("tmp{}", crate::store::unique()));
    let _ = std::fs::remove_file(&tmp);
    #[cfg(unix)]
    std::os::unix::fs::symlink(target, &tmp).map_err(io(&tmp))?;
    std::fs::rename(&tmp, link).map_err(io(link))
}

/// Runs one step, streaming its output lines to the log and to `progress`.
fn run_step(
    step: &str,
    mut cmd: Command,
    log: &mut std::fs::File,
    log_path: &Path,
    progress: &mut dyn FnMut(SetupEvent),
    help: &str,
) -> Result<(), SetupError> {
    let _ = writeln!(log, "$ {cmd:?}");
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| SetupError::Step {
        step: step.into(),
        code: None,
        tail: e.to_string(),
        log: log_path.into(),
        help: help.into(),
    })?;
    // stderr on a thread so neither pipe fills up and blocks the installer.
    let stderr = child.stderr.take().expect("piped");
    let err_thread =
        std::thread::spawn(move || BufReader::new(stderr).lines().map_while(Result::ok).collect::<Vec<String>>());
    let mut tail: Vec<String> = Vec::new();
    for line in BufReader::new(child.stdout.take().expect("piped")).lines().map_while(Result::ok) {
        let _ = writeln!(log, "{line}");
        progress(SetupEvent::Line(line.clone()));
        tail.push(line);
        if tail.len() > 12 {
            tail.remove(0);
        }
    }
    let status = child.wait().map_err(|e| SetupError::Io { path: log_path.into(), source: e })?;
    let err_lines = err_thread.join().unwrap_or_default();
    for line in &err_lines {
        let _ = writeln!(log, "{line}");
    }
    if status.success() {
        return Ok(());
    }
    tail.extend(err_lines.iter().rev().take(12).rev().cloned());
    Err(SetupError::Step {
        step: step.into(),
        code: status.code(),
        tail: tail.iter().map(|l| format!("  | {l}")).collect::<Vec<_>>().join("\n"),
        log: log_path.into(),
        help: help.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TileLang comes without torch (its declared dependency, 3 GB here): the package itself is
    /// installed without dependencies and the ones it needs are named; an unknown extra names
    /// the known ones.
    #[test]
    fn extras_add_their_requirements_and_tilelang_brings_no_torch() {
        let base = requirements(&[]).unwrap();
        let with = requirements(&["tilelang".into(), "cute-dsl".into()]).unwrap();
        assert_eq!(&with[..base.len()], &base[..]);
        assert!(with.iter().any(|r| r == "no-deps:tilelang==0.1.15"), "{with:?}");
        assert!(
            with.iter().any(|r| r.starts_with("apache-tvm-ffi")) && with.iter().any(|r| r.starts_with("z3-solver"))
        );
        assert!(with.iter().any(|r| r.starts_with("nvidia-cutlass-dsl")));
        assert!(!with.iter().any(|r| r.contains("torch") && !r.contains("tvm")), "{with:?}");
        // The environment's key changes with the set, so an environment without TileLang is not reused.
        assert_ne!(env_key("3.11.9", &base), env_key("3.11.9", &with));
        let e = requirements(&["tilelan".into()]).unwrap_err().to_string();
        assert!(e.contains("tilelan") && e.contains("cute-dsl, tilelang"), "{e}");
    }

    #[test]
    fn only_old_incomplete_environments_are_swept() {
        let envs = tempfile::tempdir().unwrap();
        let make = |name: &str, complete: bool, age_s: u64| {
            let d = envs.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            if complete {
                std::fs::write(d.join(COMPLETE_MARK), "").unwrap();
            }
            let t = std::time::SystemTime::now() - std::time::Duration::from_secs(age_s);
            std::fs::File::open(&d).unwrap().set_modified(t).unwrap();
            d
        };
        let abandoned = make("k-1", false, 7200);
        let in_progress = make("k-2", false, 60);
        let complete = make("k-3", true, 7200);
        sweep_abandoned(envs.path());
        assert!(!abandoned.exists());
        assert!(in_progress.exists());
        assert!(complete.exists());
    }
}
