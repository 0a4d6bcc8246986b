//! The launch ABI of `.cu` versions (DESIGN.md, "Launch ABI").
//!
//! A version says how it is launched in a header comment,
//! `// rung: grid="cdiv(n, 4*256)" block=256 smem=0`, laid over rung.toml's `[launch]`. Its
//! kernel parameters are read from the `extern "C" __global__` signature and bound by name to the
//! problem's inputs, outputs, scalars and size variables. Every mismatch is a diagnostic at the
//! parameter's own line and column, found before anything is compiled or launched.

use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::diag::{Diagnostic, Pos};
use crate::dtype::DType;
use crate::expr::{Expr, ValueError, split_top_level};
pub use crate::model::report::{Binding, LaunchDims};
use crate::spec::{BUILTIN_VARS, LaunchDefaults, SizeSet, Spec, TensorRole};

pub const HEADER_KEYS: &[&str] = &["grid", "block", "smem", "cluster", "kernel"];

/// The merged launch configuration of one version, before evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub grid: Vec<Expr>,
    pub block: Vec<Expr>,
    pub smem: Expr,
    pub cluster: Option<Vec<Expr>>,
    pub kernel: Option<String>,
}

/// Reads every `// rung:` line of a source file. Returns the keys found (as a partial launch
/// configuration) or the diagnostics for bad keys and expressions.
pub fn parse_header(source: &str, file: &Path, spec: &Spec) -> Result<LaunchDefaults, Vec<Diagnostic>> {
    let mut out = LaunchDefaults::default();
    let mut diags = Vec::new();
    let mut allowed: Vec<String> = spec.size_vars().into_iter().map(String::from).collect();
    allowed.extend(BUILTIN_VARS.iter().map(|s| s.to_string()));

    for (lineno, line) in source.lines().enumerate() {
        let trimmed = line.trim_start();
        let Some(rest) = trimmed.strip_prefix("//").map(str::trim_start).and_then(|r| r.strip_prefix("rung:")) else {
            continue;
        };
        let base = line.len() - rest.len();
        let at = |offset: usize| Pos::of_offset(line, offset).with_line(lineno as u32 + 1);
        for item in header_items(rest) {
            let item = match item {
                Ok(i) => i,
                Err((off, msg)) => {
                    diags
                        .push(Diagnostic::error(file, at(base + off), msg).with_help(
                            "write keys as key=value, quoting expressions: grid=\"cdiv(n, 256)\" block=256",
                        ));
                    break;
                }
            };
            let vpos = base + item.value_at;
            let mut expr = |text: &str, offset: usize| -> Option<Expr> {
                match Expr::parse(text) {
                    Ok(e) => {
                        let bad: Vec<_> =
                            e.names().into_iter().filter(|(n, _)| !allowed.iter().any(|a| a == n)).collect();
                        for (name, off) in &bad {
                            diags.push(
                                Diagnostic::error(
                                    file,
                                    at(vpos + offset + off),
                                    format!("unknown name `{name}` in {}", item.key),
                                )
                                .with_help(format!("names usable here: {}", allowed.join(", "))),
                            );
                        }
                        bad.is_empty().then_some(e)
                    }
                    Err(e) => {
                        diags.push(Diagnostic::error(
                            file,
                            at(vpos + offset + e.offset),
                            format!("{} in {}", e.message, item.key),
                        ));
                        None
                    }
                }
            };
            match item.key {
                "kernel" => out.kernel = Some(item.value.to_string()),
                "smem" => out.smem = expr(item.value, 0),
                "grid" | "block" | "cluster" => {
                    let parts = split_top_level(item.value);
                    if parts.len() > 3 {
                        diags.push(Diagnostic::error(
                            file,
                            at(vpos + parts[3].1),
                            format!("{} has more than 3 dimensions", item.key),
                        ));
                        continue;
                    }
                    let dims: Option<Vec<Expr>> = parts
                        .iter()
                        .map(|(p, off)| expr(p.trim(), off + p.len() - p.trim_start().len()))
                        .collect::<Vec<_>>()
                        .into_iter()
                        .collect();
                    match item.key {
                        "grid" => out.grid = dims,
                        "block" => out.block = dims,
                        _ => out.cluster = dims,
                    }
                }
                other => diags.push(
                    Diagnostic::error(file, at(base + item.key_at), format!("unknown launch key `{other}`"))
                        .with_help(format!("the keys are {}", HEADER_KEYS.join(", "))),
                ),
            }
        }
    }
    if diags.is_empty() { Ok(out) } else { Err(diags) }
}

struct HeaderItem<'a> {
    key: &'a str,
    key_at: usize,
    value: &'a str,
    value_at: usize,
}

/// Splits `grid="cdiv(n, 256)" block=256` into items; offsets are relative to `s`.
fn header_items(s: &str) -> Vec<Result<HeaderItem<'_>, (usize, String)>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let key_at = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        let key = &s[key_at..i];
        if key.is_empty() || i >= b.len() || b[i] != b'=' {
            out.push(Err((
                key_at,
                format!("expected key=value, found `{}`", s[key_at..].split_whitespace().next().unwrap_or("")),
            )));
            return out;
        }
        i += 1;
        let (value, value_at) = if b.get(i) == Some(&b'"') {
            let start = i + 1;
            let Some(len) = s[start..].find('"') else {
                out.push(Err((i, "unterminated quote".to_string())));
                return out;
            };
            i = start + len + 1;
            (&s[start..start + len], start)
        } else {
            let start = i;
            while i < b.len() && !b[i].is_ascii_whitespace() {
                i += 1;
            }
            (&s[start..i], start)
        };
        out.push(Ok(HeaderItem { key, key_at, value, value_at }));
    }
    out
}

/// Lays a version's header over rung.toml's defaults. `block` defaults to 256 and `smem` to 0;
/// a missing grid is an error that says where to add it.
pub fn merge(header: &LaunchDefaults, spec: &Spec, file: &Path) -> Result<Launch, Diagnostic> {
    let d = &spec.launch;
    let grid = header.grid.clone().or_else(|| d.grid.clone()).ok_or_else(|| {
        Diagnostic::error(file, Pos::new(1, 1), "no grid: rung does not know how to launch this kernel").with_help(
            "add a header line such as `// rung: grid=\"cdiv(n, 256)\" block=256` or a [launch] table to rung.toml",
        )
    })?;
    Ok(Launch {
        grid,
        block: header.block.clone().or_else(|| d.block.clone()).unwrap_or_else(|| vec![lit(256)]),
        smem: header.smem.clone().or_else(|| d.smem.clone()).unwrap_or_else(|| lit(0)),
        cluster: header.cluster.clone().or_else(|| d.cluster.clone()),
        kernel: header.kernel.clone().or_else(|| d.kernel.clone()),
    })
}

fn lit(v: i64) -> Expr {
    Expr::parse(&v.to_string()).expect("an integer literal parses")
}

/// Hardware limits a launch must respect (Hopper's; older GPUs are stricter on shared memory,
/// which the driver reports at launch time).
pub const MAX_THREADS_PER_BLOCK: i64 = 1024;
pub const MAX_SMEM_PER_BLOCK: i64 = 227 * 1024;

impl Launch {
    /// Evaluates the launch at one size. Errors say which dimension broke which limit.
    pub fn eval(&self, spec: &Spec, sizes: &SizeSet, num_sms: i64) -> Result<LaunchDims, ValueError> {
        let scope = spec.scope(sizes, Some(num_sms));
        let eval = |what: &str, e: &Expr| {
            e.eval_int(&scope).map_err(|err| ValueError::Eval {
                what: what.to_string(),
                expr: e.to_string(),
                message: err.message,
            })
        };
        let dims = |what: &str, exprs: &[Expr], max: [i64; 3]| -> Result<[u32; 3], ValueError> {
            let mut v = [1u32; 3];
            for (i, e) in exprs.iter().enumerate() {
                let x = eval(what, e)?;
                if x < 1 || x > max[i] {
                    return Err(ValueError::Dimension {
                        what: what.to_string(),
                        axis: ["x", "y", "z"][i],
                        value: x,
                        expr: e.to_string(),
                        max: max[i],
                    });
                }
                v[i] = x as u32;
            }
            Ok(v)
        };
        let grid = dims("grid", &self.grid, [i32::MAX as i64, 65535, 65535])?;
        let block = dims("block", &self.block, [1024, 1024, 64])?;
        let threads: i64 = block.iter().map(|&d| d as i64).product();
        if threads > MAX_THREADS_PER_BLOCK {
            return Err(ValueError::Threads { threads, max: MAX_THREADS_PER_BLOCK });
        }
        let smem = eval("smem", &self.smem)?;
        if !(0..=MAX_SMEM_PER_BLOCK).contains(&smem) {
            return Err(ValueError::Smem { bytes: smem, max: MAX_SMEM_PER_BLOCK });
        }
        let cluster = self.cluster.as_ref().map(|c| dims("cluster", c, [8, 8, 8])).transpose()?;
        Ok(LaunchDims { grid, block, smem_bytes: smem as u32, cluster })
    }
}

// ---------------------------------------------------------------------------------------------
// Kernel signatures

/// One parameter of an `extern "C"` kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Param {
    pub name: String,
    /// The declared type as written, normalised to single spaces (e.g. `const float* __restrict__`).
    pub ty: String,
    /// The element type for pointers, the type for values, without qualifiers (`float`).
    pub base: String,
    pub pointer: bool,
    /// For pointers: the pointee is const.
    pub is_const: bool,
    pub line: u32,
    pub column: u32,
}

/// An `extern "C"` entry point: a `__global__` kernel or the `rung_run` host entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Signature {
    pub name: String,
    pub host_entry: bool,
    pub params: Vec<Param>,
    pub line: u32,
    pub column: u32,
}

/// Replaces comments and string/char literals' contents with spaces, keeping every offset.
pub fn blank_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                out[i] = b' ';
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                if b[i] != b'\n' {
                    out[i] = b' ';
                }
                i += 1;
            }
            for _ in 0..2 {
                if i < b.len() {
                    out[i] = b' ';
                    i += 1;
                }
            }
        } else if b[i] == b'"' && src[i..].starts_with("\"C\"") && src[..i].trim_end().ends_with("extern") {
            // Keep `extern "C"` readable.
            i += 3;
        } else if b[i] == b'"' {
            // Blank other strings: they may contain braces or parentheses.
            i += 1;
            while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                if b[i] == b'\\' {
                    out[i] = b' ';
                    i += 1;
                }
                if i < b.len() {
                    out[i] = b' ';
                }
                i += 1;
            }
            i += 1;
        } else {
            i += 1;
        }
    }
    // Only ASCII bytes were replaced by ASCII spaces inside ASCII-delimited regions; multi-byte
    // characters inside comments are blanked byte by byte, which stays valid UTF-8 (all spaces).
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Finds the `extern "C"` kernels (and a `rung_run` host entry) defined in a CUDA source.
/// Also returns the names of `__global__` functions that are not `extern "C"` (they cannot be
/// bound by name, and a diagnostic should say so if no other kernel exists).
pub fn find_signatures(source: &str) -> (Vec<Signature>, Vec<(String, Pos)>) {
    let text = blank_comments(source);
    let extern_blocks = extern_c_blocks(&text);
    let ident = regex::Regex::new(r"[A-Za-z_][A-Za-z0-9_]*").expect("static regex");
    let mut sigs = Vec::new();
    let mut mangled = Vec::new();

    for m in ident.find_iter(&text) {
        let word = m.as_str();
        let is_global = word == "__global__";
        let is_host_entry = word == "rung_run";
        if !is_global && !is_host_entry {
            continue;
        }
        // The declaration's start: after the previous `;`, `{` or `}`.
        let decl_start = text[..m.start()].rfind([';', '{', '}']).map_or(0, |i| i + 1);
        let prefix = &text[decl_start..m.start()];
        let is_extern_c = prefix.contains("extern \"C\"") || extern_blocks.iter().any(|r| r.contains(&m.start()));
        if prefix.contains("template") {
            continue;
        }
        // Name: for __global__, the identifier just before the first `(` that follows and is not
        // an attribute's; for rung_run, the word itself.
        let (name, name_at, open) = if is_global {
            match kernel_name(&text, m.end()) {
                Some(x) => x,
                None => continue,
            }
        } else {
            let after = text[m.end()..].trim_start();
            if !after.starts_with('(') || !is_extern_c {
                continue;
            }
            ("rung_run".to_string(), m.start(), m.end() + (text[m.end()..].len() - after.len()))
        };
        let Some(close) = matching_paren(&text, open) else { continue };
        // A declaration (`...);`) is not a definition.
        if text[close + 1..].trim_start().starts_with(';') {
            continue;
        }
        if !is_extern_c {
            mangled.push((name, Pos::of_offset(source, name_at)));
            continue;
        }
        let params = parse_params(source, &text, open + 1, close);
        let pos = Pos::of_offset(source, name_at);
        sigs.push(Signature { name, host_entry: is_host_entry, params, line: pos.line, column: pos.column });
    }
    (sigs, mangled)
}

fn kernel_name(text: &str, from: usize) -> Option<(String, usize, usize)> {
    let ident = regex::Regex::new(r"[A-Za-z_][A-Za-z0-9_]*").expect("static regex");
    let mut i = from;
    let mut last: Option<(String, usize)> = None;
    loop {
        let rest = &text[i..];
        let skip = rest.len() - rest.trim_start().len();
        i += skip;
        let c = text[i..].chars().next()?;
        if c == '(' {
            let (name, at) = last.clone()?;
            // Attribute calls like __launch_bounds__(256): skip their argument list.
            if name.starts_with("__") && name.ends_with("__") {
                i = matching_paren(text, i)? + 1;
                last = None;
                continue;
            }
            return Some((name, at, i));
        }
        let m = ident.find(&text[i..]).filter(|m| m.start() == 0)?;
        last = Some((m.as_str().to_string(), i));
        i += m.end();
    }
}

fn matching_paren(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

fn extern_c_blocks(text: &str) -> Vec<std::ops::Range<usize>> {
    let re = regex::Regex::new(r#"extern\s+"C"\s*\{"#).expect("static regex");
    let mut out = Vec::new();
    for m in re.find_iter(text) {
        let mut depth = 0;
        for (i, c) in text[m.end() - 1..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        out.push(m.end()..m.end() - 1 + i);
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

const QUALIFIERS: &[&str] =
    &["const", "volatile", "__restrict__", "__restrict", "restrict", "__grid_constant__", "struct", "signed"];

fn parse_params(source: &str, text: &str, start: usize, end: usize) -> Vec<Param> {
    let mut params = Vec::new();
    let inner = &text[start..end];
    if inner.trim().is_empty() || inner.trim() == "void" {
        return params;
    }
    let (mut depth, mut seg_start) = (0i32, 0usize);
    let mut segments = Vec::new();
    for (i, c) in inner.char_indices() {
        match c {
            '(' | '<' | '[' => depth += 1,
            ')' | '>' | ']' => depth -= 1,
            ',' if depth == 0 => {
                segments.push((seg_start, i));
                seg_start = i + 1;
            }
            _ => {}
        }
    }
    segments.push((seg_start, inner.len()));
    let ident = regex::Regex::new(r"[A-Za-z_][A-Za-z0-9_:]*|\*|&").expect("static regex");
    for (s, e) in segments {
        let seg = &inner[s..e];
        let tokens: Vec<(usize, &str)> = ident.find_iter(seg).map(|m| (m.start(), m.as_str())).collect();
        let Some(name_idx) = tokens.iter().rposition(|(_, t)| *t != "*" && *t != "&") else { continue };
        let (name_off, name) = tokens[name_idx];
        let ty_tokens: Vec<&str> = tokens[..name_idx].iter().map(|(_, t)| *t).collect();
        let pointer = ty_tokens.contains(&"*");
        let first_star = ty_tokens.iter().position(|t| *t == "*").unwrap_or(ty_tokens.len());
        let is_const = pointer && ty_tokens[..first_star].contains(&"const");
        let base: Vec<&str> =
            ty_tokens.iter().copied().filter(|t| *t != "*" && *t != "&" && !QUALIFIERS.contains(t)).collect();
        let pos = Pos::of_offset(source, start + s + name_off);
        params.push(Param {
            name: name.to_string(),
            ty: ty_tokens.join(" ").replace(" *", "*"),
            base: base.join(" ").trim_start_matches("std::").to_string(),
            pointer,
            is_const,
            line: pos.line,
            column: pos.column,
        });
    }
    params
}

// ---------------------------------------------------------------------------------------------
// Binding

const INT_TYPES: &[&str] = &[
    "int",
    "unsigned",
    "unsigned int",
    "long",
    "unsigned long",
    "long long",
    "unsigned long long",
    "int32_t",
    "uint32_t",
    "int64_t",
    "uint64_t",
    "size_t",
    "short",
    "int16_t",
];
const FLOAT_TYPES: &[&str] = &["float", "double", "__half", "half", "__nv_bfloat16", "nv_bfloat16"];

/// Vector types whose elements are `dtype` (a `const float4* x` may read an f32 tensor).
fn vector_of(base: &str) -> Option<DType> {
    Some(match base {
        "float2" | "float4" => DType::F32,
        "double2" | "double4" => DType::F64,
        "__half2" | "half2" => DType::F16,
        "__nv_bfloat162" | "nv_bfloat162" => DType::Bf16,
        "int2" | "int4" => DType::I32,
        "uchar2" | "uchar4" => DType::U8,
        _ => return None,
    })
}

fn element_matches(base: &str, dtype: DType) -> bool {
    base == "void" || dtype.c_types().contains(&base) || vector_of(base) == Some(dtype)
}

/// Binds a signature's parameters to the problem by name. Returns the bindings and every
/// diagnostic (errors make the version unlaunchable; warnings do not).
pub fn bind(sig: &Signature, spec: &Spec, file: &Path) -> (Vec<Binding>, Vec<Diagnostic>) {
    let mut bindings = Vec::new();
    let mut diags = Vec::new();
    let size_vars = spec.size_vars();
    for p in &sig.params {
        let pos = Pos::new(p.line, p.column);
        let err = |msg: String, help: String| Diagnostic::error(file, pos, msg).with_help(help);
        if let Some((t, role)) = spec.tensor(&p.name) {
            let what = if role == TensorRole::Input { "an input" } else { "an output" };
            let c_ty = t.dtype.c_types()[0];
            if !p.pointer {
                diags.push(err(
                    format!(
                        "`{}` is {what} tensor ({} {}) in rung.toml, but the kernel takes it by value as `{}`",
                        p.name,
                        t.dtype,
                        shape_str(t),
                        p.ty
                    ),
                    format!(
                        "declare it as a pointer: `{}{c_ty}* {}`",
                        if role == TensorRole::Input { "const " } else { "" },
                        p.name
                    ),
                ));
                continue;
            }
            if !element_matches(&p.base, t.dtype) {
                diags.push(err(
                    format!("`{}` is {} in rung.toml, but the kernel takes `{}`", p.name, t.dtype, p.ty),
                    format!("use `{c_ty}*` (or change the dtype in rung.toml)"),
                ));
                continue;
            }
            match role {
                TensorRole::Output if p.is_const => {
                    diags.push(err(
                        format!(
                            "`{}` is an output, but the kernel declares it `{}` and so cannot write it",
                            p.name, p.ty
                        ),
                        format!("drop `const`: `{c_ty}* {}`", p.name),
                    ));
                    continue;
                }
                TensorRole::Input if !p.is_const => diags.push(
                    Diagnostic::warning(file, pos, format!("input `{}` is not const", p.name))
                        .with_help(format!("declare it `const {c_ty}*`; rung fails a kernel that changes its inputs")),
                ),
                _ => {}
            }
            bindings.push(match role {
                TensorRole::Input => Binding::Input { param: p.name.clone(), tensor: t.name.clone(), dtype: t.dtype },
                TensorRole::Output => Binding::Output { param: p.name.clone(), tensor: t.name.clone(), dtype: t.dtype },
            });
        } else if let Some(s) = spec.scalars.iter().find(|s| s.name == p.name) {
            let ok_ty = if s.dtype.is_float() { FLOAT_TYPES } else { INT_TYPES };
            if p.pointer || !ok_ty.contains(&p.base.as_str()) {
                diags.push(err(
                    format!("`{}` is a {} scalar in rung.toml, but the kernel takes `{}`", p.name, s.dtype, p.ty),
                    format!("take it by value as `{} {}`", s.dtype.c_types()[0], p.name),
                ));
                continue;
            }
            bindings.push(Binding::Scalar { param: p.name.clone(), scalar: s.name.clone(), dtype: s.dtype });
        } else if size_vars.contains(&p.name.as_str()) || BUILTIN_VARS.contains(&p.name.as_str()) {
            if p.pointer || !INT_TYPES.contains(&p.base.as_str()) {
                diags.push(err(
                    format!("`{}` is a size variable, but the kernel takes `{}`", p.name, p.ty),
                    format!("take it as an integer: `int {}` or `int64_t {}`", p.name, p.name),
                ));
                continue;
            }
            bindings.push(Binding::Size { param: p.name.clone(), var: p.name.clone() });
        } else {
            let mut known: Vec<&str> = spec.inputs.iter().chain(&spec.outputs).map(|t| t.name.as_str()).collect();
            known.extend(spec.scalars.iter().map(|s| s.name.as_str()));
            known.extend(size_vars.iter().copied());
            diags.push(err(
                format!("parameter `{}` matches nothing in rung.toml", p.name),
                format!("parameters are bound by name; rename it to one of: {}", known.join(", ")),
            ));
        }
    }
    let sig_pos = Pos::new(sig.line, sig.column);
    for t in &spec.outputs {
        if !sig.params.iter().any(|p| p.name == t.name) {
            diags.push(
                Diagnostic::error(
                    file,
                    sig_pos,
                    format!("output `{}` is not a parameter of `{}`, so nothing can write it", t.name, sig.name),
                )
                .with_help(format!("add `{}* {}` to the parameters", t.dtype.c_types()[0], t.name)),
            );
        }
    }
    for t in &spec.inputs {
        if !sig.params.iter().any(|p| p.name == t.name) {
            diags.push(Diagnostic::warning(
                file,
                sig_pos,
                format!("input `{}` is not a parameter of `{}`", t.name, sig.name),
            ));
        }
    }
    (bindings, diags)
}

fn shape_str(t: &crate::spec::TensorSpec) -> String {
    format!("[{}]", t.shape.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", "))
}

/// Picks the kernel to launch: the one named by `kernel=`, else the only one.
pub fn choose<'a>(sigs: &'a [Signature], wanted: Option<&str>, file: &Path) -> Result<&'a Signature, Diagnostic> {
    let kernels: Vec<&Signature> = sigs.iter().filter(|s| !s.host_entry).collect();
    if let Some(host) = sigs.iter().find(|s| s.host_entry) {
        return Ok(host);
    }
    if let Some(name) = wanted {
        return kernels.iter().copied().find(|s| s.name == name).ok_or_else(|| {
            Diagnostic::error(file, Pos::new(1, 1), format!("no extern \"C\" kernel named `{name}`")).with_help(
                format!(
                    "kernels in this file: {}",
                    kernels.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            )
        });
    }
    match kernels.as_slice() {
        [one] => Ok(one),
        [] => Err(Diagnostic::error(file, Pos::new(1, 1), "no extern \"C\" __global__ kernel found").with_help(
            "rung binds kernels by their unmangled name: declare it `extern \"C\" __global__ void name(...)`",
        )),
        many => Err(Diagnostic::error(
            file,
            Pos::new(many[1].line, many[1].column),
            "several extern \"C\" kernels; which one is launched?",
        )
        .with_help(format!(
            "add kernel=NAME to the `// rung:` header (one of: {})",
            many.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// For a `.ptx` version: the text its launch is read from. PTX keeps no parameter names, so the
/// version declares its kernel's C signature in a comment, `// extern "C" __global__ void
/// k(const float* x, float* y, int n)`, which is bound by name exactly as a `.cu` kernel's is.
/// That line is uncommented, `// rung:` lines are kept, and everything else is blanked with its
/// offsets kept, so diagnostics point at the PTX file's own lines and columns.
pub fn ptx_launch_source(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len());
    for line in ptx.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let ending = &line[body.len()..];
        let t = body.trim_start();
        let indent = body.len() - t.len();
        if let Some(rest) = t.strip_prefix("//") {
            let rest_trim = rest.trim_start();
            if rest_trim.starts_with("extern \"C\"") {
                out.push_str(&" ".repeat(indent + 2));
                out.push_str(rest);
                out.push_str(ending);
                continue;
            }
            if rest_trim.starts_with("rung:") {
                out.push_str(line);
                continue;
            }
        }
        out.extend(body.chars().map(|c| if c == '\t' { '\t' } else { ' ' }));
        out.push_str(ending);
    }
    out
}

/// Names of the `.entry` functions of a PTX module.
pub fn ptx_entries(source: &str) -> Vec<String> {
    let re = regex::Regex::new(r"\.entry\s+([A-Za-z_$][A-Za-z0-9_$]*)").expect("static regex");
    re.captures_iter(source).map(|c| c[1].to_string()).collect()
}

/// The PTX types of an `.entry`'s parameters, in order (`.u64`, `.f32`, ...); None when the
/// entry is not there.
pub fn ptx_entry_params(ptx: &str, entry: &str) -> Option<Vec<String>> {
    let re = regex::Regex::new(&format!(r"\.entry\s+{}\s*\(", regex::escape(entry))).expect("escaped");
    let start = re.find(ptx)?.end();
    let end = start + ptx[start..].find(')')?;
    let ty = regex::Regex::new(r"\.param\s+(?:\.align\s+\d+\s+)?(\.[a-z0-9]+)").expect("static regex");
    Some(ty.captures_iter(&ptx[start..end]).map(|c| c[1].to_string()).collect())
}

/// Bytes of a PTX scalar type (`.b8` arrays, used for structs, count as unknown).
fn ptx_type_bytes(t: &str) -> Option<usize> {
    let bits: usize = t.trim_start_matches('.').trim_start_matches(|c: char| c.is_ascii_alphabetic()).parse().ok()?;
    (bits >= 8).then_some(bits / 8)
}

/// Bytes of a declared C parameter: a pointer, or one of the scalar types the launch ABI binds.
fn c_param_bytes(p: &Param) -> Option<usize> {
    if p.pointer {
        return Some(8);
    }
    Some(match p.base.as_str() {
        "double" | "long" | "long long" | "int64_t" | "uint64_t" | "unsigned long long" | "size_t" => 8,
        "float" | "int" | "int32_t" | "unsigned" | "unsigned int" | "uint32_t" => 4,
        "__half" | "half" | "__nv_bfloat16" | "nv_bfloat16" | "short" | "int16_t" | "uint16_t" => 2,
        "char" | "int8_t" | "uint8_t" | "bool" => 1,
        _ => return None,
    })
}

/// Where a PTX version's declared signature disagrees with its `.entry`: no such entry, another
/// parameter count, or a parameter whose size differs (a launch would misread memory).
pub fn check_ptx_signature(ptx: &str, sig: &Signature, file: &Path) -> Vec<Diagnostic> {
    let at = |line: u32, column: u32| Pos::new(line, column);
    let Some(types) = ptx_entry_params(ptx, &sig.name) else {
        let entries = ptx_entries(ptx);
        return vec![
            Diagnostic::error(file, at(sig.line, sig.column), format!("no `.entry {}` in this PTX", sig.name))
                .with_help(format!("the entries here: {}", entries.join(", "))),
        ];
    };
    if types.len() != sig.params.len() {
        return vec![
            Diagnostic::error(
                file,
                at(sig.line, sig.column),
                format!(
                    "the signature declares {} parameters but `.entry {}` takes {}",
                    sig.params.len(),
                    sig.name,
                    types.len()
                ),
            )
            .with_help("declare one C parameter per `.param`, in order"),
        ];
    }
    let mut out = Vec::new();
    for (i, (p, t)) in sig.params.iter().zip(&types).enumerate() {
        if let (Some(c), Some(x)) = (c_param_bytes(p), ptx_type_bytes(t))
            && c != x
        {
            out.push(
                Diagnostic::error(
                    file,
                    at(p.line, p.column),
                    format!(
                        "`{}` is declared `{}` ({c} bytes) but parameter {} of `.entry {}` is `{t}` ({x} bytes)",
                        p.name,
                        p.ty,
                        i + 1,
                        sig.name
                    ),
                )
                .with_help("a pointer is .u64; float .f32; int .s32 or .u32; match the PTX's parameter types"),
            );
        }
    }
    out
}
