#!/usr/bin/env python3
"""Ahead-of-time compile the CuTe DSL functions of a rung version file, with no GPU.

    python cute_aot.py --version-file versions/v006.py --arch 90a --out DIR \
        [--signature-json JSON_OR_PATH] [--kernel NAME ...] ["--options=--opt-level 2"]
        [--no-lineinfo]

The version module is imported from its path (its `run(...)` wrapper is never
called). Every `@cute.jit` host function defined in it that is not only a helper
called from another CuTe function is compiled with fake tensors, no device needed:

    cute.compile(fn, make_fake_compact_tensor(cutlass.Float32, (sym_int32(),)), ...,
                 options="--gpu-arch sm_90a --keep-ptx --keep-cubin --dump-dir TMP
                          --generate-line-info")

(CUTE_DSL_ARCH is set to the target as well, so nothing probes for a GPU; the
MLIR is dumped through CUTE_DSL_KEEP=ir,ir-debug.) A `@cute.kernel` that no
`@cute.jit` function of the file launches is compiled through a generated
launcher (grid (1,1,1), block from --signature-json "block", default (128,1,1)).
`@cute.jit` methods of classes defined in the file ("Cls.__call__", ...) are
compiled on an instance made with the "init" keyword arguments of their entry
(none by default).

`--signature-json` is a JSON object (or the path of a file holding one):
function name -> {parameter: spec}, or -> {"params": {parameter: spec},
"options": "...", "block": [256, 1, 1], "init": {...}}. A spec is
    {"dtype": "f32", "shape": [1024, "n"], "stride_order": [1, 0] | "row" | "col",
     "stride": [...], "align": 16, "divisibility": 8}      a tensor (fake; shape entries:
                                                          ints are static, strings or
                                                          null are symbolic, one symbol
                                                          per distinct name)
    "i32" | "f32" | "bf16" | "cutlass.Int64" ...          a scalar of that type
    {"dtype": "i32", "value": 7}                          a scalar with a value
    256 | true | 0.5 | [1, 2] | {"value": 256}            a Constexpr / plain Python value
    "stream"                                              a fake CUDA stream
    {"pointer": "f16", "align": 16}                       a cute.Pointer
dtypes: rung's names (f32, f16, bf16, f64, tf32, f8e4m3, f8e5m2, i8..i64, u8..u64,
bool), torch's (float16 ...) or cutlass's (Float16, cutlass.Float16).

Parameters missing from it are inferred from the annotation (cute.Tensor: a fake
tensor; cutlass.Int32/Float32/...: a runtime scalar; Constexpr: its default, else a
value guessed from the name; cuda.CUstream: a fake stream), else from the name.
Inferred tensors are f32 (unless the name says bf16/f16/...), of a rank read from
the code (`m, n = mA.shape`, `mA.shape[1]`, `mA[i, j]`, also inside the kernel it is
passed to; else tried as 1-D, then 2-D, then 3-D until one compiles), symbolic sizes (so the code is the shape-generic one), row-major
(as from_dlpack of a contiguous torch tensor), aligned to the element size (as
from_dlpack's default) or to a literal `assumed_align=N` of the file. A parameter
with a default value is left to its default. Every guess is listed in the
function's "notes" and makes "inferred" true; a function with no entry at all is
also named in "warnings".

Per function it writes DIR/<function>/<function>.{ptx,cubin} (all the device kernels
the function launches, as the DSL's embedded NVVM/ptxas produced them),
<function>.mlir (CuTe IR after canonicalize+cse), <function>.raw.mlir (the IR as
traced), <function>.llvm.mlir (the lowered host+device module, the embedded cubin
elided), <function>.sass when nvdisasm (`-c -g`, with version-file line info) or
cuobjdump is found, <function>.ptxas.txt (`ptxas -v` re-run on the PTX: registers,
spills, stack, barriers, when a ptxas is found) and meta.json. Registers, static
shared memory, stack and local memory come from `cuobjdump --dump-resource-usage` of
the DSL's own cubin when available; the dynamic shared memory and block of each
launch from the lowered host code (best effort). Tools are looked for in
CUTE_AOT_CUDA_BIN, CUDA_HOME/bin, next to TRITON_PTXAS_PATH, on PATH, in the
nvidia-* wheels of this Python and in ~/.cache/rung/env.

stdout carries exactly one JSON object:
    {"version_file", "target", "cutlass_dsl_version", "python", "out", "tools",
     "kernels": [{"name", "kind", "kernel_name", "device_kernels", "files": {kind: path},
                  "num_warps", "block", "shared", "static_shared", "dynamic_shared",
                  "registers", "spill_stores", "spill_loads", "stack_frame", "barriers",
                  "gpu_name", "target", "signature", "constexprs", "launches",
                  "compile_time_s", "inferred", "notes"}],
     "skipped": [{"name", "reason"}], "warnings": [str],
     "errors": [{"kernel", "type", "exception", "message", "traceback", "lineno", "col",
                 "file", "function", ...}]}
Error types: SyntaxError / ImportError (importing the version file; lineno in it),
CompilationError (anything raised by cute.compile while tracing or compiling, its class
in "exception": DSLUserCodeError, ValueError ...; lineno/col in the version file from
the DSL's diagnostic, else the innermost traceback frame in the file; "function" the
enclosing def; "rendered" the DSL's own report, "suggestion" its hint), PTXASError
(ptxas messages seen in the DSL's log, in "ptxas", mapped through the PTX .loc
directives when the PTX was dumped), CompilerCrash (the
compiler process died; the remaining functions are still compiled by a fresh worker
process), SignatureError, UsageError, NoKernelsFound, FileNotFoundError.
"traceback" is always a string ("" when there is none). Everything the DSL, the tools or
the version module print goes to stderr.
Exit status: 0 when every function compiled, 1 on any error (compilation, syntax,
import, crash), 2 on bad arguments.

Only `cutlass` (nvidia-cutlass-dsl) and the standard library are used (no torch, no
GPU, no CUDA toolkit for the compile itself). Written for Python 3.9+ and
nvidia-cutlass-dsl 4.x (tested with 4.8.1).
"""

import argparse
import ast
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aot_common import (  # noqa: E402
    MAX_LOG_CHARS, JsonOut, _chain, _last_frame_in, _same_file, ptx_line_to_source, import_version)
from aot_common import LAST_LOG as _LAST_LOG, Capture as _Capture, format_exc as _format_exc, tail as _tail  # noqa: E402
from aot_common import strip_ansi as _plain  # noqa: E402


cutlass = None
cute = None


def _json_default(o):
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, bytes):
        return "<%d bytes>" % len(o)
    if isinstance(o, type):
        return o.__name__
    return str(o)


# Keep stdout clean for the single JSON object: from here on everything written to fd 1 goes
# to stderr, and the reply to the saved stdout (or, in the worker process, --_result's file).
_OUT = JsonOut(_json_default)
_emit, _progress = _OUT.emit, _OUT.progress


# --------------------------------------------------------------------------- types

# rung / torch spellings -> cutlass class names
_DTYPES = {
    "f32": "Float32", "float32": "Float32", "float": "Float32", "fp32": "Float32",
    "f16": "Float16", "float16": "Float16", "half": "Float16", "fp16": "Float16",
    "bf16": "BFloat16", "bfloat16": "BFloat16",
    "f64": "Float64", "float64": "Float64", "double": "Float64", "fp64": "Float64",
    "tf32": "TFloat32", "tfloat32": "TFloat32",
    "f8e4m3": "Float8E4M3FN", "fp8e4m3": "Float8E4M3FN", "float8_e4m3fn": "Float8E4M3FN",
    "fp8e4nv": "Float8E4M3FN", "e4m3": "Float8E4M3FN",
    "f8e5m2": "Float8E5M2", "fp8e5m2": "Float8E5M2", "float8_e5m2": "Float8E5M2", "fp8e5": "Float8E5M2",
    "e5m2": "Float8E5M2",
    "bool": "Boolean", "i1": "Boolean",
    "i8": "Int8", "int8": "Int8", "i16": "Int16", "int16": "Int16",
    "i32": "Int32", "int32": "Int32", "int": "Int32",
    "i64": "Int64", "int64": "Int64",
    "u8": "Uint8", "uint8": "Uint8", "u16": "Uint16", "uint16": "Uint16",
    "u32": "Uint32", "uint32": "Uint32", "u64": "Uint64", "uint64": "Uint64",
}
_SHORT = {"Float32": "f32", "Float16": "f16", "BFloat16": "bf16", "Float64": "f64", "TFloat32": "tf32",
          "Float8E4M3FN": "f8e4m3", "Float8E5M2": "f8e5m2", "Boolean": "bool", "Int8": "i8", "Int16": "i16",
          "Int32": "i32", "Int64": "i64", "Uint8": "u8", "Uint16": "u16", "Uint32": "u32", "Uint64": "u64"}


def dtype_of(name):
    """A cutlass numeric class from a dtype spelling; ValueError if unknown."""
    if isinstance(name, type):
        return name
    if not isinstance(name, str):
        raise ValueError("dtype must be a string, got %r" % (name,))
    s = name.strip()
    for p in ("cutlass.", "cute.", "torch.", "tl."):
        if s.startswith(p):
            s = s[len(p):]
    cls_name = _DTYPES.get(s.lower(), s)
    t = getattr(cutlass, cls_name, None)
    if isinstance(t, type) and issubclass(t, cutlass.Numeric):
        return t
    raise ValueError("unknown dtype %r" % (name,))


def dtype_name(t):
    n = getattr(t, "__name__", str(t))
    return _SHORT.get(n, n)


_INT_NAMES = {"n", "m", "k", "numel", "n_elements", "size", "rows", "cols", "n_rows", "n_cols",
              "seq_len", "seqlen", "batch", "nheads", "n_heads", "head_dim", "hidden", "dim",
              "d", "h", "l", "s", "t", "z", "seed", "ld", "lda", "ldb", "ldc", "total", "count"}
_INT_PREFIXES = ("stride", "n_", "num_", "len", "offset", "off_", "seq", "max_seqlen", "start", "end")
_FLOAT_NAMES = {"eps", "epsilon", "scale", "alpha", "beta", "sm_scale", "softmax_scale",
                "temperature", "momentum", "p_drop", "dropout_p", "negative_slope", "slope",
                "min_val", "max_val", "lr", "weight_decay", "inv_scale"}


def _elem_from_name(name):
    low = name.lower()
    for key, t in (("bf16", "bf16"), ("fp16", "f16"), ("f16", "f16"), ("half", "f16"),
                   ("fp8", "f8e4m3"), ("int8", "i8"), ("i8", "i8"), ("idx", "i32"),
                   ("index", "i32"), ("indices", "i32"), ("i32", "i32"), ("i64", "i64")):
        if key in low:
            return t
    return "f32"


def infer_constexpr(name):
    up = name.upper()
    if "BLOCK" in up or "TILE" in up or "THREADS" in up:
        if up.endswith("_K"):
            return 32
        if up.endswith(("_M", "_N")):
            return 64
        return 128
    if "GROUP" in up:
        return 8
    if "WARPS" in up:
        return 4
    if up.startswith(("HAS_", "IS_", "USE_", "EVEN_", "ENABLE_", "APPLY_")):
        return False
    if "STAGES" in up:
        return 3
    return 1


def _ann_text(ann):
    if ann is inspect.Parameter.empty or ann is None:
        return ""
    if isinstance(ann, str):
        return ann
    return getattr(ann, "__qualname__", None) or getattr(ann, "__name__", None) or str(ann)


def _classify_annotation(ann):
    """'tensor' | 'pointer' | 'constexpr' | 'stream' | ('scalar', cls) | None."""
    if ann is inspect.Parameter.empty or ann is None:
        return None
    text = _ann_text(ann) + " " + str(ann)
    if "Constexpr" in text:
        return "constexpr"
    if isinstance(ann, type):
        try:
            if issubclass(ann, cute.Tensor):
                return "tensor"
            if issubclass(ann, cute.Pointer):
                return "pointer"
            if issubclass(ann, cutlass.Numeric):
                return ("scalar", ann)
        except TypeError:
            pass
        if ann is int:
            return ("scalar", cutlass.Int32)
        if ann is float:
            return ("scalar", cutlass.Float32)
        if ann is bool:
            return ("scalar", cutlass.Boolean)
    if "CUstream" in text or "cudaStream" in text:
        return "stream"
    if re.search(r"\bTensor\b", text):
        return "tensor"
    if re.search(r"\bPointer\b", text):
        return "pointer"
    if isinstance(ann, str):
        m = re.match(r"^(?:cutlass\.|cute\.)?(\w+)$", ann.strip())
        if m:
            try:
                return ("scalar", dtype_of(m.group(1)))
            except ValueError:
                pass
    return None


# --------------------------------------------------------------------------- module / functions


def _sanitize(name):
    return re.sub(r"[^\w.-]", "_", name)


def _inner(fn):
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def _kind(obj):
    """'jit' / 'kernel' for CuTe DSL decorated functions, else None."""
    k = getattr(obj, "_decorator_kind", None)
    if k in ("jit", "kernel") and callable(obj):
        return k
    return None


def _in_file(fn, path):
    code = getattr(_inner(fn), "__code__", None)
    return code is not None and _same_file(code.co_filename, path)


def _def_line(fn):
    code = getattr(_inner(fn), "__code__", None)
    if code is None:
        return None
    try:
        lines, start = inspect.getsourcelines(_inner(fn))
    except (OSError, TypeError):
        return code.co_firstlineno
    for i, line in enumerate(lines):
        if re.match(r"\s*(async\s+)?def\s", line):
            return start + i
    return start


def _fn_ast(fn):
    try:
        import textwrap
        src = textwrap.dedent(inspect.getsource(_inner(fn)))
        tree = ast.parse(src)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return n
    return None


def find_functions(mod, path):
    """[(name, kind, obj, owner_class)] of CuTe functions defined in the version file, in file order."""
    found, seen = [], set()
    for name, obj in list(vars(mod).items()):
        k = _kind(obj)
        if k and _in_file(obj, path) and id(obj) not in seen:
            seen.add(id(obj))
            found.append((name, k, obj, None))
        elif isinstance(obj, type) and getattr(obj, "__module__", None) == mod.__name__:
            for an, av in vars(obj).items():
                if isinstance(av, (staticmethod, classmethod)):
                    av = av.__func__
                k2 = _kind(av)
                if k2 and _in_file(av, path) and id(av) not in seen:
                    seen.add(id(av))
                    found.append(("%s.%s" % (name, an), k2, av, obj))
    found.sort(key=lambda t: _def_line(t[2]) or 0)
    return found


def _names_in(node):
    """Bare names and `self.attr` attribute names used in a function body."""
    out = set()
    if node is None:
        return out
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            out.add("self." + n.attr)
    return out


def _literal_kwargs(path, func_suffix, kw):
    """First literal value of keyword `kw` in calls to ...func_suffix(...) in the file, with its line."""
    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return None
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            fname = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None)
            if fname != func_suffix:
                continue
            for k in n.keywords:
                if k.arg == kw:
                    try:
                        return ast.literal_eval(k.value), n.lineno
                    except (ValueError, TypeError, SyntaxError):
                        pass
    return None


def _ranks_in(fnode, params):
    """{param: minimal rank} from `a, b = p.shape`, `p.shape[k]`, `cute.size(p, mode=[k])`, `p[i, j]`."""
    ranks = {}
    if fnode is None:
        return ranks

    def bump(p, r):
        if p in params and r > ranks.get(p, 0):
            ranks[p] = r

    for n in ast.walk(fnode):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], (ast.Tuple, ast.List)):
            v = n.value
            if isinstance(v, ast.Attribute) and v.attr in ("shape", "layout") and isinstance(v.value, ast.Name):
                if not any(isinstance(e, ast.Starred) for e in n.targets[0].elts):
                    bump(v.value.id, len(n.targets[0].elts))
        elif isinstance(n, ast.Subscript):
            v = n.value
            idx = n.slice
            if isinstance(idx, getattr(ast, "Index", ())):  # Python < 3.9
                idx = idx.value
            if isinstance(v, ast.Attribute) and v.attr == "shape" and isinstance(v.value, ast.Name):
                if isinstance(idx, ast.Constant) and isinstance(idx.value, int):
                    bump(v.value.id, idx.value + 1)
            elif isinstance(v, ast.Name) and isinstance(idx, ast.Tuple):
                if not any(isinstance(e, (ast.Slice, ast.Starred)) for e in idx.elts):
                    bump(v.id, len(idx.elts))
        elif isinstance(n, ast.Call):
            fname = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None)
            if fname == "size" and n.args and isinstance(n.args[0], ast.Name):
                for k in n.keywords:
                    if k.arg == "mode" and isinstance(k.value, (ast.List, ast.Tuple)) and k.value.elts:
                        e = k.value.elts[0]
                        if isinstance(e, ast.Constant) and isinstance(e.value, int):
                            bump(n.args[0].id, e.value + 1)
    return ranks


def infer_ranks(obj, params, functions_by_name):
    """Ranks of tensor parameters read from the function and from the kernels/jit functions it calls."""
    fnode = _fn_ast(obj)
    ranks = _ranks_in(fnode, params)
    if fnode is None:
        return ranks
    for n in ast.walk(fnode):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        callee = None
        if isinstance(f, ast.Name):
            callee = functions_by_name.get(f.id)
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            callee = functions_by_name.get("." + f.attr)
        if callee is None:
            continue
        try:
            cparams = list(inspect.signature(_inner(callee)).parameters)
        except (TypeError, ValueError):
            continue
        if cparams and cparams[0] == "self":
            cparams = cparams[1:]
        mapping = {}
        for i, a in enumerate(n.args):
            if isinstance(a, ast.Name) and a.id in params and i < len(cparams):
                mapping[cparams[i]] = a.id
        for k in n.keywords:
            if k.arg and isinstance(k.value, ast.Name) and k.value.id in params:
                mapping[k.arg] = k.value.id
        if not mapping:
            continue
        inner = _ranks_in(_fn_ast(callee), set(mapping))
        for cp, r in inner.items():
            p = mapping[cp]
            if r > ranks.get(p, 0):
                ranks[p] = r
    return ranks


# --------------------------------------------------------------------------- arguments


def _split_spec(spec, param_names):
    """Entry of --signature-json -> (params dict, extras dict)."""
    if not spec:
        return {}, {}
    if not isinstance(spec, dict):
        raise ValueError("the --signature-json entry must be an object, got %r" % (spec,))
    reserved = {"params", "options", "block", "init", "signature"}
    for key in ("params", "signature"):
        if isinstance(spec.get(key), dict) and key not in param_names:
            extras = {k: v for k, v in spec.items() if k != key}
            return dict(spec[key]), extras
    extras = {k: spec[k] for k in reserved if k in spec and k not in param_names}
    return {k: v for k, v in spec.items() if k not in extras}, extras


class _Symbols(object):
    def __init__(self):
        self.by_name = {}

    def get(self, name, divisibility=1):
        from cutlass.cute import sym_int32
        key = (name, divisibility)
        if name is None or name == "?":
            return sym_int32(divisibility=divisibility)
        if key not in self.by_name:
            self.by_name[key] = sym_int32(divisibility=divisibility, symbol=str(name))
        return self.by_name[key]


def _make_tensor(spec, syms):
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_tensor
    dt = dtype_of(spec.get("dtype", "f32"))
    shape = spec.get("shape", [None])
    if isinstance(shape, (int, str)) or shape is None:
        shape = [shape]
    div = int(spec.get("divisibility", 1) or 1)
    dims = tuple(d if isinstance(d, int) else syms.get(d, div) for d in shape)
    align = spec.get("align", spec.get("assumed_align"))
    if spec.get("stride") is not None:
        stride = tuple(s if isinstance(s, int) else syms.get(s, div) for s in spec["stride"])
        return make_fake_tensor(dt, dims, stride, assumed_align=align)
    order = spec.get("stride_order", spec.get("layout", "row"))
    if order in ("row", "row_major", "C", None):
        order = tuple(reversed(range(len(dims))))
    elif order in ("col", "col_major", "F"):
        order = tuple(range(len(dims)))
    return make_fake_compact_tensor(dt, dims, stride_order=tuple(order), assumed_align=align)


def _make_scalar(dt, value=None):
    if value is None:
        value = False if dt is cutlass.Boolean else (1.0 if "Float" in dt.__name__ else 1)
    return dt(value)


def _make_pointer(spec):
    from cutlass.cute.runtime import make_ptr
    try:
        from cutlass.cute.typing import AddressSpace
    except ImportError:
        from cutlass.cute import AddressSpace
    dt = dtype_of(spec.get("pointer") or spec.get("dtype") or "f32")
    align = int(spec.get("align", 16) or 16)
    return make_ptr(dt, align * 1024, AddressSpace.gmem, assumed_align=align)


def _describe_tensor(spec):
    return {k: spec[k] for k in ("dtype", "shape", "stride", "stride_order", "align", "divisibility") if k in spec}


def build_args(name, obj, spec, ranks, defaults_align, default_rank=1):
    """Fake arguments for one function.

    Returns (args, kwargs, signature, constexprs, notes, params whose tensor rank was not read
    from the code but defaulted to `default_rank`)."""
    notes, rank_guessed = [], []
    fn = _inner(obj)
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values()]
    if params and params[0].name in ("self", "cls") and "." in name:
        params = params[1:]
    pspec, _extras = _split_spec(spec, {p.name for p in params})
    syms = _Symbols()
    args, signature, constexprs = [], {}, {}
    unknown = set(pspec)
    use_kw = False
    for p in params:
        unknown.discard(p.name)
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            notes.append("%s: *args/**kwargs not filled" % p.name)
            continue
        cls = _classify_annotation(p.annotation)
        has_default = p.default is not inspect.Parameter.empty
        if p.name in pspec:
            s = pspec[p.name]
            if s == "stream" or (isinstance(s, dict) and s.get("dtype") == "stream"):
                from cutlass.cute.runtime import make_fake_stream
                val, signature[p.name] = make_fake_stream(), "stream"
            elif isinstance(s, dict) and ("shape" in s or "stride" in s or
                                          (cls == "tensor" and "dtype" in s and "value" not in s)):
                val = _make_tensor(s, syms)
                signature[p.name] = _describe_tensor(s)
            elif isinstance(s, dict) and "pointer" in s:
                val = _make_pointer(s)
                signature[p.name] = dict(s)
            elif isinstance(s, dict) and "dtype" in s:
                dt = dtype_of(s["dtype"])
                val = _make_scalar(dt, s.get("value"))
                signature[p.name] = dtype_name(dt) if s.get("value") is None else dict(s)
            elif isinstance(s, str) and cls != "constexpr":
                if cls == "tensor":
                    ts = {"dtype": s, "shape": ["%s.shape[0]" % p.name]}
                    val = _make_tensor(ts, syms)
                    signature[p.name] = _describe_tensor(ts)
                else:
                    dt = dtype_of(s)
                    val = _make_scalar(dt)
                    signature[p.name] = dtype_name(dt)
            else:  # constexpr / plain Python value
                v = s.get("value") if isinstance(s, dict) else s
                if isinstance(v, list):
                    v = tuple(v)
                val = v
                constexprs[p.name] = v
        elif cls == "constexpr":
            if has_default:
                constexprs[p.name] = p.default
                notes.append("constexpr %s=%r (parameter default)" % (p.name, p.default))
                use_kw = True
                continue
            val = infer_constexpr(p.name)
            constexprs[p.name] = val
            notes.append("constexpr %s=%r (guessed from the name)" % (p.name, val))
        elif has_default:
            notes.append("%s: left to its default %r" % (p.name, p.default))
            use_kw = True
            continue
        else:
            low = p.name.lower()
            if cls is None:
                if "stream" in low:
                    cls, why = "stream", "name"
                elif low in _INT_NAMES or low.startswith(_INT_PREFIXES):
                    cls, why = ("scalar", cutlass.Int32), "name looks like a size/stride"
                elif low in _FLOAT_NAMES:
                    cls, why = ("scalar", cutlass.Float32), "name looks like a float scalar"
                elif p.annotation is not inspect.Parameter.empty:
                    cls, why = "tensor", ("annotation %s not understood: taken for a tensor (give a value in "
                                          "--signature-json)" % _ann_text(p.annotation))
                else:
                    cls, why = "tensor", "no annotation: taken for a tensor"
            else:
                why = "annotation %s" % _ann_text(p.annotation)
            if cls == "stream":
                from cutlass.cute.runtime import make_fake_stream
                val, signature[p.name] = make_fake_stream(), "stream"
                notes.append("%s: fake CUDA stream (%s)" % (p.name, why))
            elif cls == "pointer":
                ps = {"pointer": _elem_from_name(p.name), "align": 16}
                val = _make_pointer(ps)
                signature[p.name] = ps
                notes.append("%s: pointer to %s, 16-byte aligned (%s)" % (p.name, ps["pointer"], why))
            elif cls == "tensor":
                rank = ranks.get(p.name, default_rank)
                if p.name not in ranks:
                    rank_guessed.append(p.name)
                ts = {"dtype": _elem_from_name(p.name),
                      "shape": ["%s.shape[%d]" % (p.name, i) for i in range(rank)]}
                if defaults_align:
                    ts["align"] = defaults_align[0]
                val = _make_tensor(ts, syms)
                signature[p.name] = _describe_tensor(ts)
                notes.append("%s: %s tensor of rank %d%s, symbolic shape, row-major, %s (%s)"
                             % (p.name, ts["dtype"], rank,
                                " (read from the code)" if p.name in ranks else
                                (" (default)" if default_rank == 1 else " (rank 1 failed)"),
                                ("assumed_align=%d (literal at line %d)" % defaults_align)
                                if defaults_align else "element-aligned", why))
            else:
                dt = cls[1]
                val = _make_scalar(dt)
                signature[p.name] = dtype_name(dt)
                if not (p.annotation is not inspect.Parameter.empty and isinstance(p.annotation, type)
                        and issubclass(p.annotation, cutlass.Numeric)):
                    notes.append("%s: %s scalar (%s)" % (p.name, dtype_name(dt), why))
        args.append((p.name, val))
    if unknown:
        notes.append("ignored names not in the parameters: %s" % sorted(unknown))
    if use_kw:
        return [], dict(args), signature, constexprs, notes, rank_guessed
    return [v for _, v in args], {}, signature, constexprs, notes, rank_guessed


_LAUNCHER = '''import sys
import cutlass
import cutlass.cute as cute

_mod = sys.modules[{modname!r}]
_kernel = getattr(_mod, {kname!r})
_ann = _mod.__dict__.get("__rung_launcher_annotations__", {{}}).get({kname!r}, {{}})


@cute.jit
def {launcher}({params}):
    _kernel({args}).launch(grid=(1, 1, 1), block=({bx}, {by}, {bz}))
'''


def make_launcher(mod, kname, kobj, block, tmpdir):
    """A @cute.jit function that launches the @cute.kernel `kname` once (grid 1, given block)."""
    fn = _inner(kobj)
    params = list(inspect.signature(fn).parameters.values())
    anns = {p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty}
    mod.__dict__.setdefault("__rung_launcher_annotations__", {})[kname] = anns
    decl = []
    for p in params:
        d = p.name
        if p.name in anns:
            d += ": _ann[%r]" % p.name
        if p.default is not inspect.Parameter.empty:
            d += " = _kernel_default_%s" % p.name
        decl.append(d)
    launcher = "rung_launch_" + re.sub(r"\W", "_", kname)
    src = _LAUNCHER.format(modname=mod.__name__, kname=kname, launcher=launcher,
                           params=", ".join(decl), args=", ".join(p.name for p in params),
                           bx=int(block[0]), by=int(block[1]), bz=int(block[2]))
    fp = os.path.join(tmpdir, launcher + ".py")
    with open(fp, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(launcher, fp)
    lm = importlib.util.module_from_spec(spec)
    for p in params:
        if p.default is not inspect.Parameter.empty:
            setattr(lm, "_kernel_default_%s" % p.name, p.default)
    sys.modules[launcher] = lm
    spec.loader.exec_module(lm)
    return getattr(lm, launcher)


# --------------------------------------------------------------------------- errors


_DIAG_RE = re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning|note|remark): ?(?P<msg>.*)$",
                      re.MULTILINE)
_PTXAS_MSG_RE = re.compile(r"ptxas (?P<file>\S+), line (?P<line>\d+); (?P<sev>error|warning)\s*: (?P<msg>.*)$",
                           re.MULTILINE)


def _enclosing_function(file_lines, lineno):
    try:
        tree = ast.parse("\n".join(file_lines))
    except SyntaxError:
        return None
    best = None
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            end = getattr(n, "end_lineno", None)
            if n.lineno <= lineno and (end is None or lineno <= end):
                if best is None or n.lineno >= best.lineno:
                    best = n
    return best.name if best else None


def build_error(name, e, log, path, file_lines, dump_dir=None):
    """Error dict for a failed compile of function `name`."""
    try:
        from cutlass.base_dsl.common import DSLBaseError
    except ImportError:
        DSLBaseError = ()
    chain = _chain(e)
    dsl = [c for c in chain if DSLBaseError and isinstance(c, DSLBaseError)]
    first = dsl[0] if dsl else e
    msg = getattr(first, "message", None) if dsl else None
    if not isinstance(msg, str) or not msg.strip():
        msg = "%s: %s" % (type(first).__name__, first)
    # everything raised by cute.compile is a compile failure; "exception" keeps the class
    err = {"kernel": name, "type": "CompilationError",
           "exception": type(first).__name__, "message": _plain(msg).strip(),
           "traceback": _tail(_format_exc(e)), "lineno": None, "col": None, "file": None}
    if dsl:
        err["rendered"] = _tail(_plain(str(first)).strip("\n"))
        for k in ("suggestion", "cause", "error_code"):
            v = getattr(first, k, None)
            if v:
                err[k] = _plain(str(v))
    root = chain[-1]
    if root is not first:
        err["root_cause"] = _plain("%s: %s" % (type(root).__name__, root))
    # 1) the DSL's own location (filename/line of its diagnostic)
    for c in dsl:
        fn, ln = getattr(c, "filename", None), getattr(c, "line", None)
        if fn and isinstance(ln, int) and os.path.exists(str(fn)) and _same_file(str(fn), path):
            col = getattr(c, "col", None)
            err.update({"file": str(fn), "lineno": ln, "col": (col + 1) if isinstance(col, int) else None})
            break
    # 2) the innermost traceback frame in the version file (root cause first)
    if err["lineno"] is None:
        for c in reversed(chain):
            fs = _last_frame_in(c.__traceback__, path)
            if fs is not None:
                err.update({"file": fs.filename, "lineno": fs.lineno})
                break
    # 3) MLIR diagnostics with absolute locations: version.py:LINE:COL: error: ...
    text = "\n".join(x for x in (log, err.get("rendered"), _plain(str(e))) if x)
    diags = []
    for m in _DIAG_RE.finditer(text):
        diags.append({"file": m.group("file"), "lineno": int(m.group("line")), "col": int(m.group("col")),
                      "severity": m.group("sev"), "message": m.group("msg")})
    if diags:
        err["diagnostics"] = diags[:50]
        if err["lineno"] is None:
            for d in diags:
                if d["severity"] == "error" and os.path.exists(d["file"]) and _same_file(d["file"], path):
                    err.update({"lineno": d["lineno"], "col": d["col"], "file": d["file"]})
                    break
    # 4) ptxas messages against the dumped PTX, mapped through its .loc directives
    pmsgs = []
    for m in _PTXAS_MSG_RE.finditer(text):
        item = (m.group("file"), int(m.group("line")), m.group("sev"), m.group("msg").strip())
        if item not in pmsgs:
            pmsgs.append(item)
    if pmsgs:
        ptx = None
        if dump_dir and os.path.isdir(dump_dir):
            for f in sorted(os.listdir(dump_dir)):
                if f.endswith(".ptx"):
                    with open(os.path.join(dump_dir, f)) as fh:
                        ptx = fh.read()
                    break
        if ptx:
            err["failed_ptx"] = ptx
        out = []
        for f, line, sev, pm in pmsgs[:100]:
            d = {"ptx_file": f, "ptx_line": line, "severity": sev, "message": pm}
            loc = ptx_line_to_source(ptx, line) if ptx else None
            if loc:
                d.update({"file": loc[0], "lineno": loc[1], "col": loc[2] or None})
            out.append(d)
        err["ptxas"] = out
        if err["type"] == "CompilationError":
            err["type"] = "PTXASError"
        if err["lineno"] is None:
            for d in out:
                if d["severity"] == "error" and d.get("file") and os.path.exists(d["file"]) \
                        and _same_file(d["file"], path):
                    err.update({"lineno": d["lineno"], "col": d.get("col"), "file": d["file"]})
                    break
    # column: the undefined name, else the DSL's caret
    ln = err["lineno"]
    if isinstance(ln, int) and 0 < ln <= len(file_lines) and err["file"] and _same_file(err["file"], path):
        line = file_lines[ln - 1]
        err["text"] = line.rstrip()
        m = re.search(r"name '(\w+)' is not defined", text)
        if m and re.search(r"\b%s\b" % re.escape(m.group(1)), line):
            err["col"] = re.search(r"\b%s\b" % re.escape(m.group(1)), line).start() + 1
        elif err["col"] is None and err.get("rendered"):
            rl = err["rendered"].split("\n")
            for i, l in enumerate(rl[:-1]):
                mm = re.match(r"^\s*%d \| ?(.*)$" % ln, l)
                if mm and "^" in rl[i + 1] and "|" in rl[i + 1]:
                    bar = l.index("|")
                    caret = rl[i + 1].index("^")
                    if caret > bar:
                        err["col"] = caret - bar - 1 if l[bar + 1:bar + 2] == " " else caret - bar
                    break
        err["function"] = _enclosing_function(file_lines, ln)
    err["in_version_file"] = bool(err["file"]) and _same_file(err["file"], path)
    if log:
        err["log"] = _tail(log)
    return err


# --------------------------------------------------------------------------- tools


def _tool_dirs():
    dirs = []
    for k in ("CUTE_AOT_CUDA_BIN",):
        if os.environ.get(k):
            dirs.append(os.environ[k])
    for k in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(k):
            dirs.append(os.path.join(os.environ[k], "bin"))
    for k in ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH"):
        if os.environ.get(k):
            dirs.append(os.path.dirname(os.environ[k]))
    dirs.extend(os.environ.get("PATH", "").split(os.pathsep))
    import glob
    import site
    sps = []
    try:
        sps.extend(site.getsitepackages())
    except Exception:
        pass
    sps.append(os.path.join(sys.prefix, "lib", "python%d.%d" % sys.version_info[:2], "site-packages"))
    for sp in sps:
        for sub in ("cu13", "cuda_nvcc", "cuda_nvdisasm", "cuda_cuobjdump", "cu12"):
            dirs.append(os.path.join(sp, "nvidia", sub, "bin"))
    dirs.extend(sorted(glob.glob(os.path.expanduser("~/.cache/rung/env/lib/python3*/site-packages/nvidia/cu13/bin"))))
    dirs.extend(["/usr/local/cuda/bin"])
    return dirs


def _tool(name):
    env = os.environ.get("CUTE_AOT_%s" % name.upper())
    if env and os.path.isfile(env) and os.access(env, os.X_OK):
        return env
    for d in _tool_dirs():
        c = os.path.join(d, name) if d else None
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _run(cmd, timeout=300, merge=True):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge else subprocess.PIPE,
                           timeout=timeout)
        out = p.stdout.decode("utf-8", "replace")
        if not merge and p.stderr:
            sys.stderr.write(p.stderr.decode("utf-8", "replace"))
        return p.returncode, out
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
    """{entry: {registers, barriers, ...}} of a `ptxas -v` report."""
    out = {}
    parts = re.split(r"ptxas info\s*: Compiling entry function '([^']+)'", text or "")
    for i in range(1, len(parts) - 1, 2):
        d = {}
        for k, pat in _PTXAS_PATTERNS.items():
            m = re.search(pat, parts[i + 1])
            if m:
                d[k] = int(m.group(1))
        out[parts[i]] = d
    return out


def parse_resource_usage(text):
    """{function: {REG, STACK, SHARED, LOCAL, ...}} of `cuobjdump --dump-resource-usage`."""
    out = {}
    for m in re.finditer(r"Function ([^\s:]+):\s*\n\s*(REG:.*)", text or ""):
        out[m.group(1)] = {k: int(v) for k, v in re.findall(r"([A-Z_\[\]0-9]+):(\d+)", m.group(2))}
    return out


def ptx_entries(ptx):
    """[(entry name, block dims or None)] of the kernels in a PTX module."""
    out = []
    for m in re.finditer(r"\.entry\s+([\w$]+)\s*\(", ptx or ""):
        rest = ptx[m.end():]
        brace = rest.find("{")
        head = rest[:brace] if brace >= 0 else rest
        b = re.search(r"\.(?:reqntid|maxntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", head)
        block = [int(b.group(1)), int(b.group(2) or 1), int(b.group(3) or 1)] if b else None
        out.append((m.group(1), block))
    return out


_LAUNCH_STRUCT = "!llvm.struct<(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32)>"


def parse_launches(llvm_text, func_name):
    """Best effort: grid/block/dynamic smem stored into each CUlaunchConfig of the host function."""
    if not llvm_text:
        return []
    start = llvm_text.find("llvm.func @%s(" % func_name)
    if start < 0:
        return []
    end = llvm_text.find("\n  llvm.func ", start + 1)
    body = llvm_text[start:end if end > 0 else len(llvm_text)]
    consts = {}
    for m in re.finditer(r"(%[\w.]+) = llvm\.mlir\.constant\((-?\d+) : i\d+\)", body):
        consts[m.group(1)] = int(m.group(2))
    geps = {}
    for m in re.finditer(r"(%[\w.]+) = llvm\.getelementptr (%[\w.]+)\[0, (\d)(?:, (\d))?\] : [^\n]*"
                         + re.escape(_LAUNCH_STRUCT), body):
        geps[m.group(1)] = (m.group(2), int(m.group(3)), int(m.group(4)) if m.group(4) else None)
    launches, order = {}, []
    for m in re.finditer(r"llvm\.store (%[\w.]+), (%[\w.]+) :", body):
        g = geps.get(m.group(2))
        if g is None:
            continue
        base, field, idx = g
        if field not in (0, 1, 2):
            continue
        if base not in launches:
            launches[base] = {"grid": [None, None, None], "block": [None, None, None], "dynamic_shared": None}
            order.append(base)
        v = consts.get(m.group(1), "?")
        if field == 0 and idx is not None:
            launches[base]["grid"][idx] = v
        elif field == 1 and idx is not None:
            launches[base]["block"][idx] = v
        elif field == 2:
            launches[base]["dynamic_shared"] = v
    return [launches[b] for b in order]


# --------------------------------------------------------------------------- compile


def clean_kernel_dir(out_dir, name):
    """Remove what an earlier run left for this function (so a failed build leaves no stale IR)."""
    kdir = os.path.join(out_dir, _sanitize(name))
    if not os.path.isdir(kdir):
        return
    for f in os.listdir(kdir):
        if f == "meta.json" or f.startswith(_sanitize(name) + "."):
            try:
                os.remove(os.path.join(kdir, f))
            except OSError:
                pass


def _write(path, data):
    with open(path, "wb" if isinstance(data, (bytes, bytearray)) else "w") as f:
        f.write(data)
    return os.path.abspath(path)


def compile_function(name, fn, args, kwargs, options, arch, out_dir, tools, dump_dir):
    from cutlass.cutlass_dsl.cutlass import CuTeDSL
    os.makedirs(dump_dir, exist_ok=True)
    try:
        CuTeDSL._get_dsl().envar.dump_dir = dump_dir  # KEEP=ir/ir-debug dumps of this compile
    except Exception:
        pass
    opts = "--gpu-arch %s --keep-ptx --keep-cubin --dump-dir %s %s" % (arch, dump_dir, options)
    t0 = time.time()
    with _Capture() as cap:
        compiled = cute.compile(fn, *args, options=opts.strip(), **kwargs)
    elapsed = time.time() - t0
    log = cap.text

    stem = _sanitize(name)
    kdir = os.path.join(out_dir, stem)
    os.makedirs(kdir, exist_ok=True)
    files, notes = {}, []
    dumped = sorted(os.listdir(dump_dir))
    for f in dumped:
        src = os.path.join(dump_dir, f)
        if f.endswith(".ptx"):
            kind = "ptx"
        elif f.endswith(".cubin"):
            kind = "cubin"
        elif f.endswith("_clean.mlir"):
            kind = "mlir"
        elif f.endswith(".mlir"):
            kind = "raw.mlir"
        else:
            continue
        if kind in files:
            notes.append("more than one %s dumped; kept %s" % (kind, os.path.basename(files[kind])))
            continue
        dst = os.path.join(kdir, "%s.%s" % (stem, kind))
        shutil.copyfile(src, dst)
        files[kind] = os.path.abspath(dst)
    arts = getattr(compiled, "artifacts", None)
    if "ptx" not in files and isinstance(getattr(arts, "PTX", None), str):
        files["ptx"] = _write(os.path.join(kdir, "%s.ptx" % stem), arts.PTX)
    if "cubin" not in files and isinstance(getattr(arts, "CUBIN", None), (bytes, bytearray)):
        files["cubin"] = _write(os.path.join(kdir, "%s.cubin" % stem), arts.CUBIN)
    llvm_text = None
    try:
        llvm_text = str(compiled.ir_module)
    except Exception:
        pass
    if llvm_text:
        elided = re.sub(r'(llvm\.mlir\.global internal constant @\w*binary\w*\()"(?:[^"\\]|\\.)*"',
                        r'\1"<embedded cubin elided: see %s.cubin>"' % stem, llvm_text)
        files["llvm.mlir"] = _write(os.path.join(kdir, "%s.llvm.mlir" % stem), elided)

    ptx = ""
    if "ptx" in files:
        with open(files["ptx"]) as f:
            ptx = f.read()
    m = re.search(r"^\s*\.target\s+(\w+)", ptx, re.MULTILINE)
    gpu_name = m.group(1) if m else arch
    entries = ptx_entries(ptx)
    func_name = getattr(compiled, "function_name", None)
    launches = parse_launches(llvm_text, func_name) if func_name else []

    # ptxas -v on the DSL's PTX (the DSL's own ptxas run prints no report)
    ptxas_res = {}
    ptxas = tools.get("ptxas")
    if ptx and ptxas:
        with tempfile.TemporaryDirectory() as td:
            pf = os.path.join(td, stem + ".ptx")
            with open(pf, "w") as f:
                f.write(ptx)
            cmd = [ptxas, "-v", "-lineinfo", "--gpu-name=%s" % gpu_name, pf, "-o", os.path.join(td, stem + ".cubin")]
            rc, text = _run(cmd)
        report = text.replace(td + os.sep, "")
        files["ptxas"] = _write(os.path.join(kdir, "%s.ptxas.txt" % stem), report.rstrip("\n") + "\n")
        if rc == 0:
            ptxas_res = parse_ptxas_v(text)
        else:
            notes.append("ptxas -v (%s) failed on the DSL's PTX (exit %d): see %s.ptxas.txt; "
                         "registers come from the cubin" % (ptxas, rc, stem))
    elif ptx:
        notes.append("no ptxas found: no spill/barrier report")
    usage = {}
    cubin_path = files.get("cubin")
    if cubin_path and tools.get("cuobjdump"):
        rc, text = _run([tools["cuobjdump"], "--dump-resource-usage", cubin_path], merge=False)
        if rc == 0:
            usage = parse_resource_usage(text)
    sass_tool = None
    if cubin_path:
        text, rc = None, -1
        if tools.get("nvdisasm"):
            rc, text = _run([tools["nvdisasm"], "-c", "-g", cubin_path], merge=False)
            sass_tool = "nvdisasm -c -g"
        if (rc != 0 or not text) and tools.get("cuobjdump"):
            rc, text = _run([tools["cuobjdump"], "--dump-sass", cubin_path], merge=False)
            sass_tool = "cuobjdump --dump-sass"
        if rc == 0 and text:
            files["sass"] = _write(os.path.join(kdir, "%s.sass" % stem), text)
        else:
            sass_tool = None
            notes.append("no SASS: nvdisasm/cuobjdump not found or failed")

    device = []
    for i, (ename, block) in enumerate(entries):
        u = usage.get(ename, {})
        p = ptxas_res.get(ename, {})
        la = launches[i] if len(launches) == len(entries) else None
        dyn = la["dynamic_shared"] if la and isinstance(la.get("dynamic_shared"), int) else None
        static = u.get("SHARED", p.get("smem_static"))
        device.append({
            "name": ename, "block": block,
            "num_warps": (block[0] * block[1] * block[2] + 31) // 32 if block else None,
            "registers": u.get("REG", p.get("registers")),
            "static_shared": static, "dynamic_shared": dyn,
            "shared": (static or 0) + (dyn or 0) if (static is not None or dyn is not None) else None,
            "stack_frame": p.get("stack_frame", u.get("STACK")), "local": u.get("LOCAL"),
            "spill_stores": p.get("spill_stores"), "spill_loads": p.get("spill_loads"),
            "barriers": p.get("barriers"),
            "cubin_resource_usage": u or None, "ptxas": p or None,
        })
    if not device:
        notes.append("no .entry in the PTX: the function launches no kernel")
    if len(device) > 1:
        notes.append("%d device kernels: the top-level figures are the maximum over them" % len(device))

    def top(key):
        vals = [d[key] for d in device if d.get(key) is not None]
        return max(vals) if vals else None

    block = device[0]["block"] if len(device) == 1 else None
    entry = {
        "name": name,
        "kernel_name": device[0]["name"] if device else None,
        "device_kernels": device,
        "files": files,
        "num_warps": top("num_warps"),
        "num_stages": None,
        "block": block,
        "shared": top("shared"),
        "static_shared": top("static_shared"),
        "dynamic_shared": top("dynamic_shared"),
        "registers": top("registers"),
        "spill_stores": top("spill_stores"),
        "spill_loads": top("spill_loads"),
        "stack_frame": top("stack_frame"),
        "barriers": top("barriers"),
        "gpu_name": gpu_name,
        "target": {"backend": "cuda", "arch": arch},
        "launches": launches,
        "host_function": func_name,
        "compile_time_s": round(elapsed, 3),
        "sass_tool": sass_tool,
        "notes": notes,
    }
    return entry, log


# --------------------------------------------------------------------------- main


def _parse_arch(s):
    m = re.match(r"^(?:sm_?|compute_?)?(\d{2,3})([af]?)$", str(s).strip().lower())
    if not m or not 70 <= int(m.group(1)) < 200:
        raise ValueError("bad --arch %r (want a compute capability such as 80, 90a, sm_90a, 100a)" % s)
    return "sm_%s%s" % (m.group(1), m.group(2))


def _load_sig_json(v):
    if v is None:
        return {}
    text = v
    if not v.lstrip().startswith("{") and os.path.isfile(v):
        with open(v) as f:
            text = f.read()
    obj = json.loads(text)
    if not isinstance(obj, dict):
        raise ValueError("--signature-json must be a JSON object: function name -> spec")
    return obj


def _init_value(v):
    if isinstance(v, str) and re.match(r"^(cutlass|cute)\.\w+$", v):
        try:
            return dtype_of(v)
        except ValueError:
            return getattr(cutlass, v.split(".", 1)[1], v)
    if isinstance(v, list):
        return tuple(_init_value(x) for x in v)
    return v


def main(argv=None):
    global cutlass, cute
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version-file", required=True)
    ap.add_argument("--arch", required=True, help="compute capability: 80, 90a, sm_90a, 100a ...")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--signature-json", default=None,
                    help="JSON object (or a file holding it): function -> {param: spec} (see the module doc)")
    ap.add_argument("--kernel", "--function", action="append", default=None, dest="kernel",
                    help="only these functions (repeatable)")
    ap.add_argument("--options", default="", help="extra cute.compile options, e.g. \"--opt-level 2\"")
    ap.add_argument("--no-lineinfo", action="store_true", help="compile without --generate-line-info")
    ap.add_argument("--_result", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_skip", action="append", default=[], help=argparse.SUPPRESS)
    usage_error = []
    ap.error = lambda msg: (usage_error.append(msg), sys.exit(2))
    raw = list(sys.argv[1:] if argv is None else argv)
    for i, a in enumerate(raw):  # known before parsing, so usage errors reach the supervisor too
        if a == "--_result" and i + 1 < len(raw):
            _OUT.result_path = raw[i + 1]
        elif a.startswith("--_result="):
            _OUT.result_path = a.split("=", 1)[1]

    result = {"version_file": None, "target": None, "cutlass_dsl_version": None, "python": sys.version.split()[0],
              "out": None, "kernels": [], "skipped": [], "warnings": [], "errors": []}
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        if e.code in (0, None):
            sys.exit(0)  # --help
        msg = usage_error[0] if usage_error else "bad command line"
        sys.stderr.write(ap.format_usage() + "cute_aot.py: error: %s\n" % msg)
        result["errors"].append({"kernel": None, "type": "UsageError", "message": msg,
                                 "traceback": "", "lineno": None})
        _emit(result, 2)
    _OUT.result_path = args._result or _OUT.result_path
    path = os.path.abspath(args.version_file)
    out_dir = os.path.abspath(args.out)
    result["version_file"], result["out"] = path, out_dir
    try:
        arch = _parse_arch(args.arch)
        specs = _load_sig_json(args.signature_json)
    except ValueError as e:
        result["errors"].append({"kernel": None, "type": "UsageError", "message": str(e),
                                 "traceback": "", "lineno": None})
        _emit(result, 2)
    if not os.path.isfile(path):
        result["errors"].append({"kernel": None, "type": "FileNotFoundError",
                                 "message": "version file not found: %s" % path, "traceback": "", "lineno": None})
        _emit(result, 1)

    # scratch space; inside the supervisor's temp dir when there is one (removed even after a crash)
    work = tempfile.mkdtemp(prefix="cute_aot_", dir=os.path.dirname(_OUT.result_path) if _OUT.result_path else None)
    # Settings read when cutlass is imported: the target (no GPU probe), the MLIR dumps.
    os.environ["CUTE_DSL_ARCH"] = arch
    os.environ["CUTE_DSL_KEEP"] = "ir,ir-debug"
    os.environ["CUTE_DSL_DUMP_DIR"] = os.path.join(work, "dump")
    for k in ("CUTE_DSL_KEEP_SASS", "CUTE_DSL_KEEP_IR", "CUTE_DSL_KEEP_PTX", "CUTE_DSL_KEEP_CUBIN",
              "CUTE_DSL_PRINT_IR", "CUTE_DSL_DRYRUN"):
        os.environ.pop(k, None)
    try:
        with _Capture():
            import cutlass as _cutlass
            import cutlass.cute as _cute
            import cutlass.cute.runtime  # noqa: F401  (make_fake_compact_tensor, make_fake_stream)
    except Exception as e:
        result["errors"].append({"kernel": None, "type": "ImportError", "exception": type(e).__name__,
                                 "message": _plain("cannot import cutlass (nvidia-cutlass-dsl): %s" % e),
                                 "traceback": _format_exc(e), "lineno": None})
        _emit(result, 1)
    cutlass, cute = _cutlass, _cute
    result["cutlass_dsl_version"] = getattr(cutlass, "__version__", None)
    try:
        from cutlass.base_dsl import Arch
        Arch.from_string(arch)
    except ImportError:
        pass
    except Exception:
        try:
            known = ", ".join(a.name for a in Arch)
        except Exception:
            known = "?"
        result["errors"].append({"kernel": None, "type": "UsageError",
                                 "message": "--arch %s is not a target of this CuTe DSL (known: %s)" % (arch, known),
                                 "traceback": "", "lineno": None})
        _emit(result, 2)
    result["target"] = {"backend": "cuda", "arch": arch}

    mod, err = import_version(path)
    if err is not None:
        result["errors"].append(err)
        _emit(result, 1)

    with open(path) as f:
        file_lines = f.read().split("\n")
    found = find_functions(mod, path)
    by_name = {}
    for name, kind, obj, owner in found:
        by_name[name] = obj
        if owner is not None:
            by_name["." + name.split(".", 1)[1]] = obj

    # helpers: CuTe functions used by another CuTe function of the file; kernels launched from a jit function
    used_by = {}
    for name, kind, obj, owner in found:
        node = _fn_ast(obj)
        for n in _names_in(node):
            target = n
            if n.startswith("self.") and owner is not None:
                target = "%s.%s" % (owner.__name__, n[5:])
            if target != name:
                used_by.setdefault(target, []).append(name)
    selected = []
    for name, kind, obj, owner in found:
        if name in args._skip:
            continue  # crashed the compiler in an earlier worker; the supervisor reports it
        if args.kernel:
            keep, why = name in args.kernel, "not in --kernel"
        elif name in specs:
            keep, why = True, ""
        elif kind == "kernel" and owner is not None:
            keep, why = False, "@cute.kernel method: compiled through the @cute.jit methods of %s" % owner.__name__
        elif name in used_by:
            who = ", ".join(sorted(set(used_by[name])))
            keep, why = False, ("launched from %s" % who) if kind == "kernel" else ("helper called from %s" % who)
        elif owner is not None and kind == "jit" and not name.endswith(".__call__") and \
                any(n.startswith(owner.__name__ + ".__call__") for n, _, _, _ in found):
            keep, why = False, "@cute.jit method other than %s.__call__" % owner.__name__
        else:
            keep, why = True, ""
        if keep:
            selected.append((name, kind, obj, owner))
        else:
            result["skipped"].append({"name": name, "reason": why})
    for k in list(specs) + list(args.kernel or []):
        if k not in {n for n, _, _, _ in found}:
            result["warnings"].append("function %r (from the command line / --signature-json) is not a "
                                      "@cute.jit / @cute.kernel function of the version file" % k)
    if not selected and not args._skip:
        result["errors"].append({"kernel": None, "type": "NoKernelsFound",
                                 "message": "no @cute.jit or @cute.kernel function found in %s" % path,
                                 "traceback": "", "lineno": None})
        _emit(result, 1)

    tools = {"ptxas": _tool("ptxas"), "nvdisasm": _tool("nvdisasm"), "cuobjdump": _tool("cuobjdump")}
    result["tools"] = tools
    os.makedirs(out_dir, exist_ok=True)
    align_lit = _literal_kwargs(path, "from_dlpack", "assumed_align")
    if align_lit is not None and not isinstance(align_lit[0], int):
        align_lit = None
    base_opts = ("" if args.no_lineinfo else "--generate-line-info ") + (args.options or "")
    for idx, (name, kind, obj, owner) in enumerate(selected):
        spec = specs.get(name)
        dump_dir = os.path.join(work, "f%03d" % idx)
        _LAST_LOG[0] = ""
        _progress(result, name)
        clean_kernel_dir(out_dir, name)
        notes, signature, constexprs = [], {}, {}
        try:
            try:
                params = [p for p in inspect.signature(_inner(obj)).parameters]
            except (TypeError, ValueError):
                params = []
            pspec, extras = _split_spec(spec, set(params))
            fn = obj
            if kind == "kernel":
                block = list(extras.get("block") or [128, 1, 1]) + [1, 1]
                fn = make_launcher(mod, name, obj, block[:3], work)
                notes.append("@cute.kernel compiled through a generated launcher: grid (1, 1, 1), block (%d, %d, %d)%s"
                             % (tuple(block[:3]) + ("" if extras.get("block") else " (default)",)))
            elif owner is not None:
                init = extras.get("init") or {}
                if isinstance(init, list):
                    inst = owner(*[_init_value(v) for v in init])
                else:
                    inst = owner(**{k: _init_value(v) for k, v in init.items()})
                if not init:
                    notes.append("%s() constructed with no arguments" % owner.__name__)
                fn = getattr(inst, name.split(".", 1)[1])
            ranks = infer_ranks(obj, set(params), by_name)
            fargs, fkwargs, signature, constexprs, bnotes, guessed = build_args(name, obj, spec, ranks, align_lit)
        except Exception as e:
            result["errors"].append({"kernel": name, "type": "SignatureError", "exception": type(e).__name__,
                                     "message": _plain(str(e)), "traceback": _format_exc(e), "lineno": None})
            continue
        opts = (base_opts + " " + str(extras.get("options") or "")).strip()
        # Tensors whose rank nothing in the code tells are tried as 1-D, then 2-D, then 3-D.
        first_err, tried, entry = None, [], None
        for rank in ([1, 2, 3] if guessed else [1]):
            if rank > 1:
                try:
                    fargs, fkwargs, signature, constexprs, bnotes, _ = build_args(name, obj, spec, ranks,
                                                                                  align_lit, rank)
                except Exception:
                    break
                shutil.rmtree(dump_dir, ignore_errors=True)
                clean_kernel_dir(out_dir, name)
            tried.append(rank)
            _LAST_LOG[0] = ""
            try:
                entry, log = compile_function(name, fn, fargs, fkwargs, opts, arch, out_dir, tools, dump_dir)
                break
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # DSL errors, MLIR pass failures, ptxas, ...
                if isinstance(e, SystemExit):
                    e = RuntimeError("SystemExit(%r) during compilation" % (e.code,))
                if first_err is None:
                    first_err = (e, _LAST_LOG[0], signature, constexprs)
                if isinstance(_chain(e)[-1], (NameError, SyntaxError, ImportError)):
                    break  # not about the shapes: no use trying other ranks
        if entry is None:
            e, log, signature, constexprs = first_err
            err = build_error(name, e, log, path, file_lines, dump_dir)
            ptx = err.pop("failed_ptx", None)
            if ptx:
                kdir = os.path.join(out_dir, _sanitize(name))
                os.makedirs(kdir, exist_ok=True)
                err["files"] = {"failed_ptx": _write(os.path.join(kdir, "%s.failed.ptx" % _sanitize(name)), ptx)}
            if len(tried) > 1:
                err["notes"] = ["also failed with %s taken as rank %s tensors"
                                % (", ".join(guessed), " and ".join(str(r) for r in tried[1:]))]
            err["signature"] = signature
            err["constexprs"] = {k: (v if isinstance(v, (int, float, bool, str, type(None))) else str(v))
                                 for k, v in constexprs.items()}
            result["errors"].append(err)
            continue
        if len(tried) > 1:
            e0 = first_err[0]
            bnotes.append("%s: rank 1 did not compile (%s), rank %d did"
                          % (", ".join(guessed), _plain(getattr(e0, "message", None) or str(e0)).strip()
                             .split("\n")[0][:200], tried[-1]))
        notes.extend(bnotes)
        inferred = bool(notes)
        if spec is None and inferred:
            result["warnings"].append("%s: no entry in --signature-json; arguments inferred: %s"
                                      % (name, "; ".join(notes)))
        entry["kind"] = "method" if owner is not None else kind
        entry["signature"] = signature
        entry["constexprs"] = {k: (v if isinstance(v, (int, float, bool, str, type(None))) else str(v))
                               for k, v in constexprs.items()}
        entry["options"] = opts
        entry["inferred"] = inferred
        entry["notes"] = notes + entry["notes"]
        meta = dict(entry)
        meta.update({"cutlass_dsl_version": result["cutlass_dsl_version"], "version_file": path,
                     "def_line": _def_line(obj), "tools": tools, "log": _tail(log) or None})
        fp = os.path.join(out_dir, _sanitize(name), "meta.json")
        with open(fp, "w") as f:
            json.dump(meta, f, indent=2, default=_json_default)
        entry["files"]["meta"] = os.path.abspath(fp)
        result["kernels"].append(entry)
    shutil.rmtree(work, ignore_errors=True)
    _emit(result, 1 if result["errors"] else 0)


def supervise(argv=None):
    """Run main() in a worker process so that a compiler crash (abort, segfault in MLIR/LLVM,
    NVVM or ptxas) still ends in one JSON object; the crashed function is reported and the
    remaining ones are compiled by a new worker."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") or a.startswith("--_") for a in argv):
        return main(argv)
    crashed = []
    with tempfile.TemporaryDirectory(prefix="cute_aot_") as td:
        res_path = os.path.join(td, "result.json")
        while True:
            cmd = [sys.executable, os.path.abspath(__file__)] + argv + ["--_result", res_path]
            for k in crashed:
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
            log = _plain(tail.decode("utf-8", "replace"))
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
                   "traceback": "", "lineno": None, "log": _tail(log)}
            if current is None or any(c["kernel"] == current for c in crashed) or len(crashed) >= 64:
                result = result or {"version_file": None, "target": None, "cutlass_dsl_version": None,
                                    "python": sys.version.split()[0], "out": None, "kernels": [], "skipped": [],
                                    "warnings": [], "errors": []}
                result["errors"] = list(result.get("errors", [])) + [err]
                rc = 1
                break
            crashed.append(err)
    for k in ("done", "current", "exit_code"):
        result.pop(k, None)
    if crashed:
        result["errors"] = crashed + [e for e in result.get("errors", [])
                                      if not any(e.get("kernel") == c["kernel"] and e.get("type") == "CompilerCrash"
                                                 for c in crashed)]
        rc = max(rc, 1)
    _emit(result, rc)


if __name__ == "__main__":
    supervise()
