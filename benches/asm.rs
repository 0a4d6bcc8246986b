//! Parsing and diffing two real 100,000-line SASS listings (benches/data/big.cu built with
//! VARIANT 0 and 1 by the CUDA toolchain rung finds, disassembled by nvdisasm; a few percent
//! of the instructions differ). Also prints the edit-script size next to
//! `git diff --no-index --minimal` on the same normalised text, and git's own time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use rung::asm::{self, AsmKind, Normalize};

/// Builds (once; cached under target/bench-data) and returns the two SASS listings.
fn listings() -> Option<(String, String)> {
    let tc = rung::toolchain::Toolchain::discover();
    let (Some(nvcc), Some(nvdisasm)) = (tc.nvcc, tc.nvdisasm) else {
        eprintln!("SKIPPED: no nvcc/nvdisasm (run `rung setup`)");
        return None;
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/data/big.cu");
    let text = std::fs::read(&src).ok()?;
    let key = rung::store::sha256_hex(&text);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-data").join(&key[..12]);
    std::fs::create_dir_all(&dir).ok()?;
    let mut out = Vec::new();
    for v in [0, 1] {
        let sass = dir.join(format!("big{v}.sass"));
        if !sass.is_file() {
            let cubin = dir.join(format!("big{v}.cubin"));
            let ok = Command::new(&nvcc.path)
                .args(["-arch=sm_90", "-cubin", "-O3", &format!("-DVARIANT={v}"), "-o"])
                .arg(&cubin)
                .arg(&src)
                .status()
                .ok()?
                .success();
            assert!(ok, "nvcc failed on {}", src.display());
            let dis = Command::new(&nvdisasm.path).arg("-c").arg(&cubin).output().ok()?;
            std::fs::write(&sass, dis.stdout).ok()?;
        }
        out.push(std::fs::read_to_string(&sass).ok()?);
    }
    Some((out.remove(0), out.remove(0)))
}

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
    let Some((a, b)) = listings() else { return };
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
