//! A kernel workspace on disk: its format, problem, reference, user checks, context and versions.
//!
//! Three layouts open unmodified (DESIGN.md, "Workspace"): rung's own (rung.toml), a GPU MODE
//! reference-kernels problem folder (reference.py with `ref_kernel` + task.yml) and a KernelBench
//! problem (a .py with `Model` and `get_inputs`). Versions are the files of `versions/`; a
//! version's id is its `vNNN` prefix, so renaming `v002-vec.cu` to `v002-float4.cu` keeps its
//! history.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::diag::{Diagnostic, Pos};
use crate::spec::{self, Spec, SpecError};

pub use crate::model::version::{Format, VersionFile, VersionKind};

pub const VERSIONS_DIR: &str = "versions";
pub const CONTEXT_DIR: &str = "context";
pub const STATE_DIR: &str = ".rung";

/// Why a file is no version rung can climb.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KindError {
    #[error("versions are .cu, .ptx or .py files")]
    Extension,
    #[error("a Python version must import triton, cutlass (CuTe DSL), tilelang or torch")]
    NoKernelImport,
}

/// Tells a version's kind from its extension and, for Python, its imports.
pub fn detect_kind(path: &Path, source: &str) -> Result<VersionKind, KindError> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("cu") => Ok(if defines_host_entry(source) { VersionKind::CudaHost } else { VersionKind::Cuda }),
        Some("ptx") => Ok(VersionKind::Ptx),
        Some("py") => {
            let imports = |m: &str| {
                source.lines().any(|l| {
                    let l = l.trim_start();
                    l.starts_with(&format!("import {m}")) || l.starts_with(&format!("from {m}"))
                })
            };
            if imports("cutlass") {
                Ok(VersionKind::CuteDsl)
            } else if imports("tilelang") {
                Ok(VersionKind::TileLang)
            } else if imports("triton") {
                Ok(VersionKind::Triton)
            } else if imports("torch") {
                Ok(VersionKind::PyTorch)
            } else {
                Err(KindError::NoKernelImport)
            }
        }
        _ => Err(KindError::Extension),
    }
}

fn defines_host_entry(source: &str) -> bool {
    crate::launch::find_signatures(source).0.iter().any(|s| s.host_entry)
}

/// An opened workspace. Opening never modifies the folder.
#[derive(Debug)]
pub struct Workspace {
    pub root: PathBuf,
    pub format: Format,
    /// rung.toml, for the rung format.
    pub spec: Option<Spec>,
    /// The trusted reference, relative to the root.
    pub reference: Option<PathBuf>,
    /// The user's own rungs (`checks.py`), relative to the root.
    pub checks: Option<PathBuf>,
    pub context: Option<PathBuf>,
    pub versions: Vec<VersionFile>,
    /// Problems found while discovering versions (duplicate ids, unknown kinds...).
    pub diagnostics: Vec<Diagnostic>,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(
        "{}: not a kernel workspace (no rung.toml, no GPU MODE reference.py + task.yml, no KernelBench problem file)\n  help: create one with `rung new {}` or try `rung demo`",
        .0.display(), .0.display()
    )]
    NotAWorkspace(PathBuf),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

impl OpenError {
    /// The errors as diagnostics, each at its own place (rung.toml's at their lines).
    pub fn diagnostics(&self, root: &Path) -> Vec<Diagnostic> {
        match self {
            OpenError::Spec(e) => e.diagnostics(),
            OpenError::Io { path, source } => {
                vec![Diagnostic::error(path.clone(), Pos::WHOLE_FILE, source.to_string())]
            }
            OpenError::NotAWorkspace(_) => {
                vec![Diagnostic::error(root.to_path_buf(), Pos::WHOLE_FILE, self.to_string())]
            }
        }
    }

    /// A workspace whose rung.toml is there but does not load: fixable in place, so a watch or
    /// the TUI opens it as [`Workspace::broken`] and waits for the fix.
    pub fn is_fixable(&self) -> bool {
        matches!(self, OpenError::Spec(_))
    }
}

impl Workspace {
    /// A workspace whose rung.toml does not load: no versions, its errors as the diagnostics.
    /// The watcher and the TUI hold it until a save makes [`Workspace::open`] succeed.
    pub fn broken(root: &Path, diagnostics: Vec<Diagnostic>) -> Workspace {
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        Workspace {
            root,
            format: Format::Rung,
            spec: None,
            reference: None,
            checks: None,
            context: None,
            versions: vec![],
            diagnostics,
        }
    }

    /// Opens the workspace at `root` (a folder, or a KernelBench problem file).
    pub fn open(root: &Path) -> Result<Workspace, OpenError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| OpenError::Io { path, source }
        };
        let root = std::fs::canonicalize(root).map_err(io(root))?;
        let (root, format, reference) = detect_format(&root)?;
        let spec = match format {
            Format::Rung => Some(Spec::load(&root)?),
            _ => None,
        };
        let reference = reference.or_else(|| {
            spec.as_ref()
                .and_then(|s| s.reference.clone())
                .or_else(|| ["reference.cu", "reference.py"].iter().map(PathBuf::from).find(|p| root.join(p).is_file()))
        });
        let mut diagnostics = Vec::new();
        let mut reference = reference;
        if let (Some(s), Some(r)) = (&spec, &reference)
            && !root.join(r).is_file()
        {
            // At `reference = ...` in rung.toml, its value under the caret.
            let text = std::fs::read_to_string(&s.path).unwrap_or_default();
            let pos = text
                .lines()
                .enumerate()
                .find(|(_, l)| l.trim_start().starts_with("reference") && l.contains('='))
                .map_or(Pos::WHOLE_FILE, |(i, l)| {
                    let col = l.find('"').or_else(|| l.find('=')).map_or(1, |c| c + 1);
                    Pos::new(i as u32 + 1, col as u32)
                });
            diagnostics.push(
                Diagnostic::error(spec::FILE_NAME, pos, format!("the reference `{}` does not exist", r.display()))
                    .with_help(format!(
                        "create {} (def reference(...)), or point problem.reference in {} at the one you have",
                        r.display(),
                        spec::FILE_NAME
                    )),
            );
            // No reference at all, as far as the rungs go: each says so the same way.
            reference = None;
        } else if format == Format::Rung && reference.is_none() {
            diagnostics.push(
                Diagnostic::error(
                    spec::FILE_NAME,
                    Pos::WHOLE_FILE,
                    "no reference: rung checks every version against one",
                )
                .with_help("add reference.py (def reference(...)) or reference.cu next to rung.toml"),
            );
        }
        let checks = Some(PathBuf::from("checks.py")).filter(|p| root.join(p).is_file());
        let context = Some(PathBuf::from(CONTEXT_DIR)).filter(|p| root.join(p).is_dir());
        let versions = discover_versions(&root, format, &mut diagnostics).map_err(io(&root.join(VERSIONS_DIR)))?;
        Ok(Workspace { root, format, spec, reference, checks, context, versions, diagnostics })
    }

    pub fn state_dir(&self) -> PathBuf {
        self.root.join(STATE_DIR)
    }

    /// A build tool's time limit: rung.toml's `limits.build`, else the default.
    pub fn build_limit(&self) -> std::time::Duration {
        self.spec.as_ref().map_or(crate::spec::Limits::default().build, |s| s.limits.build)
    }

    /// A built version's dumps of one kind (`ptx`, `sass`) in `.rung/dumps/<id>/` (one per
    /// kernel for Triton), sorted: their paths relative to the root, and their text joined.
    pub fn dumps(&self, id: &str, ext: &str) -> Option<(Vec<PathBuf>, String)> {
        let files = dump_files(&self.state_dir(), id, ext);
        if files.is_empty() {
            return None;
        }
        let text = files.iter().filter_map(|p| std::fs::read_to_string(p).ok()).collect::<Vec<_>>().join("\n");
        let rel = files.iter().map(|p| p.strip_prefix(&self.root).unwrap_or(p).to_path_buf()).collect();
        Some((rel, text))
    }

    pub fn version(&self, id_or_path: &str) -> Option<&VersionFile> {
        self.versions
            .iter()
            .find(|v| v.id == id_or_path || v.path == Path::new(id_or_path))
            .or_else(|| self.versions.iter().find(|v| v.path.file_stem().is_some_and(|s| s == id_or_path)))
    }

    pub fn read_source(&self, v: &VersionFile) -> std::io::Result<String> {
        std::fs::read_to_string(self.root.join(&v.path))
    }

    /// The hash of everything at the workspace's top level that decides the reference's outputs
    /// for a seed and size: rung.toml (inputs, their init and dtype, scalars, outputs), the
    /// reference, checks.py, and every other source file beside them that the reference may
    /// import (`utils.py`, a header). Versions, `context/` and `.rung/` are not in it. A cached
    /// reference output is keyed by it: editing rung.toml's `init` must not reuse outputs drawn
    /// from the old inputs.
    pub fn problem_hash(&self) -> String {
        const SOURCES: [&str; 10] = ["toml", "py", "cu", "cuh", "h", "hpp", "ptx", "yml", "yaml", "json"];
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.root)
            .map(|d| {
                d.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_file())
                    .filter(|p| p.extension().and_then(|e| e.to_str()).is_some_and(|e| SOURCES.contains(&e)))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        let mut text = Vec::new();
        for f in files {
            text.extend_from_slice(f.file_name().map(|n| n.as_encoded_bytes()).unwrap_or_default());
            text.push(0);
            text.extend_from_slice(&std::fs::read(&f).unwrap_or_default());
            text.push(0);
        }
        crate::store::sha256_hex(&text)
    }

    /// The hash of the version's file as it is now (what results are recorded against); None
    /// when it cannot be read.
    pub fn source_hash(&self, v: &VersionFile) -> Option<String> {
        self.read_source(v).ok().map(|s| crate::store::sha256_hex(s.as_bytes()))
    }
}

fn detect_format(path: &Path) -> Result<(PathBuf, Format, Option<PathBuf>), OpenError> {
    if path.is_file() {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if is_kernelbench_problem(&text) {
            let root = path.parent().unwrap_or(Path::new("/")).to_path_buf();
            let reference = path.file_name().map(PathBuf::from);
            return Ok((root, Format::KernelBench, reference));
        }
        return Err(OpenError::NotAWorkspace(path.to_path_buf()));
    }
    if path.join(spec::FILE_NAME).is_file() {
        return Ok((path.to_path_buf(), Format::Rung, None));
    }
    let reference = path.join("reference.py");
    if reference.is_file() && path.join("task.yml").is_file() {
        return Ok((path.to_path_buf(), Format::GpuMode, Some("reference.py".into())));
    }
    // A folder holding exactly one KernelBench problem file.
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|source| OpenError::Io { path: path.to_path_buf(), source })? {
        let p = entry.map_err(|source| OpenError::Io { path: path.to_path_buf(), source })?.path();
        if p.extension().is_some_and(|e| e == "py")
            && is_kernelbench_problem(&std::fs::read_to_string(&p).unwrap_or_default())
        {
            problems.push(p);
        }
    }
    if let [one] = problems.as_slice() {
        return Ok((path.to_path_buf(), Format::KernelBench, one.file_name().map(PathBuf::from)));
    }
    Err(OpenError::NotAWorkspace(path.to_path_buf()))
}

fn is_kernelbench_problem(text: &str) -> bool {
    text.contains("class Model") && text.contains("def get_inputs") && !text.contains("class ModelNew")
}

/// Editor droppings and notes that live beside versions and matter to nothing rung does.
pub fn is_ignored_name(name: &str) -> bool {
    name.starts_with('.')
        || name.starts_with('#')
        || name.ends_with('~')
        || name == "4913" // vim probes a directory's writability with this name
        || name == "__pycache__"
        || [".swp", ".swo", ".swx", ".bak", ".orig", ".tmp", ".md", ".txt", ".json"].iter().any(|ext| name.ends_with(ext))
}

/// A C/C++/CUDA header a version may include: never a version itself, but a save of one
/// rebuilds the versions that include it.
pub fn is_header_name(name: &str) -> bool {
    [".h", ".cuh", ".hpp", ".inc"].iter().any(|ext| name.ends_with(ext))
}

/// The id of a version file: its `vNNN` prefix, else its stem.
pub fn version_id(file_name: &str) -> (String, bool) {
    let stem = file_name.split('.').next().unwrap_or(file_name);
    let digits = stem.strip_prefix('v').map(|r| r.chars().take_while(char::is_ascii_digit).count()).unwrap_or(0);
    let after = stem.get(1 + digits..1 + digits + 1);
    if digits > 0 && matches!(after, None | Some("-") | Some("_")) {
        (stem[..1 + digits].to_string(), true)
    } else {
        (stem.to_string(), false)
    }
}

fn discover_versions(root: &Path, format: Format, diags: &mut Vec<Diagnostic>) -> std::io::Result<Vec<VersionFile>> {
    let dir = root.join(VERSIONS_DIR);
    let mut files: Vec<PathBuf> = Vec::new();
    if dir.is_dir() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type()?.is_file() && !is_ignored_name(&name) && !is_header_name(&name) {
                files.push(PathBuf::from(VERSIONS_DIR).join(name));
            }
        }
    } else if format == Format::GpuMode {
        // GPU MODE keeps submissions beside the problem.
        for entry in std::fs::read_dir(root)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if name.starts_with("submission") && name.ends_with(".py") {
                files.push(PathBuf::from(name));
            }
        }
    }
    files.sort();

    let mut by_id: BTreeMap<String, VersionFile> = BTreeMap::new();
    for rel in files {
        let name = rel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let source = match std::fs::read_to_string(root.join(&rel)) {
            Ok(s) => s,
            Err(e) => {
                diags.push(Diagnostic::error(&rel, Pos::WHOLE_FILE, format!("cannot read: {e}")));
                continue;
            }
        };
        let kind = match detect_kind(&rel, &source) {
            Ok(k) => k,
            // A GPU MODE submission or KernelBench version may import only the problem's own
            // modules: it is plain PyTorch to rung.
            Err(_) if format != Format::Rung && rel.extension().is_some_and(|e| e == "py") => VersionKind::PyTorch,
            Err(why) => {
                diags.push(Diagnostic::warning(&rel, Pos::WHOLE_FILE, format!("not a version: {why}")));
                continue;
            }
        };
        let (id, prefixed) = version_id(&name);
        if !prefixed && format == Format::Rung {
            diags.push(
                Diagnostic::warning(&rel, Pos::WHOLE_FILE, format!("no vNNN prefix: the version id is `{id}`"))
                    .with_help(
                        "name versions like v004-description.cu so that renaming the description keeps the history",
                    ),
            );
        }
        if let Some(first) = by_id.get(&id) {
            diags.push(
                Diagnostic::error(
                    &rel,
                    Pos::WHOLE_FILE,
                    format!("version id `{id}` is already used by {}", first.path.display()),
                )
                .with_help("give each version its own vNNN number; this file is skipped until then"),
            );
            continue;
        }
        by_id.insert(id.clone(), VersionFile { id, path: rel, kind });
    }
    let mut versions: Vec<VersionFile> = by_id.into_values().collect();
    versions.sort_by_key(|v| natural_key(&v.id));
    Ok(versions)
}

/// Sorts `v2` before `v10`.
fn natural_key(id: &str) -> (String, u64, String) {
    let (prefix, rest) = id.split_at(id.find(|c: char| c.is_ascii_digit()).unwrap_or(id.len()));
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (prefix.to_string(), digits.parse().unwrap_or(0), rest[digits.len()..].to_string())
}

/// The next free `vNNN` id, for new versions written by rung (agent proposals, `rung new`).
pub fn next_version_id(existing: &[VersionFile]) -> String {
    let max = existing.iter().filter_map(|v| v.id.strip_prefix('v')?.parse::<u32>().ok()).max().unwrap_or(0);
    format!("v{:03}", max + 1)
}

/// The files of a version's `ext` listing (`ptx`, `sass`) under `.rung/dumps/<id>/`, sorted; empty
/// when it has none. Each kernel module of the version is one file.
pub fn dump_files(state_dir: &Path, id: &str, ext: &str) -> Vec<PathBuf> {
    let dir = state_dir.join(crate::store::DUMPS_DIR).join(id);
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> =
        entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == ext)).collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_from_the_vnnn_prefix() {
        assert_eq!(version_id("v002-vectorized.cu"), ("v002".into(), true));
        assert_eq!(version_id("v12_fast.py"), ("v12".into(), true));
        assert_eq!(version_id("v7.cu"), ("v7".into(), true));
        assert_eq!(version_id("vector.cu"), ("vector".into(), false));
        assert_eq!(version_id("v2x.cu"), ("v2x".into(), false));
    }

    #[test]
    fn ignores_editor_files_and_headers() {
        for n in [".v001.cu.swp", "v001.cu~", "#v001.cu#", "4913", "notes.md", ".common.cuh.swp"] {
            assert!(is_ignored_name(n), "{n}");
        }
        assert!(!is_ignored_name("v001.cu"));
        // A header is no version, and not ignored either: saving it rebuilds its includers.
        assert!(is_header_name("common.cuh") && !is_ignored_name("common.cuh"));
        assert!(!is_header_name("v001.cu"));
    }

    #[test]
    fn kind_names_match_their_json() {
        for k in [
            VersionKind::Cuda,
            VersionKind::CudaHost,
            VersionKind::Ptx,
            VersionKind::Triton,
            VersionKind::CuteDsl,
            VersionKind::TileLang,
            VersionKind::PyTorch,
        ] {
            assert_eq!(serde_json::to_value(k).unwrap(), k.name(), "{k:?}");
        }
    }

    #[test]
    fn natural_order() {
        let mut ids = vec!["v10", "v2", "v001", "alpha"];
        ids.sort_by_key(|i| natural_key(i));
        assert_eq!(ids, vec!["alpha", "v001", "v2", "v10"]);
    }
}
