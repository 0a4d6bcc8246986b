//! Scope tests for the PTX and SASS grammars in `assets/syntaxes/`.
//!
//! Each grammar is loaded with syntect (fancy-regex engine) exactly as the
//! application would, then representative lines (Hopper sm_90a included) are
//! parsed one at a time and the innermost scope at a token's first character
//! is compared with the expected scope prefix. A second group of tests parses
//! real listings line by line: the fixture outputs under `tests/fixtures/build`
//! and Hopper excerpts (nvcc 13.0 / Triton 3.9 PTX, cuobjdump / nvdisasm 13.2
//! SASS for sm_90a) embedded below. These must parse without error and must
//! not leave a context open at the end of any line: every PTX and SASS
//! statement in them ends on its own line.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use syntect::parsing::{ParseState, ScopeStack, SyntaxDefinition, SyntaxSet, SyntaxSetBuilder};

const PTX_GRAMMAR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/syntaxes/PTX.sublime-syntax");
const SASS_GRAMMAR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/syntaxes/SASS.sublime-syntax");
const SYNTAX_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/syntaxes");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/build");

const PTX: &str = "source.ptx";
const SASS: &str = "source.sass";

fn build_set(lines_include_newline: bool) -> SyntaxSet {
    let mut builder = SyntaxSetBuilder::new();
    for path in [PTX_GRAMMAR, SASS_GRAMMAR] {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
        let def = SyntaxDefinition::load_from_str(&text, lines_include_newline, None)
            .unwrap_or_else(|e| panic!("loading {path}: {e}"));
        builder.add(def);
    }
    builder.build()
}

/// Grammars loaded for lines fed with their trailing `\n` (syntect's default).
fn set() -> &'static SyntaxSet {
    static SET: OnceLock<SyntaxSet> = OnceLock::new();
    SET.get_or_init(|| build_set(true))
}

/// Grammars loaded for lines fed without a trailing newline.
fn set_no_newline() -> &'static SyntaxSet {
    static SET: OnceLock<SyntaxSet> = OnceLock::new();
    SET.get_or_init(|| build_set(false))
}

/// Parses one line from a fresh state and returns, for every byte offset at
/// which the scope stack changes, the offset and the full stack from there on.
fn tokenize(scope: &str, line: &str) -> Vec<(usize, Vec<String>)> {
    let ss = set();
    let syntax = ss
        .find_syntax_by_scope(syntect::parsing::Scope::new(scope).unwrap())
        .unwrap_or_else(|| panic!("no syntax for {scope}"));
    let mut state = ParseState::new(syntax);
    let mut stack = ScopeStack::new();
    let text = format!("{line}\n");
    let ops = state.parse_line(&text, ss).unwrap_or_else(|e| panic!("parsing {line:?}: {e}"));
    let mut out = vec![(0, names(&stack))];
    for (at, op) in ops {
        stack.apply(&op).unwrap();
        match out.last_mut() {
            Some(last) if last.0 == at => last.1 = names(&stack),
            _ => out.push((at, names(&stack))),
        }
    }
    out
}

fn names(stack: &ScopeStack) -> Vec<String> {
    stack.as_slice().iter().map(|s| s.build_string()).collect()
}

/// Full scope stack at the first character of the first `token` in `line`.
fn stack_of(scope: &str, line: &str, token: &str) -> Vec<String> {
    let at = line.find(token).unwrap_or_else(|| panic!("{token:?} not in {line:?}"));
    let toks = tokenize(scope, line);
    toks.iter().rev().find(|(start, _)| *start <= at).map(|(_, s)| s.clone()).unwrap()
}

/// Innermost scope at the first character of the first `token` in `line`.
fn scope_of(scope: &str, line: &str, token: &str) -> String {
    stack_of(scope, line, token).last().cloned().unwrap_or_default()
}

/// Human-readable dump of a line's tokens, for assertion messages.
fn dump(scope: &str, line: &str) -> String {
    let toks = tokenize(scope, line);
    let mut out = String::new();
    for (i, (start, stack)) in toks.iter().enumerate() {
        let end = toks.get(i + 1).map(|t| t.0).unwrap_or(line.len()).min(line.len());
        if *start >= end || line[*start..end].trim().is_empty() {
            continue;
        }
        out.push_str(&format!("  {:?} => {}\n", &line[*start..end], stack.last().unwrap()));
    }
    out
}

/// Asserts that each `(token, expected)` pair holds: the innermost scope at the
/// first character of the token's first occurrence in `line` starts with
/// `expected`.
#[track_caller]
fn check(scope: &str, line: &str, expectations: &[(&str, &str)]) {
    for (token, expected) in expectations {
        let got = scope_of(scope, line, token);
        assert!(
            got.starts_with(expected),
            "in {line:?}\n  token {token:?}: expected scope starting with {expected:?}, got {got:?}\n{}",
            dump(scope, line)
        );
    }
}

#[track_caller]
fn check_stack_contains(scope: &str, line: &str, token: &str, expected: &str) {
    let stack = stack_of(scope, line, token);
    assert!(
        stack.iter().any(|s| s.starts_with(expected)),
        "in {line:?}\n  token {token:?}: expected {expected:?} in scope stack {stack:?}"
    );
}

/// Parses a whole listing line by line (both newline conventions) and checks
/// that nothing errors and that no context stays open past the end of a line.
#[track_caller]
fn parse_listing(scope: &str, name: &str, text: &str) {
    for (ss, with_newline) in [(set(), true), (set_no_newline(), false)] {
        let syntax = ss.find_syntax_by_scope(syntect::parsing::Scope::new(scope).unwrap()).unwrap();
        let mut state = ParseState::new(syntax);
        let mut stack = ScopeStack::new();
        let mut count = 0;
        for (n, raw) in text.split_inclusive('\n').enumerate() {
            let line = if with_newline { raw.to_string() } else { raw.trim_end_matches(['\n', '\r']).to_string() };
            let ops =
                state.parse_line(&line, ss).unwrap_or_else(|e| panic!("{name}:{}: parse error {e}: {raw:?}", n + 1));
            for (_, op) in ops {
                stack.apply(&op).unwrap_or_else(|e| panic!("{name}:{}: scope error {e:?}: {raw:?}", n + 1));
            }
            assert_eq!(
                names(&stack),
                vec![scope.to_string()],
                "{name}:{}: context left open after line (newline={with_newline}): {raw:?}",
                n + 1
            );
            count += 1;
        }
        assert!(count > 0, "{name} is empty");
    }
}

fn fixture(rel: &str) -> (String, String) {
    let path = Path::new(FIXTURES).join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    (path.display().to_string(), text)
}

// ------------------------------------------------------------------- loading

#[test]
fn grammars_load_and_are_found_by_extension_and_scope() {
    for ss in [set(), set_no_newline()] {
        let ptx = ss.find_syntax_by_extension("ptx").expect("ptx extension");
        assert_eq!(ptx.name, "PTX");
        assert_eq!(ptx.scope.build_string(), PTX);
        let sass = ss.find_syntax_by_extension("sass").expect("sass extension");
        assert_eq!(sass.name, "SASS");
        assert_eq!(sass.scope.build_string(), SASS);
    }
}

#[test]
fn syntax_folder_loads_with_add_from_folder() {
    let mut builder = SyntaxSetBuilder::new();
    builder.add_from_folder(SYNTAX_DIR, true).expect("add_from_folder");
    let ss = builder.build();
    for (name, ext) in [("PTX", "ptx"), ("SASS", "sass")] {
        let syntax = ss.find_syntax_by_name(name).unwrap_or_else(|| panic!("{name} not loaded from {SYNTAX_DIR}"));
        assert!(syntax.file_extensions.iter().any(|e| e == ext), "{name}: {:?}", syntax.file_extensions);
    }
}

// ----------------------------------------------------------------------- PTX

#[test]
fn ptx_module_directives() {
    check(
        PTX,
        ".version 9.0",
        &[(".version", "keyword.other.directive.ptx"), ("9.0", "constant.numeric.float.decimal.ptx")],
    );
    check(
        PTX,
        ".target sm_90a",
        &[(".target", "keyword.other.directive.ptx"), ("sm_90a", "support.constant.target.ptx")],
    );
    check(
        PTX,
        ".address_size 64",
        &[(".address_size", "keyword.other.directive.ptx"), ("64", "constant.numeric.integer.decimal.ptx")],
    );
    check(
        PTX,
        ".visible .entry _Z13hopper_kernel4TMapPfPKfimm(",
        &[
            (".visible", "keyword.other.directive.ptx"),
            (".entry", "keyword.other.directive.ptx"),
            ("_Z13hopper", "entity.name.function.ptx"),
            ("(", "punctuation.section.parens.begin.ptx"),
        ],
    );
    check(
        PTX,
        ".visible .func  (.param .b32 func_retval0) _Z3addii(",
        &[
            (".func", "keyword.other.directive.ptx"),
            (".b32", "storage.type.ptx"),
            ("_Z3addii", "entity.name.function.ptx"),
        ],
    );
    check(
        PTX,
        "\t.param .align 64 .b8 _Z13hopper_kernel4TMapPfPKfimm_param_0[128],",
        &[
            (".param", "keyword.other.directive.state-space.ptx"),
            (".align", "keyword.other.directive.ptx"),
            (".b8", "storage.type.ptx"),
            ("_Z13", "variable.other.ptx"),
            ("128", "constant.numeric.integer.decimal.ptx"),
        ],
    );
    check(
        PTX,
        "\t.param .u64 .ptr .global .align 1 tma_kernel_param_5,",
        &[
            (".u64", "storage.type.ptx"),
            (".ptr", "keyword.other.directive.ptx"),
            (".global", "keyword.other.directive.state-space.ptx"),
        ],
    );
    for line in [
        ".maxntid 384, 1, 1",
        ".reqntid 128",
        ".minnctapersm 1",
        ".maxnreg 168",
        ".reqnctapercluster 2, 1, 1",
        ".explicitcluster",
    ] {
        let word = line.split_whitespace().next().unwrap();
        check(PTX, line, &[(word, "keyword.other.directive.ptx")]);
    }
    check(
        PTX,
        ".extern .shared .align 16 .b8 global_smem[];",
        &[
            (".extern", "keyword.other.directive.ptx"),
            (".shared", "keyword.other.directive.state-space.ptx"),
            (";", "punctuation.terminator.ptx"),
        ],
    );
    check(
        PTX,
        ".weak .global .align 4 .u32 counter;",
        &[(".weak", "keyword.other.directive.ptx"), (".u32", "storage.type.ptx")],
    );
    check(
        PTX,
        "\t.file\t1 \"/tmp/hopper/k.cu\"",
        &[(".file", "keyword.other.directive.ptx"), ("1", "constant.numeric"), ("/tmp", "string.quoted.double.ptx")],
    );
    check(
        PTX,
        "\t.loc\t1 7 0                           // version.py:7:0",
        &[
            (".loc", "keyword.other.directive.ptx"),
            ("7", "constant.numeric.integer.decimal.ptx"),
            ("version.py", "comment.line.double-slash.ptx"),
        ],
    );
    check(
        PTX,
        "\t.pragma \"nounroll\";",
        &[(".pragma", "keyword.other.directive.ptx"), ("nounroll", "string.quoted.double.ptx")],
    );
    check(
        PTX,
        "\t.section\t.debug_str",
        &[(".section", "keyword.other.directive.ptx"), (".debug_str", "entity.name.section.ptx")],
    );
}

#[test]
fn ptx_declarations_and_types() {
    check(
        PTX,
        "\t.reg .pred \t%p<6>;",
        &[
            (".reg", "keyword.other.directive.state-space.ptx"),
            (".pred", "storage.type.ptx"),
            ("%p", "variable.other.register.ptx"),
            ("6", "constant.numeric.integer.decimal.ptx"),
        ],
    );
    for ty in [".u32", ".s64", ".f32", ".f16x2", ".bf16", ".bf16x2", ".b128", ".e4m3x2", ".tf32", ".f64"] {
        let line = format!("\t.reg {ty} \t%x<4>;");
        check(PTX, &line, &[(ty, "storage.type.ptx")]);
    }
    check(
        PTX,
        "\t.shared .align 8 .u64 _ZZ6kernelE3bar;",
        &[(".shared", "keyword.other.directive.state-space.ptx"), (".u64", "storage.type.ptx")],
    );
    check(PTX, "\t.local .align 4 .b8 __local_depot0[64];", &[(".local", "keyword.other.directive.state-space.ptx")]);
    check(
        PTX,
        "\t.const .align 4 .f32 scale = 0f3F800000;",
        &[
            (".const", "keyword.other.directive.state-space.ptx"),
            ("0f3F800000", "constant.numeric.float.hexadecimal.ptx"),
        ],
    );
}

#[test]
fn ptx_classic_instructions() {
    check(
        PTX,
        "\tld.global.nc.v4.f32 \t{%f1, %f2, %f3, %f4}, [%rd4+16];",
        &[
            ("ld", "keyword.operator.instruction.ptx"),
            (".global", "storage.modifier.ptx"),
            (".nc", "storage.modifier.ptx"),
            (".v4", "storage.type.ptx"),
            (".f32", "storage.type.ptx"),
            ("{", "punctuation.section.braces.begin.ptx"),
            ("%f1", "variable.other.register.ptx"),
            ("}", "punctuation.section.braces.end.ptx"),
            ("[", "punctuation.section.brackets.begin.ptx"),
            ("%rd4", "variable.other.register.ptx"),
            ("+", "keyword.operator.arithmetic.ptx"),
            ("16", "constant.numeric.integer.decimal.ptx"),
            ("]", "punctuation.section.brackets.end.ptx"),
            (";", "punctuation.terminator.ptx"),
        ],
    );
    check_stack_contains(PTX, "\tld.global.nc.v4.f32 \t{%f1, %f2, %f3, %f4}, [%rd4+16];", "%rd4", "meta.address.ptx");
    check_stack_contains(PTX, "\tld.global.nc.v4.f32 \t{%f1, %f2, %f3, %f4}, [%rd4+16];", "%f2", "meta.vector.ptx");
    check(
        PTX,
        "\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f1, %f2, %f3, %f4};",
        &[
            ("mma", "keyword.operator.instruction.ptx"),
            (".sync", "storage.modifier.ptx"),
            (".m16n8k16", "storage.modifier.ptx"),
            (".row", "storage.modifier.ptx"),
            (".bf16", "storage.type.ptx"),
            ("%r5", "variable.other.register.ptx"),
        ],
    );
    check(
        PTX,
        "\tldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%r17, %r18, %r19, %r20}, [%r21];",
        &[
            ("ldmatrix", "keyword.operator.instruction.ptx"),
            (".x4", "storage.modifier.ptx"),
            (".trans", "storage.modifier.ptx"),
            (".b16", "storage.type.ptx"),
        ],
    );
    check(
        PTX,
        "\tstmatrix.sync.aligned.m8n8.x4.shared.b16 [%r31], {%r17, %r18, %r19, %r20};",
        &[("stmatrix", "keyword.operator.instruction.ptx"), (".shared", "storage.modifier.ptx")],
    );
    check(
        PTX,
        "\tcp.async.cg.shared.global [%r36], [%rd14], 16;",
        &[
            ("cp", "keyword.operator.instruction.ptx"),
            (".async", "storage.modifier.ptx"),
            (".cg", "storage.modifier.ptx"),
            ("16", "constant.numeric"),
        ],
    );
    check(
        PTX,
        "\tbar.sync \t0;",
        &[("bar", "keyword.operator.instruction.ptx"), (".sync", "storage.modifier.ptx"), ("0", "constant.numeric")],
    );
    check(
        PTX,
        "\tred.global.add.f32 [%rd1], %f1;",
        &[("red", "keyword.operator.instruction.ptx"), (".add", "storage.modifier.ptx"), (".f32", "storage.type.ptx")],
    );
    check(
        PTX,
        "\tatom.global.cas.b32 %r1, [%rd2+-8], %r2, %r3;",
        &[
            ("atom", "keyword.operator.instruction.ptx"),
            (".cas", "storage.modifier.ptx"),
            ("-", "keyword.operator.arithmetic.ptx"),
        ],
    );
    check(
        PTX,
        "\tshfl.sync.bfly.b32 \t%r49|%p5, %r45, %r47, %r46, %r48;",
        &[
            ("shfl", "keyword.operator.instruction.ptx"),
            (".bfly", "storage.modifier.ptx"),
            ("|", "keyword.operator.ptx"),
            ("%p5", "variable.other.register.ptx"),
        ],
    );
    // A state space is a directive in a declaration but a modifier on an opcode.
    check(PTX, "\tld.shared.u64 %rd1, [bar];", &[(".shared", "storage.modifier.ptx"), ("bar", "variable.other.ptx")]);
}

#[test]
fn ptx_hopper_instructions() {
    check(
        PTX,
        "\twgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f2, %f3, %f4, %f5}, %rd4, %rd5, p, 1, 1, 0, 0;",
        &[
            ("wgmma", "keyword.operator.instruction.ptx"),
            (".mma_async", "storage.modifier.ptx"),
            (".aligned", "storage.modifier.ptx"),
            (".m64n128k16", "storage.modifier.ptx"),
            (".f32", "storage.type.ptx"),
            (".bf16", "storage.type.ptx"),
            ("%rd4", "variable.other.register.ptx"),
            ("p,", "variable.other.ptx"),
        ],
    );
    check(
        PTX,
        "\twgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%f130, %f131, %f132, %f133}, %rd4, %rd5, 1, 1, 1;",
        &[(".e4m3", "storage.type.ptx"), (".m64n8k32", "storage.modifier.ptx")],
    );
    check(
        PTX,
        "\twgmma.fence.sync.aligned;",
        &[
            ("wgmma", "keyword.operator.instruction.ptx"),
            (".fence", "storage.modifier.ptx"),
            (";", "punctuation.terminator.ptx"),
        ],
    );
    check(PTX, "\twgmma.commit_group.sync.aligned;", &[(".commit_group", "storage.modifier.ptx")]);
    check(
        PTX,
        "\twgmma.wait_group.sync.aligned 0;",
        &[(".wait_group", "storage.modifier.ptx"), ("0", "constant.numeric.integer.decimal.ptx")],
    );
    let tma = "\t@%p3 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], [%rd1, {%r3, %r4}], [%r1];";
    check(
        PTX,
        tma,
        &[
            ("@", "keyword.operator.predicate.ptx"),
            ("%p3", "variable.other.register.ptx"),
            ("cp", "keyword.operator.instruction.ptx"),
            (".bulk", "storage.modifier.ptx"),
            (".tensor", "storage.modifier.ptx"),
            (".2d", "storage.modifier.ptx"),
            (".shared::cluster", "storage.modifier.ptx"),
            (".global", "storage.modifier.ptx"),
            (".mbarrier::complete_tx::bytes", "storage.modifier.ptx"),
            ("{", "punctuation.section.braces.begin.ptx"),
            ("%r4", "variable.other.register.ptx"),
        ],
    );
    check_stack_contains(PTX, tma, "%r4", "meta.address.ptx");
    check_stack_contains(PTX, tma, "@", "meta.predicate.ptx");
    check(
        PTX,
        "\tcp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd21, {%r53, %r53}], [%r38];",
        &[(".bulk_group", "storage.modifier.ptx"), (".shared::cta", "storage.modifier.ptx")],
    );
    check(
        PTX,
        "\tmbarrier.try_wait.parity.shared::cta.b64 complete, [%r1], %r3;",
        &[
            ("mbarrier", "keyword.operator.instruction.ptx"),
            (".try_wait", "storage.modifier.ptx"),
            (".parity", "storage.modifier.ptx"),
            (".shared::cta", "storage.modifier.ptx"),
            (".b64", "storage.type.ptx"),
            ("complete", "variable.other.ptx"),
        ],
    );
    check(
        PTX,
        "\t@%p2 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], 8192;",
        &[
            (".expect_tx", "storage.modifier.ptx"),
            ("_,", "variable.language.sink.ptx"),
            ("8192", "constant.numeric.integer.decimal.ptx"),
        ],
    );
    check(PTX, "\tmbarrier.init.shared::cta.b64 [%r4], %r5;", &[(".init", "storage.modifier.ptx")]);
    check(
        PTX,
        "\tsetmaxnreg.inc.sync.aligned.u32 232;",
        &[
            ("setmaxnreg", "keyword.operator.instruction.ptx"),
            (".inc", "storage.modifier.ptx"),
            (".u32", "storage.type.ptx"),
            ("232", "constant.numeric.integer.decimal.ptx"),
        ],
    );
    check(PTX, "\tsetmaxnreg.dec.sync.aligned.u32 40;", &[(".dec", "storage.modifier.ptx")]);
    check(
        PTX,
        "\tfence.proxy.async.shared::cta;",
        &[
            ("fence", "keyword.operator.instruction.ptx"),
            (".proxy", "storage.modifier.ptx"),
            (".async", "storage.modifier.ptx"),
            (".shared::cta", "storage.modifier.ptx"),
        ],
    );
    check(
        PTX,
        "\tfence.mbarrier_init.release.cluster;",
        &[(".mbarrier_init", "storage.modifier.ptx"), (".cluster", "storage.modifier.ptx")],
    );
    check(
        PTX,
        "\telect.sync \t%r8|%p6, -1;",
        &[
            ("elect", "keyword.operator.instruction.ptx"),
            ("%r8", "variable.other.register.ptx"),
            ("|", "keyword.operator.ptx"),
            ("-", "keyword.operator"),
            ("1", "constant.numeric"),
        ],
    );
    check(
        PTX,
        " elect.sync _|P1, 0xffffffff;",
        &[("_", "variable.language.sink.ptx"), ("0xffffffff", "constant.numeric.integer.hexadecimal.ptx")],
    );
    check(
        PTX,
        "\tgriddepcontrol.launch_dependents;",
        &[("griddepcontrol", "keyword.operator.instruction.ptx"), (".launch_dependents", "storage.modifier.ptx")],
    );
    check(PTX, "\tgriddepcontrol.wait;", &[(".wait", "storage.modifier.ptx")]);
    check(
        PTX,
        "\tbarrier.cluster.arrive.release.aligned;",
        &[
            ("barrier", "keyword.operator.instruction.ptx"),
            (".cluster", "storage.modifier.ptx"),
            (".arrive", "storage.modifier.ptx"),
        ],
    );
    check(
        PTX,
        "\ttcgen05.fence::before_thread_sync;",
        &[("tcgen05", "keyword.operator.instruction.ptx"), (".fence::before_thread_sync", "storage.modifier.ptx")],
    );
}

#[test]
fn ptx_registers_predicates_labels() {
    for (line, reg) in [
        ("\tmov.u32 \t%r3, %tid.x;", "%tid.x"),
        ("\tmov.u32 \t%r3, %ctaid.y;", "%ctaid.y"),
        ("\tmov.u32 \t%r3, %clusterid.x;", "%clusterid.x"),
        ("\tmov.u32 \t%r3, %cluster_ctarank;", "%cluster_ctarank"),
        ("\tmov.u32 \t%r3, %laneid;", "%laneid"),
        ("\tmov.u64 \t%rd3, %globaltimer;", "%globaltimer"),
    ] {
        check(PTX, line, &[(reg, "variable.language.ptx"), ("%r", "variable.other.register.ptx")]);
    }
    for reg in ["%r1", "%rd12", "%f3", "%p1", "%fd7", "%rs2"] {
        let line = format!("\tmov.b32 \t{reg}, 0;");
        check(PTX, &line, &[(reg, "variable.other.register.ptx")]);
    }
    check(
        PTX,
        "\t@%p1 bra \t$L__BB0_2;",
        &[
            ("@", "keyword.operator.predicate.ptx"),
            ("%p1", "variable.other.register.ptx"),
            ("bra", "keyword.operator.instruction.ptx"),
            ("$L__BB0_2", "variable.other.label.ptx"),
        ],
    );
    check(
        PTX,
        "\t@!%p2 bra.uni \t$L__BB0_7;",
        &[
            ("!", "keyword.operator.logical.ptx"),
            ("%p2", "variable.other.register.ptx"),
            (".uni", "storage.modifier.ptx"),
            ("$L__BB0_7", "variable.other.label.ptx"),
        ],
    );
    check(
        PTX,
        "\t@!complete bra.uni waitLoop;",
        &[("complete", "variable.other.register.ptx"), ("waitLoop", "variable.other.label.ptx")],
    );
    check(PTX, "$L__BB0_2:", &[("$L__BB0_2", "entity.name.label.ptx"), (":", "punctuation.separator.label.ptx")]);
    check(PTX, "\twaitLoop:", &[("waitLoop", "entity.name.label.ptx")]);
    check(
        PTX,
        "$L__BB0_3: ret;",
        &[("$L__BB0_3", "entity.name.label.ptx"), ("ret", "keyword.operator.instruction.ptx")],
    );
    check(
        PTX,
        "\tcall.uni (retval0), vprintf, (param0, param1);",
        &[
            ("call", "keyword.operator.instruction.ptx"),
            ("retval0", "variable.other.ptx"),
            ("vprintf", "variable.function.ptx"),
            ("param1", "variable.other.ptx"),
        ],
    );
}

#[test]
fn ptx_numbers_comments_blocks() {
    check(PTX, "\tmov.f32 \t%f1, 0f3F800000;", &[("0f3F800000", "constant.numeric.float.hexadecimal.ptx")]);
    check(
        PTX,
        "\tmov.f64 \t%fd1, 0d3FF0000000000000;",
        &[("0d3FF0000000000000", "constant.numeric.float.hexadecimal.ptx")],
    );
    check(PTX, "\tand.b64 \t%rd2, %rd1, 0x3FFF;", &[("0x3FFF", "constant.numeric.integer.hexadecimal.ptx")]);
    check(PTX, "\tadd.s32 \t%r1, %r2, 255;", &[("255", "constant.numeric.integer.decimal.ptx")]);
    check(PTX, "\tmul.f64 \t%fd1, %fd2, 1.5e3;", &[("1.5e3", "constant.numeric.float.decimal.ptx")]);
    check(
        PTX,
        "\t// begin inline asm",
        &[("//", "punctuation.definition.comment.ptx"), ("begin", "comment.line.double-slash.ptx")],
    );
    check(
        PTX,
        "\t/* spill */ st.local.u32 [%rd1], %r1; // tail",
        &[
            ("spill", "comment.block.ptx"),
            ("st", "keyword.operator.instruction.ptx"),
            (".local", "storage.modifier.ptx"),
            ("tail", "comment.line.double-slash.ptx"),
        ],
    );
    check(PTX, "{", &[("{", "punctuation.section.block.begin.ptx")]);
    check(PTX, "}", &[("}", "punctuation.section.block.end.ptx")]);
    check(PTX, ")", &[(")", "punctuation.section.parens.end.ptx")]);
    // Inline-asm scope block with a local predicate on one line.
    check(
        PTX,
        "{ .reg .pred p; setp.ne.b32 p, %r6, 0; }",
        &[
            ("{", "punctuation.section.block.begin.ptx"),
            (".reg", "keyword.other.directive.state-space.ptx"),
            ("setp", "keyword.operator.instruction.ptx"),
            (".ne", "storage.modifier.ptx"),
            ("}", "punctuation.section.block.end.ptx"),
        ],
    );
}

#[test]
fn ptx_cuobjdump_banner() {
    // `cuobjdump --dump-ptx` prefixes each module with a banner; it must not
    // open an instruction that runs on to the first `;`.
    let banner = "\nFatbin ptx code:\n================\narch = sm_90a\ncode version = [9,0]\nhost = linux\n\
                  compile_size = 64bit\ncompressed\nptxasOptions = \n\n.version 9.0\n.target sm_90a\n";
    parse_listing(PTX, "banner", banner);
    check(PTX, "Fatbin ptx code:", &[("Fatbin", "keyword.other.header.ptx")]);
    check(PTX, "arch = sm_90a", &[("arch", "variable.other.property.ptx"), ("=", "keyword.operator.assignment.ptx")]);
    check(PTX, "compressed", &[("compressed", "keyword.other.header.ptx")]);
}

#[test]
fn ptx_instruction_may_span_lines() {
    // A statement runs to `;`: a wrapped wgmma keeps its operand scopes.
    let ss = set();
    let syntax = ss.find_syntax_by_extension("ptx").unwrap();
    let mut state = ParseState::new(syntax);
    let mut stack = ScopeStack::new();
    let lines = [
        "\twgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16\n",
        "\t\t{%f1, %f2, %f3, %f4},\n",
        "\t\t%rd1, %rd2, 1, 1, 1, 0, 0;\n",
        "\tret;\n",
    ];
    let mut after = vec![];
    for line in lines {
        for (_, op) in state.parse_line(line, ss).unwrap() {
            stack.apply(&op).unwrap();
        }
        after.push(names(&stack));
    }
    assert!(after[0].iter().any(|s| s == "meta.instruction.ptx"), "{after:?}");
    assert!(after[1].iter().any(|s| s == "meta.instruction.ptx"), "{after:?}");
    assert_eq!(after[2], vec![PTX.to_string()]);
    assert_eq!(after[3], vec![PTX.to_string()]);
}

// ---------------------------------------------------------------------- SASS

#[test]
fn sass_headers_directives_comments() {
    check(
        SASS,
        "\tcode for sm_90a",
        &[("code for", "keyword.other.header.sass"), ("sm_90a", "support.constant.target.sass")],
    );
    check(
        SASS,
        "\t.target\tsm_90a",
        &[(".target", "keyword.other.directive.sass"), ("sm_90a", "support.constant.target.sass")],
    );
    check(
        SASS,
        "\t\tFunction : _Z12spill_kernelPfPKfi",
        &[
            ("Function", "keyword.declaration.function.sass"),
            (":", "punctuation.separator.sass"),
            ("_Z12", "entity.name.function.sass"),
        ],
    );
    check(
        SASS,
        "\t.headerflags\t@\"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)\"",
        &[(".headerflags", "keyword.other.directive.sass"), ("EF_CUDA_SM90", "string.quoted.double.sass")],
    );
    check(
        SASS,
        "\t.section\t.text._Z12spill_kernelPfPKfi,\"ax\",@progbits",
        &[
            (".section", "keyword.other.directive.sass"),
            (".text._Z12", "entity.name.section.sass"),
            ("ax", "string.quoted.double.sass"),
            ("@progbits", "support.constant.sass"),
        ],
    );
    check(
        SASS,
        "        .size           _Z12spill_kernelPfPKfi,(.L_x_8 - _Z12spill_kernelPfPKfi)",
        &[
            (".size", "keyword.other.directive.sass"),
            ("_Z12", "variable.other.symbol.sass"),
            (".L_x_8", "variable.other.label.sass"),
        ],
    );
    check(SASS, ".L_x_3:", &[(".L_x_3", "entity.name.label.sass"), (":", "punctuation.separator.label.sass")]);
    check(SASS, "_Z12spill_kernelPfPKfi:", &[("_Z12", "entity.name.function.sass")]);
    check(SASS, ".text._Z12spill_kernelPfPKfi:", &[(".text", "entity.name.section.sass")]);
    let line_info = "\t//## File \"/work/main/tests/fixtures/build/ptxas-resource-report/kernel.cu\", line 50";
    check(
        SASS,
        line_info,
        &[
            ("//##", "punctuation.definition.comment.sass"),
            ("File", "keyword.other.line-info.sass"),
            ("/work", "string.quoted.double.sass"),
            ("line", "keyword.other.line-info.sass"),
            ("50", "constant.numeric.integer.decimal.sass"),
        ],
    );
    check_stack_contains(SASS, line_info, "50", "comment.line");
    check(
        SASS,
        "\t//## File \"/usr/include/x.hpp\", line 152 inlined at \"/tmp/k.cu\", line 88",
        &[("inlined at", "keyword.other.line-info.sass"), ("88", "constant.numeric")],
    );
    check(
        SASS,
        "//--------------------- .text._Z12spill_kernelPfPKfi --------------------------",
        &[(".text", "comment.line.double-slash.sass")],
    );
    check(SASS, "\t\t..........", &[("..........", "punctuation.separator.end-of-function.sass")]);
    check(SASS, "Fatbin elf code:", &[("Fatbin", "keyword.other.header.sass")]);
    check(
        SASS,
        "arch = sm_90a",
        &[("arch", "variable.other.property.sass"), ("=", "keyword.operator.assignment.sass")],
    );
}

#[test]
fn sass_instruction_line_anatomy() {
    let line = "        /*0040*/                   ULDC.64 UR4, c[0x0][0x208] ;              /* 0x0000820000047ab9 */";
    check(
        SASS,
        line,
        &[
            ("/*", "punctuation.definition.comment.begin.sass"),
            ("0040", "comment.block.address.sass"),
            ("ULDC", "keyword.operator.instruction.sass"),
            (".64", "storage.type.sass"),
            ("UR4", "variable.other.register.uniform.sass"),
            ("c[", "variable.language.constant-bank.sass"),
            ("[", "punctuation.section.brackets.begin.sass"),
            ("0x0", "constant.numeric.integer.hexadecimal.sass"),
            ("0x208", "constant.numeric.integer.hexadecimal.sass"),
            (";", "punctuation.terminator.sass"),
            ("0x0000820000047ab9", "comment.block.encoding.sass"),
        ],
    );
    check_stack_contains(SASS, line, "UR4", "meta.instruction.sass");
    check(
        SASS,
        "                                                                             /* 0x000fe20000000a00 */",
        &[("0x000fe20000000a00", "comment.block.encoding.sass")],
    );
    check(
        SASS,
        "        /*0a50*/                   NOP;",
        &[("NOP", "keyword.operator.instruction.sass"), (";", "punctuation.terminator.sass")],
    );
    check(SASS, "        /*0eb0*/                   EXIT ;", &[("EXIT", "keyword.operator.instruction.sass")]);
    // nvdisasm without an address column.
    check(
        SASS,
        "        LDL.LU R18, [R1+0x12c] ;",
        &[
            ("LDL", "keyword.operator.instruction.sass"),
            (".LU", "storage.modifier.sass"),
            ("R18", "variable.other.register.sass"),
        ],
    );
}

#[test]
fn sass_predicates_and_registers() {
    check(
        SASS,
        "        /*0050*/               @P1 BRA `(.L_x_1) ;",
        &[
            ("@", "keyword.operator.predicate.sass"),
            ("P1", "variable.other.predicate.sass"),
            ("BRA", "keyword.operator.instruction.sass"),
            ("`(", "punctuation.definition.label.begin.sass"),
            (".L_x_1", "variable.other.label.sass"),
        ],
    );
    check_stack_contains(SASS, "        /*0050*/               @P1 BRA `(.L_x_1) ;", "P1", "meta.predicate.sass");
    check(
        SASS,
        "        /*0080*/              @!P0 BRA 0x50 ;",
        &[
            ("!", "keyword.operator.logical.sass"),
            ("P0", "variable.other.predicate.sass"),
            ("0x50", "constant.numeric.integer.hexadecimal.sass"),
        ],
    );
    check(
        SASS,
        "        /*0110*/              @!PT LDS RZ, [RZ] ;",
        &[
            ("PT", "variable.language.predicate.sass"),
            ("LDS", "keyword.operator.instruction.sass"),
            ("RZ", "variable.language.register.zero.sass"),
        ],
    );
    check(SASS, "        /*0100*/               @PT NOP ;", &[("PT", "variable.language.predicate.sass")]);
    check(
        SASS,
        "        /*0330*/              @UP0 UMOV UR4, 0x1 ;",
        &[
            ("UP0", "variable.other.predicate.uniform.sass"),
            ("UMOV", "keyword.operator.instruction.sass"),
            ("UR4", "variable.other.register.uniform.sass"),
        ],
    );
    check(
        SASS,
        "        /*0df0*/                   UIADD3 UR4, UP0, UR4, 0x30, URZ ;",
        &[
            ("UIADD3", "keyword.operator.instruction.sass"),
            ("UP0", "variable.other.predicate.uniform.sass"),
            ("URZ", "variable.language.register.zero.sass"),
        ],
    );
    check(
        SASS,
        "        /*0c80*/                   VOTEU.ANY UR4, UPT, PT ;",
        &[("UPT", "variable.language.predicate.sass"), ("PT ;", "variable.language.predicate.sass")],
    );
    check(
        SASS,
        "        /*0140*/               @P0 R2UR UR7, R0 ;",
        &[
            ("R2UR", "keyword.operator.instruction.sass"),
            ("UR7", "variable.other.register.uniform.sass"),
            ("R0", "variable.other.register.sass"),
        ],
    );
    check(
        SASS,
        "        /*0010*/                   S2R R8, SR_TID.X ;",
        &[
            ("S2R", "keyword.operator.instruction.sass"),
            ("R8", "variable.other.register.sass"),
            ("SR_TID.X", "variable.language.special.sass"),
        ],
    );
    check(
        SASS,
        "        /*0e60*/                   S2UR UR4, SR_CTAID.Y ;",
        &[("SR_CTAID.Y", "variable.language.special.sass")],
    );
    check(
        SASS,
        "        /*0060*/                   S2R R3, SR_LANEID ;",
        &[("SR_LANEID", "variable.language.special.sass")],
    );
    check(
        SASS,
        "        /*0060*/                   S2UR UR7, SR_CgaCtaId ;",
        &[("SR_CgaCtaId", "variable.language.special.sass")],
    );
    check(SASS, "        /*0050*/                   CS2R R24, SRZ ;", &[("SRZ", "variable.language.special.sass")]);
    check(
        SASS,
        "        /*0030*/                   BSSY B0, 0x180 ;",
        &[("BSSY", "keyword.operator.instruction.sass"), ("B0", "variable.other.barrier.sass")],
    );
    check(SASS, "        /*0170*/                   BSYNC B0 ;", &[("B0", "variable.other.barrier.sass")]);
    check(
        SASS,
        "        /*0e40*/                   DEPBAR.LE SB0, 0x0 ;",
        &[
            ("DEPBAR", "keyword.operator.instruction.sass"),
            (".LE", "storage.modifier.sass"),
            ("SB0", "variable.other.barrier.sass"),
        ],
    );
}

#[test]
fn sass_operands() {
    let ldg = "        /*0180*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;";
    check(
        SASS,
        ldg,
        &[
            ("LDG", "keyword.operator.instruction.sass"),
            (".E", "storage.modifier.sass"),
            (".128", "storage.type.sass"),
            (".CONSTANT", "storage.modifier.sass"),
            ("desc", "variable.language.descriptor.sass"),
            ("UR4", "variable.other.register.uniform.sass"),
            ("R2", "variable.other.register.sass"),
            (".64", "storage.modifier.sass"),
        ],
    );
    check_stack_contains(SASS, ldg, "R2", "meta.address.sass");
    check(
        SASS,
        "        /*0360*/                   STG.E.64 desc[UR4][R2.64+0x4], R6 ;",
        &[
            ("STG", "keyword.operator.instruction.sass"),
            (".64", "storage.type.sass"),
            ("+", "keyword.operator.arithmetic.sass"),
            ("0x4", "constant.numeric.integer.hexadecimal.sass"),
        ],
    );
    check(
        SASS,
        "        /*00d0*/                   STL [R1+0x12c], R18 ;",
        &[
            ("STL", "keyword.operator.instruction.sass"),
            ("[", "punctuation.section.brackets.begin.sass"),
            ("R1", "variable.other.register.sass"),
            ("0x12c", "constant.numeric.integer.hexadecimal.sass"),
            ("]", "punctuation.section.brackets.end.sass"),
        ],
    );
    check(
        SASS,
        "        /*0240*/                   LDL.LU R18, [R1+0x12c] ;",
        &[("LDL", "keyword.operator.instruction.sass"), (".LU", "storage.modifier.sass")],
    );
    check(
        SASS,
        "        /*0600*/                   LDS.U.128 R8, [R3+UR4+0x400] ;",
        &[
            (".U", "storage.modifier.sass"),
            (".128", "storage.type.sass"),
            ("UR4", "variable.other.register.uniform.sass"),
        ],
    );
    check(
        SASS,
        "        /*0170*/                   IMAD.WIDE.U32 R10, R10, 0x4, R18.reuse ;",
        &[
            ("IMAD", "keyword.operator.instruction.sass"),
            (".WIDE", "storage.modifier.sass"),
            (".U32", "storage.type.sass"),
            ("R18", "variable.other.register.sass"),
            (".reuse", "storage.modifier.reuse.sass"),
        ],
    );
    check(
        SASS,
        "        /*0160*/                   FFMA R0, -R7, R7, R6 ;",
        &[
            ("FFMA", "keyword.operator.instruction.sass"),
            ("-", "keyword.operator.arithmetic.sass"),
            ("R7", "variable.other.register.sass"),
        ],
    );
    check(
        SASS,
        "        /*06b0*/                   FSETP.NEU.FTZ.AND P2, PT, |R0|.reuse, +INF , PT ;",
        &[
            ("|", "keyword.operator.absolute.sass"),
            ("R0", "variable.other.register.sass"),
            (".reuse", "storage.modifier.reuse.sass"),
            ("+INF", "constant.language.sass"),
        ],
    );
    check(
        SASS,
        "        /*02f0*/                   FSEL R0, R4, -INF , P0 ;",
        &[("-INF", "constant.language.sass"), ("P0", "variable.other.predicate.sass")],
    );
    check(
        SASS,
        "        /*0ba0*/                   MUFU.RSQ R3, -QNAN  ;",
        &[
            ("MUFU", "keyword.operator.instruction.sass"),
            (".RSQ", "storage.modifier.sass"),
            ("-QNAN", "constant.language.sass"),
        ],
    );
    check(
        SASS,
        "        /*02b0*/                   FSEL R4, R4, QNAN , !P0 ;",
        &[("QNAN", "constant.language.sass"), ("!", "keyword.operator.logical.sass")],
    );
    check(
        SASS,
        "        /*0350*/                   FFMA R7, R0, 1.4426950216293334961, R7 ;",
        &[("1.4426950216293334961", "constant.numeric.float.decimal.sass")],
    );
    check(
        SASS,
        "        /*02c0*/                   FSETP.GT.AND P0, PT, R4, 1.00000001504746621988e+30, PT ;",
        &[("1.00000001504746621988e+30", "constant.numeric.float.decimal.sass")],
    );
    check(
        SASS,
        "        /*0030*/                   IADD3 R1, R1, -0x130, RZ ;",
        &[("-", "keyword.operator.arithmetic.sass"), ("0x130", "constant.numeric.integer.hexadecimal.sass")],
    );
    check(
        SASS,
        "        /*0540*/                   HFMA2.MMA R5, -RZ, RZ, 0, 0 ;",
        &[
            ("HFMA2", "keyword.operator.instruction.sass"),
            (".MMA", "storage.modifier.sass"),
            ("0,", "constant.numeric.integer.decimal.sass"),
        ],
    );
    check(
        SASS,
        "        /*0bf0*/                   SHFL.BFLY PT, R3, R2, 0x10, 0x1f ;",
        &[("SHFL", "keyword.operator.instruction.sass"), (".BFLY", "storage.modifier.sass")],
    );
    check(
        SASS,
        "        /*0120*/                   CALL.REL.NOINC `($__internal_0_$__cuda_sm20_sqrt_rn_f32_slowpath) ;",
        &[("CALL", "keyword.operator.instruction.sass"), ("$__internal_0", "variable.function.sass")],
    );
    check(
        SASS,
        "        /*0570*/                   RET.REL.NODEC R4 0x0 ;",
        &[("RET", "keyword.operator.instruction.sass"), ("R4", "variable.other.register.sass")],
    );
}

#[test]
fn sass_hopper_instructions() {
    let hgmma = "        /*04f0*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR12], RZ, !UPT, gsb0 ;     /* 0x01e000000c1879f0 */";
    check(
        SASS,
        hgmma,
        &[
            ("HGMMA", "keyword.operator.instruction.sass"),
            (".64x128x16", "storage.modifier.sass"),
            (".F32", "storage.type.sass"),
            (".BF16", "storage.type.sass"),
            ("R24", "variable.other.register.sass"),
            ("gdesc", "variable.language.descriptor.sass"),
            ("UR12", "variable.other.register.uniform.sass"),
            ("!", "keyword.operator.logical.sass"),
            ("UPT", "variable.language.predicate.sass"),
            ("gsb0", "variable.other.barrier.sass"),
            ("0x01e000000c1879f0", "comment.block.encoding.sass"),
        ],
    );
    check(
        SASS,
        "        /*2640*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8].tnspB, R24, gsb0 ;",
        &[(".tnspB", "storage.modifier.sass")],
    );
    check(
        SASS,
        "        /*0560*/                   QGMMA.64x256x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24, gsb0 ;",
        &[
            ("QGMMA", "keyword.operator.instruction.sass"),
            (".64x256x32", "storage.modifier.sass"),
            (".E4M3", "storage.type.sass"),
        ],
    );
    check(
        SASS,
        "        /*09b0*/                   HMMA.16816.F32.BF16 R8, R8, R12, RZ ;",
        &[
            ("HMMA", "keyword.operator.instruction.sass"),
            (".16816", "storage.modifier.sass"),
            (".BF16", "storage.type.sass"),
        ],
    );
    check(
        SASS,
        "        /*0a00*/                   IMMA.16832.S8.S8 R4, R8, R12, R4 ;",
        &[("IMMA", "keyword.operator.instruction.sass"), (".S8", "storage.type.sass")],
    );
    let tma = "        /*0340*/                   UTMALDG.2D [UR4], [UR8] ;";
    check(
        SASS,
        tma,
        &[
            ("UTMALDG", "keyword.operator.instruction.sass"),
            (".2D", "storage.modifier.sass"),
            ("UR4", "variable.other.register.uniform.sass"),
        ],
    );
    check_stack_contains(SASS, tma, "UR8", "meta.address.sass");
    check(
        SASS,
        "        /*0e20*/                   UTMASTG.2D [UR12], [UR4] ;",
        &[("UTMASTG", "keyword.operator.instruction.sass")],
    );
    check(
        SASS,
        "        /*03a0*/                   UTMAPF.L2.2D [UR4], [UR8] ;",
        &[("UTMAPF", "keyword.operator.instruction.sass"), (".L2", "storage.modifier.sass")],
    );
    check(
        SASS,
        "        /*00f0*/                   SYNCS.EXCH.64 URZ, [UR6], UR4 ;",
        &[
            ("SYNCS", "keyword.operator.instruction.sass"),
            (".EXCH", "storage.modifier.sass"),
            (".64", "storage.type.sass"),
            ("URZ", "variable.language.register.zero.sass"),
        ],
    );
    check(
        SASS,
        "        /*0320*/                   SYNCS.ARRIVE.TRANS64.RED.A1T0 RZ, [UR5], R2 ;",
        &[
            (".ARRIVE", "storage.modifier.sass"),
            (".TRANS64", "storage.modifier.sass"),
            (".A1T0", "storage.modifier.sass"),
            ("RZ", "variable.language.register.zero.sass"),
        ],
    );
    check(
        SASS,
        "        /*0430*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [UR5], R2 ;",
        &[
            (".PHASECHK", "storage.modifier.sass"),
            (".TRYWAIT", "storage.modifier.sass"),
            ("P2", "variable.other.predicate.sass"),
        ],
    );
    check(
        SASS,
        "        /*04a0*/                   WARPGROUP.ARRIVE ;",
        &[("WARPGROUP", "keyword.operator.instruction.sass"), (".ARRIVE", "storage.modifier.sass")],
    );
    check(
        SASS,
        "        /*0550*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;",
        &[
            (".DEPBAR", "storage.modifier.sass"),
            (".LE", "storage.modifier.sass"),
            ("gsb0", "variable.other.barrier.sass"),
        ],
    );
    check(
        SASS,
        "        /*0390*/                   USETMAXREG.DEALLOC.CTAPOOL 0x28 ;",
        &[
            ("USETMAXREG", "keyword.operator.instruction.sass"),
            (".DEALLOC", "storage.modifier.sass"),
            (".CTAPOOL", "storage.modifier.sass"),
            ("0x28", "constant.numeric.integer.hexadecimal.sass"),
        ],
    );
    check(
        SASS,
        "        /*0060*/                   USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8 ;",
        &[(".TRY_ALLOC", "storage.modifier.sass"), ("UP0", "variable.other.predicate.uniform.sass")],
    );
    check(
        SASS,
        "        /*0400*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;",
        &[
            ("BAR", "keyword.operator.instruction.sass"),
            (".SYNC", "storage.modifier.sass"),
            (".DEFER_BLOCKING", "storage.modifier.sass"),
        ],
    );
    check(
        SASS,
        "        /*0330*/               @P0 ELECT P2, URZ, PT ;",
        &[
            ("ELECT", "keyword.operator.instruction.sass"),
            ("P2", "variable.other.predicate.sass"),
            ("URZ", "variable.language.register.zero.sass"),
        ],
    );
    check(
        SASS,
        "        /*00e0*/                   FENCE.VIEW.ASYNC.S ;",
        &[
            ("FENCE", "keyword.operator.instruction.sass"),
            (".VIEW", "storage.modifier.sass"),
            (".S", "storage.modifier.sass"),
        ],
    );
    check(
        SASS,
        "        /*07a0*/                   LDGSTS.E.BYPASS.LTC128B.128 [R17], desc[UR8][R14.64] ;",
        &[
            ("LDGSTS", "keyword.operator.instruction.sass"),
            (".BYPASS", "storage.modifier.sass"),
            (".LTC128B", "storage.modifier.sass"),
            (".128", "storage.type.sass"),
            ("desc", "variable.language.descriptor.sass"),
        ],
    );
    check(
        SASS,
        "        /*0690*/                   LDSM.16.M88.4 R8, [R12+UR12] ;",
        &[("LDSM", "keyword.operator.instruction.sass"), (".M88", "storage.modifier.sass")],
    );
    check(
        SASS,
        "        /*0750*/                   STSM.16.M88.4 [R3+0x2000], R8 ;",
        &[("STSM", "keyword.operator.instruction.sass")],
    );
    check(SASS, "        /*0020*/                   ACQBULK ;", &[("ACQBULK", "keyword.operator.instruction.sass")]);
    check(
        SASS,
        "        /*0200*/                   UCGABAR_ARV ;",
        &[("UCGABAR_ARV", "keyword.operator.instruction.sass")],
    );
    check(
        SASS,
        "        /*0d50*/               @P0 REDG.E.MAX.S32.STRONG.GPU desc[UR8][R4.64], R13 ;",
        &[
            ("REDG", "keyword.operator.instruction.sass"),
            (".S32", "storage.type.sass"),
            (".STRONG", "storage.modifier.sass"),
        ],
    );
}

#[test]
fn scopes_discriminate_similar_tokens() {
    // Negative controls: tokens that look alike must not share a scope.
    let line = "        /*0140*/               @P0 R2UR UR7, R0 ;";
    assert_eq!(scope_of(SASS, line, "R2UR"), "keyword.operator.instruction.sass");
    assert_ne!(scope_of(SASS, line, "R2UR"), scope_of(SASS, line, "R0"));
    assert_ne!(scope_of(SASS, line, "UR7"), scope_of(SASS, line, "R0"));
    let ptx = "\tmov.u32 \t%r1, %tid.x;";
    assert!(!scope_of(PTX, ptx, "%tid.x").starts_with("variable.other"));
    assert!(!scope_of(PTX, ptx, "mov").starts_with("storage"));
    let decl = "\t.shared .align 8 .u64 bar;";
    let inst = "\tld.shared.u64 %rd1, [bar];";
    assert_ne!(scope_of(PTX, decl, ".shared"), scope_of(PTX, inst, ".shared"));
    assert!(
        !scope_of(SASS, "        /*0a00*/                   HMMA.16816.F32.BF16 R8, R8, R12, RZ ;", ".16816")
            .starts_with("storage.type")
    );
}

// ------------------------------------------------------------ real listings

#[test]
fn fixture_sass_listings_parse_cleanly() {
    for rel in ["cuobjdump-sass/stdout.txt", "nvdisasm-sass/stdout.txt"] {
        let (name, text) = fixture(rel);
        parse_listing(SASS, &name, &text);
    }
}

#[test]
fn fixture_ptx_listings_parse_cleanly() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(FIXTURES)
        .expect("fixtures dir")
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_dir(e.path()).ok())
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "ptx"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .ptx fixtures under {FIXTURES}");
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        parse_listing(PTX, &path.display().to_string(), &text);
    }
}

#[test]
fn hopper_listings_parse_cleanly() {
    parse_listing(PTX, "HOPPER_PTX", HOPPER_PTX);
    parse_listing(PTX, "TRITON_TMA_PTX", TRITON_TMA_PTX);
    parse_listing(SASS, "HOPPER_CUOBJDUMP_SASS", HOPPER_CUOBJDUMP_SASS);
    parse_listing(SASS, "HOPPER_NVDISASM_SASS", HOPPER_NVDISASM_SASS);
}

#[test]
fn hopper_listings_scope_every_opcode() {
    // In the real SASS listings, every instruction line's opcode is scoped as
    // an instruction and every address column as an address comment.
    for (name, text) in
        [("HOPPER_CUOBJDUMP_SASS", HOPPER_CUOBJDUMP_SASS), ("HOPPER_NVDISASM_SASS", HOPPER_NVDISASM_SASS)]
    {
        let mut seen = 0;
        for line in text.lines() {
            let Some((addr, body)) = line.trim_start().strip_prefix("/*").and_then(|r| r.split_once("*/")) else {
                continue;
            };
            if addr.is_empty() || !addr.chars().all(|c| c.is_ascii_hexdigit()) {
                continue; // an encoding-only line: /* 0x... */
            }
            let body = body.trim_start();
            let body = if body.starts_with('@') { body.split_once(' ').unwrap().1.trim_start() } else { body };
            let opcode: String = body.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            assert!(!opcode.is_empty(), "{name}: no opcode in {line:?}");
            check(SASS, line, &[(addr, "comment.block.address.sass"), (&opcode, "keyword.operator.instruction.sass")]);
            seen += 1;
        }
        assert!(seen > 50, "{name}: only {seen} instruction lines");
    }
}

// Real nvcc 13.0 output for sm_90a (`nvcc -arch=sm_90a -lineinfo -ptx`) of a
// kernel exercising elect, mbarrier, TMA, clusters, setmaxnreg, wgmma (bf16
// and e4m3), ldmatrix/stmatrix, mma.sync, cp.async and griddepcontrol.
// Excerpt: the register-initialisation and FADD runs are left out.
const HOPPER_PTX: &str = r##"//
// Generated by NVIDIA NVVM Compiler
//
// Compiler Build ID: CL-36424714
// Cuda compilation tools, release 13.0, V13.0.88
// Based on NVVM 7.0.1
//

.version 9.0
.target sm_90a
.address_size 64

	// .globl	_Z13hopper_kernel4TMapPfPKfimm
// _ZZ13hopper_kernel4TMapPfPKfimmE4smem has been demoted
// _ZZ13hopper_kernel4TMapPfPKfimmE3bar has been demoted
// _ZZ13hopper_kernel4TMapPfPKfimmE5stage has been demoted

.visible .entry _Z13hopper_kernel4TMapPfPKfimm(
	.param .align 64 .b8 _Z13hopper_kernel4TMapPfPKfimm_param_0[128],
	.param .u64 _Z13hopper_kernel4TMapPfPKfimm_param_1,
	.param .u64 _Z13hopper_kernel4TMapPfPKfimm_param_2,
	.param .u32 _Z13hopper_kernel4TMapPfPKfimm_param_3,
	.param .u64 _Z13hopper_kernel4TMapPfPKfimm_param_4,
	.param .u64 _Z13hopper_kernel4TMapPfPKfimm_param_5
)
.maxntid 384, 1, 1
.minnctapersm 1
.explicitcluster
.reqnctapercluster 2, 1, 1
{
	.reg .pred 	%p<6>;
	.reg .f32 	%f<232>;
	.reg .b32 	%r<59>;
	.reg .b64 	%rd<25>;
	.loc	1 11 0
	// demoted variable
	.shared .align 1024 .b8 _ZZ13hopper_kernel4TMapPfPKfimmE4smem[16384];
	// demoted variable
	.shared .align 8 .u64 _ZZ13hopper_kernel4TMapPfPKfimmE3bar;
	// demoted variable
	.shared .align 16 .b8 _ZZ13hopper_kernel4TMapPfPKfimmE5stage[1024];

	mov.b64 	%rd2, _Z13hopper_kernel4TMapPfPKfimm_param_0;
	ld.param.u64 	%rd6, [_Z13hopper_kernel4TMapPfPKfimm_param_1];
	ld.param.u64 	%rd3, [_Z13hopper_kernel4TMapPfPKfimm_param_2];
	ld.param.u32 	%r2, [_Z13hopper_kernel4TMapPfPKfimm_param_3];
	ld.param.u64 	%rd4, [_Z13hopper_kernel4TMapPfPKfimm_param_4];
	ld.param.u64 	%rd5, [_Z13hopper_kernel4TMapPfPKfimm_param_5];
	cvta.to.global.u64 	%rd1, %rd6;
	.loc	1 18 5
	// begin inline asm
	griddepcontrol.wait;
	// end inline asm
	.loc	1 20 5
	// begin inline asm
	{
 .reg .pred P1;
 elect.sync _|P1, 0xffffffff;
 selp.u32 %r3, 1, 0, P1;
}

	// end inline asm
	.loc	1 21 5
	mov.u32 	%r1, %tid.x;
	setp.ne.s32 	%p1, %r1, 0;
	@%p1 bra 	$L__BB0_2;

	.loc	1 22 9
	mov.u32 	%r4, _ZZ13hopper_kernel4TMapPfPKfimmE3bar;
	mov.u32 	%r5, 1;
	// begin inline asm
	mbarrier.init.shared::cta.b64 [%r4], %r5;
	// end inline asm
	.loc	1 23 9
	// begin inline asm
	fence.mbarrier_init.release.cluster;
	// end inline asm
	.loc	1 24 9
	// begin inline asm
	fence.proxy.async.shared::cta;
	// end inline asm

$L__BB0_2:
	.loc	1 26 5
	// begin inline asm
	barrier.cluster.arrive.release.aligned;
barrier.cluster.wait.acquire.aligned;
	// end inline asm
	.loc	1 27 5
	@%p1 bra 	$L__BB0_4;

	.loc	1 28 9
	mov.u32 	%r6, _ZZ13hopper_kernel4TMapPfPKfimmE3bar;
	mov.u32 	%r7, 16384;
	// begin inline asm
	mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r6], %r7;
	// end inline asm
	.loc	1 30 29
	mov.u32 	%r14, %ctaid.x;
	shl.b32 	%r10, %r14, 7;
	cvta.param.u64 	%rd8, %rd2;
	mov.u32 	%r8, _ZZ13hopper_kernel4TMapPfPKfimmE4smem;
	mov.u32 	%r13, 0;
	// begin inline asm
	cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r8], [%rd8, {%r13, %r10}], [%r6];
	// end inline asm
	.loc	1 31 9
	mov.u32 	%r12, 64;
	// begin inline asm
	cp.async.bulk.prefetch.tensor.2d.L2.global [%rd8, {%r12, %r13}];
	// end inline asm

$L__BB0_4:
	.loc	1 34 25
	mov.u32 	%r15, _ZZ13hopper_kernel4TMapPfPKfimmE3bar;
	mov.u32 	%r16, 0;
	// begin inline asm
	{
 .reg .pred p;
 LAB_WAIT:
 mbarrier.try_wait.parity.shared::cta.b64 p, [%r15], %r16;
 @p bra.uni DONE;
 bra.uni LAB_WAIT;
 DONE:
}

	// end inline asm
	.loc	1 35 5
	setp.gt.u32 	%p3, %r1, 255;
	@%p3 bra 	$L__BB0_6;
	bra.uni 	$L__BB0_5;

$L__BB0_6:
	.loc	1 36 9
	// begin inline asm
	setmaxnreg.dec.sync.aligned.u32 40;
	// end inline asm
	bra.uni 	$L__BB0_7;

$L__BB0_5:
	.loc	1 38 9
	// begin inline asm
	setmaxnreg.inc.sync.aligned.u32 232;
	// end inline asm

$L__BB0_7:
	.loc	1 43 5
	// begin inline asm
	wgmma.fence.sync.aligned;
	// end inline asm
	.loc	1 59 15
	mov.f32 	%f138, 0f00000000;
	mov.f32 	%f63, %f138;
	mov.f32 	%f64, %f138;
	mov.f32 	%f65, %f138;
	// begin inline asm
	{
wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f2, %f3, %f4, %f5, %f6, %f7, %f8, %f9, %f10, %f11, %f12, %f13, %f14, %f15, %f16, %f17, %f18, %f19, %f20, %f21, %f22, %f23, %f24, %f25, %f26, %f27, %f28, %f29, %f30, %f31, %f32, %f33, %f34, %f35, %f36, %f37, %f38, %f39, %f40, %f41, %f42, %f43, %f44, %f45, %f46, %f47, %f48, %f49, %f50, %f51, %f52, %f53, %f54, %f55, %f56, %f57, %f58, %f59, %f60, %f61, %f62, %f63, %f64, %f65}, %rd4, %rd5, 1, 1, 1, 0, 0;
}

	// end inline asm
	.loc	1 60 5
	// begin inline asm
	wgmma.commit_group.sync.aligned;
	// end inline asm
	.loc	1 61 5
	// begin inline asm
	wgmma.wait_group.sync.aligned 0;
	// end inline asm
	.loc	1 65 18
	mov.f32 	%f130, %f138;
	mov.f32 	%f131, %f138;
	mov.f32 	%f132, %f138;
	mov.f32 	%f133, %f138;
	// begin inline asm
	wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%f130, %f131, %f132, %f133}, %rd4, %rd5, 1, 1, 1;

	// end inline asm
	.loc	1 66 5
	// begin inline asm
	wgmma.commit_group.sync.aligned;
	// end inline asm
	.loc	1 67 5
	// begin inline asm
	wgmma.wait_group.sync.aligned 0;
	// end inline asm
	.loc	1 70 5
	shl.b32 	%r37, %r1, 4;
	mov.u32 	%r38, _ZZ13hopper_kernel4TMapPfPKfimmE4smem;
	add.s32 	%r21, %r37, %r38;
	// begin inline asm
	ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r17, %r18, %r19, %r20}, [%r21];
	// end inline asm
	add.s32 	%r24, %r21, 4096;
	.loc	1 71 5
	// begin inline asm
	ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r22, %r23}, [%r24];
	// end inline asm
	.loc	1 74 18
	mov.f32 	%f139, %f138;
	mov.f32 	%f140, %f138;
	mov.f32 	%f141, %f138;
	// begin inline asm
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f138, %f139, %f140, %f141}, {%r17, %r18, %r19, %r20}, {%r22, %r23}, {%f138, %f139, %f140, %f141};
	// end inline asm
	add.s32 	%r31, %r21, 8192;
	.loc	1 75 5
	// begin inline asm
	stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r31], {%r17, %r18, %r19, %r20};
	// end inline asm
	.loc	1 77 5
	and.b32  	%r39, %r37, 1008;
	mov.u32 	%r40, _ZZ13hopper_kernel4TMapPfPKfimmE5stage;
	add.s32 	%r36, %r39, %r40;
	shl.b32 	%r41, %r1, 2;
	and.b32  	%r42, %r41, 252;
	mul.wide.u32 	%rd16, %r42, 4;
	add.s64 	%rd14, %rd3, %rd16;
	// begin inline asm
	cp.async.cg.shared.global [%r36], [%rd14], 16;
	// end inline asm
	.loc	1 78 5
	// begin inline asm
	cp.async.commit_group;
	// end inline asm
	.loc	1 79 5
	// begin inline asm
	cp.async.wait_group 0;
	// end inline asm
	.loc	1 80 5
	bar.sync 	0;
	.loc	1 81 5
	mul.wide.u32 	%rd17, %r1, 16;
	add.s64 	%rd15, %rd3, %rd17;
	.loc	1 81 5
	.loc	2 137 50, function_name $L__info_string0, inlined_at 1 81 5
	// begin inline asm
	ld.global.nc.v4.f32 {%f146,%f147,%f148,%f149}, [%rd15];
	// end inline asm
	mul.f32 	%f229, %f226, %f228;
	.loc	1 86 5
	.loc	3 449 9, function_name $L__info_string1, inlined_at 1 86 5
	mov.b32 	%r45, %f229;
	mov.u32 	%r46, 31;
	mov.u32 	%r47, 16;
	mov.u32 	%r48, -1;
	shfl.sync.bfly.b32 	%r49|%p5, %r45, %r47, %r46, %r48;
	.loc	3 450 2, function_name $L__info_string1, inlined_at 1 86 5
	mov.b32 	%f230, %r49;
	.loc	1 86 5
	add.f32 	%f1, %f229, %f230;
	.loc	1 87 5
	mul.wide.s32 	%rd18, %r2, 4;
	add.s64 	%rd19, %rd1, %rd18;
	.loc	1 87 5
	.loc	4 84 3, function_name $L__info_string2, inlined_at 1 87 5
	atom.global.add.f32 	%f231, [%rd19], %f1;
	.loc	1 88 5
	add.s64 	%rd20, %rd1, 4;
	cvt.rzi.s32.f32 	%r50, %f1;
	.loc	1 88 5
	.loc	5 152 3, function_name $L__info_string3, inlined_at 1 88 5
	atom.global.max.s32 	%r51, [%rd20], %r50;
	.loc	1 89 5
	@%p1 bra 	$L__BB0_9;

	.loc	1 90 9
	// begin inline asm
	fence.proxy.async.shared::cta;
	// end inline asm
	.loc	1 91 9
	cvta.param.u64 	%rd21, %rd2;
	mov.u32 	%r53, 0;
	// begin inline asm
	cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd21, {%r53, %r53}], [%r38];
	// end inline asm
	.loc	1 92 9
	// begin inline asm
	cp.async.bulk.commit_group;
	// end inline asm
	.loc	1 93 9
	// begin inline asm
	cp.async.bulk.wait_group.read 0;
	// end inline asm

$L__BB0_9:
	.loc	1 95 5
	mov.u32 	%r55, %ctaid.x;
	mov.u32 	%r56, %ntid.x;
	mad.lo.s32 	%r58, %r55, %r56, %r1;
	mul.wide.u32 	%rd23, %r58, 4;
	add.s64 	%rd24, %rd1, %rd23;
	st.global.f32 	[%rd24], %f1;
	.loc	1 96 5
	// begin inline asm
	griddepcontrol.launch_dependents;
	// end inline asm
	.loc	1 97 1
	ret;

}
	.file	1 "/tmp/hopper/k.cu"
	.file	2 "/usr/local/cuda/bin/..//include/sm_32_intrinsics.hpp"
	.file	3 "/usr/local/cuda/bin/..//include/sm_30_intrinsics.hpp"
	.file	4 "/usr/local/cuda/bin/..//include/sm_20_atomic_functions.hpp"
	.file	5 "/usr/local/cuda/bin/..//include/device_atomic_functions.hpp"
	.section	.debug_str
	{
$L__info_string0:
.b8 95,90,78,51,52,95,73,78,84,69,82,78,65,76,95,101,56,56,101,56,52,48,53,95,52,95,107,95,99,117,95,56,57,98,56,102,98,101,49,53
.b8 95,95,108,100,103,69,80,75,54,102,108,111,97,116,52,0
$L__info_string1:
.b8 95,90,78,51,52,95,73,78,84,69,82,78,65,76,95,101,56,56,101,56,52,48,53,95,52,95,107,95,99,117,95,56,57,98,56,102,98,101,49,49
.b8 53,95,95,115,104,102,108,95,120,111,114,95,115,121,110,99,69,106,102,105,105,0
$L__info_string2:
"##;

// Real Triton 3.9 output (LLVM NVPTX back end) for a TMA descriptor load on
// sm_90a: elect.sync with a sink, mbarrier + cp.async.bulk.tensor in inline
// asm, a wait loop with a named predicate and label.
const TRITON_TMA_PTX: &str = r##"//
// Generated by LLVM NVPTX Back-End
//

.version 9.4
.target sm_90a
.address_size 64

	// .globl	tma_kernel              // -- Begin function tma_kernel
.extern .shared .align 16 .b8 global_smem[];
                                        // @tma_kernel
.visible .entry tma_kernel(
	.param .align 64 .b8 tma_kernel_param_0[128],
	.param .u32 tma_kernel_param_1,
	.param .u32 tma_kernel_param_2,
	.param .u64 tma_kernel_param_3,
	.param .u64 tma_kernel_param_4,
	.param .u64 .ptr .global .align 1 tma_kernel_param_5,
	.param .u32 tma_kernel_param_6,
	.param .u64 .ptr .global .align 1 tma_kernel_param_7,
	.param .u64 .ptr .global .align 1 tma_kernel_param_8
)
.reqntid 128
{
	.reg .pred 	%p<10>;
	.reg .b16 	%rs<33>;
	.reg .b32 	%r<27>;
	.reg .b64 	%rd<37>;
	.loc	1 26 0                          // mm.py:26:0
$L__func_begin0:
	.loc	1 26 0                          // mm.py:26:0

// %bb.0:
	mov.b32 	%r5, tma_kernel_param_0;
$L__tmp0:
	.loc	1 27 11                         // mm.py:27:11
	cvt.u64.u32 	%rd34, %r5;
	cvta.param.u64 	%rd1, %rd34;
	mov.u32 	%r6, %ctaid.x;
	.loc	1 28 22                         // mm.py:28:22
	shl.b32 	%r4, %r6, 6;
	.loc	1 28 9                          // mm.py:28:9
	mov.u32 	%r7, %tid.x;
	setp.lt.u32 	%p5, %r7, 32;
	ld.param.b64 	%rd35, [tma_kernel_param_5];
	elect.sync 	%r8|%p6, -1;
	and.pred 	%p1, %p5, %p6;
	mov.b32 	%r2, global_smem;
	add.s32 	%r1, %r2, 8192;
	// begin inline asm
	@%p1 mbarrier.init.shared::cta.b64 [%r1], 1;

	// end inline asm
	bar.sync 	0;
	and.b32 	%r9, %r7, 127;
	setp.eq.b32 	%p2, %r9, 0;
	// begin inline asm
	@%p2 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], 8192;

	// end inline asm
	bar.sync 	0;
	elect.sync 	%r10|%p7, -1;
	setp.lt.u32 	%p8, %r9, 32;
	and.pred 	%p3, %p8, %p7;
	mov.b32 	%r3, 0;
	// begin inline asm
	@%p3 cp.async.bulk.tensor.2d.shared::cta.global.mbarrier::complete_tx::bytes [%r2], [%rd1, {%r3, %r4}], [%r1];

	// end inline asm
	// begin inline asm
	
{
	.reg .pred complete;
	.loc	1 31 9                          // mm.py:31:9
	waitLoop:
	.loc	1 32 9                          // mm.py:32:9
	mbarrier.try_wait.parity.shared::cta.b64 complete, [%r1], %r3;
	@!complete bra.uni waitLoop;
}


	// end inline asm
	bar.sync 	0;
	elect.sync 	%r11|%p9, -1;
	and.pred 	%p4, %p5, %p9;
	// begin inline asm
	@%p4 mbarrier.inval.shared::cta.b64 [%r1];

	// end inline asm
	.loc	1 30 5                          // mm.py:30:5
"##;

// Real `cuobjdump --dump-sass` (CUDA 13.2) output for the kernels above,
// excerpted: UTMALDG, HGMMA/QGMMA, WARPGROUP, SYNCS, LDSM/STSM, LDGSTS, HMMA,
// UTMASTG, USETMAXREG, -QNAN, NOP padding and the end-of-function marker.
const HOPPER_CUOBJDUMP_SASS: &str = r##"
	code for sm_90a
	.target	sm_90a

		Function : _Z13hopper_kernel4TMapPfPKfimm
	.headerflags	@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                          /* 0x00000a00ff017b82 */
                                                                                                   /* 0x000fe20000000800 */
        /*0010*/                   S2R R0, SR_TID.X ;                                              /* 0x0000000000007919 */
                                                                                                   /* 0x000e620000002100 */
        /*0020*/                   ACQBULK ;                                                       /* 0x000000000000782e */
                                                                                                   /* 0x000fe20000000000 */
        /*0030*/                   BSSY B0, 0x180 ;                                                /* 0x0000014000007945 */
                                                                                                   /* 0x000fe20003800000 */
        /*0040*/                   ISETP.NE.AND P1, PT, R0, RZ, PT ;                               /* 0x000000ff0000720c */
                                                                                                   /* 0x002fda0003f25270 */
        /*0050*/               @P1 BRA 0x170 ;                                                     /* 0x0000000000441947 */
                                                                                                   /* 0x000fea0003800000 */
        /*0060*/                   S2UR UR7, SR_CgaCtaId ;                                         /* 0x00000000000779c3 */
                                                                                                   /* 0x000e620000008800 */
        /*0070*/                   UMOV UR4, 0x400 ;                                               /* 0x0000040000047882 */
                                                                                                   /* 0x000fe40000000000 */
        /*0080*/                   UIADD3 UR6, UR4, 0x4000, URZ ;                                  /* 0x0000400004067890 */
                                                                                                   /* 0x000fc6000fffe03f */
        /*0330*/               @P0 ELECT P2, URZ, PT ;                                             /* 0x00000000003f082f */
                                                                                                   /* 0x000fe20003840000 */
        /*0340*/                   UTMALDG.2D [UR4], [UR8] ;                                       /* 0x00000004080075b4 */
                                                                                                   /* 0x0005d80008008000 */
        /*0350*/               @P2 PLOP3.LUT P0, PT, P2, PT, PT, 0x8, 0x0 ;                        /* 0x000000000000281c */
                                                                                                   /* 0x000fe4000170e170 */
        /*04d0*/                   LDC.64 R4, c[0x0][0x2c8] ;                                      /* 0x0000b200ff047b82 */
                                                                                                   /* 0x000e620000000a00 */
        /*04e0*/                   SHF.L.U32 R2, R0.reuse, 0x2, RZ ;                               /* 0x0000000200027819 */
                                                                                                   /* 0x040fe400000006ff */
        /*04f0*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR12], RZ, !UPT, gsb0 ;     /* 0x01e000000c1879f0 */
                                                                                                   /* 0x000fe2000c0018ff */
        /*0500*/                   SHF.L.U32 R12, R0, 0x4, RZ ;                                    /* 0x00000004000c7819 */
                                                                                                   /* 0x000fe400000006ff */
        /*0510*/                   LOP3.LUT R15, R2, 0xfc, RZ, 0xc0, !PT ;                         /* 0x000000fc020f7812 */
                                                                                                   /* 0x000fe400078ec0ff */
        /*0520*/                   LOP3.LUT R6, R12, 0x3f0, RZ, 0xc0, !PT ;                        /* 0x000003f00c067812 */
                                                                                                   /* 0x000fc600078ec0ff */
        /*0530*/                   IMAD.WIDE.U32 R14, R15, 0x4, R4 ;                               /* 0x000000040f0e7825 */
                                                                                                   /* 0x002fc800078e0004 */
        /*0540*/                   IMAD.WIDE.U32 R4, R0, 0x10, R4 ;                                /* 0x0000001000047825 */
                                                                                                   /* 0x000fe200078e0004 */
        /*0550*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;                                 /* 0x00008000000079c5 */
                                                                                                   /* 0x000fe40000010000 */
        /*0560*/                   QGMMA.64x8x32.F32.E4M3.E4M3 R88, gdesc[UR12], RZ, !UPT, gsb0 ;  /* 0x000000000c5879f3 */
                                                                                                   /* 0x000fe2000c0008ff */
        /*0570*/                   ULEA UR12, UR6, UR4, 0x18 ;                                     /* 0x00000004060c7291 */
                                                                                                   /* 0x000fe4000f8ec03f */
        /*0580*/                   UIADD3 UR4, UR4, 0x4010, URZ ;                                  /* 0x0000401004047890 */
                                                                                                   /* 0x000fc8000fffe03f */
        /*0680*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;                                 /* 0x00008000000079c5 */
                                                                                                   /* 0x000fe40000010000 */
        /*0690*/                   LDSM.16.M88.4 R8, [R12+UR12] ;                                  /* 0x0000000c0c08783b */
                                                                                                   /* 0x000e620008000200 */
        /*06a0*/                   FADD R34, R34, R33 ;                                            /* 0x0000002122227221 */
                                                                                                   /* 0x000fc60000000000 */
        /*06b0*/                   LDSM.16.MT88.2 R12, [R12+UR12+0x1000] ;                         /* 0x0010000c0c0c783b */
                                                                                                   /* 0x000ee20008004100 */
        /*0790*/              @!PT LDS RZ, [RZ] ;                                                  /* 0x00000000fffff984 */
                                                                                                   /* 0x000fe20000000800 */
        /*07a0*/                   LDGSTS.E.BYPASS.128 [R17], desc[UR8][R14.64] ;                  /* 0x000000000e117fae */
                                                                                                   /* 0x0003e6000b901c48 */
        /*09a0*/                   FADD R72, R72, R71 ;                                            /* 0x0000004748487221 */
                                                                                                   /* 0x000fe20000000000 */
        /*09b0*/                   HMMA.16816.F32.BF16 R8, R8, R12, RZ ;                           /* 0x0000000c0808723c */
                                                                                                   /* 0x008fe600000418ff */
        /*0e10*/                   UIADD3.X UR5, URZ, UR5, URZ, UP0, !UPT ;                        /* 0x000000053f057290 */
                                                                                                   /* 0x000fd200087fe43f */
        /*0e20*/                   UTMASTG.2D [UR12], [UR4] ;                                      /* 0x0000000c040073b5 */
                                                                                                   /* 0x0045e20008008000 */
        /*0e30*/                   UTMACMDFLUSH ;                                                  /* 0x00000000000079b7 */
                                                                                                   /* 0x0001e20000000000 */
        /*0e40*/                   DEPBAR.LE SB0, 0x0 ;                                            /* 0x000080000000791a */
                                                                                                   /* 0x000fc80000000000 */
        /*0e50*/                   BSYNC B0 ;                                                      /* 0x0000000000007941 */
                                                                                                   /* 0x004fea0003800000 */
        /*0e60*/                   S2UR UR4, SR_CTAID.X ;                                          /* 0x00000000000479c3 */
                                                                                                   /* 0x000e640000002500 */
        /*0e70*/                   IMAD R3, R11, UR4, R0 ;                                         /* 0x000000040b037c24 */
                                                                                                   /* 0x00afc8000f8e0200 */
        /*0e80*/                   IMAD.WIDE.U32 R2, R3, 0x4, R6 ;                                 /* 0x0000000403027825 */
                                                                                                   /* 0x000fca00078e0006 */
        /*0e90*/                   STG.E desc[UR8][R2.64], R9 ;                                    /* 0x0000000902007986 */
                                                                                                   /* 0x000fe2000c101908 */
        /*0ea0*/                   PREEXIT ;                                                       /* 0x000000000000782d */
                                                                                                   /* 0x000fe20000000000 */
        /*0eb0*/                   EXIT ;                                                          /* 0x000000000000794d */
                                                                                                   /* 0x000fea0003800000 */
        /*0040*/               @P0 BRA 0x380 ;                                                  /* 0x0000000000cc0947 */
                                                                                                /* 0x000fea0003800000 */
        /*0050*/                   WARPSYNC.ALL ;                                               /* 0x0000000000007948 */
                                                                                                /* 0x000ff20003800000 */
        /*0060*/                   USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8 ;                     /* 0x000000e8000079c8 */
                                                                                                /* 0x000e240008000600 */
        /*0070*/                   PLOP3.LUT P0, PT, PT, PT, UP0, 0x80, 0x0 ;                   /* 0x000000000000781c */
                                                                                                /* 0x001fda0003f0f008 */
        /*0380*/                   WARPSYNC.ALL ;                                               /* 0x0000000000007948 */
                                                                                                /* 0x000ff20003800000 */
        /*0390*/                   USETMAXREG.DEALLOC.CTAPOOL 0x28 ;                            /* 0x00000028000079c8 */
                                                                                                /* 0x000e0000080e0500 */
        /*0b90*/                   BRA 0xbd0 ;                                                  /* 0x00000000000c7947 */
                                                                                                /* 0x000fec0003800000 */
        /*0ba0*/                   MUFU.RSQ R3, -QNAN  ;                                        /* 0xffc0000000037908 */
                                                                                                /* 0x000e220000001400 */
        /*0c00*/                   RET.REL.NODEC R4 0x0 ;                                       /* 0xfffffff004fc7950 */
                                                                                                /* 0x001fea0003c3ffff */
        /*0c10*/                   BRA 0xc10;                                                   /* 0xfffffffc00fc7947 */
                                                                                                /* 0x000fc0000383ffff */
        /*0c20*/                   NOP;                                                         /* 0x0000000000007918 */
                                                                                                /* 0x000fc00000000000 */
        /*0cf0*/                   NOP;                                                         /* 0x0000000000007918 */
                                                                                                /* 0x000fc00000000000 */
		..........
"##;

// Real `nvdisasm -c -g` (CUDA 13.2) output for the same cubin, excerpted:
// section header, labels, line-info comments, label references, symbols.
const HOPPER_NVDISASM_SASS: &str = r##"	.target	sm_90a

	.elftype	@"ET_EXEC"


//--------------------- .text._Z13hopper_kernel4TMapPfPKfimm --------------------------
	.section	.text._Z13hopper_kernel4TMapPfPKfimm,"ax",@progbits
	.align	128
        .global         _Z13hopper_kernel4TMapPfPKfimm
        .type           _Z13hopper_kernel4TMapPfPKfimm,@function
        .size           _Z13hopper_kernel4TMapPfPKfimm,(.L_x_12 - _Z13hopper_kernel4TMapPfPKfimm)
        .other          _Z13hopper_kernel4TMapPfPKfimm,@"STO_CUDA_ENTRY STV_DEFAULT"
_Z13hopper_kernel4TMapPfPKfimm:
.text._Z13hopper_kernel4TMapPfPKfimm:
	//## File "/tmp/hopper/k.cu", line 11
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "/tmp/hopper/k.cu", line 21
        /*0010*/                   S2R R0, SR_TID.X ;
	//## File "/tmp/hopper/k.cu", line 18
        /*0020*/                   ACQBULK ;
        /*0030*/                   BSSY B0, `(.L_x_0) ;
	//## File "/tmp/hopper/k.cu", line 21
        /*0040*/                   ISETP.NE.AND P1, PT, R0, RZ, PT ;
        /*0050*/               @P1 BRA `(.L_x_1) ;
	//## File "/tmp/hopper/k.cu", line 22
        /*0060*/                   S2UR UR7, SR_CgaCtaId ;
        /*0070*/                   UMOV UR4, 0x400 ;
        /*0080*/                   UIADD3 UR6, UR4, 0x4000, URZ ;
        /*0090*/                   UMOV UR4, 0x1 ;
        /*00a0*/                   UIADD3 UR4, -UR4, 0x100000, URZ ;
        /*00b0*/                   USHF.L.U32 UR5, UR4, 0xb, URZ ;
        /*00c0*/                   USHF.L.U32 UR4, UR4, 0x1, URZ ;
        /*00d0*/                   ULEA UR6, UR7, UR6, 0x18 ;
        /*00e0*/                   FENCE.VIEW.ASYNC.S ;
        /*00f0*/                   SYNCS.EXCH.64 URZ, [UR6], UR4 ;
	//## File "/tmp/hopper/k.cu", line 23
        /*0100*/                   NOP ;
	//## File "/tmp/hopper/k.cu", line 24
        /*0110*/              @!PT LDS RZ, [RZ] ;
        /*0120*/              @!PT LDS RZ, [RZ] ;
        /*0130*/              @!PT LDS RZ, [RZ] ;
        /*0140*/              @!PT LDS RZ, [RZ] ;
        /*0150*/                   MEMBAR.ALL.CTA ;
        /*0160*/                   FENCE.VIEW.ASYNC.S ;
.L_x_1:
        /*0170*/                   BSYNC B0 ;
.L_x_0:
	//## File "/tmp/hopper/k.cu", line 26
        /*0180*/              @!PT LDS RZ, [RZ] ;
        /*0190*/              @!PT LDS RZ, [RZ] ;
        /*01a0*/              @!PT LDS RZ, [RZ] ;
        /*01b0*/              @!PT LDS RZ, [RZ] ;
        /*01c0*/                   MEMBAR.ALL.CTA ;
        /*01d0*/                   MEMBAR.ALL.GPU ;
        /*01e0*/                   ERRBAR;
        /*01f0*/                   CGAERRBAR ;
        /*0200*/                   UCGABAR_ARV ;
        /*0210*/                   BSSY B0, `(.L_x_2) ;
        /*0220*/                   UCGABAR_WAIT ;
        /*0230*/                   CCTL.IVALL ;
	//## File "/tmp/hopper/k.cu", line 27
        /*0240*/               @P1 BRA `(.L_x_3) ;
	//## File "/tmp/hopper/k.cu", line 28
        /*0250*/                   S2UR UR6, SR_CgaCtaId ;
        /*0260*/                   UMOV UR4, 0x400 ;
        /*0270*/                   MOV R2, 0x4000 ;
        /*0280*/                   UIADD3 UR5, UR4, 0x4000, URZ ;
	//## File "/tmp/hopper/k.cu", line 30
        /*0290*/                   PLOP3.LUT P0, PT, PT, PT, PT, 0x80, 0x0 ;
        /*02a0*/                   ULDC.64 UR8, c[0x0][0x198] ;
        /*02b0*/                   UIADD3 UR8, UP0, UR8, 0x30, URZ ;
        /*02c0*/                   S2UR UR7, SR_CTAID.X ;
        /*02d0*/                   UIADD3.X UR9, URZ, UR9, URZ, UP0, !UPT ;
	//## File "/tmp/hopper/k.cu", line 28
        /*02e0*/                   ULEA UR5, UR6, UR5, 0x18 ;
	//## File "/tmp/hopper/k.cu", line 30
        /*02f0*/                   ULEA UR4, UR6, UR4, 0x18 ;
        /*0300*/                   UMOV UR6, URZ ;
        /*0310*/                   USHF.L.U32 UR7, UR7, 0x7, URZ ;
	//## File "/tmp/hopper/k.cu", line 28
        /*0320*/                   SYNCS.ARRIVE.TRANS64 RZ, [UR5], R2 ;
.L_x_4:
	//## File "/tmp/hopper/k.cu", line 30
        /*0330*/               @P0 ELECT P2, URZ, PT ;
        /*0340*/                   UTMALDG.2D [UR4], [UR8] ;
        /*0350*/               @P2 PLOP3.LUT P0, PT, P2, PT, PT, 0x8, 0x0 ;
        /*0360*/                   PLOP3.LUT P2, PT, PT, PT, PT, 0x8, 0x0 ;
        /*0370*/               @P0 BRA.U.ANY `(.L_x_4) ;
	//## File "/tmp/hopper/k.cu", line 31
        /*0380*/                   UMOV UR4, 0x40 ;
        /*0390*/                   UMOV UR5, URZ ;
        /*03a0*/                   UTMAPF.L2.2D [UR4], [UR8] ;
        /*03b0*/                   NOP ;
.L_x_3:
        /*03c0*/                   BSYNC B0 ;
.L_x_2:
	//## File "/tmp/hopper/k.cu", line 34
        /*03d0*/                   S2UR UR6, SR_CgaCtaId ;
        /*03e0*/                   UMOV UR4, 0x400 ;
        /*03f0*/                   SHF.L.U32 R2, RZ, 0x1f, RZ ;
        /*0400*/                   UIADD3 UR5, UR4, 0x4000, URZ ;
	//## File "/tmp/hopper/k.cu", line 35
        /*0410*/                   ISETP.GT.U32.AND P0, PT, R0, 0xff, PT ;
	//## File "/tmp/hopper/k.cu", line 34
        /*0420*/                   ULEA UR5, UR6, UR5, 0x18 ;
        /*0430*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [UR5], R2 ;
        /*0440*/              @!P2 BRA `(.L_x_5) ;
.L_x_10:
        /*0450*/                   ULDC.64 UR8, c[0x0][0x208] ;
        /*0460*/                   BSSY B0, `(.L_x_6) ;
	//## File "/tmp/hopper/k.cu", line 35
        /*0470*/               @P0 BRA `(.L_x_7) ;
        /*0480*/                   BRA `(.L_x_7) ;
.L_x_7:
	//## File "/tmp/hopper/k.cu", line 38
        /*0490*/                   BSYNC B0 ;
.L_x_6:
	//## File "/tmp/hopper/k.cu", line 43
        /*04a0*/                   WARPGROUP.ARRIVE ;
	//## File "/tmp/hopper/k.cu", line 59
        /*04b0*/                   ULDC.64 UR12, c[0x0][0x2d8] ;
        /*04c0*/                   ULDC.64 UR14, c[0x0][0x2e0] ;
	//## File "/tmp/hopper/k.cu", line 77
        /*04d0*/                   LDC.64 R4, c[0x0][0x2c8] ;
        /*04e0*/                   SHF.L.U32 R2, R0.reuse, 0x2, RZ ;
        /*04f0*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR12], RZ, !UPT, gsb0 ;
	//## File "/tmp/hopper/k.cu", line 70
        /*0500*/                   SHF.L.U32 R12, R0, 0x4, RZ ;
	//## File "/tmp/hopper/k.cu", line 77
        /*0510*/                   LOP3.LUT R15, R2, 0xfc, RZ, 0xc0, !PT ;
        /*0520*/                   LOP3.LUT R6, R12, 0x3f0, RZ, 0xc0, !PT ;
        /*0530*/                   IMAD.WIDE.U32 R14, R15, 0x4, R4 ;
	//## File "/tmp/hopper/k.cu", line 81
        /*0540*/                   IMAD.WIDE.U32 R4, R0, 0x10, R4 ;
	//## File "/tmp/hopper/k.cu", line 61
        /*0550*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0560*/                   QGMMA.64x8x32.F32.E4M3.E4M3 R88, gdesc[UR12], RZ, !UPT, gsb0 ;
	//## File "/tmp/hopper/k.cu", line 70
        /*0570*/                   ULEA UR12, UR6, UR4, 0x18 ;
	//## File "/tmp/hopper/k.cu", line 77
        /*0da0*/              @!PT LDS RZ, [RZ] ;
        /*0db0*/                   MEMBAR.ALL.CTA ;
        /*0dc0*/                   FENCE.VIEW.ASYNC.S ;
	//## File "/tmp/hopper/k.cu", line 91
        /*0dd0*/                   ULDC.64 UR4, c[0x0][0x198] ;
        /*0de0*/                   UMOV UR13, URZ ;
        /*0df0*/                   UIADD3 UR4, UP0, UR4, 0x30, URZ ;
        /*0e00*/                   UMOV UR14, URZ ;
        /*0e10*/                   UIADD3.X UR5, URZ, UR5, URZ, UP0, !UPT ;
        /*0e20*/                   UTMASTG.2D [UR12], [UR4] ;
	//## File "/tmp/hopper/k.cu", line 92
        /*0e30*/                   UTMACMDFLUSH ;
	//## File "/tmp/hopper/k.cu", line 93
        /*0e40*/                   DEPBAR.LE SB0, 0x0 ;
.L_x_9:
        /*0e50*/                   BSYNC B0 ;
.L_x_8:
	//## File "/tmp/hopper/k.cu", line 95
        /*0e60*/                   S2UR UR4, SR_CTAID.X ;
        /*0e70*/                   IMAD R3, R11, UR4, R0 ;
        /*0e80*/                   IMAD.WIDE.U32 R2, R3, 0x4, R6 ;
        /*0e90*/                   STG.E desc[UR8][R2.64], R9 ;
	//## File "/tmp/hopper/k.cu", line 96
        /*0ea0*/                   PREEXIT ;
	//## File "/tmp/hopper/k.cu", line 97
        /*0eb0*/                   EXIT ;
.L_x_5:
	//## File "/tmp/hopper/k.cu", line 34
        /*0ec0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [UR5], R2 ;
        /*0ed0*/              @!P2 BRA `(.L_x_5) ;
        /*0ee0*/                   BRA `(.L_x_10) ;
.L_x_11:
        /*0ef0*/                   BRA `(.L_x_11);
        /*0f00*/                   NOP;
        /*0f10*/                   NOP;
        /*0f20*/                   NOP;
        /*0f30*/                   NOP;
        /*0f40*/                   NOP;
        /*0f50*/                   NOP;
        /*0f60*/                   NOP;
        /*0f70*/                   NOP;
.L_x_12:


//--------------------- SYMBOLS --------------------------

	.type		.nv.reservedSmem.offset0,@object
	.size		.nv.reservedSmem.offset0,0x4
"##;
