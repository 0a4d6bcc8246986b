//! PTX and SASS listings: parsed from real tool output, and diffed on the demo.

use std::path::Path;
use std::process::Command;

use rung::asm::{self, AsmKind, Normalize};

fn fixture(case: &str, file: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/build").join(case).join(file))
        .unwrap()
}

#[test]
fn cuobjdump_and_nvdisasm_listings_agree() {
    let a = asm::parse(AsmKind::Sass, &fixture("cuobjdump-sass", "stdout.txt"));
    let b = asm::parse(AsmKind::Sass, &fixture("nvdisasm-sass", "stdout.txt"));
    let names = |ks: &[asm::KernelListing]| ks.iter().map(|k| k.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&a).len(), 5);
    assert_eq!(names(&a), names(&b));
    for (ka, kb) in a.iter().zip(&b) {
        let ia: Vec<String> = ka.lines.iter().filter_map(|l| l.instr.as_ref()).map(|i| i.mnemonic()).collect();
        let ib: Vec<String> = kb.lines.iter().filter_map(|l| l.instr.as_ref()).map(|i| i.mnemonic()).collect();
        assert_eq!(ia, ib, "{}", ka.name);
        assert!(kb.lines.iter().any(|l| l.source_line.is_some()), "nvdisasm -g keeps source lines");
        // Both give branch targets labels, so the two listings diff as equal.
        let d =
            asm::diff::diff(AsmKind::Sass, std::slice::from_ref(ka), std::slice::from_ref(kb), Normalize::default());
        assert_eq!(
            d.edit_size(),
            0,
            "{}: {:?}",
            ka.name,
            d.kernels[0].rows.iter().find(|r| r.kind != asm::diff::RowKind::Equal)
        );
    }
    let spill = asm::mix::mix(AsmKind::Sass, &a[0]);
    assert!(spill.count("local store (spill)") > 0 && spill.count("local load (spill)") > 0, "{spill:?}");
}

#[test]
fn ptx_listing_from_a_real_compile() {
    let ks = asm::parse(AsmKind::Ptx, &fixture("inline-ptx-error", "kernel.ptx"));
    assert!(
        ks.iter().any(|k| k.name == "_Z10fma_kernelPfPKfS1_i"),
        "{:?}",
        ks.iter().map(|k| &k.name).collect::<Vec<_>>()
    );
    let k = ks.iter().find(|k| k.name == "_Z10fma_kernelPfPKfS1_i").unwrap();
    let fma = k.lines.iter().find(|l| l.instr.as_ref().is_some_and(|i| i.opcode == "fma")).unwrap();
    assert_eq!(fma.source_line, Some(15), "the .loc before it names the asm line");
    let m = asm::mix::mix(AsmKind::Ptx, k);
    assert!(m.count("global load") >= 2 && m.count("global store") >= 1, "{m:?}");
}

/// The demo, built with the real toolchain (skipped, saying so, where there is none).
fn demo() -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    let out = Command::new(env!("CARGO_BIN_EXE_rung")).args(["doctor", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    if v["toolchain"]["nvcc"].is_null() {
        assert!(
            std::env::var_os("RUNG_REQUIRE_TOOLCHAIN").is_none(),
            "RUNG_REQUIRE_TOOLCHAIN is set but there is no nvcc"
        );
        eprintln!("SKIPPED: no CUDA toolchain here (run `rung setup`)");
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("demo");
    assert!(
        Command::new(env!("CARGO_BIN_EXE_rung"))
            .args(["new", ws.to_str().unwrap(), "-t", "rmsnorm"])
            .output()
            .unwrap()
            .status
            .success()
    );
    Some((tmp, ws))
}

fn diff_json(ws: &Path, a: &str, b: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(["diff", a, b, "--sass", "--json"])
        .current_dir(ws)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The mnemonics of every row's left and right side.
fn mnemonics(k: &serde_json::Value) -> (Vec<String>, Vec<String>) {
    let mut left = Vec::new();
    let mut right = Vec::new();
    for r in k["rows"].as_array().unwrap() {
        for (side, out) in [("left", &mut left), ("right", &mut right)] {
            if let Some(t) = r[side]["text"].as_str() {
                // The mnemonic: the first word that is not a predicate.
                let word = t.split_whitespace().find(|w| !w.starts_with('@')).unwrap_or("").to_string();
                out.push(word);
            }
        }
    }
    (left, right)
}

#[test]
fn demo_diffs_show_what_the_faster_version_adds() {
    let Some((_tmp, ws)) = demo() else { return };
    // v001 (a thread per row) → v002 (a block per row): shared memory and barriers appear.
    let d = diff_json(&ws, "v001", "v002");
    let k = &d["diff"]["kernels"][0];
    let (left, right) = mnemonics(k);
    for op in ["BAR.SYNC.DEFER_BLOCKING", "STS", "LDS"] {
        assert!(right.iter().any(|w| w == op), "{op} in v002");
        assert!(!left.iter().any(|w| w == op), "{op} not in v001");
    }
    assert_eq!(k["left_mix"]["classes"]["shared store"], serde_json::Value::Null);
    assert!(k["right_mix"]["classes"]["shared store"].as_u64().unwrap() >= 1);
    // v002 → v003 (float4 in registers): 128-bit loads and stores, on the right only.
    let d = diff_json(&ws, "v002", "v003");
    let k = &d["diff"]["kernels"][0];
    let (left, right) = mnemonics(k);
    assert!(right.iter().any(|w| w.starts_with("LDG.E.128")), "{right:?}");
    assert!(!left.iter().any(|w| w.starts_with("LDG.E.128")));
    assert!(k["right_mix"]["memory"]["LDG 128-bit"].as_u64().unwrap() >= 1);
    assert!(k["left_mix"]["memory"].get("LDG 128-bit").is_none());
    // The terminal rendering says so in numbers.
    let out = Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(["diff", "v002", "v003", "--sass", "--layout", "unified"])
        .current_dir(&ws)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.trim_start().starts_with("LDG 128-bit")).expect("an LDG 128-bit row");
    let nums: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(nums[2], "0", "{line}");
    assert!(nums[3].parse::<u32>().unwrap() > 0, "{line}");
}
