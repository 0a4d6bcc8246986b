"""triton_aot.py's launch capture: the version's run() called with fake tensors while Triton's
own launch path runs up to the compile, so the kernels it would launch are compiled ahead of time
(and, for the zygote's prewarm, into Triton's cache). rung writes it beside triton_aot.py."""

import inspect
import json
import operator
import os
import signal
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aot_common import Lazy, _last_frame_in, _same_file, import_version  # noqa: E402
from aot_common import Capture as _Capture, format_exc as _format_exc, tail as _tail  # noqa: E402

# Triton, imported at first use (by then the script has imported it, or failed saying why): the
# supervisor never imports it.
triton = Lazy('triton')
tl = Lazy('triton.language')


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
    import triton.compiler  # noqa: F401
    from triton.backends.compiler import GPUTarget
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
