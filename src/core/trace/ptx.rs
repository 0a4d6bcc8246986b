//! A `.ptx` version's markers: comment lines, `// rung_trace begin|end|mark NAME`, that its own
//! build reads as comments and that the traced variant replaces with the record's PTX, the same
//! 32-byte record rung_trace.cuh writes (its layout is the parent module's).

use std::collections::BTreeMap;
use std::path::Path;

use super::{Leader, TraceError, Traced, hash};

/// The mechanism a `.ptx` version's records come from: its marker comments, each replaced by
/// the record's PTX ([`ptx_record`]) in the traced variant.
pub const PTX_MECHANISM: &str = "rung_trace PTX markers";

/// The buffer's declaration a traced `.ptx` variant gains (as rung_trace.cuh's `__device__
/// RungTraceBuffer rung_trace` compiles to), unless the source declares it itself.
pub const PTX_BUFFER: &str = ".global .align 8 .b8 rung_trace[32];";

/// A `.ptx` marker: a line that is only the comment `// rung_trace begin|end|mark NAME`.
fn ptx_marker(line: &str) -> Option<(u32, &str)> {
    let rest = line.trim().strip_prefix("//")?.trim_start().strip_prefix("rung_trace")?;
    let mut words = rest.split_whitespace();
    let kind = match words.next()? {
        "begin" => 0,
        "end" => 1,
        "mark" => 2,
        _ => return None,
    };
    let name = words.next()?;
    let ok = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    (ok && words.next().is_none()).then_some((kind, name))
}

/// PTX that puts into `dst` the linear index (x fastest) of the special register `index`
/// (`tid`, `ctaid`) over the extents `extent` (`ntid`, `nctaid`), through `%rt_n` and `%rt_b`.
fn linear_index(dst: &str, index: &str, extent: &str) -> String {
    let step = |axis: &str| {
        format!(
            "mov.u32 %rt_n, %{extent}.{axis};\n\tmov.u32 %rt_b, %{index}.{axis};\n\tmad.lo.u32 {dst}, {dst}, %rt_n, %rt_b;"
        )
    };
    format!("mov.u32 {dst}, %{index}.z;\n\t{}\n\t{}", step("y"), step("x"))
}

/// One record's PTX for a `.ptx` version, written as rung_trace.cuh writes it: the leader (lane
/// 0 of each warp, or thread 0 of the block) reads `%globaltimer` and `%smid`, takes a slot in its
/// SM's part of the `rung_trace` buffer with one atomic add, and stores the 32-byte record when
/// the part has room; nothing when rung gave no buffer (its pointers are zero). A scoped block
/// of its own registers, so it can stand wherever an instruction can.
pub fn ptx_record(tag: u32, kind: u32, leader: Leader) -> String {
    let lead = match leader {
        Leader::Warp => {
            "and.b32 %rt_b, %rt_tid, 31;\n\tsetp.eq.u32 %rt_lead, %rt_b, 0;\n\tshr.u32 %rt_warp, %rt_tid, 5;\n\tmov.u32 %rt_leader, 0;"
        }
        Leader::Block => "setp.eq.u32 %rt_lead, %rt_tid, 0;\n\tmov.u32 %rt_warp, 0;\n\tmov.u32 %rt_leader, 1;",
    };
    let (tid, blk) = (linear_index("%rt_tid", "tid", "ntid"), linear_index("%rt_blk", "ctaid", "nctaid"));
    format!(
        "{{ // rung_trace record: tag {tag}, kind {kind}
\t.reg .pred %rt_lead, %rt_room;
\t.reg .b32 %rt_sm, %rt_part, %rt_tid, %rt_warp, %rt_blk, %rt_b, %rt_n, %rt_regions, %rt_per32, %rt_tag, %rt_kind, %rt_leader;
\t.reg .b64 %rt_time, %rt_i, %rt_count, %rt_slot, %rt_records, %rt_counts, %rt_per;
\t{tid}
\t{lead}
\tmov.u64 %rt_time, %globaltimer;
\tmov.u32 %rt_sm, %smid;
\tld.global.u64 %rt_records, [rung_trace];
\tld.global.u64 %rt_counts, [rung_trace+8];
\tld.global.v2.u32 {{%rt_regions, %rt_per32}}, [rung_trace+16];
\tsetp.ne.and.u64 %rt_lead, %rt_counts, 0, %rt_lead;
\tsetp.ne.and.u32 %rt_lead, %rt_regions, 0, %rt_lead;
\tmov.u32 %rt_part, 0;
\t@%rt_lead rem.u32 %rt_part, %rt_sm, %rt_regions;
\tmul.wide.u32 %rt_count, %rt_part, 8;
\tadd.u64 %rt_count, %rt_count, %rt_counts;
\tmov.u64 %rt_i, 0;
\t@%rt_lead atom.global.add.u64 %rt_i, [%rt_count], 1;
\tcvt.u64.u32 %rt_per, %rt_per32;
\tsetp.lt.and.u64 %rt_room, %rt_i, %rt_per, %rt_lead;
\tsetp.ne.and.u64 %rt_room, %rt_records, 0, %rt_room;
\tcvt.u64.u32 %rt_slot, %rt_part;
\tmul.lo.u64 %rt_slot, %rt_slot, %rt_per;
\tadd.u64 %rt_slot, %rt_slot, %rt_i;
\tshl.b64 %rt_slot, %rt_slot, 5;
\tadd.u64 %rt_slot, %rt_slot, %rt_records;
\t{blk}
\tmov.u32 %rt_tag, {tag};
\tmov.u32 %rt_kind, {kind};
\t@%rt_room st.global.u64 [%rt_slot], %rt_time;
\t@%rt_room st.global.v2.u32 [%rt_slot+8], {{%rt_tag, %rt_kind}};
\t@%rt_room st.global.v4.u32 [%rt_slot+16], {{%rt_sm, %rt_blk, %rt_warp, %rt_leader}};
}}"
    )
}

/// The traced variant of a `.ptx` source: each marker line replaced by its record (indented as
/// the marker was, on one line per instruction) and the buffer declared after the module's
/// `.address_size` (or `.target`) directive, unless the source declares `rung_trace` itself. The
/// lines before and after keep their numbers' order; the names the markers use, by tag. An
/// untraced build sees only comments.
pub fn ptx_traced(source: &str, leader: Leader) -> (String, BTreeMap<u32, String>) {
    let declared = source.contains("rung_trace[");
    let anchor = source
        .lines()
        .position(|l| l.trim_start().starts_with(".address_size"))
        .or_else(|| source.lines().position(|l| l.trim_start().starts_with(".target")));
    let mut names = BTreeMap::new();
    let mut out = String::with_capacity(source.len() * 2);
    for (i, line) in source.lines().enumerate() {
        match ptx_marker(line) {
            Some((kind, name)) => {
                let tag = hash(name);
                names.insert(tag, name.to_string());
                let indent = &line[..line.len() - line.trim_start().len()];
                for l in ptx_record(tag, kind, leader).lines() {
                    out.push_str(indent);
                    out.push_str(l);
                    out.push('\n');
                }
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
        if !declared && anchor == Some(i) {
            out.push_str(PTX_BUFFER);
            out.push('\n');
        }
    }
    if !declared && anchor.is_none() {
        out.insert_str(0, &format!("{PTX_BUFFER}\n"));
    }
    (out, names)
}

/// Builds the traced variant of the `.ptx` version at `source` with `ptxas` for `arch`, in
/// `scratch` (`traced.ptx`, `traced.cubin`): [`ptx_traced`], then ptxas as the build runs it.
pub fn build_traced_ptx(
    ptxas: &Path,
    source: &Path,
    arch: &str,
    scratch: &Path,
    leader: Leader,
) -> Result<Traced, TraceError> {
    let text = std::fs::read_to_string(source).map_err(|e| TraceError::Build(format!("{}: {e}", source.display())))?;
    let (ptx, names) = ptx_traced(&text, leader);
    if names.is_empty() {
        return Err(TraceError::NoPtxMarkers(source.display().to_string()));
    }
    let (ptx_path, cubin_path) = (scratch.join("traced.ptx"), scratch.join("traced.cubin"));
    std::fs::write(&ptx_path, &ptx).map_err(|e| TraceError::Build(format!("{}: {e}", ptx_path.display())))?;
    let run = std::process::Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .args(["-lineinfo", "-o"])
        .arg(&cubin_path)
        .arg(&ptx_path)
        .output()
        .map_err(|e| TraceError::Build(format!("{}: {e}", ptxas.display())))?;
    if !run.status.success() {
        return Err(TraceError::Build(String::from_utf8_lossy(&run.stderr).trim().to_string()));
    }
    let cubin = std::fs::read(&cubin_path).map_err(|e| TraceError::Build(format!("{}: {e}", cubin_path.display())))?;
    Ok(Traced { ptx, cubin, names })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.ptx` version's marker comments become records only in the traced variant: the buffer
    /// declared once after `.address_size`, each marker's record in its place with its tag and
    /// kind and the marker's indent, every other line as it was (a comment that only looks like a
    /// marker included), and the leader's test per warp or per block.
    #[test]
    fn ptx_markers_become_records_in_the_traced_variant_only() {
        let source = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\t// rung_trace begin load\n\tret; // rung_trace end load\n    // rung_trace end load\n// rung_trace beginning x\n// rung_trace mark done extra\n\t// rung_trace mark done\n}\n";
        let (warp, names) = ptx_traced(source, Leader::Warp);
        assert_eq!(
            names.values().map(String::as_str).collect::<std::collections::BTreeSet<_>>(),
            ["done", "load"].into()
        );
        assert_eq!(warp.matches(PTX_BUFFER).count(), 1, "{warp}");
        assert!(warp.starts_with(&format!(".version 8.0\n.target sm_90\n.address_size 64\n{PTX_BUFFER}\n")), "{warp}");
        assert_eq!(warp.matches("%globaltimer").count(), 3, "three markers, three records: {warp}");
        assert!(warp.contains(&format!("\t{{ // rung_trace record: tag {}, kind 0\n", hash("load"))), "{warp}");
        assert!(warp.contains(&format!("    {{ // rung_trace record: tag {}, kind 1\n", hash("load"))), "{warp}");
        assert!(warp.contains(&format!("\tmov.u32 %rt_tag, {};\n", hash("done"))), "{warp}");
        for kept in
            ["\tret; // rung_trace end load\n", "// rung_trace beginning x\n", "// rung_trace mark done extra\n"]
        {
            assert!(warp.contains(kept), "{kept:?} is not a marker: {warp}");
        }
        assert!(warp.contains("and.b32 %rt_b, %rt_tid, 31;") && warp.contains("mov.u32 %rt_leader, 0;"));
        let (block, _) = ptx_traced(source, Leader::Block);
        assert!(!block.contains("and.b32 %rt_b, %rt_tid, 31;") && block.contains("mov.u32 %rt_leader, 1;"));
        // A source that declares the buffer itself keeps its own declaration.
        let own = source.replace(".address_size 64\n", &format!(".address_size 64\n{PTX_BUFFER}\n"));
        assert_eq!(ptx_traced(&own, Leader::Warp).0.matches(PTX_BUFFER).count(), 1);
        // No markers: nothing changes but the declaration.
        let (plain, none) = ptx_traced(".version 8.0\n.target sm_90\n.address_size 64\n", Leader::Warp);
        assert!(none.is_empty());
        assert_eq!(plain, format!(".version 8.0\n.target sm_90\n.address_size 64\n{PTX_BUFFER}\n"));
    }
}
