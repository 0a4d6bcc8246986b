//! The instruction mix of a kernel: what a kernel engineer counts first when reading SASS. Memory
//! operations by space and width, tensor-core instructions, FMAs, branches, barriers, spills and
//! the uniform datapath.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{AsmKind, Instr, KernelListing};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct InstructionMix {
    pub kernel: String,
    pub instructions: usize,
    /// Class → count: `global load`, `global store`, `shared load`, `shared store`,
    /// `local load (spill)`, `local store (spill)`, `tensor core`, `ffma`, `branch`, `barrier`,
    /// `uniform`, `tma`, `other`.
    pub classes: BTreeMap<String, usize>,
    /// Memory instructions by mnemonic with their access width, e.g. `LDG 128-bit` → 4.
    pub memory: BTreeMap<String, usize>,
    /// Tensor-core instructions by mnemonic (`HGMMA.64x128x16.F32.BF16` → 8).
    pub tensor: BTreeMap<String, usize>,
}

impl InstructionMix {
    pub fn count(&self, class: &str) -> usize {
        self.classes.get(class).copied().unwrap_or(0)
    }
}

/// Access width in bits from SASS modifiers (`.128`, `.64`, `.U8`, `.S16`; 32 by default).
fn sass_width(i: &Instr) -> u32 {
    for m in &i.modifiers {
        match m.as_str() {
            "128" => return 128,
            "64" => return 64,
            "U8" | "S8" => return 8,
            "U16" | "S16" => return 16,
            _ => {}
        }
    }
    32
}

/// Access width in bits from PTX modifiers (`.v4.f32` → 128).
fn ptx_width(i: &Instr) -> u32 {
    let lanes = i.modifiers.iter().find_map(|m| m.strip_prefix('v').and_then(|n| n.parse::<u32>().ok())).unwrap_or(1);
    let elem = i
        .modifiers
        .iter()
        .rev()
        .find_map(|m| {
            let digits: String = m.chars().skip_while(|c| c.is_ascii_alphabetic()).collect();
            digits.parse::<u32>().ok().filter(|_| m.starts_with(['b', 'u', 's', 'f']))
        })
        .unwrap_or(32);
    lanes * elem
}

fn sass_class(i: &Instr) -> &'static str {
    match i.opcode.as_str() {
        "LDG" => "global load",
        "STG" | "RED" | "ATOMG" => "global store",
        "LDS" | "LDSM" => "shared load",
        "STS" | "STSM" => "shared store",
        "LDL" => "local load (spill)",
        "STL" => "local store (spill)",
        "HMMA" | "HGMMA" | "QGMMA" | "IMMA" | "IGMMA" | "BMMA" | "BGMMA" | "DMMA" => "tensor core",
        "FFMA" | "HFMA2" | "DFMA" => "ffma",
        "BRA" | "BRX" | "JMP" | "JMX" | "CALL" | "RET" | "EXIT" | "BSSY" | "BSYNC" => "branch",
        "BAR" | "SYNCS" | "WARPSYNC" | "MEMBAR" | "DEPBAR" | "WARPGROUP" | "ERRBAR" | "FENCE" => "barrier",
        "UTMALDG" | "UTMASTG" | "UBLKCP" | "UTMAPF" | "UTMACCTL" => "tma",
        "LDGSTS" => "global→shared async copy",
        op if op.starts_with('U') || op == "R2UR" => "uniform",
        _ => "other",
    }
}

fn ptx_class(i: &Instr) -> &'static str {
    let space = |s: &str| i.modifiers.iter().any(|m| m == s || m.starts_with(&format!("{s}::")));
    match i.opcode.as_str() {
        "ld" if space("global") => "global load",
        "st" | "red" | "atom" if space("global") => "global store",
        "ld" if space("shared") => "shared load",
        "st" if space("shared") => "shared store",
        "ldmatrix" => "shared load",
        "stmatrix" => "shared store",
        "ld" if space("local") => "local load (spill)",
        "st" if space("local") => "local store (spill)",
        "mma" | "wgmma"
            if !i.modifiers.iter().any(|m| m == "fence" || m.starts_with("commit") || m.starts_with("wait")) =>
        {
            "tensor core"
        }
        "fma" => "ffma",
        "bra" | "call" | "ret" | "exit" | "brx" => "branch",
        "bar" | "barrier" | "membar" | "fence" | "mbarrier" | "wgmma" => "barrier",
        "cp" if i.modifiers.iter().any(|m| m == "bulk") => "tma",
        "cp" if i.modifiers.iter().any(|m| m == "async") => "global→shared async copy",
        _ => "other",
    }
}

pub fn mix(kind: AsmKind, k: &KernelListing) -> InstructionMix {
    let mut m = InstructionMix { kernel: k.name.clone(), ..Default::default() };
    for i in k.lines.iter().filter_map(|l| l.instr.as_ref()) {
        m.instructions += 1;
        let class = if kind == AsmKind::Sass { sass_class(i) } else { ptx_class(i) };
        *m.classes.entry(class.to_string()).or_default() += 1;
        if class.contains("load") || class.contains("store") {
            let width = if kind == AsmKind::Sass { sass_width(i) } else { ptx_width(i) };
            let key = if kind == AsmKind::Sass {
                format!("{} {width}-bit", i.opcode)
            } else {
                format!("{} {width}-bit", i.mnemonic())
            };
            *m.memory.entry(key).or_default() += 1;
        }
        if class == "tensor core" {
            *m.tensor.entry(i.mnemonic()).or_default() += 1;
        }
    }
    m
}

/// One count that differs between two mixes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MixChange {
    /// `instructions`, a class (`global load`), or a memory or tensor-core mnemonic
    /// (`LDG 128-bit`).
    pub what: String,
    pub a: usize,
    pub b: usize,
}

/// The counts of two mixes that differ: the instruction total, then the classes, then the
/// memory and tensor-core mnemonics, each group by name (the order `rung diff`, `diff_asm` and
/// the TUI's assembly pane show them in).
pub fn changes(l: &InstructionMix, r: &InstructionMix) -> Vec<MixChange> {
    let mut out = Vec::new();
    let mut push = |what: &str, a: usize, b: usize| {
        if a != b {
            out.push(MixChange { what: what.to_string(), a, b });
        }
    };
    push("instructions", l.instructions, r.instructions);
    let classes: BTreeSet<&String> = l.classes.keys().chain(r.classes.keys()).collect();
    for c in classes {
        push(c, l.count(c), r.count(c));
    }
    for (ml, mr) in [(&l.memory, &r.memory), (&l.tensor, &r.tensor)] {
        let keys: BTreeSet<&String> = ml.keys().chain(mr.keys()).collect();
        for k in keys {
            push(k, ml.get(k).copied().unwrap_or(0), mr.get(k).copied().unwrap_or(0));
        }
    }
    out
}

/// The sum of several kernels' mixes (the assembly pane's summary of a whole module).
pub fn total<'a>(mixes: impl IntoIterator<Item = &'a InstructionMix>) -> InstructionMix {
    let mut t = InstructionMix::default();
    for m in mixes {
        t.instructions += m.instructions;
        for (into, from) in [(&mut t.classes, &m.classes), (&mut t.memory, &m.memory), (&mut t.tensor, &m.tensor)] {
            for (k, n) in from {
                *into.entry(k.clone()).or_default() += n;
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asm::parse;

    #[test]
    fn counts_widths_and_classes() {
        let sass = "Function : k\n/*0000*/ LDG.E.128 R4, desc[UR4][R2.64] ;\n/*0010*/ LDG.E R8, desc[UR4][R6.64] ;\n/*0020*/ FFMA R4, R4, R5, R6 ;\n/*0030*/ STL [R1+0x4], R4 ;\n/*0040*/ HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24 ;\n/*0050*/ UIADD3 UR4, UR4, 0x1, URZ ;\n/*0060*/ EXIT ;\n";
        let k = &parse(AsmKind::Sass, sass)[0];
        let m = mix(AsmKind::Sass, k);
        assert_eq!(m.instructions, 7);
        assert_eq!(m.memory.get("LDG 128-bit"), Some(&1));
        assert_eq!(m.memory.get("LDG 32-bit"), Some(&1));
        assert_eq!(m.count("local store (spill)"), 1);
        assert_eq!(m.count("tensor core"), 1);
        assert_eq!(m.count("uniform"), 1);
        assert_eq!(m.count("branch"), 1);
        assert_eq!(m.tensor.get("HGMMA.64x128x16.F32.BF16"), Some(&1));
    }

    #[test]
    fn ptx_vector_widths() {
        let ptx = ".visible .entry k(\n.param .u64 p\n)\n{\nld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];\nst.global.f32 [%rd2], %f1;\nwgmma.fence.sync.aligned;\nret;\n}\n";
        let k = &parse(AsmKind::Ptx, ptx)[0];
        let m = mix(AsmKind::Ptx, k);
        assert_eq!(m.memory.get("ld.global.nc.v4.f32 128-bit"), Some(&1));
        assert_eq!(m.memory.get("st.global.f32 32-bit"), Some(&1));
        assert_eq!(m.count("barrier"), 1, "wgmma.fence orders, it does not multiply");
        assert_eq!(m.count("tensor core"), 0);
    }

    #[test]
    fn changes_list_only_what_differs() {
        let mut a = InstructionMix { kernel: "k".into(), instructions: 10, ..Default::default() };
        a.classes.insert("global load".into(), 4);
        a.memory.insert("LDG 32-bit".into(), 4);
        let mut b = InstructionMix { kernel: "k".into(), instructions: 7, ..Default::default() };
        b.classes.insert("global load".into(), 1);
        b.memory.insert("LDG 128-bit".into(), 1);
        let c = changes(&a, &b);
        let names: Vec<&str> = c.iter().map(|c| c.what.as_str()).collect();
        assert_eq!(names, vec!["instructions", "global load", "LDG 128-bit", "LDG 32-bit"]);
        assert!(changes(&a, &a).is_empty());
        let t = total([&a, &b]);
        assert_eq!((t.instructions, t.count("global load"), t.memory.len()), (17, 5, 2));
    }
}
