"""triton_aot.py's reading of a version: the types of a kernel's parameters (from annotations
and names), its @triton.jit kernels and run() wrapper, and a compile error mapped back to the
version's line. rung writes it beside triton_aot.py."""

import ast
import inspect
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aot_common import Lazy, _chain, _last_frame_in, _same_file  # noqa: E402
from aot_common import format_exc as _format_exc, tail as _tail  # noqa: E402
from aot_common import DIAG_RE as _DIAG_RE, FLOAT_NAMES as _FLOAT_NAMES, INT_PREFIXES as _INT_PREFIXES  # noqa: E402

# Triton, imported at first use (by then the script has imported it, or failed saying why): the
# supervisor never imports it.
triton = Lazy('triton')
tl = Lazy('triton.language')


# --------------------------------------------------------------------------- types

_DTYPE_ALIASES = {
    "f32": "fp32", "float32": "fp32", "float": "fp32", "fp32": "fp32",
    "f16": "fp16", "float16": "fp16", "half": "fp16", "fp16": "fp16",
    "bf16": "bf16", "bfloat16": "bf16",
    "f64": "fp64", "float64": "fp64", "double": "fp64", "fp64": "fp64",
    "f8e4m3": "fp8e4nv", "fp8e4m3": "fp8e4nv", "float8_e4m3fn": "fp8e4nv", "fp8e4nv": "fp8e4nv",
    "f8e5m2": "fp8e5", "fp8e5m2": "fp8e5", "float8_e5m2": "fp8e5", "fp8e5": "fp8e5",
    "bool": "i1", "i1": "i1", "int1": "i1",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "int": "i32",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
}


def normalize_type(t):
    """Map rung / torch / Triton spellings to Triton signature strings."""
    if not isinstance(t, str):
        raise ValueError("signature type must be a string, got %r" % (t,))
    s = t.strip()
    if s == "constexpr":
        return s
    prefix = ""
    if s.startswith("*k"):
        prefix, s = "*k", s[2:]
    elif s.startswith("*"):
        prefix, s = "*", s[1:]
    elif s.startswith("ptr<") and s.endswith(">"):
        prefix, s = "*", s[4:-1]
    s = s.replace("tl.", "").replace("torch.", "")
    return prefix + _DTYPE_ALIASES.get(s.lower(), s)


def _constexpr_value(v):
    """JSON value -> constexpr value; "tl.float16"/"float16" strings become tl dtypes."""
    if isinstance(v, str):
        name = v[3:] if v.startswith("tl.") else v
        dt = getattr(tl, name, None)
        if dt is not None and isinstance(dt, getattr(tl, "dtype", ())):
            return dt
    return v


_INT_NAMES = {"n", "m", "k", "numel", "n_elements", "size", "rows", "cols", "n_rows", "n_cols",
              "seq_len", "seqlen", "batch", "nheads", "n_heads", "head_dim", "hidden", "dim",
              "d", "h", "l", "s", "t", "z", "seed", "ld", "lda", "ldb", "ldc", "total"}

def _pointer_elem_from_name(name):
    low = name.lower()
    for key, t in (("bf16", "bf16"), ("fp16", "fp16"), ("f16", "fp16"), ("half", "fp16"),
                   ("fp8", "fp8e4nv"), ("int8", "i8"), ("i8", "i8"), ("idx", "i32"),
                   ("index", "i32"), ("indices", "i32"), ("i32", "i32"), ("i64", "i64")):
        if key in low:
            return t
    return "fp32"


def infer_arg_type(name, annotation):
    """Best-effort Triton type of a runtime (non-constexpr) parameter; returns (type, reason)."""
    ann = annotation
    if ann is not inspect.Parameter.empty and ann is not None:
        if ann is int:
            return "i32", "annotation int"
        if ann is float:
            return "fp32", "annotation float"
        if ann is bool:
            return "i1", "annotation bool"
        text = ann if isinstance(ann, str) else getattr(ann, "name", None) or str(ann)
        try:
            t = normalize_type(str(text))
            if re.match(r"^\*?k?(fp\d+|bf16|fp8\w*|i\d+|u\d+)$", t):
                return t, "annotation %r" % (text,)
        except ValueError:
            pass
    low = name.lower()
    if low in _INT_NAMES or low.startswith(_INT_PREFIXES):
        return "i32", "name looks like a size/stride"
    if low in _FLOAT_NAMES:
        return "fp32", "name looks like a float scalar"
    return "*" + _pointer_elem_from_name(name), "name taken for a tensor pointer"


def infer_constexpr(name, num_warps):
    up = name.upper()
    if "BLOCK" in up or "TILE" in up:
        if up.endswith("_K"):
            return 32
        if up.endswith(("_M", "_N")):
            return 64
        return 1024
    if "GROUP" in up:
        return 8
    if up in ("NUM_WARPS", "WARPS"):
        return num_warps
    if up.startswith(("HAS_", "IS_", "USE_", "EVEN_", "ENABLE_", "APPLY_")):
        return False
    if "STAGES" in up:
        return 3
    return 1


# --------------------------------------------------------------------------- module / kernels


def _unwrap(obj, JITFunction):
    """JITFunction behind @autotune/@heuristics wrappers; returns (jitfn, [wrappers])."""
    wrappers = []
    seen = 0
    while not isinstance(obj, JITFunction) and hasattr(obj, "fn") and seen < 8:
        wrappers.append(obj)
        obj = obj.fn
        seen += 1
    return (obj if isinstance(obj, JITFunction) else None), wrappers


def _def_line(jf):
    """Absolute line of the `def` of a JITFunction in its file."""
    n = getattr(jf, "def_file_line_number", None)
    if isinstance(n, int):
        return n
    try:
        lines, start = inspect.getsourcelines(jf.fn)
    except (OSError, TypeError):
        return None
    for i, line in enumerate(lines):
        if re.match(r"\s*(async\s+)?def\s", line):
            return start + i
    return start


def _jit_src(jf):
    s = getattr(jf, "src", None)
    if isinstance(s, str):
        return s
    try:
        import textwrap
        s = textwrap.dedent(inspect.getsource(jf.fn))
        m = re.search(r"^def\s+\w+\s*\(", s, re.MULTILINE)
        return s[m.start():] if m else s
    except (OSError, TypeError):
        return ""


def _names_used(src):
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def _launches(path):
    """Launches `name[grid](..., KW=literal)` in the version file: name -> {keyword: literal value}.

    Only keyword arguments whose value is a literal are kept (BLOCK=1024, num_warps=8);
    the first launch of a kernel wins."""
    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return {}
    out = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript):
            v = n.func.value
            if not isinstance(v, ast.Name):
                continue
            kws = {}
            for kw in n.keywords:
                if kw.arg is None:
                    continue
                try:
                    kws[kw.arg] = ast.literal_eval(kw.value)
                except (ValueError, TypeError, SyntaxError):
                    pass
            out.setdefault(v.id, {"line": n.lineno, "kwargs": kws})
    return out


def find_kernels(mod, path, JITFunction):
    """Ordered list of (public name, wrapper object, JITFunction) defined in the version file."""
    found, seen = [], set()
    for name, obj in list(vars(mod).items()):
        jf, wrappers = _unwrap(obj, JITFunction)
        if jf is None or id(jf) in seen:
            continue
        code = getattr(jf.fn, "__code__", None)
        if code is None or not _same_file(code.co_filename, path):
            continue
        seen.add(id(jf))
        found.append((name, wrappers, jf))
    return found


# --------------------------------------------------------------------------- errors


def _map_compilation_error(err, jit_by_name, path, file_lines):
    """(file, lineno, col, function) of a Triton CompilationError, lineno absolute in its file."""
    node = getattr(err, "node", None)
    src = getattr(err, "src", None) or ""
    rel = getattr(node, "lineno", None)
    col = getattr(node, "col_offset", None)
    if rel is None:
        return None
    m = re.search(r"^\s*def\s+(\w+)", src, re.MULTILINE)
    fname = m.group(1) if m else None
    jf = jit_by_name.get(fname)
    if jf is None:
        return {"file": None, "lineno": None, "function_lineno": rel, "col": col, "function": fname}
    fpath = jf.fn.__code__.co_filename
    base = _def_line(jf)
    lineno = base + rel - 1 if base is not None else None
    src_lines = src.split("\n")
    # Sanity check: the excerpt line must match the file; if not, Triton already gave absolute lines.
    if lineno is not None and _same_file(fpath, path) and 0 < rel <= len(src_lines):
        want = src_lines[rel - 1].strip()
        if 0 < lineno <= len(file_lines) and file_lines[lineno - 1].strip() != want:
            if 0 < rel <= len(file_lines) and file_lines[rel - 1].strip() == want:
                lineno = rel
    return {"file": fpath, "lineno": lineno, "function_lineno": rel,
            "col": (col + 1) if isinstance(col, int) else None, "function": fname,
            "in_version_file": _same_file(fpath, path)}



_PTX_IN_LOG_RE = re.compile(r"(^//\n// Generated by LLVM NVPTX Back-End.*?)(?=^=+$|\Z)", re.MULTILINE | re.DOTALL)


def build_error(kernel, e, log, jit_by_name, path, file_lines):
    CompilationError = getattr(getattr(triton, "compiler", None), "CompilationError", None)
    if CompilationError is None:
        try:
            from triton.compiler.errors import CompilationError  # noqa: F811
        except ImportError:
            CompilationError = ()
    err = {"kernel": kernel, "type": type(e).__name__, "message": str(e),
           "traceback": _tail(_format_exc(e)), "lineno": None, "col": None, "file": None}
    frames, excs = [], []
    for c in _chain(e):
        if CompilationError and isinstance(c, CompilationError):
            loc = _map_compilation_error(c, jit_by_name, path, file_lines)
            if loc:
                msg = getattr(c, "error_message", None)
                loc["message"] = None if msg is None else str(msg)
                frames.append(loc)
                excs.append(c)
    if frames:
        err["type"] = "CompilationError" if type(e).__name__ == "CompilationError" else type(e).__name__
        # outermost error is the kernel; the innermost in the version file is where it went wrong
        err["chain"] = frames
        inner = [f for f in frames if f.get("in_version_file")]
        best = inner[-1] if inner else frames[-1]
        # the innermost error's text (source excerpt + reason); the outer ones are call sites
        err["message"] = str(excs[frames.index(best)])
        err.update({"lineno": best.get("lineno"), "col": best.get("col"), "file": best.get("file"),
                    "function": best.get("function")})
        root = _chain(e)[-1]
        if root is not None and not isinstance(root, CompilationError):
            err["cause"] = "%s: %s" % (type(root).__name__, root)
    else:
        fs = _last_frame_in(e.__traceback__, path)
        if fs is not None:
            err.update({"lineno": fs.lineno, "file": fs.filename})
    # MLIR / LLVM diagnostics carry absolute locations: version.py:LINE:COL: error: ...
    diags = []
    for m in _DIAG_RE.finditer(log or ""):
        diags.append({"file": m.group("file"), "lineno": int(m.group("line")), "col": int(m.group("col")),
                      "severity": m.group("sev"), "message": m.group("msg")})
    if diags:
        err["diagnostics"] = diags[:50]
        if err["lineno"] is None:
            first = None
            for d in diags:
                if d["severity"] == "error" and os.path.exists(d["file"]) and _same_file(d["file"], path):
                    first = d
                    break
            if first:
                err.update({"lineno": first["lineno"], "col": first["col"], "file": first["file"]})
    # ptxas's messages point into Triton's temporary .ptx: rung parses them and maps them back
    # through the .loc directives of that PTX, which Triton printed to the log and which is saved
    # beside them (failed_ptx), as it does nvcc's.
    text = "\n".join(x for x in (log, str(e)) if x)
    if "ptxas" in text:
        pm = _PTX_IN_LOG_RE.search(log or "")
        if pm:
            err["failed_ptx"] = pm.group(1).rstrip("\n") + "\n"
        err["ptxas_log"] = _tail(text)
    if log:
        err["log"] = _tail(log)
    return err
