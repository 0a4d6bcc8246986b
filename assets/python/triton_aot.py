#!/usr/bin/env python3
"""Ahead-of-time compile the Triton kernels of a rung version file, with no GPU.

    python triton_aot.py --version-file versions/v003.py --arch 90 --out DIR \
        [--launch-json JSON_OR_PATH] [--signature-json JSON_OR_PATH] [--kernel NAME ...]

The version module is imported from its path. With --launch-json its `run(...)`
wrapper is called with fake tensors and every launch it makes is compiled exactly as
Triton would specialize it (see below); without it, or when run() fails, every
`@triton.jit` function defined in it that is not only a helper called from another
jit function is compiled with

    triton.compile(ASTSource(fn, signature, constexprs, attrs),
                   target=GPUTarget("cuda", ARCH, 32), options={...})

`--signature-json` is a JSON object (or the path of a file holding one):

    {"rmsnorm_kernel": {"signature": {"x_ptr": "*fp32", "n_cols": "i32", "eps": "fp32"},
                        "constexprs": {"BLOCK_SIZE": 1024},
                        "num_warps": 4, "num_stages": 3,
                        "options": {"maxnreg": 128},          # optional, passed to triton.compile
                        "divisible_by_16": ["x_ptr", "stride"]}}  # optional, default: all pointers

Types are Triton's ("*fp32", "*bf16", "fp32", "i32", "i64", "constexpr"); rung's dtype
names ("f32", "*f16", "bf16", "f8e4m3", ...) are accepted too.

Parameters missing from it are taken, in this order, from: literal keyword arguments
of the `kernel[grid](...)` launch in the file (BLOCK=1024, num_warps=8), the first
@triton.autotune config, the parameter's default, its annotation, its name. Every
guess is listed in the kernel's "notes" and makes "inferred" true; a kernel with no
entry at all is also named in "warnings".

Jit functions called from another jit function of the file (helpers) are skipped
(listed in "skipped") unless launched, named in --signature-json or --kernel.

`--launch-json` is a JSON object (or the path of a file holding one) giving run()'s
arguments by name; other top-level keys (e.g. "sizes") are echoed in "launch":

    {"args": {"x":    {"tensor": {"dtype": "f32", "shape": [16384, 8192]}},
              "eps":  {"value": 1e-06},
              "rows": {"value": 16384}},
     "sizes": {"rows": 16384, "cols": 8192}}

dtypes are rung's (f64 f32 f16 bf16 f8e4m3 f8e5m2 i8 i16 i32 i64 u8 u16 u32 u64 bool;
torch spellings accepted); a tensor may add "stride" (elements) and "offset" (elements
from a 512-byte aligned fake address); a value may add "dtype" to force int/float/bool.
Tensors are FakeTensor objects (no torch, no memory): data_ptr() is a distinct 512-byte
aligned fake address, dtype prints as "torch.<name>", plus shape, stride(), numel(),
element_size(), device ("cuda:0") and friends. While run(**args) runs, Triton's own
JITFunction.run binds the arguments (its specialization: pointer dtypes, 16-byte
alignment, integers equal to 1 or divisible by 16), evaluates heuristics and the grid
and parses the options; only JITFunction._do_compile (recording signature, constexprs,
attrs, options) and the kernel's launch (recording the grid) are replaced, and the
active driver is a stand-in (device 0, stream 0, the --arch target). @triton.autotune
is not timed: every (pruned) config is captured. Each distinct specialization (Triton's
own cache key) is compiled with the same ASTSource/compile call as _do_compile; a
second one of the same kernel is named <kernel>__2, ... Its entry has "captured": true,
"grid" (and "grids" when launches differ), "launches", "launched_at" (version-file
lines), "divisible_by_16", "equal_to_1", "autotune" when it applies, and no guessed
notes. Kernels run() never launched are listed in "skipped". If run() raises (or
launches nothing) the inference above is used and "warnings" says why, with the
version-file line; "launch" holds {"captured", "launches"} or the "error".

Per kernel it writes DIR/<kernel>/<kernel>.{ttir,ttgir,llir,ptx,cubin} (plus any
other stage the installed Triton produces, e.g. .source), <kernel>.sass when
nvdisasm (`-c -g`, with version-file line info) or cuobjdump is found next to
TRITON_PTXAS_PATH / TRITON_PTXAS_BLACKWELL_PATH, on PATH or in Triton's bin/,
<kernel>.ptxas.txt (the `ptxas -v` report: registers, spills, stack, barriers) and
meta.json. Registers come from `cuobjdump --dump-resource-usage` of the cubin when
available.

stdout carries exactly one JSON object:
    {"version_file", "target", "triton_version", "python", "out", "tools", "launch",
     "kernels": [{"name", "kernel_name", "files": {ext: path}, "num_warps", "num_stages",
                  "num_ctas", "shared", "registers", "spill_stores", "spill_loads",
                  "stack_frame", "barriers", "gpu_name", "target", "signature",
                  "constexprs", "inferred", "notes", "captured", "grid", ...}],
     "skipped": [{"name", "reason"}], "warnings": [str],
     "errors": [{"kernel", "type", "message", "traceback", "lineno", "col", "file", ...}]}
Error types: SyntaxError / ImportError (importing the version file; lineno in it),
CompilationError (Triton front end; lineno mapped from Triton's function-relative
"at L:C" to the version file, "chain" lists call sites through helpers), PTXASError
and other backend errors ("ptxas" maps each ptxas message through the PTX .loc
directives to the version file; the rejected PTX is saved as <kernel>.failed.ptx),
CompilerCrash (the compiler process died; the remaining kernels are still compiled
by a fresh worker process), UsageError, NoKernelsFound, FileNotFoundError.
Everything Triton, ptxas or the version module print goes to stderr.
Exit status: 0 when every kernel compiled, 1 on any error (compilation, syntax,
import, crash), 2 on bad arguments.

Only `triton` and the standard library are used (no torch). Written for Python 3.9+
and Triton 3.x; the ASTSource/compile call is adapted to the installed version
(tested with Triton 3.6.0 and 3.9.0; 3.0-3.2 paths are best effort).
"""

import argparse
import ast
import inspect
import json
import operator
import os
import signal
import re
import shutil
import subprocess
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aot_common import (  # noqa: E402
    MAX_LOG_CHARS, JsonOut, _chain, _last_frame_in, _same_file, ptx_line_to_source, import_version)
from aot_common import LAST_LOG as _LAST_LOG, Capture as _Capture, format_exc as _format_exc, tail as _tail  # noqa: E402


triton = None
tl = None


def _json_default(o):
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, bytes):
        return "<%d bytes>" % len(o)
    if hasattr(o, "_asdict"):
        return o._asdict()
    if hasattr(o, "__dict__"):
        return {k: v for k, v in vars(o).items() if not k.startswith("_")}
    return str(o)


# Keep stdout clean for the single JSON object: from here on everything written to fd 1 goes
# to stderr, and the reply to the saved stdout (or, in the worker process, --_result's file).
_OUT = JsonOut(_json_default)
_emit, _progress = _OUT.emit, _OUT.progress


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
_INT_PREFIXES = ("stride", "n_", "num_", "len", "offset", "off_", "seq", "max_seqlen", "start", "end")
_FLOAT_NAMES = {"eps", "epsilon", "scale", "alpha", "beta", "sm_scale", "softmax_scale",
                "temperature", "momentum", "p_drop", "dropout_p", "negative_slope", "slope",
                "min_val", "max_val", "lr", "weight_decay", "inv_scale"}


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


_DIAG_RE = re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning|note|remark): ?(?P<msg>.*)$",
                      re.MULTILINE)


_PTXAS_MSG_RE = re.compile(r"^ptxas (?P<file>\S+), line (?P<line>\d+); (?P<sev>error|warning)\s*: (?P<msg>.*)$",
                           re.MULTILINE)
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
    # ptxas errors point into Triton's temporary .ptx; map them back through its .loc directives
    text = "\n".join(x for x in (log, str(e)) if x)
    pmsgs = []
    for m in _PTXAS_MSG_RE.finditer(text):
        item = (m.group("file"), int(m.group("line")), m.group("sev"), m.group("msg").strip())
        if item not in pmsgs:
            pmsgs.append(item)
    if pmsgs:
        pm = _PTX_IN_LOG_RE.search(log or "")
        ptx = pm.group(1).rstrip("\n") + "\n" if pm else None
        if ptx:
            err["failed_ptx"] = ptx
        out = []
        for f, line, sev, msg in pmsgs[:100]:
            d = {"ptx_file": f, "ptx_line": line, "severity": sev, "message": msg}
            loc = ptx_line_to_source(ptx, line) if ptx else None
            if loc:
                d.update({"file": loc[0], "lineno": loc[1], "col": loc[2] or None})
            out.append(d)
        err["ptxas"] = out
        if err["lineno"] is None:
            for d in out:
                if d["severity"] == "error" and d.get("file") and os.path.exists(d["file"]) \
                        and _same_file(d["file"], path):
                    err.update({"lineno": d["lineno"], "col": d.get("col"), "file": d["file"]})
                    break
    if log:
        err["log"] = _tail(log)
    return err


# --------------------------------------------------------------------------- tools


def _tool(name):
    env = os.environ.get("TRITON_%s_PATH" % name.upper())
    cands = [env] if env else []
    for k in ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH"):
        p = os.environ.get(k)
        if p:
            cands.append(os.path.join(os.path.dirname(p), name))
    w = shutil.which(name)
    if w:
        cands.append(w)
    if triton is not None:
        cands.append(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name))
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _ptxas_for(arch):
    try:
        from triton.backends.nvidia import compiler as nvc
        gp = getattr(nvc, "get_ptxas", None)
        if gp is not None:
            try:
                return gp(arch).path
            except TypeError:
                return gp().path
    except Exception:
        pass
    try:
        from triton import knobs
        return knobs.nvidia.ptxas.path
    except Exception:
        pass
    return os.environ.get("TRITON_PTXAS_PATH") or _tool("ptxas")


def _run(cmd, timeout=300):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, str(e)


_PTXAS_PATTERNS = {
    "registers": r"Used (\d+) registers",
    "barriers": r"used (\d+) barriers",
    "smem_static": r"(\d+) bytes smem",
    "stack_frame": r"(\d+) bytes stack frame",
    "spill_stores": r"(\d+) bytes spill stores",
    "spill_loads": r"(\d+) bytes spill loads",
}


def parse_ptxas_v(text):
    out = {}
    for k, pat in _PTXAS_PATTERNS.items():
        m = re.search(pat, text or "")
        if m:
            out[k] = int(m.group(1))
    return out


# --------------------------------------------------------------------------- compile


def _ast_source_kwargs(jf, signature, constexprs, attrs):
    """Build ASTSource(...) arguments for the installed Triton version."""
    params = inspect.signature(triton.compiler.ASTSource.__init__).parameters
    if "constexprs" in params:  # Triton >= 3.3 (3.6, 3.9 ...): names in signature, "constexpr" type
        return dict(fn=jf, signature=dict(signature), constexprs=dict(constexprs), attrs=attrs)
    # Triton 3.0 - 3.2 ("constants"): best effort, untested
    arg_names = list(getattr(jf, "arg_names", [])) or list(signature)
    try:
        src_text = inspect.getsource(triton.compiler.ASTSource.__init__)
    except (OSError, TypeError):
        src_text = ""
    if "must be integers" in src_text or "isinstance(k, int)" in src_text:  # 3.0 / 3.1
        sig = {arg_names.index(k): v for k, v in signature.items() if v != "constexpr"}
        cst = {arg_names.index(k): v for k, v in constexprs.items()}
        return dict(fn=jf, signature=sig, constants=cst)
    return dict(fn=jf, signature=dict(signature), constants=dict(constexprs))  # 3.2


def _attrs_for(jf, signature, divisible, backend):
    params = inspect.signature(triton.compiler.ASTSource.__init__).parameters
    if "constexprs" not in params:
        return None
    names = list(signature)
    try:
        desc = backend.parse_attr("D") if backend is not None and hasattr(backend, "parse_attr") else None
    except Exception:
        desc = None
    if not desc:
        desc = [["tt.divisibility", 16]]
    return {(names.index(n),): desc for n in divisible if n in names}


def prepare(name, wrappers, jf, spec, defaults, launch=None):
    """Signature, constexprs, options for one kernel. Returns dict with 'notes' of every guess."""
    notes = []
    spec = spec or {}
    sig_in = {k: normalize_type(v) for k, v in (spec.get("signature") or {}).items()}
    cst_in = {k: _constexpr_value(v) for k, v in (spec.get("constexprs") or {}).items()}
    num_warps = spec.get("num_warps")
    num_stages = spec.get("num_stages")
    options = dict(spec.get("options") or {})
    launch_kw = dict((launch or {}).get("kwargs") or {})
    launch_line = (launch or {}).get("line")
    if num_warps is None and isinstance(launch_kw.get("num_warps"), int):
        num_warps = launch_kw["num_warps"]
        notes.append("num_warps=%d (literal in the launch at line %s)" % (num_warps, launch_line))
    if num_stages is None and isinstance(launch_kw.get("num_stages"), int):
        num_stages = launch_kw["num_stages"]
        notes.append("num_stages=%d (literal in the launch at line %s)" % (num_stages, launch_line))

    # autotune / heuristics wrappers
    cfg_kwargs = {}
    for w in wrappers:
        configs = getattr(w, "configs", None)
        if configs:
            c = configs[0]
            cfg_kwargs.update(getattr(c, "kwargs", {}) or {})
            if num_warps is None and getattr(c, "num_warps", None):
                num_warps = c.num_warps
            if num_stages is None and getattr(c, "num_stages", None) is not None:
                num_stages = c.num_stages
            for opt in ("num_ctas", "maxnreg"):
                v = getattr(c, opt, None)
                if v is not None and opt not in options:
                    options[opt] = v
            notes.append("@triton.autotune: using config 0 of %d (%s)" % (len(configs), c))
        if getattr(w, "values", None) and isinstance(w.values, dict):
            notes.append("@triton.heuristics for %s not evaluated (needs runtime args); "
                         "values come from --signature-json or defaults" % sorted(w.values))
    if num_warps is None:
        num_warps = defaults["num_warps"]
        notes.append("num_warps=%d (default)" % num_warps)
    if num_stages is None:
        num_stages = defaults["num_stages"]
        notes.append("num_stages=%d (default)" % num_stages)

    sig = inspect.signature(jf.fn)
    constexpr_idx = set(getattr(jf, "constexprs", []) or [])
    signature, constexprs = {}, {}
    unknown = set(sig_in) | set(cst_in)
    for i, (pname, p) in enumerate(sig.parameters.items()):
        unknown.discard(pname)
        ann = p.annotation
        is_cx = i in constexpr_idx or "constexpr" in str(ann) or sig_in.get(pname) == "constexpr" \
            or pname in cst_in
        if is_cx:
            signature[pname] = "constexpr"
            if pname in cst_in:
                constexprs[pname] = cst_in[pname]
            elif pname in cfg_kwargs:
                constexprs[pname] = cfg_kwargs[pname]
            elif pname in launch_kw:
                constexprs[pname] = launch_kw[pname]
                notes.append("constexpr %s=%r (literal in the launch at line %s)"
                             % (pname, launch_kw[pname], launch_line))
            elif p.default is not inspect.Parameter.empty:
                d = p.default
                constexprs[pname] = getattr(d, "value", d)
                notes.append("constexpr %s=%r (parameter default)" % (pname, constexprs[pname]))
            else:
                constexprs[pname] = infer_constexpr(pname, num_warps)
                notes.append("constexpr %s=%r (guessed from the name)" % (pname, constexprs[pname]))
        else:
            if pname in sig_in:
                signature[pname] = sig_in[pname]
            else:
                t, why = infer_arg_type(pname, ann)
                signature[pname] = t
                notes.append("%s: %s (%s)" % (pname, t, why))
    if unknown:
        notes.append("ignored names not in the kernel's parameters: %s" % sorted(unknown))
    if "divisible_by_16" in spec:
        divisible = list(spec["divisible_by_16"] or [])
    else:
        divisible = [k for k, v in signature.items() if v.startswith("*")]
    options.update({"num_warps": int(num_warps), "num_stages": int(num_stages)})
    return {"signature": signature, "constexprs": constexprs, "options": options,
            "divisible_by_16": divisible, "notes": notes}


def _metadata_dict(md):
    if hasattr(md, "_asdict"):
        d = dict(md._asdict())
    elif isinstance(md, dict):
        d = dict(md)
    else:
        d = {k: v for k, v in vars(md).items() if not k.startswith("_")}
    t = d.get("target")
    if t is not None and not isinstance(t, dict):
        d["target"] = {"backend": getattr(t, "backend", None), "arch": getattr(t, "arch", None),
                       "warp_size": getattr(t, "warp_size", None)}
    return json.loads(json.dumps(d, default=_json_default))


def clean_kernel_dir(out_dir, name):
    """Remove what an earlier run left for this kernel (so a failed build leaves no stale IR)."""
    kdir = os.path.join(out_dir, name)
    if not os.path.isdir(kdir):
        return
    for f in os.listdir(kdir):
        if f == "meta.json" or f.startswith(name + "."):
            try:
                os.remove(os.path.join(kdir, f))
            except OSError:
                pass


def compile_kernel(name, jf, prep, target, out_dir, tools):
    backend = None
    try:
        from triton.compiler.compiler import make_backend
        backend = make_backend(target)
    except Exception:
        pass
    if prep.get("ast") is not None:
        # a captured launch: the same ASTSource / compile call as JITFunction._do_compile
        sig, cst, attrs = prep["ast"]
        with _Capture() as cap:
            src = triton.compiler.ASTSource(jf, dict(sig), dict(cst), dict(attrs))
            compiled = triton.compile(src, target=target, options=dict(prep["options"]))
    else:
        attrs = _attrs_for(jf, prep["signature"], prep["divisible_by_16"], backend)
        kw = _ast_source_kwargs(jf, prep["signature"], prep["constexprs"], attrs)
        if kw.get("attrs") is None:
            kw.pop("attrs", None)
        with _Capture() as cap:
            src = triton.compiler.ASTSource(**kw)
            compiled = triton.compile(src, target=target, options=dict(prep["options"]))
    log = cap.text

    kdir = os.path.join(out_dir, name)
    os.makedirs(kdir, exist_ok=True)
    files = {}
    asm = compiled.asm
    for ext in list(dict.keys(asm)):
        data = dict.__getitem__(asm, ext)
        fp = os.path.join(kdir, "%s.%s" % (name, ext))
        if isinstance(data, (bytes, bytearray)):
            with open(fp, "wb") as f:
                f.write(data)
        else:
            with open(fp, "w") as f:
                f.write(data if isinstance(data, str) else str(data))
        files[ext] = os.path.abspath(fp)

    md = _metadata_dict(compiled.metadata)
    ptx = dict.get(asm, "ptx", "") or ""
    m = re.search(r"^\s*\.target\s+(\w+)", ptx, re.MULTILINE)
    gpu_name = m.group(1) if m else None
    notes = list(prep["notes"])

    # resources: the ptxas -v report Triton printed (TRITON_DUMP_PTXAS_LOG), else run ptxas -v ourselves
    res = parse_ptxas_v(log)
    ptxas_report = None
    if "registers" in res:
        ptxas_report = "\n".join(l for l in log.splitlines() if l.startswith("ptxas") or "bytes stack frame" in l)
        res["source"] = "ptxas -v (Triton's own ptxas run)"
    elif ptx and gpu_name:
        ptxas = _ptxas_for(target.arch)
        if ptxas:
            with tempfile.TemporaryDirectory() as td:
                pf = os.path.join(td, name + ".ptx")
                with open(pf, "w") as f:
                    f.write(ptx)
                cmd = [ptxas, "-v", "-lineinfo", "--gpu-name=%s" % gpu_name]
                if not md.get("enable_fp_fusion", True):
                    cmd.append("--fmad=false")
                if md.get("ptx_options"):
                    cmd += str(md["ptx_options"]).split()
                cmd += [pf, "-o", os.path.join(td, name + ".cubin")]
                rc, text = _run(cmd)
            ptxas_report = text.replace(td + os.sep, "")
            res = parse_ptxas_v(text)
            res["source"] = "ptxas -v re-run on the PTX: " + " ".join(
                os.path.basename(c) if c.startswith(td) else c for c in cmd)
    if ptxas_report:
        fp = os.path.join(kdir, "%s.ptxas.txt" % name)
        with open(fp, "w") as f:
            f.write(ptxas_report.rstrip("\n") + "\n")
        files["ptxas"] = os.path.abspath(fp)

    cubin_path = files.get("cubin")
    if cubin_path and tools.get("cuobjdump"):
        rc, text = _run([tools["cuobjdump"], "--dump-resource-usage", cubin_path])
        m2 = re.search(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)", text)
        if rc == 0 and m2:
            res["registers"] = int(m2.group(1))  # exact: read from the cubin Triton produced
            res["cubin_resource_usage"] = {"REG": int(m2.group(1)), "STACK": int(m2.group(2)),
                                           "SHARED": int(m2.group(3)), "LOCAL": int(m2.group(4))}
    sass_tool = None
    if cubin_path:
        text, rc = None, -1
        if tools.get("nvdisasm"):
            rc, text = _run([tools["nvdisasm"], "-c", "-g", cubin_path])
            sass_tool = "nvdisasm -c -g"
        if rc != 0 and tools.get("cuobjdump"):
            rc, text = _run([tools["cuobjdump"], "--dump-sass", cubin_path])
            sass_tool = "cuobjdump --dump-sass"
        if rc == 0 and text:
            fp = os.path.join(kdir, "%s.sass" % name)
            with open(fp, "w") as f:
                f.write(text)
            files["sass"] = os.path.abspath(fp)
        else:
            sass_tool = None
            notes.append("no SASS: nvdisasm/cuobjdump not found or failed")

    shared = md.get("shared")
    entry = {
        "name": name,
        "kernel_name": md.get("name", name),
        "files": files,
        "num_warps": md.get("num_warps", prep["options"]["num_warps"]),
        "num_stages": md.get("num_stages", prep["options"]["num_stages"]),
        "num_ctas": md.get("num_ctas"),
        "shared": shared,
        "registers": res.get("registers"),
        "spill_stores": res.get("spill_stores"),
        "spill_loads": res.get("spill_loads"),
        "stack_frame": res.get("stack_frame"),
        "barriers": res.get("barriers"),
        "gpu_name": gpu_name,
        "target": md.get("target"),
        "signature": prep["signature"],
        "constexprs": {k: (str(v) if not isinstance(v, (int, float, bool, str, type(None))) else v)
                       for k, v in prep["constexprs"].items()},
        "inferred": prep.get("inferred", bool(prep["notes"])),
        "notes": notes,
        "captured": prep.get("captured") is not None,
    }
    rec = prep.get("captured")
    if rec is not None:
        entry["function"] = jf.fn.__name__
        entry["grid"] = rec["grids"][0] if rec["grids"] else None
        if len(rec["grids"]) > 1:
            entry["grids"] = rec["grids"]
        entry["launches"] = rec["launches"]
        entry["launched_at"] = rec["lines"]
        entry["divisible_by_16"] = prep["divisible_by_16"]
        entry["equal_to_1"] = prep["equal_to_1"]
        if rec.get("autotune"):
            entry["autotune"] = rec["autotune"]
    for extra in ("tmem_size", "global_scratch_size", "profile_scratch_size", "maxnreg", "hash"):
        if extra in md:
            entry[extra] = md[extra]
    meta = dict(entry)
    meta.update({"triton_version": getattr(triton, "__version__", None),
                 "resources": res, "sass_tool": sass_tool, "options": prep["options"],
                 "divisible_by_16": prep["divisible_by_16"], "triton_metadata": md})
    fp = os.path.join(kdir, "meta.json")
    with open(fp, "w") as f:
        json.dump(meta, f, indent=2, default=_json_default)
    entry["files"]["meta"] = os.path.abspath(fp)
    return entry


# --------------------------------------------------------------------------- launch capture
#
# With --launch-json the version's run(...) wrapper is called with fake tensors (no torch, no
# GPU memory) while Triton's own launch path runs up to the point where it would compile:
# JITFunction.run binds the arguments with Triton's binder (create_function_from_signature ->
# native_specialize_impl: pointer dtype, 16-byte alignment of data_ptr(), integers equal to 1
# or divisible by 16), evaluates the grid, parses the options (num_warps, num_stages, ...) and
# packs signature / constexprs / attrs (JITFunction._pack_args). Only JITFunction._do_compile
# (which would compile) and the kernel it returns (whose .run would launch) are replaced, and
# the active driver is a stand-in answering device 0, stream 0 and the --arch target.

# rung dtype -> (torch-style name, element size). Triton reads a tensor's dtype through
# triton._utils.canonicalize_dtype: str(dtype).split(".")[-1], so "torch.float32" -> fp32.
_RUNG_DTYPES = {
    "f64": ("float64", 8), "f32": ("float32", 4), "f16": ("float16", 2), "bf16": ("bfloat16", 2),
    "f8e4m3": ("float8_e4m3fn", 1), "f8e5m2": ("float8_e5m2", 1),
    "i8": ("int8", 1), "i16": ("int16", 2), "i32": ("int32", 4), "i64": ("int64", 8),
    "u8": ("uint8", 1), "u16": ("uint16", 2), "u32": ("uint32", 4), "u64": ("uint64", 8),
    "bool": ("bool", 1),
}
_TORCH_TO_RUNG = {v[0]: k for k, v in _RUNG_DTYPES.items()}
_TORCH_TO_RUNG.update({"float": "f32", "half": "f16", "double": "f64", "int": "i32", "long": "i64",
                       "short": "i16", "fp32": "f32", "fp16": "f16", "fp64": "f64", "fp8e4nv": "f8e4m3",
                       "fp8e5": "f8e5m2", "u1": "bool", "i1": "bool"})


def _rung_dtype(name):
    s = str(name).strip()
    for p in ("torch.", "tl.", "triton.language."):
        if s.startswith(p):
            s = s[len(p):]
    if s in _RUNG_DTYPES:
        return s
    if s.lower() in _TORCH_TO_RUNG:
        return _TORCH_TO_RUNG[s.lower()]
    raise ValueError("unknown dtype %r (want one of %s)" % (name, " ".join(sorted(_RUNG_DTYPES))))


class FakeDType(object):
    """Stands for torch.<name>: str() is what Triton canonicalizes, == accepts the usual spellings."""

    def __init__(self, rung):
        self.rung = rung
        self.name, self.itemsize = _RUNG_DTYPES[rung]
        self.is_floating_point = rung.startswith(("f", "bf"))
        self.is_signed = rung.startswith(("i", "f", "bf"))

    def __str__(self):
        return "torch." + self.name

    __repr__ = __str__

    def __hash__(self):
        return hash(("rung-fake-dtype", self.name))

    def __eq__(self, other):
        if isinstance(other, FakeDType):
            return other.name == self.name
        try:
            return _rung_dtype(other if isinstance(other, str) else str(other)) == self.rung
        except ValueError:
            return False

    def __ne__(self, other):
        return not self.__eq__(other)

    def to_tl(self):
        return getattr(tl, {"float8_e4m3fn": "float8e4nv", "float8_e5m2": "float8e5",
                            "bool": "int1"}.get(self.name, self.name))


class FakeDevice(object):
    type = "cuda"
    index = 0

    def __str__(self):
        return "cuda:0"

    __repr__ = __str__

    def __eq__(self, other):
        return str(other) in ("cuda", "cuda:0")

    def __hash__(self):
        return hash("cuda:0")


class FakeSize(tuple):
    def numel(self):
        n = 1
        for d in self:
            n *= int(d)
        return n


class FakeTensor(object):
    """What Triton's launch path asks of a tensor (data_ptr(), dtype) plus the torch.Tensor basics
    a run() wrapper tends to read (shape, stride(), numel(), element_size(), device, ...).
    Holds no memory: data_ptr() is a made-up, 512-byte aligned address."""

    def __init__(self, dtype, shape, ptr, strides=None, name=None):
        self.dtype = dtype
        self.shape = FakeSize(int(d) for d in shape)
        self._ptr = int(ptr)
        self._strides = tuple(int(s) for s in strides) if strides is not None else _contiguous(self.shape)
        self.device = FakeDevice()
        self.is_cuda = True
        self.requires_grad = False
        self.name = name

    def data_ptr(self):
        return self._ptr

    def stride(self, dim=None):
        return self._strides if dim is None else self._strides[dim]

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return len(self.shape)

    ndimension = dim

    @property
    def ndim(self):
        return len(self.shape)

    def numel(self):
        return self.shape.numel()

    nelement = numel

    def element_size(self):
        return self.dtype.itemsize

    @property
    def itemsize(self):
        return self.dtype.itemsize

    @property
    def nbytes(self):
        return self.numel() * self.dtype.itemsize

    def is_contiguous(self, *a, **k):
        return self._strides == _contiguous(self.shape)

    def contiguous(self, *a, **k):
        return self

    def storage_offset(self):
        return 0

    def __len__(self):
        return self.shape[0]

    def _like(self, shape, dtype=None):
        return _FAKE_ALLOC[0].tensor(dtype or self.dtype, shape)

    def view(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        if len(shape) == 1 and isinstance(shape[0], FakeDType):
            raise TypeError("view(dtype) is not supported on a rung fake tensor")
        shape = _resolve_shape(shape, self.numel())
        return FakeTensor(self.dtype, shape, self._ptr, name=self.name)

    reshape = view

    def flatten(self, *a):
        return FakeTensor(self.dtype, (self.numel(),), self._ptr, name=self.name)

    def new_empty(self, size, dtype=None, **k):
        return self._like(size, dtype)

    new_zeros = new_ones = new_empty

    def zero_(self):
        return self

    def fill_(self, *a):
        return self

    def __repr__(self):
        return "FakeTensor(%s, shape=%s, dtype=%s, data_ptr=0x%x)" % (self.name, list(self.shape), self.dtype,
                                                                      self._ptr)


def _contiguous(shape):
    strides, acc = [], 1
    for d in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(strides))


def _resolve_shape(shape, numel):
    shape = [int(d) for d in shape]
    if shape.count(-1) == 1:
        rest = 1
        for d in shape:
            if d != -1:
                rest *= d
        shape[shape.index(-1)] = numel // rest if rest else 0
    return tuple(shape)


class _FakeAllocator(object):
    """Hands out distinct, non-overlapping fake device addresses, 512-byte aligned like PyTorch's
    CUDA caching allocator (so divisible by 16: Triton specializes them as aligned)."""
    BASE = 0x7F0000000000
    ALIGN = 512

    def __init__(self):
        self.next = self.BASE

    def tensor(self, dtype, shape, strides=None, offset=0, name=None):
        if not isinstance(dtype, FakeDType):
            dtype = FakeDType(_rung_dtype(dtype))
        shape = tuple(int(d) for d in shape)
        if strides is not None:
            extent = 1 + sum((d - 1) * abs(int(s)) for d, s in zip(shape, strides) if d > 0)
        else:
            extent = FakeSize(shape).numel()
        ptr = self.next + int(offset) * dtype.itemsize
        nbytes = max(extent + int(offset), 1) * dtype.itemsize
        self.next += (nbytes + self.ALIGN - 1) // self.ALIGN * self.ALIGN
        return FakeTensor(dtype, shape, ptr, strides, name)


_FAKE_ALLOC = [_FakeAllocator()]


def load_launch_json(v):
    """--launch-json text or path -> {"args": {...}, ...}; raises ValueError."""
    text = v
    if not v.lstrip().startswith("{"):
        if not os.path.isfile(v):
            raise ValueError("--launch-json: not a JSON object and no such file: %s" % v)
        with open(v) as f:
            text = f.read()
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise ValueError("--launch-json: bad JSON: %s" % e)
    if not isinstance(obj, dict) or not isinstance(obj.get("args"), dict):
        raise ValueError('--launch-json must be a JSON object {"args": {name: {"tensor": {"dtype", "shape"}} '
                         'or {"value": number}}}')
    for name, a in obj["args"].items():
        if isinstance(a, dict) and "tensor" in a:
            t = a["tensor"]
            if not isinstance(t, dict) or "dtype" not in t or not isinstance(t.get("shape"), list):
                raise ValueError("--launch-json: args.%s.tensor needs \"dtype\" and a \"shape\" list" % name)
            try:
                _rung_dtype(t["dtype"])
            except ValueError as e:
                raise ValueError("--launch-json: args.%s.tensor.dtype: %s" % (name, e))
            if any(not isinstance(d, int) or d < 0 for d in t["shape"]):
                raise ValueError("--launch-json: args.%s.tensor.shape must hold non-negative integers" % name)
        elif isinstance(a, dict) and "value" in a:
            if a.get("dtype") is not None:
                try:
                    _rung_dtype(a["dtype"])
                except ValueError as e:
                    raise ValueError("--launch-json: args.%s.dtype: %s" % (name, e))
        elif isinstance(a, dict):
            raise ValueError("--launch-json: args.%s needs \"tensor\" or \"value\"" % name)
    return obj


def build_run_args(obj):
    """Keyword arguments for run(...): fake tensors (in the JSON's order) and Python scalars."""
    _FAKE_ALLOC[0] = _FakeAllocator()
    out = {}
    for name, a in obj["args"].items():
        if isinstance(a, dict) and "tensor" in a:
            t = a["tensor"]
            out[name] = _FAKE_ALLOC[0].tensor(t["dtype"], t["shape"], t.get("stride"), t.get("offset", 0), name)
            continue
        v = a["value"] if isinstance(a, dict) else a
        dt = a.get("dtype") if isinstance(a, dict) else None
        if dt is not None and v is not None:
            r = _rung_dtype(dt)
            v = bool(v) if r == "bool" else float(v) if r.startswith(("f", "bf")) else int(v)
        out[name] = v
    return out


class _FakeDriver(object):
    """Stand-in for triton.runtime.driver.active while run() is called: no CUDA needed."""

    def __init__(self, target):
        self._target = target

    def get_current_device(self):
        return 0

    def set_current_device(self, device):
        pass

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self._target

    def get_active_torch_device(self):
        return FakeDevice()

    def get_device_interface(self):
        raise RuntimeError("no GPU: triton_aot.py --launch-json does not run kernels")

    def get_benchmarker(self):
        def bench(*a, **k):
            raise RuntimeError("no GPU: triton_aot.py --launch-json cannot benchmark")
        return bench

    def is_active(self):
        return True


_AUTOTUNE_CTX = [None]
_RUN_MARK = "run()"  # the worker's "current" while the wrapper runs, so the supervisor can name a crash in it


class _CapturedKernel(object):
    """Returned in place of a CompiledKernel: its run(...) records the launch instead of doing it."""
    function = None
    packed_metadata = None

    def __init__(self, rec, path):
        self.rec = rec
        self._path = path

    def launch_metadata(self, *args, **kwargs):
        return None

    def run(self, grid_0, grid_1, grid_2, *rest):
        rec = self.rec
        try:  # the real launcher takes integers only
            grid = [operator.index(g) for g in (grid_0, grid_1, grid_2)]
        except TypeError:
            raise TypeError("grid must hold integers, got (%r, %r, %r)" % (grid_0, grid_1, grid_2))
        rec["launches"] += 1
        if grid not in rec["grids"] and len(rec["grids"]) < 16:
            rec["grids"].append(grid)
        if rec["launches"] > 64:  # the launch sites of a long loop are known by now
            return
        fs = None
        for f in traceback.extract_stack():
            if f.filename and _same_file(f.filename, self._path):
                fs = f
        if fs is not None and fs.lineno not in rec["lines"]:
            rec["lines"].append(fs.lineno)


def capture_launches(mod, launch, target, path):
    """Call mod.run(**args) with fake tensors; returns (records, None) or (None, problem dict).

    One record per distinct compilation Triton would do (its own cache key), in launch order:
    {"jf", "key", "signature", "constexprs", "attrs", "options", "grids", "launches", "lines", ...}."""
    from triton.runtime import jit as jitmod
    JITFunction = jitmod.JITFunction
    run_fn = getattr(mod, "run", None)
    if not callable(run_fn):
        return None, {"message": "the version file defines no run(...) function"}
    if not hasattr(JITFunction, "_do_compile") or not hasattr(jitmod, "driver"):
        return None, {"message": "capturing launches is not supported with Triton %s (no JITFunction._do_compile)"
                      % getattr(triton, "__version__", "?")}
    try:
        kwargs = build_run_args(launch)
    except (ValueError, TypeError) as e:
        return None, {"message": "bad --launch-json arguments: %s" % e}
    dropped = []
    try:
        params = inspect.signature(run_fn).parameters
        if not any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values()):
            dropped = [k for k in kwargs if k not in params]
            kwargs = {k: v for k, v in kwargs.items() if k in params}
    except (TypeError, ValueError):
        pass

    records = []

    def fake_do_compile(self, key, signature, device, constexprs, options, attrs, *rest, **kw):
        rec = {"jf": self, "key": key, "signature": dict(signature), "constexprs": dict(constexprs),
               "attrs": dict(attrs or {}), "options": options, "grids": [], "launches": 0, "lines": [],
               "warmup": bool(rest[0]) if rest else bool(kw.get("warmup")),
               "autotune": dict(_AUTOTUNE_CTX[0]) if _AUTOTUNE_CTX[0] else None}
        records.append(rec)
        k = _CapturedKernel(rec, path)
        try:
            self.device_caches[device][0][key] = k  # Triton's kernel cache: an identical launch reuses it
        except Exception:
            pass
        return k

    Autotuner = None
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        pass

    def autotune_run(self, *args, **kw):
        # Real autotuning compiles every (pruned) config and times it on the GPU; here each config
        # is captured (and later compiled), none is timed. A single config is used as is.
        self.nargs = dict(zip(self.arg_names, args))
        try:
            configs = list(self.configs)
            if len(configs) > 1:
                try:
                    configs = list(self.prune_configs(kw))
                except Exception as e:  # e.g. a perf_model needing the GPU
                    sys.stderr.write("triton_aot.py: autotune pruning failed (%s); capturing every config\n" % e)
            for i, cfg in enumerate(configs):
                _AUTOTUNE_CTX[0] = {"config_index": i, "configs": len(configs), "config": str(cfg),
                                    "all_configs": len(self.configs)}
                try:
                    self.fn.run(*args, **dict(kw, **cfg.all_kwargs()))
                finally:
                    _AUTOTUNE_CTX[0] = None
        finally:
            self.nargs = None

    drv = jitmod.driver
    saved_active = getattr(drv, "_active", None)
    saved_do_compile = JITFunction.__dict__.get("_do_compile")
    saved_autotune = Autotuner.__dict__.get("run") if Autotuner is not None else None
    problem = None
    try:
        drv.set_active(_FakeDriver(target))
        JITFunction._do_compile = fake_do_compile
        if Autotuner is not None:
            Autotuner.run = autotune_run
        # A wrapper that never returns must not hang the build: capture for at most
        # RUNG_CAPTURE_SECONDS (default 20), then fall back to inference.
        def _too_slow(signum, frame):
            raise TimeoutError("run() did not return within %s s with fake tensors" % limit)
        limit = int(os.environ.get("RUNG_CAPTURE_SECONDS", "20"))
        old_handler = signal.signal(signal.SIGALRM, _too_slow) if hasattr(signal, "SIGALRM") else None
        if old_handler is not None:
            signal.alarm(limit)
        try:
            with _Capture():
                run_fn(**kwargs)
        finally:
            if old_handler is not None:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, old_handler)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: B902 - anything raised by the wrapper
        fs = _last_frame_in(e.__traceback__, path)
        problem = {"type": type(e).__name__, "message": "%s: %s" % (type(e).__name__, e),
                   "lineno": fs.lineno if fs else None, "text": fs.line if fs else None,
                   "traceback": _tail(_format_exc(e))}
    finally:
        if saved_do_compile is not None:
            JITFunction._do_compile = saved_do_compile
        if Autotuner is not None and saved_autotune is not None:
            Autotuner.run = saved_autotune
        if hasattr(drv, "_active"):
            drv._active = saved_active
    if problem is not None:
        return None, problem
    if not records:
        return None, {"message": "run() launched no Triton kernel with these arguments"}
    for r in records:
        r["dropped_args"] = dropped
    return records, None


def warm_cache(version_file, launch, arch):
    """Compiles into Triton's cache (TRITON_CACHE_DIR) exactly what `run(**launch["args"])` would
    compile on a GPU of compute capability `arch`, without opening the GPU: run() is called with
    fake tensors (capture_launches), and each captured specialisation goes through the same
    ASTSource / triton.compile call as JITFunction._do_compile, so the GPU's own launch later
    finds it in the cache. rung's zygote calls this in its prewarm children. Returns how many
    kernels were compiled; raises when run() cannot be captured (the GPU run then compiles)."""
    global triton, tl
    import triton as _triton
    import triton.language as _tl
    import triton.compiler  # noqa: F401
    from triton.backends.compiler import GPUTarget
    triton, tl = _triton, _tl
    mod, err = import_version(version_file)
    if mod is None:
        raise RuntimeError(err.get("message") if err else "cannot import %s" % version_file)
    target = GPUTarget("cuda", int(arch), 32)
    records, problem = capture_launches(mod, launch, target, version_file)
    if problem is not None:
        raise RuntimeError(problem.get("message") or "run() could not be captured")
    for rec in records:
        opts = getattr(rec["options"], "__dict__", None)
        opts = dict(opts) if opts is not None else dict(rec["options"])
        src = triton.compiler.ASTSource(rec["jf"], dict(rec["signature"]), dict(rec["constexprs"]),
                                        dict(rec["attrs"]))
        triton.compile(src, target=target, options=opts)
    return len(records)


def _path_name(jf, path):
    names = list(getattr(jf, "arg_names", []))
    head = names[path[0]] if path and path[0] < len(names) else str(path[0] if path else "?")
    return head + "".join("[%d]" % i for i in path[1:])


def _plain(v):
    v = getattr(v, "value", v) if type(v).__name__ == "constexpr" else v
    if isinstance(v, (int, float, bool, str, type(None))):
        return v
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    return str(v)


def captured_prep(rec):
    """prepare()'s dict for a captured launch: exactly what Triton's JITFunction.run would compile."""
    jf = rec["jf"]
    params = list(getattr(jf, "params", []))
    declared_cx = {p.num for p in params if getattr(p, "is_constexpr", False)}
    constexprs, equal_to_1 = {}, []
    for path, v in rec["constexprs"].items():
        name = _path_name(jf, path)
        constexprs[name] = v
        if path and path[0] not in declared_cx:
            equal_to_1.append(name)  # a runtime argument Triton specialized away (an integer equal to 1)
    divisible = [_path_name(jf, p) for p, a in rec["attrs"].items()
                 if any(isinstance(x, (list, tuple)) and x and x[0] == "tt.divisibility" for x in (a or []))]
    opts = getattr(rec["options"], "__dict__", None)
    opts = dict(opts) if opts is not None else dict(rec["options"])
    notes = []
    if rec.get("autotune"):
        at = rec["autotune"]
        notes.append("@triton.autotune config %d of %d (%s): the autotuner times every config on the GPU "
                     "and launches the fastest; all are compiled here" % (at["config_index"] + 1, at["configs"],
                                                                         at["config"]))
    if rec["warmup"] and not rec["launches"]:
        notes.append("compiled by warmup() in run(), never launched")
    return {"signature": {k: (list(v) if isinstance(v, tuple) else v) for k, v in rec["signature"].items()},
            "constexprs": constexprs, "options": opts, "divisible_by_16": divisible, "equal_to_1": equal_to_1,
            "notes": notes, "inferred": False,
            "ast": (dict(rec["signature"]), dict(rec["constexprs"]), dict(rec["attrs"])), "captured": rec}


# --------------------------------------------------------------------------- main


def _parse_arch(s):
    m = re.match(r"^(?:sm_?|compute_?)?(\d{2,3})([af]?)$", str(s).strip().lower())
    if not m or not 70 <= int(m.group(1)) < 200:
        raise ValueError("bad --arch %r (want a compute capability such as 80, 90, 90a, sm_90a, 100)" % s)
    return int(m.group(1))


def _load_sig_json(v):
    if v is None:
        return {}
    text = v
    if not v.lstrip().startswith("{") and os.path.isfile(v):
        with open(v) as f:
            text = f.read()
    obj = json.loads(text)
    if not isinstance(obj, dict):
        raise ValueError("--signature-json must be a JSON object: kernel name -> spec")
    return obj


def main(argv=None):
    global triton, tl
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version-file", required=True)
    ap.add_argument("--arch", required=True, help="compute capability: 90, 90a, sm_90a, 100 ...")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--signature-json", default=None,
                    help="JSON object (or a file holding it): kernel -> {signature, constexprs, num_warps, num_stages}")
    ap.add_argument("--launch-json", default=None,
                    help='JSON object (or a file holding it): {"args": {name: {"tensor": {"dtype", "shape"}} | '
                         '{"value": v}}}; run(**args) is called with fake tensors and the launches it makes '
                         'are compiled exactly as Triton would specialize them')
    ap.add_argument("--kernel", action="append", default=None, help="only these kernels (repeatable)")
    ap.add_argument("--num-warps", type=int, default=4, help="default when not in --signature-json")
    ap.add_argument("--num-stages", type=int, default=3, help="default when not in --signature-json")
    ap.add_argument("--_result", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_skip", action="append", default=[], help=argparse.SUPPRESS)
    ap.add_argument("--_run_crash", default=None, help=argparse.SUPPRESS)
    usage_error = []
    ap.error = lambda msg: (usage_error.append(msg), sys.exit(2))
    raw = list(sys.argv[1:] if argv is None else argv)
    for i, a in enumerate(raw):  # known before parsing, so usage errors reach the supervisor too
        if a == "--_result" and i + 1 < len(raw):
            _OUT.result_path = raw[i + 1]
        elif a.startswith("--_result="):
            _OUT.result_path = a.split("=", 1)[1]

    result = {"version_file": None, "target": None, "triton_version": None, "python": sys.version.split()[0],
              "out": None, "kernels": [], "skipped": [], "warnings": [], "errors": []}
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        if e.code in (0, None):
            sys.exit(0)  # --help
        msg = usage_error[0] if usage_error else "bad command line"
        sys.stderr.write(ap.format_usage() + "triton_aot.py: error: %s\n" % msg)
        result["errors"].append({"kernel": None, "type": "UsageError", "message": msg,
                                 "traceback": None, "lineno": None})
        _emit(result, 2)
    _OUT.result_path = args._result or _OUT.result_path
    path = os.path.abspath(args.version_file)
    out_dir = os.path.abspath(args.out)
    result["version_file"], result["out"] = path, out_dir
    try:
        arch = _parse_arch(args.arch)
        specs = _load_sig_json(args.signature_json)
        launch = load_launch_json(args.launch_json) if args.launch_json is not None else None
    except ValueError as e:
        result["errors"].append({"kernel": None, "type": "UsageError", "message": str(e),
                                 "traceback": None, "lineno": None})
        _emit(result, 2)
    if not os.path.isfile(path):
        result["errors"].append({"kernel": None, "type": "FileNotFoundError",
                                 "message": "version file not found: %s" % path, "traceback": None, "lineno": None})
        _emit(result, 1)

    try:
        import triton as _triton
        import triton.language as _tl
        import triton.compiler  # noqa: F401
        from triton.backends.compiler import GPUTarget
        from triton.runtime.jit import JITFunction
    except Exception as e:
        result["errors"].append({"kernel": None, "type": "ImportError", "exception": type(e).__name__,
                                 "message": "cannot import triton: %s" % e, "traceback": _format_exc(e),
                                 "lineno": None})
        _emit(result, 1)
    triton, tl = _triton, _tl
    result["triton_version"] = getattr(triton, "__version__", None)
    target = GPUTarget("cuda", arch, 32)
    result["target"] = {"backend": "cuda", "arch": arch, "warp_size": 32}
    for k in ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH"):
        if os.environ.get(k):
            result.setdefault("ptxas", {})[k] = os.environ[k]
    os.environ.setdefault("TRITON_DUMP_PTXAS_LOG", "1")  # lets us read registers/spills from Triton's ptxas run

    mod, err = import_version(path)
    if err is not None:
        result["errors"].append(err)
        _emit(result, 1)

    with open(path) as f:
        file_lines = f.read().split("\n")
    found = find_kernels(mod, path, JITFunction)
    jit_by_name = {jf.fn.__name__: jf for _, _, jf in found}
    for name, obj in vars(mod).items():  # jit functions imported from elsewhere, for error mapping
        jf, _ = _unwrap(obj, JITFunction)
        if jf is not None:
            jit_by_name.setdefault(jf.fn.__name__, jf)

    # helpers: jit functions called from another jit function of the file
    used_by = {}
    for name, _, jf in found:
        for n in _names_used(_jit_src(jf)):
            if n != jf.fn.__name__:
                used_by.setdefault(n, []).append(name)
    launched = _launches(path)

    # --launch-json: call run(...) with fake tensors and take the launches it really makes
    captures = None
    if launch is not None:
        result["launch"] = {"sizes": launch.get("sizes"), "captured": False}
        if args._run_crash:  # an earlier worker died inside run(): don't call it again
            records, problem = None, {"type": "Crash", "message": args._run_crash}
        else:
            _progress(result, _RUN_MARK)
            records, problem = capture_launches(mod, launch, target, path)
        if problem is not None:
            where = ""
            if problem.get("lineno"):
                where = " (%s line %d: %s)" % (os.path.basename(path), problem["lineno"],
                                              (problem.get("text") or "").strip())
            result["warnings"].append("--launch-json: calling run() failed: %s%s; falling back to signatures "
                                      "inferred from the source" % (problem["message"], where))
            result["launch"]["error"] = problem
        else:
            captures = records
            result["launch"]["captured"] = True
            result["launch"]["launches"] = sum(r["launches"] for r in records)
            if records[0].get("dropped_args"):
                result["warnings"].append("--launch-json: run() takes no argument(s) %s; not passed"
                                          % ", ".join(records[0]["dropped_args"]))

    selected = []  # (name, wrappers, jitfn, prep or None)
    if captures is not None:
        public = {id(jf): name for name, _, jf in found}
        seen_names, captured_ids, warned = {}, set(), set()
        for rec in captures:
            jf = rec["jf"]
            captured_ids.add(id(jf))
            base = public.get(id(jf), jf.fn.__name__)
            seen_names[base] = seen_names.get(base, 0) + 1
            # one entry per distinct specialization; a second one of the same kernel is <kernel>__2
            name = base if seen_names[base] == 1 else "%s__%d" % (base, seen_names[base])
            if name in args._skip:
                continue
            if args.kernel and not {name, base, jf.fn.__name__} & set(args.kernel):
                result["skipped"].append({"name": name, "reason": "not in --kernel"})
                continue
            if base in specs and base not in warned:
                warned.add(base)
                result["warnings"].append("%s: --signature-json entry ignored: the launch was captured from run()"
                                          % base)
            try:
                prep = captured_prep(rec)
            except Exception as e:
                result["errors"].append({"kernel": name, "type": "SignatureError", "message": str(e),
                                         "traceback": _format_exc(e), "lineno": None})
                continue
            selected.append((name, (), jf, prep))
        for name, wrappers, jf in found:
            if id(jf) in captured_ids or name in args._skip:
                continue
            if (args.kernel and name in args.kernel) or name in specs:
                selected.append((name, wrappers, jf, None))
                result["warnings"].append("%s: never launched by run() with the --launch-json arguments; compiled "
                                          "because it is named on the command line / in --signature-json" % name)
                continue
            why = "never launched by run() with the --launch-json arguments"
            if name in used_by:
                why += " (helper called from %s)" % ", ".join(sorted(set(used_by[name])))
            result["skipped"].append({"name": name, "reason": why})
    else:
        for name, wrappers, jf in found:
            if name in args._skip:
                continue  # crashed the compiler in an earlier worker; the supervisor reports it
            if args.kernel:
                keep, why = name in args.kernel, "not in --kernel"
            elif name in specs or name in launched:
                keep, why = True, ""
            elif name in used_by:
                keep, why = False, "helper called from %s" % ", ".join(sorted(set(used_by[name])))
            else:
                keep, why = True, ""
            if keep:
                selected.append((name, wrappers, jf, None))
            else:
                result["skipped"].append({"name": name, "reason": why})
    for k in list(specs) + list(args.kernel or []):
        if k not in {n for n, _, _ in found}:
            result["warnings"].append("kernel %r (from the command line / --signature-json) is not a "
                                      "@triton.jit function of the version file" % k)
    if not selected and not args._skip:
        result["errors"].append({"kernel": None, "type": "NoKernelsFound",
                                 "message": "no @triton.jit kernel found in %s" % path,
                                 "traceback": None, "lineno": None})
        _emit(result, 1)

    tools = {"nvdisasm": _tool("nvdisasm"), "cuobjdump": _tool("cuobjdump")}
    result["tools"] = tools
    os.makedirs(out_dir, exist_ok=True)
    defaults = {"num_warps": args.num_warps, "num_stages": args.num_stages}
    for name, wrappers, jf, prep in selected:
        spec = specs.get(name) if prep is None else None
        if prep is None:
            try:
                prep = prepare(name, wrappers, jf, spec, defaults, launched.get(name))
            except Exception as e:
                result["errors"].append({"kernel": name, "type": "SignatureError", "message": str(e),
                                         "traceback": _format_exc(e), "lineno": None})
                continue
        if spec is None and prep.get("captured") is None:
            result["warnings"].append("%s: no entry in --signature-json; signature inferred: %s"
                                      % (name, "; ".join(prep["notes"]) or "from annotations"))
        _LAST_LOG[0] = ""
        _progress(result, name)
        clean_kernel_dir(out_dir, name)
        try:
            entry = compile_kernel(name, jf, prep, target, out_dir, tools)
            result["kernels"].append(entry)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # CompilationError, RuntimeError from MLIR passes / ptxas, ...
            if isinstance(e, SystemExit):
                e = RuntimeError("SystemExit(%r) during compilation" % (e.code,))
            err = build_error(name, e, _LAST_LOG[0], jit_by_name, path, file_lines)
            ptx = err.pop("failed_ptx", None)
            if ptx:  # the PTX ptxas rejected: its line numbers are the ones in err["ptxas"]
                kdir = os.path.join(out_dir, name)
                os.makedirs(kdir, exist_ok=True)
                fp = os.path.join(kdir, "%s.failed.ptx" % name)
                with open(fp, "w") as f:
                    f.write(ptx)
                err["files"] = {"failed_ptx": fp}
            err["signature"] = prep["signature"]
            err["constexprs"] = {k: (v if isinstance(v, (int, float, bool, str, type(None))) else str(v))
                                 for k, v in prep["constexprs"].items()}
            result["errors"].append(err)
    _emit(result, 1 if result["errors"] else 0)


def supervise(argv=None):
    """Run main() in a worker process so that a compiler crash (abort, segfault in MLIR/LLVM or
    ptxas' host code) still ends in one JSON object; the crashed kernel is reported and the
    remaining ones are compiled by a new worker."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") or a.startswith("--_") for a in argv):
        return main(argv)
    crashed = []
    with tempfile.TemporaryDirectory(prefix="triton_aot_") as td:
        res_path = os.path.join(td, "result.json")
        while True:
            cmd = [sys.executable, os.path.abspath(__file__)] + argv + ["--_result", res_path]
            for k in crashed:
                if k["kernel"] == _RUN_MARK:
                    cmd += ["--_run_crash", k["message"]]
                else:
                    cmd += ["--_skip", k["kernel"]]
            if os.path.exists(res_path):
                os.remove(res_path)
            # stream the worker's output to our stderr as it comes, keeping the tail for a crash report
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            tail = b""
            while True:
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    break
                os.write(2, chunk)
                tail = (tail + chunk)[-4 * MAX_LOG_CHARS:]
            p.stdout.close()
            rc = p.wait()
            log = tail.decode("utf-8", "replace")
            result = None
            if os.path.exists(res_path):
                try:
                    with open(res_path) as f:
                        result = json.load(f)
                except ValueError:
                    result = None
            if result is not None and result.get("done") and rc in (0, 1, 2):
                break
            current = (result or {}).get("current")
            if rc < 0:
                try:
                    import signal
                    how = "was killed by %s" % signal.Signals(-rc).name
                except (ValueError, AttributeError):
                    how = "was killed by signal %d" % -rc
            else:
                how = "exited with status %d without a result" % rc
            err = {"kernel": current, "type": "CompilerCrash",
                   "message": "the compiler process %s%s" % (how, " while compiling %s" % current if current else ""),
                   "traceback": None, "lineno": None, "log": _tail(log)}
            if current == _RUN_MARK:  # the wrapper killed it: the next worker falls back to inference
                err["message"] = "the process %s while run() was called with the --launch-json arguments" % how
            if current is None or any(c["kernel"] == current for c in crashed) or len(crashed) >= 64:
                result = result or {"version_file": None, "target": None, "triton_version": None,
                                    "python": sys.version.split()[0], "out": None, "kernels": [], "skipped": [],
                                    "warnings": [], "errors": []}
                result["errors"] = list(result.get("errors", [])) + [err]
                rc = 1
                break
            crashed.append(err)
    for k in ("done", "current", "exit_code"):
        result.pop(k, None)
    crashed = [c for c in crashed if c["kernel"] != _RUN_MARK]  # reported as a warning by the worker
    if crashed:
        result["errors"] = crashed + [e for e in result.get("errors", [])
                                      if not any(e.get("kernel") == c["kernel"] and e.get("type") == "CompilerCrash"
                                                 for c in crashed)]
        rc = max(rc, 1)
    _emit(result, rc)


if __name__ == "__main__":
    supervise()
