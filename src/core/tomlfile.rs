//! TOML files read with diagnostics: a bad file is reported with its file, line, column and key
//! path, and the fix when rung knows it (rung.toml, the TUI's config and themes).

use std::path::Path;

use crate::model::diag::{Diagnostic, Pos};

/// Parses TOML into `T`, or one diagnostic with the file, line, column and key path.
/// `syntax_help` is the help for text that is not TOML; `help` gives one for a value that does
/// not fit, from the message (`unknown field ...`), or None.
pub fn deserialize_toml<T: serde::de::DeserializeOwned>(
    text: &str,
    path: &Path,
    syntax_help: &str,
    help: impl Fn(&str) -> Option<&'static str>,
) -> Result<T, Box<Diagnostic>> {
    let de = toml::Deserializer::parse(text).map_err(|e| {
        let pos = e.span().map_or(Pos::WHOLE_FILE, |s| Pos::of_offset(text, s.start));
        Box::new(
            Diagnostic::error(path, pos, format!("invalid TOML: {}", e.message().trim_end())).with_help(syntax_help),
        )
    })?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        let pos = inner.span().map_or(Pos::WHOLE_FILE, |s| Pos::of_offset(text, s.start));
        let message = inner.message().trim_end().to_string();
        let mut d = Diagnostic::error(path, pos, message.clone());
        if let Some(h) = help(&message) {
            d = d.with_help(h);
        }
        Box::new(if key == "." { d } else { d.with_key(key) })
    })
}
