//! Entering and leaving the terminal's full-screen mode, including on a panic: the panic hook
//! puts the terminal back before the message is printed, so it can be read. While the screen is
//! ours, the process's stderr goes to a log file: a stray message from a thread or a tool would
//! otherwise be written over the panes.

use std::fs::File;
use std::io::{self, Stdout};
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

use crossterm::ExecutableCommand;
use crossterm::event::{DisableMouseCapture, EnableMouseCapture};
use crossterm::terminal::{EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

pub type Tui = Terminal<CrosstermBackend<Stdout>>;

/// Puts the terminal (and stderr) back when dropped.
pub struct Session {
    /// A duplicate of the original stderr.
    saved_stderr: Option<RawFd>,
}

impl Drop for Session {
    fn drop(&mut self) {
        leave(self.saved_stderr);
    }
}

/// Takes over the terminal; stderr is appended to `log` until the session ends.
pub fn enter(log: &Path) -> io::Result<(Tui, Session)> {
    let saved_stderr = redirect_stderr(log);
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        leave(saved_stderr);
        hook(info);
    }));
    let session = Session { saved_stderr };
    enable_raw_mode()?;
    let mut out = io::stdout();
    out.execute(EnterAlternateScreen)?.execute(EnableMouseCapture)?;
    Ok((Terminal::new(CrosstermBackend::new(out))?, session))
}

/// Gives the terminal back for a while (to the editor); stderr stays in the log.
pub fn suspend() {
    leave(None);
}

/// Takes the terminal again after [`suspend`] and clears it, so the next draw repaints it whole.
pub fn resume(term: &mut Tui) -> io::Result<()> {
    enable_raw_mode()?;
    io::stdout().execute(EnterAlternateScreen)?.execute(EnableMouseCapture)?;
    term.clear()
}

/// Turns mouse reporting on or off (off: the terminal selects text as usual).
pub fn mouse(on: bool) {
    let mut out = io::stdout();
    let _ = if on { out.execute(EnableMouseCapture) } else { out.execute(DisableMouseCapture) };
}

/// Safe to call more than once (the panic hook stays installed after the session).
fn leave(saved_stderr: Option<RawFd>) {
    let mut out = io::stdout();
    let _ = out.execute(DisableMouseCapture);
    let _ = out.execute(LeaveAlternateScreen);
    let _ = out.execute(crossterm::cursor::Show);
    let _ = disable_raw_mode();
    if let Some(fd) = saved_stderr {
        // SAFETY: `fd` is a descriptor this process duplicated and never closes.
        unsafe { libc::dup2(fd, libc::STDERR_FILENO) };
    }
}

/// Points fd 2 at `log`; returns a duplicate of the old stderr, or `None` when it could not.
fn redirect_stderr(log: &Path) -> Option<RawFd> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).ok()?;
    }
    let file = File::options().create(true).append(true).open(log).ok()?;
    // SAFETY: plain descriptor calls on descriptors this process owns; `file` stays open until
    // fd 2 refers to the same file.
    unsafe {
        let saved = libc::dup(libc::STDERR_FILENO);
        if saved < 0 {
            return None;
        }
        if libc::dup2(file.as_raw_fd(), libc::STDERR_FILENO) < 0 {
            libc::close(saved);
            return None;
        }
        Some(saved)
    }
}
