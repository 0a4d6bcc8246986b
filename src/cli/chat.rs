//! `rung chat "question"`: one turn with the configured agent, the reply streamed to standard
//! output, tool calls and accounting on standard error, the conversation saved in `.rung/chat/`.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use rung::agent::config::{self, AgentConfig};
use rung::agent::propose;
use rung::agent::tools::WorkspaceTools;
use rung::agent::{self, Agent, AgentEvent, Cancel, ChatStore, Message, NoTools, ToolBox};
use rung::exit;

/// Which agent a command talks to: `rung chat` and `rung auto` take the same three options.
#[derive(Args, Debug)]
pub struct AgentChoice {
    /// A provider of the configuration's [agent.providers] (or `openai`, `anthropic`).
    #[arg(long)]
    pub provider: Option<String>,
    /// Overrides the provider's model.
    #[arg(long)]
    pub model: Option<String>,
    /// The configuration file (default: $RUNG_CONFIG, else ~/.config/rung/config.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

impl AgentChoice {
    /// The configuration read and the provider chosen.
    pub fn agent(&self) -> Result<Agent, agent::AgentError> {
        let cfg = AgentConfig::load_or_default(self.config.clone().or_else(config::default_path).as_deref())?;
        Agent::new(cfg, self.provider.as_deref(), self.model.as_deref())
    }
}

#[derive(Args, Debug)]
pub struct ChatArgs {
    /// The message to send.
    pub message: String,
    #[command(flatten)]
    pub agent: AgentChoice,
    /// Keep the conversation out of .rung/chat/.
    #[arg(long)]
    pub no_save: bool,
    /// Offer the model no tools.
    #[arg(long)]
    pub no_tools: bool,
    /// The version the prompt puts in focus (its source and results); without it, the task and
    /// the reference alone.
    #[arg(long, value_name = "VERSION")]
    pub version: Option<String>,
    /// Write the reply's code block as a new version, made from --version (as the TUI's chat
    /// does); without it a reply's code is only printed.
    #[arg(long)]
    pub propose: bool,
}

pub fn chat_cmd(dir: &Path, args: &ChatArgs) -> i32 {
    match chat(dir, args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rung chat: {e}");
            exit::USAGE
        }
    }
}

fn chat(dir: &Path, args: &ChatArgs) -> Result<i32, agent::AgentError> {
    let agent = args.agent.agent()?;
    let store = ChatStore::for_workspace(dir);
    let mut conv = agent.conversation((!args.no_save).then_some(&store))?;
    conv.push(Message::user(args.message.clone()))?;
    let tools: Box<dyn ToolBox> =
        if args.no_tools { Box::new(NoTools) } else { Box::new(WorkspaceTools::new(dir.to_path_buf())) };
    let provider = agent.provider.as_ref();
    let mut out = std::io::stdout();
    let first = conv.messages.len() - 1;
    let (context, passages) = agent::prompt::workspace_context_with(dir, args.version.as_deref(), &args.message);
    for p in &passages {
        eprintln!("[context: {}]", p.place());
    }
    let result = agent.turn(&mut conv, tools.as_ref(), &context, &Cancel::new(), &mut |ev| match ev {
        AgentEvent::Text(t) => {
            let _ = out.write_all(t.as_bytes());
            let _ = out.flush();
        }
        AgentEvent::ToolResult { name, is_error, text, .. } => {
            let first = text.lines().next().unwrap_or("");
            eprintln!("\n[{} {name}: {first}]", if is_error { "✗" } else { "✓" });
        }
        AgentEvent::Retrying { attempt, wait, reason } => {
            eprintln!("[retry {attempt} in {}: {reason}]", humantime::format_duration(round(wait)));
        }
        _ => {}
    });
    println!();
    let cost = conv.cost_usd.map(|c| format!(", ${c:.4}")).unwrap_or_default();
    eprintln!("[{}: {} in, {} out{cost}]", provider.describe(), conv.usage.input_tokens, conv.usage.output_tokens);
    if let Some(p) = &conv.path {
        eprintln!("[saved in {}]", p.display());
    }
    if let Err(e) = result {
        eprintln!("rung chat: {e}");
        return Ok(exit::INTERNAL);
    }
    let reply = propose::last_reply(&conv.messages[first.min(conv.messages.len())..]);
    if !args.propose {
        if propose::proposal_code(&reply).is_some() {
            eprintln!(
                "[the reply has code and nothing was written: `rung chat --propose{}` writes it as a new version]",
                args.version.as_ref().map(|v| format!(" --version {v}")).unwrap_or_default()
            );
        }
        return Ok(exit::OK);
    }
    let parent = propose::parent_for(dir, args.version.as_deref());
    let record = propose::Record::of_turn(&conv, agent.system_with(&context), args.message.clone(), reply.clone());
    match propose::propose(dir, parent.as_deref(), &reply, record) {
        Ok(Some(p)) => {
            if !p.same_as.is_empty() {
                eprintln!("[warning: {} has the same source as {}]", p.id, p.same_as.join(", "));
            }
            eprintln!(
                "[proposed {} ({}){}: `rung check {}` climbs its rungs]",
                p.id,
                p.path.display(),
                p.parent.as_ref().map(|p| format!(", made from {p}")).unwrap_or_default(),
                p.id
            );
            Ok(exit::OK)
        }
        Ok(None) => {
            eprintln!("[the reply has no code block: nothing proposed]");
            Ok(exit::OK)
        }
        Err(e) => {
            eprintln!("rung chat: the reply's code was not written as a version: {e}");
            Ok(exit::INTERNAL)
        }
    }
}

fn round(d: std::time::Duration) -> std::time::Duration {
    std::time::Duration::from_millis(d.as_millis() as u64)
}
