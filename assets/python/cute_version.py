"""cute_aot.py's reading of a version: the CuTe DSL types of a function's parameters (from
annotations and names), its @cute.jit / @cute.kernel functions and the ranks of their tensors,
the arguments it is compiled with, and a compile error mapped back to the version's line. rung
writes it beside cute_aot.py."""

import ast
import importlib.util
import inspect
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aot_common import Lazy, _chain, _last_frame_in, _same_file  # noqa: E402
from aot_common import format_exc as _format_exc, tail as _tail, strip_ansi as _plain  # noqa: E402
from aot_common import DIAG_RE as _DIAG_RE, FLOAT_NAMES as _FLOAT_NAMES, INT_PREFIXES as _INT_PREFIXES  # noqa: E402

# CUTLASS and CuTe, imported at first use (by then the script has imported it, or failed saying why): the
# supervisor never imports it.
cutlass = Lazy('cutlass')
cute = Lazy('cutlass.cute')


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
    # 4) ptxas's messages: rung parses them and maps them back through the .loc directives of
    # the dumped PTX, saved beside them (failed_ptx), as it does nvcc's.
    if "ptxas" in text:
        if dump_dir and os.path.isdir(dump_dir):
            for f in sorted(os.listdir(dump_dir)):
                if f.endswith(".ptx"):
                    with open(os.path.join(dump_dir, f)) as fh:
                        err["failed_ptx"] = fh.read()
                    break
        err["ptxas_log"] = _tail(text)
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
