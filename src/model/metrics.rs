//! How an output compares with the reference: the figures every stage and shell reads.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Comparison {
    pub elements: usize,
    pub max_abs_err: f64,
    pub max_rel_err: f64,
    pub mean_abs_err: f64,
    pub mse: f64,
    pub rmse: f64,
    /// dB; `null` in JSON when infinite (MSE = 0).
    pub psnr: Option<f64>,
    pub cosine: f64,
    pub mismatches: usize,
    /// The first mismatches: multi-dimensional index, output, reference.
    pub first_mismatches: Vec<Mismatch>,
    pub nan_count: usize,
    pub inf_count: usize,
    /// Max abs error per cell of a coarse grid over the last two dimensions (or the only one),
    /// row-major, `map_shape[0] × map_shape[1]` cells.
    pub error_map: Vec<f64>,
    pub map_shape: [usize; 2],
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Mismatch {
    pub index: Vec<usize>,
    #[serde(deserialize_with = "null_is_nan")]
    pub output: f64,
    #[serde(deserialize_with = "null_is_nan")]
    pub reference: f64,
}

/// JSON has no NaN or infinity, so serde_json writes them as `null`; read back, `null` is NaN
/// (a recorded check with a NaN in its output must still load). The exact counts of each are in
/// `nan_count` and `inf_count`.
fn null_is_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}
