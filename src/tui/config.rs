//! The TUI's settings and keymap: `config.default.toml`, embedded, with the user's
//! `~/.config/rung/config.toml` (or `$XDG_CONFIG_HOME/rung/config.toml`) laid over it. A file
//! that does not parse, or names an action, a key or a theme that does not exist, is reported with
//! its file:line:col and key, and the defaults are used instead: the TUI still starts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use rung_core::diag::{Diagnostic, Pos};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use toml::Spanned;

use super::action::{Action, Keymap};
use super::theme::Theme;

pub const DEFAULT_TOML: &str = include_str!("config.default.toml");

/// The settings the TUI runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub keymap: Keymap,
    pub theme: Theme,
    /// The syntax theme of listings (for syntect), by name.
    pub syntax_theme: String,
    pub tick: Duration,
    pub mouse: bool,
    /// The user's file, when there is one.
    pub path: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    settings: SettingsFile,
    #[serde(default)]
    keys: BTreeMap<Spanned<String>, Vec<Spanned<String>>>,
    /// `[agent]` is the agent's own (`rung_agent::config` reads it when the chat opens): a
    /// mistake there must not cost the user their keys and theme.
    #[serde(default, rename = "agent")]
    _agent: Option<toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsFile {
    theme: Option<Spanned<String>>,
    syntax_theme: Option<Spanned<String>>,
    tick_ms: Option<Spanned<u64>>,
    mouse: Option<bool>,
}

/// The user's config file: `$XDG_CONFIG_HOME/rung/config.toml`, else `~/.config/rung/config.toml`
/// (the file the agent's table is read from too).
pub use rung_agent::config::user_path;

impl Default for Config {
    fn default() -> Config {
        let file: File = toml::from_str(DEFAULT_TOML).expect("the embedded config parses");
        apply(Config::bare(), &file, DEFAULT_TOML, Path::new("config.default.toml"))
            .expect("the embedded config is valid")
    }
}

impl Config {
    fn bare() -> Config {
        Config {
            keymap: Keymap::empty(),
            theme: Theme::default(),
            syntax_theme: String::new(),
            tick: Duration::from_millis(100),
            mouse: true,
            path: None,
        }
    }

    /// The defaults with the user's file (when it exists) laid over them; a bad file gives the
    /// defaults and the diagnostic that says why. `theme` (from `--theme`) wins over the file.
    pub fn load(path: Option<&Path>, theme: Option<&str>) -> (Config, Option<Diagnostic>) {
        let mut config = Config::default();
        let mut problem = None;
        if let Some(path) = path {
            match std::fs::read_to_string(path) {
                Ok(text) => match deserialize::<File>(&text, path).and_then(|f| apply(config.clone(), &f, &text, path))
                {
                    Ok(c) => config = Config { path: Some(path.to_path_buf()), ..c },
                    Err(d) => problem = Some(*d),
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => problem = Some(Diagnostic::error(path, Pos::WHOLE_FILE, format!("cannot read it: {e}"))),
            }
        }
        if let Some(name) = theme {
            match Theme::named(name) {
                Ok(t) => {
                    config.syntax_theme = t.syntax.clone();
                    config.theme = t;
                }
                // A bad flag is said on the bottom line like a bad file; the file's theme stays.
                Err(e) => problem = problem.or(Some(Diagnostic::error("--theme", Pos::WHOLE_FILE, e))),
            }
        }
        (config, problem)
    }
}

/// What the user sees when their file is not used.
pub fn problem_line(d: &Diagnostic) -> String {
    let key = d.key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default();
    let help = d.help.as_ref().map(|h| format!(" ({h})")).unwrap_or_default();
    format!("{}: {key}{}{help}; using the default settings and keys", d.location(), d.message)
}

/// Lays `file` over `config`, checking every name in it.
fn apply(mut config: Config, file: &File, text: &str, path: &Path) -> Result<Config, Box<Diagnostic>> {
    let at = |span: std::ops::Range<usize>| Pos::of_offset(text, span.start);
    let bad = |span, key: String, message: String, help: &str| {
        Box::new(Diagnostic::error(path, at(span), message).with_key(key).with_help(help))
    };
    let s = &file.settings;
    if let Some(name) = &s.theme {
        let theme = Theme::named(name.get_ref())
            .map_err(|e| bad(name.span(), "settings.theme".into(), e, "name one of the embedded themes"))?;
        config.syntax_theme = theme.syntax.clone();
        config.theme = theme;
    }
    if let Some(name) = &s.syntax_theme {
        super::theme::syntax(name.get_ref()).map_err(|e| {
            bad(name.span(), "settings.syntax_theme".into(), e, "name one of the embedded syntax themes")
        })?;
        config.syntax_theme = name.get_ref().clone();
    }
    if let Some(ms) = &s.tick_ms {
        if !(10..=5000).contains(ms.get_ref()) {
            return Err(bad(
                ms.span(),
                "settings.tick_ms".into(),
                format!("{} ms is out of range", ms.get_ref()),
                "give 10 to 5000",
            ));
        }
        config.tick = Duration::from_millis(*ms.get_ref());
    }
    if let Some(m) = s.mouse {
        config.mouse = m;
    }
    let mut bound: BTreeMap<Action, Vec<KeyEvent>> = config.keymap.by_action_keys().into_iter().collect();
    let mut named = Vec::new();
    for (name, keys) in &file.keys {
        let key_path = format!("keys.{}", name.get_ref());
        let action: Action = name.get_ref().parse().map_err(|e: super::action::UnknownAction| {
            bad(name.span(), key_path.clone(), e.to_string(), "use an action's name, as `?` lists them")
        })?;
        let keys = keys
            .iter()
            .map(|k| {
                parse_key(k.get_ref()).map_err(|e| {
                    bad(
                        k.span(),
                        key_path.clone(),
                        e,
                        "write keys as \"a\", \"Ctrl-z\", \"Enter\", \"Shift-Tab\", \"F5\"",
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        bound.insert(action, keys);
        named.push(action);
    }
    // A key the file gives to one action is taken from the defaults of the others: the user's
    // binding wins, rather than whichever action happens to be listed first.
    let taken: Vec<_> = named.iter().flat_map(|a| bound[a].iter().map(super::action::normalise)).collect();
    for (_, keys) in bound.iter_mut().filter(|(a, _)| !named.contains(a)) {
        keys.retain(|k| !taken.contains(&super::action::normalise(k)));
    }
    config.keymap = Keymap::from_bindings(Action::ALL.iter().filter_map(|a| Some((*a, bound.get(a)?.clone()))));
    Ok(config)
}

/// Parses TOML into `T`, or one diagnostic with the file, line, column and key path.
pub fn deserialize<T: DeserializeOwned>(text: &str, path: &Path) -> Result<T, Box<Diagnostic>> {
    rung_core::tomlfile::deserialize_toml(text, path, "see the TOML syntax at toml.io", |_| None)
}

/// `a`, `?`, `Ctrl-z`, `Alt-x`, `Shift-Tab`, `Enter`, `F5`...
pub fn parse_key(s: &str) -> Result<KeyEvent, String> {
    let mut mods = KeyModifiers::NONE;
    let mut rest = s;
    // A lone `-` or `+` is the key itself, not a separator.
    while rest.len() > 1 {
        let Some((m, tail)) = rest.split_once('-') else { break };
        if tail.is_empty() {
            break;
        }
        match m.to_ascii_lowercase().as_str() {
            "ctrl" | "c" => mods |= KeyModifiers::CONTROL,
            "alt" | "m" => mods |= KeyModifiers::ALT,
            "shift" | "s" => mods |= KeyModifiers::SHIFT,
            _ => return Err(format!("`{m}` in `{s}` is not a modifier (Ctrl, Alt, Shift)")),
        }
        rest = tail;
    }
    let mut chars = rest.chars();
    let code = match (chars.next(), chars.next()) {
        (Some(c), None) => KeyCode::Char(if mods.contains(KeyModifiers::CONTROL) { c.to_ascii_lowercase() } else { c }),
        _ => match rest.to_ascii_lowercase().as_str() {
            "enter" | "return" => KeyCode::Enter,
            "esc" | "escape" => KeyCode::Esc,
            "tab" if mods.contains(KeyModifiers::SHIFT) => {
                mods -= KeyModifiers::SHIFT;
                KeyCode::BackTab
            }
            "tab" => KeyCode::Tab,
            "backtab" => KeyCode::BackTab,
            "space" => KeyCode::Char(' '),
            "backspace" => KeyCode::Backspace,
            "delete" | "del" => KeyCode::Delete,
            "insert" => KeyCode::Insert,
            "up" => KeyCode::Up,
            "down" => KeyCode::Down,
            "left" => KeyCode::Left,
            "right" => KeyCode::Right,
            "pageup" => KeyCode::PageUp,
            "pagedown" => KeyCode::PageDown,
            "home" => KeyCode::Home,
            "end" => KeyCode::End,
            f if f.starts_with('f') && f[1..].parse::<u8>().is_ok_and(|n| (1..=12).contains(&n)) => {
                KeyCode::F(f[1..].parse().expect("checked"))
            }
            _ => return Err(format!("`{s}` is not a key")),
        },
    };
    Ok(KeyEvent::new(code, mods))
}
