//! The profile rung's readers on output captured from Nsight Compute 2025.3 and compute-sanitizer
//! on an H200 (`tests/fixtures/profile/README.md` has the commands): the demo's five kernels at
//! the benchmark size, the out-of-bounds fault under memcheck, a reduction missing its barriers
//! under racecheck.

use std::path::Path;

use rung::profile::{self, Bound, Sanitizer};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/profile").join(name)).unwrap()
}

#[test]
fn the_raw_page_summarises_each_demo_kernel() {
    let k = &profile::parse_raw(&fixture("ncu-raw-v005.csv")).unwrap()[0];
    assert_eq!((k.kernel.as_str(), k.grid.as_str(), k.block.as_str()), ("rmsnorm", "(16384, 1, 1)", "(1024, 1, 1)"));
    assert!((k.duration_us - 250.88).abs() < 1e-9, "{}", k.duration_us);
    // Mbyte are 10^6 bytes: 536.933376 Mbyte read, 512.664064 written.
    let near = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-3);
    assert!(near(k.dram_read_bytes, 536_933_376.0), "{:?}", k.dram_read_bytes);
    assert!(near(k.dram_write_bytes, 512_664_064.0), "{:?}", k.dram_write_bytes);
    let gbs = k.dram_gbs.unwrap();
    assert!((gbs - 4183.7).abs() < 1.0, "{gbs}");
    assert_eq!(k.bound, Bound::Memory);
    assert!(k.why.contains("memory at 87% of peak, SMs at 31%"), "{}", k.why);
    assert_eq!(k.registers_per_thread, Some(32.0));
    assert_eq!(k.shared_bytes_per_block, Some(128.0));
    // Two blocks of 1024 threads fill an SM's 64 warps: nothing holds occupancy below full.
    assert_eq!(k.occupancy_limiter, None);
    assert_eq!(k.dram_percent, Some(86.952394));
    assert_eq!(k.waves, Some(62.06));
    assert!((k.achieved_occupancy_percent.unwrap() - 90.850656).abs() < 1e-6);
    assert_eq!(k.theoretical_occupancy_percent, Some(100.0));
    assert!((k.l2_hit_percent.unwrap() - 51.142154).abs() < 1e-6);
    assert!(k.tensor_percent.unwrap() < 1.0, "no tensor-core instructions");
    assert_eq!(k.stalls[0].0, "long scoreboard", "{:?}", k.stalls);
    assert!(k.stalls.len() <= 5 && k.stalls.windows(2).all(|w| w[0].1 >= w[1].1));
    assert!(!k.stalls.iter().any(|s| s.0 == "selected"), "the issuing warp is not a stall");
}

#[test]
fn the_naive_kernel_is_latency_bound_and_milliseconds_become_microseconds() {
    let k = &profile::parse_raw(&fixture("ncu-raw-v001.csv")).unwrap()[0];
    assert!((k.duration_us - 3908.512).abs() < 1e-6, "ms → µs: {}", k.duration_us);
    // Gbyte: 1.101734 × 10^9.
    assert!((k.dram_read_bytes.unwrap() - 1_101_734_000.0).abs() < 1e-3, "{:?}", k.dram_read_bytes);
    assert_eq!(k.bound, Bound::Latency, "{}", k.why);
    assert!(k.why.contains("12% achieved occupancy"), "{}", k.why);
    // 64 blocks on 132 SMs: most SMs have nothing to run, which is what the occupancy says.
    assert!(k.why.contains("the grid (64 blocks) is 0.06 of a wave: SMs sit idle"), "{}", k.why);
    // Every demo kernel parses; the Triton one under its own name.
    let names: Vec<String> = ["v001", "v002", "v003", "v004", "v005"]
        .iter()
        .map(|v| profile::parse_raw(&fixture(&format!("ncu-raw-{v}.csv"))).unwrap()[0].kernel.clone())
        .collect();
    assert_eq!(names, ["rmsnorm", "rmsnorm", "rmsnorm", "rmsnorm_kernel", "rmsnorm"]);
}

#[test]
fn a_table_that_is_not_a_raw_page_is_refused_with_what_to_run() {
    let e = profile::parse_raw("\"ID\",\"Kernel Name\"\n\"\",\"\"\n").unwrap_err();
    assert!(e.0.contains("gpu__time_duration.sum") && e.0.contains("--page raw"), "{e}");
    assert!(profile::parse_raw("").unwrap_err().0.contains("empty"));
    let header = fixture("ncu-raw-v005.csv").lines().take(2).collect::<Vec<_>>().join("\n");
    assert!(profile::parse_raw(&header).unwrap_err().0.contains("no kernel rows"));
}

#[test]
fn the_source_page_gives_the_sass_hot_spots() {
    let spots = profile::parse_source(&fixture("ncu-source-v003.csv"), 5);
    let k = &spots["rmsnorm"];
    assert_eq!(k.len(), 5);
    assert!(k.windows(2).all(|w| w[0].samples >= w[1].samples));
    assert!(k[0].percent > 0.0 && k.iter().map(|s| s.percent).sum::<f64>() <= 100.0 + 1e-9);
    // The loads' consumer waits on them (long scoreboard): the samples land on the FMUL.
    assert_eq!((k[0].sass.as_str(), k[0].samples), ("FMUL R23, R15, R15", 10718));
    assert!(k.iter().any(|s| s.sass == "@!P3 LDS R0, [R28]"), "spaces squeezed: {k:?}");
    let t = profile::parse_source(&fixture("ncu-source-v004.csv"), 3);
    assert!(t.contains_key("rmsnorm_kernel"), "{:?}", t.keys());
}

#[test]
fn memcheck_finds_the_out_of_bounds_write_at_its_line() {
    let (findings, summary) = profile::parse_sanitizer(&fixture("memcheck.txt"));
    assert_eq!(summary.as_deref(), Some("ERROR SUMMARY: 2 errors"));
    assert_eq!(findings.len(), 1, "the launch failure that follows is a consequence: {findings:?}");
    let f = &findings[0];
    assert_eq!(f.what, "Invalid __global__ write of size 4 bytes");
    assert_eq!((f.kernel.as_deref(), f.file.as_deref(), f.line), (Some("rmsnorm"), Some("sanitize.cu"), Some(18)));
    assert!(f.details.iter().any(|d| d.contains("block (3,0,0)")), "{:?}", f.details);
    assert!(f.details.iter().any(|d| d.contains("1 bytes after the nearest allocation")), "{:?}", f.details);
    // The sanitizer names the file as the compiler was given it: the version's own file.
    let ds = profile::diagnostics(&findings, Sanitizer::Memcheck, Path::new("/ws"), Path::new("versions/sanitize.cu"));
    assert_eq!(ds[0].file, Path::new("versions/sanitize.cu"));
    assert_eq!(ds[0].line, 18);
    assert!(ds[0].message.starts_with("memcheck: Invalid __global__ write") && ds[0].message.ends_with("in rmsnorm"));
}

#[test]
fn racecheck_finds_the_race_and_both_sides() {
    let (findings, summary) = profile::parse_sanitizer(&fixture("racecheck.txt"));
    assert_eq!(summary.as_deref(), Some("RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"));
    assert_eq!(findings.len(), 1);
    let f = &findings[0];
    assert_eq!(f.what, "Race reported between Read access");
    assert_eq!((f.kernel.as_deref(), f.line), (Some("racy_sum"), Some(27)));
    assert!(
        f.details[0].contains("Write access at racy_sum+0x130 in sanitize.cu:24 [2304 hazards]"),
        "{:?}",
        f.details
    );
    // A clean report has no findings.
    let (none, _) = profile::parse_sanitizer("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n");
    assert!(none.is_empty());
}

/// Found by tests/fuzz.rs: sample counts past u64 (a garbled export) overflowed the sum.
#[test]
fn huge_sample_counts_do_not_overflow() {
    let text = "\"Kernel Name\",\"k\"\n\"Address\",\"Source\",\"Warp Stall Sampling (All Samples)\"\n\
                \"0x0\",\"LDG.E R0, [R2]\",\"1e308\"\n\"0x10\",\"FFMA R0, R0, R0\",\"1e308\"\n";
    let spots = rung::profile::parse_source(text, 5);
    assert_eq!(spots["k"].len(), 2, "{spots:?}");
}
