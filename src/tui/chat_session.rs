//! The chat side panel wired to the agent: the [`ChatPanel`] (what is shown, the input box), the
//! agent built from the `[agent]` table when the panel first opens, the conversation in
//! `.rung/chat/` (the newest one is shown again), and the turn running on a thread of its own,
//! whose events reach the loop as [`Event::Agent`] and [`Event::AgentDone`]. One turn at a time:
//! the turn's thread owns the conversation until it hands it back.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use rung_agent::auto::{self, AutoEvent, Measure};
use rung_agent::config::AgentConfig;
use rung_agent::propose::{self, Proposed, Record};
use rung_agent::tools::WorkspaceTools;
use rung_agent::{Agent, AgentError, AgentEvent, Cancel, ChatStore, Conversation, Message, ToolBox, TurnEnd};

use super::chat::{Activity, ChatPanel, SlashCommand};
use super::event::Event;

/// The agent, once the panel has opened.
enum Setup {
    /// The panel has not been opened yet: nothing is read before it is.
    NotOpened,
    Ready {
        agent: Box<Agent>,
        tools: Arc<dyn ToolBox + Send + Sync>,
    },
    /// No agent: why, already shown on the panel with how to configure one. Opening the panel
    /// again reads the configuration again.
    Unconfigured,
    /// The provider's `api_key_command` is running on a thread of its own (a keyring may ask
    /// for a passphrase); a message sent meanwhile waits here and goes once the agent is ready.
    Starting {
        queued: Option<String>,
    },
}

/// The turn in flight.
pub struct Turn {
    /// What `/stop` sets.
    pub cancel: Cancel,
    /// Messages in the conversation when it started (for `/context` while the thread has it).
    pub messages: usize,
    /// The system prompt and the message, kept with a proposal the reply makes.
    pub system: String,
    pub request: String,
}

/// Auto mode in flight: its thread has the conversation.
pub struct AutoRun {
    pub cancel: Cancel,
    /// Where the scheduler's results reach the waiting climb.
    reports: Sender<(String, Measure)>,
}

/// How long auto mode waits for the scheduler to finish a proposal's rungs.
pub const CLIMB_LIMIT: Duration = Duration::from_secs(30 * 60);

pub struct ChatSession {
    pub panel: ChatPanel,
    /// Shown beside the other panes on a wide screen (on a narrow one only while focused).
    pub shown: bool,
    /// The file whose `[agent]` table configures the agent (`None`: no file, the defaults).
    pub config_path: Option<PathBuf>,
    /// Where turns send their events: the loop's channel (set before the first turn).
    pub events: Option<Sender<Event>>,
    /// The version the prompt puts in focus: the selection when the message was sent.
    pub focus: Option<String>,
    root: PathBuf,
    setup: Setup,
    /// `None` until the first message (no empty files), and while a turn's thread has it.
    conversation: Option<Conversation>,
    pub turn: Option<Turn>,
    pub auto: Option<AutoRun>,
}

impl ChatSession {
    pub fn new(root: &Path, color: bool) -> ChatSession {
        let mut panel = ChatPanel::new("no agent yet", color);
        panel.focused = false;
        ChatSession {
            panel,
            shown: false,
            config_path: None,
            events: None,
            focus: None,
            root: root.to_path_buf(),
            setup: Setup::NotOpened,
            conversation: None,
            turn: None,
            auto: None,
        }
    }

    /// Whether a turn or auto mode is running (its thread has the conversation).
    pub fn busy(&self) -> bool {
        self.turn.is_some() || self.auto.is_some()
    }

    /// The panel opens: the first time, the newest conversation comes back and the agent is
    /// built; while there is no agent, each opening tries the configuration again.
    pub fn open(&mut self, color: bool) {
        self.shown = true;
        self.panel.color = color;
        match self.setup {
            Setup::NotOpened => {
                self.restore();
                self.configure();
            }
            Setup::Unconfigured => {
                self.panel.clear();
                if let Some(c) = &self.conversation {
                    self.panel.show(c);
                }
                self.configure();
            }
            Setup::Ready { .. } | Setup::Starting { .. } => {}
        }
    }

    /// Shows the newest conversation of `.rung/chat/`, to be continued.
    fn restore(&mut self) {
        let store = ChatStore::for_workspace(&self.root);
        let Some(id) = store.list().pop() else { return };
        match store.load(&id) {
            Ok(c) => {
                self.panel.show(&c);
                self.conversation = Some(c);
            }
            Err(e) => self.panel.push_notice(format!("the last conversation cannot be shown: {e}"), true),
        }
    }

    /// Builds the agent from the configuration, which wins over the model a restored
    /// conversation was left on (a `/model` lasts for the session); the switch is recorded in it.
    fn configure(&mut self) {
        let config = AgentConfig::load_or_default(self.config_path.as_deref());
        // A key command can take seconds (a keyring's prompt): it runs off the UI thread.
        let command = config.as_ref().ok().and_then(|c| c.settings(&c.provider_name(None)).ok()?.api_key_command);
        if let (Some(cmd), Some(events), Ok(cfg)) = (command, self.events.clone(), &config) {
            let cfg = cfg.clone();
            std::thread::spawn(move || {
                let _ = events.send(Event::AgentBuilt(Box::new(Agent::new(cfg, None, None))));
            });
            self.panel.model = "starting…".into();
            self.panel.push_notice(format!("reading the API key with `{}`…", cmd.join(" ")), false);
            self.setup = Setup::Starting { queued: None };
            return;
        }
        self.built(config.and_then(|cfg| Agent::new(cfg, None, None)));
    }

    /// The agent, built (here, or on the key command's thread): ready, or why not. A message
    /// sent while it started goes now.
    pub fn built(&mut self, built: Result<Agent, AgentError>) {
        let queued = match &mut self.setup {
            Setup::Starting { queued } => queued.take(),
            _ => None,
        };
        match built {
            Ok(agent) => {
                self.panel.model = agent.label();
                if let Some(c) = &mut self.conversation {
                    c.prices = agent.prices;
                    if (c.provider.as_str(), c.model.as_str()) != (agent.name.as_str(), agent.provider.model())
                        && let Err(e) = c.set_model(&agent.name, agent.provider.model())
                    {
                        self.panel.push_notice(format!("error: {e}"), true);
                    }
                }
                let tools = Arc::new(WorkspaceTools::new(self.root.clone()));
                self.setup = Setup::Ready { agent: Box::new(agent), tools };
                if let Some(text) = queued {
                    self.send(text);
                }
            }
            Err(e) => {
                self.panel.model = "no agent".into();
                self.panel.push_notice(why_not(&e), true);
                self.panel.push_notice(how_to(self.config_path.as_deref()), false);
                if queued.is_some() {
                    self.panel.push_notice("the message was not sent", true);
                }
                self.setup = Setup::Unconfigured;
            }
        }
    }

    /// Sends a message the panel has already shown: the turn starts on its own thread.
    pub fn send(&mut self, text: String) {
        if let Setup::Starting { queued } = &mut self.setup {
            *queued = Some(text);
            self.panel.push_notice("the agent is starting (reading its key): the message goes when it is ready", false);
            return;
        }
        let Setup::Ready { agent, tools } = &self.setup else {
            self.panel.push_notice("no agent is configured: see above, then close and open the chat again", true);
            return;
        };
        if self.turn.is_some() {
            self.panel.push_notice("a reply is still streaming: /stop cancels it", true);
            return;
        }
        if self.auto.is_some() {
            self.panel.push_notice("auto mode is running: A or /stop stops it", true);
            return;
        }
        let Some(events) = self.events.clone() else {
            self.panel.push_notice("the chat is not connected to the event loop", true);
            return;
        };
        // The task, the version in focus and its results, as they are now, and the passages of
        // context/ the message asks about.
        let (context, passages) = rung_agent::prompt::workspace_context_with(&self.root, self.focus.as_deref(), &text);
        let started = continued(&mut self.conversation, agent, &self.root);
        let mut conv = match started.and_then(|mut c| c.push(Message::user(text.clone())).map(|()| c)) {
            Ok(c) => c,
            Err(e) => {
                self.panel.push_notice(format!("error: {e}"), true);
                return;
            }
        };
        conv.prices = agent.prices;
        self.panel.push_context(passages.iter().map(|p| p.place()).collect());
        let cancel = Cancel::new();
        self.turn = Some(Turn {
            cancel: cancel.clone(),
            messages: conv.messages.len(),
            system: agent.system_with(&context),
            request: text,
        });
        // Busy from now on, before the first token: a second message waits its turn.
        self.panel.activity = Activity::Streaming;
        let done = events.clone();
        agent.spawn(
            conv,
            tools.clone(),
            cancel,
            &context,
            move |ev| {
                let _ = events.send(Event::Agent(ev));
            },
            move |end| {
                let _ = done.send(Event::AgentDone(Box::new(end)));
            },
        );
    }

    /// An event of the running turn.
    pub fn apply(&mut self, ev: &AgentEvent) {
        self.panel.apply(ev);
    }

    /// The turn ended: the conversation is back. A complete reply with a code block becomes a
    /// proposed version made from the version in focus: what was written, or why it was not.
    /// `review` says how to approve or reject from where the notice shows: the chat has the keys,
    /// so the review keys work only after Tab gives them back.
    pub fn finish(
        &mut self,
        end: TurnEnd,
        review: &str,
    ) -> Option<Result<Proposed, rung_agent::propose::ProposeError>> {
        self.panel.finish(&end.result, Some(&end.conversation));
        let turn = self.turn.take();
        let conv = end.conversation;
        let proposed = match (&end.result, turn) {
            (Ok(()), Some(turn)) => {
                let reply = propose::last_reply(&conv.messages[turn.messages.min(conv.messages.len())..]);
                let record = Record::of_turn(&conv, turn.system, turn.request, reply.clone());
                propose::propose(&self.root, self.focus.as_deref(), &reply, record).transpose()
            }
            _ => None,
        };
        match &proposed {
            Some(Ok(p)) => self.panel.push_notice(
                format!(
                    "proposed {} ({}){}: it climbs the rungs now; {review}{}",
                    p.id,
                    p.path.display(),
                    p.parent.as_ref().map(|p| format!(", made from {p}")).unwrap_or_default(),
                    if p.same_as.is_empty() {
                        String::new()
                    } else {
                        format!(". Warning: the same source as {}", p.same_as.join(", "))
                    }
                ),
                !p.same_as.is_empty(),
            ),
            Some(Err(e)) => self.panel.push_notice(format!("the reply's code was not written as a version: {e}"), true),
            None => {}
        }
        self.conversation = Some(conv);
        proposed
    }

    /// Starts auto mode from the best approved or passing version (else `selected`), on a
    /// thread of its own; its climbs wait for the scheduler's results ([`ChatSession::report`]).
    pub fn start_auto(&mut self, selected: Option<&str>) {
        if matches!(self.setup, Setup::Starting { .. }) {
            self.panel.push_notice("the agent is starting (reading its key): A again in a moment", true);
            return;
        }
        let Setup::Ready { agent, tools } = &self.setup else {
            self.panel.push_notice("no agent is configured: see above, then close and open the chat again", true);
            return;
        };
        if self.busy() {
            self.panel.push_notice("a reply is still streaming: /stop it first", true);
            return;
        }
        let Some(events) = self.events.clone() else {
            self.panel.push_notice("the chat is not connected to the event loop", true);
            return;
        };
        let mut conv = match continued(&mut self.conversation, agent, &self.root) {
            Ok(c) => c,
            Err(e) => {
                self.panel.push_notice(format!("error: {e}"), true);
                return;
            }
        };
        conv.prices = agent.prices;
        let cancel = Cancel::new();
        let (reports, waiting) = std::sync::mpsc::channel();
        self.auto = Some(AutoRun { cancel: cancel.clone(), reports });
        self.panel.activity = super::chat::Activity::Streaming;
        let (agent, tools, root) = (agent.clone(), tools.clone(), self.root.clone());
        let start = auto::start_parent(&root, selected);
        let target = agent.auto_target();
        std::thread::spawn(move || {
            let mut climb = |id: &str| wait_for(&waiting, id, &cancel);
            let send = |e: Event| {
                let _ = events.send(e);
            };
            let end = auto::run(
                auto::Session { root: &root, agent: &agent, conv: &mut conv, tools: tools.as_ref() },
                target,
                start,
                &cancel,
                &mut climb,
                &mut |ev| match ev {
                    AutoEvent::Asking(t) => send(Event::AutoAsking(t.to_string())),
                    AutoEvent::Agent(e) => send(Event::Agent(e)),
                    AutoEvent::Proposed(p) => {
                        send(Event::AutoProposed { id: p.id.clone(), path: p.path.clone(), parent: p.parent.clone() })
                    }
                    AutoEvent::Log(l) => send(Event::AutoLog(l.to_string())),
                },
            );
            send(Event::AutoDone(Box::new((conv, end))));
        });
    }

    /// A version's pipeline finished in the scheduler: auto mode may be waiting for it (measured
    /// only then).
    pub fn report(&self, report: &rung_core::model::report::VersionReport) {
        if let Some(a) = &self.auto {
            let _ = a.reports.send((report.id.clone(), Measure::of_report(report)));
        }
    }

    /// Auto mode ended: the conversation is back.
    pub fn auto_done(&mut self, conv: Conversation) {
        self.panel.finish(&Ok(()), Some(&conv));
        self.conversation = Some(conv);
        self.auto = None;
    }

    pub fn command(&mut self, cmd: SlashCommand) {
        match cmd {
            SlashCommand::Stop => match (&self.turn, &self.auto) {
                (Some(t), _) => t.cancel.cancel(),
                (None, Some(a)) => a.cancel.cancel(),
                (None, None) => self.panel.push_notice("no reply is streaming", false),
            },
            SlashCommand::Clear if self.turn.is_some() => {
                self.panel.push_notice("a reply is still streaming: /stop it first", true)
            }
            SlashCommand::Clear => {
                let cleared = self.conversation.as_mut().map_or(Ok(()), Conversation::clear);
                self.panel.clear();
                match cleared {
                    Ok(()) => self.panel.push_notice("cleared: the next message starts afresh", false),
                    Err(e) => self.panel.push_notice(format!("error: {e}"), true),
                }
            }
            SlashCommand::Model(None) => {
                let text = match &self.setup {
                    Setup::Ready { agent, .. } => format!("model: {}", agent.provider.describe()),
                    _ => "no agent is configured".to_string(),
                };
                self.panel.push_notice(text, false);
            }
            SlashCommand::Model(Some(_)) if self.turn.is_some() => {
                self.panel.push_notice("a reply is still streaming: /stop it first", true)
            }
            SlashCommand::Model(Some(model)) => self.switch_model(&model),
            SlashCommand::Context => {
                let text = self.context();
                self.panel.push_notice(text, false);
            }
        }
    }

    /// `/model NAME`: the provider built again with that model, recorded in the conversation.
    fn switch_model(&mut self, model: &str) {
        let Setup::Ready { agent, .. } = &mut self.setup else {
            self.panel.push_notice("no agent is configured", true);
            return;
        };
        // The key is read again: off the UI thread when a command reads it.
        let command = agent.key_command();
        if let (Some(cmd), Some(events)) = (command, self.events.clone()) {
            let current = agent.as_ref().clone();
            let model = model.to_string();
            std::thread::spawn(move || {
                let _ = events.send(Event::ModelSwitched(Box::new(current.with_model(&model))));
            });
            self.panel.push_notice(format!("reading the API key with `{}`…", cmd.join(" ")), false);
            return;
        }
        let next = agent.with_model(model);
        self.switched(next);
    }

    /// `/model`'s provider, built: it replaces the agent, and the switch is recorded in the
    /// conversation; or the model stays.
    pub fn switched(&mut self, next: Result<Agent, AgentError>) {
        let Setup::Ready { agent, .. } = &mut self.setup else { return };
        match next {
            Ok(next) => {
                **agent = next;
                self.panel.model = agent.label();
                let recorded =
                    self.conversation.as_mut().map_or(Ok(()), |c| c.set_model(&agent.name, agent.provider.model()));
                match recorded {
                    Ok(()) => self.panel.push_notice(format!("model: {}", agent.provider.describe()), false),
                    Err(e) => self.panel.push_notice(format!("error: {e}"), true),
                }
            }
            Err(e) => self.panel.push_notice(format!("model not changed: {e}"), true),
        }
    }

    /// `/context`: what the next request holds.
    fn context(&self) -> String {
        let Setup::Ready { agent, tools } = &self.setup else {
            return "no agent is configured: nothing is sent".into();
        };
        let messages = match (&self.turn, &self.conversation) {
            (Some(t), _) => format!("{} messages and the reply streaming", t.messages),
            (None, Some(c)) => format!("{} messages", c.messages.len()),
            (None, None) => "no messages yet".into(),
        };
        let specs = if agent.provider.supports_tools() { tools.specs() } else { Vec::new() };
        let offered = if specs.is_empty() {
            "no tools".to_string()
        } else {
            format!("{} tools ({})", specs.len(), specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", "))
        };
        let u = self.panel.usage;
        let cost = self.panel.cost_usd.map(|c| format!(", ${c:.4}")).unwrap_or_default();
        format!(
            "context for {}:\nthe system prompt ({} characters), {messages}, {offered}\ntokens so far: {} in / {} out{cost}",
            agent.provider.describe(),
            agent.system_prompt().chars().count(),
            u.input_tokens,
            u.output_tokens,
        )
    }
}

/// The climb of auto mode in the TUI: the scheduler's result for `id` (others are skipped), or
/// why none came.
fn wait_for(waiting: &Receiver<(String, Measure)>, id: &str, cancel: &Cancel) -> Result<Measure, auto::ClimbError> {
    let started = Instant::now();
    loop {
        if cancel.is_cancelled() {
            return Err(auto::ClimbError::Stopped);
        }
        if started.elapsed() > CLIMB_LIMIT {
            return Err(auto::ClimbError::NoResult(CLIMB_LIMIT.as_secs() / 60));
        }
        match waiting.recv_timeout(Duration::from_millis(200)) {
            Ok((got, m)) if got == id => return Ok(m),
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Err(auto::ClimbError::Disconnected),
        }
    }
}

/// How to configure an agent, for the panel when there is none: short enough for an 80×24
/// terminal, where the panel has a dozen rows.
pub fn how_to(config: Option<&Path>) -> String {
    let file = config.map_or_else(|| "~/.config/rung/config.toml".to_string(), |p| p.display().to_string());
    format!(
        "Add an agent to {file}:\n\
         \x20   [agent]\n\
         \x20   provider = \"local\"\n\
         \x20   [agent.providers.local]\n\
         \x20   kind = \"openai\"  # or \"anthropic\"; \"command\" runs a CLI agent\n\
         \x20   base_url = \"http://127.0.0.1:8080/v1\"\n\
         \x20   model = \"qwen2.5-coder\"\n\
         \x20   api_key_env = \"LOCAL_KEY\"  # the variable that holds the key\n\
         Or export OPENAI_API_KEY alone. Esc closes; opening again rereads the file."
    )
}

/// Why there is no agent, in one or two rows: a missing key says only what to do.
fn why_not(e: &AgentError) -> String {
    match e {
        AgentError::MissingKey { detail, .. } => format!("no agent: {detail}"),
        other => format!("no agent: {other}"),
    }
}

/// The conversation a message or auto mode continues: the one on screen, else a new one in the
/// workspace's `.rung/chat/`.
fn continued(held: &mut Option<Conversation>, agent: &Agent, root: &Path) -> Result<Conversation, AgentError> {
    match held.take() {
        Some(c) => Ok(c),
        None => agent.conversation(Some(&ChatStore::for_workspace(root))),
    }
}
