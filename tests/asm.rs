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
    // A listing missing beside its cubin (it follows the build rung, and rung ended before it
    // landed, say) is made when it is read, the same listing again.
    let listing = ws.join(".rung/dumps/v001/v001.sass");
    std::fs::remove_file(&listing).unwrap();
    assert_eq!(diff_json(&ws, "v001", "v002")["diff"], d["diff"]);
    assert!(std::fs::read_to_string(&listing).unwrap().contains("EXIT"));
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

/// The service builds a listing when the source has none, once per source, and the history it
/// leaves answers by id, by path and for a deleted file.
#[test]
fn listings_build_once_per_source_and_the_history_follows() {
    use rung::check::Machine;
    use rung::model::report::{Stage, Verdict};
    use rung::service::{self, HistoryQuery, ListingError, VersionError};
    use rung::store::Store;
    use rung::workspace::Workspace;

    let Some((_tmp, dir)) = demo() else { return };
    let ws = Workspace::open(&dir).unwrap();
    let mut store = Store::open(&ws.state_dir()).unwrap();
    // As on a machine without a GPU, wherever the test runs: a build, never a run.
    let mut machine = Machine::discover();
    machine.gpu.devices.clear();
    let mut runners = None;
    let v = ws.version("v002").unwrap().clone();

    let l = service::listing(&ws, &mut store, &v, AsmKind::Sass, &machine, &mut runners).unwrap();
    assert!(l.built_now, "nothing was built yet");
    assert!(!l.kernels.is_empty() && !l.files.is_empty());
    let again = service::listing(&ws, &mut store, &v, AsmKind::Ptx, &machine, &mut runners).unwrap();
    assert!(!again.built_now, "the same source is not built twice");
    let name = l.kernels[0].name.clone();
    assert_eq!(l.clone().only(&name).unwrap().kernels.len(), 1);
    match l.only("no_such_kernel") {
        Err(e @ ListingError::NoKernel { .. }) => {
            assert!(e.to_string().contains("v002 has no kernel `no_such_kernel`"), "{e}");
            assert!(e.help().contains(&name), "the help names the kernels there are: {}", e.help());
        }
        other => panic!("{other:?}"),
    }

    // An edit is a new source: built again, and the old build row is no longer current.
    let path = ws.root.join(&v.path);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{text}\n// edited\n")).unwrap();
    assert!(service::listing(&ws, &mut store, &v, AsmKind::Sass, &machine, &mut runners).unwrap().built_now);
    let by_path = v.path.to_string_lossy().into_owned();
    let q = HistoryQuery { version: Some(&by_path), stage: Some(Stage::Build), limit: 10 };
    let h = service::history(&ws, &store, &q).unwrap();
    assert_eq!(h.version.as_deref(), Some("v002"), "a path resolves to its id");
    assert_eq!(h.rows.len(), 2, "two builds: {:?}", h.rows.iter().map(|r| &r.stage).collect::<Vec<_>>());
    assert!(h.rows.iter().all(|r| r.stage == "build" && r.version == "v002"));
    assert_eq!(h.is_current(&h.rows[0]), Some(true), "newest first, of the file as it is");
    assert_eq!(h.is_current(&h.rows[1]), Some(false));

    // A version that does not compile: the failing rung, its verdict and its diagnostics at a line.
    std::fs::write(&path, text.replace("__global__", "__global__ this does not compile")).unwrap();
    match service::listing(&ws, &mut store, &v, AsmKind::Sass, &machine, &mut runners) {
        Err(e @ ListingError::Build { .. }) => {
            let ListingError::Build { verdict, ref diagnostics, .. } = e else { unreachable!() };
            assert_eq!(verdict, Verdict::Fail, "{e}");
            assert!(diagnostics.iter().any(|d| d.line > 0), "{diagnostics:?}");
            assert!(e.help().contains("fix the source"), "{}", e.help());
        }
        other => panic!("{other:?}"),
    }

    // A deleted file's history stays answerable by its id; an unknown id names the ones there are.
    std::fs::remove_file(&path).unwrap();
    let ws = Workspace::open(&dir).unwrap();
    let q = HistoryQuery { version: Some("v002"), stage: None, limit: 100 };
    let h = service::history(&ws, &store, &q).unwrap();
    assert!(h.rows.len() >= 4 && h.rows.iter().all(|r| h.is_current(r).is_none()), "no file, nothing current");
    match service::history(&ws, &store, &HistoryQuery { version: Some("v999"), ..q }) {
        Err(VersionError::NoVersion { known, .. }) => assert!(known.contains(&"v001".to_string()), "{known:?}"),
        other => panic!("{:?}", other.map(|h| h.rows.len())),
    }
}
