//! The trace rung's host side: the records rung's tracer (`assets/include/rung_trace.cuh`)
//! writes, decoded into sections, their statistics and a Chrome trace-event file (Perfetto opens
//! it). A record is 32 bytes, little-endian: `time_ns: u64, tag: u32, kind: u32, sm: u32,
//! block: u32, warp: u32, pad: u32`; `tag` is the FNV-1a hash of the section's name, which
//! [`names_in`] finds in the version's source.
//!
//! The buffer has one part per SM, each with its own counter; the worker hands the parts over one
//! after the other. Records of one leader (a warp, or a block's first thread) are all in the part
//! of its SM and in program order there: the leader takes its slots one atomic add at a time.
//! Across leaders the order is whatever the atomics made it, and their clocks interleave; so
//! records are paired within each leader's stream, in buffer order, never by sorting on time.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

mod ptx;
pub use ptx::*;

pub use crate::model::trace::{Leader, SectionStats, TraceSummary};

/// The size of one record.
pub const RECORD_BYTES: usize = 32;
/// The mechanism a CUDA version's records come from.
pub const HEADER_MECHANISM: &str = "rung_trace.cuh";
/// The mechanism a Triton version's records come from: `rung_trace.py`'s markers, inline PTX
/// reading `%globaltimer`. Triton's own intra-kernel instrumentation (Proton's) instruments only
/// Gluon kernels by default in Triton 3.9, since the compiler's rewrites of Triton code can make
/// such sections misleading; rung's markers say the same in their module's text.
pub const TRITON_MECHANISM: &str = "rung_trace.py (inline PTX in Triton)";
/// The mechanism a CuTe DSL version's records come from: `rung_trace_cute.py`'s markers, the same
/// inline PTX as an `llvm.inline_asm` with side effects. The CUTLASS DSL's own in-kernel profiler
/// is not in the nvidia-cutlass-dsl wheel rung installs, so rung's markers are the one way.
pub const CUTE_MECHANISM: &str = "rung_trace_cute.py (inline PTX in the CuTe DSL)";
/// The mechanism a TileLang version's records come from: `rung_trace_tilelang.py`'s markers,
/// calls of a device function (the same PTX as inline assembly) that the kernel's prelude
/// defines. TileLang's own IKET instrumentation decodes into its own format, not rung's.
pub const TILELANG_MECHANISM: &str = "rung_trace_tilelang.py (inline PTX in TileLang's CUDA)";

/// What a record marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Begin,
    End,
    Mark,
    Other(u32),
}

/// One record as the kernel wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub time_ns: u64,
    pub tag: u32,
    pub kind: Kind,
    pub sm: u32,
    pub block: u32,
    pub warp: u32,
    /// Written by thread 0 of a block (the record's last word 1), not lane 0 of a warp.
    pub per_block: bool,
}

impl Record {
    /// The 32 bytes the tracer writes for this record (tests build buffers with it).
    pub fn to_bytes(&self) -> [u8; RECORD_BYTES] {
        let kind = match self.kind {
            Kind::Begin => 0,
            Kind::End => 1,
            Kind::Mark => 2,
            Kind::Other(k) => k,
        };
        let mut b = [0u8; RECORD_BYTES];
        b[0..8].copy_from_slice(&self.time_ns.to_le_bytes());
        for (i, v) in [self.tag, kind, self.sm, self.block, self.warp, u32::from(self.per_block)].iter().enumerate() {
            b[8 + 4 * i..12 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// The records in a buffer's bytes (a trailing partial record is left out).
pub fn parse(bytes: &[u8]) -> Vec<Record> {
    bytes
        .chunks_exact(RECORD_BYTES)
        .map(|c| {
            let u32_at = |i: usize| u32::from_le_bytes(c[i..i + 4].try_into().expect("4 bytes"));
            Record {
                time_ns: u64::from_le_bytes(c[0..8].try_into().expect("8 bytes")),
                tag: u32_at(8),
                kind: match u32_at(12) {
                    0 => Kind::Begin,
                    1 => Kind::End,
                    2 => Kind::Mark,
                    k => Kind::Other(k),
                },
                sm: u32_at(16),
                block: u32_at(20),
                warp: u32_at(24),
                per_block: u32_at(28) == 1,
            }
        })
        .collect()
}

/// Which leader wrote a launch's records, as they say it (none: no record).
pub fn leader_of(records: &[Record]) -> Option<Leader> {
    let first = records.first()?;
    Some(if first.per_block && records.iter().all(|r| r.per_block) { Leader::Block } else { Leader::Warp })
}

/// FNV-1a, 32 bits: the tracer's `rung_trace_hash`.
pub fn hash(name: &str) -> u32 {
    name.bytes().fold(2_166_136_261u32, |h, b| (h ^ u32::from(b)).wrapping_mul(16_777_619))
}

/// The section and mark names a source uses (`RUNG_TRACE_BEGIN(load)` …), by their hash.
pub fn names_in(source: &str) -> BTreeMap<u32, String> {
    let re = regex::Regex::new(
        r#"RUNG_TRACE_(?:BEGIN|END|MARK)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)|\bsection\(\s*["']([A-Za-z_][A-Za-z0-9_.]*)["']\s*\)"#,
    )
    .expect("a valid pattern");
    re.captures_iter(source)
        .filter_map(|c| c.get(1).or(c.get(2)))
        .map(|m| (hash(m.as_str()), m.as_str().to_string()))
        .collect()
}

/// The traced variant of a CUDA version: its PTX and cubin built with `-DRUNG_TRACE`, and the
/// names its markers use.
#[derive(Debug, Clone)]
pub struct Traced {
    pub ptx: String,
    pub cubin: Vec<u8>,
    pub names: BTreeMap<u32, String>,
}

/// Why the traced variant did not build: nvcc's own words.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error(
        "{0} has no RUNG_TRACE_BEGIN, RUNG_TRACE_END or RUNG_TRACE_MARK: include <rung_trace.cuh> and mark its sections"
    )]
    NoMarkers(String),
    #[error(
        "{0} has no `// rung_trace begin NAME` line: mark each section with `// rung_trace begin NAME` and `// rung_trace end NAME` comment lines in the kernel (`// rung_trace mark NAME` for a point); `rung trace` puts the record's PTX in their place"
    )]
    NoPtxMarkers(String),
    #[error("the traced variant did not build: {0}")]
    Build(String),
}

/// Builds the traced variant of the `.cu` version at `source` with `nvcc` for `arch`
/// (`sm_90`) and the build's own flags, in `scratch`: the same source with `-DRUNG_TRACE`, rung's
/// headers on the include path. nvcc runs in `cwd` (the workspace's root, as for its build, so
/// relative flags mean the same).
pub fn build_traced(
    nvcc: &Path,
    source: &Path,
    arch: &str,
    flags: &[String],
    scratch: &Path,
    cwd: &Path,
    leader: Leader,
) -> Result<Traced, TraceError> {
    let text = std::fs::read_to_string(source).map_err(|e| TraceError::Build(format!("{}: {e}", source.display())))?;
    let names = names_in(&text);
    if names.is_empty() {
        return Err(TraceError::NoMarkers(source.display().to_string()));
    }
    let include = crate::assets::write_include(scratch).map_err(|e| TraceError::Build(e.to_string()))?;
    let include_flag = crate::assets::nvcc_include_flag(&include, cwd).map_err(|e| TraceError::Build(e.to_string()))?;
    let mut out = Vec::new();
    for (what, file) in [("-ptx", "traced.ptx"), ("-cubin", "traced.cubin")] {
        let path = scratch.join(file);
        let run = std::process::Command::new(nvcc)
            .arg(what)
            .arg(format!("-arch={arch}"))
            .args(["-lineinfo", "-O3", "-std=c++17", "-DRUNG_TRACE"])
            .arg(match leader {
                Leader::Warp => "-DRUNG_TRACE_LEADER_WARP",
                Leader::Block => "-DRUNG_TRACE_LEADER_BLOCK",
            })
            .args(flags)
            .arg(&include_flag)
            .arg("-o")
            .arg(&path)
            .arg(source)
            .current_dir(cwd)
            .output()
            .map_err(|e| TraceError::Build(format!("{}: {e}", nvcc.display())))?;
        if !run.status.success() {
            return Err(TraceError::Build(String::from_utf8_lossy(&run.stderr).trim().to_string()));
        }
        out.push(std::fs::read(&path).map_err(|e| TraceError::Build(format!("{}: {e}", path.display())))?);
    }
    let cubin = out.pop().unwrap_or_default();
    let ptx = String::from_utf8_lossy(&out.pop().unwrap_or_default()).into_owned();
    Ok(Traced { ptx, cubin, names })
}

/// The leader a `.cu` source asks for: per block where it defines `RUNG_TRACE_PER_BLOCK` itself
/// (a `#define` line outside a comment, before it includes rung_trace.cuh), else per warp.
pub fn leader_declared(source: &str) -> Leader {
    let block_comment = regex::Regex::new(r"(?s)/\*.*?\*/").expect("a valid pattern");
    let source = block_comment.replace_all(source, "");
    let defines = source.lines().any(|l| {
        let l = l.trim_start();
        l.strip_prefix('#').map(str::trim_start).and_then(|l| l.strip_prefix("define")).is_some_and(|rest| {
            rest.starts_with([' ', '\t']) && rest.split_whitespace().next() == Some("RUNG_TRACE_PER_BLOCK")
        })
    });
    if defines { Leader::Block } else { Leader::Warp }
}

/// One begin/end pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    pub name: String,
    pub sm: u32,
    pub block: u32,
    pub warp: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// A mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub name: String,
    pub sm: u32,
    pub block: u32,
    pub warp: u32,
    pub time_ns: u64,
}

/// A traced launch decoded: its pairs, marks and what did not pair.
#[derive(Debug, Clone, Default)]
pub struct Decoded {
    pub intervals: Vec<Interval>,
    pub marks: Vec<Mark>,
    /// (block, warp) → the first and last record's time: each leader's stream.
    pub streams: BTreeMap<(u32, u32), (u64, u64)>,
    pub unmatched_begins: u64,
    pub unmatched_ends: u64,
    pub backwards: u64,
    pub unknown_tags: u64,
    pub requested: u64,
    pub capacity: u64,
    /// The records the buffer held (with one part per SM, a full part drops records while
    /// others still have room: what was dropped is `requested - kept`).
    pub kept: u64,
}

/// Pairs the records of each leader's stream: an end closes the latest open begin of the same
/// name (sections of other names may nest inside). `requested` is the buffer's count (what the
/// kernel asked to write) and `capacity` how many it holds.
pub fn decode(records: &[Record], names: &BTreeMap<u32, String>, requested: u64, capacity: u64) -> Decoded {
    let mut d = Decoded { requested, capacity, kept: records.len() as u64, ..Decoded::default() };
    let mut open: HashMap<(u32, u32, u32), Vec<(u64, u32)>> = HashMap::new();
    for r in records {
        let s = d.streams.entry((r.block, r.warp)).or_insert((r.time_ns, r.time_ns));
        s.0 = s.0.min(r.time_ns);
        s.1 = s.1.max(r.time_ns);
        let Some(name) = names.get(&r.tag) else {
            d.unknown_tags += 1;
            continue;
        };
        let key = (r.block, r.warp, r.tag);
        match r.kind {
            Kind::Begin => open.entry(key).or_default().push((r.time_ns, r.sm)),
            Kind::End => match open.get_mut(&key).and_then(Vec::pop) {
                Some((start, sm)) => {
                    if r.time_ns < start {
                        d.backwards += 1;
                    }
                    d.intervals.push(Interval {
                        name: name.clone(),
                        sm,
                        block: r.block,
                        warp: r.warp,
                        start_ns: start,
                        end_ns: r.time_ns.max(start),
                    });
                }
                None => d.unmatched_ends += 1,
            },
            Kind::Mark => {
                d.marks.push(Mark { name: name.clone(), sm: r.sm, block: r.block, warp: r.warp, time_ns: r.time_ns })
            }
            Kind::Other(_) => d.unknown_tags += 1,
        }
    }
    d.unmatched_begins = open.values().map(|v| v.len() as u64).sum();
    d
}

/// The value at quantile `q` of sorted values (nearest rank).
fn quantile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64
}

/// The statistics of a decoded launch, sections in the order they first began.
pub fn summarise(d: &Decoded, mechanism: &str) -> TraceSummary {
    let mut order: Vec<&str> = Vec::new();
    let mut by: HashMap<&str, Vec<&Interval>> = HashMap::new();
    let mut first: Vec<&Interval> = d.intervals.iter().collect();
    first.sort_by_key(|i| i.start_ns);
    for i in first {
        if !by.contains_key(i.name.as_str()) {
            order.push(&i.name);
        }
        by.entry(&i.name).or_default().push(i);
    }
    let span_of = |k: &(u32, u32)| d.streams.get(k).map_or(0, |(a, b)| b - a);
    let sections = order
        .iter()
        .map(|name| {
            let all = &by[name];
            let mut durations: Vec<u64> = all.iter().map(|i| i.end_ns - i.start_ns).collect();
            durations.sort_unstable();
            let total: u64 = durations.iter().sum();
            let streams: std::collections::BTreeSet<(u32, u32)> = all.iter().map(|i| (i.block, i.warp)).collect();
            let stream_time: u64 = streams.iter().map(span_of).sum();
            let mut per_sm: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
            for i in all {
                let e = per_sm.entry(i.sm).or_default();
                e.0 += i.end_ns - i.start_ns;
                e.1 += 1;
            }
            let means: Vec<f64> = per_sm.values().map(|(t, n)| *t as f64 / *n as f64).collect();
            SectionStats {
                name: name.to_string(),
                calls: durations.len() as u64,
                mean_ns: total as f64 / durations.len() as f64,
                median_ns: quantile(&durations, 0.5),
                p99_ns: quantile(&durations, 0.99),
                total_ns: total,
                share: if stream_time > 0 { total as f64 / stream_time as f64 } else { 0.0 },
                sms: per_sm.len(),
                sm_mean_min_ns: means.iter().copied().fold(f64::INFINITY, f64::min),
                sm_mean_max_ns: means.iter().copied().fold(0.0, f64::max),
            }
        })
        .collect();
    let mut marks: BTreeMap<&str, u64> = BTreeMap::new();
    for m in &d.marks {
        *marks.entry(&m.name).or_default() += 1;
    }
    let start = d.streams.values().map(|s| s.0).min().unwrap_or(0);
    let end = d.streams.values().map(|s| s.1).max().unwrap_or(0);
    let sms: std::collections::BTreeSet<u32> =
        d.intervals.iter().map(|i| i.sm).chain(d.marks.iter().map(|m| m.sm)).collect();
    TraceSummary {
        mechanism: mechanism.to_string(),
        requested: d.requested,
        capacity: d.capacity,
        dropped: d.requested.saturating_sub(d.kept),
        streams: d.streams.len(),
        sms: sms.len(),
        span_ns: end - start,
        sections,
        marks: marks.into_iter().map(|(n, c)| (n.to_string(), c)).collect(),
        unmatched_begins: d.unmatched_begins,
        unmatched_ends: d.unmatched_ends,
        backwards: d.backwards,
        unknown_tags: d.unknown_tags,
    }
}

/// The launch as Chrome trace events (Perfetto and chrome://tracing open it): one process per
/// SM, one thread per leader (`block b warp w`, or `block b` for block leaders), sections as
/// complete events and marks as instants, in microseconds from the first record.
pub fn chrome_trace(d: &Decoded, leader: Leader) -> serde_json::Value {
    let t0 = d.streams.values().map(|s| s.0).min().unwrap_or(0);
    let us = |t: u64| (t - t0) as f64 / 1000.0;
    let tid = |block: u32, warp: u32| u64::from(block) * 64 + u64::from(warp);
    // Past CHROME_MAX_STREAMS leaders, an evenly spaced sample of them (by SM, block, warp), so
    // the file opens in Perfetto; the statistics are over every record.
    let all: std::collections::BTreeSet<(u32, u32, u32)> = d
        .intervals
        .iter()
        .map(|i| (i.sm, i.block, i.warp))
        .chain(d.marks.iter().map(|m| (m.sm, m.block, m.warp)))
        .collect();
    let step = all.len().div_ceil(CHROME_MAX_STREAMS).max(1);
    let shown: std::collections::BTreeSet<(u32, u32, u32)> = all.iter().copied().step_by(step).collect();
    let mut events = Vec::new();
    let mut named = std::collections::BTreeSet::new();
    for i in d.intervals.iter().filter(|i| shown.contains(&(i.sm, i.block, i.warp))) {
        if named.insert((i.sm, i.block, i.warp)) {
            events.push(serde_json::json!({
                "name": "thread_name", "ph": "M", "pid": i.sm, "tid": tid(i.block, i.warp),
                "args": {"name": match leader {
                    Leader::Warp => format!("block {} warp {}", i.block, i.warp),
                    Leader::Block => format!("block {}", i.block),
                }}
            }));
        }
        events.push(serde_json::json!({
            "name": i.name, "ph": "X", "pid": i.sm, "tid": tid(i.block, i.warp),
            "ts": us(i.start_ns), "dur": (i.end_ns - i.start_ns) as f64 / 1000.0,
        }));
    }
    for m in d.marks.iter().filter(|m| shown.contains(&(m.sm, m.block, m.warp))) {
        events.push(serde_json::json!({
            "name": m.name, "ph": "i", "s": "t", "pid": m.sm, "tid": tid(m.block, m.warp), "ts": us(m.time_ns),
        }));
    }
    let sms: std::collections::BTreeSet<u32> = d.intervals.iter().map(|i| i.sm).collect();
    for sm in sms {
        events.push(
            serde_json::json!({"name": "process_name", "ph": "M", "pid": sm, "args": {"name": format!("SM {sm}")}}),
        );
    }
    serde_json::json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"leaders": all.len(), "leaders_shown": shown.len(), "leader": leader.as_str()},
    })
}

/// The most leaders (warps or blocks) the Chrome trace-event file shows.
pub const CHROME_MAX_STREAMS: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(time_ns: u64, name: &str, kind: Kind, sm: u32, block: u32, warp: u32) -> Record {
        Record { time_ns, tag: hash(name), kind, sm, block, warp, per_block: false }
    }

    fn bytes(records: &[Record]) -> Vec<u8> {
        records.iter().flat_map(|r| r.to_bytes()).collect()
    }

    #[test]
    fn the_hash_is_the_header_s() {
        // `rung_trace_hash("load")` and `("stored")` as nvcc compiled them into PTX
        // (`mov.u32 %r, -435725847` and `-70424450`).
        assert_eq!(hash("load") as i32, -435_725_847);
        assert_eq!(hash("stored") as i32, -70_424_450);
        let names = names_in("RUNG_TRACE_BEGIN(load); RUNG_TRACE_END( load );\nRUNG_TRACE_MARK(stored)");
        let got: Vec<&str> = names.values().map(String::as_str).collect();
        assert_eq!(got, ["load", "stored"]);
    }

    /// Two warps on two SMs, their records interleaved out of time order in the buffer, a
    /// nested section, and a mark: paired per warp, in buffer order.
    #[test]
    fn records_pair_per_leader_whatever_their_order_in_the_buffer() {
        use Kind::*;
        let rs = vec![
            rec(1_000, "load", Begin, 3, 0, 0),
            rec(2_500, "load", Begin, 7, 1, 0), // the other warp started later, written first below
            rec(1_400, "load", End, 3, 0, 0),
            rec(1_400, "reduce", Begin, 3, 0, 0),
            rec(1_450, "inner", Begin, 3, 0, 0),
            rec(1_500, "inner", End, 3, 0, 0),
            rec(3_300, "load", End, 7, 1, 0),
            rec(1_900, "reduce", End, 3, 0, 0),
            rec(2_000, "done", Mark, 3, 0, 0),
        ];
        let names =
            names_in("RUNG_TRACE_BEGIN(load) RUNG_TRACE_BEGIN(reduce) RUNG_TRACE_BEGIN(inner) RUNG_TRACE_MARK(done)");
        let d = decode(&parse(&bytes(&rs)), &names, 9, 100);
        assert_eq!(d.intervals.len(), 4);
        assert_eq!((d.unmatched_begins, d.unmatched_ends, d.backwards, d.unknown_tags), (0, 0, 0, 0));
        let s = summarise(&d, HEADER_MECHANISM);
        let names: Vec<&str> = s.sections.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["load", "reduce", "inner"]);
        let load = &s.sections[0];
        assert_eq!((load.calls, load.total_ns, load.sms), (2, 400 + 800, 2));
        assert_eq!((load.median_ns, load.p99_ns), (400.0, 800.0));
        assert_eq!((load.sm_mean_min_ns, load.sm_mean_max_ns), (400.0, 800.0));
        // Warp (0,0) ran 1000..2000 and warp (1,0) 2500..3300: load is 1200 of 1800 ns.
        assert!((load.share - 1200.0 / 1800.0).abs() < 1e-9, "{}", load.share);
        assert_eq!((s.streams, s.sms, s.span_ns, s.dropped), (2, 2, 2_300, 0));
        assert_eq!(s.marks, [("done".to_string(), 1)]);
    }

    /// A full buffer: the kernel asked for more records than fit; what was dropped is counted,
    /// and an end whose begin was dropped (or the reverse) is reported, not paired wrongly.
    #[test]
    fn a_full_buffer_is_counted_and_half_pairs_are_named() {
        use Kind::*;
        let names = names_in("RUNG_TRACE_BEGIN(a) RUNG_TRACE_BEGIN(b)");
        let rs = vec![rec(10, "a", End, 0, 0, 0), rec(20, "b", Begin, 0, 0, 0), rec(5, "zzz", Begin, 0, 0, 1)];
        // A trailing partial record (a copy cut short) is left out too.
        let mut raw = bytes(&rs);
        raw.extend_from_slice(&[1, 2, 3]);
        let d = decode(&parse(&raw), &names, 1_000, 3);
        let s = summarise(&d, HEADER_MECHANISM);
        assert_eq!((s.requested, s.capacity, s.dropped), (1_000, 3, 997));
        assert_eq!((s.unmatched_ends, s.unmatched_begins, s.unknown_tags), (1, 1, 1));
        assert!(s.sections.is_empty());
        // One part per SM: a full part drops records while the buffer as a whole has room, so
        // what was dropped is what was asked for less what was kept (6 kept of 9, in a buffer
        // of 8), and each leader's records, one part after the other, still pair.
        let parts = vec![
            rec(100, "a", Begin, 0, 0, 0),
            rec(300, "a", End, 0, 0, 0),
            rec(110, "a", Begin, 1, 1, 0),
            rec(210, "a", End, 1, 1, 0),
            rec(220, "b", Begin, 1, 1, 0),
            rec(260, "b", End, 1, 1, 0),
        ];
        let s = summarise(&decode(&parts, &names, 9, 8), HEADER_MECHANISM);
        assert_eq!((s.requested, s.capacity, s.dropped, s.unmatched_begins, s.unmatched_ends), (9, 8, 3, 0, 0));
        assert_eq!(s.sections.iter().map(|x| (x.name.as_str(), x.calls)).collect::<Vec<_>>(), [("a", 2), ("b", 1)]);
        // An end stamped before its begin is counted and held at zero length.
        let d = decode(&[rec(50, "a", Begin, 0, 0, 0), rec(40, "a", End, 0, 0, 0)], &names, 2, 8);
        assert_eq!((d.backwards, d.intervals[0].end_ns - d.intervals[0].start_ns), (1, 0));
    }

    /// The Chrome trace-event file parses back: complete events with non-negative durations,
    /// marks as instants, SMs and leaders named.
    #[test]
    fn the_chrome_trace_is_valid_trace_event_json() {
        use Kind::*;
        let names = names_in("RUNG_TRACE_BEGIN(load) RUNG_TRACE_MARK(m)");
        let rs = [rec(5_000, "load", Begin, 2, 4, 1), rec(7_500, "load", End, 2, 4, 1), rec(8_000, "m", Mark, 2, 4, 1)];
        let text = serde_json::to_string(&chrome_trace(&decode(&rs, &names, 3, 8), Leader::Warp)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let x = events.iter().find(|e| e["ph"] == "X").unwrap();
        assert_eq!((x["name"].as_str(), x["ts"].as_f64(), x["dur"].as_f64()), (Some("load"), Some(0.0), Some(2.5)));
        assert_eq!((x["pid"].as_u64(), x["tid"].as_u64()), (Some(2), Some(4 * 64 + 1)));
        let i = events.iter().find(|e| e["ph"] == "i").unwrap();
        assert_eq!(i["ts"].as_f64(), Some(3.0));
        assert!(events.iter().any(|e| e["ph"] == "M" && e["args"]["name"] == "SM 2"));
        assert!(events.iter().any(|e| e["ph"] == "M" && e["args"]["name"] == "block 4 warp 1"));
        assert!(events.iter().all(|e| e["ph"] != "X" || e["dur"].as_f64().unwrap() >= 0.0));
        // Block leaders are named by their block alone, and the file says which leader wrote.
        let v = chrome_trace(&decode(&rs, &names, 3, 8), Leader::Block);
        let events = v["traceEvents"].as_array().unwrap();
        assert!(events.iter().any(|e| e["ph"] == "M" && e["args"]["name"] == "block 4"));
        assert!(!events.iter().any(|e| e["args"]["name"].as_str().is_some_and(|n| n.contains("warp"))));
        assert_eq!(v["otherData"]["leader"], "block");
    }

    /// Each record says which leader wrote it (its last word), and the launch's leader is what
    /// its records say: block only when every one was written by a block's thread 0.
    #[test]
    fn the_records_say_which_leader_wrote_them() {
        use Kind::*;
        let by_block = |r: Record| Record { per_block: true, ..r };
        let block = [by_block(rec(1, "a", Begin, 0, 3, 0)), by_block(rec(2, "a", End, 0, 3, 0))];
        let parsed = parse(&block.iter().flat_map(Record::to_bytes).collect::<Vec<u8>>());
        assert_eq!(parsed, block);
        assert_eq!(leader_of(&parsed), Some(Leader::Block));
        assert_eq!(leader_of(&[rec(1, "a", Begin, 0, 3, 1)]), Some(Leader::Warp));
        assert_eq!(leader_of(&[block[0], rec(1, "a", Begin, 0, 3, 1)]), Some(Leader::Warp));
        assert_eq!(leader_of(&[]), None);
        // A last word other than 0 or 1 is not a block leader's.
        let mut raw = block[0].to_bytes();
        raw[28] = 7;
        assert!(!parse(&raw)[0].per_block);
    }

    /// A source chooses block leaders by defining RUNG_TRACE_PER_BLOCK itself; a mention in a
    /// comment, another macro with that prefix or an #undef does not.
    #[test]
    fn a_source_that_defines_per_block_is_traced_per_block() {
        let with = |line: &str| leader_declared(&format!("// rung: block=256\n{line}\n#include <rung_trace.cuh>\n"));
        assert_eq!(with("#define RUNG_TRACE_PER_BLOCK"), Leader::Block);
        assert_eq!(with("  #  define\tRUNG_TRACE_PER_BLOCK 1"), Leader::Block);
        assert_eq!(with("// #define RUNG_TRACE_PER_BLOCK"), Leader::Warp);
        assert_eq!(with("/* one per block:\n#define RUNG_TRACE_PER_BLOCK\n*/"), Leader::Warp);
        assert_eq!(with("/* a note */ #define RUNG_TRACE_PER_BLOCK"), Leader::Block);
        assert_eq!(with("#define RUNG_TRACE_PER_BLOCKS"), Leader::Warp);
        assert_eq!(with("#undef RUNG_TRACE_PER_BLOCK"), Leader::Warp);
        assert_eq!(with("#defineRUNG_TRACE_PER_BLOCK"), Leader::Warp);
    }

    /// A launch of more leaders than the file shows: an even sample of them, every SM still
    /// there, the totals said; the statistics keep every record.
    #[test]
    fn past_the_cap_the_chrome_trace_shows_an_even_sample_of_leaders() {
        use Kind::*;
        let names = names_in("RUNG_TRACE_BEGIN(load)");
        let leaders = CHROME_MAX_STREAMS * 3 + 7;
        let rs: Vec<Record> = (0..leaders as u32)
            .flat_map(|w| {
                let (sm, block) = (w % 132, w / 8);
                [rec(1_000, "load", Begin, sm, block, w % 8), rec(2_000, "load", End, sm, block, w % 8)]
            })
            .collect();
        let d = decode(&rs, &names, rs.len() as u64, rs.len() as u64);
        assert_eq!(summarise(&d, HEADER_MECHANISM).sections[0].calls as usize, leaders);
        let v = chrome_trace(&d, Leader::Warp);
        let shown = v["otherData"]["leaders_shown"].as_u64().unwrap() as usize;
        assert_eq!(v["otherData"]["leaders"].as_u64(), Some(leaders as u64));
        assert!(shown <= CHROME_MAX_STREAMS && shown > CHROME_MAX_STREAMS / 2, "{shown}");
        let events = v["traceEvents"].as_array().unwrap();
        assert_eq!(events.iter().filter(|e| e["ph"] == "X").count(), shown);
        let sms: std::collections::BTreeSet<u64> =
            events.iter().filter(|e| e["ph"] == "X").map(|e| e["pid"].as_u64().unwrap()).collect();
        assert_eq!(sms.len(), 132, "the sample spans every SM");
    }
}
