//! Workspaces that ship inside the binary: `rung new --template NAME` and `rung demo`.

use std::path::{Path, PathBuf};

use include_dir::{Dir, include_dir};

static VECTOR_ADD: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../assets/templates/vector-add");
/// Laid over the vector add: a CuTe DSL version and notes on where in CUTLASS to look.
static CUTE_DSL: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../assets/templates/cute-dsl");
/// Laid over the vector add: a TileLang version and notes on where in TileLang to look.
static TILELANG: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../assets/templates/tilelang");
static DEMO: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../assets/demo");

/// The demo's template name.
pub const DEMO_TEMPLATE: &str = "rmsnorm";
pub const DEFAULT_TEMPLATE: &str = "vector-add";

/// Every template: name, one-line description, its files, and the template it is laid over.
pub fn templates() -> [(&'static str, &'static str, &'static Dir<'static>, Option<&'static Dir<'static>>); 4] {
    [
        ("vector-add", "f32 vector add: the smallest complete workspace", &VECTOR_ADD, None),
        (
            DEMO_TEMPLATE,
            "row-wise RMSNorm in f32: naive CUDA → block per row → Triton → vectorised CUDA (the demo)",
            &DEMO,
            None,
        ),
        (
            "cute-dsl",
            "the f32 vector add with a CuTe DSL version beside CUDA and Triton, and notes on where in CUTLASS to look",
            &CUTE_DSL,
            Some(&VECTOR_ADD),
        ),
        (
            "tilelang",
            "the f32 vector add with a TileLang version beside CUDA and Triton, and notes on where in TileLang to look",
            &TILELANG,
            Some(&VECTOR_ADD),
        ),
    ]
}

#[derive(Debug, thiserror::Error)]
pub enum NewError {
    #[error("unknown template `{0}`\n  help: the templates are: {1}")]
    UnknownTemplate(String, String),
    #[error("{}: already exists and is not empty; rung new never overwrites files\n  help: choose a new folder name", .0.display())]
    NotEmpty(PathBuf),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// Writes a template into `dest`, which must not exist or be empty. Returns the files written.
pub fn write(name: &str, dest: &Path) -> Result<Vec<PathBuf>, NewError> {
    let all = templates();
    let Some((_, _, dir, base)) = all.iter().find(|(n, _, _, _)| *n == name) else {
        let names: Vec<&str> = all.iter().map(|(n, _, _, _)| *n).collect();
        return Err(NewError::UnknownTemplate(name.into(), names.join(", ")));
    };
    if dest.exists() && std::fs::read_dir(dest).map_or(true, |mut d| d.next().is_some()) {
        return Err(NewError::NotEmpty(dest.to_path_buf()));
    }
    let mut written = Vec::new();
    if let Some(base) = base {
        write_dir(base, dest, &mut written)?;
    }
    write_dir(dir, dest, &mut written)?;
    Ok(written)
}

fn write_dir(dir: &Dir, dest: &Path, written: &mut Vec<PathBuf>) -> Result<(), NewError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| NewError::Io { path, source }
    };
    std::fs::create_dir_all(dest).map_err(io(dest))?;
    for file in dir.files() {
        let name = file.path().file_name().unwrap_or_default().to_string_lossy();
        if name.ends_with(".pyc") {
            continue;
        }
        let path = dest.join(name.as_ref());
        std::fs::write(&path, file.contents()).map_err(io(&path))?;
        written.push(path);
    }
    for sub in dir.dirs() {
        let name = sub.path().file_name().unwrap_or_default().to_string_lossy();
        if name == "__pycache__" || name == ".rung" {
            continue;
        }
        write_dir(sub, &dest.join(name.as_ref()), written)?;
    }
    Ok(())
}
