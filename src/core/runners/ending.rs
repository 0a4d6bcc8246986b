//! Workers asked to exit, reaped on a thread of their own rather than waited for where they are
//! dropped. A native worker's exit tears down its CUDA context, which took a few hundred
//! milliseconds on Hopper machines; waiting for it where a check lane or a check ends put that
//! time on the check's wall time, once for the lanes and once more for the check's own worker.
//!
//! Each ending process gets a grace: a zygote's, for its child to leave and for the zygote to
//! kill what the version left running in the child's group; a native worker's is none, since its
//! exit does nothing that the kernel does not do when it dies. One that outlives its grace is
//! killed. [`finish`], as rung ends, waits for what is still inside its grace (a zygote's, at
//! most [`GRACE`]) and kills what is past it, without waiting for a killed process to be gone.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a zygote asked to exit may take before it is killed.
pub const GRACE: Duration = Duration::from_millis(200);

struct Ending {
    pid: i32,
    kill_at: Instant,
    killed: bool,
}

static ENDING: Mutex<Vec<Ending>> = Mutex::new(Vec::new());
static WAKE: Condvar = Condvar::new();
static REAPER: std::sync::Once = std::sync::Once::new();

/// Takes over a child this process started and has not reaped, which was asked to exit: it is
/// reaped when it ends and killed once `grace` has passed. The pid stays this process's child
/// (a zombie keeps it) until the reaper waits for it, so it cannot name another process.
pub fn hand_over(pid: u32, grace: Duration) {
    REAPER.call_once(|| {
        std::thread::Builder::new().name("rung-reaper".into()).spawn(reap).expect("a thread starts");
    });
    let mut ending = ENDING.lock().unwrap_or_else(|e| e.into_inner());
    ending.push(Ending { pid: pid as i32, kill_at: Instant::now() + grace, killed: false });
    WAKE.notify_one();
}

/// Reaps what has ended and kills what outlived its grace, every 5 ms while there is any.
fn reap() {
    let mut ending = ENDING.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        while ending.is_empty() {
            ending = WAKE.wait(ending).unwrap_or_else(|e| e.into_inner());
        }
        sweep(&mut ending, Instant::now());
        drop(ending);
        std::thread::sleep(Duration::from_millis(5));
        ending = ENDING.lock().unwrap_or_else(|e| e.into_inner());
    }
}

/// One pass: forgets what has ended (reaped), kills what is past its time.
fn sweep(ending: &mut Vec<Ending>, now: Instant) {
    ending.retain_mut(|e| {
        // SAFETY: waitpid(2) on a child of this process that nothing else reaps.
        let gone = unsafe { libc::waitpid(e.pid, std::ptr::null_mut(), libc::WNOHANG) } != 0;
        if !gone && !e.killed && now >= e.kill_at {
            // SAFETY: kill(2) on an unreaped child of this process: the pid is still its.
            unsafe { libc::kill(e.pid, libc::SIGKILL) };
            e.killed = true;
        }
        !gone
    });
}

/// As rung ends: waits while an ending process is inside its grace, then kills what is left.
/// A killed process is not waited for; it ends with no one to report to.
pub fn finish() {
    loop {
        let mut ending = ENDING.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        sweep(&mut ending, now);
        if ending.iter().all(|e| e.killed) {
            return;
        }
        drop(ending);
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn running(pid: u32) -> bool {
        super::super::running(pid)
    }

    /// A process asked to exit that ends by itself is reaped (no zombie left); one that does
    /// not is killed once its grace has passed, and `finish` does not wait for a killed one.
    #[test]
    #[allow(clippy::zombie_processes)] // handed to the reaper, which waits for them
    fn ending_processes_are_reaped_and_the_stubborn_killed_after_their_grace() {
        let quick = Command::new("sh").args(["-c", "sleep 0.05"]).stdin(Stdio::null()).spawn().unwrap();
        let stubborn = Command::new("sleep").arg("30").stdin(Stdio::null()).spawn().unwrap();
        let t = Instant::now();
        hand_over(quick.id(), Duration::from_secs(10));
        hand_over(stubborn.id(), Duration::from_millis(300));
        let (quick, stubborn) = (quick.id(), stubborn.id());
        while (running(quick) || std::path::Path::new(&format!("/proc/{quick}")).exists())
            && t.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!std::path::Path::new(&format!("/proc/{quick}")).exists(), "the quick one was not reaped");
        assert!(running(stubborn), "killed before its grace");
        while running(stubborn) && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let at = t.elapsed();
        assert!(!running(stubborn), "not killed after its grace");
        assert!(at >= Duration::from_millis(300), "killed at {at:?}, before its grace");
        let t = Instant::now();
        let late = Command::new("sleep").arg("30").stdin(Stdio::null()).spawn().unwrap();
        hand_over(late.id(), Duration::from_millis(100));
        finish();
        let waited = t.elapsed();
        assert!(waited >= Duration::from_millis(100) && waited < Duration::from_secs(2), "finish waited {waited:?}");
    }
}
