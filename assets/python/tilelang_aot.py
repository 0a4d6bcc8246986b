#!/usr/bin/env python3
"""Ahead-of-time compile the TileLang kernels of a rung version file, with no GPU.

    python tilelang_aot.py --version-file versions/v005-tilelang.py --arch 90a --out DIR [--kernel NAME ...]

The version module is imported from its path (its `run(...)` wrapper is never
called). Every module-level `@tilelang.jit` factory and bare `@T.prim_func` defined in
it (not imported from elsewhere) is compiled, no device needed:

    tilelang.compile(factory.get_tir(), target={"kind": "cuda", "arch": "sm_90a"},
                     execution_backend="tvm_ffi", out_idx=..., compile_flags=...,
                     pass_configs={..., "tl.emit_line_directives": True})

A factory is called with its default arguments (listed in the kernel's "notes"); a
parameter with no default is a SignatureError at its def. The factory's out_idx,
pass_configs and compile_flags are kept; the line directives make the PTX's .loc, and
the SASS of `nvdisasm -g`, point into the version file. `--arch` 90a / sm_90a compiles
for sm_90a, 90 / sm_90 for plain sm_90. CUDA_HOME is set to the toolkit of the nvcc
found where aot_common looks (CUDA_HOME, PATH, this Python's nvidia-* wheels,
~/.cache/rung/env); TileLang's and TVM-FFI's caches go to a scratch folder (the home
folder may be read-only). When `import torch` fails a compile-only torch stub is
written there and used (each kernel's "notes" say so).

Per kernel it writes DIR/<kernel>/<kernel>.cu (the device source TileLang's nvcc call
compiled), .ptx (what that call kept, --keep: the PTX its ptxas compiled), .cubin
(TileLang's), .sass when nvdisasm (`-c -g`, with version-file line info) or cuobjdump is
found, .ptxas.txt (`ptxas -v` on the PTX, when a ptxas is found), .tir.py (the
elaborated TileLang/TIR script) and meta.json. rung reads registers, spills and
barriers from the .ptxas.txt and the cubin.

stdout carries exactly one JSON object:
    {"version_file", "target", "tilelang_version", "python", "out", "tools",
     "kernels": [{"name", "captured": false, "files": {kind: path}, "num_warps",
                  "num_stages": null, "shared" (dynamic + static bytes of its launch),
                  "device_kernels": [{"name", "grid", "block", "dynamic_shared"}],
                  "gpu_name", "target", "compile_time_s", "notes"}],
     "skipped": [{"name", "reason"}], "warnings": [str],
     "errors": [{"kernel", "type", "exception", "message", "traceback", "lineno", "col",
                 "file", "function", ...}]}
Error types: SyntaxError / ImportError (importing the version file; lineno in it),
SignatureError, CompilationError (raised while elaborating or compiling, also a bare
@T.prim_func's elaboration at import; its class in
"exception": NameError, IndexError, InternalError ...; lineno from the innermost
traceback frame in the version file, else from TVM's span `--> version.py:LINE:COL`
or nvcc's `version.py(LINE): error`; "ptxas_log" and files.failed_ptx when ptxas
rejected the code), CompilerCrash (the compiler process died; the remaining kernels
are still compiled by a fresh worker process), UsageError, NoKernelsFound,
FileNotFoundError. "message" is one line; "traceback" is always a string ("" when
there is none). Everything TileLang, the tools or the version print goes to stderr.
Exit status: 0 when every kernel compiled, 1 on any error, 2 on bad arguments.

Only `tilelang` and the standard library are used (torch only if it imports). Written
for Python 3.9+ and tilelang 0.1.x (tested with 0.1.15).
"""

import argparse
import importlib
import inspect
import logging
import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aot_common import JsonOut, _chain, _last_frame_in, _same_file, import_version  # noqa: E402
from aot_common import LAST_LOG as _LAST_LOG, Capture as _Capture, format_exc as _format_exc  # noqa: E402
from aot_common import (  # noqa: E402
    clean_kernel_dir, find_tool, parse_arch, parse_cli, run_tool as _run, supervise as _supervise, tool_dirs,
    write_file, write_meta, write_sass)
from aot_common import strip_ansi as _plain, tail as _tail  # noqa: E402
from cute_version import _def_line, _enclosing_function, _sanitize  # noqa: E402

tilelang = None
_TL = {}  # TileLang's classes and its nvcc module, once imported

# tilelang imports torch unconditionally, though compiling never touches a tensor.
_TORCH_STUB = '''"""Compile-only stand-in for torch, written by rung's tilelang_aot.py: dtypes, no CUDA."""
import builtins
import sys
import types

__version__ = "0.0+rung.stub"
_SIZES = dict(bool=1, uint8=1, int8=1, int16=2, int32=4, int64=8, uint16=2, uint32=4, uint64=8, float16=2,
              bfloat16=2, float32=4, float64=8, complex64=8, complex128=16, float8_e4m3fn=1, float8_e4m3fnuz=1,
              float8_e5m2=1, float8_e5m2fnuz=1, float8_e8m0fnu=1, float4_e2m1fn_x2=1)


class dtype(object):
    def __init__(self, name):
        self.name, self.itemsize, self.is_floating_point = name, _SIZES[name], name.startswith(("float", "bfloat"))
    def __repr__(self):
        return "torch." + self.name


class _Any(object):  # whatever else is reached for: attributes of attributes, calls that do nothing
    def __init__(self, name):
        self._name = name
    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return _Any(self._name + "." + k)
    def __call__(self, *a, **k):
        return _Any(self._name + "()")
    def __bool__(self):
        return False
    def __mro_entries__(self, bases):
        return (object,)


class Tensor(object):
    __dlpack_c_exchange_api__ = None  # tvm_ffi then builds no torch DLPack addon


class device(object):
    def __init__(self, type="cpu", index=None):
        self.type, _, i = str(type).partition(":")
        self.index = builtins.int(i) if i else index


def __getattr__(k, _n="torch"):
    if k.startswith("__") or k in ("npu", "xpu", "musa"):
        raise AttributeError(k)
    return _Any(_n + "." + k)


def _false(*a, **k):
    return False


globals().update((_n, dtype(_n)) for _n in _SIZES)
half, float, double, short, int, long, cfloat, cdouble = (float16, float32, float64, int16, int32, int64,
                                                          complex64, complex128)
Size = type("Size", (tuple,), {})
Generator, Stream, Event = (type(_n, (object,), {}) for _n in ("Generator", "Stream", "Event"))
for _m in ("version", "cuda", "mps", "backends", "backends.cuda", "backends.mps", "backends.cudnn", "utils",
           "utils.dlpack", "utils.cpp_extension", "_C", "nn", "nn.functional", "library", "fx", "testing",
           "autograd", "_dynamo", "compiler", "distributed"):
    _mod = sys.modules["torch." + _m] = types.ModuleType("torch." + _m)
    _mod.__dict__.update(is_available=_false, is_built=_false, is_initialized=_false, _is_compiled=_false,
                         device_count=lambda: 0, Stream=Stream, Event=Event, cuda="13.0", hip=None,
                         __getattr__=lambda k, _n="torch." + _m: __getattr__(k, _n))
    _parent, _, _leaf = ("torch." + _m).rpartition(".")
    setattr(sys.modules[_parent], _leaf, _mod)
'''


def _json_default(o):
    return list(o) if isinstance(o, (set, tuple)) else str(o)


# Keep stdout clean for the single JSON object: from here on everything written to fd 1 goes
# to stderr, and the reply to the saved stdout (or, in the worker process, --_result's file).
_OUT = JsonOut(_json_default)
_emit, _progress = _OUT.emit, _OUT.progress


def _empty_result():
    return {"version_file": None, "target": None, "tilelang_version": None, "python": sys.version.split()[0],
            "out": None, "tools": None, "kernels": [], "skipped": [], "warnings": [], "errors": []}


def _fail(result, etype, message, code, exception=None, tb=""):
    result["errors"].append({"kernel": None, "type": etype, "exception": exception or etype, "message": message,
                             "traceback": tb, "lineno": None, "col": None, "file": result["version_file"],
                             "function": None})
    _emit(result, code)


# --------------------------------------------------------------------------- setup


def cuda_home():
    """The toolkit folder of the nvcc aot_common finds (or of any nvcc where it looks), the one
    holding include/: TileLang compiles with nvcc and the toolkit's headers."""
    nvcc = find_tool("nvcc")
    for d in ([os.path.dirname(nvcc)] if nvcc else []) + tool_dirs():
        for b in (d, os.path.dirname(os.path.realpath(os.path.join(d, "nvcc")))):
            if os.path.isfile(os.path.join(b, "nvcc")) and os.path.isdir(os.path.join(os.path.dirname(b), "include")):
                return os.path.dirname(b)
    return None


def prepare_env(work, home):
    """What must be set before tilelang is imported: the toolkit, the caches in `work` (not the home
    folder), torch or its stub. Returns a note when the stub is used."""
    os.environ["CUDA_HOME"] = os.environ["CUDA_PATH"] = home
    for k, sub in (("TILELANG_CACHE_DIR", "tilelang"), ("TVM_FFI_CACHE_DIR", "tvm-ffi"), ("XDG_CACHE_HOME", "xdg"),
                   ("TL_LOWER_TRACE_DIR", "lower_trace"), ("TILELANG_PASS_DIFF_OUTPUT", "pass_diff")):
        os.environ[k] = os.path.join(work, "cache", sub)
    os.environ["TILELANG_DISABLE_CACHE"] = "1"  # every build compiles (and nvcc's output is recorded)
    os.environ["TILELANG_PRINT_ON_COMPILATION"] = "0"
    try:
        with _Capture():
            importlib.import_module("torch")
        return None
    except Exception as e:
        for k in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
            del sys.modules[k]
        d = os.path.join(work, "torchstub", "torch")
        os.makedirs(d)
        write_file(os.path.join(d, "__init__.py"), _TORCH_STUB)
        sys.path.insert(0, os.path.dirname(d))
        return "compiled with rung's compile-only torch stub (import torch: %s)" % _plain(str(e)).split("\n")[0]


def find_kernels(mod, path):
    """[(name, object, "jit" | "prim_func", the Python function, factory arguments)]: the module-level
    @tilelang.jit factories (an @tilelang.autotune one with its first config) and @T.prim_funcs whose
    function is defined in the version file, in file order."""
    found, seen = [], set()
    for obj in list(vars(mod).values()):
        cfg = {}
        if isinstance(getattr(obj, "jit_impl", None), _TL["JITImpl"]):  # @tilelang.autotune (no GPU: not tuned)
            cfg = dict(obj.configs[0]) if isinstance(obj.configs, (list, tuple)) and obj.configs else {}
            obj = obj.jit_impl
        if isinstance(obj, _TL["JITImpl"]):
            kind, fn = "jit", getattr(obj.func, "orig_func", None)
        elif isinstance(obj, _TL["PrimFunc"]):
            kind, fn = "prim_func", getattr(obj, "orig_func", None)
        else:
            continue
        code = getattr(fn, "__code__", None)
        if code is None or not _same_file(code.co_filename, path) or fn.__name__ in seen:
            continue
        seen.add(fn.__name__)
        found.append((fn.__name__, obj, kind, fn, cfg))
    found.sort(key=lambda t: _def_line(t[3]) or 0)
    return found


# --------------------------------------------------------------------------- compile

# The most shared memory a block may use, KiB, by compute capability (opt-in maximum).
_SMEM_KIB = {80: 163, 86: 99, 87: 163, 89: 99, 90: 227, 100: 227, 103: 227, 110: 227, 120: 99, 121: 99}


def _kept_ptx(call, cu_path=None):
    """The PTX nvcc kept (--keep) in a recorded call, the one its ptxas compiled, or None; its
    `.file` for the temporary .cu named `cu_path` instead."""
    for f in sorted(os.listdir(call["keep"])) if call else []:
        if f.endswith(".ptx"):
            with open(os.path.join(call["keep"], f)) as fh:
                ptx = fh.read()
            return re.sub(r'(\.file\s+\d+\s+)"[^"]*tvm_kernels[^"]*\.cu"',
                          lambda m: '%s"%s"' % (m.group(1), cu_path), ptx) if cu_path else ptx
    return None


def _device_kernels(kernel):
    """[{"name", "grid", "block", "dynamic_shared"}] of the lowered device functions (a symbolic
    extent as its expression)."""
    out = []
    for gv, fn in kernel.artifact.device_mod.functions.items():
        at = dict(fn.attrs) if fn.attrs else {}
        te = {str(k): str(v) for k, v in dict(at.get("thread_extent", {})).items()}
        ext = [te.get(a + x, "1") for a in ("blockIdx.", "threadIdx.") for x in "xyz"]
        ext = [int(v) if v.isdigit() else v for v in ext]
        dyn = str(at.get("dyn_shared_memory_buf", 0))
        out.append({"name": str(at.get("global_symbol", gv.name_hint)), "grid": ext[:3], "block": ext[3:],
                    "dynamic_shared": int(dyn) if dyn.isdigit() else None})
    return out


def compile_kernel(name, obj, kind, fn, cfg, arch, out_dir, tools, work, calls):
    """Elaborates and compiles one kernel; returns its entry. TileLang's nvcc calls are recorded in
    `calls` (code, flags, cubin, the folder where nvcc kept its PTX), also when one fails."""
    notes, out_idx, configs, flags = [], None, {}, None
    pf = obj
    if kind == "jit":
        defaults = ["%s=%r" % (p.name, p.default) for p in inspect.signature(fn).parameters.values()
                    if p.default is not p.empty and p.name not in cfg]
        if cfg:
            notes.append("autotuned (not tuned here): factory called with its first config: "
                         + ", ".join("%s=%r" % kv for kv in cfg.items()))
        if defaults:
            notes.append("factory called with its defaults: " + ", ".join(defaults))
        out_idx, configs, flags = obj.out_idx, dict(obj.pass_configs or {}), obj.compile_flags
        if obj.execution_backend not in (None, "auto", "tvm_ffi"):
            notes.append("compiled with the tvm_ffi execution backend, not %s" % obj.execution_backend)
        pf = obj.get_tir(**cfg)
    configs.setdefault("tl.emit_line_directives", True)
    bufs = [pf.buffer_map[p] for p in pf.params if p in pf.buffer_map]
    syms = [str(s) for b in bufs for s in b.shape if isinstance(s, _TL["Var"])]
    if syms:
        notes.append("symbolic sizes: " + ", ".join(sorted(set(syms), key=syms.index)))
    nvcc = _TL["nvcc"]
    orig = nvcc.compile_cuda

    def recorded(code, target_format="ptx", arch=None, options=None, path_target=None, verbose=False):
        keep = tempfile.mkdtemp(dir=work)  # nvcc keeps its PTX there
        calls.append({"code": code, "format": target_format, "arch": arch, "options": options, "keep": keep})
        opts = ([options] if isinstance(options, str) else list(options or [])) + ["--keep", "--keep-dir=" + keep]
        calls[-1]["binary"] = orig(code, target_format, arch, opts, path_target, verbose)
        return calls[-1]["binary"]

    t0 = time.time()
    nvcc.compile_cuda = recorded
    try:
        with _Capture() as cap:
            kernel = tilelang.compile(pf, out_idx=out_idx, target={"kind": "cuda", "arch": arch},
                                      execution_backend="tvm_ffi", pass_configs=configs, compile_flags=flags)
    finally:
        nvcc.compile_cuda = orig
    elapsed = time.time() - t0
    if not calls or not calls[-1].get("binary"):
        raise RuntimeError("TileLang ran no nvcc compile for %s: nothing to save" % name)
    call = calls[-1]

    stem = _sanitize(name)
    kdir = os.path.join(out_dir, stem)
    os.makedirs(kdir, exist_ok=True)
    files = {"cuda": write_file(os.path.join(kdir, stem + ".cu"), call["code"])}
    ptx = _kept_ptx(call, files["cuda"]) or ""
    if ptx:
        files["ptx"] = write_file(os.path.join(kdir, stem + ".ptx"), ptx)
    else:
        notes.append("nvcc kept no PTX: no .ptx, no ptxas report")
    if call["format"] == "cubin":
        files["cubin"] = write_file(os.path.join(kdir, stem + ".cubin"), bytes(call["binary"]))
    else:
        notes.append("TileLang built a %s, not a cubin: no cubin, no SASS" % call["format"])
    m = re.search(r"^\s*\.target\s+(\w+)", ptx, re.MULTILINE)
    gpu_name = m.group(1) if m else arch
    report = ""
    if tools.get("ptxas") and ptx:
        td = tempfile.mkdtemp(dir=work)
        extra = [x for o in call["options"] or [] if o.startswith("--ptxas-options=")
                 for x in o.split("=", 1)[1].split(",") if x != "--verbose"]
        rc, report = _run([tools["ptxas"], "-v", "-lineinfo", "--gpu-name=%s" % gpu_name, files["ptx"],
                           "-o", os.path.join(td, stem + ".cubin")] + extra)
        shutil.rmtree(td, ignore_errors=True)
        files["ptxas"] = write_file(os.path.join(kdir, stem + ".ptxas.txt"), report.rstrip("\n") + "\n")
        if rc != 0:
            notes.append("ptxas -v (%s) failed on the PTX (exit %d): see %s.ptxas.txt" % (tools["ptxas"], rc, stem))
    elif ptx:
        notes.append("no ptxas found: no spill/barrier report")
    if "cubin" in files:
        sass, _ = write_sass(tools, files["cubin"], kdir, stem, notes)
        if sass:
            files["sass"] = sass
    files["tir"] = write_file(os.path.join(kdir, stem + ".tir.py"), pf.script().rstrip("\n") + "\n")

    device = _device_kernels(kernel)
    static = {}  # the static shared memory of each entry, from the ptxas report
    for sec in report.split("Compiling entry function '")[1:]:
        mm = re.search(r"(\d+) bytes smem", sec)
        static[sec.split("'")[0]] = int(mm.group(1)) if mm else 0
    warps = [(b[0] * b[1] * b[2] + 31) // 32 if all(isinstance(x, int) for x in b) else None
             for b in (d["block"] for d in device)]
    shared = [d["dynamic_shared"] + static[d["name"]] for d in device
              if d["name"] in static and d["dynamic_shared"] is not None]
    if len(device) > 1:
        notes.append("%d device kernels: the top-level figures are the maximum over them" % len(device))
    return {
        "name": name, "captured": False, "files": files,
        "num_warps": max(warps) if warps and None not in warps else None, "num_stages": None,
        "shared": max(shared) if shared and len(shared) == len(device) else None,
        "device_kernels": device, "gpu_name": gpu_name, "target": {"backend": "cuda", "arch": arch},
        "compile_time_s": round(elapsed, 3), "notes": notes,
        "_meta": {"out_idx": out_idx, "compile_flags": flags, "nvcc_arch": call["arch"],
                  "nvcc_options": call["options"], "pass_configs": {k: str(v) for k, v in configs.items()},
                  "params": [{"name": b.name, "dtype": str(b.dtype), "shape": [str(x) for x in b.shape]}
                             for b in bufs], "log": _tail(cap.text) or None},
    }


# --------------------------------------------------------------------------- errors


def build_error(name, e, path, file_lines, kdir, call):
    """Error dict for a failed elaboration or compile of kernel `name`, at the version's line."""
    chain = _chain(e)
    text = _plain(str(e))
    nvcc_out = None
    if "Compilation error:" in text:  # nvcc's failure: the source, its output, its command
        nvcc_out = text.split("Compilation error:", 1)[1].split("\nCommand:", 1)[0].strip()
        head = [ln.strip() for ln in nvcc_out.splitlines() if re.search(r"\b(?:error|fatal)(?: #[\w-]+)?\s*:", ln)]
        msg = "nvcc failed: " + (" ".join(head) or (nvcc_out.splitlines() or ["?"])[-1])
    else:  # a Python error, or TVM's (C++ frames, the message, then its span)
        text_head = text.split("\n  -->", 1)[0].splitlines()
        head = [ln.strip() for ln in text_head if ln.strip() and not ln.startswith(("Traceback", "  File ", "  ["))]
        msg = "%s: %s" % (type(e).__name__, " ".join(head) or type(e).__name__)
    err = {"kernel": name, "type": "CompilationError", "exception": type(e).__name__, "message": msg[:2000],
           "traceback": _tail(_format_exc(e)), "lineno": None, "col": None, "file": path, "function": None}
    if chain[-1] is not e:
        err["root_cause"] = _plain("%s: %s" % (type(chain[-1]).__name__, chain[-1]))
    for c in reversed(chain):  # 1) the innermost traceback frame in the version file
        fs = _last_frame_in(c.__traceback__, path)
        if fs is not None:
            err["lineno"] = fs.lineno
            break
    # 2) TVM's span (an error of the C++ lowering) or nvcc's diagnostic, in the version file
    spans = [m.groups() for m in re.finditer(r"-->\s+(\S+?):(\d+):(\d+)", text)]
    nvcc_diag = re.compile(r"^(\S[^\n(]*)\((\d+)\): (?:catastrophic )?error", re.MULTILINE)
    spans += [m.groups() + (None,) for m in nvcc_diag.finditer(nvcc_out or "")]
    for f, ln, col in spans if err["lineno"] is None else []:
        if os.path.exists(f) and _same_file(f, path):
            err["lineno"], err["col"] = int(ln), int(col) if col else None
            break
    ptx = _kept_ptx(call)
    if nvcc_out and "ptxas" in nvcc_out:  # rung maps ptxas's lines through the rejected PTX's .loc
        err["ptxas_log"] = _tail(nvcc_out)
        if ptx:
            os.makedirs(kdir, exist_ok=True)
            err["files"] = {"failed_ptx": write_file(os.path.join(kdir, "%s.failed.ptx" % _sanitize(name)), ptx)}
    ln = err["lineno"]
    if isinstance(ln, int) and 0 < ln <= len(file_lines):
        err["text"] = file_lines[ln - 1].rstrip()
        m = re.search(r"name '(\w+)' is not defined", text)
        hit = m and re.search(r"\b%s\b" % re.escape(m.group(1)), err["text"])
        if hit:
            err["col"] = hit.start() + 1
        err["function"] = _enclosing_function(file_lines, ln)
    if _LAST_LOG[0]:
        err["log"] = _tail(_LAST_LOG[0])
    return err


# --------------------------------------------------------------------------- main


def main(argv=None):
    global tilelang
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", action="append", default=None, help="only these kernels (repeatable)")
    result = _empty_result()
    args = parse_cli(ap, argv, _OUT, result, "tilelang_aot.py")
    path, out_dir = result["version_file"], result["out"]
    try:
        cc, suffix = parse_arch(args.arch)
        arch = "sm_%d%s" % (cc, suffix)
    except ValueError as e:
        _fail(result, "UsageError", str(e), 2)
    if not os.path.isfile(path):
        _fail(result, "FileNotFoundError", "version file not found: %s" % path, 1)
    result["target"] = {"backend": "cuda", "arch": arch}
    home = cuda_home()
    if home is None:
        _fail(result, "FileNotFoundError", "no CUDA toolkit found (an nvcc beside an include/ folder, in CUDA_HOME, "
              "on PATH, in this Python's nvidia-* wheels or ~/.cache/rung/env): TileLang compiles with nvcc", 1)
    # scratch space; inside the supervisor's temp dir when there is one (removed even after a crash)
    work = tempfile.mkdtemp(prefix="tilelang_aot_", dir=os.path.dirname(_OUT.result_path) if _OUT.result_path else None)
    stub_note = prepare_env(work, home)
    try:
        with _Capture():
            import tilelang as _tilelang
            import tvm
            from tilelang.jit import JITImpl
            from tilelang.contrib import nvcc
    except Exception as e:
        _fail(result, "ImportError", _plain("cannot import tilelang: %s: %s" % (type(e).__name__, e)), 1,
              type(e).__name__, _format_exc(e))
    tilelang = _tilelang
    tir = getattr(tvm, "tirx", None) or tvm.tir
    _TL.update(JITImpl=JITImpl, PrimFunc=tir.PrimFunc, Var=tir.Var, nvcc=nvcc)
    result["tilelang_version"] = getattr(tilelang, "__version__", None)
    # the frontend logs (CRITICAL) its rewritten source on every error in a kernel body
    logging.getLogger("tilelang.language.eager.builder").setLevel(logging.CRITICAL + 1)

    with open(path) as f:
        file_lines = f.read().split("\n")
    mod, err = import_version(path)
    if err is not None:
        err.update(col=err.get("col"), file=err.get("file") or path, traceback=err.get("traceback") or "",
                   message=" ".join(err["message"].split()),
                   function=_enclosing_function(file_lines, err["lineno"]) if err.get("lineno") else None)
        if err["type"] not in ("SyntaxError", "ImportError"):  # a bare @T.prim_func is elaborated at import
            in_tl = os.path.dirname(os.path.abspath(tilelang.__file__)) + os.sep in err["traceback"]
            err["type"], err["kernel"] = ("CompilationError", err["function"]) if in_tl else ("ImportError", None)
        result["errors"].append(err)
        _emit(result, 1)

    found = find_kernels(mod, path)
    selected = []
    for name, obj, kind, fn, cfg in found:
        if name in args._skip:
            continue  # crashed the compiler in an earlier worker; the supervisor reports it
        if args.kernel and name not in args.kernel:
            result["skipped"].append({"name": name, "reason": "not in --kernel"})
        else:
            selected.append((name, obj, kind, fn, cfg))
    for k in args.kernel or []:
        if k not in [f[0] for f in found]:
            result["warnings"].append("kernel %r (from --kernel) is not a @tilelang.jit factory or @T.prim_func "
                                      "of the version file" % k)
    if not selected and not args._skip:
        _fail(result, "NoKernelsFound", "no @tilelang.jit factory or @T.prim_func defined in %s" % path, 1)

    tools = dict({k: find_tool(k) for k in ("ptxas", "nvdisasm", "cuobjdump")}, nvcc=os.path.join(home, "bin", "nvcc"))
    result["tools"] = tools
    os.makedirs(out_dir, exist_ok=True)
    for name, obj, kind, fn, cfg in selected:
        _LAST_LOG[0] = ""
        _progress(result, name)
        kdir = os.path.join(out_dir, _sanitize(name))
        clean_kernel_dir(kdir, _sanitize(name))
        # a factory is called with its defaults (an eager one's tensors are declared in its body)
        missing = [p.name for p in inspect.signature(fn).parameters.values()
                   if kind == "jit" and p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                   and p.name not in getattr(obj.func, "tensor_args", {}) and p.name not in cfg]
        if missing:
            ln = _def_line(fn)
            result["errors"].append({
                "kernel": name, "type": "SignatureError", "exception": "SignatureError",
                "message": "the factory %s is compiled with its default arguments, but %s %s no default"
                           % (name, ", ".join(missing), "has" if len(missing) == 1 else "have"),
                "traceback": "", "lineno": ln, "col": None, "file": path, "function": name,
                "text": file_lines[ln - 1].rstrip() if ln else None})
            continue
        calls = []
        try:
            entry = compile_kernel(name, obj, kind, fn, cfg, arch, out_dir, tools, work, calls)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # the frontend, TVM's passes, nvcc, ptxas ...
            if isinstance(e, SystemExit):
                e = RuntimeError("SystemExit(%r) during compilation" % (e.code,))
            result["errors"].append(build_error(name, e, path, file_lines, kdir, calls[-1] if calls else None))
            continue
        limit = _SMEM_KIB.get(cc)
        if limit and (entry["shared"] or 0) > limit * 1024:
            result["warnings"].append("%s: its launch takes %d bytes of shared memory, more than the %d KiB a block "
                                      "may have on %s: it will not launch" % (name, entry["shared"], limit, arch))
        if stub_note:
            entry["notes"].append(stub_note)
        extra = dict(entry.pop("_meta"), tilelang_version=result["tilelang_version"], version_file=path, kind=kind,
                     def_line=_def_line(fn), tools=tools)
        write_meta(entry, kdir, extra, _json_default)
        result["kernels"].append(entry)
    shutil.rmtree(work, ignore_errors=True)
    _emit(result, 1 if result["errors"] else 0)


def supervise(argv=None):
    """main() in a worker process, so that a compiler crash still ends in one JSON reply
    (aot_common.supervise)."""
    _supervise(__file__, argv, main, _emit, "tilelang_aot_", _empty_result(), plain=_plain, no_traceback="")


if __name__ == "__main__":
    supervise()
