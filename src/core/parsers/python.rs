//! Python tracebacks and syntax errors from a worker or the Triton compiler, placed at the
//! deepest frame that lies in the user's files.
//!
//! ```text
//!   File "/tmp/x/version.py", line 7
//!     def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr)
//!                                                                  ^
//! SyntaxError: expected ':'
//! ```

use std::sync::LazyLock;

use regex::Regex;

use super::{OutputParser, ParseContext};
use crate::diag::{Diagnostic, Pos};

static FRAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?$"#).expect("static regex")
});
static EXCEPTION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?P<type>[A-Za-z_][A-Za-z0-9_.]*(?:Error|Exception|Interrupt|Exit)):? ?(?P<msg>.*)$")
        .expect("static regex")
});

pub struct PythonTraceback;

impl OutputParser for PythonTraceback {
    fn tool(&self) -> &'static str {
        "python"
    }

    fn parse(&self, text: &str, ctx: &ParseContext) -> Vec<Diagnostic> {
        let lines: Vec<&str> = text.lines().collect();
        // The exception line: the last line that names an exception type, outside the frames.
        let Some(exc_idx) = lines.iter().rposition(|l| !l.starts_with(' ') && EXCEPTION.is_match(l)) else {
            return Vec::new();
        };
        let exc = EXCEPTION.captures(lines[exc_idx]).expect("matched above");
        let frames: Vec<(usize, regex::Captures)> =
            lines[..exc_idx].iter().enumerate().filter_map(|(i, l)| FRAME.captures(l).map(|c| (i, c))).collect();
        // The deepest frame in a user file (not <frozen ...>, <string> or site-packages).
        let user_frame = frames.iter().rev().find(|(_, c)| {
            let f = &c["file"];
            !f.starts_with('<') && !f.contains("site-packages") && !f.contains("/lib/python3")
        });
        let (file, pos) = match user_frame {
            Some((i, c)) => {
                let line: u32 = c["line"].parse().unwrap_or(0);
                // SyntaxError: the caret under the echoed line gives the column (4-space indent).
                let column = lines
                    .get(i + 2)
                    .filter(|l| l.trim().chars().all(|ch| ch == '^') && !l.trim().is_empty())
                    .and_then(|l| l.find('^'))
                    .map_or(0, |c| (c as u32).saturating_sub(3));
                (ctx.user_path(&c["file"]), Pos::new(line, column))
            }
            None => (ctx.version_file.clone(), Pos::WHOLE_FILE),
        };
        let ty = &exc["type"];
        let msg = exc["msg"].trim();
        let mut d = Diagnostic::error(file, pos, if msg.is_empty() { ty.to_string() } else { format!("{ty}: {msg}") });
        if ty.ends_with("ModuleNotFoundError") || ty.ends_with("ImportError") {
            d.help = Some("install the module into rung's Python (see `rung doctor`), or fix the import".into());
        }
        // The traceback that leads to this exception: looked for before it, never after (a
        // garbled stderr with the exception line first once made this slice backwards).
        let start = lines[..=exc_idx].iter().position(|l| l.starts_with("Traceback") || FRAME.is_match(l)).unwrap_or(0);
        d.tool_text = Some(lines[start..=exc_idx].join("\n"));
        vec![d]
    }
}
