//! API keys. A key comes from an environment variable or from a keyring command's standard
//! output (`secret-tool lookup ...`, `pass show ...`), never from a file rung reads or writes.
//! [`Secret`] cannot be printed: its `Debug` says `[redacted]` and it has no `Display`, and
//! every text that came from a server passes through [`Secret::redact`] before it is shown or
//! saved, because servers do echo keys back in their error bodies.

use std::process::{Command, Stdio};

use super::AgentError;

/// What replaces a key in any text.
pub const REDACTED: &str = "[redacted]";

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({REDACTED})")
    }
}

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The key itself, for the one header that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the key replaced by `[redacted]`.
    pub fn redact(&self, text: &str) -> String {
        if self.0.is_empty() { text.to_string() } else { text.replace(&self.0, REDACTED) }
    }
}

/// `text` with the values of the environment's secret-looking variables (names holding `KEY`,
/// `TOKEN`, `SECRET` or `PASSWORD`, values of 8 characters or more) taken out: the last guard
/// before anything is saved, for keys rung was never told about (an external command's).
pub fn redact_known(text: &str) -> String {
    let mut out = text.to_string();
    for (name, value) in std::env::vars_os() {
        let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else { continue };
        let upper = name.to_ascii_uppercase();
        let secretish = ["KEY", "TOKEN", "SECRET", "PASSWORD"].iter().any(|w| upper.contains(w));
        if secretish && value.trim().len() >= 8 && out.contains(value.trim()) {
            out = out.replace(value.trim(), REDACTED);
        }
    }
    out
}

/// Where a provider's key comes from, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    Env(String),
    Command(Vec<String>),
    /// Servers that need no key (a local llama.cpp or Ollama).
    None,
}

impl KeySource {
    /// How to name the source in a message: `$OPENAI_API_KEY`, `` `pass show openai` ``.
    pub fn describe(&self) -> String {
        match self {
            KeySource::Env(v) => format!("${v}"),
            KeySource::Command(argv) => format!("`{}`", argv.join(" ")),
            KeySource::None => "the provider's configuration (no key is configured)".into(),
        }
    }

    /// Reads the key. A missing variable or a failing command is an error that says how to
    /// provide one; the command's output is never quoted, since it may hold the key.
    pub fn resolve(&self, provider: &str) -> Result<Option<Secret>, AgentError> {
        match self {
            KeySource::None => Ok(None),
            KeySource::Env(var) => match std::env::var(var) {
                Ok(v) if !v.trim().is_empty() => Ok(Some(Secret(v.trim().to_string()))),
                _ => Err(AgentError::MissingKey {
                    provider: provider.into(),
                    detail: format!(
                        "the environment variable {var} is not set; export it, or set api_key_env or \
                         api_key_command in [agent.providers.{provider}]"
                    ),
                }),
            },
            KeySource::Command(argv) => {
                let missing =
                    || AgentError::MissingKey { provider: provider.into(), detail: "api_key_command is empty".into() };
                let (prog, args) = argv.split_first().ok_or_else(missing)?;
                let out =
                    Command::new(prog).args(args).stdin(Stdio::null()).stderr(Stdio::null()).output().map_err(|e| {
                        AgentError::MissingKey {
                            provider: provider.into(),
                            detail: format!("the key command `{}` could not start: {e}", argv.join(" ")),
                        }
                    })?;
                let key = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if !out.status.success() || key.is_empty() {
                    return Err(AgentError::MissingKey {
                        provider: provider.into(),
                        detail: format!(
                            "the key command `{}` {} (its output is not shown)",
                            argv.join(" "),
                            if out.status.success() {
                                "printed nothing".to_string()
                            } else {
                                format!("failed ({})", out.status)
                            }
                        ),
                    });
                }
                Ok(Some(Secret(key)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("sk-unit-SECRET-42");
        assert_eq!(format!("{s:?}"), "Secret([redacted])");
        assert_eq!(
            s.redact("bad key sk-unit-SECRET-42, again sk-unit-SECRET-42"),
            "bad key [redacted], again [redacted]"
        );
    }

    #[test]
    fn key_command_is_read_and_its_failure_not_quoted() {
        let ok = KeySource::Command(vec!["sh".into(), "-c".into(), "echo ' sk-from-cmd '".into()]);
        assert_eq!(ok.resolve("p").unwrap().unwrap().expose(), "sk-from-cmd");
        let bad = KeySource::Command(vec!["sh".into(), "-c".into(), "echo sk-lea\"\"ky; exit 3".into()]);
        let e = bad.resolve("p").unwrap_err().to_string();
        assert!(e.contains("failed") && !e.contains("sk-leaky"), "{e}");
        let unset = KeySource::Env("RUNG_TEST_SURELY_UNSET_VAR".into()).resolve("p").unwrap_err().to_string();
        assert!(unset.contains("RUNG_TEST_SURELY_UNSET_VAR is not set"), "{unset}");
    }
}
