//! ptxas: errors and warnings (`ptxas kernel.ptx, line 35; error   : ...`, `ptxas fatal   : ...`)
//! and the resource report of `-v` (registers, barriers, shared memory, stack, spills).

use std::sync::LazyLock;

use regex::Regex;

use super::{OutputParser, ParseContext};
use crate::diag::{Diagnostic, Pos, Severity};
pub use crate::model::build::KernelResources;

static LOCATED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^ptxas (?P<file>.+?), line (?P<line>\d+); (?P<sev>error|warning|info)\s*: (?P<msg>.*)$")
        .expect("static regex")
});
static UNLOCATED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^ptxas (?P<sev>fatal|error|warning)\s*: (?P<msg>.*)$").expect("static regex"));

static SPILL_IN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"spilled to local memory in function '(?P<kernel>[^']+)'").expect("static regex"));

pub struct PtxasOutput;

impl OutputParser for PtxasOutput {
    fn tool(&self) -> &'static str {
        "ptxas"
    }

    fn parse(&self, text: &str, ctx: &ParseContext) -> Vec<Diagnostic> {
        let mut out = Vec::new();
        let mut any_located_error = false;
        for l in text.lines() {
            if let Some(c) = LOCATED.captures(l) {
                let sev = match &c["sev"] {
                    "error" => Severity::Error,
                    "warning" => Severity::Warning,
                    _ => continue,
                };
                any_located_error |= sev == Severity::Error;
                let printed = &c["file"];
                let ptx_line: u32 = c["line"].parse().unwrap_or(0);
                let msg = c["msg"].trim();
                // A PTX file generated from the version: report at the source line its `.loc`
                // names, and say which PTX line it was.
                let mapped = printed
                    .ends_with(".ptx")
                    .then(|| ctx.ptx_map(printed))
                    .flatten()
                    .and_then(|m| m.source_of(ptx_line))
                    .map(|(f, line, col)| (ctx.user_path(f), line, col));
                let mut d = match mapped {
                    Some((file, line, col)) => {
                        let mut d = Diagnostic::new(sev, file, Pos::new(line, col), format!("ptxas: {msg}"));
                        d.help = Some(format!(
                            "in the generated PTX at line {ptx_line} (inline asm or code from this line)"
                        ));
                        d
                    }
                    None => {
                        // nvcc's own temporary PTX with no map: the version, as a whole.
                        let mapped_prefix = ctx.path_map.iter().any(|(p, _)| printed.starts_with(p.as_str()));
                        let temporary = printed.contains("tmpxft")
                            || (!mapped_prefix && std::path::Path::new(printed).starts_with(std::env::temp_dir()));
                        if temporary {
                            Diagnostic::new(sev, &ctx.version_file, Pos::WHOLE_FILE, format!("ptxas: {msg}"))
                        } else {
                            Diagnostic::new(sev, ctx.user_path(printed), Pos::new(ptx_line, 0), format!("ptxas: {msg}"))
                        }
                    }
                };
                hint(&mut d, msg);
                d.tool_text = Some(l.to_string());
                out.push(d);
            } else if let Some(c) = UNLOCATED.captures(l) {
                let msg = c["msg"].trim();
                // "Ptx assembly aborted due to errors" only restates the located errors.
                if any_located_error && msg.starts_with("Ptx assembly aborted") {
                    continue;
                }
                let sev = if &c["sev"] == "warning" { Severity::Warning } else { Severity::Error };
                // A spill names the kernel; the version's line comes from its entry in the PTX.
                let pos = SPILL_IN
                    .captures(msg)
                    .and_then(|k| ctx.ptx.values().find_map(|m| m.entry_line(&k["kernel"])))
                    .map_or(Pos::WHOLE_FILE, |(line, col)| Pos::new(line, col));
                let mut d = Diagnostic::new(sev, &ctx.version_file, pos, format!("ptxas: {msg}"));
                hint(&mut d, msg);
                d.tool_text = Some(l.to_string());
                out.push(d);
            }
        }
        out
    }
}

fn hint(d: &mut Diagnostic, msg: &str) {
    if msg.contains("not supported on .target 'sm_90'") && (msg.contains("wgmma") || msg.contains("setmaxnreg")) {
        d.help = Some(format!(
            "{}wgmma and setmaxnreg need sm_90a: remove `arch = \"sm_90\"` from [build] in rung.toml (rung picks sm_90a when a version uses them) or set it to \"sm_90a\"",
            d.help.as_ref().map(|h| format!("{h}; ")).unwrap_or_default()
        ));
    } else if msg.contains("spill") {
        d.help = Some("registers spill to local memory: reduce live values, or raise the limit (__launch_bounds__, -maxrregcount)".into());
    }
}

static ENTRY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"Compiling entry function '(?P<name>[^']+)' for '(?P<arch>[^']+)'").expect("static regex")
});
static FRAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?P<stack>\d+) bytes stack frame, (?P<st>\d+) bytes spill stores, (?P<ld>\d+) bytes spill loads")
        .expect("static regex")
});
static USED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"Used (?P<regs>\d+) registers").expect("static regex"));
static BARRIERS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"used (?P<n>\d+) barriers").expect("static regex"));
static SMEM: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?P<n>\d+) bytes smem").expect("static regex"));
static CMEM0: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?P<n>\d+) bytes cmem\[0\]").expect("static regex"));

/// Parses every kernel's resources from ptxas `-v` output (it goes to stderr).
pub fn parse_resources(text: &str) -> Vec<KernelResources> {
    let mut out: Vec<KernelResources> = Vec::new();
    let num = |c: &regex::Captures, k: &str| c[k].parse::<u32>().unwrap_or(0);
    for l in text.lines() {
        if let Some(c) = ENTRY.captures(l) {
            out.push(KernelResources {
                name: c["name"].to_string(),
                arch: c["arch"].to_string(),
                ..Default::default()
            });
            continue;
        }
        let Some(k) = out.last_mut() else { continue };
        if let Some(c) = FRAME.captures(l) {
            k.stack_frame_bytes = num(&c, "stack");
            k.spill_store_bytes = num(&c, "st");
            k.spill_load_bytes = num(&c, "ld");
        }
        if let Some(c) = USED.captures(l) {
            k.registers = num(&c, "regs");
            if let Some(b) = BARRIERS.captures(l) {
                k.barriers = num(&b, "n");
            }
            if let Some(s) = SMEM.captures(l) {
                k.shared_bytes = num(&s, "n");
            }
            if let Some(s) = CMEM0.captures(l) {
                k.cmem0_bytes = Some(num(&s, "n"));
            }
        }
    }
    out
}
