//! The prepare rung: everything that can be known about a version before compiling it. For CUDA
//! versions, the launch header merged over rung.toml and evaluated at every size, and the kernel
//! signature bound to the problem by name; for Python versions, the entry point and its
//! parameters. A mismatch here is a diagnostic at the user's line, never a crash at launch.

use std::path::Path;

use crate::diag::{Diagnostic, Pos};
use crate::launch::{self, Binding};
use crate::model::report::{PrepareDetail, SizedLaunch, StageDetail, Verdict};
use crate::spec::{BUILTIN_VARS, Spec, TensorRole};
use crate::workspace::{Format, VersionFile, VersionKind};

use super::StageOutcome;

/// Multiprocessors assumed for launch expressions until the GPU is known (H100 SXM and H200).
pub const DEFAULT_NUM_SMS: i64 = 132;

/// The prepare rung's outcome: its reason is `signature-mismatch` when a parameter binds to
/// nothing or to the wrong kind of value.
pub fn prepare(format: Format, spec: Option<&Spec>, v: &VersionFile, source: &str) -> StageOutcome {
    let file = v.path.as_path();
    let mut diags = Vec::new();
    let mut detail = PrepareDetail { entry: None, bindings: Vec::new(), launches: Vec::new() };
    match (format, spec, v.kind) {
        (Format::Rung, Some(spec), VersionKind::Cuda | VersionKind::CudaHost) => {
            prepare_cuda(spec, file, source, &mut detail, &mut diags)
        }
        (Format::Rung, Some(spec), k) if k.is_python() => {
            prepare_python_entry(spec, file, source, &mut detail, &mut diags)
        }
        (Format::Rung, spec, VersionKind::Ptx) => {
            let entries = launch::ptx_entries(source);
            if entries.is_empty() {
                diags.push(
                    Diagnostic::error(file, Pos::new(1, 1), "no `.entry` in this PTX file")
                        .with_help("a PTX version defines at least one `.visible .entry name(...)` kernel"),
                );
            }
            let launch_source = launch::ptx_launch_source(source);
            let (sigs, _) = launch::find_signatures(&launch_source);
            match spec {
                _ if entries.is_empty() => {}
                Some(spec) if !sigs.is_empty() => {
                    prepare_cuda(spec, file, &launch_source, &mut detail, &mut diags);
                    if let Some(sig) = sigs.iter().find(|s| detail.entry.as_deref() == Some(s.name.as_str())) {
                        diags.extend(launch::check_ptx_signature(source, sig, file));
                    }
                }
                _ => {
                    // Builds and shows its assembly; it runs once its parameters have names.
                    diags.push(
                        Diagnostic::warning(
                            file,
                            Pos::new(1, 1),
                            "this PTX declares no C signature, so rung cannot bind its parameters and will not run it",
                        )
                        .with_help(format!(
                            "name the parameters in a comment, in order: // extern \"C\" __global__ void {}(const float* x, float* y, int n)",
                            entries[0]
                        )),
                    );
                    detail.entry = entries.into_iter().next();
                }
            }
        }
        (Format::GpuMode, _, _) => {
            require_def(file, source, "custom_kernel", "def custom_kernel(data):", &mut detail, &mut diags)
        }
        (Format::KernelBench, _, _) => require_def(
            file,
            source,
            "ModelNew",
            "class ModelNew(nn.Module): ... with the same interface as `Model`",
            &mut detail,
            &mut diags,
        ),
        _ => {}
    }
    let errors = diags.iter().filter(|d| d.is_error()).count();
    let warnings = diags.len() - errors;
    let verdict = if errors > 0 { Verdict::Fail } else { Verdict::Pass };
    let summary = match (errors, &detail.entry) {
        (0, Some(entry)) => format!(
            "{} `{entry}`: {} parameters bound{}",
            v.kind,
            detail.bindings.len(),
            if warnings > 0 { format!(", {warnings} warning(s)") } else { String::new() }
        ),
        (0, None) => format!("{} version", v.kind),
        (n, _) => {
            format!("{n} error(s) before compiling: {}", diags.iter().find(|d| d.is_error()).map_or("", |d| &d.message))
        }
    };
    let binding = diags.iter().any(|d| d.is_error() && d.message.starts_with("parameter `"));
    let reason = binding.then_some(crate::model::report::Reason::SignatureMismatch);
    StageOutcome { verdict, summary, diagnostics: diags, detail: StageDetail::Prepare(detail), reason }
}

fn prepare_cuda(spec: &Spec, file: &Path, source: &str, detail: &mut PrepareDetail, diags: &mut Vec<Diagnostic>) {
    let (sigs, mangled) = launch::find_signatures(source);
    let header = match launch::parse_header(source, file, spec) {
        Ok(h) => h,
        Err(d) => {
            diags.extend(d);
            return;
        }
    };
    let wanted = header.kernel.clone().or_else(|| spec.launch.kernel.clone());
    let sig = match launch::choose(&sigs, wanted.as_deref(), file) {
        Ok(s) => s,
        Err(mut d) => {
            if let Some((name, pos)) = mangled.first().filter(|_| sigs.is_empty()) {
                d = Diagnostic::error(
                    file,
                    *pos,
                    format!("kernel `{name}` is not extern \"C\", so rung cannot find it by name"),
                )
                .with_help(format!("declare it `extern \"C\" __global__ void {name}(...)`"));
            }
            diags.push(d);
            return;
        }
    };
    detail.entry = Some(sig.name.clone());
    let (bindings, bind_diags) = launch::bind(sig, spec, file);
    detail.bindings = bindings;
    diags.extend(bind_diags);
    if sig.host_entry {
        return; // rung_run launches its own kernels.
    }
    let launch = match launch::merge(&header, spec, file) {
        Ok(l) => l,
        Err(d) => {
            diags.push(d);
            return;
        }
    };
    for sizes in spec.test_sizes.iter().chain(&spec.bench_sizes) {
        match launch.eval(spec, sizes, DEFAULT_NUM_SMS) {
            Ok(dims) => detail.launches.push(SizedLaunch { sizes: sizes.clone(), launch: dims }),
            Err(msg) => {
                let at = header_line(source).unwrap_or(Pos::new(1, 1));
                diags.push(
                    Diagnostic::error(file, at, format!("at {}: {msg}", crate::spec::size_label(sizes)))
                        .with_help("fix the `// rung:` header (or [launch] in rung.toml) so every size launches"),
                );
                return;
            }
        }
    }
}

fn header_line(source: &str) -> Option<Pos> {
    source
        .lines()
        .position(|l| l.trim_start().strip_prefix("//").is_some_and(|r| r.trim_start().starts_with("rung:")))
        .map(|i| Pos::new(i as u32 + 1, 1))
}

/// Python versions of rung.toml problems define `run(...)`, whose parameters bind by name like a
/// kernel's: tensors (outputs preallocated, written in place), scalars and size variables.
fn prepare_python_entry(
    spec: &Spec,
    file: &Path,
    source: &str,
    detail: &mut PrepareDetail,
    diags: &mut Vec<Diagnostic>,
) {
    let Some((params, pos)) = python_def_params(source, "run") else {
        diags.push(Diagnostic::error(file, Pos::new(1, 1), "no `def run(...)`").with_help(
            "a Python version defines `def run(x, w, y, ...)` taking rung.toml's tensors, scalars and sizes by name and writing the outputs in place",
        ));
        return;
    };
    detail.entry = Some("run".into());
    let size_vars = spec.size_vars();
    for (name, at) in &params {
        let b = if let Some((t, role)) = spec.tensor(name) {
            match role {
                TensorRole::Input => Binding::Input { param: name.clone(), tensor: t.name.clone(), dtype: t.dtype },
                TensorRole::Output => Binding::Output { param: name.clone(), tensor: t.name.clone(), dtype: t.dtype },
            }
        } else if let Some(s) = spec.scalars.iter().find(|s| &s.name == name) {
            Binding::Scalar { param: name.clone(), scalar: s.name.clone(), dtype: s.dtype }
        } else if size_vars.contains(&name.as_str()) || BUILTIN_VARS.contains(&name.as_str()) {
            Binding::Size { param: name.clone(), var: name.clone() }
        } else {
            diags.push(
                Diagnostic::error(file, *at, format!("parameter `{name}` matches nothing in rung.toml")).with_help(
                    "parameters are bound by name to rung.toml's inputs, outputs, scalars and size variables",
                ),
            );
            continue;
        };
        detail.bindings.push(b);
    }
    for t in &spec.outputs {
        if !params.iter().any(|(n, _)| n == &t.name) {
            diags.push(
                Diagnostic::error(
                    file,
                    pos,
                    format!("output `{}` is not a parameter of run(), so nothing can write it", t.name),
                )
                .with_help(format!("add `{}` to run()'s parameters and write it in place", t.name)),
            );
        }
    }
}

fn require_def(
    file: &Path,
    source: &str,
    name: &str,
    example: &str,
    detail: &mut PrepareDetail,
    diags: &mut Vec<Diagnostic>,
) {
    match python_binding(source, name) {
        PyBinding::Found(_) => detail.entry = Some(name.to_string()),
        PyBinding::Unknown(pos) => {
            // `from m import *` may bind it: the import at run time decides.
            detail.entry = Some(name.to_string());
            diags.push(
                Diagnostic::warning(
                    file,
                    pos,
                    format!("`{name}` may come from this star import; rung cannot tell before running it"),
                )
                .with_help(format!("import it by name (`from module import {name}`) so a missing entry is caught here")),
            );
        }
        PyBinding::Missing => diags.push(
            Diagnostic::error(file, Pos::new(1, 1), format!("no top-level `{name}`: not defined, assigned or imported"))
                .with_help(format!(
                    "define `{example}`, or bind the name at the top level (`{name} = torch.compile(_{name})`, `from kernels import {name}`)"
                )),
        ),
    }
}

/// Where a module binds a name at its top level, as Python would resolve it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PyBinding {
    /// A `def` or `async def`, a `class`, an assignment (`name = ...`, `name: T = ...`, `a, name =
    /// ...`), an import (`from m import name`, `... as name`, `import m as name`), at this line.
    Found(Pos),
    /// Not bound by name, but a `from m import *` at this line may bind it.
    Unknown(Pos),
    Missing,
}

/// The top-level binding of `name` in a Python module. Imports one block deep (under a
/// top-level `try:` or `if`) count, since the module may take that branch; the insides of
/// triple-quoted strings (docstrings, embedded CUDA sources) do not.
pub fn python_binding(source: &str, name: &str) -> PyBinding {
    let n = regex::escape(name);
    let binds = [
        format!(r"^(?:async\s+)?def\s+{n}\s*\("),
        format!(r"^class\s+{n}\b"),
        format!(r"^{n}\s*(?::[^=]*)?=[^=]"),
        format!(r"^(?:[A-Za-z_]\w*\s*,\s*)+{n}\s*(?:,[^=]*)?=[^=]"),
        format!(r"^from\s+[\w.]+\s+import\s+\(?(?:[^#]*[,\s])?(?:\w+\s+as\s+)?{n}\s*(?:,|\)|#|$)"),
        format!(r"^import\s+[\w.]+\s+as\s+{n}\s*(?:#|$)"),
    ]
    .map(|p| regex::Regex::new(&p).expect("valid regex"));
    let star = regex::Regex::new(r"^from\s+[\w.]+\s+import\s+\*").expect("static regex");
    let (mut found, mut unknown) = (None, None);
    let mut in_string: Option<&str> = None;
    for (i, raw) in source.lines().enumerate() {
        let mut line = raw;
        if let Some(q) = in_string {
            match line.find(q) {
                Some(at) => {
                    in_string = None;
                    line = &line[at + 3..];
                }
                None => continue,
            }
        }
        let body = line.trim_start();
        let indent = raw.len() - body.len();
        for q in ["\"\"\"", "'''"] {
            if body.matches(q).count() % 2 == 1 {
                in_string = Some(q);
            }
        }
        if indent > 0 && !(indent <= 8 && (body.starts_with("from ") || body.starts_with("import "))) {
            continue;
        }
        let pos = Pos::new(i as u32 + 1, indent as u32 + 1);
        if binds.iter().any(|re| re.is_match(body)) {
            found = Some(pos);
        } else if star.is_match(body) {
            unknown = Some(pos);
        }
    }
    match (found, unknown) {
        (Some(p), _) => PyBinding::Found(p),
        (None, Some(p)) => PyBinding::Unknown(p),
        _ => PyBinding::Missing,
    }
}

/// The parameter names of a top-level `def name(...)`, with their positions, `*args`/`**kw` and
/// `self` excluded; also the position of the name.
pub fn python_def_params(source: &str, name: &str) -> Option<(Vec<(String, Pos)>, Pos)> {
    let re = regex::Regex::new(&format!(r"(?m)^def\s+{name}\s*\(")).expect("valid regex");
    let m = re.find(source)?;
    let open = m.end() - 1;
    let mut depth = 0;
    let mut close = None;
    for (i, c) in source[open..].char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(open + i);
                    break;
                }
            }
            _ => {}
        }
    }
    let close = close?;
    let ident = regex::Regex::new(r"[A-Za-z_][A-Za-z0-9_]*").expect("static regex");
    let mut params = Vec::new();
    let (mut depth, mut start) = (0, open + 1);
    let mut segments = Vec::new();
    for (i, c) in source[open + 1..close].char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                segments.push((start, open + 1 + i));
                start = open + 2 + i;
            }
            _ => {}
        }
    }
    segments.push((start, close));
    for (s, e) in segments {
        let seg = &source[s..e];
        let trimmed = seg.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('*') || trimmed.starts_with('/') {
            continue;
        }
        if let Some(m) = ident.find(trimmed) {
            let at = s + (seg.len() - trimmed.len()) + m.start();
            if m.as_str() != "self" {
                params.push((m.as_str().to_string(), Pos::of_offset(source, at)));
            }
        }
    }
    Some((params, Pos::of_offset(source, m.start() + 4)))
}

/// Whether a Python version parses, by the Python that will run it (`ast.parse`, about 20 ms):
/// a file that does not is a failed prepare at the line and column Python gives, not a ✓ that
/// the build contradicts. `None` when it parses, or when the check itself could not run.
pub fn python_syntax(python: &Path, file: &Path, source: &str) -> Option<Diagnostic> {
    use std::io::Write;
    const CHECK: &str = "import ast, json, sys\n\
try:\n    ast.parse(sys.stdin.read(), sys.argv[1])\n\
except SyntaxError as e:\n    print(json.dumps([e.lineno or 0, e.offset or 0, e.msg]))\n";
    let mut child = std::process::Command::new(python)
        .args(["-I", "-c", CHECK])
        .arg(file)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let _ = stdin.write_all(source.as_bytes());
    drop(stdin);
    let out = child.wait_with_output().ok()?;
    let (line, column, msg): (u32, u32, String) = serde_json::from_slice(&out.stdout).ok()?;
    Some(
        Diagnostic::error(file, Pos::new(line, column), format!("SyntaxError: {msg}"))
            .with_help("Python cannot parse the file; fix the line and save"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_points_resolve_as_python_binds_them() {
        let found = |src: &str| matches!(python_binding(src, "custom_kernel"), PyBinding::Found(_));
        assert!(found("def custom_kernel(data):\n    return data\n"));
        assert!(found("async def custom_kernel(data): ..."));
        assert!(found("def _k(d): ...\ncustom_kernel = torch.compile(_k, mode=\"reduce-overhead\")\n"));
        assert!(found("custom_kernel: Callable = make()\n"));
        assert!(found("_a, custom_kernel = build()\n"));
        assert!(found("from kernels import custom_kernel\n"));
        assert!(found("from kernels import (helper, custom_kernel)\n"));
        assert!(found("from kernels import fast as custom_kernel  # the fast one\n"));
        assert!(found("import kernels.fast as custom_kernel\n"));
        assert!(found("class custom_kernel:\n    def __call__(self, d): ...\n"));
        assert!(found("try:\n    from fast import custom_kernel\nexcept ImportError:\n    pass\n"));
        // Not bindings: a comparison, a longer name, a name inside a function or a string.
        assert!(!found("custom_kernel == 3\n"));
        assert!(!found("def custom_kernel2(data): ...\ncustom_kernels = 1\n"));
        assert!(!found("def f():\n    custom_kernel = 1\n"));
        assert!(!found("SRC = \"\"\"\ncustom_kernel = 1\n\"\"\"\n"));
        assert!(!found("from kernels import custom_kernel_v2\n"));
        assert!(
            matches!(python_binding("from kernels import *\n", "custom_kernel"), PyBinding::Unknown(p) if p.line == 1)
        );
        assert_eq!(python_binding("import torch\n", "custom_kernel"), PyBinding::Missing);
        // The upstream sort solution's shape: a private def, then a compiled alias.
        let upstream = "import torch\n\n\ndef _custom_kernel(data):\n    data, output = data\n    output[...] = torch.sort(data)[0]\n    return output\n\n\ncustom_kernel = torch.compile(_custom_kernel, mode=\"reduce-overhead\")\n";
        assert_eq!(python_binding(upstream, "custom_kernel"), PyBinding::Found(Pos::new(10, 1)));
    }

    #[test]
    fn python_params_with_defaults_annotations_and_newlines() {
        let src =
            "import triton\n\ndef run(x, w: \"Tensor\",\n        y, eps=1e-6, *args, rows=(1, 2), **kw):\n    pass\n";
        let (params, pos) = python_def_params(src, "run").unwrap();
        let names: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, vec!["x", "w", "y", "eps", "rows"]);
        assert_eq!(params[2].1, Pos::new(4, 9));
        assert_eq!(pos, Pos::new(3, 5));
        assert!(python_def_params("def running(x): pass", "run").is_none());
    }

    #[test]
    fn ptx_entry_names() {
        let src = ".version 8.0\n.visible .entry copy_kernel(\n.param .u64 p) {}\n.entry $second() {}";
        assert_eq!(launch::ptx_entries(src), vec!["copy_kernel", "$second"]);
    }
}
