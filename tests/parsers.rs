//! Every tool-output parser on real captured output (tests/fixtures/build/<case>/: the source,
//! the verbatim stderr/stdout, and cmd.txt with the command, tool version and exit code).

use std::path::{Path, PathBuf};

use rung::diag::Severity;
use rung::parsers::{
    HostCompiler, HostLinker, NvccFrontend, NvlinkOutput, OutputParser, ParseContext, PtxLineMap, PtxasOutput,
    PythonTraceback, parse_resources,
};

/// Where the fixtures were captured: absolute paths in the tools' output start with this,
/// wherever the repository is checked out now.
const CAPTURED_AT: &str = "/work/main/tests/fixtures/build";

fn fixture(case: &str, file: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/build").join(case).join(file);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Diagnostics as `file:line:col severity message-start`.
fn run(parser: &dyn OutputParser, text: &str, ctx: &ParseContext) -> Vec<String> {
    parser
        .parse(text, ctx)
        .iter()
        .map(|d| {
            format!(
                "{}:{}:{} {} {}",
                d.file.display(),
                d.line,
                d.column,
                d.severity,
                d.message.chars().take(48).collect::<String>()
            )
        })
        .collect()
}

#[test]
fn nvcc_type_error_with_caret_column() {
    let got = run(&NvccFrontend, &fixture("nvcc-type-error", "stderr.txt"), &ParseContext::for_version("kernel.cu"));
    assert_eq!(got, vec!["kernel.cu:8:22 error a value of type \"float *\" cannot be used to init"]);
}

#[test]
fn the_host_preprocessors_errors_land_on_their_lines() {
    // A missing header and #error come from the preprocessor nvcc runs first, in GCC's format.
    let ctx = ParseContext::for_version("kernel.cu");
    let text = fixture("nvcc-missing-include", "stderr.txt");
    assert_eq!(run(&HostCompiler, &text, &ctx), vec!["kernel.cu:2:10 error tiles.cuh: No such file or directory"]);
    let d = &HostCompiler.parse(&text, &ctx)[0];
    assert!(d.help.as_deref().unwrap().contains("-I"), "{:?}", d.help);
    assert!(d.tool_text.as_deref().unwrap().ends_with("|          ^~~~~~~~~~~"), "{:?}", d.tool_text);
    // Nothing the EDG front end's parser would take.
    assert!(NvccFrontend.parse(&text, &ctx).is_empty());
    let got = run(&HostCompiler, &fixture("nvcc-preprocessor-error", "stderr.txt"), &ctx);
    assert_eq!(
        got,
        vec![
            "kernel.cu:3:2 warning #warning \"the tile sizes below were tuned on an ",
            "kernel.cu:6:2 error #error \"this kernel is written for CUDA 12's cp."
        ]
    );
    // The other tools' output is not GCC's.
    for case in ["nvcc-type-error", "nvcc-template-chain", "ptxas-error-ptx", "host-ld-error", "nvlink-error"] {
        assert!(HostCompiler.parse(&fixture(case, "stderr.txt"), &ctx).is_empty(), "{case}");
    }
}

#[test]
fn nvcc_template_chain_keeps_the_instantiation_path() {
    let ctx = ParseContext::for_version("kernel.cu");
    let ds = NvccFrontend.parse(&fixture("nvcc-template-chain", "stderr.txt"), &ctx);
    assert_eq!(ds.len(), 2);
    assert_eq!((ds[0].line, ds[0].column, ds[0].severity), (9, 17, Severity::Error));
    assert_eq!(ds[0].message, "no operator \"*\" matches these operands; operand types are: const Half2 * float");
    let help = ds[1].help.as_deref().unwrap();
    assert!(help.starts_with("instantiated from line 16: T load_scaled"), "{help}");
    assert!(help.contains("line 27: void copy_kernel<T,BLOCK>"), "{help}");
    assert_eq!(ds[1].severity, Severity::Note);
    assert_eq!(ds[1].key.as_deref(), Some("#3328-D"));
    assert!(ds[1].tool_text.as_deref().unwrap().contains("detected during:"));
}

#[test]
fn nvcc_errors_and_warnings_in_order() {
    let got = run(
        &NvccFrontend,
        &fixture("nvcc-multiple-errors-warnings", "stderr.txt"),
        &ParseContext::for_version("kernel.cu"),
    );
    let pos: Vec<String> = got.iter().map(|s| s.split(' ').take(2).collect::<Vec<_>>().join(" ")).collect();
    assert_eq!(
        pos,
        vec![
            "kernel.cu:9:11 warning",
            "kernel.cu:13:24 error",
            "kernel.cu:15:16 error",
            "kernel.cu:17:12 error",
            "kernel.cu:6:9 warning",
            "kernel.cu:23:1 warning"
        ]
    );
}

#[test]
fn nvcc_error_in_an_included_header() {
    let got = run(
        &NvccFrontend,
        &fixture("nvcc-undefined-identifier", "stderr.txt"),
        &ParseContext::for_version("kernel.cu"),
    );
    assert_eq!(got, vec!["helper.cuh:13:16 error identifier \"sigmoid_fast\" is undefined"]);
}

#[test]
fn temporary_build_paths_map_back_to_the_versions_folder() {
    let mut ctx = ParseContext::for_version("versions/v003-x.cu");
    ctx.path_map.push(("/tmp/rung-build-MfkEjg/kernel.cu".into(), PathBuf::from("versions/v003-x.cu")));
    ctx.path_map.push(("/tmp/rung-build-MfkEjg".into(), PathBuf::from("versions")));
    let got = run(&NvccFrontend, &fixture("nvcc-temp-abs-path", "stderr.txt"), &ctx);
    assert_eq!(got[0].split(' ').next().unwrap(), "versions/helper.cuh:12:78");
    assert_eq!(got[1].split(' ').next().unwrap(), "versions/v003-x.cu:17:12");
}

#[test]
fn nvrtc_log_parses_like_nvcc() {
    let got = run(&NvccFrontend, &fixture("nvrtc-error", "stdout.txt"), &ParseContext::for_version("kernel.cu"));
    assert_eq!(got, vec!["kernel.cu:7:22 error a value of type \"float *\" cannot be used to init"]);
}

#[test]
fn ptxas_errors_in_a_ptx_version() {
    let got = run(&PtxasOutput, &fixture("ptxas-error-ptx", "stderr.txt"), &ParseContext::for_version("kernel.ptx"));
    assert_eq!(
        got,
        vec![
            "kernel.ptx:35:0 error ptxas: Arguments mismatch for instruction 'fma'",
            "kernel.ptx:38:0 error ptxas: Arguments mismatch for instruction 'st'",
            "kernel.ptx:39:0 error ptxas: Arguments mismatch for instruction 'add'",
            "kernel.ptx:39:0 error ptxas: Unknown symbol '%f9'",
        ],
        "the trailing 'aborted due to errors' restates these and is dropped"
    );
    let got = run(&PtxasOutput, &fixture("ptxas-fatal", "stderr.txt"), &ParseContext::for_version("kernel.ptx"));
    assert_eq!(got, vec!["kernel.ptx:0:0 error ptxas: SM version specified by .target is higher"]);
}

#[test]
fn inline_ptx_errors_land_on_the_asm_line() {
    let mut ctx = ParseContext::for_version("kernel.cu");
    ctx.ptx.insert("kernel.ptx".into(), PtxLineMap::new(&fixture("inline-ptx-error", "kernel.ptx")));
    // The PTX's `.file` names the source by the absolute path it was captured at.
    ctx.path_map.push((format!("{CAPTURED_AT}/inline-ptx-error/kernel.cu"), PathBuf::from("kernel.cu")));
    // nvcc cites its temporary PTX; the map is matched as the only PTX known.
    let ds = PtxasOutput.parse(&fixture("inline-ptx-error", "stderr.txt"), &ctx);
    assert_eq!(ds.len(), 2);
    for d in &ds {
        assert_eq!((d.file.as_path(), d.line, d.column), (Path::new("kernel.cu"), 15, 5), "{d}");
        assert!(d.help.as_deref().unwrap().contains("PTX at line 57"));
    }
    assert_eq!(ds[0].message, "ptxas: Unknown modifier '.f32x'");
}

#[test]
fn wgmma_on_sm_90_says_to_use_sm_90a() {
    let ds = PtxasOutput.parse(&fixture("wgmma-sm90", "stderr.txt"), &ParseContext::for_version("kernel.cu"));
    assert!(ds.len() >= 4);
    assert!(ds[0].message.contains("wgmma.fence"));
    assert!(ds[0].help.as_deref().unwrap().contains("sm_90a"));
}

#[test]
fn nvlink_undefined_reference() {
    let ds = NvlinkOutput.parse(&fixture("nvlink-error", "stderr.txt"), &ParseContext::for_version("kernel.cu"));
    assert_eq!(ds.len(), 1);
    assert_eq!(ds[0].message, "nvlink: Undefined reference to '_Z12missing_normf'");
    assert!(ds[0].help.as_deref().unwrap().contains("defined nowhere"));
}

#[test]
fn resource_report_per_kernel() {
    let r = parse_resources(&fixture("ptxas-resource-report", "stderr.txt"));
    let names: Vec<&str> = r.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "_Z12spill_kernelPfPKfi",
            "_Z18local_array_kernelPfPKii",
            "_Z16transpose_kernelPfPKfii",
            "_Z16block_sum_kernelPKfPfi",
            "_Z10add_kernelPfPKfS1_i"
        ]
    );
    let spill = &r[0];
    assert_eq!(
        (spill.registers, spill.stack_frame_bytes, spill.spill_store_bytes, spill.spill_load_bytes),
        (24, 304, 508, 512)
    );
    assert_eq!((r[3].registers, r[3].barriers, r[3].shared_bytes), (10, 1, 4096));
    assert_eq!(r[4].arch, "sm_90");
}

#[test]
fn python_syntax_error_with_column() {
    let mut ctx = ParseContext::for_version("versions/v003.py");
    ctx.path_map.push((format!("{CAPTURED_AT}/python-syntax-error/version.py"), PathBuf::from("versions/v003.py")));
    let got = run(&PythonTraceback, &fixture("python-syntax-error", "stderr.txt"), &ctx);
    assert_eq!(got, vec!["versions/v003.py:7:62 error SyntaxError: expected ':'"]);
}

#[test]
fn python_import_error_at_the_user_frame() {
    let mut ctx = ParseContext::for_version("versions/v003.py");
    ctx.path_map.push((format!("{CAPTURED_AT}/python-import-error/version.py"), PathBuf::from("versions/v003.py")));
    let ds = PythonTraceback.parse(&fixture("python-import-error", "stderr.txt"), &ctx);
    assert_eq!(ds.len(), 1);
    assert_eq!((ds[0].file.as_path(), ds[0].line), (Path::new("versions/v003.py"), 4));
    assert_eq!(ds[0].message, "ModuleNotFoundError: No module named 'rung_helpers'");
    assert!(ds[0].tool_text.as_deref().unwrap().starts_with("Traceback"));
}

#[test]
fn host_linker_missing_library() {
    let ds = HostLinker.parse(&fixture("host-ld-error", "stderr.txt"), &ParseContext::for_version("versions/v030.cu"));
    let msgs: Vec<&str> = ds.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(
        msgs,
        vec![
            "ld: cannot find -lcudadevrt: No such file or directory",
            "ld: cannot find -lcudart_static: No such file or directory"
        ],
        "collect2's restatement is dropped"
    );
    assert!(ds[1].help.as_deref().unwrap().contains("libcudart_static"));
}

#[test]
fn spill_warnings_name_the_kernel_and_its_line() {
    let mut ctx = ParseContext::for_version("kernel.cu");
    ctx.ptx.insert("kernel.ptx".into(), PtxLineMap::new(&fixture("ptxas-spill-warning", "kernel.ptx")));
    let ds = PtxasOutput.parse(&fixture("ptxas-spill-warning", "stderr.txt"), &ctx);
    assert_eq!(ds.len(), 1);
    assert_eq!(ds[0].severity, Severity::Warning);
    assert!(ds[0].message.contains("508 bytes spill stores, 512 bytes spill loads"), "{}", ds[0].message);
    // The kernel's first line in the source (its .entry's first .loc).
    let src = fixture("ptxas-spill-warning", "kernel.ptx");
    let first_loc_line: u32 = src
        .lines()
        .skip_while(|l| !l.contains(".entry _Z12spill_kernelPfPKfi"))
        .find_map(|l| l.trim_start().strip_prefix(".loc").and_then(|r| r.split_whitespace().nth(1)?.parse().ok()))
        .unwrap();
    assert_eq!(ds[0].line, first_loc_line);
    assert!(ds[0].help.as_deref().unwrap().contains("registers spill"));
}

/// Found by tests/fuzz.rs: a garbled stderr whose exception line comes before the traceback's
/// first line made the traceback slice run backwards and panic.
#[test]
fn an_exception_line_before_its_traceback_does_not_panic() {
    let text = "TracebauleNotFoundError: No module named 'x'\nck (most recent call last):\n  File \"<string>\", line 1, in <module>\n  File \"<frozen importlibal>\", line \n";
    let ds = PythonTraceback.parse(text, &ParseContext::for_version("versions/v001.py"));
    assert!(ds.len() <= 1, "{ds:?}");
}
