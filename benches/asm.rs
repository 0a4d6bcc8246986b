//! Parsing and diffing two real 100,000-line SASS listings (benches/data/big.cu built with
//! VARIANT 0 and 1 by the CUDA toolchain rung finds, disassembled by nvdisasm; a few percent
//! of the instructions differ). Also prints the edit-script size next to
//! `git diff --no-index --minimal` on the same normalised text, and git's own time.

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::Command;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use rung::asm::{self, AsmKind, Normalize};

/// The text that is diffed, one kernel after another, for git to diff too.
fn normalised_text(kinds: &[asm::KernelListing]) -> String {
    let mut s = String::new();
    for k in kinds {
        s.push_str(&format!("== {}\n", k.name));
        for l in asm::normalized_lines(AsmKind::Sass, k, Normalize::default()) {
            s.push_str(&l);
            s.push('\n');
        }
    }
    s
}

fn bench(c: &mut Criterion) {
    let Some((a, b)) = common::big_sass_pair() else { return };
    let la = asm::parse(AsmKind::Sass, &a);
    let lb = asm::parse(AsmKind::Sass, &b);
    let lines = |ks: &[asm::KernelListing]| ks.iter().map(|k| k.lines.len()).sum::<usize>();
    let d = asm::diff::diff(AsmKind::Sass, &la, &lb, Normalize::default());

    // The same comparison by git, on exactly the lines rung compares.
    let tmp = std::env::temp_dir().join(format!("rung-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::write(tmp.join("a.txt"), normalised_text(&la)).unwrap();
    std::fs::write(tmp.join("b.txt"), normalised_text(&lb)).unwrap();
    let t = Instant::now();
    let git = Command::new("git")
        .args(["diff", "--no-index", "--minimal", "--numstat", "a.txt", "b.txt"])
        .current_dir(&tmp)
        .output()
        .expect("git runs");
    let git_time = t.elapsed();
    let stat = String::from_utf8_lossy(&git.stdout);
    let nums: Vec<usize> = stat.split_whitespace().take(2).filter_map(|n| n.parse().ok()).collect();
    let git_edits = nums.iter().sum::<usize>();
    let _ = std::fs::remove_dir_all(&tmp);
    println!(
        "listings: {} and {} raw lines, {} and {} listing lines in {} kernels",
        a.lines().count(),
        b.lines().count(),
        lines(&la),
        lines(&lb),
        la.len()
    );
    println!(
        "edit script: rung {} lines (-{} +{}), git --minimal {} lines; difference {:+.2}%; git took {:.1} ms",
        d.edit_size(),
        d.kernels.iter().map(|k| k.deleted).sum::<usize>(),
        d.kernels.iter().map(|k| k.inserted).sum::<usize>(),
        git_edits,
        (d.edit_size() as f64 - git_edits as f64) / git_edits.max(1) as f64 * 100.0,
        git_time.as_secs_f64() * 1e3
    );

    let mut g = c.benchmark_group("sass-100k");
    g.sample_size(20);
    g.bench_function("parse", |bch| bch.iter(|| asm::parse(AsmKind::Sass, std::hint::black_box(&a))));
    g.bench_function("diff", |bch| bch.iter(|| asm::diff::diff(AsmKind::Sass, &la, &lb, Normalize::default())));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
