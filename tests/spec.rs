//! rung.toml parsing: the shipped templates parse, and every kind of mistake is reported at the
//! exact line and column, with the key path and what was expected.

use std::path::Path;

use rung::spec::{Spec, SpecError};

const GOOD: &str = r#"
[problem]
name = "rmsnorm"

[[inputs]]
name = "x"
dtype = "bf16"
shape = ["rows", "cols"]

[[inputs]]
name = "w"
dtype = "f32"
shape = ["cols"]
init = { dist = "uniform", low = 0.5, high = 1.5 }

[[outputs]]
name = "y"
dtype = "bf16"
shape = ["rows", "cols"]
min_psnr = 35

[[scalars]]
name = "eps"
dtype = "f32"
value = 1e-6

[sizes]
test = [{ rows = 1, cols = 7 }, { rows = 33, cols = 4096 }]
bench = [{ rows = 8192, cols = 8192 }]

[roofline]
bytes = "bytes(x) + bytes(w) + bytes(y)"
flops = "4 * rows * cols"

[launch]
grid = "(rows, 1)"
block = 256
"#;

fn parse(text: &str) -> Result<Spec, SpecError> {
    Spec::parse(text, Path::new("rung.toml"))
}

/// Replaces the first occurrence of `from` in GOOD (which must exist) to make a bad file.
fn bad(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "fixture text {from:?} not in GOOD");
    GOOD.replacen(from, to, 1)
}

/// The first diagnostic as `line:col key: message`.
fn first_error(text: &str) -> (String, String, String) {
    let err = parse(text).expect_err("expected an error");
    let d = err.diagnostics().into_iter().next().expect("at least one diagnostic");
    assert_eq!(d.file, Path::new("rung.toml"));
    (format!("{}:{}", d.line, d.column), d.key.unwrap_or_default(), d.message)
}

#[test]
fn good_file_parses_with_resolved_defaults() {
    let spec = parse(GOOD).unwrap();
    assert_eq!(spec.name, "rmsnorm");
    assert_eq!(spec.size_vars(), vec!["cols", "rows"]);
    let y = &spec.outputs[0];
    // bf16 defaults, with the file's own min_psnr on top.
    assert_eq!(y.tolerance.min_psnr, Some(35.0));
    assert_eq!(y.tolerance.rtol, 2e-2);
    let grid = spec.launch.grid.as_ref().unwrap();
    assert_eq!(grid.len(), 2);
    let sizes = &spec.bench_sizes[0];
    let scope = spec.scope(sizes, Some(132));
    use rung::expr::Scope;
    assert_eq!(scope.bytes("x"), Some(8192 * 8192 * 2));
    assert_eq!(spec.roofline.bytes.as_ref().unwrap().eval_f64(&scope).unwrap(), (8192.0 * 8192.0) * 4.0 + 8192.0 * 4.0);
}

/// Every template as `rung new` writes it (an overlay template on its base) has a rung.toml that
/// parses.
#[test]
fn shipped_templates_parse() {
    for (name, ..) in rung::templates::templates() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(name);
        rung::templates::write(name, &dir).unwrap();
        Spec::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn unknown_dtype() {
    let (pos, key, msg) = first_error(&bad("dtype = \"f32\"", "dtype = \"f33\""));
    assert_eq!((pos.as_str(), key.as_str()), ("12:9", "inputs[1].dtype"));
    assert!(msg.starts_with("unknown variant `f33`, expected one of"), "{msg}");
}

#[test]
fn misspelled_key() {
    let (pos, key, msg) = first_error(&bad("shape = [\"cols\"]", "shap = [\"cols\"]"));
    assert_eq!((pos.as_str(), key.as_str()), ("13:1", "inputs[1].shap"));
    assert!(msg.starts_with("unknown field `shap`"), "{msg}");
}

#[test]
fn missing_required_key() {
    let (pos, key, msg) = first_error(&bad("name = \"y\"\n", ""));
    assert_eq!((pos.as_str(), key.as_str()), ("16:1", "outputs[0]"));
    assert_eq!(msg, "missing field `name`");
}

#[test]
fn wrong_value_type() {
    let (pos, key, msg) = first_error(&bad("block = 256", "block = 2.5"));
    assert_eq!((pos.as_str(), key.as_str()), ("37:9", "launch.block"));
    assert!(msg.contains("expected a whole number or an expression string"), "{msg}");
}

#[test]
fn toml_syntax_error() {
    let (pos, key, msg) = first_error(&bad("[[outputs]]", "[[outputs]"));
    assert_eq!((pos.as_str(), key.as_str()), ("16:11", ""));
    assert!(msg.starts_with("invalid TOML"), "{msg}");
}

#[test]
fn unknown_size_variable_in_shape_points_at_the_character() {
    let (pos, key, msg) = first_error(&bad("shape = [\"cols\"]", "shape = [\"colz\"]"));
    assert_eq!((pos.as_str(), key.as_str()), ("13:11", "inputs[1].shape[0]"));
    assert_eq!(msg, "unknown name `colz` in a shape");
}

#[test]
fn expression_syntax_error_points_inside_the_string() {
    let (pos, key, msg) = first_error(&bad("flops = \"4 * rows * cols\"", "flops = \"4 * rows * * cols\""));
    assert_eq!((pos.as_str(), key.as_str()), ("33:21", "roofline.flops"));
    assert!(msg.contains("unexpected `*`"), "{msg}");
}

#[test]
fn size_set_missing_a_variable() {
    let (pos, key, msg) = first_error(&bad("{ rows = 33, cols = 4096 }", "{ rows = 33 }"));
    assert_eq!((pos.as_str(), key.as_str()), ("28:33", "sizes.test[1]"));
    assert!(msg.contains("does not define `cols`"), "{msg}");
}

#[test]
fn duplicate_tensor_name() {
    let (pos, key, msg) = first_error(&bad("name = \"w\"", "name = \"x\""));
    assert_eq!((pos.as_str(), key.as_str()), ("11:8", "inputs[1].name"));
    assert_eq!(msg, "`x` is already declared at inputs[0]");
}

#[test]
fn roofline_names_unknown_tensor() {
    let (pos, key, msg) = first_error(&bad("bytes(w)", "bytes(z)"));
    assert_eq!((pos.as_str(), key.as_str()), ("32:27", "roofline.bytes"));
    assert_eq!(msg, "`z` is not an input or output");
}

#[test]
fn empty_distribution() {
    let (pos, key, msg) = first_error(&bad("low = 0.5, high = 1.5", "low = 1.5, high = 0.5"));
    assert_eq!((pos.as_str(), key.as_str()), ("14:8", "inputs[1].init"));
    assert!(msg.contains("low must be below high"), "{msg}");
}

#[test]
fn non_positive_size() {
    let (pos, key, msg) = first_error(&bad("{ rows = 1, cols = 7 }", "{ rows = 0, cols = 7 }"));
    assert_eq!((pos.as_str(), key.as_str()), ("28:18", "sizes.test[0].rows"));
    assert!(msg.contains("sizes must be at least 1"), "{msg}");
}

#[test]
fn too_many_grid_dimensions() {
    let (pos, key, msg) = first_error(&bad("grid = \"(rows, 1)\"", "grid = \"(rows, 1, 1, 1)\""));
    assert_eq!((pos.as_str(), key.as_str()), ("36:22", "launch.grid"));
    assert!(msg.contains("at most 3"), "{msg}");
}

#[test]
fn bad_tolerance_and_bad_arch() {
    let (pos, key, _) = first_error(&bad("min_psnr = 35", "min_psnr = 35\nmin_cosine = 1.5"));
    assert_eq!((pos.as_str(), key.as_str()), ("21:14", "outputs[0].min_cosine"));
    let (pos, key, msg) = first_error(&format!("{GOOD}\n[build]\narch = \"hopper\"\n"));
    assert_eq!((pos.as_str(), key.as_str()), ("40:8", "build.arch"));
    assert!(msg.contains("not a GPU architecture"));
}

#[test]
fn ssh_runner_without_host() {
    let (pos, key, msg) = first_error(&format!("{GOOD}\n[runner]\nkind = \"ssh\"\n"));
    assert_eq!((pos.as_str(), key.as_str()), ("40:8", "runner.kind"));
    assert!(msg.contains("needs a host"));
}

#[test]
fn bad_duration() {
    let (pos, key, msg) = first_error(&format!("{GOOD}\n[limits]\nrun = \"soon\"\n"));
    assert_eq!((pos.as_str(), key.as_str()), ("40:7", "limits.run"));
    assert!(msg.contains("duration"), "{msg}");
}

#[test]
fn every_error_is_reported_not_just_the_first() {
    let text = bad("shape = [\"cols\"]", "shape = [\"colz\"]").replace("flops = \"4 * rows * cols\"", "flops = \"q\"");
    let err = parse(&text).unwrap_err();
    assert_eq!(err.diagnostics().len(), 2, "{err}");
    // The rendered message names the file, line and column of each.
    let rendered = err.to_string();
    assert!(rendered.contains("rung.toml:13:11: error: inputs[1].shape[0]: unknown name `colz`"), "{rendered}");
    assert!(rendered.contains("rung.toml:33:10: error: roofline.flops: unknown name `q`"), "{rendered}");
    assert!(rendered.contains("help:"), "{rendered}");
}

#[test]
fn the_compute_nodes_binary_is_a_slurm_key() {
    let s = parse(&format!("{GOOD}\n[runner]\nkind = \"slurm\"\nrung = \"/shared/bin/rung\"\n")).unwrap();
    assert_eq!(s.runner.rung.as_deref(), Some("/shared/bin/rung"));
    let (pos, key, msg) = first_error(&format!("{GOOD}\n[runner]\nkind = \"ssh\"\nhost = \"box\"\nrung = \"/x\"\n"));
    assert_eq!((pos.as_str(), key.as_str()), ("42:8", "runner.rung"), "{msg}");
    assert!(msg.contains("this runner is not Slurm"), "{msg}");
}

#[test]
fn runner_is_an_ssh_url_or_a_table() {
    let url = format!("runner = \"ssh://me@gpu-box:2200/srv/rmsnorm\"\n{GOOD}");
    let s = parse(&url).unwrap();
    assert_eq!(s.runner.kind, rung::spec::RunnerKind::Ssh);
    assert_eq!((s.runner.host.as_deref(), s.runner.port), (Some("me@gpu-box"), Some(2200)));
    assert_eq!(s.runner.workdir.as_deref(), Some("/srv/rmsnorm"));
    let table = format!("{GOOD}\n[runner]\nkind = \"ssh\"\nhost = \"box\"\nport = 22\nworkdir = \"~/ws\"\n");
    let s = parse(&table).unwrap();
    assert_eq!(
        (s.runner.host.as_deref(), s.runner.port, s.runner.workdir.as_deref()),
        (Some("box"), Some(22), Some("~/ws"))
    );
    // A bad URL is an error at its line, naming the key and the form it takes.
    let (at, key, message) = first_error(&format!("runner = \"ssh://gpu-box\"\n{GOOD}"));
    assert_eq!((at.as_str(), key.as_str()), ("1:10", "runner"), "{message}");
    assert!(message.contains("has no path") && message.contains("ssh://user@host[:port]/path"), "{message}");
    let (_, _, message) = first_error(&format!("runner = 3\n{GOOD}"));
    assert!(message.contains("runner must be a URL"), "{message}");
}

/// A limit past any sense (1e30 s once panicked converting to a duration) is an error at its
/// line, as is a unit string that overflows.
#[test]
fn an_absurd_limit_is_an_error_at_its_line() {
    for value in ["1e30", "\"1000000000 years\"", "-5"] {
        let text = format!("{GOOD}\n[limits]\nrun = {value}\n");
        let line = text.lines().count();
        let (pos, key, msg) = first_error(&text);
        assert_eq!(
            (pos.split(':').next().unwrap(), key.as_str()),
            (line.to_string().as_str(), "limits.run"),
            "{value}"
        );
        assert!(msg.contains("up to a week"), "{value}: {msg}");
    }
}

/// A launch header that would nest or chain without end is an error at the expression, not a
/// stack overflow that aborts the process (a 6 KB one once took down the TUI).
#[test]
fn a_huge_launch_expression_is_an_error() {
    let (_pos, key, msg) = first_error(&bad("grid = \"(rows, 1)\"", &format!("grid = \"{}rows\"", "(".repeat(6000))));
    assert_eq!(key, "launch.grid");
    assert!(msg.contains("expression too long"), "{msg}");
}

/// Sizes past this machine's memory, or past 64 bits, are named before anything is drawn: a
/// check draws every tensor twice on the CPU, and an allocation that fails aborts.
#[test]
fn sizes_that_cannot_be_held_are_named() {
    let spec = parse(GOOD).unwrap();
    let mut sizes = spec.test_sizes[0].clone();
    assert_eq!(spec.too_big(&sizes, 64 << 30), None, "the test sizes fit in 64 GiB");
    for v in sizes.values_mut() {
        *v = 1 << 20;
    }
    let why = spec.too_big(&sizes, 64 << 30).expect("2^40 elements do not fit");
    assert!(why.contains("GB, twice that for a check's two passes") && why.contains("rows = 1048576"), "{why}");
    for v in sizes.values_mut() {
        *v = i64::MAX / 4;
    }
    let why = spec.too_big(&sizes, u64::MAX).expect("past 64 bits");
    assert!(why.contains("past 64 bits"), "{why}");
}
