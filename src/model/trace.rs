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

/// Who writes a traced kernel's records: lane 0 of every warp, or thread 0 of every block
/// (`rung_trace.cuh` with `RUNG_TRACE_PER_BLOCK`: a block's warps share one stream, eight times
/// fewer records for a block of 256, and a section then times the first warp's path only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Leader {
    #[default]
    Warp,
    Block,
}

impl Leader {
    pub fn as_str(self) -> &'static str {
        match self {
            Leader::Warp => "warp",
            Leader::Block => "block",
        }
    }
}

/// A version's latest trace as `rung trace` records it (`.rung/dumps/<id>/<id>.trace.record.json`):
/// what `get_trace` returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TraceRecord {
    pub version: String,
    /// The hash of the source that was traced: a record of another is not current.
    pub source_hash: String,
    pub sizes: crate::sizes::SizeSet,
    pub arch: String,
    pub seed: u64,
    /// RFC 3339.
    pub recorded_at: String,
    /// The traced launch's wall time, synchronised, in milliseconds.
    pub launch_ms: f64,
    /// The latest bench of the same source at the same size: its headline median (ms) and basis.
    pub untraced_median_ms: Option<f64>,
    pub untraced_basis: Option<String>,
    /// The Chrome trace-event file, relative to the workspace.
    pub chrome_trace: String,
    pub summary: TraceSummary,
    /// One stream of records per warp or per block (a record written before this field existed
    /// was per warp).
    #[serde(default)]
    pub leader: Leader,
    /// With no capacity given, a first launch whose buffer (this many records) overflowed was
    /// followed by a second with room for every record it asked for: this record is the second's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_capacity: Option<u64>,
}

/// A duration in nanoseconds as the trace's tables print it: `0.6 µs`, `1.25 ms`.
pub fn duration_label(ns: f64) -> String {
    if ns >= 1e6 { format!("{:.2} ms", ns / 1e6) } else { format!("{:.1} µs", ns / 1e3) }
}

impl TraceRecord {
    /// The statistics as a small table (the CLI's, the agent's and the MCP reply's text).
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let t = duration_label;
        let s = &self.summary;
        let sizes: Vec<String> = self.sizes.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut out = format!(
            "{} traced at {} ({}, {}): {} {} leaders on {} SMs, {} from the first record to the last; launch {:.3} ms\n",
            self.version,
            sizes.join(" "),
            self.arch,
            s.mechanism,
            s.streams,
            self.leader.as_str(),
            s.sms,
            t(s.span_ns as f64),
            self.launch_ms
        );
        let _ = writeln!(
            out,
            "{:16} {:>7} {:>10} {:>10} {:>10} {:>6} {:>4}  per-SM mean",
            "section", "calls", "median", "p99", "mean", "share", "SMs"
        );
        for x in &s.sections {
            let _ = writeln!(
                out,
                "{:16} {:>7} {:>10} {:>10} {:>10} {:>5.1}% {:>4}  {}–{}",
                x.name,
                x.calls,
                t(x.median_ns),
                t(x.p99_ns),
                t(x.mean_ns),
                x.share * 100.0,
                x.sms,
                t(x.sm_mean_min_ns),
                t(x.sm_mean_max_ns)
            );
        }
        for (name, n) in &s.marks {
            let _ = writeln!(out, "mark {name}: {n}");
        }
        if let Some(first) = self.first_capacity {
            let _ = writeln!(
                out,
                "launched twice: the first launch asked for {} records, past its buffer of {first}; this is the second, with room for all",
                s.requested
            );
        }
        if s.dropped > 0 || s.unmatched_begins + s.unmatched_ends + s.backwards + s.unknown_tags > 0 {
            let _ = writeln!(
                out,
                "! {} records dropped (the buffer holds {}); unmatched begins {}, ends {}; ends before their begin {}; unknown names {}",
                s.dropped, s.capacity, s.unmatched_begins, s.unmatched_ends, s.backwards, s.unknown_tags
            );
        }
        match (self.untraced_median_ms, &self.untraced_basis) {
            (Some(m), Some(basis)) => {
                let _ = writeln!(
                    out,
                    "untraced: {basis} median {m:.4} ms at the same size; the traced span is {:+.1}% of it",
                    (s.span_ns as f64 / 1e6 / m - 1.0) * 100.0
                );
            }
            _ => {
                let _ = writeln!(out, "untraced: no bench of this source at this size yet");
            }
        }
        let _ = writeln!(out, "trace events: {}", self.chrome_trace);
        out
    }
}

/// The JSON schema of [`TraceRecord`] (`rung trace --json`), as committed in
/// `schema/trace.schema.json`.
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(TraceRecord)).expect("a schema serialises")
}
