//! Conversations and their files, `.rung/chat/<id>.jsonl`: a header line, then one line per
//! message as it completes and one per reply's usage, appended and flushed, so a crash loses at
//! most the reply that was streaming. Every line is passed through the redaction of
//! [`secrets::redact_known`] first: no key reaches the file even if a server echoed it into an
//! error that slipped past the providers' own redaction.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::secrets::{self, Secret};
use super::{AgentError, Message, Prices, Usage};

/// The chat files' format version.
pub const SCHEMA: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Header {
        schema: u32,
        id: String,
        provider: String,
        model: String,
        created: String,
    },
    Message(Message),
    Usage {
        usage: Usage,
        cost_usd: Option<f64>,
    },
    Model {
        provider: String,
        model: String,
    },
    /// `/clear`: the messages before it are kept in the file but not sent again.
    Clear,
}

/// Where a workspace keeps its conversations.
#[derive(Debug, Clone)]
pub struct ChatStore {
    pub dir: PathBuf,
}

impl ChatStore {
    /// `.rung/chat/` of a workspace.
    pub fn for_workspace(root: &Path) -> ChatStore {
        ChatStore { dir: root.join(".rung").join("chat") }
    }

    /// A new, empty conversation with its file created.
    pub fn create(&self, provider: &str, model: &str) -> Result<Conversation, AgentError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| io(&self.dir, e))?;
        let now = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        let stem = now.replace(':', "-");
        let (id, file) = (0..1000)
            .find_map(|n| {
                let id = if n == 0 { stem.clone() } else { format!("{stem}-{n}") };
                let path = self.dir.join(format!("{id}.jsonl"));
                OpenOptions::new().append(true).create_new(true).open(&path).ok().map(|f| (id, f))
            })
            .ok_or_else(|| AgentError::Config(format!("{}: cannot create a chat file", self.dir.display())))?;
        let mut conv = Conversation {
            id: id.clone(),
            path: Some(self.dir.join(format!("{id}.jsonl"))),
            file: Some(file),
            ..Conversation::in_memory(provider, model)
        };
        conv.write(&Line::Header { schema: SCHEMA, id, provider: provider.into(), model: model.into(), created: now })?;
        Ok(conv)
    }

    /// The conversation ids, oldest first.
    pub fn list(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".jsonl").map(String::from))
            .collect();
        ids.sort();
        ids
    }

    /// Reads a conversation back; it can be continued (new lines are appended).
    pub fn load(&self, id: &str) -> Result<Conversation, AgentError> {
        let path = self.dir.join(format!("{id}.jsonl"));
        let f = File::open(&path).map_err(|e| io(&path, e))?;
        let mut conv = Conversation::in_memory("", "");
        conv.id = id.into();
        for (n, line) in BufReader::new(f).lines().enumerate() {
            let line = line.map_err(|e| io(&path, e))?;
            if line.trim().is_empty() {
                continue;
            }
            let parsed: Line = serde_json::from_str(&line)
                .map_err(|e| AgentError::Config(format!("{}:{}: not a chat line: {e}", path.display(), n + 1)))?;
            match parsed {
                Line::Header { provider, model, .. } | Line::Model { provider, model } => {
                    conv.provider = provider;
                    conv.model = model;
                }
                Line::Message(m) => conv.messages.push(m),
                Line::Clear => conv.messages.clear(),
                Line::Usage { usage, cost_usd } => {
                    conv.usage.add(usage);
                    if let Some(c) = cost_usd {
                        *conv.cost_usd.get_or_insert(0.0) += c;
                    }
                }
            }
        }
        conv.file = Some(OpenOptions::new().append(true).open(&path).map_err(|e| io(&path, e))?);
        conv.path = Some(path);
        Ok(conv)
    }
}

fn io(path: &Path, e: std::io::Error) -> AgentError {
    AgentError::Config(format!("{}: {e}", path.display()))
}

/// A conversation: its messages, the tokens and cost so far, and its file when it has one.
#[derive(Debug)]
pub struct Conversation {
    pub id: String,
    pub provider: String,
    pub model: String,
    pub messages: Vec<Message>,
    pub usage: Usage,
    /// Known only when the provider has prices configured.
    pub cost_usd: Option<f64>,
    pub prices: Option<Prices>,
    pub path: Option<PathBuf>,
    file: Option<File>,
    /// Keys taken out of every line written, beside those of the environment.
    secrets: Vec<Secret>,
}

impl Conversation {
    /// A conversation that is not saved (tests, `rung chat --no-save`).
    pub fn in_memory(provider: &str, model: &str) -> Conversation {
        Conversation {
            id: String::new(),
            provider: provider.into(),
            model: model.into(),
            messages: Vec::new(),
            usage: Usage::default(),
            cost_usd: None,
            prices: None,
            path: None,
            file: None,
            secrets: Vec::new(),
        }
    }

    /// A key to take out of anything this conversation saves.
    pub fn guard(&mut self, secret: Secret) {
        self.secrets.push(secret);
    }

    /// `text` with every key this conversation knows (and the environment's) taken out.
    pub fn clean(&self, text: &str) -> String {
        let mut t = secrets::redact_known(text);
        for s in &self.secrets {
            t = s.redact(&t);
        }
        t
    }

    fn write(&mut self, line: &Line) -> Result<(), AgentError> {
        let Some(path) = self.path.clone() else { return Ok(()) };
        let text = serde_json::to_string(line).expect("chat lines serialise");
        let text = self.clean(&text);
        let f = self.file.as_mut().expect("a saved conversation has its file");
        f.write_all(format!("{text}\n").as_bytes()).and_then(|_| f.flush()).map_err(|e| io(&path, e))
    }

    /// Appends a message and saves it (its text cleaned of keys, in memory too).
    pub fn push(&mut self, mut m: Message) -> Result<(), AgentError> {
        m.text = self.clean(&m.text);
        self.write(&Line::Message(m.clone()))?;
        self.messages.push(m);
        Ok(())
    }

    /// Adds a reply's tokens (and their cost) to the conversation's and saves them.
    pub fn account(&mut self, u: Usage) {
        if u == Usage::default() {
            return;
        }
        self.usage.add(u);
        let cost = self.prices.map(|p| p.cost(u));
        if let Some(c) = cost {
            *self.cost_usd.get_or_insert(0.0) += c;
        }
        // Accounting is best-effort on disk: a full disk shows up on the next message's save.
        let _ = self.write(&Line::Usage { usage: u, cost_usd: cost });
    }

    /// Switches the model for the next replies (`/model`), recorded in the file.
    pub fn set_model(&mut self, provider: &str, model: &str) -> Result<(), AgentError> {
        self.provider = provider.into();
        self.model = model.into();
        self.write(&Line::Model { provider: provider.into(), model: model.into() })
    }

    /// Forgets the messages (`/clear`): the file keeps them, marked, so a conversation loaded
    /// again starts after the mark too.
    pub fn clear(&mut self) -> Result<(), AgentError> {
        self.write(&Line::Clear)?;
        self.messages.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Role;
    use super::*;

    #[test]
    fn saves_and_loads_messages_usage_and_model() {
        let tmp = tempfile::tempdir().unwrap();
        let store = ChatStore::for_workspace(tmp.path());
        let mut c = store.create("openai", "m1").unwrap();
        c.prices = Some(Prices { input_per_mtok: 1.0, output_per_mtok: 2.0 });
        c.guard(Secret::new("sk-conv-test-key"));
        c.push(Message::user("hello sk-conv-test-key")).unwrap();
        c.account(Usage { input_tokens: 1000, output_tokens: 500 });
        c.set_model("anthropic", "m2").unwrap();
        let again = store.load(&c.id).unwrap();
        assert_eq!(again.messages.len(), 1);
        assert_eq!(again.messages[0].role, Role::User);
        assert_eq!(again.messages[0].text, "hello [redacted]");
        assert_eq!(again.usage, Usage { input_tokens: 1000, output_tokens: 500 });
        assert!((again.cost_usd.unwrap() - 0.002).abs() < 1e-12);
        assert_eq!((again.provider.as_str(), again.model.as_str()), ("anthropic", "m2"));
        let raw = std::fs::read_to_string(c.path.as_ref().unwrap()).unwrap();
        assert!(!raw.contains("sk-conv-test-key"), "{raw}");
        assert_eq!(store.list(), vec![c.id.clone()]);
        let mut c = again;
        c.clear().unwrap();
        c.push(Message::user("after clear")).unwrap();
        let cleared = store.load(&c.id).unwrap();
        assert_eq!(cleared.messages, vec![Message::user("after clear")]);
        assert!(std::fs::read_to_string(c.path.as_ref().unwrap()).unwrap().contains("hello [redacted]"));
    }
}
