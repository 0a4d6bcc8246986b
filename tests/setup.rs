//! `rung setup` is idempotent and transactional: a failed install leaves the previous
//! environment in use. A stand-in Python (tests/fixtures/fake-python) plays pip so the test needs
//! no network; the real install is exercised by `.ci/run`.

use std::path::Path;
use std::process::{Command, Output};

fn setup(home: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let fake = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fake-python/python3");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rung"));
    cmd.arg("setup").args(extra).env("RUNG_HOME", home).env("RUNG_PYTHON", fake);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn setup_is_idempotent_and_a_failed_install_keeps_the_previous_environment() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path();

    let first = setup(home, &[], &[]);
    assert!(first.status.success(), "{}", text(&first));
    assert!(text(&first).contains("ready in"), "{}", text(&first));
    let env = std::fs::canonicalize(home.join("env")).unwrap();
    assert!(env.join(".complete").is_file());
    let installed_at = std::fs::read_to_string(env.join("installed-at")).unwrap();

    // Again: nothing is reinstalled.
    let second = setup(home, &[], &[]);
    assert!(second.status.success());
    assert!(text(&second).contains("already set up"), "{}", text(&second));
    assert_eq!(std::fs::read_to_string(env.join("installed-at")).unwrap(), installed_at);

    // A forced reinstall that fails says why and where the log is, and leaves the old one working.
    let failed = setup(home, &["--force"], &[("FAKE_PIP_FAIL", "1")]);
    assert_eq!(failed.status.code(), Some(5));
    let t = text(&failed);
    assert!(t.contains("pip install failed"), "{t}");
    assert!(t.contains("No matching distribution found for nvidia-cuda-nvcc"), "{t}");
    assert!(t.contains("previous environment, if any, is still in use"), "{t}");
    let log = t.lines().find_map(|l| l.trim().strip_prefix("full log: ")).expect("a log path");
    assert!(std::fs::read_to_string(log).unwrap().contains("No matching distribution"));

    // A failed verification is no better than a failed install.
    let failed = setup(home, &["--force"], &[("FAKE_VERIFY_FAIL", "1")]);
    assert_eq!(failed.status.code(), Some(5));
    assert!(text(&failed).contains("verifying the environment failed"), "{}", text(&failed));

    // The link still points at a complete environment.
    let env = std::fs::canonicalize(home.join("env")).unwrap();
    assert!(env.join(".complete").is_file(), "the previous environment survived");
}

#[test]
fn no_python_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rung"))
        .arg("setup")
        .env("RUNG_HOME", tmp.path())
        .env("RUNG_PYTHON", tmp.path().join("no-such-python"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert!(text(&out).contains("no Python 3.9+ found"), "{}", text(&out));
    assert!(!tmp.path().join("env").exists());
}
