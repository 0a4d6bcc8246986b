//! Finding the tools rung drives: the CUDA toolchain, Python with its kernel DSLs, the profilers.
//!
//! CUDA is looked for, in order, in `CUDA_HOME`/`CUDA_PATH`, on `PATH`, in `/usr/local/cuda`,
//! in rung's own environment (made by `rung setup`) and in the current Python's
//! `nvidia/cu13` wheels. The first folder holding `nvcc` wins for the compiler tools; NVRTC and
//! the profilers are looked up the same way, separately.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a tool was found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Tool {
    pub path: PathBuf,
    /// The tool's own version string, e.g. `13.0.88`.
    pub version: Option<String>,
    /// How it was found: `CUDA_HOME`, `PATH`, `/usr/local/cuda`, `rung env`, `python wheels`.
    pub found_via: String,
}

/// A Python interpreter and the kernel packages it can import.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PythonEnv {
    pub path: PathBuf,
    pub version: String,
    /// Package → version, for the packages rung uses that are installed.
    pub packages: BTreeMap<String, String>,
    pub found_via: String,
}

/// The packages rung looks for, with the import name and what they enable.
pub const PYTHON_PACKAGES: &[(&str, &str, &str)] = &[
    ("numpy", "numpy", "Python references and user checks (checks.py)"),
    ("triton", "triton", "Triton versions (build, and checks in the interpreter without a GPU)"),
    ("torch", "torch", "PyTorch, GPU MODE and KernelBench versions on a GPU"),
    ("cutlass", "nvidia-cutlass-dsl", "CuTe DSL versions"),
    ("tilelang", "tilelang", "TileLang versions"),
];

/// The CUDA wheels `rung setup` installs (CUDA 13.0, matching driver 580; CUPTI for timing),
/// plus Triton and numpy.
pub const SETUP_REQUIREMENTS: &[&str] = &[
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-nvrtc==13.0.88",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-cuda-cuobjdump==13.2.51",
    "nvidia-cuda-nvdisasm==13.2.51",
    // libcupti, the bench's timer on a machine with the driver but no CUDA toolkit.
    "nvidia-cuda-cupti==13.0.85",
    "triton",
    "numpy",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Toolchain {
    pub nvcc: Option<Tool>,
    pub ptxas: Option<Tool>,
    pub cuobjdump: Option<Tool>,
    pub nvdisasm: Option<Tool>,
    /// The folder holding libnvrtc.so.13 (put on LD_LIBRARY_PATH for NVRTC and its builtins).
    pub nvrtc_lib_dir: Option<PathBuf>,
    /// libcupti, whose activity records time benches (events are the fallback).
    #[serde(default)]
    pub cupti: Option<PathBuf>,
    pub ncu: Option<Tool>,
    pub compute_sanitizer: Option<Tool>,
    pub python: Option<PythonEnv>,
}

/// rung's own folder for its environment and caches: `RUNG_HOME`, else `~/.cache/rung`.
pub fn rung_home() -> PathBuf {
    if let Some(h) = std::env::var_os("RUNG_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    dirs::cache_dir().unwrap_or_else(std::env::temp_dir).join("rung")
}

/// The virtual environment made by `rung setup` (a link to the newest complete one).
pub fn rung_env() -> PathBuf {
    rung_home().join("env")
}

fn python_in(env: &Path) -> PathBuf {
    env.join("bin").join("python")
}

/// `site-packages/nvidia/cu13` inside a virtual environment, if it has one.
fn wheel_cuda_dir(env: &Path) -> Option<PathBuf> {
    let lib = env.join("lib");
    std::fs::read_dir(&lib).ok()?.flatten().map(|e| e.path().join("site-packages/nvidia/cu13")).find(|p| p.is_dir())
}

fn exe_in(dir: &Path, name: &str) -> Option<PathBuf> {
    let p = dir.join(name);
    p.is_file().then_some(p)
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).find_map(|d| exe_in(&d, name))
}

/// Candidate CUDA roots (folders with bin/ and lib/), in search order, with how each was found.
fn cuda_roots(current_python_wheels: Option<PathBuf>) -> Vec<(PathBuf, &'static str)> {
    let mut roots = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            roots.push((PathBuf::from(v), "CUDA_HOME"));
        }
    }
    if let Some(nvcc) = on_path("nvcc")
        && let Some(root) = nvcc.parent().and_then(Path::parent)
    {
        roots.push((root.to_path_buf(), "PATH"));
    }
    roots.push((PathBuf::from("/usr/local/cuda"), "/usr/local/cuda"));
    if let Some(d) = wheel_cuda_dir(&rung_env()) {
        roots.push((d, "rung env"));
    }
    if let Some(d) = current_python_wheels {
        roots.push((d, "python wheels"));
    }
    roots
}

/// A tool's version, remembered per (path, size, modification time) in rung's home so that a
/// check of an unchanged version runs no tool at all.
fn version_of(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    let stamp = format!(
        "{}|{}|{}",
        path.display(),
        meta.len(),
        meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos())
    );
    let cache_file = rung_home().join("tool-versions.json");
    let mut cache: BTreeMap<String, String> =
        std::fs::read(&cache_file).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    if let Some(v) = cache.get(&stamp) {
        return Some(v.clone());
    }
    let v = ask_version(path)?;
    cache.insert(stamp, v.clone());
    // Best effort: a lost race or a read-only home only costs a `--version` call next time.
    if std::fs::create_dir_all(rung_home()).is_ok() {
        let tmp = cache_file.with_extension(format!("tmp{}", crate::store::unique()));
        if std::fs::write(&tmp, serde_json::to_vec(&cache).unwrap_or_default()).is_ok() {
            let _ = std::fs::rename(&tmp, &cache_file);
        }
    }
    Some(v)
}

fn ask_version(path: &Path) -> Option<String> {
    let out = Command::new(path).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // "Cuda compilation tools, release 13.0, V13.0.88" / "NVIDIA (R) Nsight Compute ... Version 2025.3.1.0"
    let re = regex::Regex::new(r"(?:V|Version )(\d+(?:\.\d+)+)").expect("static regex");
    re.captures(&text).map(|c| c[1].to_string()).or_else(|| text.lines().last().map(|l| l.trim().to_string()))
}

/// A tool on PATH or in one of a few known folders (profilers live outside `bin/`).
fn loose_tool(name: &str, dirs: &[&str]) -> Option<Tool> {
    let (path, via) = on_path(name)
        .map(|p| (p, "PATH"))
        .or_else(|| dirs.iter().find_map(|d| exe_in(Path::new(d), name).map(|p| (p, "/usr/local/cuda"))))?;
    Some(Tool { version: version_of(&path), path, found_via: via.to_string() })
}

fn find_tool(roots: &[(PathBuf, &'static str)], name: &str) -> Option<Tool> {
    roots.iter().find_map(|(root, via)| {
        let path = exe_in(&root.join("bin"), name)?;
        Some(Tool { version: version_of(&path), path, found_via: via.to_string() })
    })
}

impl Toolchain {
    /// Looks for everything. Runs each tool's `--version` once and Python once (no imports of
    /// heavy packages: versions come from package metadata).
    pub fn discover() -> Toolchain {
        let python = find_python();
        let wheels = python.as_ref().and_then(|p| p.packages.get("__nvidia_cu13").map(PathBuf::from));
        let roots = cuda_roots(wheels);
        let nvcc = find_tool(&roots, "nvcc");
        // ptxas and the disassemblers from nvcc's own folder first, so versions match.
        let nvcc_roots: Vec<(PathBuf, &'static str)> = nvcc
            .as_ref()
            .and_then(|t| t.path.parent()?.parent().map(|r| (r.to_path_buf(), "nvcc's folder")))
            .into_iter()
            .chain(roots.iter().cloned())
            .collect();
        let nvrtc_lib_dir = roots.iter().find_map(|(root, _)| {
            ["lib", "lib64"]
                .iter()
                .map(|l| root.join(l))
                .find(|d| d.join("libnvrtc.so.13").is_file() || d.join("libnvrtc.so").is_file())
        });
        let cupti = cupti_in(&roots);
        let ncu = find_tool(&roots, "ncu").or_else(|| loose_tool("ncu", &["/usr/local/cuda/nsight-compute"]));
        let compute_sanitizer = find_tool(&roots, "compute-sanitizer")
            .or_else(|| loose_tool("compute-sanitizer", &["/usr/local/cuda/compute-sanitizer"]));
        let mut python = python;
        if let Some(p) = python.as_mut() {
            p.packages.remove("__nvidia_cu13");
        }
        Toolchain {
            ptxas: find_tool(&nvcc_roots, "ptxas"),
            cuobjdump: find_tool(&nvcc_roots, "cuobjdump"),
            nvdisasm: find_tool(&nvcc_roots, "nvdisasm"),
            nvcc,
            nvrtc_lib_dir,
            cupti,
            ncu,
            compute_sanitizer,
            python,
        }
    }

    /// Everything a CUDA build needs: a compiler and a disassembler.
    pub fn can_build_cuda(&self) -> bool {
        (self.nvcc.is_some() || self.nvrtc_lib_dir.is_some()) && (self.cuobjdump.is_some() || self.nvdisasm.is_some())
    }

    pub fn has_python_package(&self, import: &str) -> bool {
        self.python.as_ref().is_some_and(|p| p.packages.contains_key(import))
    }
}

/// The folders under a CUDA root where libcupti lives: the toolkit's `extras/CUPTI/lib64` (and
/// its `targets` copy), or a wheel's `lib`.
const CUPTI_DIRS: &[&str] = &["extras/CUPTI/lib64", "targets/x86_64-linux/lib", "lib64", "lib"];

fn cupti_in(roots: &[(PathBuf, &'static str)]) -> Option<PathBuf> {
    roots.iter().find_map(|(root, _)| {
        CUPTI_DIRS
            .iter()
            .flat_map(|d| ["libcupti.so.13", "libcupti.so"].map(|f| root.join(d).join(f)))
            .find(|p| p.is_file())
    })
}

/// libcupti in the CUDA roots (not asking Python): what a worker uses when `RUNG_CUPTI` is unset.
pub fn find_cupti() -> Option<PathBuf> {
    cupti_in(&cuda_roots(None))
}

/// Asks a Python for its version and rung's packages ([`crate::pyprobe`]), remembered in rung's
/// home while nothing the answer came from has changed.
fn probe_python(path: &Path, via: &str) -> Option<PythonEnv> {
    let mut map = crate::pyprobe::probe(path, Some(&rung_home()))?.answer;
    let version = map.remove("__version")?;
    Some(PythonEnv { path: path.to_path_buf(), version, packages: map, found_via: via.to_string() })
}

/// rung's own environment first, then `RUNG_PYTHON`, then `python3` on PATH.
pub fn find_python() -> Option<PythonEnv> {
    if let Some(p) = std::env::var_os("RUNG_PYTHON").filter(|p| !p.is_empty()) {
        return probe_python(Path::new(&p), "RUNG_PYTHON");
    }
    let env_python = python_in(&rung_env());
    if env_python.is_file()
        && let Some(p) = probe_python(&env_python, "rung env")
    {
        return Some(p);
    }
    on_path("python3").and_then(|p| probe_python(&p, "PATH"))
}
