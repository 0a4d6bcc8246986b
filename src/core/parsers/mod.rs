//! Parsers of other tools' output, one per tool behind one trait. Each turns the tool's text into
//! [`Diagnostic`]s located in the user's own files: temporary paths are mapped back to the
//! version, and PTX line numbers are mapped back to source lines through the PTX's `.loc`
//! directives (so an error in inline PTX lands on the `asm(...)` line of the version).
//!
//! Every parser is tested on real output captured from its tool (`tests/fixtures/build/`).

mod cuobjdump;
mod nvcc;
mod ptxas;
mod python;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use cuobjdump::{combine, parse_resource_usage};
pub use nvcc::{HostCompiler, HostLinker, NvccFrontend, NvlinkOutput};
pub use ptxas::{KernelResources, PtxasOutput, parse_resources};
pub use python::PythonTraceback;

use crate::diag::Diagnostic;

/// What a parser needs to put diagnostics in the user's files.
#[derive(Debug, Clone, Default)]
pub struct ParseContext {
    /// The version file, relative to the workspace root: where unplaceable diagnostics go.
    pub version_file: PathBuf,
    /// Path prefixes as the tool printed them → the user's path (e.g. a temporary build folder
    /// → `versions/`). Longest prefix wins.
    pub path_map: Vec<(String, PathBuf)>,
    /// PTX files the tool may cite, by the name it cites them with, for `.loc` mapping. Any
    /// `*.ptx` path not found here is matched by file name, then falls back to the only entry.
    pub ptx: BTreeMap<String, PtxLineMap>,
}

impl ParseContext {
    pub fn for_version(version_file: impl Into<PathBuf>) -> Self {
        ParseContext { version_file: version_file.into(), ..Default::default() }
    }

    /// Maps a path as printed by a tool to the user's path.
    pub fn user_path(&self, printed: &str) -> PathBuf {
        let best = self
            .path_map
            .iter()
            .filter(|(prefix, _)| printed.starts_with(prefix.as_str()))
            .max_by_key(|(p, _)| p.len());
        match best {
            Some((prefix, to)) => {
                let rest = printed[prefix.len()..].trim_start_matches('/');
                if rest.is_empty() { to.clone() } else { to.join(rest) }
            }
            None => PathBuf::from(printed),
        }
    }

    fn ptx_map(&self, printed: &str) -> Option<&PtxLineMap> {
        if let Some(m) = self.ptx.get(printed) {
            return Some(m);
        }
        let name = Path::new(printed).file_name()?.to_string_lossy();
        self.ptx
            .iter()
            .find(|(k, _)| Path::new(k).file_name().is_some_and(|n| n.to_string_lossy() == name))
            .map(|(_, v)| v)
            .or_else(|| if self.ptx.len() == 1 { self.ptx.values().next() } else { None })
    }
}

/// One tool's output format.
pub trait OutputParser {
    /// The tool's name, as recorded with each diagnostic's source.
    fn tool(&self) -> &'static str;
    fn parse(&self, text: &str, ctx: &ParseContext) -> Vec<Diagnostic>;
}

/// Source positions of PTX lines, from `.loc FILE LINE COL` and `.file N "path"` directives.
#[derive(Debug, Clone, Default)]
pub struct PtxLineMap {
    /// For each 1-based PTX line, the latest `.loc` at or before it: (file index, line, column).
    locs: Vec<Option<(u32, u32, u32)>>,
    files: BTreeMap<u32, String>,
    /// Kernel name → index of its `.entry` line.
    entries: BTreeMap<String, usize>,
}

impl PtxLineMap {
    pub fn new(ptx: &str) -> Self {
        let mut locs = Vec::new();
        let mut files = BTreeMap::new();
        let mut entries = BTreeMap::new();
        let mut current = None;
        for line in ptx.lines() {
            let t = line.trim_start();
            if let Some(i) = t.find(".entry ") {
                let name: String = t[i + 7..]
                    .trim_start()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
                    .collect();
                entries.insert(name, locs.len());
            }
            if let Some(rest) = t.strip_prefix(".loc") {
                // `.loc 1 15 5, function_name $L__info_string0, inlined_at 1 23 9`: the outer
                // `inlined_at` is where the user's code called the inlined helper; the first
                // triple is the helper's own line, which is what the instruction came from.
                let nums: Vec<u32> =
                    rest.split(',').next().unwrap_or("").split_whitespace().filter_map(|n| n.parse().ok()).collect();
                if let [f, l, c, ..] = nums[..] {
                    current = Some((f, l, c));
                }
            } else if t.starts_with('}') {
                // A function ends: the next one starts without a location.
                locs.push(current);
                current = None;
                continue;
            } else if let Some(rest) = t.strip_prefix(".file") {
                let mut parts = rest.trim().splitn(2, char::is_whitespace);
                if let (Some(n), Some(path)) = (parts.next().and_then(|n| n.parse().ok()), parts.next()) {
                    let path = path.trim().split('"').nth(1).unwrap_or(path.trim()).to_string();
                    files.insert(n, path);
                }
            }
            locs.push(current);
        }
        PtxLineMap { locs, files, entries }
    }

    /// The source line and column where a kernel's code starts: the first `.loc` after its
    /// `.entry`.
    pub fn entry_line(&self, kernel: &str) -> Option<(u32, u32)> {
        let start = *self.entries.get(kernel)?;
        self.locs.iter().skip(start).flatten().next().map(|&(_, l, c)| (l, c))
    }

    /// The source file (as named in `.file`), line and column of a PTX line.
    pub fn source_of(&self, ptx_line: u32) -> Option<(&str, u32, u32)> {
        let (f, l, c) = (*self.locs.get(ptx_line.checked_sub(1)? as usize)?)?;
        Some((self.files.get(&f)?.as_str(), l, c))
    }
}

/// Runs every parser that applies to a build's combined stderr and removes duplicates (nvcc
/// echoes some ptxas errors twice when it runs ptxas for validation and for code).
pub fn parse_all(text: &str, ctx: &ParseContext, parsers: &[&dyn OutputParser]) -> Vec<Diagnostic> {
    let mut out: Vec<Diagnostic> = Vec::new();
    for p in parsers {
        for d in p.parse(text, ctx) {
            if !out.iter().any(|o| o.file == d.file && o.line == d.line && o.message == d.message) {
                out.push(d);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_map_prefers_the_longest_prefix() {
        let mut ctx = ParseContext::for_version("versions/v001.cu");
        ctx.path_map.push(("/tmp/b".into(), PathBuf::from("versions")));
        ctx.path_map.push(("/tmp/b/sub".into(), PathBuf::from("elsewhere")));
        assert_eq!(ctx.user_path("/tmp/b/k.cu"), PathBuf::from("versions/k.cu"));
        assert_eq!(ctx.user_path("/tmp/b/sub/h.cuh"), PathBuf::from("elsewhere/h.cuh"));
        assert_eq!(ctx.user_path("other.cu"), PathBuf::from("other.cu"));
    }

    #[test]
    fn ptx_lines_map_to_their_loc() {
        let ptx = ".version 8.8\n.visible .entry k()\n{\n\t.loc\t1 7 3\n\tmov.u32 %r1, 0;\n\tret;\n}\n\t.file\t1 \"/tmp/x/kernel.cu\"\n";
        let m = PtxLineMap::new(ptx);
        assert_eq!(m.source_of(5), Some(("/tmp/x/kernel.cu", 7, 3)));
        assert_eq!(m.source_of(3), None);
        assert_eq!(m.source_of(99), None);
    }
}
