//! Diagnostics for people: a file, a position, what is wrong and what to do about it.
//!
//! Every error that a user can fix (a bad rung.toml, a launch header, a kernel signature that
//! does not match the problem, later a compiler message) becomes a [`Diagnostic`]. Positions are
//! 1-based lines and columns in the user's own file, never in a temporary copy.

use std::fmt;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Note,
    Warning,
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Note => "note",
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Diagnostic {
    /// The user's file, relative to the workspace root when it lies inside it.
    pub file: PathBuf,
    /// 1-based line; 0 when the problem concerns the whole file.
    pub line: u32,
    /// 1-based column in characters; 0 when unknown.
    pub column: u32,
    pub severity: Severity,
    pub message: String,
    /// For configuration files: the key path, e.g. `inputs[1].dtype`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// What to do about it, when rung knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
    /// The producing tool's own text, verbatim, when the diagnostic came from a tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_text: Option<String>,
}

impl Diagnostic {
    pub fn error(file: impl Into<PathBuf>, pos: Pos, message: impl Into<String>) -> Self {
        Self::new(Severity::Error, file, pos, message)
    }

    pub fn warning(file: impl Into<PathBuf>, pos: Pos, message: impl Into<String>) -> Self {
        Self::new(Severity::Warning, file, pos, message)
    }

    pub fn new(severity: Severity, file: impl Into<PathBuf>, pos: Pos, message: impl Into<String>) -> Self {
        Diagnostic {
            file: file.into(),
            line: pos.line,
            column: pos.column,
            severity,
            message: message.into(),
            key: None,
            help: None,
            tool_text: None,
        }
    }

    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// `file:line:col` as editors and terminals recognise it.
    pub fn location(&self) -> String {
        match (self.line, self.column) {
            (0, _) => self.file.display().to_string(),
            (l, 0) => format!("{}:{l}", self.file.display()),
            (l, c) => format!("{}:{l}:{c}", self.file.display()),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: ", self.location(), self.severity)?;
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        f.write_str(&self.message)?;
        if let Some(help) = &self.help {
            write!(f, "\n  help: {help}")?;
        }
        Ok(())
    }
}

/// A 1-based position in a text file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: u32,
    pub column: u32,
}

impl Pos {
    /// The same column on another line.
    pub fn with_line(mut self, line: u32) -> Pos {
        self.line = line;
        self
    }

    pub const WHOLE_FILE: Pos = Pos { line: 0, column: 0 };

    pub fn new(line: u32, column: u32) -> Self {
        Pos { line, column }
    }

    /// The position of a byte offset in `text` (columns count characters, not bytes).
    pub fn of_offset(text: &str, offset: usize) -> Pos {
        let offset = offset.min(text.len());
        let before = &text[..text.floor_char_boundary(offset)];
        let line = before.matches('\n').count() as u32 + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() as u32 + 1;
        Pos { line, column }
    }
}

/// Renders a list of diagnostics, one block each, for a terminal.
pub fn render(diags: &[Diagnostic]) -> String {
    diags.iter().map(|d| format!("{d}\n")).collect()
}

/// Makes `file` relative to `root` when it lies inside it, for stable messages and JSON.
pub fn relative_to(root: &Path, file: &Path) -> PathBuf {
    file.strip_prefix(root).map(Path::to_path_buf).unwrap_or_else(|_| file.to_path_buf())
}

/// The last non-empty line of a tool's output, trimmed: its own one-line reason (ssh's
/// `Connection refused`, srun's `DUE TO TIME LIMIT`).
pub fn last_line(text: &str) -> String {
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_lines_and_columns() {
        let text = "a = 1\nbé = \"x\"\n";
        assert_eq!(Pos::of_offset(text, 0), Pos::new(1, 1));
        assert_eq!(Pos::of_offset(text, 6), Pos::new(2, 1));
        // the `=` after a two-byte character is the 4th character of line 2
        assert_eq!(Pos::of_offset(text, 10), Pos::new(2, 4));
    }

    #[test]
    fn display_names_file_line_key_and_help() {
        let d = Diagnostic::error("rung.toml", Pos::new(3, 9), "unknown dtype")
            .with_key("inputs[0].dtype")
            .with_help("use f32");
        assert_eq!(d.to_string(), "rung.toml:3:9: error: inputs[0].dtype: unknown dtype\n  help: use f32");
    }
}
