//! `rung.toml`: the problem a workspace optimises.
//!
//! Loading is two passes. Serde reads the file into the `raw` types (unknown keys, wrong types
//! and bad enum values are rejected there, with the key path from `serde_path_to_error` and the
//! span from the TOML parser). Then [`validate`] checks what serde cannot: expressions parse,
//! names resolve, every size set defines every variable used, shapes are positive. Those errors
//! are located by walking a span-preserving `toml_edit` document along the key path, so every
//! error names `rung.toml:line:col`, the key path and what was expected.

mod raw;
mod validate;

use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::diag::{Diagnostic, Pos};
use crate::dtype::{DType, Tolerance};
use crate::expr::Expr;

pub use crate::model::sizes::SizeSet;
pub use raw::{CompilerChoice, Init, RunnerKind};

pub const FILE_NAME: &str = "rung.toml";

/// `rows=7, cols=8193`: a size set as people read it.
pub fn size_label(sizes: &SizeSet) -> String {
    sizes.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}

/// Names that expressions may read besides the size variables.
pub const BUILTIN_VARS: &[&str] = &["num_sms"];

#[derive(Debug, Clone)]
pub struct Spec {
    /// The rung.toml this was read from.
    pub path: PathBuf,
    pub name: String,
    pub description: String,
    pub reference: Option<PathBuf>,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    pub scalars: Vec<ScalarSpec>,
    pub test_sizes: Vec<SizeSet>,
    pub bench_sizes: Vec<SizeSet>,
    pub roofline: Roofline,
    pub launch: LaunchDefaults,
    pub build: BuildSpec,
    pub runner: RunnerSpec,
    pub limits: Limits,
    /// `[[context.sources]]`: what `rung context update` refreshes in `context/`.
    pub context: Vec<crate::context::sources::Source>,
}

#[derive(Debug, Clone)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<Expr>,
    pub init: Init,
    /// Resolved: the output's own keys, over `[tolerance]`, over the dtype's defaults.
    pub tolerance: Tolerance,
}

#[derive(Debug, Clone)]
pub struct ScalarSpec {
    pub name: String,
    pub dtype: DType,
    pub value: ScalarValue,
}

#[derive(Debug, Clone)]
pub enum ScalarValue {
    /// A literal (e.g. `eps = 1e-6`).
    Number(f64),
    /// An integer expression of the size variables (e.g. `"rows * cols"`).
    Expr(Expr),
}

#[derive(Debug, Clone, Default)]
pub struct Roofline {
    /// Bytes a perfect kernel must move between DRAM and the SMs.
    pub bytes: Option<Expr>,
    /// Floating-point operations a perfect kernel must do.
    pub flops: Option<Expr>,
}

/// Launch dimensions as expressions, each optional: `[launch]` in rung.toml, or a version's
/// `// rung:` header, which is laid over it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LaunchDefaults {
    pub grid: Option<Vec<Expr>>,
    pub block: Option<Vec<Expr>>,
    pub smem: Option<Expr>,
    pub cluster: Option<Vec<Expr>>,
    /// Which `extern "C" __global__` function to launch when the file defines several.
    pub kernel: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct BuildSpec {
    /// e.g. `sm_90a`; when unset, the GPU's own, else `sm_90`.
    pub arch: Option<String>,
    /// Extra flags for nvcc / NVRTC.
    pub flags: Vec<String>,
    pub compiler: CompilerChoice,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunnerSpec {
    #[serde(default)]
    pub kind: RunnerKind,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub workdir: Option<String>,
    pub partition: Option<String>,
    /// Slurm: `--gres` (`gpu:h100:1`), `--time` (`10:00`), `--account`.
    pub gres: Option<String>,
    pub time: Option<String>,
    pub account: Option<String>,
    #[serde(default)]
    pub srun_args: Vec<String>,
    /// Slurm: the rung binary on the compute nodes (default: this binary's own path, which
    /// must then be on a filesystem they share).
    #[serde(default)]
    pub rung: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub build: Duration,
    pub run: Duration,
    pub bench: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { build: Duration::from_secs(120), run: Duration::from_secs(30), bench: Duration::from_secs(20) }
    }
}

/// Why rung.toml could not be loaded. Every variant names the file and a position in it.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("{}: cannot read: {source}\n  help: run `rung new DIR` to create a workspace, or pass --workspace", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}", crate::diag::render(.0).trim_end())]
    Invalid(Vec<Diagnostic>),
}

impl SpecError {
    pub fn diagnostics(&self) -> Vec<Diagnostic> {
        match self {
            SpecError::Read { path, source } => {
                vec![Diagnostic::error(path.clone(), Pos::WHOLE_FILE, source.to_string())]
            }
            SpecError::Invalid(d) => d.clone(),
        }
    }
}

impl Spec {
    /// Reads and validates `dir/rung.toml`.
    pub fn load(dir: &Path) -> Result<Spec, SpecError> {
        let path = dir.join(FILE_NAME);
        let text = std::fs::read_to_string(&path).map_err(|source| SpecError::Read { path: path.clone(), source })?;
        Spec::parse(&text, Path::new(FILE_NAME))
    }

    /// Parses rung.toml text; `path` is what error messages call the file.
    pub fn parse(text: &str, path: &Path) -> Result<Spec, SpecError> {
        let raw = raw::deserialize(text, path).map_err(|d| SpecError::Invalid(vec![*d]))?;
        validate::validate(raw, text, path).map_err(SpecError::Invalid)
    }

    /// Every size variable name, in order.
    pub fn size_vars(&self) -> Vec<&str> {
        let mut v: Vec<&str> =
            self.test_sizes.iter().chain(&self.bench_sizes).flat_map(|s| s.keys()).map(String::as_str).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    pub fn tensor(&self, name: &str) -> Option<(&TensorSpec, TensorRole)> {
        self.inputs
            .iter()
            .map(|t| (t, TensorRole::Input))
            .chain(self.outputs.iter().map(|t| (t, TensorRole::Output)))
            .find(|(t, _)| t.name == name)
    }

    /// A scope for evaluating expressions at one size set.
    pub fn scope<'a>(&'a self, sizes: &'a SizeSet, num_sms: Option<i64>) -> SizeScope<'a> {
        SizeScope { spec: self, sizes, num_sms }
    }

    /// The concrete shape of a tensor at one size set.
    pub fn shape_at(&self, tensor: &TensorSpec, sizes: &SizeSet) -> Result<Vec<i64>, crate::expr::ExprError> {
        let scope = self.scope(sizes, None);
        tensor.shape.iter().map(|e| e.eval_int(&scope)).collect()
    }

    /// Every tensor's bytes at `sizes`, inputs and outputs together; `None` when a shape does not
    /// evaluate, has a negative extent, or the total overflows 64 bits.
    pub fn bytes_at(&self, sizes: &SizeSet) -> Option<u64> {
        let mut total: u64 = 0;
        for t in self.inputs.iter().chain(&self.outputs) {
            let mut n: u64 = t.dtype.size_bytes() as u64;
            for d in self.shape_at(t, sizes).ok()? {
                n = n.checked_mul(u64::try_from(d).ok()?)?;
            }
            total = total.checked_add(n)?;
        }
        Some(total)
    }

    /// Why the tensors at `sizes` cannot be held on this machine (their bytes, twice over for a
    /// check's two passes, past what `available` bytes of memory hold), in words; `None` when
    /// they fit.
    pub fn too_big(&self, sizes: &SizeSet, available: u64) -> Option<String> {
        let bytes = self.bytes_at(sizes);
        let gb = |b: u64| b as f64 / 1e9;
        let sizes = sizes.iter().map(|(k, v)| format!("{k} = {v}")).collect::<Vec<_>>().join(", ");
        let sizes = format!("{{ {sizes} }}");
        match bytes {
            None => Some(format!(
                "at {sizes} the tensors' shapes do not make sizes rung can hold (a negative extent, or bytes past 64 bits)"
            )),
            Some(b) if b.saturating_mul(2) > available => Some(format!(
                "at {sizes} the tensors take {:.1} GB, twice that for a check's two passes, more than the {:.1} GB of memory free here",
                gb(b),
                gb(available)
            )),
            Some(_) => None,
        }
    }
}

/// A by-value argument: integers stay integers (Triton and C specialise on the type).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArgValue {
    Int(i64),
    Float(f64),
}

impl ArgValue {
    pub fn as_f64(self) -> f64 {
        match self {
            ArgValue::Int(i) => i as f64,
            ArgValue::Float(f) => f,
        }
    }

    pub fn to_json(self) -> serde_json::Value {
        match self {
            ArgValue::Int(i) => i.into(),
            ArgValue::Float(f) => f.into(),
        }
    }
}

impl Spec {
    /// What a by-value parameter named `name` gets at one size: a scalar's value, a size
    /// variable, or `num_sms`. `Ok(None)` when the name is none of these.
    pub fn value_of(
        &self,
        name: &str,
        sizes: &SizeSet,
        num_sms: Option<i64>,
    ) -> Result<Option<ArgValue>, crate::expr::ValueError> {
        use crate::expr::Scope;
        let scope = self.scope(sizes, num_sms);
        if let Some(sc) = self.scalars.iter().find(|s| s.name == name) {
            return Ok(Some(match &sc.value {
                ScalarValue::Number(n) if sc.dtype.is_float() => ArgValue::Float(*n),
                ScalarValue::Number(n) => ArgValue::Int(*n as i64),
                ScalarValue::Expr(e) => {
                    ArgValue::Int(e.eval_int(&scope).map_err(|err| crate::expr::ValueError::Eval {
                        what: format!("scalar `{name}` ="),
                        expr: e.to_string(),
                        message: err.message,
                    })?)
                }
            }));
        }
        Ok(scope.var(name).map(ArgValue::Int))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorRole {
    Input,
    Output,
}

/// Resolves size variables, `num_sms`, and `numel(t)` / `bytes(t)` for one size set.
pub struct SizeScope<'a> {
    spec: &'a Spec,
    sizes: &'a SizeSet,
    num_sms: Option<i64>,
}

impl crate::expr::Scope for SizeScope<'_> {
    fn var(&self, name: &str) -> Option<i64> {
        match name {
            "num_sms" => self.num_sms,
            _ => self.sizes.get(name).copied(),
        }
    }

    fn numel(&self, tensor: &str) -> Option<i64> {
        let (t, _) = self.spec.tensor(tensor)?;
        t.shape.iter().try_fold(1i64, |acc, e| acc.checked_mul(e.eval_int(self).ok()?))
    }

    fn bytes(&self, tensor: &str) -> Option<i64> {
        let (t, _) = self.spec.tensor(tensor)?;
        self.numel(tensor)?.checked_mul(t.dtype.size_bytes() as i64)
    }
}

/// An embedded, documented example; `rung new` writes it and the tests parse it.
pub const EXAMPLE: &str = include_str!("../../../assets/templates/vector-add/rung.toml");
