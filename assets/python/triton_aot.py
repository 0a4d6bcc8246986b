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
<kernel>.ptxas.txt (the `ptxas -v` report) and meta.json. The script parses no tool's
report: rung reads registers, spills, stack and barriers from the .ptxas.txt and the
cubin's `cuobjdump --dump-resource-usage`.

stdout carries exactly one JSON object:
    {"version_file", "target", "triton_version", "python", "out", "tools", "launch",
     "kernels": [{"name", "kernel_name", "files": {ext: path}, "num_warps", "num_stages",
                  "num_ctas", "shared", "ptxas_source", "gpu_name", "target", "signature",
                  "constexprs", "inferred", "notes", "captured", "grid", ...}],
     "skipped": [{"name", "reason"}], "warnings": [str],
     "errors": [{"kernel", "type", "message", "traceback", "lineno", "col", "file", ...}]}
Error types: SyntaxError / ImportError (importing the version file; lineno in it),
CompilationError (Triton front end; lineno mapped from Triton's function-relative
"at L:C" to the version file, "chain" lists call sites through helpers), PTXASError
and other backend errors ("ptxas_log" holds ptxas's messages, which rung parses and maps
through the .loc directives of the rejected PTX, saved as <kernel>.failed.ptx),
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
import inspect
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aot_common import JsonOut, import_version  # noqa: E402
from aot_common import LAST_LOG as _LAST_LOG, Capture as _Capture, format_exc as _format_exc  # noqa: E402
from aot_common import (  # noqa: E402
    clean_kernel_dir, find_tool, load_sig_json, parse_arch, parse_cli, run_tool as _run, supervise as _supervise,
    write_meta, write_sass)
# The version's kernels and types (triton_kernels.py), and run()'s launches captured
# (triton_capture.py, which the zygote's prewarm also imports).
from triton_kernels import (  # noqa: E402
    _constexpr_value, _jit_src, _launches, _names_used, _unwrap, build_error, find_kernels, infer_arg_type,
    infer_constexpr, normalize_type)
from triton_capture import _RUN_MARK, capture_launches, captured_prep, load_launch_json  # noqa: E402


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


# --------------------------------------------------------------------------- tools


def _tool(name):
    """A CUDA tool: TRITON_<NAME>_PATH, where aot_common looks, then Triton's own bin/."""
    also = [os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")] if triton else []
    return find_tool(name, "TRITON_%s_PATH" % name.upper(), also)


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

    # The `ptxas -v` report (rung parses it, with the cubin's resource usage): the one Triton
    # printed (TRITON_DUMP_PTXAS_LOG), else ptxas -v run again on the PTX.
    ptxas_report, ptxas_source = None, None
    if "Compiling entry function" in (log or ""):
        ptxas_report = "\n".join(l for l in log.splitlines() if l.startswith("ptxas") or "bytes stack frame" in l)
        ptxas_source = "ptxas -v (Triton's own ptxas run)"
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
            ptxas_source = "ptxas -v re-run on the PTX: " + " ".join(
                os.path.basename(c) if c.startswith(td) else c for c in cmd)
    if ptxas_report:
        fp = os.path.join(kdir, "%s.ptxas.txt" % name)
        with open(fp, "w") as f:
            f.write(ptxas_report.rstrip("\n") + "\n")
        files["ptxas"] = os.path.abspath(fp)

    sass_tool = None
    if files.get("cubin"):
        sass, sass_tool = write_sass(tools, files["cubin"], kdir, name, notes)
        if sass:
            files["sass"] = sass

    shared = md.get("shared")
    entry = {
        "name": name,
        "kernel_name": md.get("name", name),
        "files": files,
        "num_warps": md.get("num_warps", prep["options"]["num_warps"]),
        "num_stages": md.get("num_stages", prep["options"]["num_stages"]),
        "num_ctas": md.get("num_ctas"),
        "shared": shared,
        "ptxas_source": ptxas_source,
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
    write_meta(entry, kdir, {"triton_version": getattr(triton, "__version__", None),
                             "sass_tool": sass_tool, "options": prep["options"],
                             "divisible_by_16": prep["divisible_by_16"], "triton_metadata": md}, _json_default)
    return entry


# --------------------------------------------------------------------------- main


def main(argv=None):
    global triton, tl
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--signature-json", default=None,
                    help="JSON object (or a file holding it): kernel -> {signature, constexprs, num_warps, num_stages}")
    ap.add_argument("--launch-json", default=None,
                    help='JSON object (or a file holding it): {"args": {name: {"tensor": {"dtype", "shape"}} | '
                         '{"value": v}}}; run(**args) is called with fake tensors and the launches it makes '
                         'are compiled exactly as Triton would specialize them')
    ap.add_argument("--kernel", action="append", default=None, help="only these kernels (repeatable)")
    ap.add_argument("--num-warps", type=int, default=4, help="default when not in --signature-json")
    ap.add_argument("--num-stages", type=int, default=3, help="default when not in --signature-json")
    ap.add_argument("--_run_crash", default=None, help=argparse.SUPPRESS)
    result = {"version_file": None, "target": None, "triton_version": None, "python": sys.version.split()[0],
              "out": None, "kernels": [], "skipped": [], "warnings": [], "errors": []}
    args = parse_cli(ap, argv, _OUT, result, "triton_aot.py")
    path, out_dir = result["version_file"], result["out"]
    try:
        arch = parse_arch(args.arch)[0]
        specs = load_sig_json(args.signature_json, "kernel")
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
        clean_kernel_dir(os.path.join(out_dir, name), name)
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
    """main() in a worker process, so that a compiler crash still ends in one JSON reply
    (aot_common.supervise); a crash in the version's run() falls back to inference."""
    _supervise(__file__, argv, main, _emit, "triton_aot_",
               {"version_file": None, "target": None, "triton_version": None, "python": sys.version.split()[0],
                "out": None, "kernels": [], "skipped": [], "warnings": [], "errors": []},
               run_mark=_RUN_MARK, run_crash="the process %s while run() was called with the --launch-json arguments")


if __name__ == "__main__":
    supervise()
