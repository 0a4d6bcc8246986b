//! The serde image of rung.toml: what the file may contain, before semantic validation.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::SizeSet;
use crate::diag::Diagnostic;
use crate::dtype::DType;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSpec {
    pub problem: RawProblem,
    #[serde(default)]
    pub inputs: Vec<RawTensor>,
    pub outputs: Vec<RawTensor>,
    #[serde(default)]
    pub scalars: Vec<RawScalar>,
    pub sizes: RawSizes,
    #[serde(default)]
    pub tolerance: RawTolerance,
    #[serde(default)]
    pub roofline: RawRoofline,
    #[serde(default)]
    pub launch: RawLaunch,
    #[serde(default)]
    pub build: RawBuild,
    #[serde(default, deserialize_with = "runner_field")]
    pub runner: RawRunnerField,
    #[serde(default)]
    pub limits: RawLimits,
    #[serde(default)]
    pub context: crate::context::sources::Section,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProblem {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub reference: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<IntOrExpr>,
    #[serde(default, deserialize_with = "init_field")]
    pub init: Option<Init>,
    pub atol: Option<f64>,
    pub rtol: Option<f64>,
    pub min_psnr: Option<f64>,
    pub min_cosine: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScalar {
    pub name: String,
    pub dtype: DType,
    pub value: NumOrExpr,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSizes {
    pub test: Vec<SizeSet>,
    #[serde(default)]
    pub bench: Vec<SizeSet>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTolerance {
    pub atol: Option<f64>,
    pub rtol: Option<f64>,
    pub min_psnr: Option<f64>,
    pub min_cosine: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoofline {
    pub bytes: Option<String>,
    pub flops: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLaunch {
    pub grid: Option<IntOrExpr>,
    pub block: Option<IntOrExpr>,
    pub smem: Option<IntOrExpr>,
    pub cluster: Option<IntOrExpr>,
    pub kernel: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBuild {
    pub arch: Option<String>,
    #[serde(default)]
    pub compiler: CompilerChoice,
    #[serde(default)]
    pub flags: Vec<String>,
}

/// `runner = "ssh://user@host[:port]/path"`, or a `[runner]` table.
#[derive(Debug)]
pub(super) enum RawRunnerField {
    Url(String),
    Table(RawRunner),
}

impl Default for RawRunnerField {
    fn default() -> Self {
        RawRunnerField::Table(RawRunner::default())
    }
}

fn runner_field<'de, D: serde::Deserializer<'de>>(d: D) -> Result<RawRunnerField, D::Error> {
    use serde::de::Error;
    match toml::Value::deserialize(d)? {
        toml::Value::String(s) => Ok(RawRunnerField::Url(s)),
        v @ toml::Value::Table(_) => RawRunner::deserialize(v).map(RawRunnerField::Table).map_err(D::Error::custom),
        other => Err(D::Error::custom(format!(
            "runner must be a URL (\"ssh://user@host/path\") or a [runner] table, not a {}",
            other.type_str()
        ))),
    }
}

/// `[runner]` as a table reads straight into the checked type: its fields need no conversion,
/// only the cross-field checks in validate.rs.
pub(super) type RawRunner = super::RunnerSpec;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    pub build: Option<Seconds>,
    pub run: Option<Seconds>,
    pub bench: Option<Seconds>,
}

/// Which CUDA C++ compiler builds `.cu` versions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CompilerChoice {
    /// nvcc when found, else NVRTC.
    #[default]
    Auto,
    Nvcc,
    /// NVRTC, the compiler JIT frameworks use (no host code: not for `rung_run` versions).
    Nvrtc,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunnerKind {
    /// This machine's GPU.
    #[default]
    Local,
    /// A GPU host over SSH.
    Ssh,
    /// A cluster, through `srun`.
    Slurm,
}

/// How an input is filled (outputs ignore it). A bare string is the distribution with its
/// defaults: `init = "uniform"`; a table sets parameters: `init = { dist = "uniform", low = 0 }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "dist", rename_all = "lowercase", deny_unknown_fields)]
pub enum Init {
    Normal {
        #[serde(default)]
        mean: f64,
        #[serde(default = "one")]
        std: f64,
    },
    Uniform {
        #[serde(default = "minus_one")]
        low: f64,
        #[serde(default = "one")]
        high: f64,
    },
    /// Integers drawn uniformly from `low..high` (high excluded).
    Randint {
        low: i64,
        high: i64,
    },
    Zeros,
    Ones,
    /// 0, 1, 2, ... in row-major order.
    Arange,
    Const {
        value: f64,
    },
}

fn one() -> f64 {
    1.0
}
fn minus_one() -> f64 {
    -1.0
}

const INIT_NAMES: &[&str] = &["normal", "uniform", "randint", "zeros", "ones", "arange", "const"];

impl Init {
    fn from_name(name: &str) -> Option<Init> {
        Some(match name {
            "normal" => Init::Normal { mean: 0.0, std: 1.0 },
            "uniform" => Init::Uniform { low: -1.0, high: 1.0 },
            "randint" => Init::Randint { low: -8, high: 8 },
            "zeros" => Init::Zeros,
            "ones" => Init::Ones,
            "arange" => Init::Arange,
            _ => return None,
        })
    }
}

/// Deserialises `Init` from either a distribution name or a table with `dist`.
pub(super) fn init_field<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Init>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Init;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(
                f,
                "a distribution name ({}) or a table such as {{ dist = \"uniform\", low = 0, high = 1 }}",
                INIT_NAMES.join(", ")
            )
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Init, E> {
            Init::from_name(s).ok_or_else(|| E::unknown_variant(s, INIT_NAMES))
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Init, A::Error> {
            Init::deserialize(de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_any(V).map(Some)
}

/// A whole number or an expression string (`4096` or `"cdiv(n, 256)"`).
#[derive(Debug, Clone)]
pub(super) enum IntOrExpr {
    Int(i64),
    Expr(String),
}

impl<'de> Deserialize<'de> for IntOrExpr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = IntOrExpr;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a whole number or an expression string such as \"cdiv(n, 256)\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrExpr, E> {
                Ok(IntOrExpr::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrExpr, E> {
                i64::try_from(v).map(IntOrExpr::Int).map_err(|_| E::custom("number too large"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrExpr, E> {
                Ok(IntOrExpr::Expr(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A number or an expression string (`1e-6` or `"rows * cols"`).
#[derive(Debug, Clone)]
pub(super) enum NumOrExpr {
    Num(f64),
    Expr(String),
}

impl<'de> Deserialize<'de> for NumOrExpr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = NumOrExpr;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or an expression string such as \"rows * cols\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<NumOrExpr, E> {
                Ok(NumOrExpr::Num(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<NumOrExpr, E> {
                Ok(NumOrExpr::Num(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<NumOrExpr, E> {
                Ok(NumOrExpr::Num(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<NumOrExpr, E> {
                Ok(NumOrExpr::Expr(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// The longest limit rung.toml may set.
const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// A duration: seconds as a number (`30`, `0.5`) or a string with a unit (`"500ms"`, `"2m"`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Seconds(pub Duration);

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Seconds;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a positive duration up to a week: seconds as a number, or a string such as \"500ms\", \"30s\", \"2m\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Seconds, E> {
                self.visit_f64(v as f64)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Seconds, E> {
                self.visit_f64(v as f64)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Seconds, E> {
                // Past a week is a slip (1e30 once panicked on the conversion): an error here.
                if v.is_finite() && v > 0.0 && v <= MAX_DURATION.as_secs_f64() {
                    Ok(Seconds(Duration::from_secs_f64(v)))
                } else {
                    Err(E::invalid_value(de::Unexpected::Float(v), &self))
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Seconds, E> {
                match humantime::parse_duration(v) {
                    Ok(d) if !d.is_zero() && d <= MAX_DURATION => Ok(Seconds(d)),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// Reads rung.toml into the raw types, or one diagnostic with file:line:col and the key path.
pub(super) fn deserialize(text: &str, path: &Path) -> Result<RawSpec, Box<Diagnostic>> {
    crate::tomlfile::deserialize_toml(
        text,
        path,
        "see the TOML syntax at toml.io; `rung new` writes a commented example",
        |message| {
            Some(if message.starts_with("unknown field") {
                "remove the key or fix its spelling (the allowed keys are listed above)"
            } else if message.starts_with("missing field") {
                "add the missing key (see `rung new --template vector-add` for a complete example)"
            } else {
                "change the value to the expected kind"
            })
        },
    )
}
