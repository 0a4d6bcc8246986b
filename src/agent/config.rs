//! The agent's configuration: the `[agent]` table of `~/.config/rung/config.toml`. Its own
//! serde type, so the user configuration file's loader can embed it as it is.
//!
//! ```toml
//! [agent]
//! provider = "local"                 # which entry of [agent.providers] to use
//! max_tool_rounds = 8
//!
//! [agent.providers.local]
//! kind = "openai"                    # openai | anthropic | command
//! base_url = "http://127.0.0.1:8080/v1"
//! model = "qwen2.5-coder"
//! api_key_env = "LOCAL_KEY"          # or api_key_command = ["pass", "show", "llm"]; neither: no key
//! timeout = "120s"                   # longest silence in a stream
//! retries = 3
//! price_input_per_mtok = 0.0
//! price_output_per_mtok = 0.0
//!
//! [agent.auto]                       # auto mode (`A` in the TUI) stops at the first reached
//! roofline_pct = 85                  # percent of the measured ceiling
//! speedup = 2.0                      # over the version it started from
//! max_versions = 5                   # proposals
//! max_tokens = 400000                # tokens in and out
//! ```
//!
//! `openai` and `anthropic` are predefined (api.openai.com with `$OPENAI_API_KEY`,
//! api.anthropic.com with `$ANTHROPIC_API_KEY`); an entry of the same name overrides fields.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::anthropic::Anthropic;
use super::command::CommandProvider;
use super::http::HttpOptions;
use super::openai::OpenAi;
use super::secrets::KeySource;
use super::{AgentError, DEFAULT_MAX_TOOL_ROUNDS, Prices, Provider};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Any OpenAI-compatible chat-completions endpoint: OpenAI, vLLM, Ollama, llama.cpp's
    /// server, OpenRouter, LM Studio.
    Openai,
    /// The Anthropic Messages API.
    Anthropic,
    /// An external command: the prompt on standard input, the reply on standard output.
    Command,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The provider to use (a key of `providers`); default: `openai` when `$OPENAI_API_KEY` is
    /// set, else `anthropic` when `$ANTHROPIC_API_KEY` is, else `openai`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Model replies per user message, tool rounds included (default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_rounds: Option<u32>,
    /// Replaces the built-in system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Auto mode's target in the TUI (`A`): `[agent.auto]` with `roofline_pct`, `speedup`,
    /// `max_versions`, `max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto: Option<super::auto::Target>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// Required for a new entry; a predefined one keeps its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ProviderKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The environment variable that holds the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// A command whose standard output is the key (a keyring's lookup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_command: Option<Vec<String>>,
    /// Only so that a key written here is refused with a clear message, not silently used.
    #[serde(default, skip_serializing)]
    pub api_key: Option<toml::Value>,
    /// For `kind = "command"`: the program and its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// The longest silence in a stream, e.g. `"120s"` (default 120 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Time to open a connection (default 15 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout: Option<String>,
    /// Retries on 429 and 5xx and on failed connections (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// US dollars per million input tokens, for the conversation's cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_input_per_mtok: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_output_per_mtok: Option<f64>,
}

/// Where the user's config file is (one file holds the agent's, the TUI's and the sandbox's
/// tables): rung-core's, so that the core reads `[sandbox]` from the same file.
pub use rung_core::userconfig::{default_path, default_path_in, user_path, user_path_in};

/// The whole file: the agent's table, and whatever else belongs to others.
#[derive(Deserialize)]
struct File {
    #[serde(default)]
    agent: AgentConfig,
    #[serde(flatten)]
    _rest: toml::Table,
}

impl AgentConfig {
    /// Reads `[agent]` from a TOML file; a missing file is the default configuration.
    pub fn load(path: &Path) -> Result<AgentConfig, AgentError> {
        match std::fs::read_to_string(path) {
            Ok(text) => AgentConfig::parse(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(AgentConfig::default()),
            Err(e) => Err(AgentError::Config(format!("{}: cannot read: {e}", path.display()))),
        }
    }

    /// [`AgentConfig::load`] of `path`; no path is the default configuration.
    pub fn load_or_default(path: Option<&Path>) -> Result<AgentConfig, AgentError> {
        path.map_or_else(|| Ok(AgentConfig::default()), AgentConfig::load)
    }

    /// Parses a whole configuration file's text; errors name the file, the line and column.
    pub fn parse(text: &str, path: &Path) -> Result<AgentConfig, AgentError> {
        let file: File = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start].matches('\n').count() + 1;
                    let col = s.start - text[..s.start].rfind('\n').map_or(0, |i| i + 1) + 1;
                    format!(":{line}:{col}")
                })
                .unwrap_or_default();
            AgentError::Config(format!("{}{at}: {}", path.display(), e.message()))
        })?;
        let cfg = file.agent;
        for (name, p) in &cfg.providers {
            if p.api_key.is_some() {
                return Err(AgentError::Config(format!(
                    "{}: [agent.providers.{name}] api_key: keys are not read from files; put the key in an \
                     environment variable and name it in api_key_env, or give a keyring command in api_key_command",
                    path.display()
                )));
            }
        }
        Ok(cfg)
    }

    fn predefined(name: &str) -> Option<ProviderConfig> {
        let (kind, url, env, model) = match name {
            "openai" => (ProviderKind::Openai, "https://api.openai.com/v1", "OPENAI_API_KEY", "gpt-4.1"),
            "anthropic" => {
                (ProviderKind::Anthropic, "https://api.anthropic.com", "ANTHROPIC_API_KEY", "claude-sonnet-4-5")
            }
            _ => return None,
        };
        Some(ProviderConfig {
            kind: Some(kind),
            base_url: Some(url.into()),
            model: Some(model.into()),
            api_key_env: Some(env.into()),
            ..Default::default()
        })
    }

    /// The provider's name: the argument, else `provider`, else by which key is set.
    pub fn provider_name(&self, choice: Option<&str>) -> String {
        if let Some(c) = choice.or(self.provider.as_deref()) {
            return c.to_string();
        }
        let set = |v: &str| std::env::var(v).is_ok_and(|s| !s.is_empty());
        if !set("OPENAI_API_KEY") && set("ANTHROPIC_API_KEY") { "anthropic".into() } else { "openai".into() }
    }

    /// The named provider's settings, a predefined one's overlaid by the file's.
    pub fn settings(&self, name: &str) -> Result<ProviderConfig, AgentError> {
        let base = AgentConfig::predefined(name);
        let own = self.providers.get(name).cloned();
        let merged = match (base, own) {
            (None, None) => {
                let known: Vec<String> = ["openai", "anthropic"]
                    .into_iter()
                    .map(String::from)
                    .chain(self.providers.keys().cloned())
                    .collect();
                return Err(AgentError::Config(format!(
                    "no provider `{name}`: the known ones are {}; add [agent.providers.{name}] to the configuration",
                    known.join(", ")
                )));
            }
            (Some(b), None) => b,
            (None, Some(o)) => o,
            (Some(b), Some(o)) => ProviderConfig {
                kind: o.kind.or(b.kind),
                base_url: o.base_url.or(b.base_url),
                model: o.model.or(b.model),
                // A key source of the file's replaces the predefined one entirely.
                api_key_env: if o.api_key_command.is_some() { o.api_key_env } else { o.api_key_env.or(b.api_key_env) },
                api_key_command: o.api_key_command,
                api_key: None,
                command: o.command,
                max_tokens: o.max_tokens,
                timeout: o.timeout,
                connect_timeout: o.connect_timeout,
                retries: o.retries,
                price_input_per_mtok: o.price_input_per_mtok,
                price_output_per_mtok: o.price_output_per_mtok,
            },
        };
        Ok(merged)
    }

    pub fn max_tool_rounds(&self) -> u32 {
        self.max_tool_rounds.unwrap_or(DEFAULT_MAX_TOOL_ROUNDS)
    }

    /// Builds the named provider (reading its key now), with `model` overriding the
    /// configured one.
    pub fn build(&self, name: &str, model: Option<&str>) -> Result<(Box<dyn Provider>, Option<Prices>), AgentError> {
        let s = self.settings(name)?;
        let bad = |what: &str| AgentError::Config(format!("[agent.providers.{name}] {what}"));
        let kind = s.kind.ok_or_else(|| bad("needs kind = \"openai\", \"anthropic\" or \"command\""))?;
        let duration = |key: &str, v: &Option<String>, default: Duration| -> Result<Duration, AgentError> {
            match v {
                None => Ok(default),
                Some(t) => humantime::parse_duration(t)
                    .map_err(|e| bad(&format!("{key} = {t:?}: {e} (write a duration such as \"120s\")"))),
            }
        };
        let opts = HttpOptions {
            idle_timeout: duration("timeout", &s.timeout, Duration::from_secs(120))?,
            connect_timeout: duration("connect_timeout", &s.connect_timeout, Duration::from_secs(15))?,
            retries: s.retries.unwrap_or(3),
            ..HttpOptions::default()
        };
        let prices = match (s.price_input_per_mtok, s.price_output_per_mtok) {
            (None, None) => None,
            (i, o) => Some(Prices { input_per_mtok: i.unwrap_or(0.0), output_per_mtok: o.unwrap_or(0.0) }),
        };
        let key_source = match (&s.api_key_env, &s.api_key_command) {
            (_, Some(cmd)) => KeySource::Command(cmd.clone()),
            (Some(env), None) => KeySource::Env(env.clone()),
            (None, None) => KeySource::None,
        };
        let model = model.map(String::from).or(s.model.clone());
        let provider: Box<dyn Provider> = match kind {
            ProviderKind::Command => {
                let argv = s
                    .command
                    .clone()
                    .filter(|c| !c.is_empty())
                    .ok_or_else(|| bad("kind = \"command\" needs command = [\"program\", \"arg\", ...]"))?;
                Box::new(CommandProvider::new(argv, model.unwrap_or_default(), opts.idle_timeout))
            }
            ProviderKind::Openai | ProviderKind::Anthropic => {
                let base_url = s.base_url.clone().ok_or_else(|| bad("needs base_url"))?;
                let model = model.ok_or_else(|| bad("needs model"))?;
                let key = key_source.resolve(name)?;
                let http = super::http::Endpoint { base_url, key, key_source, opts };
                if kind == ProviderKind::Openai {
                    Box::new(OpenAi::new(http, model, s.max_tokens))
                } else {
                    Box::new(Anthropic::new(http, model, s.max_tokens.unwrap_or(8192)))
                }
            }
        };
        Ok((provider, prices))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_reads_the_tuis_file_unless_rung_config_names_another() {
        assert_eq!(default_path_in(Some("/tmp/x.toml".into())), Some(std::path::PathBuf::from("/tmp/x.toml")));
        // Unset or empty: the one file the TUI reads too, whatever the platform's own config
        // folder is (on macOS dirs' would be ~/Library/Application Support).
        assert_eq!(default_path_in(None), user_path());
        assert_eq!(default_path_in(Some("".into())), user_path());
    }

    #[test]
    fn parses_with_other_tables_and_overlays_predefined() {
        let text = r#"
[keys]
quit = "q"

[agent]
provider = "local"

[agent.providers.local]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
model = "m"
price_input_per_mtok = 1.5

[agent.providers.anthropic]
model = "claude-other"
"#;
        let c = AgentConfig::parse(text, Path::new("c.toml")).unwrap();
        assert_eq!(c.provider_name(None), "local");
        let a = c.settings("anthropic").unwrap();
        assert_eq!(a.model.as_deref(), Some("claude-other"));
        assert_eq!(a.api_key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
        assert_eq!(a.kind, Some(ProviderKind::Anthropic));
        let (p, prices) = c.build("local", None).unwrap();
        assert_eq!(p.model(), "m");
        assert_eq!(prices.unwrap().input_per_mtok, 1.5);
    }

    #[test]
    fn errors_name_file_line_and_fix() {
        let e = AgentConfig::parse("[agent]\nprovidr = \"x\"\n", Path::new("/c.toml")).unwrap_err().to_string();
        assert!(e.starts_with("/c.toml:2:1: unknown field `providr`"), "{e}");
        let e = AgentConfig::parse("[agent.providers.x]\napi_key = \"sk-1\"\n", Path::new("/c.toml")).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("api_key_env") && !e.contains("sk-1"), "{e}");
        let c = AgentConfig::parse(
            "[agent.providers.x]\nkind = \"openai\"\nmodel = \"m\"\nbase_url = \"u\"\ntimeout = \"soon\"\n",
            Path::new("c"),
        )
        .unwrap();
        let e = c.build("x", None).err().unwrap().to_string();
        assert!(e.contains("timeout = \"soon\""), "{e}");
        let e = c.build("nope", None).err().unwrap().to_string();
        assert!(e.contains("no provider `nope`") && e.contains("openai, anthropic, x"), "{e}");
    }
}
