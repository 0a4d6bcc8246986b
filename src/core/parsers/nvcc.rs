//! nvcc's (and NVRTC's) EDG front end, `nvcc fatal`, the host preprocessor nvcc runs first
//! (GCC's format: a missing header, `#error`), nvlink and the host linker.
//!
//! ```text
//! kernel.cu(9): error: no operator "*" matches these operands
//!             operand types are: const Half2 * float
//!       return p[i] * s;
//!                   ^
//!           detected during:
//!             instantiation of "T load_scaled(...) [with T=Half2]" at line 16
//! ```
//! The echoed source line is indented by two spaces, so the caret's column is its index - 1.

use std::sync::LazyLock;

use regex::Regex;

use super::{OutputParser, ParseContext};
use crate::diag::{Diagnostic, Pos, Severity};

static HEADER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning|remark|note)(?: #(?P<code>[0-9]+(?:-D)?))?: (?P<msg>.*)$")
        .expect("static regex")
});
static FATAL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^nvcc (?:fatal|error)\s*: (?P<msg>.*)$").expect("static regex"));
static INSTANTIATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"instantiation of "(?P<what>.*)"(?: at line (?P<line>\d+)(?: of "?(?P<file>[^"]+)"?)?)?"#)
        .expect("static regex")
});

/// The CUDA C++ front end, as printed by nvcc and returned by `nvrtcGetProgramLog`.
pub struct NvccFrontend;

impl OutputParser for NvccFrontend {
    fn tool(&self) -> &'static str {
        "nvcc"
    }

    fn parse(&self, text: &str, ctx: &ParseContext) -> Vec<Diagnostic> {
        let lines: Vec<&str> = text.lines().collect();
        let mut out = Vec::new();
        let mut i = 0;
        while i < lines.len() {
            if let Some(c) = FATAL.captures(lines[i]) {
                let mut d = Diagnostic::error(&ctx.version_file, Pos::WHOLE_FILE, format!("nvcc: {}", &c["msg"]));
                d.tool_text = Some(lines[i].to_string());
                out.push(d);
                i += 1;
                continue;
            }
            let Some(c) = HEADER.captures(lines[i]) else {
                i += 1;
                continue;
            };
            // The block runs to the next header, a blank line, or the summary line.
            let start = i;
            i += 1;
            while i < lines.len()
                && !lines[i].trim().is_empty()
                && !HEADER.is_match(lines[i])
                && !lines[i].contains(" detected in the compilation of ")
            {
                i += 1;
            }
            let block = &lines[start..i];
            let caret = block.iter().position(|l| l.trim() == "^");
            let column = caret.map_or(0, |k| block[k].find('^').map_or(0, |c| c.saturating_sub(1) as u32));
            // Message continuation lines sit between the header and the echoed source line.
            let cont_end = caret.map_or(block.len(), |k| k.saturating_sub(1)).max(1);
            let mut message = c["msg"].trim().to_string();
            for l in &block[1..cont_end] {
                if l.trim_start().starts_with("detected during") {
                    break;
                }
                message.push_str("; ");
                message.push_str(l.trim());
            }
            let severity = match &c["sev"] {
                "error" | "catastrophic error" => Severity::Error,
                "warning" => Severity::Warning,
                _ => Severity::Note,
            };
            let file = ctx.user_path(&c["file"]);
            let line: u32 = c["line"].parse().unwrap_or(0);
            let mut d = Diagnostic::new(severity, file, Pos::new(line, column), message);
            if let Some(code) = c.name("code") {
                d.key = Some(format!("#{}", code.as_str()));
            }
            let chain: Vec<String> = block
                .iter()
                .filter_map(|l| INSTANTIATION.captures(l))
                .map(|ic| match ic.name("line") {
                    Some(l) => format!("line {}: {}", l.as_str(), &ic["what"]),
                    None => ic["what"].to_string(),
                })
                .collect();
            if !chain.is_empty() {
                d.help = Some(format!("instantiated from {}", chain.join(" ← ")));
            }
            d.tool_text = Some(block.join("\n"));
            out.push(d);
        }
        out
    }
}

static NVLINK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^nvlink (?P<sev>error|warning|fatal)\s*: (?P<msg>.*)$").expect("static regex"));
static UNDEFINED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"Undefined reference to '(?P<sym>[^']+)'").expect("static regex"));

/// The device linker: no positions, so diagnostics land on the version file as a whole.
pub struct NvlinkOutput;

impl OutputParser for NvlinkOutput {
    fn tool(&self) -> &'static str {
        "nvlink"
    }

    fn parse(&self, text: &str, ctx: &ParseContext) -> Vec<Diagnostic> {
        text.lines()
            .filter_map(|l| {
                let c = NVLINK.captures(l)?;
                let sev = if &c["sev"] == "warning" { Severity::Warning } else { Severity::Error };
                let mut msg = c["msg"].trim().to_string();
                // Drop the temporary object file name: it means nothing to the user.
                if let Some(i) = msg.find(" in '/tmp/") {
                    msg.truncate(i);
                }
                let mut d = Diagnostic::new(sev, &ctx.version_file, Pos::WHOLE_FILE, format!("nvlink: {msg}"));
                if let Some(u) = UNDEFINED.captures(l) {
                    d.help = Some(format!(
                        "`{}` is declared but defined nowhere in this build; define it in the version (or a header it includes)",
                        &u["sym"]
                    ));
                }
                d.tool_text = Some(l.to_string());
                Some(d)
            })
            .collect()
    }
}

static HOST_LD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:\S*/)?(?:ld|collect2)(?:\.\w+)?: (?:error: )?(?P<msg>.*)$").expect("static regex")
});

/// The host linker nvcc runs for `rung_run` shared objects (`/usr/bin/ld: cannot find -lX`).
pub struct HostLinker;

impl OutputParser for HostLinker {
    fn tool(&self) -> &'static str {
        "ld"
    }

    fn parse(&self, text: &str, ctx: &ParseContext) -> Vec<Diagnostic> {
        text.lines()
            .filter_map(|l| {
                let c = HOST_LD.captures(l)?;
                let msg = c["msg"].trim();
                // collect2's "ld returned 1 exit status" only restates the lines before it.
                if msg.starts_with("ld returned") {
                    return None;
                }
                let mut d = Diagnostic::error(&ctx.version_file, Pos::WHOLE_FILE, format!("ld: {msg}"));
                if let Some(lib) = msg.strip_prefix("cannot find -l").and_then(|r| r.split(':').next()) {
                    d.help = Some(format!(
                        "the linker finds no lib{lib}: add its folder with `flags = [\"-L/path/to/lib\"]` under [build] in rung.toml"
                    ));
                }
                d.tool_text = Some(l.to_string());
                Some(d)
            })
            .collect()
    }
}

static HOST_CC: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>fatal error|error|warning|note): (?P<msg>.*)$")
        .expect("static regex")
});

/// The host compiler's preprocessor, which nvcc runs before its own front end: a header it
/// cannot find, `#error` and `#warning` come in GCC's format.
///
/// ```text
/// kernel.cu:2:10: fatal error: tiles.cuh: No such file or directory
///     2 | #include "tiles.cuh"
///       |          ^~~~~~~~~~~
/// compilation terminated.
/// ```
pub struct HostCompiler;

impl OutputParser for HostCompiler {
    fn tool(&self) -> &'static str {
        "gcc"
    }

    fn parse(&self, text: &str, ctx: &ParseContext) -> Vec<Diagnostic> {
        let lines: Vec<&str> = text.lines().collect();
        let mut out = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            let Some(c) = HOST_CC.captures(l) else { continue };
            let severity = match &c["sev"] {
                "fatal error" | "error" => Severity::Error,
                "warning" => Severity::Warning,
                _ => Severity::Note,
            };
            let line: u32 = c["line"].parse().unwrap_or(0);
            let column: u32 = c.name("col").and_then(|m| m.as_str().parse().ok()).unwrap_or(0);
            let message = c["msg"].trim().trim_end_matches(" [-Wcpp]").to_string();
            let mut d = Diagnostic::new(severity, ctx.user_path(&c["file"]), Pos::new(line, column), message);
            if c["msg"].ends_with(": No such file or directory") {
                d.help = Some(
                    "nvcc looks beside the file and in -I folders: add the folder with `flags = [\"-I...\"]` under [build] in rung.toml (relative to the workspace root)"
                        .into(),
                );
            }
            // The echoed source and its caret: GCC prefixes both with `|`.
            let echo = lines[i + 1..].iter().take_while(|e| {
                e.trim_start().split_once('|').is_some_and(|(n, _)| n.trim().chars().all(|ch| ch.is_ascii_digit()))
            });
            d.tool_text = Some(std::iter::once(*l).chain(echo.copied()).collect::<Vec<_>>().join("\n"));
            out.push(d);
        }
        out
    }
}
