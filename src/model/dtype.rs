//! Element types of the tensors a problem declares, with their sizes, their C spellings and the
//! default tolerances that let an honest kernel pass.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F64,
    F32,
    F16,
    Bf16,
    #[serde(rename = "f8e4m3", alias = "fp8", alias = "fp8e4m3", alias = "fp8_e4m3")]
    F8E4M3,
    #[serde(rename = "f8e5m2", alias = "fp8e5m2", alias = "fp8_e5m2")]
    F8E5M2,
    I8,
    I16,
    I32,
    I64,
    U8,
    U32,
}

pub const ALL: [DType; 12] = [
    DType::F64,
    DType::F32,
    DType::F16,
    DType::Bf16,
    DType::F8E4M3,
    DType::F8E5M2,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U32,
];

/// Default comparison thresholds for one dtype (DESIGN.md: "defaults come from the dtype").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
    /// Minimum PSNR in dB, judged for reduced precision (f16, bf16, fp8).
    pub min_psnr: Option<f64>,
    /// Minimum cosine similarity, judged for reduced precision.
    pub min_cosine: Option<f64>,
}

impl DType {
    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::F8E4M3 => "f8e4m3",
            DType::F8E5M2 => "f8e5m2",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U32 => "u32",
        }
    }

    pub fn size_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::Bf16 | DType::I16 => 2,
            DType::F8E4M3 | DType::F8E5M2 | DType::I8 | DType::U8 => 1,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F64 | DType::F32 | DType::F16 | DType::Bf16 | DType::F8E4M3 | DType::F8E5M2)
    }

    /// Reduced precision is judged by PSNR and cosine similarity as well as atol/rtol.
    pub fn is_reduced_precision(self) -> bool {
        matches!(self, DType::F16 | DType::Bf16 | DType::F8E4M3 | DType::F8E5M2)
    }

    /// The C/CUDA element types that a kernel parameter may use for this dtype.
    pub fn c_types(self) -> &'static [&'static str] {
        match self {
            DType::F64 => &["double"],
            DType::F32 => &["float"],
            DType::F16 => &["__half", "half"],
            DType::Bf16 => &["__nv_bfloat16", "nv_bfloat16", "bfloat16"],
            DType::F8E4M3 => &["__nv_fp8_e4m3", "uint8_t", "unsigned char"],
            DType::F8E5M2 => &["__nv_fp8_e5m2", "uint8_t", "unsigned char"],
            DType::I8 => &["int8_t", "signed char", "char"],
            DType::I16 => &["int16_t", "short"],
            DType::I32 => &["int", "int32_t"],
            DType::I64 => &["int64_t", "long long", "long"],
            DType::U8 => &["uint8_t", "unsigned char"],
            DType::U32 => &["uint32_t", "unsigned", "unsigned int"],
        }
    }

    /// Default tolerances. The f32 defaults are wider than `torch.allclose`'s (rtol 1e-5,
    /// atol 1e-8): a fused multiply-add rounds once where the reference rounds twice, and near
    /// zero that alone fails allclose's defaults. A relative error of 1e-4 is ~840 ulp at f32,
    /// far below what an indexing or reduction bug produces.
    pub fn default_tolerance(self) -> Tolerance {
        let (atol, rtol, psnr, cos) = match self {
            DType::F64 => (1e-10, 1e-8, None, None),
            DType::F32 => (1e-5, 1e-4, None, None),
            DType::F16 => (1e-3, 1e-2, Some(40.0), Some(0.9999)),
            DType::Bf16 => (1e-2, 2e-2, Some(30.0), Some(0.999)),
            DType::F8E4M3 => (6.25e-2, 1.25e-1, Some(20.0), Some(0.99)),
            DType::F8E5M2 => (1.25e-1, 2.5e-1, Some(15.0), Some(0.98)),
            // Integers compare exactly.
            _ => (0.0, 0.0, None, None),
        };
        Tolerance { atol, rtol, min_psnr: psnr, min_cosine: cos }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A dtype name rung does not know; it says which ones it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownDType(pub String);

impl fmt::Display for UnknownDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown dtype `{}`; expected one of {}", self.0, ALL.map(DType::name).join(", "))
    }
}

impl std::error::Error for UnknownDType {}

impl FromStr for DType {
    type Err = UnknownDType;
    fn from_str(s: &str) -> Result<Self, UnknownDType> {
        DType::deserialize(serde::de::value::StrDeserializer::<serde::de::value::Error>::new(s))
            .map_err(|_| UnknownDType(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_aliases_parse() {
        for d in ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
        assert_eq!("fp8".parse::<DType>().unwrap(), DType::F8E4M3);
        assert!("f33".parse::<DType>().unwrap_err().to_string().contains("expected one of f64, f32"));
    }

    #[test]
    fn reduced_precision_defaults_judge_psnr() {
        for d in ALL {
            let t = d.default_tolerance();
            assert_eq!(t.min_psnr.is_some(), d.is_reduced_precision(), "{d}");
        }
    }
}
