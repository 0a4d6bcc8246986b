//! rung's agent side: the verbs an agent calls on a workspace ([`verbs`], which the MCP server
//! offers too), and the chat agent's core: providers behind one [`Provider`] trait (any OpenAI-compatible
//! chat-completions endpoint, the Anthropic Messages API, an external command), streaming token
//! by token; retries, time limits and cancellation; the tools a model may call; token and cost
//! accounting; conversations kept in `.rung/chat/`; API keys that never reach a file or a
//! message. No terminal here: the chat panel (`src/tui/chat/`) and `rung chat` are shells that
//! feed [`run_turn`] and show its [`AgentEvent`]s.

pub mod anthropic;
pub mod auto;
pub mod command;
pub mod config;
pub mod conversation;
pub mod http;
pub mod openai;
pub mod prompt;
pub mod propose;
pub mod secrets;
pub mod tools;
pub mod verbs;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use conversation::{ChatStore, Conversation};
pub use secrets::Secret;

/// Who wrote a message. `Notice` is rung's own line in the conversation (an error, a cancelled
/// reply): shown and saved, never sent to a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    Tool,
    Notice,
}

/// A call the model asked for: `arguments` is the JSON text as the model wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One entry of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default)]
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a `Tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// A tool's answer that is an error, or a notice that reports one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// An assistant reply cut short (error or cancellation): its text is what arrived.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
}

impl Message {
    pub fn user(text: impl Into<String>) -> Message {
        Message::plain(Role::User, text.into())
    }

    pub fn notice(text: impl Into<String>, is_error: bool) -> Message {
        Message { is_error, ..Message::plain(Role::Notice, text.into()) }
    }

    fn plain(role: Role, text: String) -> Message {
        Message {
            role,
            text,
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
            is_error: false,
            partial: false,
        }
    }
}

/// A tool as the model sees it: a name, what it does, and a JSON schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// What a provider is asked.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub system: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
}

/// Tokens of one reply, or summed over a conversation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

/// Prices in US dollars per million tokens, from the provider's configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Prices {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

impl Prices {
    pub fn cost(&self, u: Usage) -> f64 {
        (u.input_tokens as f64 * self.input_per_mtok + u.output_tokens as f64 * self.output_per_mtok) / 1e6
    }
}

/// What happens while a turn runs, in order: the shells draw these as they come.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// Text of the reply, as it streams.
    Text(String),
    /// The model starts a tool call (`index` orders the calls of one reply).
    ToolCall { index: usize, id: String, name: String },
    /// A piece of a tool call's JSON arguments.
    ToolArguments { index: usize, fragment: String },
    /// The reply's tokens so far (cumulative for the reply, not a delta).
    Usage(Usage),
    /// A request failed with a status worth retrying; rung waits `wait` and tries again.
    Retrying { attempt: u32, wait: Duration, reason: String },
    /// A tool ran; `text` is what goes back to the model.
    ToolResult { id: String, name: String, is_error: bool, text: String },
    /// The reply is complete and saved.
    ReplyDone { usage: Usage },
}

/// How a provider's stream ended.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Finish {
    /// The provider's own word (`stop`, `end_turn`, `tool_calls`, `tool_use`, `length`...).
    pub stop_reason: Option<String>,
}

/// A cancellation flag shared by the shell (a key) and the running turn. Providers poll it at
/// least every [`POLL`]; a cancelled request stops reading and its connection or child process
/// is dropped.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

/// How often waiting code looks at the cancel flag.
pub const POLL: Duration = Duration::from_millis(25);

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst)
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    /// Sleeps `d`, or less if cancelled meanwhile; true if it was.
    pub fn sleep(&self, d: Duration) -> bool {
        let end = std::time::Instant::now() + d;
        loop {
            if self.is_cancelled() {
                return true;
            }
            let now = std::time::Instant::now();
            if now >= end {
                return false;
            }
            std::thread::sleep(POLL.min(end - now));
        }
    }
}

/// Everything that can go wrong talking to a model. Every message is meant for a person: what
/// happened and what to do. None of them ever holds an API key: texts that come from a server
/// are passed through [`Secret::redact`] before they get here.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    Config(String),
    #[error("no API key for provider `{provider}`: {detail}")]
    MissingKey { provider: String, detail: String },
    #[error("{url} refused the API key (HTTP {status}): {message}; check the key in {key_source}")]
    Unauthorized { url: String, status: u16, message: String, key_source: String },
    #[error(
        "{url} is rate-limiting requests (HTTP 429) after {attempts} attempt(s){}: {message}",
        retry_after.map(|d| format!("; it asks to wait {}", humantime::format_duration(d))).unwrap_or_default()
    )]
    RateLimited { url: String, attempts: u32, retry_after: Option<Duration>, message: String },
    #[error("{url} failed (HTTP {status}) after {attempts} attempt(s): {message}")]
    Server { url: String, status: u16, attempts: u32, message: String },
    #[error("{url} rejected the request (HTTP {status}): {message}")]
    Rejected { url: String, status: u16, message: String },
    #[error("cannot reach {url} after {attempts} attempt(s): {detail}")]
    Connect { url: String, attempts: u32, detail: String },
    #[error("no data from {what} for {}: gave up (raise `timeout` in the provider's configuration)", humantime::format_duration(*after))]
    Timeout { what: String, after: Duration },
    #[error("the provider sent a chunk rung cannot read: {detail}")]
    Malformed { detail: String },
    #[error("the connection closed before the reply was complete: {detail}")]
    Cut { detail: String },
    #[error("the provider reported an error in the stream: {message}")]
    Stream { message: String },
    #[error("cancelled")]
    Cancelled,
    #[error("`{command}` failed: {detail}")]
    Command { command: String, detail: String },
}

/// A source of replies. Implementations stream: `sink` gets each piece as it arrives, and the
/// call returns when the reply is complete, failed, or `cancel` was set.
pub trait Provider: Send + Sync {
    /// `openai gpt-4.1 (https://api.openai.com/v1)`: for the panel's title and errors.
    fn describe(&self) -> String;
    fn model(&self) -> &str;
    /// The key it sends, to be taken out of everything rung saves of its conversations.
    fn secret(&self) -> Option<Secret> {
        None
    }
    /// Whether the provider can call tools (an external command cannot).
    fn supports_tools(&self) -> bool {
        true
    }
    fn stream(
        &self,
        request: &Request<'_>,
        cancel: &Cancel,
        sink: &mut dyn FnMut(AgentEvent),
    ) -> Result<Finish, AgentError>;
}

/// What a tool call returns to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub text: String,
    pub is_error: bool,
}

/// The tools a model may call in a conversation.
pub trait ToolBox {
    fn specs(&self) -> Vec<ToolSpec>;
    fn call(&self, name: &str, arguments: &str) -> ToolOutput;
}

/// No tools at all.
pub struct NoTools;

impl ToolBox for NoTools {
    fn specs(&self) -> Vec<ToolSpec> {
        Vec::new()
    }
    fn call(&self, name: &str, _: &str) -> ToolOutput {
        ToolOutput { text: format!("error: there is no tool `{name}`"), is_error: true }
    }
}

/// Assembles one reply from its events: text, tool calls by index (a new id at an index already
/// used starts another call, as some OpenAI-compatible servers reuse index 0), usage.
#[derive(Debug, Default)]
pub struct ReplyBuilder {
    pub text: String,
    calls: BTreeMap<usize, ToolCall>,
    /// Provider index -> slot in `calls`.
    slots: BTreeMap<usize, usize>,
    pub usage: Usage,
}

impl ReplyBuilder {
    pub fn apply(&mut self, ev: &AgentEvent) {
        match ev {
            AgentEvent::Text(t) => self.text.push_str(t),
            AgentEvent::ToolCall { index, id, name } => {
                // Some servers repeat the id in every delta: the same id (or none yet) is the same call.
                let reuse = self
                    .slots
                    .get(index)
                    .and_then(|s| self.calls.get(s))
                    .is_some_and(|c| c.id.is_empty() || c.id == *id);
                let slot = if reuse { self.slots[index] } else { self.calls.len() };
                self.slots.insert(*index, slot);
                let call = self.calls.entry(slot).or_insert_with(|| ToolCall {
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                });
                call.id.clone_from(id);
                if !name.is_empty() {
                    call.name.clone_from(name);
                }
            }
            AgentEvent::ToolArguments { index, fragment } => {
                let slot = *self.slots.entry(*index).or_insert(self.calls.len());
                let call = self.calls.entry(slot).or_insert_with(|| ToolCall {
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                });
                call.arguments.push_str(fragment);
            }
            AgentEvent::Usage(u) => {
                if u.input_tokens > 0 {
                    self.usage.input_tokens = u.input_tokens;
                }
                if u.output_tokens > 0 {
                    self.usage.output_tokens = u.output_tokens;
                }
            }
            _ => {}
        }
    }

    pub fn tool_calls(&self) -> Vec<ToolCall> {
        self.calls.values().cloned().collect()
    }
}

/// The system prompt when the configuration gives none.
pub const SYSTEM_PROMPT: &str = "You help a kernel engineer write fast, correct GPU kernels in a rung workspace: \
rung.toml states the problem, reference.cu or reference.py is the trusted reference, versions/ holds one file per \
version (v001.cu, v002-vectorized.py...). Every version climbs the same rungs: build, run, check against the \
reference, bench, roofline, profile; a fast kernel that is wrong is worth nothing. Use the tools to read files, \
search context/, and read a version's results, SASS or PTX, diffs and profile before you answer; say what you \
measured and what you guess. Put a proposed version in one fenced code block holding the complete file.";

/// How many model replies one user message may take (each tool round is one).
pub const DEFAULT_MAX_TOOL_ROUNDS: u32 = 8;

/// One user turn: the user's message is already the conversation's last. Streams the reply,
/// runs the tools it asks for and streams again, up to `max_rounds` replies. Every message is
/// saved as it completes; on an error or a cancellation, what arrived is kept as a partial
/// reply followed by a notice, so nothing of the conversation is lost, and the error is
/// returned.
pub fn run_turn(
    provider: &dyn Provider,
    conv: &mut Conversation,
    tools: &dyn ToolBox,
    system: &str,
    max_rounds: u32,
    cancel: &Cancel,
    sink: &mut dyn FnMut(AgentEvent),
) -> Result<(), AgentError> {
    let specs = if provider.supports_tools() { tools.specs() } else { Vec::new() };
    for round in 0..max_rounds.max(1) {
        let mut reply = ReplyBuilder::default();
        let outcome = {
            let request = Request { system, messages: &conv.messages, tools: &specs };
            provider.stream(&request, cancel, &mut |ev| {
                reply.apply(&ev);
                sink(ev);
            })
        };
        conv.account(reply.usage);
        if let Err(e) = outcome {
            if !reply.text.is_empty() {
                // Tool calls of a cut reply are dropped: their arguments may be incomplete, and
                // a provider refuses a call without its answer.
                conv.push(Message { partial: true, ..Message::plain(Role::Assistant, reply.text) })?;
            }
            let text = if e == AgentError::Cancelled { "reply cancelled".to_string() } else { format!("error: {e}") };
            conv.push(Message::notice(text, e != AgentError::Cancelled))?;
            return Err(e);
        }
        let calls = reply.tool_calls();
        conv.push(Message { tool_calls: calls.clone(), ..Message::plain(Role::Assistant, reply.text) })?;
        sink(AgentEvent::ReplyDone { usage: reply.usage });
        if calls.is_empty() {
            return Ok(());
        }
        for call in &calls {
            let out = if cancel.is_cancelled() {
                ToolOutput { text: "cancelled before it ran".into(), is_error: true }
            } else {
                tools.call(&call.name, &call.arguments)
            };
            sink(AgentEvent::ToolResult {
                id: call.id.clone(),
                name: call.name.clone(),
                is_error: out.is_error,
                text: out.text.clone(),
            });
            conv.push(Message {
                tool_call_id: Some(call.id.clone()),
                tool_name: Some(call.name.clone()),
                is_error: out.is_error,
                ..Message::plain(Role::Tool, out.text)
            })?;
        }
        if cancel.is_cancelled() {
            conv.push(Message::notice("reply cancelled", false))?;
            return Err(AgentError::Cancelled);
        }
        if round + 1 == max_rounds.max(1) {
            let text = format!("stopped after {max_rounds} replies with tool calls (max_tool_rounds)");
            conv.push(Message::notice(text.clone(), true))?;
            return Err(AgentError::Config(text));
        }
    }
    Ok(())
}

/// The configured agent: the provider `[agent]` names (built, its key read), its prices, the
/// system prompt and the round limit. `rung chat` and the chat panel both start from it.
/// Clones share the provider.
#[derive(Clone)]
pub struct Agent {
    config: config::AgentConfig,
    /// The provider's name in the configuration (`openai`, `local`...).
    pub name: String,
    pub provider: Arc<dyn Provider>,
    pub prices: Option<Prices>,
}

/// How a turn run by [`Agent::spawn`] ended: the conversation, back from the turn's thread, and
/// the turn's result.
#[derive(Debug)]
pub struct TurnEnd {
    pub conversation: Conversation,
    pub result: Result<(), AgentError>,
}

impl std::fmt::Debug for Agent {
    /// The provider's name and model: never its key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").field("name", &self.name).field("model", &self.provider.model()).finish()
    }
}

impl Agent {
    /// Builds the named provider (`None`: the configured one), `model` overriding its model.
    pub fn new(config: config::AgentConfig, provider: Option<&str>, model: Option<&str>) -> Result<Agent, AgentError> {
        let name = config.provider_name(provider);
        let (provider, prices) = config.build(&name, model)?;
        Ok(Agent { config, name, provider: Arc::from(provider), prices })
    }

    /// The command that reads this provider's key, when one does (it may take a while).
    pub fn key_command(&self) -> Option<Vec<String>> {
        self.config.settings(&self.name).ok().and_then(|s| s.api_key_command)
    }

    /// The same provider with another model (`/model NAME`); its key is read again.
    pub fn with_model(&self, model: &str) -> Result<Agent, AgentError> {
        Agent::new(self.config.clone(), Some(&self.name), Some(model))
    }

    /// `openai gpt-4.1`: the provider's name and model.
    pub fn label(&self) -> String {
        format!("{} {}", self.name, self.provider.model())
    }

    pub fn system_prompt(&self) -> &str {
        self.config.system_prompt.as_deref().unwrap_or(SYSTEM_PROMPT)
    }

    /// Auto mode's target from `[agent.auto]` (none: the default budget).
    pub fn auto_target(&self) -> auto::Target {
        self.config.auto.unwrap_or_default()
    }

    pub fn max_rounds(&self) -> u32 {
        self.config.max_tool_rounds()
    }

    /// A new conversation with this provider and model, priced as configured: saved in `store`,
    /// or only in memory without one.
    pub fn conversation(&self, store: Option<&ChatStore>) -> Result<Conversation, AgentError> {
        let mut conv = match store {
            Some(s) => s.create(&self.name, self.provider.model())?,
            None => Conversation::in_memory(&self.name, self.provider.model()),
        };
        conv.prices = self.prices;
        if let Some(key) = self.provider.secret() {
            conv.guard(key);
        }
        Ok(conv)
    }

    /// One user turn ([`run_turn`]) with this agent's provider, system prompt (with `context`
    /// after it) and round limit.
    pub fn turn(
        &self,
        conv: &mut Conversation,
        tools: &dyn ToolBox,
        context: &str,
        cancel: &Cancel,
        sink: &mut dyn FnMut(AgentEvent),
    ) -> Result<(), AgentError> {
        run_turn(self.provider.as_ref(), conv, tools, &self.system_with(context), self.max_rounds(), cancel, sink)
    }

    /// The system prompt with the workspace's context after it ([`prompt::workspace_context`]).
    pub fn system_with(&self, context: &str) -> String {
        if context.is_empty() {
            self.system_prompt().to_string()
        } else {
            format!("{}\n\n{context}", self.system_prompt())
        }
    }

    /// The same turn on a thread of its own, for a shell whose thread must keep drawing: `sink`
    /// gets every event as it comes, then `done` the conversation back with the result. `context`
    /// follows the system prompt.
    pub fn spawn(
        &self,
        mut conv: Conversation,
        tools: Arc<dyn ToolBox + Send + Sync>,
        cancel: Cancel,
        context: &str,
        mut sink: impl FnMut(AgentEvent) + Send + 'static,
        done: impl FnOnce(TurnEnd) + Send + 'static,
    ) -> std::thread::JoinHandle<()> {
        let provider = self.provider.clone();
        let system = self.system_with(context);
        let rounds = self.max_rounds();
        std::thread::spawn(move || {
            let result = run_turn(provider.as_ref(), &mut conv, tools.as_ref(), &system, rounds, &cancel, &mut sink);
            done(TurnEnd { conversation: conv, result });
        })
    }
}

/// Decodes UTF-8 that arrives in pieces: returns the longest complete prefix and keeps an
/// incomplete character for the next piece. Invalid bytes become U+FFFD.
#[derive(Debug, Default)]
pub struct Utf8Pieces {
    pending: Vec<u8>,
}

impl Utf8Pieces {
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[..good]).expect("checked"));
                    match e.error_len() {
                        None => {
                            self.pending.drain(..good);
                            return out;
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..good + bad);
                        }
                    }
                }
            }
        }
    }

    /// The end of the input: an incomplete character left over becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_pieces_join_split_characters() {
        let text = "a — µ 🚀 b";
        let bytes = text.as_bytes();
        for cut in 0..bytes.len() {
            let mut d = Utf8Pieces::default();
            let mut got = d.push(&bytes[..cut]);
            got.push_str(&d.push(&bytes[cut..]));
            got.push_str(&d.finish());
            assert_eq!(got, text, "cut at {cut}");
        }
        let mut d = Utf8Pieces::default();
        assert_eq!(d.push(b"a\xffb"), "a\u{FFFD}b");
    }

    #[test]
    fn reply_builder_assembles_calls_by_index_and_reused_index() {
        let mut b = ReplyBuilder::default();
        for ev in [
            AgentEvent::ToolCall { index: 0, id: "a".into(), name: "read_file".into() },
            AgentEvent::ToolArguments { index: 0, fragment: "{\"pa".into() },
            AgentEvent::ToolCall { index: 0, id: "a".into(), name: String::new() },
            AgentEvent::ToolArguments { index: 0, fragment: "th\":1}".into() },
            // An Ollama-style second call at index 0 with a new id.
            AgentEvent::ToolCall { index: 0, id: "b".into(), name: "get_asm".into() },
            AgentEvent::ToolArguments { index: 0, fragment: "{}".into() },
        ] {
            b.apply(&ev);
        }
        let calls = b.tool_calls();
        assert_eq!(calls.len(), 2);
        assert_eq!((calls[0].id.as_str(), calls[0].arguments.as_str()), ("a", "{\"path\":1}"));
        assert_eq!((calls[1].name.as_str(), calls[1].arguments.as_str()), ("get_asm", "{}"));
    }

    #[test]
    fn cost_is_per_million_tokens() {
        let p = Prices { input_per_mtok: 2.0, output_per_mtok: 8.0 };
        let c = p.cost(Usage { input_tokens: 1_000_000, output_tokens: 500_000 });
        assert!((c - 6.0).abs() < 1e-12, "{c}");
    }
}
