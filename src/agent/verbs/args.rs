//! The tools' arguments, with their JSON schemas.

use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use rung_core::asm::AsmKind;
use rung_core::model::report::Stage;

// ---------------------------------------------------------------------------------------------
// Arguments. Their JSON schemas (generated from these types) are the tools' input schemas.

/// A version, by id (`v002`), file stem (`v002-float4`) or path (`versions/v002-float4.cu`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VersionArgs {
    /// The version: its id (`v002`), file stem (`v002-float4`) or path (`versions/v002-float4.cu`).
    pub version: String,
}

/// A version file's extension, which decides how it is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Extension {
    /// CUDA C++ (an `extern "C" __global__` kernel, or `extern "C" int rung_run(...)`).
    Cu,
    /// Python: Triton, CuTe DSL, TileLang or PyTorch (`def run(...)`).
    Py,
    /// Hand-written PTX.
    Ptx,
}

impl Extension {
    pub fn as_str(self) -> &'static str {
        match self {
            Extension::Cu => "cu",
            Extension::Py => "py",
            Extension::Ptx => "ptx",
        }
    }

    pub(super) fn of(path: &Path) -> Option<Extension> {
        match path.extension()?.to_str()? {
            "cu" => Some(Extension::Cu),
            "py" => Some(Extension::Py),
            "ptx" => Some(Extension::Ptx),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitArgs {
    /// A short description that names the file `versions/vNNN-<name>.<extension>` (rung picks
    /// the next free id). Lowered to [a-z0-9-] (`Float4 FMA` becomes `float4-fma`), at most 48
    /// characters; a name containing `/`, `\`, `..` or starting with `.` is refused.
    pub name: String,
    /// The complete source file, at most 1 MiB (1,048,576 bytes).
    pub source: String,
    /// `cu`, `py` or `ptx`; default: the parent's.
    #[serde(default)]
    pub extension: Option<Extension>,
    /// The version this one was derived from (e.g. `v002`): recorded in the history, the
    /// default extension, and the natural `a` of a later `diff_asm`.
    #[serde(default)]
    pub parent: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckArgs {
    /// The versions to check (ids such as `v004`); empty or absent: every version.
    #[serde(default)]
    pub versions: Vec<String>,
    /// The seed that draws the inputs, to reproduce an earlier check; drawn from the
    /// workspace's seed pool when absent.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Stop after the check rung: no bench, no roofline.
    #[serde(default)]
    pub no_bench: bool,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AsmArgs {
    /// The version: its id (`v002`), file stem or path.
    pub version: String,
    /// `sass` (default) or `ptx`.
    #[serde(default)]
    pub kind: Option<AsmKind>,
    /// Only this kernel (default: every kernel of the version).
    #[serde(default)]
    pub kernel: Option<String>,
    /// At most this many listing lines in all (default 2000); the instruction mix always counts
    /// the whole kernel.
    #[serde(default)]
    pub max_lines: Option<usize>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiffAsmArgs {
    /// The older version, e.g. the parent (`v002`).
    pub a: String,
    /// The newer version (`v004`).
    pub b: String,
    /// `sass` (default) or `ptx`.
    #[serde(default)]
    pub kind: Option<AsmKind>,
    /// Only this kernel (default: every kernel, paired by name).
    #[serde(default)]
    pub kernel: Option<String>,
    /// Rename registers by first use, so a different register allocation does not hide the
    /// same instruction stream.
    #[serde(default)]
    pub registers: bool,
    /// At most this many rows of hunks in all (default 800); the counts and mixes are always
    /// complete.
    #[serde(default)]
    pub max_rows: Option<usize>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryArgs {
    /// Only this version (default: every version).
    #[serde(default)]
    pub version: Option<String>,
    /// Only this stage.
    #[serde(default)]
    pub stage: Option<Stage>,
    /// At most this many results, newest first (default 20).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Also return each result's full record (the stage result as `rung check --json` prints
    /// it); default: the summary only.
    #[serde(default)]
    pub payload: bool,
}
