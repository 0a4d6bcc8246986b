//! The one event type the loop reads, and the threads that feed it: terminal input, a tick, and
//! the scheduler (the same pipeline as `rung watch`, run in this process). The chat's turns run on
//! threads of their own (`chat_session.rs`) and send their events here too.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use crossterm::event::{KeyEvent, KeyEventKind, MouseEvent};
use rung_agent::{AgentEvent, TurnEnd};
use rung_core::watch::{WatchEvent, WatchOptions};

// Not `Clone`: a turn's end carries its conversation (and the conversation its open file).
#[derive(Debug)]
pub enum Event {
    Key(KeyEvent),
    Mouse(MouseEvent),
    /// The terminal's new width and height.
    Resize(u16, u16),
    /// Advances the spinners.
    Tick,
    Watch(Box<WatchEvent>),
    /// The scheduler stopped with this error; results on screen no longer update.
    WatchFailed(String),
    /// `rung profile` on a version ended: the version, the tool, and its last line or why it
    /// could not run.
    ProfileDone {
        version: String,
        tool: String,
        outcome: Result<String, String>,
    },
    /// A diff for the assembly pane, computed on a thread of its own.
    AsmDiff(std::sync::Arc<super::asm_view::LoadedDiff>),
    /// An event of the chat's running turn, in the order the provider streamed it.
    Agent(AgentEvent),
    /// The chat's turn ended: its conversation back, and how it ended.
    AgentDone(Box<TurnEnd>),
    /// The chat's agent, built on the thread that ran its `api_key_command`.
    AgentBuilt(Box<Result<rung_agent::Agent, rung_agent::AgentError>>),
    /// `/model`'s provider, built on the thread that ran its `api_key_command`.
    ModelSwitched(Box<Result<rung_agent::Agent, rung_agent::AgentError>>),
    /// Auto mode sends this message for its next proposal.
    AutoAsking(String),
    /// Auto mode wrote this proposal, which now climbs.
    AutoProposed {
        id: String,
        path: PathBuf,
        parent: Option<String>,
    },
    /// A line of auto mode's log: a choice and why.
    AutoLog(String),
    /// Auto mode ended: the conversation back, and why it stopped.
    AutoDone(Box<(rung_agent::Conversation, rung_agent::auto::AutoEnd)>),
}

/// How often the input thread looks at its stop and pause flags.
pub const INPUT_POLL: Duration = Duration::from_millis(100);

/// Stops every feeding thread when dropped.
pub struct Sources {
    stop: Arc<AtomicBool>,
    /// While set, terminal input is left to another program (the editor).
    paused: Arc<AtomicBool>,
}

impl Sources {
    pub fn pause_input(&self, paused: bool) {
        self.paused.store(paused, Ordering::SeqCst);
    }
}

impl Drop for Sources {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

pub fn spawn(tx: &Sender<Event>, root: PathBuf, opts: WatchOptions, tick: Duration) -> Sources {
    let stop = Arc::new(AtomicBool::new(false));
    let paused = Arc::new(AtomicBool::new(false));
    {
        let (tx, stop, paused) = (tx.clone(), stop.clone(), paused.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if paused.load(Ordering::SeqCst) {
                    std::thread::sleep(INPUT_POLL);
                    continue;
                }
                let ready = crossterm::event::poll(INPUT_POLL).unwrap_or(false);
                let Some(ev) = ready.then(crossterm::event::read).and_then(Result::ok) else { continue };
                let ev = match ev {
                    // Releases and repeats (on terminals that report them) are not presses.
                    crossterm::event::Event::Key(k) if k.kind == KeyEventKind::Press => Event::Key(k),
                    crossterm::event::Event::Mouse(m) => Event::Mouse(m),
                    crossterm::event::Event::Resize(w, h) => Event::Resize(w, h),
                    _ => continue,
                };
                if tx.send(ev).is_err() {
                    break;
                }
            }
        });
    }
    {
        let (tx, stop) = (tx.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) && tx.send(Event::Tick).is_ok() {
                std::thread::sleep(tick);
            }
        });
    }
    {
        let (tx, stop) = (tx.clone(), stop.clone());
        std::thread::spawn(move || {
            let sent = tx.clone();
            let result = rung_core::watch::watch(&root, &opts, stop, move |e| {
                let _ = sent.send(Event::Watch(Box::new(e.clone())));
            });
            if let Err(e) = result {
                let _ = tx.send(Event::WatchFailed(format!("{e:#}")));
            }
        });
    }
    Sources { stop, paused }
}
