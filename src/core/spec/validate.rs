//! Semantic checks of rung.toml, each located at the offending key or character.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::Path;

use super::raw::{IntOrExpr, NumOrExpr, RawRunnerField, RawSpec, RawTensor};
use super::{
    BUILTIN_VARS, BuildSpec, Init, LaunchDefaults, Limits, Roofline, RunnerKind, RunnerSpec, ScalarSpec, ScalarValue,
    SizeSet, Spec, TensorSpec,
};
use crate::diag::{Diagnostic, Pos};
use crate::dtype::{DType, Tolerance};
use crate::expr::{Expr, split_top_level};

/// One step of a key path.
#[derive(Debug, Clone)]
pub(super) enum Seg {
    Key(String),
    Index(usize),
}

fn key(k: &str) -> Seg {
    Seg::Key(k.to_string())
}

fn path_string(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if s.is_empty() => s.push_str(k),
            Seg::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// Finds spans of key paths in the original text.
struct Locator<'a> {
    text: &'a str,
    doc: Option<toml_edit::Document<&'a str>>,
}

impl<'a> Locator<'a> {
    fn new(text: &'a str) -> Self {
        Locator { text, doc: toml_edit::Document::parse(text).ok() }
    }

    /// The span of the deepest part of `path` that exists (a missing key points at its table).
    fn span(&self, path: &[Seg]) -> Option<Range<usize>> {
        use toml_edit::{Item, Value};
        enum Node<'d> {
            Table(&'d toml_edit::Table),
            Item(&'d Item),
            Value(&'d Value),
        }
        let doc = self.doc.as_ref()?;
        let mut node = Node::Table(doc.as_table());
        let mut last = None;
        for seg in path {
            if let Node::Item(Item::Value(v)) = node {
                node = Node::Value(v);
            }
            if let Node::Item(Item::Table(t)) = node {
                node = Node::Table(t);
            }
            let next = match (node, seg) {
                (Node::Table(t), Seg::Key(k)) => {
                    t.get_key_value(k).map(|(kk, it)| (Node::Item(it), it.span().or_else(|| kk.span())))
                }
                (Node::Item(Item::ArrayOfTables(a)), Seg::Index(i)) => a.get(*i).map(|t| (Node::Table(t), t.span())),
                (Node::Value(Value::InlineTable(t)), Seg::Key(k)) => t.get(k).map(|v| (Node::Value(v), v.span())),
                (Node::Value(Value::Array(a)), Seg::Index(i)) => a.get(*i).map(|v| (Node::Value(v), v.span())),
                _ => None,
            };
            let Some((n, span)) = next else { return last };
            node = n;
            last = span.or(last);
        }
        last
    }

    /// Position of `path`, moved `offset` characters into a string value (past its quotes).
    fn pos(&self, path: &[Seg], offset: Option<usize>) -> Pos {
        let Some(span) = self.span(path) else { return Pos::WHOLE_FILE };
        let mut at = span.start;
        if let Some(off) = offset {
            let raw = &self.text[span.clone()];
            let quote = if raw.starts_with("\"\"\"") || raw.starts_with("'''") {
                3
            } else if raw.starts_with('"') || raw.starts_with('\'') {
                1
            } else {
                0
            };
            at += quote + off;
        }
        Pos::of_offset(self.text, at)
    }
}

struct Checker<'a> {
    loc: Locator<'a>,
    file: &'a Path,
    diags: Vec<Diagnostic>,
}

impl Checker<'_> {
    fn err(&mut self, path: &[Seg], offset: Option<usize>, message: impl Into<String>, help: impl Into<String>) {
        let pos = self.loc.pos(path, offset);
        let d = Diagnostic::error(self.file, pos, message).with_key(path_string(path)).with_help(help);
        self.diags.push(d);
    }

    fn expr(&mut self, path: &[Seg], src: &str, allowed: &BTreeSet<String>, what: &str) -> Option<Expr> {
        self.expr_at(path, src, 0, allowed, what)
    }

    /// Parses an expression that starts `base` characters into the value at `path`.
    fn expr_at(
        &mut self,
        path: &[Seg],
        src: &str,
        base: usize,
        allowed: &BTreeSet<String>,
        what: &str,
    ) -> Option<Expr> {
        match Expr::parse(src) {
            Ok(e) => {
                let mut ok = true;
                for (name, at) in e.names() {
                    if !allowed.contains(name) {
                        let known: Vec<&str> = allowed.iter().map(String::as_str).collect();
                        self.err(
                            path,
                            Some(base + at),
                            format!("unknown name `{name}` in {what}"),
                            format!("names usable here: {} (size variables come from [sizes])", known.join(", ")),
                        );
                        ok = false;
                    }
                }
                ok.then_some(e)
            }
            Err(e) => {
                self.err(path, Some(base + e.offset), format!("{} in {what} `{src}`", e.message), "expressions use whole numbers, size variables, + - * / % ( ) and cdiv, min, max, round_up, next_pow2");
                None
            }
        }
    }

    fn int_or_expr(&mut self, path: &[Seg], v: &IntOrExpr, allowed: &BTreeSet<String>, what: &str) -> Option<Expr> {
        match v {
            IntOrExpr::Int(i) => Some(Expr::parse(&i.to_string()).expect("an integer literal parses")),
            IntOrExpr::Expr(s) => self.expr(path, s, allowed, what),
        }
    }

    /// A 1–3 dimensional launch extent: `256`, `"cdiv(n, 256)"` or `"(cdiv(n, 32), rows)"`.
    fn dims(&mut self, path: &[Seg], v: &IntOrExpr, allowed: &BTreeSet<String>, what: &str) -> Option<Vec<Expr>> {
        let IntOrExpr::Expr(s) = v else { return self.int_or_expr(path, v, allowed, what).map(|e| vec![e]) };
        let parts = split_top_level(s);
        if parts.len() > 3 {
            let (extra, at) = parts[3];
            let at = at + extra.len() - extra.trim_start().len();
            self.err(
                path,
                Some(at),
                format!("{what} has {} dimensions; at most 3 (x, y, z)", parts.len()),
                "write \"(x, y)\" or \"(x, y, z)\"",
            );
            return None;
        }
        let mut out = Vec::new();
        for (part, at) in parts {
            let lead = part.len() - part.trim_start().len();
            out.push(self.expr_at(path, part.trim(), at + lead, allowed, what)?);
        }
        Some(out)
    }
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

pub(super) fn validate(raw: RawSpec, text: &str, file: &Path) -> Result<Spec, Vec<Diagnostic>> {
    let mut c = Checker { loc: Locator::new(text), file, diags: Vec::new() };

    if raw.problem.name.trim().is_empty() {
        c.err(
            &[key("problem"), key("name")],
            None,
            "the problem name is empty",
            "give the problem a short name, e.g. name = \"rmsnorm\"",
        );
    }

    // Size variables: the union of every size set's keys.
    if raw.sizes.test.is_empty() {
        c.err(
            &[key("sizes"), key("test")],
            None,
            "no test sizes",
            "add at least one size set, e.g. test = [{ n = 1000 }]",
        );
    }
    let sets: Vec<(&str, usize, &SizeSet)> = raw
        .sizes
        .test
        .iter()
        .enumerate()
        .map(|(i, s)| ("test", i, s))
        .chain(raw.sizes.bench.iter().enumerate().map(|(i, s)| ("bench", i, s)))
        .collect();
    let size_vars: BTreeSet<String> = sets.iter().flat_map(|(_, _, s)| s.keys().cloned()).collect();
    for (group, i, set) in &sets {
        for (name, value) in *set {
            let p = [key("sizes"), key(group), Seg::Index(*i), key(name)];
            if !is_identifier(name) {
                c.err(
                    &p,
                    None,
                    format!("size variable `{name}` is not an identifier"),
                    "use letters, digits and _ only",
                );
            } else if BUILTIN_VARS.contains(&name.as_str()) {
                c.err(
                    &p,
                    None,
                    format!("`{name}` is built in and cannot be a size variable"),
                    "rename the size variable",
                );
            }
            if *value < 1 {
                c.err(
                    &p,
                    None,
                    format!("size variable `{name}` is {value}; sizes must be at least 1"),
                    "use a positive size",
                );
            }
        }
    }

    // Names of tensors and scalars: unique identifiers, distinct from size variables.
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let named = raw
        .inputs
        .iter()
        .enumerate()
        .map(|(i, t)| ("inputs", i, &t.name))
        .chain(raw.outputs.iter().enumerate().map(|(i, t)| ("outputs", i, &t.name)))
        .chain(raw.scalars.iter().enumerate().map(|(i, s)| ("scalars", i, &s.name)));
    for (group, i, name) in named {
        let p = [key(group), Seg::Index(i), key("name")];
        let here = format!("{group}[{i}]");
        if !is_identifier(name) {
            c.err(
                &p,
                None,
                format!("`{name}` is not a C identifier"),
                "kernel parameters are bound by name: use letters, digits and _",
            );
        } else if let Some(first) = seen.get(name) {
            c.err(
                &p,
                None,
                format!("`{name}` is already declared at {first}"),
                "give every input, output and scalar its own name",
            );
        } else if size_vars.contains(name) || BUILTIN_VARS.contains(&name.as_str()) {
            c.err(
                &p,
                None,
                format!("`{name}` is also a size variable"),
                "a name binds one kernel parameter: rename the tensor or the size variable",
            );
        }
        seen.entry(name.clone()).or_insert(here);
    }
    if raw.outputs.is_empty() {
        c.err(
            &[key("outputs")],
            None,
            "no outputs declared",
            "add an [[outputs]] table: a kernel is checked by what it writes",
        );
    }

    let global_tol = &raw.tolerance;
    check_tolerance(
        &mut c,
        &[key("tolerance")],
        global_tol.atol,
        global_tol.rtol,
        global_tol.min_psnr,
        global_tol.min_cosine,
    );

    let mut used_vars: BTreeMap<String, String> = BTreeMap::new();
    let inputs = tensors(&mut c, "inputs", &raw.inputs, &size_vars, global_tol, &mut used_vars);
    let outputs = tensors(&mut c, "outputs", &raw.outputs, &size_vars, global_tol, &mut used_vars);

    let mut scalars = Vec::new();
    for (i, s) in raw.scalars.iter().enumerate() {
        let p = [key("scalars"), Seg::Index(i), key("value")];
        let value = match &s.value {
            NumOrExpr::Num(v) => {
                if !s.dtype.is_float() && v.fract() != 0.0 {
                    c.err(
                        &p,
                        None,
                        format!("scalar `{}` is {} but its value {v} is not a whole number", s.name, s.dtype),
                        "use a whole number or a float dtype",
                    );
                }
                ScalarValue::Number(*v)
            }
            NumOrExpr::Expr(src) => match c.expr(&p, src, &size_vars, "a scalar value") {
                Some(e) => {
                    note_vars(&e, &format!("scalars[{i}].value"), &mut used_vars);
                    ScalarValue::Expr(e)
                }
                None => continue,
            },
        };
        scalars.push(ScalarSpec { name: s.name.clone(), dtype: s.dtype, value });
    }

    let mut launch_vars = size_vars.clone();
    launch_vars.extend(BUILTIN_VARS.iter().map(|s| s.to_string()));
    let l = &raw.launch;
    let lp = |k: &str| [key("launch"), key(k)];
    let launch = LaunchDefaults {
        grid: l.grid.as_ref().and_then(|v| c.dims(&lp("grid"), v, &launch_vars, "launch.grid")),
        block: l.block.as_ref().and_then(|v| c.dims(&lp("block"), v, &launch_vars, "launch.block")),
        smem: l.smem.as_ref().and_then(|v| c.int_or_expr(&lp("smem"), v, &launch_vars, "launch.smem")),
        cluster: l.cluster.as_ref().and_then(|v| c.dims(&lp("cluster"), v, &launch_vars, "launch.cluster")),
        kernel: l.kernel.clone(),
    };
    for (name, e) in launch.exprs() {
        note_vars(e, &format!("launch.{name}"), &mut used_vars);
    }

    let tensor_names: BTreeSet<&str> = raw.inputs.iter().chain(&raw.outputs).map(|t| t.name.as_str()).collect();
    let mut roofline = Roofline::default();
    for (k, src, slot) in
        [("bytes", &raw.roofline.bytes, &mut roofline.bytes), ("flops", &raw.roofline.flops, &mut roofline.flops)]
    {
        let Some(src) = src else { continue };
        let p = [key("roofline"), key(k)];
        let Some(e) = c.expr(&p, src, &size_vars, "a roofline formula") else { continue };
        let mut ok = true;
        for (t, at) in e.tensor_refs() {
            if !tensor_names.contains(t) {
                c.err(
                    &p,
                    Some(at),
                    format!("`{t}` is not an input or output"),
                    "numel() and bytes() take a tensor declared in [[inputs]] or [[outputs]]",
                );
                ok = false;
            }
        }
        if ok {
            note_vars(&e, &format!("roofline.{k}"), &mut used_vars);
            *slot = Some(e);
        }
    }

    // Every size set must define every variable that something uses.
    for (group, i, set) in &sets {
        for (var, user) in &used_vars {
            if !set.contains_key(var) {
                c.err(
                    &[key("sizes"), key(group), Seg::Index(*i)],
                    None,
                    format!("this size set does not define `{var}`, which {user} uses"),
                    format!("add `{var} = ...` to every size set"),
                );
            }
        }
    }

    // Shapes must be positive at every size (only worth checking once names resolve).
    if c.diags.is_empty() {
        for (group, ts) in [("inputs", &inputs), ("outputs", &outputs)] {
            for (ti, t) in ts.iter().enumerate() {
                for (di, dim) in t.shape.iter().enumerate() {
                    for (sg, si, set) in &sets {
                        match dim.eval_int(*set) {
                            Ok(v) if v >= 1 => {}
                            Ok(v) => {
                                let p = [key(group), Seg::Index(ti), key("shape"), Seg::Index(di)];
                                c.err(
                                    &p,
                                    None,
                                    format!("dimension `{dim}` is {v} at sizes.{sg}[{si}]"),
                                    "every dimension must be at least 1 at every size",
                                );
                            }
                            Err(e) => {
                                let p = [key(group), Seg::Index(ti), key("shape"), Seg::Index(di)];
                                c.err(
                                    &p,
                                    Some(e.offset),
                                    format!("{} at sizes.{sg}[{si}]", e.message),
                                    "check the expression",
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    let build =
        BuildSpec { arch: raw.build.arch.clone(), flags: raw.build.flags.clone(), compiler: raw.build.compiler };
    if let Some(arch) = &raw.build.arch {
        let re = regex::Regex::new(r"^sm_\d{2,3}[af]?$").expect("static regex");
        if !re.is_match(arch) {
            c.err(
                &[key("build"), key("arch")],
                None,
                format!("`{arch}` is not a GPU architecture"),
                "write it as nvcc does, e.g. sm_90 or sm_90a",
            );
        }
    }

    let runner = match &raw.runner {
        RawRunnerField::Url(url) => match crate::remote::SshTarget::parse(url) {
            Ok(t) => RunnerSpec {
                kind: RunnerKind::Ssh,
                host: Some(t.host),
                port: t.port,
                workdir: Some(t.path),
                ..RunnerSpec::default()
            },
            Err(e) => {
                c.err(&[key("runner")], None, e.0, "e.g. runner = \"ssh://me@gpu-box/home/me/rmsnorm\"");
                RunnerSpec::default()
            }
        },
        RawRunnerField::Table(r) => {
            if r.rung.is_some() && r.kind != RunnerKind::Slurm {
                c.err(
                    &[key("runner"), key("rung")],
                    None,
                    "`rung` names the binary Slurm's compute nodes run; this runner is not Slurm",
                    "remove it, or set kind = \"slurm\" (an SSH runner ships its own binary)",
                );
            }
            if r.kind == RunnerKind::Ssh && r.host.as_deref().is_none_or(str::is_empty) {
                c.err(
                    &[key("runner"), key("kind")],
                    None,
                    "an ssh runner needs a host",
                    "add host = \"user@gpu-box\" under [runner]",
                );
            }
            r.clone()
        }
    };

    let d = Limits::default();
    let limits = Limits {
        build: raw.limits.build.map_or(d.build, |s| s.0),
        run: raw.limits.run.map_or(d.run, |s| s.0),
        bench: raw.limits.bench.map_or(d.bench, |s| s.0),
    };

    for p in crate::context::sources::problems(&raw.context) {
        c.err(&[key("context"), key("sources"), Seg::Index(p.index), key(p.key)], None, p.message, p.help);
    }

    if !c.diags.is_empty() {
        return Err(c.diags);
    }
    Ok(Spec {
        path: file.to_path_buf(),
        name: raw.problem.name,
        description: raw.problem.description,
        reference: raw.problem.reference.map(Into::into),
        inputs,
        outputs,
        scalars,
        test_sizes: raw.sizes.test,
        bench_sizes: raw.sizes.bench,
        roofline,
        launch,
        build,
        runner,
        limits,
        context: raw.context.sources,
    })
}

fn note_vars(e: &Expr, user: &str, used: &mut BTreeMap<String, String>) {
    for (name, _) in e.names() {
        if !BUILTIN_VARS.contains(&name) {
            used.entry(name.to_string()).or_insert_with(|| user.to_string());
        }
    }
}

fn check_tolerance(
    c: &mut Checker,
    base: &[Seg],
    atol: Option<f64>,
    rtol: Option<f64>,
    psnr: Option<f64>,
    cos: Option<f64>,
) {
    for (k, v) in [("atol", atol), ("rtol", rtol)] {
        if let Some(v) = v.filter(|v| !(v.is_finite() && *v >= 0.0)) {
            let mut p = base.to_vec();
            p.push(key(k));
            c.err(
                &p,
                None,
                format!("{k} is {v}; it must be a finite number ≥ 0"),
                "typical values: atol = 1e-5, rtol = 1e-4 for f32",
            );
        }
    }
    if let Some(v) = cos.filter(|v| !(0.0..=1.0).contains(v)) {
        let mut p = base.to_vec();
        p.push(key("min_cosine"));
        c.err(
            &p,
            None,
            format!("min_cosine is {v}; a cosine similarity lies in [0, 1]"),
            "typical values: 0.999 for bf16",
        );
    }
    if let Some(v) = psnr.filter(|v| !v.is_finite()) {
        let mut p = base.to_vec();
        p.push(key("min_psnr"));
        c.err(&p, None, format!("min_psnr is {v}"), "give it in dB, e.g. min_psnr = 30");
    }
}

fn tensors(
    c: &mut Checker,
    group: &str,
    raw: &[RawTensor],
    size_vars: &BTreeSet<String>,
    global: &super::raw::RawTolerance,
    used: &mut BTreeMap<String, String>,
) -> Vec<TensorSpec> {
    let mut out = Vec::new();
    for (i, t) in raw.iter().enumerate() {
        let base = [key(group), Seg::Index(i)];
        if t.shape.is_empty() {
            c.err(
                &[key(group), Seg::Index(i), key("shape")],
                None,
                "empty shape",
                "a tensor has at least one dimension; use [1] for a single value",
            );
        }
        let mut shape = Vec::new();
        for (d, dim) in t.shape.iter().enumerate() {
            let p = [key(group), Seg::Index(i), key("shape"), Seg::Index(d)];
            match dim {
                IntOrExpr::Int(v) if *v < 1 => {
                    c.err(&p, None, format!("dimension {v} is not positive"), "dimensions are at least 1");
                }
                _ => {
                    if let Some(e) = c.int_or_expr(&p, dim, size_vars, "a shape") {
                        note_vars(&e, &format!("{group}[{i}].shape"), used);
                        shape.push(e);
                    }
                }
            }
        }
        check_tolerance(c, &base, t.atol, t.rtol, t.min_psnr, t.min_cosine);
        let init = t.init.clone().unwrap_or(if t.dtype.is_float() {
            Init::Normal { mean: 0.0, std: 1.0 }
        } else if t.dtype == DType::U8 || t.dtype == DType::U32 {
            Init::Randint { low: 0, high: 16 }
        } else {
            Init::Randint { low: -8, high: 8 }
        });
        let bad_range = match &init {
            Init::Uniform { low, high } => low >= high,
            Init::Randint { low, high } => low >= high,
            Init::Normal { std, .. } => *std < 0.0,
            _ => false,
        };
        if bad_range {
            c.err(
                &[key(group), Seg::Index(i), key("init")],
                None,
                "the distribution is empty: low must be below high (and std ≥ 0)",
                "e.g. init = { dist = \"uniform\", low = -1, high = 1 }",
            );
        }
        let d = t.dtype.default_tolerance();
        let tolerance = Tolerance {
            atol: t.atol.or(global.atol).unwrap_or(d.atol),
            rtol: t.rtol.or(global.rtol).unwrap_or(d.rtol),
            min_psnr: t.min_psnr.or(global.min_psnr).or(d.min_psnr),
            min_cosine: t.min_cosine.or(global.min_cosine).or(d.min_cosine),
        };
        if shape.len() == t.shape.len() {
            out.push(TensorSpec { name: t.name.clone(), dtype: t.dtype, shape, init, tolerance });
        }
    }
    out
}

impl LaunchDefaults {
    /// Every expression with the key that holds it.
    pub fn exprs(&self) -> Vec<(&'static str, &Expr)> {
        let mut v: Vec<(&'static str, &Expr)> = Vec::new();
        v.extend(self.grid.iter().flatten().map(|e| ("grid", e)));
        v.extend(self.block.iter().flatten().map(|e| ("block", e)));
        v.extend(self.smem.iter().map(|e| ("smem", e)));
        v.extend(self.cluster.iter().flatten().map(|e| ("cluster", e)));
        v
    }
}
