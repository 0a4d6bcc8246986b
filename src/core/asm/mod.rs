//! PTX and SASS, parsed into per-kernel listings: labels, instructions with predicate, opcode,
//! modifiers and operands, and the source line each came from. The listings feed the
//! instruction mix ([`mix`]) and side-by-side diffs ([`diff`]).
//!
//! Both `cuobjdump --dump-sass` and `nvdisasm -c [-g]` layouts are read; encodings and
//! addresses are dropped from the text (kept as `address`), since they change with every edit
//! and mean nothing to a reader comparing two versions.

pub mod diff;
pub mod mix;

use std::sync::LazyLock;

use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AsmKind {
    Ptx,
    Sass,
}

impl AsmKind {
    /// The dump files' extension: `ptx`, `sass`.
    pub fn ext(self) -> &'static str {
        match self {
            AsmKind::Ptx => "ptx",
            AsmKind::Sass => "sass",
        }
    }

    /// The name people use: `PTX`, `SASS`.
    pub fn label(self) -> &'static str {
        match self {
            AsmKind::Ptx => "PTX",
            AsmKind::Sass => "SASS",
        }
    }
}

/// One kernel (or device function) of a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KernelListing {
    pub name: String,
    pub lines: Vec<AsmLine>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AsmLine {
    /// The line as a reader wants it: no address, no encoding, single spaces.
    pub text: String,
    /// SASS byte offset within the kernel.
    pub address: Option<u32>,
    /// Set when the line defines a label (`.L_x_3:`, `$L__BB0_2:`).
    pub label: Option<String>,
    pub instr: Option<Instr>,
    /// The source line this came from (`//## File ..., line N` in SASS, `.loc` in PTX).
    pub source_line: Option<u32>,
}

impl AsmLine {
    fn label(label: String, source_line: Option<u32>) -> AsmLine {
        AsmLine { text: format!("{label}:"), address: None, label: Some(label), instr: None, source_line }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Instr {
    /// `@P0`, `@!PT`, `@%p1`.
    pub predicate: Option<String>,
    /// The opcode without modifiers: `LDG`, `ld`, `wgmma`.
    pub opcode: String,
    /// Dotted modifiers in order: `E`, `128` for `LDG.E.128`; `global`, `v4`, `f32` for PTX.
    pub modifiers: Vec<String>,
    pub operands: Vec<String>,
}

impl Instr {
    /// `LDG.E.128`: the opcode with its modifiers.
    pub fn mnemonic(&self) -> String {
        std::iter::once(self.opcode.as_str())
            .chain(self.modifiers.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(".")
    }
}

/// Detects the kind from the text: SASS listings carry `/*0000*/` addresses.
pub fn detect(text: &str) -> AsmKind {
    if text.contains("/*0000*/") || text.contains("Function : ") { AsmKind::Sass } else { AsmKind::Ptx }
}

pub fn parse(kind: AsmKind, text: &str) -> Vec<KernelListing> {
    match kind {
        AsmKind::Sass => parse_sass(text),
        AsmKind::Ptx => parse_ptx(text),
    }
}

static SASS_FUNCTION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*Function : (?P<name>\S+)").expect("static regex"));
static NVDISASM_SECTION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^//-+ \.text\.(?P<name>\S+)\s+-+").expect("static regex"));
static SASS_LABEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*(?P<label>\.L_[A-Za-z0-9_]+):").expect("static regex"));
static LINE_INFO: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"//## File ".*", line (?P<line>\d+)"#).expect("static regex"));

/// `/*0040*/  @P0 LDG.E R2, [R4.64] ; /* 0x... */` → (0x40, "@P0 LDG.E R2, [R4.64]"), by hand:
/// this runs once per line of listings 100,000 lines long.
fn sass_instruction(raw: &str) -> Option<(u32, &str)> {
    let t = raw.trim_start().strip_prefix("/*")?;
    let end = t.find("*/")?;
    let addr = u32::from_str_radix(&t[..end], 16).ok()?;
    let rest = &t[end + 2..];
    let semi = rest.find(';')?;
    Some((addr, rest[..semi].trim()))
}

fn parse_sass(text: &str) -> Vec<KernelListing> {
    let mut kernels: Vec<KernelListing> = Vec::new();
    let mut source_line = None;
    for raw in text.lines() {
        let t = raw.trim_start();
        if let Some((addr, body)) = sass_instruction(raw) {
            let Some(k) = kernels.last_mut() else { continue };
            let body = squeeze(body);
            let instr = split_instr(&body, false);
            k.lines.push(AsmLine {
                text: format!("{body} ;"),
                address: Some(addr),
                label: None,
                instr: Some(instr),
                source_line,
            });
            continue;
        }
        if t.starts_with("//##") {
            if let Some(c) = LINE_INFO.captures(raw) {
                source_line = c["line"].parse().ok();
            }
            continue;
        }
        if t.starts_with(".L_") {
            if let (Some(k), Some(c)) = (kernels.last_mut(), SASS_LABEL.captures(raw)) {
                let label = c["label"].to_string();
                k.lines.push(AsmLine::label(label, source_line));
            }
            continue;
        }
        if (t.starts_with("Function") || t.starts_with("//---"))
            && let Some(c) = SASS_FUNCTION.captures(raw).or_else(|| NVDISASM_SECTION.captures(raw))
        {
            kernels.push(KernelListing { name: c["name"].to_string(), lines: Vec::new() });
            source_line = None;
        }
    }
    if !text.contains(".L_x_") {
        kernels.iter_mut().for_each(label_branch_targets);
    }
    // nvdisasm also labels the end of each kernel (for `.size`); a label nothing branches to
    // carries nothing a reader needs.
    for k in &mut kernels {
        let used: std::collections::HashSet<String> = k
            .lines
            .iter()
            .filter(|l| l.instr.is_some() && l.text.contains(".L_"))
            .flat_map(|l| SASS_LABEL_USE.find_iter(&l.text).map(|m| m.as_str().to_string()).collect::<Vec<_>>())
            .collect();
        k.lines.retain(|l| l.label.as_ref().is_none_or(|name| used.contains(name)));
    }
    kernels
}

static HEX_TARGET: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^`?\(?0x(?P<addr>[0-9a-fA-F]+)\)?$").expect("static regex"));
const BRANCHES: &[&str] = &["BRA", "BRX", "JMP", "CALL", "BSSY", "BREAK", "SSY", "PBK", "PCNT", "WARPSYNC"];

/// cuobjdump writes branch targets as addresses (`BRA 0x1a0`), which shift with every edit.
/// Give each target a label, as nvdisasm does, so listings compare by structure.
fn label_branch_targets(k: &mut KernelListing) {
    let mut targets: Vec<u32> = Vec::new();
    for i in k.lines.iter().filter_map(|l| l.instr.as_ref()) {
        if BRANCHES.contains(&i.opcode.as_str()) {
            for o in &i.operands {
                if let Some(a) = HEX_TARGET.captures(o).and_then(|c| u32::from_str_radix(&c["addr"], 16).ok()) {
                    targets.push(a);
                }
            }
        }
    }
    if targets.is_empty() {
        return;
    }
    targets.sort_unstable();
    targets.dedup();
    let name = |a: u32| format!(".L_t_{a:x}");
    for l in &mut k.lines {
        let Some(i) = l.instr.as_mut() else { continue };
        if !BRANCHES.contains(&i.opcode.as_str()) {
            continue;
        }
        for o in &mut i.operands {
            if let Some(a) = HEX_TARGET.captures(o).and_then(|c| u32::from_str_radix(&c["addr"], 16).ok())
                && targets.binary_search(&a).is_ok()
            {
                // As nvdisasm writes them.
                let target = format!("`({})", name(a));
                l.text = l.text.replacen(o.as_str(), &target, 1);
                *o = format!("({})", name(a));
            }
        }
    }
    let mut out = Vec::with_capacity(k.lines.len() + targets.len());
    for l in k.lines.drain(..) {
        if let Some(a) = l.address.filter(|a| targets.binary_search(a).is_ok()) {
            let label = name(a);
            out.push(AsmLine::label(label, l.source_line));
        }
        out.push(l);
    }
    k.lines = out;
}

fn squeeze(s: &str) -> String {
    if !s.contains("  ") && !s.contains('\t') {
        return s.to_string();
    }
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Splits `@P0 LDG.E.128 R4, desc[UR6][R2.64]` into its parts. PTX opcodes split at dots too,
/// but keep `::` qualifiers (`shared::cta`) inside one modifier.
fn split_instr(body: &str, ptx: bool) -> Instr {
    let mut rest = body.trim();
    let mut predicate = None;
    if rest.starts_with('@') {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        predicate = Some(rest[..end].to_string());
        rest = rest[end..].trim_start();
    }
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let mnemonic = &rest[..end];
    let operands_text = rest[end..].trim();
    let mut parts = mnemonic.split('.');
    let opcode = parts.next().unwrap_or("").to_string();
    let modifiers: Vec<String> = parts.map(str::to_string).collect();
    let operands = split_operands(operands_text, ptx);
    Instr { predicate, opcode, modifiers, operands }
}

fn split_operands(s: &str, ptx: bool) -> Vec<String> {
    let s = s.trim().trim_end_matches(';').trim();
    if s.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '[' | '(' | '{' => depth += 1,
            ']' | ')' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim().to_string());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(s[start..].trim().to_string());
    if !ptx {
        // cuobjdump writes branch targets as `(.L_x_1)` with a backquote.
        for o in &mut out {
            *o = o.trim_start_matches('`').to_string();
        }
    }
    out
}

static PTX_FUNC: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\s*(?:\.visible\s+|\.weak\s+|\.extern\s+)*\.(?P<kind>entry|func)\s+(?:\([^)]*\)\s*)?(?P<name>[A-Za-z_$][A-Za-z0-9_$]*)").expect("static regex")
});
static PTX_LABEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*(?P<label>[$A-Za-z_][A-Za-z0-9_$]*):").expect("static regex"));
static PTX_LOC: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*\.loc\s+\d+\s+(?P<line>\d+)").expect("static regex"));

fn parse_ptx(text: &str) -> Vec<KernelListing> {
    let mut kernels: Vec<KernelListing> = Vec::new();
    let mut depth = 0i32;
    let mut source_line = None;
    for raw in text.lines() {
        let line = raw.split("//").next().unwrap_or("").trim();
        if depth == 0
            && let Some(c) = PTX_FUNC.captures(raw)
        {
            kernels.push(KernelListing { name: c["name"].to_string(), lines: Vec::new() });
            source_line = None;
        }
        let opens = line.matches('{').count() as i32;
        let closes = line.matches('}').count() as i32;
        let inside = depth > 0;
        depth += opens - closes;
        if !inside || line.is_empty() || line == "{" || line == "}" {
            continue;
        }
        let Some(k) = kernels.last_mut() else { continue };
        if let Some(c) = PTX_LOC.captures(line) {
            source_line = c["line"].parse().ok();
            continue;
        }
        if line.starts_with(".pragma") || line.starts_with(".file") {
            continue;
        }
        if let Some(c) = PTX_LABEL.captures(line) {
            let label = c["label"].to_string();
            k.lines.push(AsmLine::label(label, source_line));
            continue;
        }
        let text = squeeze(line);
        let instr =
            (!line.starts_with('.') && !line.starts_with('{')).then(|| split_instr(line.trim_end_matches(';'), true));
        k.lines.push(AsmLine { text, address: None, label: None, instr, source_line });
    }
    kernels
}

/// What to ignore when comparing listings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Normalize {
    /// Rename registers by first appearance (R12 → R0, %rd7 → %rd0, ...), so a different
    /// register allocation does not hide the same instruction stream.
    pub registers: bool,
}

static SASS_REG: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(?P<class>UR|R|UP|P|B|SB)(?P<n>\d+)\b").expect("static regex"));
static PTX_REG: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"%(?P<class>[a-z]+)(?P<n>\d+)\b").expect("static regex"));
static SASS_LABEL_USE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\.L_(?:x_\d+|t_[0-9a-f]+)").expect("static regex"));
static PTX_LABEL_USE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\$L__[A-Za-z]+\d+(?:_\d+)?").expect("static regex"));

/// The text of each line of a kernel as it is compared: labels renamed by order of first
/// appearance (they are renumbered across the whole module by every edit), and registers too
/// when asked.
pub fn normalized_lines(kind: AsmKind, k: &KernelListing, n: Normalize) -> Vec<String> {
    let label_re = if kind == AsmKind::Sass { &*SASS_LABEL_USE } else { &*PTX_LABEL_USE };
    let mut labels: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut regs: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut reg_counts: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    k.lines
        .iter()
        .map(|l| {
            let has_label = if kind == AsmKind::Sass { l.text.contains(".L_") } else { l.text.contains("$L") };
            if !has_label && !n.registers {
                return l.text.clone();
            }
            let text = label_re.replace_all(&l.text, |c: &regex::Captures| {
                let next = labels.len();
                let i = *labels.entry(c[0].to_string()).or_insert(next);
                if kind == AsmKind::Sass { format!(".L{i}") } else { format!("$L{i}") }
            });
            if !n.registers || l.label.is_some() {
                return text.into_owned();
            }
            let re = if kind == AsmKind::Sass { &*SASS_REG } else { &*PTX_REG };
            re.replace_all(&text, |c: &regex::Captures| {
                let class = c["class"].to_string();
                let key = c[0].to_string();
                let i = match regs.get(&key) {
                    Some(i) => *i,
                    None => {
                        let counter = reg_counts.entry(class.clone()).or_insert(0);
                        let i = *counter;
                        *counter += 1;
                        regs.insert(key, i);
                        i
                    }
                };
                if kind == AsmKind::Sass { format!("{class}{i}") } else { format!("%{class}{i}") }
            })
            .into_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sass_instruction_parts() {
        let i = split_instr("@!P0 LDG.E.128.CONSTANT R4, desc[UR6][R2.64]", false);
        assert_eq!(i.predicate.as_deref(), Some("@!P0"));
        assert_eq!(i.opcode, "LDG");
        assert_eq!(i.modifiers, vec!["E", "128", "CONSTANT"]);
        assert_eq!(i.operands, vec!["R4", "desc[UR6][R2.64]"]);
        assert_eq!(i.mnemonic(), "LDG.E.128.CONSTANT");
        let b = split_instr("BRA `(.L_x_1)", false);
        assert_eq!(b.operands, vec!["(.L_x_1)"]);
    }

    #[test]
    fn cuobjdump_branch_addresses_become_labels() {
        let text = "Function : k\n /*0000*/ @P0 BRA 0x20 ;\n /*0010*/ NOP ;\n /*0020*/ EXIT ;\n";
        let ks = parse(AsmKind::Sass, text);
        let texts: Vec<&str> = ks[0].lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts, vec!["@P0 BRA `(.L_t_20) ;", "NOP ;", ".L_t_20:", "EXIT ;"]);
        let n = normalized_lines(AsmKind::Sass, &ks[0], Normalize::default());
        assert_eq!(n[0], "@P0 BRA `(.L0) ;");
    }

    #[test]
    fn ptx_instruction_parts() {
        let i = split_instr("@%p1 ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd4+16]", true);
        assert_eq!(i.predicate.as_deref(), Some("@%p1"));
        assert_eq!((i.opcode.as_str(), i.modifiers.len()), ("ld", 4));
        assert_eq!(i.operands, vec!["{%f1, %f2, %f3, %f4}", "[%rd4+16]"]);
        let m = split_instr("mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r5], %r6", true);
        assert_eq!(m.modifiers, vec!["try_wait", "parity", "shared::cta", "b64"]);
    }

    #[test]
    fn normalisation_renames_labels_and_registers_by_first_use() {
        let text = "\t\tFunction : k\n        /*0000*/   @P0 BRA `(.L_x_7) ;  /* 0x0 */\n        /*0010*/   IADD3 R9, R12, R9, RZ ;\n.L_x_7:\n        /*0020*/   EXIT ;\n";
        let ks = parse(AsmKind::Sass, text);
        assert_eq!(ks[0].lines.len(), 4);
        assert_eq!(ks[0].lines[2].label.as_deref(), Some(".L_x_7"));
        let plain = normalized_lines(AsmKind::Sass, &ks[0], Normalize::default());
        assert_eq!(plain, vec!["@P0 BRA `(.L0) ;", "IADD3 R9, R12, R9, RZ ;", ".L0:", "EXIT ;"]);
        let regs = normalized_lines(AsmKind::Sass, &ks[0], Normalize { registers: true });
        assert_eq!(regs[1], "IADD3 R0, R1, R0, RZ ;");
        assert_eq!(regs[0], "@P0 BRA `(.L0) ;");
    }
}
