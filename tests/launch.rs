//! Launch headers and kernel-signature binding (DESIGN.md, "Launch ABI").

use std::path::Path;

use rung::diag::{Diagnostic, Severity};
use rung::launch::{self, Binding};
use rung::spec::Spec;

const SPEC: &str = r#"
[problem]
name = "rmsnorm"
[[inputs]]
name = "x"
dtype = "f32"
shape = ["rows", "cols"]
[[inputs]]
name = "w"
dtype = "f32"
shape = ["cols"]
[[outputs]]
name = "y"
dtype = "f32"
shape = ["rows", "cols"]
[[scalars]]
name = "eps"
dtype = "f32"
value = 1e-6
[sizes]
test = [{ rows = 3, cols = 1000 }]
bench = [{ rows = 16384, cols = 8192 }]
"#;

fn spec() -> Spec {
    Spec::parse(SPEC, Path::new("rung.toml")).unwrap()
}

const FILE: &str = "versions/v002-vec.cu";

/// Binds the only kernel of `src`; returns bindings and diagnostics rendered as `line:col sev msg`.
fn bind(src: &str) -> (Vec<Binding>, Vec<String>) {
    let (sigs, _) = launch::find_signatures(src);
    let sig = launch::choose(&sigs, None, Path::new(FILE)).unwrap_or_else(|d| panic!("{d}"));
    let (b, d) = launch::bind(sig, &spec(), Path::new(FILE));
    (b, d.iter().map(short).collect())
}

fn short(d: &Diagnostic) -> String {
    assert_eq!(d.file, Path::new(FILE));
    format!("{}:{} {} {}", d.line, d.column, d.severity, d.message)
}

const GOOD: &str = r#"// rung: grid="(cdiv(rows, 4), 1)" block=256 smem="4 * 32"
// A vectorised RMSNorm: "extern "C" __global__ void fake(int q)" in a comment is ignored.
#include <cuda_runtime.h>
/* extern "C" __global__ void alsofake(float* q) {} */
extern "C" __global__ void __launch_bounds__(256, 2)
rmsnorm(const float* __restrict__ x, const float4* __restrict__ w,
        float* __restrict__ y, float eps, int rows, long long cols) {
    const char* s = "{ ( unbalanced";
}
"#;

#[test]
fn good_kernel_binds_every_parameter() {
    let (b, d) = bind(GOOD);
    assert!(d.is_empty(), "{d:?}");
    assert_eq!(b.len(), 6);
    assert!(matches!(&b[1], Binding::Input { tensor, .. } if tensor == "w"), "float4* binds an f32 tensor");
    assert!(matches!(&b[2], Binding::Output { tensor, .. } if tensor == "y"));
    assert!(matches!(&b[5], Binding::Size { var, .. } if var == "cols"));
    let (sigs, _) = launch::find_signatures(GOOD);
    assert_eq!((sigs[0].name.as_str(), sigs[0].line), ("rmsnorm", 6));
    assert_eq!((sigs[0].params[2].line, sigs[0].params[2].column), (7, 29));
}

#[test]
fn header_is_parsed_merged_and_evaluated() {
    let spec = spec();
    let h = launch::parse_header(GOOD, Path::new(FILE), &spec).unwrap();
    let l = launch::merge(&h, &spec, Path::new(FILE)).unwrap();
    let dims = l.eval(&spec, &spec.bench_sizes[0], 132).unwrap();
    assert_eq!(dims.grid, [4096, 1, 1]);
    assert_eq!(dims.block, [256, 1, 1]);
    assert_eq!(dims.smem_bytes, 128);
}

#[test]
fn header_errors_point_at_the_column() {
    let spec = spec();
    let src = "#include <x>\n// rung: grid=\"cdiv(rowz, 4)\" blok=128\n";
    let d = launch::parse_header(src, Path::new(FILE), &spec).unwrap_err();
    let got: Vec<String> = d.iter().map(short).collect();
    assert_eq!(got, vec!["2:21 error unknown name `rowz` in grid", "2:31 error unknown launch key `blok`"]);
    let d = launch::parse_header("// rung: grid=rows block\n", Path::new(FILE), &spec).unwrap_err();
    assert_eq!(short(&d[0]), "1:20 error expected key=value, found `block`");
}

#[test]
fn missing_grid_says_where_to_add_it() {
    let spec = spec();
    let h = launch::parse_header("// rung: block=128\n", Path::new(FILE), &spec).unwrap();
    let d = launch::merge(&h, &spec, Path::new(FILE)).unwrap_err();
    assert!(d.help.unwrap().contains("// rung: grid="));
}

#[test]
fn launch_limits_are_checked_at_each_size() {
    let spec = spec();
    let h = launch::parse_header("// rung: grid=rows block=\"(64, 32)\"\n", Path::new(FILE), &spec).unwrap();
    let l = launch::merge(&h, &spec, Path::new(FILE)).unwrap();
    assert_eq!(
        l.eval(&spec, &spec.test_sizes[0], 132).unwrap_err().to_string(),
        "block has 2048 threads; at most 1024"
    );
    let h = launch::parse_header("// rung: grid=\"rows - 3\"\n", Path::new(FILE), &spec).unwrap();
    let l = launch::merge(&h, &spec, Path::new(FILE)).unwrap();
    assert!(l.eval(&spec, &spec.test_sizes[0], 132).unwrap_err().to_string().starts_with("grid.x = 0"));
}

#[test]
fn mismatches_are_diagnostics_at_the_parameter() {
    let src = "extern \"C\" __global__ void k(float x, const __half* w,\n  const float* y, float* eps, float rows, int bogus) {}\n";
    let (_, d) = bind(src);
    assert_eq!(
        d,
        vec![
            "1:36 error `x` is an input tensor (f32 [rows, cols]) in rung.toml, but the kernel takes it by value as `float`",
            "1:53 error `w` is f32 in rung.toml, but the kernel takes `const __half*`",
            "2:16 error `y` is an output, but the kernel declares it `const float*` and so cannot write it",
            "2:26 error `eps` is a f32 scalar in rung.toml, but the kernel takes `float*`",
            "2:37 error `rows` is a size variable, but the kernel takes `float`",
            "2:47 error parameter `bogus` matches nothing in rung.toml",
        ]
    );
}

#[test]
fn missing_output_is_an_error_and_mutable_input_a_warning() {
    let (_, d) = bind("extern \"C\" {\n__global__ void k(float* x, int rows) {}\n}\n");
    assert_eq!(
        d,
        vec![
            "2:26 warning input `x` is not const",
            "2:17 error output `y` is not a parameter of `k`, so nothing can write it",
            "2:17 warning input `w` is not a parameter of `k`",
        ]
    );
}

#[test]
fn choosing_the_kernel() {
    let two = "extern \"C\" __global__ void a(float* y) {}\nextern \"C\" __global__ void b(float* y) {}\n";
    let (sigs, _) = launch::find_signatures(two);
    let e = launch::choose(&sigs, None, Path::new(FILE)).unwrap_err();
    assert_eq!((e.line, e.severity), (2, Severity::Error));
    assert!(e.help.unwrap().contains("kernel=NAME"));
    assert_eq!(launch::choose(&sigs, Some("b"), Path::new(FILE)).unwrap().name, "b");
    assert!(launch::choose(&sigs, Some("c"), Path::new(FILE)).is_err());

    // A template or C++-linkage kernel cannot be bound by name; say so.
    let cpp = "template <int N> __global__ void t(float* y) {}\n__global__ void plain(float* y) {}\n__global__ void decl(float* y);\n";
    let (sigs, mangled) = launch::find_signatures(cpp);
    assert!(sigs.is_empty());
    assert_eq!(mangled.iter().map(|(n, p)| (n.as_str(), p.line)).collect::<Vec<_>>(), vec![("plain", 2)]);
    let e = launch::choose(&sigs, None, Path::new(FILE)).unwrap_err();
    assert!(e.help.unwrap().contains("extern \"C\""));
}

#[test]
fn host_entry_is_found() {
    let src = "__global__ void helper(float* y) {}\nextern \"C\" int rung_run(const float* x, const float* w, float* y, float eps, int rows, int cols) { return 0; }\n";
    let (sigs, _) = launch::find_signatures(src);
    let s = launch::choose(&sigs, None, Path::new(FILE)).unwrap();
    assert!(s.host_entry);
    assert_eq!(s.params.len(), 6);
}
