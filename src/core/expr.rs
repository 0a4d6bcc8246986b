//! Size expressions: shapes, launch grids and roofline formulas.
//!
//! The language is deliberately small: integer and decimal literals, names, `+ - * / %`,
//! parentheses, unary minus and a handful of functions (`cdiv`, `min`, `max`, `round_up`,
//! `next_pow2`, plus `numel(t)` / `bytes(t)` for roofline formulas). Shapes and launch
//! dimensions are evaluated in checked `i64` (an overflow is an error, not a wrap); roofline
//! formulas in `f64`. Every error carries the byte offset inside the expression text so the
//! caller can point at the exact column in rung.toml or in a version's header comment.

use std::fmt;

/// A parsed expression. Cheap to clone; evaluation never re-parses.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    source: String,
    root: Node,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Int(i64),
    Float(f64),
    Name { name: String, at: usize },
    Neg(Box<Node>),
    Bin { op: BinOp, lhs: Box<Node>, rhs: Box<Node>, at: usize },
    Call { func: String, args: Vec<Node>, at: usize },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

/// An error inside one expression, with the byte offset where it was found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ExprError {
    pub offset: usize,
    pub message: String,
}

impl ExprError {
    fn new(offset: usize, message: impl Into<String>) -> Self {
        Self { offset, message: message.into() }
    }
}

/// A value rung.toml asks for that cannot be had at one size: an expression that does not
/// evaluate there, or a launch dimension outside the GPU's limits. Each names the expression.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValueError {
    /// `what` is the place (`grid`, `` scalar `n` = ``) and `expr` the expression as written.
    #[error("{what} `{expr}`: {message}")]
    Eval { what: String, expr: String, message: String },
    /// A tensor's shape at this size.
    #[error("`{name}`: {message}")]
    Shape { name: String, message: String },
    #[error("{what}.{axis} = {value} (from `{expr}`) is outside 1..={max}")]
    Dimension { what: String, axis: &'static str, value: i64, expr: String, max: i64 },
    #[error("block has {threads} threads; at most {max}")]
    Threads { threads: i64, max: i64 },
    #[error("smem = {bytes} bytes is outside 0..={max}")]
    Smem { bytes: i64, max: i64 },
}

/// What a name or a tensor function resolves to during evaluation.
pub trait Scope {
    /// The value of a size variable (or `num_sms`), if defined.
    fn var(&self, name: &str) -> Option<i64>;
    /// Number of elements of a tensor named in rung.toml (for `numel(t)`).
    fn numel(&self, _tensor: &str) -> Option<i64> {
        None
    }
    /// Size in bytes of a tensor named in rung.toml (for `bytes(t)`).
    fn bytes(&self, _tensor: &str) -> Option<i64> {
        None
    }
}

impl Scope for std::collections::BTreeMap<String, i64> {
    fn var(&self, name: &str) -> Option<i64> {
        self.get(name).copied()
    }
}

const INT_FUNCS: &[(&str, usize)] = &[("cdiv", 2), ("min", 2), ("max", 2), ("round_up", 2), ("next_pow2", 1)];
const TENSOR_FUNCS: &[&str] = &["numel", "bytes"];

impl Expr {
    pub fn parse(source: &str) -> Result<Expr, ExprError> {
        let tokens = lex(source)?;
        let mut p = Parser { tokens: &tokens, pos: 0, end: source.len() };
        if tokens.is_empty() {
            return Err(ExprError::new(0, "empty expression"));
        }
        // The parser and the evaluator recurse: a bound on the length bounds their depth, so no
        // expression, however written, can overflow the stack.
        if let Some(t) = tokens.get(MAX_TOKENS) {
            return Err(ExprError::new(
                t.at,
                format!("expression too long: over {MAX_TOKENS} numbers, names and operators; write a short formula"),
            ));
        }
        let root = p.expr()?;
        if let Some(t) = p.peek() {
            return Err(ExprError::new(t.at, format!("unexpected `{}` after a complete expression", t.kind)));
        }
        Ok(Expr { source: source.to_string(), root })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// A literal integer, if the expression is one (used to print `block=256` compactly).
    pub fn as_int_literal(&self) -> Option<i64> {
        match self.root {
            Node::Int(v) => Some(v),
            _ => None,
        }
    }

    /// Every name the expression reads, with its offset (tensor-function arguments excluded).
    pub fn names(&self) -> Vec<(&str, usize)> {
        let mut out = Vec::new();
        collect_names(&self.root, &mut out);
        out
    }

    /// Tensor names used as `numel(t)` / `bytes(t)` arguments, with their offsets.
    pub fn tensor_refs(&self) -> Vec<(&str, usize)> {
        let mut out = Vec::new();
        collect_tensor_refs(&self.root, &mut out);
        out
    }

    /// Evaluates in checked 64-bit integers. Decimal literals are an error here.
    pub fn eval_int(&self, scope: &dyn Scope) -> Result<i64, ExprError> {
        eval_int(&self.root, scope)
    }

    /// Evaluates in f64 (roofline formulas). Integer division is exact division here.
    pub fn eval_f64(&self, scope: &dyn Scope) -> Result<f64, ExprError> {
        eval_f64(&self.root, scope)
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

fn collect_names<'a>(n: &'a Node, out: &mut Vec<(&'a str, usize)>) {
    match n {
        Node::Name { name, at } => out.push((name, *at)),
        Node::Neg(x) => collect_names(x, out),
        Node::Bin { lhs, rhs, .. } => {
            collect_names(lhs, out);
            collect_names(rhs, out);
        }
        Node::Call { func, args, .. } if !TENSOR_FUNCS.contains(&func.as_str()) => {
            args.iter().for_each(|a| collect_names(a, out))
        }
        _ => {}
    }
}

fn collect_tensor_refs<'a>(n: &'a Node, out: &mut Vec<(&'a str, usize)>) {
    match n {
        Node::Neg(x) => collect_tensor_refs(x, out),
        Node::Bin { lhs, rhs, .. } => {
            collect_tensor_refs(lhs, out);
            collect_tensor_refs(rhs, out);
        }
        Node::Call { func, args, .. } => {
            if TENSOR_FUNCS.contains(&func.as_str()) {
                for a in args {
                    if let Node::Name { name, at } = a {
                        out.push((name, *at));
                    }
                }
            } else {
                args.iter().for_each(|a| collect_tensor_refs(a, out))
            }
        }
        _ => {}
    }
}

fn overflow(at: usize) -> ExprError {
    ExprError::new(at, "integer overflow (the result does not fit in 64 bits)")
}

fn eval_int(n: &Node, s: &dyn Scope) -> Result<i64, ExprError> {
    Ok(match n {
        Node::Int(v) => *v,
        Node::Float(_) => {
            return Err(ExprError::new(0, "a decimal number cannot be used where a whole number is needed"));
        }
        Node::Name { name, at } => s.var(name).ok_or_else(|| unknown_name(name, *at))?,
        Node::Neg(x) => eval_int(x, s)?.checked_neg().ok_or_else(|| overflow(0))?,
        Node::Bin { op, lhs, rhs, at } => {
            let (a, b) = (eval_int(lhs, s)?, eval_int(rhs, s)?);
            match op {
                BinOp::Add => a.checked_add(b),
                BinOp::Sub => a.checked_sub(b),
                BinOp::Mul => a.checked_mul(b),
                BinOp::Div | BinOp::Rem if b == 0 => return Err(ExprError::new(*at, "division by zero")),
                BinOp::Div => a.checked_div_euclid(b),
                BinOp::Rem => a.checked_rem_euclid(b),
            }
            .ok_or_else(|| overflow(*at))?
        }
        Node::Call { func, args, at } => {
            if TENSOR_FUNCS.contains(&func.as_str()) {
                let t = tensor_arg(func, args, *at)?;
                let v = if func == "numel" { s.numel(t.0) } else { s.bytes(t.0) };
                return v
                    .ok_or_else(|| ExprError::new(t.1, format!("`{}` is not an input or output in rung.toml", t.0)));
            }
            let v: Vec<i64> = args.iter().map(|a| eval_int(a, s)).collect::<Result<_, _>>()?;
            match func.as_str() {
                "cdiv" | "round_up" => {
                    if v[1] <= 0 {
                        return Err(ExprError::new(
                            *at,
                            format!("{func}'s second argument must be positive, got {}", v[1]),
                        ));
                    }
                    let q = v[0].checked_add(v[1] - 1).ok_or_else(|| overflow(*at))?.div_euclid(v[1]);
                    if func == "cdiv" { q } else { q.checked_mul(v[1]).ok_or_else(|| overflow(*at))? }
                }
                "min" => v[0].min(v[1]),
                "max" => v[0].max(v[1]),
                "next_pow2" => {
                    if v[0] <= 1 {
                        1
                    } else {
                        (v[0] as u64)
                            .checked_next_power_of_two()
                            .filter(|p| *p <= i64::MAX as u64)
                            .ok_or_else(|| overflow(*at))? as i64
                    }
                }
                _ => unreachable!("function names are checked when parsing"),
            }
        }
    })
}

fn eval_f64(n: &Node, s: &dyn Scope) -> Result<f64, ExprError> {
    Ok(match n {
        Node::Int(v) => *v as f64,
        Node::Float(v) => *v,
        Node::Name { name, at } => s.var(name).ok_or_else(|| unknown_name(name, *at))? as f64,
        Node::Neg(x) => -eval_f64(x, s)?,
        Node::Bin { op, lhs, rhs, at } => {
            let (a, b) = (eval_f64(lhs, s)?, eval_f64(rhs, s)?);
            match op {
                BinOp::Add => a + b,
                BinOp::Sub => a - b,
                BinOp::Mul => a * b,
                BinOp::Div | BinOp::Rem if b == 0.0 => return Err(ExprError::new(*at, "division by zero")),
                BinOp::Div => a / b,
                BinOp::Rem => a.rem_euclid(b),
            }
        }
        Node::Call { func, args, at } => {
            if TENSOR_FUNCS.contains(&func.as_str()) {
                return Ok(eval_int(n, s)? as f64);
            }
            let v: Vec<f64> = args.iter().map(|a| eval_f64(a, s)).collect::<Result<_, _>>()?;
            match func.as_str() {
                "cdiv" | "round_up" => {
                    if v[1] <= 0.0 {
                        return Err(ExprError::new(*at, format!("{func}'s second argument must be positive")));
                    }
                    let q = (v[0] / v[1]).ceil();
                    if func == "cdiv" { q } else { q * v[1] }
                }
                "min" => v[0].min(v[1]),
                "max" => v[0].max(v[1]),
                "next_pow2" => {
                    if v[0] <= 1.0 {
                        1.0
                    } else {
                        2f64.powf(v[0].log2().ceil())
                    }
                }
                _ => unreachable!("function names are checked when parsing"),
            }
        }
    })
}

fn tensor_arg<'a>(func: &str, args: &'a [Node], at: usize) -> Result<(&'a str, usize), ExprError> {
    match args {
        [Node::Name { name, at }] => Ok((name, *at)),
        _ => Err(ExprError::new(at, format!("{func}() takes the name of one input or output, e.g. {func}(x)"))),
    }
}

fn unknown_name(name: &str, at: usize) -> ExprError {
    ExprError::new(at, format!("unknown name `{name}`"))
}

// ---------------------------------------------------------------------------------------------
// Lexer and parser

#[derive(Debug, Clone, PartialEq)]
enum TokKind {
    Int(i64),
    Float(f64),
    Ident(String),
    Op(char),
}

impl fmt::Display for TokKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokKind::Int(v) => write!(f, "{v}"),
            TokKind::Float(v) => write!(f, "{v}"),
            TokKind::Ident(s) => f.write_str(s),
            TokKind::Op(c) => write!(f, "{c}"),
        }
    }
}

#[derive(Debug, Clone)]
struct Token {
    kind: TokKind,
    at: usize,
}

fn lex(src: &str) -> Result<Vec<Token>, ExprError> {
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i] as char;
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || (c == '.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'.') {
                // exponent sign: 1e-6
                i += 1;
                if matches!(bytes[i - 1], b'e' | b'E')
                    && i < bytes.len()
                    && matches!(bytes[i], b'+' | b'-')
                    && !src[start..i].starts_with("0x")
                {
                    i += 1;
                }
            }
            let text: String = src[start..i].chars().filter(|c| *c != '_').collect();
            let kind = if let Some(hex) = text.strip_prefix("0x") {
                i64::from_str_radix(hex, 16).map(TokKind::Int).ok()
            } else if text.contains(['.', 'e', 'E']) {
                text.parse::<f64>().ok().map(TokKind::Float)
            } else {
                text.parse::<i64>().ok().map(TokKind::Int)
            };
            out.push(Token {
                kind: kind.ok_or_else(|| ExprError::new(start, format!("`{}` is not a number", &src[start..i])))?,
                at: start,
            });
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push(Token { kind: TokKind::Ident(src[start..i].to_string()), at: start });
        } else if "+-*/%(),".contains(c) {
            out.push(Token { kind: TokKind::Op(c), at: i });
            i += 1;
        } else {
            let ch = src[i..].chars().next().unwrap_or('?');
            return Err(ExprError::new(
                i,
                format!("unexpected character `{ch}`; expressions use numbers, names, + - * / % and ( )"),
            ));
        }
    }
    Ok(out)
}

/// The most tokens one expression may have: far more than any launch or size formula needs.
pub const MAX_TOKENS: usize = 512;

struct Parser<'t> {
    tokens: &'t [Token],
    pos: usize,
    end: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn eat_op(&mut self, op: char) -> Option<usize> {
        match self.peek() {
            Some(Token { kind: TokKind::Op(c), at }) if *c == op => {
                let at = *at;
                self.pos += 1;
                Some(at)
            }
            _ => None,
        }
    }

    fn here(&self) -> usize {
        self.peek().map_or(self.end, |t| t.at)
    }

    fn expr(&mut self) -> Result<Node, ExprError> {
        let mut lhs = self.term()?;
        loop {
            let (op, at) = if let Some(at) = self.eat_op('+') {
                (BinOp::Add, at)
            } else if let Some(at) = self.eat_op('-') {
                (BinOp::Sub, at)
            } else {
                return Ok(lhs);
            };
            let rhs = self.term()?;
            lhs = Node::Bin { op, lhs: Box::new(lhs), rhs: Box::new(rhs), at };
        }
    }

    fn term(&mut self) -> Result<Node, ExprError> {
        let mut lhs = self.unary()?;
        loop {
            let (op, at) = if let Some(at) = self.eat_op('*') {
                (BinOp::Mul, at)
            } else if let Some(at) = self.eat_op('/') {
                (BinOp::Div, at)
            } else if let Some(at) = self.eat_op('%') {
                (BinOp::Rem, at)
            } else {
                return Ok(lhs);
            };
            let rhs = self.unary()?;
            lhs = Node::Bin { op, lhs: Box::new(lhs), rhs: Box::new(rhs), at };
        }
    }

    fn unary(&mut self) -> Result<Node, ExprError> {
        if self.eat_op('-').is_some() {
            return Ok(Node::Neg(Box::new(self.unary()?)));
        }
        if self.eat_op('+').is_some() {
            return self.unary();
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Node, ExprError> {
        let at = self.here();
        let Some(tok) = self.peek().cloned() else {
            return Err(ExprError::new(at, "expected a number, a name or `(` but the expression ended"));
        };
        self.pos += 1;
        match tok.kind {
            TokKind::Int(v) => Ok(Node::Int(v)),
            TokKind::Float(v) => Ok(Node::Float(v)),
            TokKind::Op('(') => {
                let inner = self.expr()?;
                self.eat_op(')').ok_or_else(|| ExprError::new(self.here(), "expected `)`"))?;
                Ok(inner)
            }
            TokKind::Ident(name) => {
                if self.eat_op('(').is_none() {
                    return Ok(Node::Name { name, at });
                }
                let mut args = Vec::new();
                if self.eat_op(')').is_none() {
                    loop {
                        args.push(self.expr()?);
                        if self.eat_op(')').is_some() {
                            break;
                        }
                        self.eat_op(',')
                            .ok_or_else(|| ExprError::new(self.here(), "expected `,` or `)` in the argument list"))?;
                    }
                }
                if TENSOR_FUNCS.contains(&name.as_str()) {
                    tensor_arg(&name, &args, at)?;
                } else {
                    let Some((_, arity)) = INT_FUNCS.iter().find(|(f, _)| *f == name) else {
                        let known: Vec<&str> =
                            INT_FUNCS.iter().map(|(f, _)| *f).chain(TENSOR_FUNCS.iter().copied()).collect();
                        return Err(ExprError::new(
                            at,
                            format!("unknown function `{name}`; known: {}", known.join(", ")),
                        ));
                    };
                    if args.len() != *arity {
                        return Err(ExprError::new(
                            at,
                            format!("{name}() takes {arity} argument(s), got {}", args.len()),
                        ));
                    }
                }
                Ok(Node::Call { func: name, args, at })
            }
            other => Err(ExprError::new(at, format!("unexpected `{other}`"))),
        }
    }
}

/// Splits `a, b, c` at top-level commas (for `grid="(x, y)"`), returning each part and its offset.
pub fn split_top_level(src: &str) -> Vec<(&str, usize)> {
    let trimmed_start = src.len() - src.trim_start().len();
    let body = src.trim();
    let (body, base) = match body.strip_prefix('(').and_then(|b| b.strip_suffix(')')) {
        // Only strip if the parentheses enclose the whole list.
        Some(inner) if balanced_prefix_closes_at_end(body) => (inner, trimmed_start + 1),
        _ => (body, trimmed_start),
    };
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in body.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push((&body[start..i], base + start));
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push((&body[start..], base + start));
    parts
}

fn balanced_prefix_closes_at_end(s: &str) -> bool {
    let mut depth = 0i32;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return i == s.len() - 1 && s[1..i].contains(',');
                }
            }
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn vars(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn integer_arithmetic_and_functions() {
        let s = vars(&[("n", 1000), ("rows", 7)]);
        let cases = [
            ("cdiv(n, 4*256)", 1),
            ("cdiv(n, 256)", 4),
            ("rows * 2 + 1", 15),
            ("-(rows) + 10", 3),
            ("n / 3", 333),
            ("n % 7", 6),
            ("max(min(n, 5), 2)", 5),
            ("round_up(n, 128)", 1024),
            ("next_pow2(n)", 1024),
            ("next_pow2(1)", 1),
            ("0x100", 256),
            ("1_024", 1024),
        ];
        for (src, want) in cases {
            assert_eq!(Expr::parse(src).unwrap().eval_int(&s).unwrap(), want, "{src}");
        }
    }

    #[test]
    fn float_evaluation_for_rooflines() {
        let s = vars(&[("n", 1000)]);
        assert_eq!(Expr::parse("n / 8").unwrap().eval_f64(&s).unwrap(), 125.0);
        assert_eq!(Expr::parse("2.5 * n").unwrap().eval_f64(&s).unwrap(), 2500.0);
        assert_eq!(Expr::parse("1e-6 * n").unwrap().eval_f64(&s).unwrap(), 1e-3);
    }

    #[test]
    fn errors_carry_offsets() {
        let s = vars(&[("n", 1)]);
        let e = Expr::parse("n + m").unwrap().eval_int(&s).unwrap_err();
        assert_eq!((e.offset, e.message.as_str()), (4, "unknown name `m`"));
        let e = Expr::parse("cdiv(n)").unwrap_err();
        assert_eq!(e.offset, 0);
        assert!(e.message.contains("takes 2 argument"), "{}", e.message);
        let e = Expr::parse("n +").unwrap_err();
        assert_eq!(e.offset, 3);
        let e = Expr::parse("n $ 2").unwrap_err();
        assert_eq!(e.offset, 2);
        let e = Expr::parse("foo(n, 2)").unwrap_err();
        assert!(e.message.starts_with("unknown function `foo`"));
        let e = Expr::parse("n / (n - 1)").unwrap().eval_int(&s).unwrap_err();
        assert_eq!((e.offset, e.message.as_str()), (2, "division by zero"));
        let e = Expr::parse("(n 2)").unwrap_err();
        assert_eq!(e.offset, 3);
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        let s = vars(&[("n", i64::MAX / 2 + 1)]);
        let e = Expr::parse("n * 2").unwrap().eval_int(&s).unwrap_err();
        assert!(e.message.contains("overflow"));
    }

    #[test]
    fn names_and_tensor_refs() {
        let e = Expr::parse("bytes(x) + numel(y) * 4 + rows").unwrap();
        assert_eq!(e.names(), vec![("rows", 26)]);
        assert_eq!(e.tensor_refs(), vec![("x", 6), ("y", 17)]);
    }

    #[test]
    fn splits_tuples() {
        assert_eq!(split_top_level("(cdiv(n, 256), rows)"), vec![("cdiv(n, 256)", 1), (" rows", 14)]);
        assert_eq!(split_top_level("cdiv(n, 256)"), vec![("cdiv(n, 256)", 0)]);
        assert_eq!(split_top_level("(n)"), vec![("(n)", 0)]);
        assert_eq!(split_top_level("a, b, c").len(), 3);
    }

    /// Deep nesting or a long chain is an error at its place, never a stack overflow (a 6 KB
    /// launch header once aborted the TUI).
    #[test]
    fn a_huge_expression_is_an_error_not_an_abort() {
        for src in ["(".repeat(6000), format!("{}1", "-".repeat(6000)), format!("{}1", "1+".repeat(3000))] {
            let e = Expr::parse(&src).unwrap_err();
            assert!(e.to_string().contains("expression too long"), "{e}");
        }
        let fine = format!("{}1", "1+".repeat(200));
        assert!(Expr::parse(&fine).is_ok());
    }
}
