//! One bench at a time per GPU, across every rung process (the TUI, `rung check`, the MCP
//! server): an exclusive `flock` on `$RUNG_HOME/locks/<GPU UUID>.lock`, released when the guard
//! drops or the process dies.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub struct GpuLock {
    _file: File,
    /// How long this process waited for another to finish timing.
    pub waited: Duration,
}

pub fn lock_path(uuid: &str) -> PathBuf {
    let safe: String = uuid.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    crate::toolchain::rung_home().join("locks").join(format!("{safe}.lock"))
}

/// Blocks until this process holds the GPU's bench lock.
pub fn lock(uuid: &str) -> std::io::Result<GpuLock> {
    let path = lock_path(uuid);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
    let t0 = Instant::now();
    // SAFETY: flock on a file descriptor this function owns.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(GpuLock { _file: file, waited: t0.elapsed() })
}

/// Takes the lock only if it is free.
pub fn try_lock(uuid: &str) -> std::io::Result<Option<GpuLock>> {
    let path = lock_path(uuid);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
    // SAFETY: as above.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EWOULDBLOCK) { Ok(None) } else { Err(e) };
    }
    Ok(Some(GpuLock { _file: file, waited: Duration::ZERO }))
}
