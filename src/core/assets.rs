//! The files rung carries inside its binary: the Python worker and its problem judge, the
//! ahead-of-time compile scripts and the modules they share, and rung's own PTX kernels (the L2
//! flush and the copy ceiling). They are written out where they run; nothing else is read from
//! the source tree at run time.

use std::path::Path;

use include_dir::{Dir, include_dir};

/// Every Python file rung runs (`assets/python`): the worker (`rung_worker.py`), the problem
/// judge (`rung_problem.py`), the ahead-of-time scripts (`triton_aot.py`, `cute_aot.py`) and the
/// modules they import (`aot_common.py`, `triton_kernels.py`, `triton_capture.py`, ...). They
/// import one another, so they are always written out together ([`write_python`]).
static PYTHON: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../assets/python");

/// The Python worker's entry file.
pub const PYTHON_WORKER: &str = "rung_worker.py";
/// Triton's ahead-of-time compile script.
pub const TRITON_AOT: &str = "triton_aot.py";
/// CuTe DSL's ahead-of-time compile script.
pub const CUTE_AOT: &str = "cute_aot.py";
/// TileLang's ahead-of-time compile script.
pub const TILELANG_AOT: &str = "tilelang_aot.py";

/// Writes every Python file into `dir` (created if missing); a file that already holds the same
/// text is left alone, so a running worker's files are not rewritten under it.
pub fn write_python(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for f in PYTHON.files().filter(|f| f.path().extension().is_some_and(|e| e == "py")) {
        let path = dir.join(f.path());
        if std::fs::read(&path).is_ok_and(|old| old == f.contents()) {
            continue;
        }
        std::fs::write(path, f.contents())?;
    }
    Ok(())
}

/// One text over every Python file, in name order: what a build cache keys on, so a change to
/// any script or module the compile imports rebuilds.
pub fn python_text() -> String {
    let mut files: Vec<_> = PYTHON.files().filter(|f| f.path().extension().is_some_and(|e| e == "py")).collect();
    files.sort_by_key(|f| f.path());
    files.iter().map(|f| f.contents_utf8().unwrap_or_default()).collect()
}

/// rung's intra-kernel tracer (`#include <rung_trace.cuh>`): every CUDA build finds it, and its
/// markers compile to nothing unless rung builds the traced variant (`-DRUNG_TRACE`).
pub const TRACE_HEADER: &str = include_str!("../../assets/include/rung_trace.cuh");
/// Its file name.
pub const TRACE_HEADER_NAME: &str = "rung_trace.cuh";

/// Writes rung's headers into `dir/include` and returns that folder (the `-I` of a CUDA build).
pub fn write_include(dir: &Path) -> std::io::Result<std::path::PathBuf> {
    let include = dir.join("include");
    std::fs::create_dir_all(&include)?;
    std::fs::write(include.join(TRACE_HEADER_NAME), TRACE_HEADER)?;
    Ok(include)
}

/// The `-I` flag that gives nvcc the folder `include` for a build run in `cwd`. nvcc splits an
/// option's value at commas (`-I/a,b` is `/a` and `b`), so a workspace under a folder with a
/// comma in its name gets the folder relative to `cwd`; when no spelling avoids the comma, the
/// error says what to rename.
pub fn nvcc_include_flag(include: &Path, cwd: &Path) -> Result<String, CommaInPath> {
    let rel = include.strip_prefix(cwd).ok().filter(|r| !r.as_os_str().is_empty());
    let path = match rel {
        Some(r) if !r.to_string_lossy().contains(',') => r,
        _ => include,
    };
    if path.to_string_lossy().contains(',') {
        return Err(CommaInPath(include.to_path_buf()));
    }
    Ok(format!("-I{}", path.display()))
}

/// A folder nvcc cannot be given with `-I`: its path has a comma however it is spelt.
#[derive(Debug, thiserror::Error)]
#[error("nvcc splits an -I folder at commas, and {} has one: rename the folder that holds the comma", .0.display())]
pub struct CommaInPath(pub std::path::PathBuf);

/// rung's copy and L2 flush kernels (assets/kernels/copy.cu), as PTX.
pub const COPY_PTX: &str = include_str!("../../assets/kernels/copy.ptx");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvcc_gets_rungs_include_folder_without_a_comma_where_one_can_be_avoided() {
        let ws = Path::new("/tmp/kernels,v2/ws");
        let inc = ws.join(".rung/tmp/v002-1/include");
        assert_eq!(nvcc_include_flag(&inc, ws).unwrap(), "-I.rung/tmp/v002-1/include");
        assert_eq!(nvcc_include_flag(Path::new("/tmp/x/include"), ws).unwrap(), "-I/tmp/x/include");
        // Under the workspace, but the comma is inside it: nothing avoids it.
        let err = nvcc_include_flag(&ws.join("a,b/include"), ws).unwrap_err().to_string();
        assert!(err.contains("/tmp/kernels,v2/ws/a,b/include has one"), "{err}");
        assert!(nvcc_include_flag(&inc, Path::new("/elsewhere")).is_err());
    }

    #[test]
    fn every_python_module_an_embedded_script_imports_is_embedded() {
        let names: Vec<String> = PYTHON.files().map(|f| f.path().display().to_string()).collect();
        for f in PYTHON.files().filter(|f| f.path().extension().is_some_and(|e| e == "py")) {
            let text = f.contents_utf8().unwrap();
            for line in text.lines().map(str::trim_start) {
                let module = line
                    .strip_prefix("from ")
                    .or_else(|| line.strip_prefix("import "))
                    .and_then(|rest| rest.split([' ', ',', '.']).next())
                    .unwrap_or("");
                let ours = ["aot_common", "rung_problem", "rung_worker"].contains(&module)
                    || module.starts_with("triton_aot")
                    || module.starts_with("triton_kernels")
                    || module.starts_with("triton_capture")
                    || module.starts_with("cute_");
                if ours {
                    assert!(
                        names.contains(&format!("{module}.py")),
                        "{} imports {module}, which is not embedded",
                        f.path().display()
                    );
                }
            }
        }
        for script in [PYTHON_WORKER, TRITON_AOT, CUTE_AOT, TILELANG_AOT, "rung_problem.py", "aot_common.py"] {
            assert!(names.iter().any(|n| n == script), "{script} is not embedded");
        }
    }

    #[test]
    fn writing_the_python_files_puts_every_module_beside_the_scripts() {
        let dir = tempfile::tempdir().unwrap();
        write_python(dir.path()).unwrap();
        for name in [PYTHON_WORKER, TRITON_AOT, CUTE_AOT, "aot_common.py", "triton_kernels.py", "triton_capture.py"] {
            assert!(dir.path().join(name).is_file(), "{name} was not written");
        }
        assert!(python_text().contains("def supervise("));
    }
}
