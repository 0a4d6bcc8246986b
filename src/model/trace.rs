//! What the trace rung reports: the sections of one traced launch, from the records rung's
//! tracer (`rung_trace.cuh`) wrote, with their statistics across warps or blocks.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One traced launch, decoded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TraceSummary {
    /// How the records were written: `rung_trace.cuh` (a CUDA version's markers), or another
    /// mechanism a DSL used.
    pub mechanism: String,
    /// Records the kernel asked to write, and how many the buffer held; past it they were
    /// counted and dropped (`dropped`), never written.
    pub requested: u64,
    pub capacity: u64,
    pub dropped: u64,
    /// Streams of records: one per leader (a warp, or a block's first thread).
    pub streams: usize,
    /// SMs the records came from.
    pub sms: usize,
    /// From the first record to the last, in nanoseconds (`%globaltimer`).
    pub span_ns: u64,
    pub sections: Vec<SectionStats>,
    /// Marks (`RUNG_TRACE_MARK`) by name and count.
    pub marks: Vec<(String, u64)>,
    /// A begin without its end, an end without its begin (a record dropped from a full
    /// buffer, or markers that do not pair in the source), and an end before its begin.
    pub unmatched_begins: u64,
    pub unmatched_ends: u64,
    pub backwards: u64,
    /// Records whose name hash matches no marker found in the source.
    pub unknown_tags: u64,
}

/// One section's durations across every stream that ran it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SectionStats {
    pub name: String,
    /// Begin/end pairs.
    pub calls: u64,
    pub mean_ns: f64,
    pub median_ns: f64,
    pub p99_ns: f64,
    pub total_ns: u64,
    /// The section's time over the time of the streams that ran it (each stream from its first
    /// record to its last): its share of the kernel as the leaders saw it.
    pub share: f64,
    /// SMs that ran it, and the lowest and highest per-SM mean duration (the spread).
    pub sms: usize,
    pub sm_mean_min_ns: f64,
    pub sm_mean_max_ns: f64,
}
