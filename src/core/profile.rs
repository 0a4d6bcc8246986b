//! The profile rung's readers: Nsight Compute's raw page (`ncu --csv --page raw`) summarised per
//! kernel into what limits it, its source page (`--page source --print-source sass`) into SASS
//! hot spots, and compute-sanitizer's memcheck and racecheck reports into diagnostics at source
//! lines. Each is tested on output captured from the tools on an H200
//! (`tests/fixtures/profile/`).

use std::collections::BTreeMap;
use std::path::Path;

use crate::diag::{Diagnostic, Pos};
pub use crate::model::profile::{Bound, Finding, HotSpot, KernelProfile, Sanitizer};

/// A unit at or above this share of its peak is busy (Nsight Compute's own guidance starts to
/// call a kernel bound by a unit from about 60%).
pub const BUSY_PERCENT: f64 = 60.0;

/// A `--page raw` CSV could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

/// A number as Nsight Compute prints it (`65,536`, `1.10`, `n/a`).
fn number(s: &str) -> Option<f64> {
    let t: String = s.trim().chars().filter(|c| *c != ',').collect();
    t.parse().ok().filter(|x: &f64| x.is_finite())
}

/// The factor that turns a value in `unit` into the base unit (seconds' µs, bytes).
fn scale(unit: &str) -> Option<f64> {
    Some(match unit {
        "ns" | "nsecond" => 1e-3,
        "us" | "usecond" => 1.0,
        "ms" | "msecond" => 1e3,
        "s" | "second" => 1e6,
        "byte" | "byte/block" => 1.0,
        "Kbyte" | "Kbyte/block" => 1e3,
        "Mbyte" | "Mbyte/block" => 1e6,
        "Gbyte" => 1e9,
        "Tbyte" => 1e12,
        _ => return None,
    })
}

/// Every kernel launch in a `ncu --csv --page raw` export: a header row of metric names, a row of
/// units, then a row per launch.
pub fn parse_raw(text: &str) -> Result<Vec<KernelProfile>, ParseError> {
    let mut rows = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(text.as_bytes());
    let mut records = rows.records();
    let header = records
        .next()
        .ok_or_else(|| ParseError("empty: Nsight Compute wrote no table (did it profile any kernel?)".into()))?
        .map_err(|e| ParseError(format!("not CSV: {e}")))?;
    let col: BTreeMap<&str, usize> = header.iter().enumerate().map(|(i, h)| (h, i)).collect();
    for need in ["Kernel Name", "gpu__time_duration.sum"] {
        if !col.contains_key(need) {
            return Err(ParseError(format!(
                "no `{need}` column: not a `--page raw` export with the default sections (ncu --csv --page raw)"
            )));
        }
    }
    let units = match records.next() {
        Some(Ok(u)) => u,
        _ => return Err(ParseError("no units row under the header".into())),
    };
    let mut out = Vec::new();
    for rec in records {
        let rec = rec.map_err(|e| ParseError(format!("a row is not CSV: {e}")))?;
        let raw = |name: &str| col.get(name).and_then(|i| rec.get(*i)).unwrap_or("");
        let value = |name: &str| -> Option<f64> {
            let i = *col.get(name)?;
            let v = number(rec.get(i)?)?;
            let unit = units.get(i).unwrap_or("");
            Some(v * scale(unit).unwrap_or(1.0))
        };
        let Some(duration_us) = value("gpu__time_duration.sum") else { continue };
        let limits = [
            ("registers", "launch__occupancy_limit_registers"),
            ("shared memory", "launch__occupancy_limit_shared_mem"),
            ("warps", "launch__occupancy_limit_warps"),
            ("blocks", "launch__occupancy_limit_blocks"),
            ("barriers", "launch__occupancy_limit_barriers"),
        ];
        // The smallest limit caps the blocks per SM; a tie names the first (registers first, as
        // the one most often changed).
        let theoretical = value("sm__maximum_warps_per_active_cycle_pct");
        let occupancy_limiter = limits
            .iter()
            .filter_map(|(what, m)| value(m).map(|v| (*what, v)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(w, _)| w.to_string())
            .filter(|_| theoretical.is_none_or(|t| t < 99.5));
        let mut stalls: Vec<(String, f64)> = header
            .iter()
            .filter_map(|h| {
                let reason =
                    h.strip_prefix("smsp__average_warps_issue_stalled_")?.strip_suffix("_per_issue_active.ratio")?;
                // `selected` is the issuing warp itself, not a stall.
                (reason != "selected" && !reason.ends_with("not_issued")).then_some(reason)
            })
            .filter_map(|reason| {
                let v = value(&format!("smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"))?;
                (v > 0.0).then(|| (reason.replace('_', " "), v))
            })
            .collect();
        stalls.sort_by(|a, b| b.1.total_cmp(&a.1));
        stalls.truncate(5);
        let tensor_percent = header
            .iter()
            .filter(|h| {
                h.starts_with("sm__inst_executed_pipe_tensor") && h.ends_with(".avg.pct_of_peak_sustained_active")
            })
            .filter_map(&value)
            .max_by(f64::total_cmp);
        let shared = match (value("launch__shared_mem_per_block_static"), value("launch__shared_mem_per_block_dynamic"))
        {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        let (dram_read_bytes, dram_write_bytes) = (value("dram__bytes_read.sum"), value("dram__bytes_write.sum"));
        let dram_gbs = match (dram_read_bytes, dram_write_bytes) {
            (Some(r), Some(w)) if duration_us > 0.0 => Some((r + w) / (duration_us * 1e-6) / 1e9),
            _ => None,
        };
        let sm_percent = value("sm__throughput.avg.pct_of_peak_sustained_elapsed");
        let memory_percent = value("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed");
        let achieved = value("sm__warps_active.avg.pct_of_peak_sustained_active");
        let waves = value("launch__waves_per_multiprocessor");
        let (bound, mut why) = classify(sm_percent, memory_percent, achieved);
        if let Some(w) = waves.filter(|w| *w < 1.0) {
            why.push_str(&format!(
                "; the grid ({} blocks) is {w:.2} of a wave: SMs sit idle",
                number(raw("launch__grid_size")).map_or("?".into(), |g| format!("{g:.0}"))
            ));
        }
        out.push(KernelProfile {
            kernel: raw("Kernel Name").to_string(),
            grid: raw("Grid Size").to_string(),
            block: raw("Block Size").to_string(),
            duration_us,
            sm_percent,
            memory_percent,
            dram_percent: value("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")
                .or_else(|| value("dram__throughput.avg.pct_of_peak_sustained_elapsed")),
            dram_read_bytes,
            dram_write_bytes,
            dram_gbs,
            achieved_occupancy_percent: achieved,
            theoretical_occupancy_percent: theoretical,
            occupancy_limiter,
            waves,
            registers_per_thread: value("launch__registers_per_thread"),
            shared_bytes_per_block: shared,
            l1_hit_percent: value("l1tex__t_sector_hit_rate.pct"),
            l2_hit_percent: value("lts__t_sector_hit_rate.pct"),
            stalls,
            tensor_percent,
            bound,
            why,
            hot_spots: vec![],
        });
    }
    if out.is_empty() {
        return Err(ParseError("the table has no kernel rows (nothing was profiled)".into()));
    }
    Ok(out)
}

/// Memory-, compute- or latency-bound, from the two speed-of-light shares, with the numbers.
pub fn classify(sm: Option<f64>, memory: Option<f64>, occupancy: Option<f64>) -> (Bound, String) {
    let (s, m) = (sm.unwrap_or(0.0), memory.unwrap_or(0.0));
    let occ = occupancy.map(|o| format!(", {o:.0}% achieved occupancy")).unwrap_or_default();
    if m >= BUSY_PERCENT && m >= s {
        (Bound::Memory, format!("memory at {m:.0}% of peak, SMs at {s:.0}%"))
    } else if s >= BUSY_PERCENT {
        (Bound::Compute, format!("SMs at {s:.0}% of peak, memory at {m:.0}%"))
    } else {
        (
            Bound::Latency,
            format!(
                "neither unit is busy (memory {m:.0}%, SMs {s:.0}%, under {BUSY_PERCENT:.0}%){occ}: the warps wait; see the stall reasons"
            ),
        )
    }
}

/// The hot spots per kernel from a `--page source --csv --print-source sass` export: each
/// kernel's block starts with a `"Kernel Name","<name>"` line, then a header and a row per SASS
/// instruction with its warp-stall samples. The `top` instructions with most samples, by kernel.
pub fn parse_source(text: &str, top: usize) -> BTreeMap<String, Vec<HotSpot>> {
    let mut out: BTreeMap<String, Vec<HotSpot>> = BTreeMap::new();
    let mut rows = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(text.as_bytes());
    let mut kernel: Option<String> = None;
    let mut columns: Option<(usize, usize)> = None;
    let mut spots: Vec<(String, u64)> = Vec::new();
    let mut finish = |kernel: &Option<String>, spots: &mut Vec<(String, u64)>| {
        if let Some(k) = kernel {
            // Saturating: a sample count past u64 (a garbled export) once overflowed the sum.
            let total: u64 = spots.iter().fold(0u64, |a, s| a.saturating_add(s.1));
            spots.sort_by_key(|s| std::cmp::Reverse(s.1));
            let list = spots
                .iter()
                .take(top)
                .filter(|s| s.1 > 0)
                .map(|(sass, n)| HotSpot {
                    sass: sass.clone(),
                    samples: *n,
                    percent: if total > 0 { *n as f64 * 100.0 / total as f64 } else { 0.0 },
                })
                .collect();
            out.insert(k.clone(), list);
        }
        spots.clear();
    };
    for rec in rows.records().flatten() {
        if rec.get(0) == Some("Kernel Name") {
            finish(&kernel, &mut spots);
            kernel = rec.get(1).map(str::to_string);
            columns = None;
            continue;
        }
        if rec.get(0) == Some("Address") {
            let find = |name: &str| rec.iter().position(|h| h == name);
            columns = find("Source").zip(find("Warp Stall Sampling (All Samples)"));
            continue;
        }
        if let Some((src, samples)) = columns {
            let sass = rec.get(src).unwrap_or("").split_whitespace().collect::<Vec<_>>().join(" ");
            let n = rec.get(samples).and_then(number).unwrap_or(0.0) as u64;
            if !sass.is_empty() {
                spots.push((sass, n));
            }
        }
    }
    finish(&kernel, &mut spots);
    out
}

/// The findings in a compute-sanitizer report (memcheck: an error block per bad access;
/// racecheck: an error per race, with its hazard counts), and its closing summary line.
pub fn parse_sanitizer(text: &str) -> (Vec<Finding>, Option<String>) {
    let mut findings: Vec<Finding> = Vec::new();
    let mut summary = None;
    let mut open = false;
    for line in text.lines() {
        let Some(body) = line.strip_prefix("=========") else {
            open = false;
            continue;
        };
        let trimmed = body.trim();
        if trimmed.is_empty() {
            open = false;
            continue;
        }
        if trimmed.starts_with("ERROR SUMMARY") || trimmed.starts_with("RACECHECK SUMMARY") {
            summary = Some(trimmed.to_string());
            open = false;
            continue;
        }
        let indented = body.starts_with("     ");
        if !indented {
            // A new finding: memcheck's `Invalid __global__ write ...`, racecheck's `Error: Race
            // reported between ... at k+0x190 in f.cu:27`. Other top-level lines (the banner,
            // `Program hit cudaErrorLaunchFailure`, `Target application returned an error`) are
            // consequences, not findings.
            let what = trimmed.strip_prefix("Error: ").unwrap_or(trimmed);
            let is_finding = what.starts_with("Invalid ")
                || what.starts_with("Race reported")
                || what.starts_with("Malloc/Free")
                || what.starts_with("Misaligned")
                || what.starts_with("Out-of-range")
                || what.starts_with("Uninitialized");
            open = is_finding;
            if is_finding {
                let mut f = Finding { what: what.to_string(), kernel: None, file: None, line: None, details: vec![] };
                if let Some((k, file, line)) = location(what) {
                    f.kernel = Some(k);
                    f.file = Some(file);
                    f.line = Some(line);
                    // Keep the message without the location it was split off.
                    f.what = what.split(" at ").next().unwrap_or(what).trim().to_string();
                }
                findings.push(f);
            }
            continue;
        }
        if !open {
            continue;
        }
        let Some(f) = findings.last_mut() else { continue };
        if trimmed.starts_with("Saved host backtrace") || trimmed.starts_with("Host Frame") {
            continue;
        }
        if f.file.is_none()
            && let Some((k, file, line)) = location(trimmed)
        {
            f.kernel = Some(k);
            f.file = Some(file);
            f.line = Some(line);
            continue;
        }
        f.details.push(trimmed.to_string());
    }
    (findings, summary)
}

/// `at rmsnorm+0x6d0 in sanitize.cu:18` → (kernel, file, line).
fn location(text: &str) -> Option<(String, String, u32)> {
    let at = text.find("at ")?;
    let rest = &text[at + 3..];
    let (func, rest) = rest.split_once(" in ")?;
    let place = rest.split_whitespace().next()?;
    let (file, line) = place.rsplit_once(':')?;
    let line: u32 = line.parse().ok()?;
    let kernel = func.split('+').next()?.trim().to_string();
    Some((kernel, file.to_string(), line))
}

/// Findings as diagnostics at their lines, relative to the workspace when the file is in it (the
/// sanitizer names files as the compiler was given them).
pub fn diagnostics(findings: &[Finding], tool: Sanitizer, root: &Path, version_file: &Path) -> Vec<Diagnostic> {
    findings
        .iter()
        .map(|f| {
            let file = match &f.file {
                Some(name) => {
                    let p = Path::new(name);
                    let p = p.strip_prefix(root).unwrap_or(p);
                    // A bare file name is the version's own (the build compiles it by name).
                    if p.components().count() == 1 && version_file.file_name() == Some(p.as_os_str()) {
                        version_file.to_path_buf()
                    } else {
                        p.to_path_buf()
                    }
                }
                None => version_file.to_path_buf(),
            };
            let pos = f.line.map_or(Pos::WHOLE_FILE, |l| Pos::new(l, 0));
            let kernel = f.kernel.as_deref().map(|k| format!(" in {k}")).unwrap_or_default();
            let mut d = Diagnostic::error(file, pos, format!("{}: {}{kernel}", tool.name(), f.what));
            if !f.details.is_empty() {
                d = d.with_help(f.details.join("; "));
            }
            d
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_units_as_ncu_prints_them() {
        assert_eq!(number("65,536"), Some(65536.0));
        assert_eq!(number(" 1.5 "), Some(1.5));
        assert_eq!(number("n/a"), None);
        assert_eq!(scale("ms"), Some(1e3));
        assert_eq!(scale("Kbyte/block"), Some(1e3));
        assert_eq!(scale("inst"), None);
    }

    #[test]
    fn classification_names_the_busier_unit_and_its_numbers() {
        assert_eq!(classify(Some(30.0), Some(87.0), Some(90.0)).0, Bound::Memory);
        assert_eq!(classify(Some(80.0), Some(40.0), None).0, Bound::Compute);
        let (b, why) = classify(Some(3.0), Some(48.0), Some(12.5));
        assert_eq!(b, Bound::Latency);
        assert!(why.contains("48%") && why.contains("12% achieved occupancy"), "{why}");
    }

    #[test]
    fn a_location_splits_into_kernel_file_and_line() {
        assert_eq!(
            location("at rmsnorm+0x6d0 in versions/v001-naive.cu:18"),
            Some(("rmsnorm".into(), "versions/v001-naive.cu".into(), 18))
        );
        assert_eq!(location("by thread (0,0,0) in block (3,0,0)"), None);
    }
}
