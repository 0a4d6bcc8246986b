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
cuobjdump is found, <function>.ptxas.txt (`ptxas -v` re-run on the PTX, when a ptxas
is found) and meta.json. The script parses no tool's report: rung reads registers,
spills, stack, barriers and static shared memory from the .ptxas.txt and the cubin's
`cuobjdump --dump-resource-usage`. The dynamic shared memory and block of each launch
come from the lowered host code (best effort). Tools are looked for in
CUTE_AOT_CUDA_BIN, CUDA_HOME/bin, next to TRITON_PTXAS_PATH, on PATH, in the
nvidia-* wheels of this Python and in ~/.cache/rung/env.

stdout carries exactly one JSON object:
    {"version_file", "target", "cutlass_dsl_version", "python", "out", "tools",
     "kernels": [{"name", "kind", "kernel_name", "files": {kind: path},
                  "device_kernels": [{"name", "block", "num_warps", "dynamic_shared"}],
                  "num_warps", "block", "gpu_name", "target", "signature", "constexprs", "launches",
                  "compile_time_s", "inferred", "notes"}],
     "skipped": [{"name", "reason"}], "warnings": [str],
     "errors": [{"kernel", "type", "exception", "message", "traceback", "lineno", "col",
                 "file", "function", ...}]}
Error types: SyntaxError / ImportError (importing the version file; lineno in it),
CompilationError (anything raised by cute.compile while tracing or compiling, its class
in "exception": DSLUserCodeError, ValueError ...; lineno/col in the version file from
the DSL's diagnostic, else the innermost traceback frame in the file; "function" the
enclosing def; "rendered" the DSL's own report, "suggestion" its hint; "ptxas_log" the
ptxas messages seen in the DSL's log, which rung parses and maps through the .loc
directives of the dumped PTX, saved as <function>.failed.ptx), CompilerCrash (the
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
import inspect
import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aot_common import JsonOut, _chain, import_version  # noqa: E402
from aot_common import LAST_LOG as _LAST_LOG, Capture as _Capture, format_exc as _format_exc, tail as _tail  # noqa: E402
from aot_common import (  # noqa: E402
    clean_kernel_dir, find_tool, load_sig_json, parse_arch, parse_cli, run_tool as _run, supervise as _supervise,
    write_file, write_meta, write_sass)
from aot_common import strip_ansi as _plain  # noqa: E402
# The version's functions, their parameters' types and arguments, and its errors (cute_version.py).
from cute_version import (  # noqa: E402
    _def_line, _fn_ast, _inner, _literal_kwargs, _names_in, _sanitize, _split_spec, build_args, build_error, dtype_of,
    find_functions, infer_ranks, make_launcher)


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


# --------------------------------------------------------------------------- tools


def _tool(name):
    """A CUDA tool: CUTE_AOT_<NAME>, else where aot_common looks."""
    return find_tool(name, "CUTE_AOT_%s" % name.upper())


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
        files["ptx"] = write_file(os.path.join(kdir, "%s.ptx" % stem), arts.PTX)
    if "cubin" not in files and isinstance(getattr(arts, "CUBIN", None), (bytes, bytearray)):
        files["cubin"] = write_file(os.path.join(kdir, "%s.cubin" % stem), arts.CUBIN)
    llvm_text = None
    try:
        llvm_text = str(compiled.ir_module)
    except Exception:
        pass
    if llvm_text:
        elided = re.sub(r'(llvm\.mlir\.global internal constant @\w*binary\w*\()"(?:[^"\\]|\\.)*"',
                        r'\1"<embedded cubin elided: see %s.cubin>"' % stem, llvm_text)
        files["llvm.mlir"] = write_file(os.path.join(kdir, "%s.llvm.mlir" % stem), elided)

    ptx = ""
    if "ptx" in files:
        with open(files["ptx"]) as f:
            ptx = f.read()
    m = re.search(r"^\s*\.target\s+(\w+)", ptx, re.MULTILINE)
    gpu_name = m.group(1) if m else arch
    entries = ptx_entries(ptx)
    func_name = getattr(compiled, "function_name", None)
    launches = parse_launches(llvm_text, func_name) if func_name else []

    # ptxas -v on the DSL's PTX (the DSL's own ptxas run prints no report); rung parses the
    # report, with the cubin's resource usage.
    ptxas = tools.get("ptxas")
    if ptx and ptxas:
        with tempfile.TemporaryDirectory() as td:
            pf = os.path.join(td, stem + ".ptx")
            with open(pf, "w") as f:
                f.write(ptx)
            cmd = [ptxas, "-v", "-lineinfo", "--gpu-name=%s" % gpu_name, pf, "-o", os.path.join(td, stem + ".cubin")]
            rc, text = _run(cmd)
        report = text.replace(td + os.sep, "")
        files["ptxas"] = write_file(os.path.join(kdir, "%s.ptxas.txt" % stem), report.rstrip("\n") + "\n")
        if rc != 0:
            notes.append("ptxas -v (%s) failed on the DSL's PTX (exit %d): see %s.ptxas.txt; "
                         "registers come from the cubin" % (ptxas, rc, stem))
    elif ptx:
        notes.append("no ptxas found: no spill/barrier report")
    cubin_path = files.get("cubin")
    sass_tool = None
    if cubin_path:
        sass, sass_tool = write_sass(tools, cubin_path, kdir, stem, notes)
        if sass:
            files["sass"] = sass

    device = []
    for i, (ename, block) in enumerate(entries):
        la = launches[i] if len(launches) == len(entries) else None
        dyn = la["dynamic_shared"] if la and isinstance(la.get("dynamic_shared"), int) else None
        device.append({
            "name": ename, "block": block,
            "num_warps": (block[0] * block[1] * block[2] + 31) // 32 if block else None,
            "dynamic_shared": dyn,
        })
    if not device:
        notes.append("no .entry in the PTX: the function launches no kernel")
    if len(device) > 1:
        notes.append("%d device kernels: the top-level figures are the maximum over them" % len(device))

    warps = [d["num_warps"] for d in device if d["num_warps"] is not None]
    block = device[0]["block"] if len(device) == 1 else None
    entry = {
        "name": name,
        "kernel_name": device[0]["name"] if device else None,
        "device_kernels": device,
        "files": files,
        "num_warps": max(warps) if warps else None,
        "num_stages": None,
        "block": block,
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
    ap.add_argument("--signature-json", default=None,
                    help="JSON object (or a file holding it): function -> {param: spec} (see the module doc)")
    ap.add_argument("--kernel", "--function", action="append", default=None, dest="kernel",
                    help="only these functions (repeatable)")
    ap.add_argument("--options", default="", help="extra cute.compile options, e.g. \"--opt-level 2\"")
    ap.add_argument("--no-lineinfo", action="store_true", help="compile without --generate-line-info")
    result = {"version_file": None, "target": None, "cutlass_dsl_version": None, "python": sys.version.split()[0],
              "out": None, "kernels": [], "skipped": [], "warnings": [], "errors": []}
    args = parse_cli(ap, argv, _OUT, result, "cute_aot.py")
    path, out_dir = result["version_file"], result["out"]
    try:
        arch = "sm_%d%s" % parse_arch(args.arch)
        specs = load_sig_json(args.signature_json, "function")
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
        clean_kernel_dir(os.path.join(out_dir, _sanitize(name)), _sanitize(name))
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
                clean_kernel_dir(os.path.join(out_dir, _sanitize(name)), _sanitize(name))
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
                err["files"] = {"failed_ptx": write_file(os.path.join(kdir, "%s.failed.ptx" % _sanitize(name)), ptx)}
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
        write_meta(entry, os.path.join(out_dir, _sanitize(name)),
                   {"cutlass_dsl_version": result["cutlass_dsl_version"], "version_file": path,
                    "def_line": _def_line(obj), "tools": tools, "log": _tail(log) or None}, _json_default)
        result["kernels"].append(entry)
    shutil.rmtree(work, ignore_errors=True)
    _emit(result, 1 if result["errors"] else 0)


def supervise(argv=None):
    """main() in a worker process, so that a compiler crash still ends in one JSON reply
    (aot_common.supervise)."""
    _supervise(__file__, argv, main, _emit, "cute_aot_",
               {"version_file": None, "target": None, "cutlass_dsl_version": None, "python": sys.version.split()[0],
                "out": None, "kernels": [], "skipped": [], "warnings": [], "errors": []},
               plain=_plain, no_traceback="")


if __name__ == "__main__":
    supervise()
