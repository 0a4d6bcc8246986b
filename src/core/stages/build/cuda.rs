//! A `.cu` or `.ptx` version built: nvcc (or NVRTC) and ptxas, each tool's output parsed into
//! diagnostics and per-kernel resources; its SASS listing follows the rung ([`super::sass`]).

use std::path::Path;
use std::process::Command;

pub use crate::model::build::{BuildDetail, KernelBuild};
use crate::parsers::{HostCompiler, HostLinker, NvccFrontend, NvlinkOutput, PtxasOutput, parse_resources};
use crate::workspace::VersionKind;

use super::*;

pub(super) fn build_cuda(
    s: &mut Session,
    arch: &str,
    flags: &[String],
    use_nvrtc: bool,
    detail: &mut BuildDetail,
) -> Result<Files, ()> {
    let tc = s.env.toolchain;
    let id = s.v.id.clone();
    let ptx_path = s.tmp.join(format!("{id}.ptx"));
    let cubin_path = s.tmp.join(format!("{id}.cubin"));
    let virt = arch.replacen("sm_", "compute_", 1);
    let mut files: Files = Vec::new();
    // rung's own headers (the tracer) after the version's folder, so a file of the user's with
    // the same name wins.
    let include = crate::assets::write_include(&s.tmp).map_err(|_| ())?;
    let include_flag = match crate::assets::nvcc_include_flag(&include, &s.env.ws.root) {
        Ok(f) => f,
        Err(why) => {
            s.diagnostics.push(Diagnostic::error(&s.v.path, Pos::WHOLE_FILE, why.to_string()));
            return Err(());
        }
    };

    if s.v.kind == VersionKind::Ptx {
        // The version is the PTX: ptxas cites it by its own path and line.
        let mut cmd = Command::new(&tc.ptxas.as_ref().expect("checked").path);
        cmd.arg(format!("-arch={arch}"))
            .args(["-v", "-warn-spills", "-lineinfo", "-o"])
            .arg(s.rel(&cubin_path))
            .arg(&s.v.path);
        let out = s.step(cmd, &[&PtxasOutput])?;
        detail.kernels = kernels_from(&String::from_utf8_lossy(&out.stderr));
        let ptx = std::fs::read(s.env.ws.root.join(&s.v.path)).map_err(|_| ())?;
        files.push((format!("{id}.ptx"), "ptx".into(), ptx));
    } else {
        if use_nvrtc {
            let flags: Vec<String> = flags.iter().cloned().chain([include_flag.clone()]).collect();
            nvrtc_ptx(s, &virt, &flags, &ptx_path)?;
        } else {
            let nvcc = &tc.nvcc.as_ref().expect("checked").path;
            let mut cmd = Command::new(nvcc);
            cmd.arg("-ptx")
                .arg(format!("-arch={virt}"))
                .args(["-lineinfo", "-O3", "-std=c++17"])
                .args(flags)
                .arg(&include_flag)
                .arg("-o")
                .arg(s.rel(&ptx_path))
                .arg(&s.v.path);
            s.step_reading_ptx(cmd, &[&NvccFrontend, &HostCompiler, &PtxasOutput, &NvlinkOutput], Some(&ptx_path))?;
        }
        let ptx = std::fs::read(&ptx_path).map_err(|_| ())?;
        let mut cmd = Command::new(&tc.ptxas.as_ref().expect("checked").path);
        cmd.arg(format!("-arch={arch}"))
            .args(["-v", "-warn-spills", "-lineinfo", "-o"])
            .arg(s.rel(&cubin_path))
            .arg(s.rel(&ptx_path));
        let out = s.step(cmd, &[&PtxasOutput])?;
        detail.kernels = kernels_from(&String::from_utf8_lossy(&out.stderr));
        files.push((format!("{id}.ptx"), "ptx".into(), ptx));

        if s.v.kind == VersionKind::CudaHost {
            let so = s.tmp.join(format!("lib{id}.so"));
            let nvcc = &tc.nvcc.as_ref().expect("checked").path;
            let mut cmd = Command::new(nvcc);
            // The CUDA runtime beside nvcc: a pip-installed toolchain keeps it in lib/, where
            // nvcc's own link line does not look.
            if let Some(root) = nvcc.parent().and_then(Path::parent) {
                // nvcc splits -L (and -Xlinker) values at commas; the host linker also searches
                // LIBRARY_PATH, which is split at colons only.
                let mut searched: Vec<PathBuf> = Vec::new();
                for lib in ["lib", "lib64"]
                    .map(|l| root.join(l))
                    .into_iter()
                    .filter(|l| l.join("libcudart_static.a").is_file())
                {
                    if lib.to_string_lossy().contains(',') {
                        searched.push(lib);
                    } else {
                        cmd.arg(format!("-L{}", lib.display()));
                    }
                }
                if !searched.is_empty() {
                    searched.extend(std::env::var_os("LIBRARY_PATH").iter().flat_map(std::env::split_paths));
                    if let Ok(joined) = std::env::join_paths(searched) {
                        cmd.env("LIBRARY_PATH", joined);
                    }
                }
            }
            // The version's own translation unit plus the packed entry the worker calls
            // (`hostentry::PACKED_SHIM`): the shim includes the version, so its quoted
            // includes resolve as they do for the version.
            let shim = s.tmp.join(format!("{id}-packed.cu"));
            std::fs::write(&shim, crate::hostentry::packed_shim(&s.v.path)).map_err(|_| ())?;
            cmd.args(["-shared", "-Xcompiler", "-fPIC"])
                .arg(format!("-gencode=arch={virt},code={arch}"))
                .args(["-lineinfo", "-O3", "-std=c++17", "-I."])
                .args(flags)
                .arg(&include_flag)
                .arg("-o")
                .arg(s.rel(&so))
                .arg(s.rel(&shim));
            s.step(cmd, &[&NvccFrontend, &HostCompiler, &PtxasOutput, &NvlinkOutput, &HostLinker])?;
            files.push((format!("lib{id}.so"), "so".into(), std::fs::read(&so).map_err(|_| ())?));
        }
    }
    // The SASS listing is made after the rung ([`super::sass`]): the run needs the cubin only.
    let cubin = std::fs::read(&cubin_path).map_err(|_| ())?;
    files.push((format!("{id}.cubin"), "cubin".into(), cubin));
    Ok(files)
}

/// The front end through NVRTC, in a child process whose library path lets NVRTC find its
/// builtins. Its log is in nvcc's format, naming the version by its workspace path.
pub(super) fn nvrtc_ptx(s: &mut Session, virt: &str, flags: &[String], ptx_path: &Path) -> Result<(), ()> {
    let tc = s.env.toolchain;
    let lib = tc.nvrtc_lib_dir.as_ref().expect("checked");
    let exe = std::env::current_exe().map_err(|_| ())?;
    let mut cmd = Command::new(exe);
    cmd.arg("internal-nvrtc").arg(&s.v.path).arg("--out").arg(s.rel(ptx_path)).arg("--");
    cmd.arg(format!("--gpu-architecture={virt}")).args(["-lineinfo", "-std=c++17"]);
    if let Some(dir) = s.v.path.parent() {
        cmd.arg(format!("-I{}", dir.display()));
    }
    if let Some(include) = lib.parent().map(|p| p.join("include")).filter(|p| p.is_dir()) {
        cmd.arg(format!("-I{}", include.display()));
    }
    cmd.args(flags);
    let mut paths = vec![lib.clone()];
    paths.extend(std::env::split_paths(&std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default()));
    if let Ok(joined) = std::env::join_paths(paths) {
        cmd.env("LD_LIBRARY_PATH", joined);
    }
    s.step(cmd, &[&NvccFrontend]).map(|_| ())
}

pub(super) fn kernels_from(ptxas_stderr: &str) -> Vec<KernelBuild> {
    parse_resources(ptxas_stderr)
        .into_iter()
        .map(|r| KernelBuild { resources: r, num_warps: None, num_stages: None })
        .collect()
}

/// The arguments `run(...)` gets at the first benchmark size (else the last test size), for
/// triton_aot.py to call it with fake tensors and compile the kernels it really launches.
pub(super) fn launch_json(spec: &crate::spec::Spec, source: &str) -> Option<serde_json::Value> {
    let sizes = spec.bench_sizes.first().or(spec.test_sizes.last())?;
    let (params, _) = crate::stages::prepare::python_def_params(source, "run")?;
    let names: Vec<String> = params.into_iter().map(|(n, _)| n).collect();
    let args = crate::stages::call_args(spec, &names, sizes, |t, shape| crate::model::protocol::TensorFile {
        path: Default::default(),
        dtype: t.dtype,
        shape,
    })
    .ok()?;
    Some(serde_json::json!({ "args": args, "sizes": sizes }))
}
