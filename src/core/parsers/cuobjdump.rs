//! cuobjdump's resource report (`--dump-resource-usage`): each kernel's registers, stack, static
//! shared and local memory as they are in the cubin, and how it combines with ptxas's `-v`
//! report, which alone splits spills into stores and loads and counts barriers.

use crate::model::build::KernelResources;

/// Parses `cuobjdump --dump-resource-usage`: a `Function <name>:` line, then its fields
/// (`REG:26 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:576 ...`) on the next line (or the same).
pub fn parse_resource_usage(text: &str) -> Vec<KernelResources> {
    let mut arch = String::new();
    let mut out = Vec::new();
    let mut pending: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("arch = ") {
            arch = rest.trim().to_string();
            continue;
        }
        if let Some(rest) = line.strip_prefix("Function ") {
            let (name, fields) = rest.split_once(':').unwrap_or((rest, ""));
            pending = Some(name.trim().to_string());
            if fields.trim().is_empty() {
                continue;
            }
        }
        let Some(name) = pending.take() else { continue };
        let fields = line.rsplit_once("Function ").map_or(line, |(_, r)| r.split_once(':').map_or(r, |(_, f)| f));
        let field = |key: &str| -> Option<u32> {
            fields
                .split_whitespace()
                .find_map(|f| f.strip_prefix(key).and_then(|v| v.strip_prefix(':')))
                .and_then(|v| v.parse().ok())
        };
        out.push(KernelResources {
            name,
            arch: arch.clone(),
            registers: field("REG").unwrap_or(0),
            barriers: 0,
            shared_bytes: field("SHARED").unwrap_or(0),
            stack_frame_bytes: field("STACK").unwrap_or(0),
            // Local memory is what spills (and local arrays) use; cuobjdump does not split it.
            spill_store_bytes: field("LOCAL").unwrap_or(0),
            spill_load_bytes: field("LOCAL").unwrap_or(0),
            cmem0_bytes: field("CONSTANT[0]"),
        });
    }
    out
}

/// Each kernel's resources from both reports: the cubin's registers, stack, static shared memory
/// and constant bank (what will run: a ptxas re-run on the PTX may differ from the compiler's own
/// run), ptxas's split of spills into stores and loads and its barriers. A kernel in only one
/// report keeps that report's figures. Kernels come in the cubin's order, then ptxas's.
pub fn combine(ptxas: &[KernelResources], cubin: &[KernelResources]) -> Vec<KernelResources> {
    let mut out: Vec<KernelResources> = Vec::new();
    for c in cubin {
        let mut r = match ptxas.iter().find(|p| p.name == c.name) {
            Some(p) => KernelResources {
                registers: c.registers,
                shared_bytes: c.shared_bytes,
                stack_frame_bytes: c.stack_frame_bytes,
                cmem0_bytes: c.cmem0_bytes.or(p.cmem0_bytes),
                ..p.clone()
            },
            None => c.clone(),
        };
        if r.arch.is_empty() {
            r.arch.clone_from(&c.arch);
        }
        out.push(r);
    }
    out.extend(ptxas.iter().filter(|p| !cubin.iter().any(|c| c.name == p.name)).cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_usage_parses_per_kernel() {
        // As cuobjdump 13.2 prints it for a fatbin (a plain cubin has no `arch =` header).
        let text = "\nFatbin elf code:\n================\narch = sm_90\ncode version = [1,8]\n\n\
                    Resource usage:\n Common:\n  GLOBAL:0\n Function add_kernel:\n  REG:26 STACK:0 SHARED:0 LOCAL:8 CONSTANT[0]:560 TEXTURE:0 SURFACE:0 SAMPLER:0\n\
                    Function _Z4tailPf:\n  REG:40 STACK:16 SHARED:1024 LOCAL:0 CONSTANT[0]:360 TEXTURE:0 SURFACE:0 SAMPLER:0\n";
        let r = parse_resource_usage(text);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!((r[0].name.as_str(), r[0].registers, r[0].cmem0_bytes), ("add_kernel", 26, Some(560)));
        assert_eq!((r[0].arch.as_str(), r[0].spill_store_bytes), ("sm_90", 8));
        assert_eq!(
            (r[1].name.as_str(), r[1].registers, r[1].shared_bytes, r[1].stack_frame_bytes),
            ("_Z4tailPf", 40, 1024, 16)
        );
    }

    #[test]
    fn the_cubin_decides_registers_and_ptxas_the_spill_split() {
        let ptxas = crate::parsers::parse_resources(
            "ptxas info    : Compiling entry function 'k' for 'sm_90'\n\
             ptxas info    : Function properties for k\n\
                 48 bytes stack frame, 40 bytes spill stores, 24 bytes spill loads\n\
             ptxas info    : Used 80 registers, used 1 barriers, 2048 bytes smem, 400 bytes cmem[0]\n\
             ptxas info    : Compiling entry function 'only_in_ptxas' for 'sm_90'\n\
             ptxas info    : Used 8 registers\n",
        );
        let cubin = parse_resource_usage(
            "Function k:\n REG:72 STACK:48 SHARED:2048 LOCAL:40 CONSTANT[0]:400\n\
             Function only_in_cubin:\n REG:30 STACK:0 SHARED:0 LOCAL:16\n",
        );
        let r = combine(&ptxas, &cubin);
        let names: Vec<&str> = r.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["k", "only_in_cubin", "only_in_ptxas"]);
        assert_eq!((r[0].registers, r[0].barriers, r[0].arch.as_str()), (72, 1, "sm_90"), "the cubin's registers");
        assert_eq!((r[0].spill_store_bytes, r[0].spill_load_bytes), (40, 24), "ptxas splits spills");
        assert_eq!((r[1].registers, r[1].spill_store_bytes), (30, 16), "local memory when ptxas has no report");
        assert_eq!(r[2].registers, 8);
    }
}
