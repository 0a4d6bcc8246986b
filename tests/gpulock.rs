//! One bench at a time per GPU across processes: a second process cannot take the lock while
//! the first holds it, and gets it once the first has gone.

use std::process::Command;
use std::time::{Duration, Instant};

const UUID: &str = "GPU-test-0000";

#[test]
fn holder() {
    // Run as a child by the test below: hold the lock until told to stop.
    let Ok(ready) = std::env::var("RUNG_LOCK_HOLDER") else { return };
    let _lock = rung::gpulock::lock(UUID).unwrap();
    std::fs::write(&ready, "held").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
}

#[test]
fn a_second_process_waits_for_the_gpu_lock() {
    let home = tempfile::tempdir().unwrap();
    let ready = home.path().join("ready");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "holder", "--nocapture"])
        .env("RUNG_LOCK_HOLDER", &ready)
        .env("RUNG_HOME", home.path())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !ready.exists() {
        assert!(t0.elapsed() < Duration::from_secs(20), "the holder never took the lock");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: this test process sets RUNG_HOME before any thread reads it.
    unsafe { std::env::set_var("RUNG_HOME", home.path()) };
    assert!(rung::gpulock::try_lock(UUID).unwrap().is_none(), "the lock is held by the other process");
    let waited = rung::gpulock::lock(UUID).unwrap();
    assert!(waited.waited > Duration::from_millis(300), "it waited for the holder: {:?}", waited.waited);
    assert!(child.wait().unwrap().success());
    drop(waited);
    assert!(rung::gpulock::try_lock(UUID).unwrap().is_some());
    // Another GPU's lock is independent.
    let _a = rung::gpulock::try_lock("GPU-other").unwrap().expect("free");
}
