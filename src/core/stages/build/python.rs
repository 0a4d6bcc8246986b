//! Python versions built ahead of time (Triton, CuTe DSL) by the scripts rung carries, and the
//! kernels that really launched, captured at run time. The scripts parse no tool's report: each
//! kernel's resources are read here, from its cubin and its `ptxas -v` report.

use crate::assets::{CUTE_AOT, TILELANG_AOT, TRITON_AOT};
use std::path::Path;
use std::process::Command;

use std::collections::BTreeMap;

use crate::diag::{Diagnostic, Pos, Severity};
use crate::model::aot::{AotError, AotKernel, AotReport};
pub use crate::model::build::{Artefact, BuildDetail, KernelBuild};
use crate::model::report::Verdict;
use crate::parsers::{
    KernelResources, OutputParser, PtxLineMap, PtxasOutput, PythonTraceback, combine, parse_resource_usage,
    parse_resources,
};
use crate::store::Objects;
use crate::toolchain::Toolchain;
use crate::workspace::Workspace;

use super::*;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum AotTool {
    Triton,
    Cute,
    TileLang,
}

impl AotTool {
    fn name(self) -> &'static str {
        match self {
            AotTool::Triton => "Triton",
            AotTool::Cute => "CuTe DSL",
            AotTool::TileLang => "TileLang",
        }
    }
}

/// Triton or CuTe DSL kernels compiled ahead of time by the embedded Python scripts, which print
/// one JSON report (kernels with their files and resources, or errors at the version's lines).
pub(super) fn build_python_aot(
    s: &mut Session,
    tool: AotTool,
    arch: &str,
    detail: &mut BuildDetail,
) -> Result<Files, ()> {
    let tc = s.env.toolchain;
    let python = &tc.python.as_ref().expect("checked").path;
    let name = match tool {
        AotTool::Triton => TRITON_AOT,
        AotTool::Cute => CUTE_AOT,
        AotTool::TileLang => TILELANG_AOT,
    };
    let script = s.tmp.join(name);
    crate::assets::write_python(&s.tmp).map_err(|_| ())?;
    let out_dir = s.tmp.join("aot");
    // CuTe DSL compiles for the architecture-specific target (sm_90a on Hopper).
    let target = match tool {
        AotTool::Cute | AotTool::TileLang if !arch.ends_with('a') => format!("{}a", arch.trim_start_matches("sm_")),
        _ => arch.trim_start_matches("sm_").to_string(),
    };
    detail.arch = format!("sm_{target}");
    let mut cmd = Command::new(python);
    cmd.arg(s.rel(&script))
        .arg("--version-file")
        .arg(&s.v.path)
        .arg("--arch")
        .arg(target)
        .arg("--out")
        .arg(s.rel(&out_dir));
    if let Some(ptxas) = tc.ptxas.as_ref().map(|t| &t.path) {
        cmd.env("TRITON_PTXAS_PATH", ptxas).env("TRITON_PTXAS_BLACKWELL_PATH", ptxas);
    }
    cmd.env("TRITON_CACHE_DIR", s.env.ws.state_dir().join("triton-cache")).env("TRITON_DEFAULT_FP_FUSION", "1");
    if let Some(bin) = tc.nvdisasm.as_ref().or(tc.ptxas.as_ref()).and_then(|t| t.path.parent()) {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let joined = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path)));
        if let Ok(p) = joined {
            cmd.env("PATH", p);
        }
    }
    if let Some(launch) = s.launch.as_ref().filter(|_| tool == AotTool::Triton) {
        let path = s.tmp.join("launch.json");
        std::fs::write(&path, launch.to_string()).map_err(|_| ())?;
        cmd.arg("--launch-json").arg(s.rel(&path));
    }
    // The script imports the version, so it runs the version's top-level code: in the sandbox
    // (RUNG_SANDBOX=strict), with its temporary files in the build's own folder.
    let scratch = s.env.ws.state_dir().join("tmp");
    if let Some(sandbox) = crate::sandbox::for_workspace(&s.env.ws.root, Some(python), &scratch) {
        cmd.env("TMPDIR", &s.tmp);
        sandbox.apply(&mut cmd, crate::sandbox::Seal::Itself);
    }
    // A problem folder's own modules (GPU MODE's task.py, utils.py) import from its root, ahead
    // of the user's own PYTHONPATH (a DSL installed with `pip --target` is found through it).
    let mut path = std::ffi::OsString::from(&s.env.ws.root);
    if let Some(user) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(user);
    }
    cmd.env("PYTHONPATH", path);
    cmd.current_dir(&s.env.ws.root);
    let out = match s.run(cmd) {
        Ok(o) => o,
        Err(e) => {
            s.diagnostics.push(Diagnostic::error(&s.v.path, Pos::WHOLE_FILE, e.to_string()));
            return Err(());
        }
    };
    let report: AotReport = match serde_json::from_slice(&out.stdout) {
        Ok(r) => r,
        Err(_) => {
            // The script itself broke: show Python's own words.
            let text = String::from_utf8_lossy(&out.stderr).into_owned();
            let mut ds = PythonTraceback.parse(&text, &s.ctx);
            if ds.is_empty() {
                let mut d = Diagnostic::error(
                    &s.v.path,
                    Pos::WHOLE_FILE,
                    format!("the {} compiler produced no result", tool.name()),
                );
                d.tool_text = Some(text);
                ds.push(d);
            }
            s.diagnostics.extend(ds);
            return Err(());
        }
    };
    for e in &report.errors {
        let ptxas = ptxas_diagnostics(s, e);
        // No line of its own: the first ptxas error placed in the version says where.
        let placed = ptxas.iter().find(|d| d.severity == Severity::Error && d.line > 0 && d.file == s.v.path);
        let pos = match (e.lineno, placed) {
            (None, Some(d)) => Pos::new(d.line, d.column),
            _ => Pos::new(e.lineno.unwrap_or(0), e.col.unwrap_or(0)),
        };
        let head = e.message.lines().last().unwrap_or(&e.message).trim();
        // The message may name its type already ("SyntaxError: expected ':'"): say it once.
        let head = head.strip_prefix(&format!("{}: ", e.kind)).unwrap_or(head);
        let msg = match &e.kernel {
            Some(k) => format!("{}: {head} (in {k})", e.kind),
            None => format!("{}: {head}", e.kind),
        };
        let mut d = Diagnostic::error(&s.v.path, pos, msg);
        d.tool_text = Some(match e.traceback.as_deref().filter(|t| !t.is_empty()) {
            Some(tb) => format!("{}\n{tb}", e.message),
            None => e.message.clone(),
        });
        s.diagnostics.push(d);
        s.diagnostics.extend(ptxas);
    }
    detail.notes.extend(report.warnings.iter().cloned());
    if !report.errors.is_empty() || !out.status.success() {
        if report.errors.is_empty() {
            let mut d = Diagnostic::error(
                &s.v.path,
                Pos::WHOLE_FILE,
                format!("the {} compiler failed (exit {:?})", tool.name(), out.status.code()),
            );
            d.tool_text = Some(String::from_utf8_lossy(&out.stderr).into_owned());
            s.diagnostics.push(d);
        }
        return Err(());
    }
    if report.kernels.is_empty() {
        let (what, help) = match tool {
            AotTool::Triton => (
                "no @triton.jit kernel found",
                "a Triton version defines at least one @triton.jit kernel and a run(...) that launches it",
            ),
            AotTool::Cute => (
                "no @cute.jit function found",
                "a CuTe DSL version defines a @cute.jit function that launches its @cute.kernel, and a run(...)",
            ),
            AotTool::TileLang => (
                "no TileLang kernel found",
                "a TileLang version defines a @tilelang.jit factory (or a @T.prim_func) and a run(...) that calls it",
            ),
        };
        s.diagnostics.push(Diagnostic::error(&s.v.path, Pos::new(1, 1), what).with_help(help));
        return Err(());
    }
    if let Some(launch) = s.launch.as_ref().filter(|_| report.kernels.iter().any(|k| k.captured)) {
        detail.notes.insert(0, format!("kernels captured from run() at {}", launch["sizes"]));
    }
    let mut files: Files = Vec::new();
    for k in &report.kernels {
        for (kind, path) in &k.files {
            if kind == "meta" || kind == "source" {
                continue;
            }
            // TileLang's generated CUDA and its TIR script keep their languages' extensions.
            let ext = match kind.as_str() {
                "ptxas" => "ptxas.txt".to_string(),
                "cuda" => "cu".to_string(),
                "tir" => "tir.py".to_string(),
                _ => kind.clone(),
            };
            if let Ok(bytes) = std::fs::read(s.env.ws.root.join(path)) {
                files.push((format!("{}.{ext}", k.name), kind.clone(), bytes));
            }
        }
        detail.notes.extend(k.notes.iter().map(|n| format!("{}: {n}", k.name)));
        let read = |kind: &str| k.files.get(kind).and_then(|p| std::fs::read_to_string(s.env.ws.root.join(p)).ok());
        let ptxas = read("ptxas").map(|t| parse_resources(&t)).unwrap_or_default();
        let cubin = k.files.get("cubin").and_then(|c| cubin_resources(tc, &s.env.ws.root.join(c))).unwrap_or_default();
        detail.kernels.push(KernelBuild {
            resources: aot_resources(k, &combine(&ptxas, &cubin), arch),
            num_warps: k.num_warps,
            num_stages: k.num_stages,
        });
    }
    Ok(files)
}

/// An error's ptxas messages, parsed as nvcc's are and placed at the version's lines through the
/// `.loc` directives of the PTX ptxas rejected.
fn ptxas_diagnostics(s: &Session, e: &AotError) -> Vec<Diagnostic> {
    let Some(log) = e.ptxas_log.as_deref() else { return vec![] };
    let mut ctx = s.ctx.clone();
    if let Some(ptx) = e.files.get("failed_ptx").and_then(|p| std::fs::read_to_string(s.env.ws.root.join(p)).ok()) {
        // The only PTX the messages can cite: whatever temporary name ptxas printed.
        ctx.ptx = BTreeMap::from([(String::from("failed.ptx"), PtxLineMap::new(&ptx))]);
    }
    PtxasOutput.parse(log, &ctx)
}

/// The build result of a Triton version compiled at launch, made after the run rung captured
/// the kernels that really launched (their PTX and cubin, now in `.rung/dumps/<id>/`): those are
/// its artefacts, stored like any build's, with each kernel's resources read from its cubin by
/// `cuobjdump --dump-resource-usage`. It replaces the placeholder recorded before the run.
pub fn captured(
    ws: &Workspace,
    tc: &Toolchain,
    arch: &str,
    kernels: &[crate::model::protocol::CapturedKernel],
) -> Option<(Verdict, String, BuildDetail)> {
    if kernels.is_empty() {
        return None;
    }
    let objects = Objects::new(&ws.state_dir());
    let compiler = kernels.iter().find_map(|k| k.compiler.clone()).unwrap_or_else(|| "triton".into());
    let mut detail = BuildDetail {
        compiler: compiler.clone(),
        arch: arch.into(),
        arch_reason: "GPU".into(),
        ahead_of_time: false,
        cached: false,
        cache_key: String::new(),
        commands: vec![],
        artefacts: vec![],
        kernels: vec![],
        notes: vec![format!(
            "compiled by {compiler} at launch on the GPU; captured by the run rung: these are the kernels that ran"
        )],
        phases: Default::default(),
    };
    for k in kernels {
        for path in [&k.ptx, &k.cubin].into_iter().flatten() {
            let full = ws.root.join(path);
            let Ok(bytes) = std::fs::read(&full) else { continue };
            let Ok(hash) = objects.put(&bytes) else { continue };
            let name = full.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            let kind = full.extension().map(|e| e.to_string_lossy().to_string()).unwrap_or_default();
            detail.artefacts.push(Artefact { name, kind, hash, bytes: bytes.len() as u64 });
        }
        let resources = k
            .cubin
            .as_ref()
            .and_then(|c| cubin_resources(tc, &ws.root.join(c)))
            .and_then(|all| all.into_iter().find(|r| r.name == k.name))
            .unwrap_or_else(|| KernelResources { name: k.name.clone(), arch: arch.into(), ..Default::default() });
        detail.kernels.push(KernelBuild { resources, num_warps: k.num_warps, num_stages: None });
    }
    let names: Vec<String> =
        detail.kernels.iter().map(|k| format!("{} ({} regs)", k.resources.name, k.resources.registers)).collect();
    let summary = format!("{compiler} at launch for {arch}: {} kernel(s) captured: {}", names.len(), names.join(", "));
    Some((Verdict::Pass, summary, detail))
}

/// An ahead-of-time kernel's resources from its reports (`device`, parsed and combined): the
/// largest figure over the device kernels it launches (a CuTe DSL function may launch several),
/// and its shared memory as the compiler's metadata gives it, else the static shared memory
/// plus what its launch asks for.
fn aot_resources(k: &AotKernel, device: &[KernelResources], arch: &str) -> KernelResources {
    let max = |f: fn(&KernelResources) -> u32| device.iter().map(f).max().unwrap_or(0);
    let launched = |r: &KernelResources| {
        let dynamic = k.device_kernels.iter().find(|d| d.name == r.name).and_then(|d| d.dynamic_shared);
        r.shared_bytes + dynamic.unwrap_or(0)
    };
    KernelResources {
        name: k.name.clone(),
        arch: k.gpu_name.clone().or_else(|| device.first().map(|r| r.arch.clone())).unwrap_or_else(|| arch.to_string()),
        registers: max(|r| r.registers),
        barriers: max(|r| r.barriers),
        shared_bytes: k.shared.unwrap_or_else(|| device.iter().map(launched).max().unwrap_or(0)),
        stack_frame_bytes: max(|r| r.stack_frame_bytes),
        spill_store_bytes: max(|r| r.spill_store_bytes),
        spill_load_bytes: max(|r| r.spill_load_bytes),
        cmem0_bytes: device.iter().filter_map(|r| r.cmem0_bytes).max(),
    }
}

/// Each kernel's resources in a cubin, from `cuobjdump --dump-resource-usage`
/// (`Function k: REG:26 STACK:0 SHARED:0 LOCAL:0 ...`).
pub fn cubin_resources(tc: &Toolchain, cubin: &Path) -> Option<Vec<KernelResources>> {
    let tool = tc.cuobjdump.as_ref()?;
    let out = std::process::Command::new(&tool.path).arg("--dump-resource-usage").arg(cubin).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Some(parse_resource_usage(&text))
}
