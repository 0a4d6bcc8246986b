"""rung's Python worker: executes, never judges.

rung (Rust) owns the inputs, the poisoning, the hashing, the metrics and the verdicts. This
process only calls functions: a version's `run(...)`, a problem's `reference(...)`, a GPU MODE
`custom_kernel` or a KernelBench `ModelNew`, with tensors that live in files rung wrote.

It is a zygote. The parent imports numpy, Triton and torch once, without touching CUDA, and
forks a child per check ({"op": "fork"}); the child serves that check's requests until
{"op": "exit"}, then ends, so nothing a version memoised survives into the next check and a
crash or a sticky CUDA error ends only the child. When a child dies the parent says so in one
line ({"ok": false, "error": {"type": "WorkerDied", ...}}).

The messages are defined in Rust (src/model/protocol.rs) and described by schema/worker.schema.json;
the first line out is the handshake. Lines are read a byte at a time so that no process reads
ahead into a line meant for another (parent and child share standard input). Standard output
carries the protocol only: anything a version prints goes to standard error.
"""

import importlib.util
import json
import os
import signal
import sys
import time
import traceback

import rung_problem as rp

PROTOCOL = 2
GUARD_BYTE = 0xC3

NUMPY_DTYPES = {
    "f64": "float64", "f32": "float32", "f16": "float16",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "u32": "uint32",
    # fp8 travels as its bytes.
    "f8e4m3": "uint8", "f8e5m2": "uint8",
}
TORCH_NAMES = {
    "f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "u32": "uint32",
    "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
}

_proto = None  # the protocol's stream (the original standard output)


_token = None  # a forked child's token (the fork request's), on each of its answers


def _send(obj):
    if _token is not None and "id" in obj:
        obj = dict(obj, token=_token)
    _proto.write(json.dumps(obj) + "\n")
    _proto.flush()


def _readline():
    """One line from standard input, read a byte at a time (no read-ahead)."""
    buf = bytearray()
    while True:
        b = os.read(0, 1)
        if not b:
            return None if not buf else buf.decode()
        if b == b"\n":
            return buf.decode()
        buf += b


def _np():
    import numpy
    return numpy


class HostStorage:
    """What Triton's interpreter asks of a tensor's storage, over host memory."""

    def __init__(self, arr):
        self.arr = arr

    def data_ptr(self):
        return self.arr.ctypes.data

    def cpu(self):
        return self

    def copy_(self, other):
        if other is not self and other.arr.ctypes.data != self.arr.ctypes.data:
            self.arr[...] = other.arr


class HostDtype:
    def __init__(self, name, itemsize):
        self.name = name
        self.itemsize = itemsize

    def __str__(self):
        return "torch." + self.name

    __repr__ = __str__

    def __eq__(self, other):
        return str(self) == str(other)

    def __hash__(self):
        return hash(str(self))


class HostTensor:
    """A numpy array dressed as the torch tensor Triton's interpreter expects (its data stays
    where rung mapped it, so the kernel writes rung's buffer)."""

    def __init__(self, arr, dtype):
        self.arr = arr
        self._storage = HostStorage(arr)
        self.dtype = HostDtype(TORCH_NAMES[dtype], arr.itemsize)
        self.shape = tuple(arr.shape)
        self.device = "cpu"

    def data_ptr(self):
        return self.arr.ctypes.data

    def untyped_storage(self):
        return self._storage

    def storage_offset(self):
        return 0

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def stride(self, dim=None):
        s = tuple(x // self.arr.itemsize for x in self.arr.strides)
        return s if dim is None else s[dim]

    def numel(self):
        return int(self.arr.size)

    def element_size(self):
        return self.arr.itemsize

    def dim(self):
        return self.arr.ndim

    def is_contiguous(self):
        return self.arr.flags["C_CONTIGUOUS"]

    def new_empty(self, *_, **__):
        return HostTensor(self.arr, _rung_dtype(self.dtype.name))

    def set_(self, *_):
        return self

    def copy_(self, other):
        self._storage.copy_(other._storage)
        return self

    def clone(self):
        return HostTensor(self.arr.copy(), _rung_dtype(self.dtype.name))

    is_cuda = False

    def __len__(self):
        return self.shape[0]


def _rung_dtype(torch_name):
    for k, v in TORCH_NAMES.items():
        if v == torch_name:
            return k
    return "f32"


def _map(spec, mode):
    np = _np()
    dtype = spec["dtype"]
    if dtype not in NUMPY_DTYPES:
        raise TypeError("%s tensors cannot be mapped on the CPU (numpy has no %s)" % (dtype, dtype))
    shape = tuple(spec["shape"])
    return np.memmap(spec["path"], dtype=NUMPY_DTYPES[dtype], mode=mode, shape=shape)


_modules = {}


def _load(path, fresh_name=None):
    path = os.path.abspath(path)
    if path not in _modules:
        name = fresh_name or "rung_version_%d" % len(_modules)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _modules[path] = module
    return _modules[path]


def _error(exc, file):
    tb = traceback.extract_tb(exc.__traceback__)
    lineno = None
    want = os.path.abspath(file) if file else None
    for frame in tb:
        if want and os.path.abspath(frame.filename) == want:
            lineno = frame.lineno
    if isinstance(exc, SyntaxError) and exc.lineno and (not want or os.path.abspath(exc.filename or "") == want):
        lineno = exc.lineno
    text = str(exc).strip()
    err = {
        "type": type(exc).__name__,
        "message": text.splitlines()[-1] if text else type(exc).__name__,
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    }
    if lineno:
        err["lineno"] = lineno
    if file:
        err["file"] = file
    return err


# ---------------------------------------------------------------------------------------------
# Tensors on the GPU, with guard zones


class Guarded(object):
    """A tensor on the GPU inside a larger allocation whose head and tail are filled with
    GUARD_BYTE: a kernel writing a little past either end changes them instead of faulting."""

    def __init__(self, path, dtype, shape, guard):
        import numpy as np
        import torch
        self.path = path
        self.guard = guard
        host = np.fromfile(path, dtype=np.uint8)
        self.nbytes = host.size
        self.raw = torch.empty(self.nbytes + 2 * guard, dtype=torch.uint8, device="cuda")
        if guard:
            self.raw[:guard].fill_(GUARD_BYTE)
            self.raw[guard + self.nbytes:].fill_(GUARD_BYTE)
        body = self.raw[guard:guard + self.nbytes]
        body.copy_(torch.from_numpy(host))
        self.tensor = body.view(getattr(torch, TORCH_NAMES[dtype])).view(tuple(shape))

    def write_back(self):
        """Copies the tensor's bytes back to rung's file; returns the guard breach, if any."""
        g = self.guard
        self.raw[g:g + self.nbytes].cpu().numpy().tofile(self.path)
        if not g:
            return None
        return _breach(self.raw[:g].cpu().numpy(), self.raw[g + self.nbytes:].cpu().numpy(), g)


def _breach(head, tail, guard):
    np = _np()
    hb = np.nonzero(head != GUARD_BYTE)[0]
    tb = np.nonzero(tail != GUARD_BYTE)[0]
    if hb.size == 0 and tb.size == 0:
        return None
    farthest = int(tb[-1]) + 1 if tb.size else -(guard - int(hb[0]))
    return {"before": int(hb.size), "after": int(tb.size), "farthest": farthest}


class HostGuarded(object):
    """The same guard zones in host memory, for Triton's interpreter."""

    def __init__(self, path, dtype, shape, guard):
        np = _np()
        if dtype not in NUMPY_DTYPES:
            raise TypeError("%s tensors cannot be mapped on the CPU (numpy has no %s)" % (dtype, dtype))
        self.path = path
        self.guard = guard
        body = np.fromfile(path, dtype=np.uint8)
        self.nbytes = body.size
        self.raw = np.full(self.nbytes + 2 * guard, GUARD_BYTE, dtype=np.uint8)
        self.raw[guard:guard + self.nbytes] = body
        self.arr = self.raw[guard:guard + self.nbytes].view(NUMPY_DTYPES[dtype]).reshape(tuple(shape))

    def write_back(self):
        g = self.guard
        self.raw[g:g + self.nbytes].tofile(self.path)
        return _breach(self.raw[:g], self.raw[g + self.nbytes:], g)


# ---------------------------------------------------------------------------------------------
# Triton kernels that really launched


_launched = []


def _hook_triton():
    """Wraps JITFunction.run so that every kernel a call launches is remembered: its PTX and
    cubin are what really ran on this GPU."""
    try:
        from triton.runtime import jit
    except Exception:
        return
    original = jit.JITFunction.run
    if getattr(original, "_rung_hooked", False):
        return

    def run(self, *args, **kwargs):
        kernel = original(self, *args, **kwargs)
        try:
            grid = kwargs.get("grid")
            _launched.append((kernel, grid))
        except Exception:
            pass
        return kernel

    run._rung_hooked = True
    jit.JITFunction.run = run


def _triton_launches(fn):
    """The names of the Triton kernels that fn() launches (the launch hook's records)."""
    import torch
    before = len(_launched)
    fn()
    torch.cuda.synchronize()
    names = []
    for kernel, _ in _launched[before:]:
        try:
            name = str(getattr(kernel, "name", None) or getattr(kernel.metadata, "name", "kernel"))
        except Exception:
            continue
        if name not in names:
            names.append(name)
    return names


def _kernel_launches(fn, gpu):
    """(the Triton kernels fn() launches, by the launch hook; with `gpu`, every GPU kernel it
    launches, by torch's profiler, or None where the profiler could not run or recorded none,
    so that a listing that failed never reads as a fallback)."""
    import torch
    prof = None
    if gpu:
        try:
            from torch.profiler import ProfilerActivity, profile
            prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            prof.__enter__()
        except Exception:
            prof = None
    try:
        names = _triton_launches(fn)
    finally:
        if prof is not None:
            try:
                prof.__exit__(None, None, None)
            except Exception:
                prof = None
    kernels = None
    if prof is not None:
        try:
            cuda = torch.autograd.DeviceType.CUDA
            kernels = sorted({e.name for e in prof.events() if getattr(e, "device_type", None) == cuda
                              and not e.name.startswith("Memcpy") and not e.name.startswith("Memset")}) or None
        except Exception:
            kernels = None
    return names, kernels


def _captured(out_dir):
    seen = {}
    for kernel, grid in _launched:
        try:
            h = str(getattr(kernel, "hash", "") or "")
            if not h or h in seen:
                continue
            name = getattr(kernel, "name", None) or getattr(kernel.metadata, "name", "kernel")
            rec = {"name": str(name), "hash": h}
            asm = getattr(kernel, "asm", {}) or {}
            os.makedirs(out_dir, exist_ok=True)
            for key in ("ptx", "cubin"):
                if key in asm:
                    p = os.path.join(out_dir, "%s-%s.%s" % (name, h[:12], key))
                    data = asm[key]
                    with open(p, "wb") as f:
                        f.write(data if isinstance(data, (bytes, bytearray)) else str(data).encode())
                    rec[key] = p
            warps = getattr(getattr(kernel, "metadata", None), "num_warps", None)
            if warps:
                rec["num_warps"] = int(warps)
            seen[h] = rec
        except Exception:
            continue
    del _launched[:]
    return list(seen.values())


# ---------------------------------------------------------------------------------------------
# Requests


def _sync_and_pending():
    """Synchronises the call's stream, then the whole device: the second wait is work the call
    left running on another stream (milliseconds)."""
    import torch
    torch.cuda.current_stream().synchronize()
    t = time.perf_counter()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


def _call(req, state):
    np = _np()
    mode = req.get("mode", "interpret")
    t_import = time.perf_counter()
    module = _load(req["file"])
    phases = {"import": time.perf_counter() - t_import} if req["file"] not in state["imported"] else {}
    state["imported"].add(req["file"])
    fn = getattr(module, req["function"], None)
    if fn is None:
        raise AttributeError("%s defines no %s()" % (req["file"], req["function"]))
    kwargs = {}
    host = {}
    guarded = {}
    guard = int(req.get("guard_bytes") or 0)
    for name, arg in req.get("args", {}).items():
        if "tensor" in arg:
            t = arg["tensor"]
            if mode == "cuda":
                g = Guarded(t["path"], t["dtype"], t["shape"], guard)
                guarded[name] = g
                kwargs[name] = g.tensor
            elif mode == "interpret" and guard:
                g = HostGuarded(t["path"], t["dtype"], t["shape"], guard)
                guarded[name] = g
                kwargs[name] = HostTensor(g.arr, t["dtype"])
            else:
                arr = _map(t, "r+")
                host[name] = arr
                kwargs[name] = arr if mode == "reference" else HostTensor(arr, t["dtype"])
        else:
            kwargs[name] = arg["value"]
    if mode == "cuda":
        import torch
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    result = fn(**kwargs)
    resp = {}
    if mode == "cuda":
        resp["pending_ms"] = _sync_and_pending()
    seconds = time.perf_counter() - t0
    guards = []
    for name, g in guarded.items():
        breach = g.write_back()
        if breach:
            breach["name"] = name
            guards.append(breach)
    if guards:
        resp["guards"] = guards
    if mode == "cuda":
        kernels = _captured(os.path.join(state["dir"], "launched"))
        if kernels:
            resp["kernels"] = kernels
    returns = req.get("returns") or {}
    if returns:
        names = list(returns)
        if isinstance(result, dict):
            values = [result[n] for n in names]
        elif isinstance(result, (tuple, list)) and len(names) > 1:
            values = list(result)
        else:
            values = [result]
        if len(values) != len(names):
            raise ValueError("reference() returned %d outputs, rung.toml declares %d (%s)" % (len(values), len(names), ", ".join(names)))
        for name, value in zip(names, values):
            spec = returns[name]
            if hasattr(value, "detach"):
                value = value.detach().cpu().numpy()
            arr = np.asarray(value)
            if tuple(arr.shape) != tuple(spec["shape"]) and arr.size == int(np.prod(spec["shape"])):
                arr = arr.reshape(spec["shape"])
            if tuple(arr.shape) != tuple(spec["shape"]):
                raise ValueError("reference() returned %s with shape %s; rung.toml says %s" % (name, list(arr.shape), spec["shape"]))
            out = _map(spec, "w+")
            out[...] = arr.astype(out.dtype)
            out.flush()
    for arr in host.values():
        arr.flush()
    resp["seconds"] = seconds
    if phases:
        resp["phases"] = phases
    return resp


def _user_rungs(req):
    """Runs every @rung("name") function of the user's checks.py on one size's buffers. Each is
    its own result: ok, or the error with its traceback. The functions get numpy arrays by name
    (inputs, outputs) and the size variables."""
    import types
    registry = []

    def rung(name):
        def register(fn):
            registry.append((name, fn))
            return fn
        return register

    shim = types.ModuleType("rung")
    shim.rung = rung
    sys.modules["rung"] = shim
    path = os.path.abspath(req["file"])
    spec = importlib.util.spec_from_file_location("rung_user_checks_%d" % len(_modules), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    arrays = {}
    for group in ("inputs", "outputs"):
        arrays[group] = {name: _map(t, "r") for name, t in req[group].items()}
    results = []
    for name, fn in registry:
        try:
            fn(arrays["inputs"], arrays["outputs"], dict(req["sizes"]))
            results.append({"name": name, "ok": True})
        except BaseException as exc:  # the user's assertion is the verdict
            err = _error(exc, req["file"])
            r = {"name": name, "ok": False, "error": err["message"], "traceback": err["traceback"]}
            if err.get("lineno"):
                r["lineno"] = err["lineno"]
            results.append(r)
    return {"rungs": results}


# ---------------------------------------------------------------------------------------------
# Timing


_bench = {}


def _problem_modules(problem, version_path, fmt):
    """The problem's module and the version's, each checked for what its format needs (GPU MODE:
    generate_input, ref_kernel, custom_kernel; KernelBench: Model, get_inputs, get_init_inputs,
    ModelNew). The problem's folder goes on sys.path first, for its own imports."""
    pdir = os.path.dirname(os.path.abspath(problem))
    if pdir not in sys.path:
        sys.path.insert(0, pdir)
    first = os.path.abspath(problem) not in _modules
    prob = _load(problem, "reference" if fmt == "gpu-mode" else None)
    if first:
        # Before the version is imported: what it may not replace (rung_problem.patched_harness).
        rp.watch_problem(pdir, also=(sys.modules.get("__main__"),))
    version = _load(version_path)
    if fmt == "gpu-mode":
        for fn in ("generate_input", "ref_kernel"):
            if not hasattr(prob, fn):
                raise AttributeError("%s defines no %s()" % (problem, fn))
        if not hasattr(version, "custom_kernel"):
            raise AttributeError("%s defines no custom_kernel()" % version_path)
    else:
        for fn in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(prob, fn):
                raise AttributeError("%s defines no %s" % (problem, fn))
        if not hasattr(version, "ModelNew"):
            raise AttributeError("%s defines no ModelNew" % version_path)
    return prob, version


def _seeded_model(cls, init, seed, device):
    """A KernelBench model built under `seed`, so Model and ModelNew get the same weights."""
    import torch
    torch.manual_seed(seed)
    return cls(*init).to(device)


def _fresh_seed():
    """A seed no one has seen: the bench's re-check draws its inputs from it."""
    return int.from_bytes(os.urandom(6), "little")


def _recheck(on_timed, on_fresh):
    """A problem bench's re-check: the version called on the timed buffers (set 0) refilled with
    a fresh draw, judged as a check case; (reason code, why) when it fails, else None. A failure
    there that a call on new tensors does not repeat is a result remembered by pointer or shape
    (a cache, a CUDA graph replayed on the old buffers): its timed calls did no real work."""
    timed = on_timed()
    failed = rp.case_failure(timed)
    if failed is None:
        return None
    fresh = rp.case_failure(on_fresh())
    if fresh is None and failed[0] in ("problem-check", "mismatch", "unwritten"):
        return ("memoised", "called on the timed buffers refilled with fresh values, its answer is wrong "
                "(%s), while on new buffers it is right: it remembers results by pointer or shape, so "
                "its timed calls did no real work" % failed[1])
    return failed


def _problem_bench_setup(req):
    """A GPU MODE or KernelBench series: the problem makes its own inputs, one independent set
    per seed; `fn` is the version's entry (or the problem's reference); `recheck` runs the version
    once on set 0 and judges its output the problem's own way."""
    import torch
    pb = req["problem"]
    problem = pb["problem"]
    prob, version = _problem_modules(problem, pb["version"], pb["format"])
    seed = int(pb["seed"])
    device = pb.get("device") or "cuda"  # "cpu" only in tests of the re-check
    args = dict(pb.get("args") or {})
    n = max(1, int(pb.get("sets") or 1))
    sets = []
    with torch.no_grad():
        if pb["format"] == "gpu-mode":
            entry = prob.ref_kernel if pb.get("reference") else version.custom_kernel
            for k in range(n):
                a = dict(args)
                if "seed" in a:
                    a["seed"] = int(a["seed"]) + k
                torch.manual_seed(seed + k)
                sets.append(({"data": prob.generate_input(**a)}, []))

            def fn(data):
                return entry(data)

            def case(into):
                st = {}
                learn = _fresh_seed()
                a = dict(args)
                if "seed" in a:
                    a["seed"] = learn

                def draw():
                    torch.manual_seed(learn)
                    return prob.generate_input(**a)

                rp.learn_ref_slots(prob, draw(), st, device, draw)
                return rp.gpu_mode_case(prob, version, args, _fresh_seed(), rp.POISONS[0], st, device, {},
                                        RUNG_DTYPES, probe=False, into=into)

            def recheck():
                return _recheck(lambda: case(sets[0][0]["data"]), lambda: case(None))
        else:
            torch.manual_seed(seed)
            init = prob.get_init_inputs()
            model = _seeded_model(prob.Model if pb.get("reference") else version.ModelNew, init, seed, device)
            for k in range(n):
                torch.manual_seed(seed + k)
                sets.append(({"inputs": [x.to(device) if hasattr(x, "to") else x for x in prob.get_inputs()]}, []))

            def fn(inputs):
                return model(*inputs)

            def case(into):
                # Inputs are drawn again after the call only where get_inputs draws them the
                # same way twice.
                learn = _fresh_seed()
                again = rp.drawn_alike(rp.kernelbench_inputs(prob, learn, device),
                                       rp.kernelbench_inputs(prob, learn, device), "inputs")
                return rp.kernelbench_case(prob, lambda: _seeded_model(prob.Model, init, seed, device), model,
                                           _fresh_seed(), device, {}, RUNG_DTYPES, again=again, into=into)

            def recheck():
                return _recheck(lambda: case(sets[0][0]["inputs"]), lambda: case(None))
    if device == "cuda":
        torch.cuda.synchronize()
    flush_bytes = int(req.get("flush_bytes") or 0)
    flush = _Flusher(req.get("flush_ptx"), flush_bytes) if flush_bytes else None
    series = int(req.get("series") or 0)
    _bench.pop(series, None)

    def timed(**kw):
        with torch.no_grad():
            return fn(**kw)

    cuda = device == "cuda"
    _bench[series] = dict(fn=timed, sets=sets, flush=flush, next=0, recheck=recheck,
                          start=torch.cuda.Event(enable_timing=True) if cuda else None,
                          end=torch.cuda.Event(enable_timing=True) if cuda else None)
    return _bench[series]


def _bench_setup(req):
    import torch
    if req.get("problem"):
        return _problem_bench_setup(req)
    call = req["call"]
    module = _load(call["file"])
    fn = getattr(module, call["function"], None)
    if fn is None:
        raise AttributeError("%s defines no %s()" % (call["file"], call["function"]))
    base, tensors = {}, {}
    for name, arg in call.get("args", {}).items():
        if "tensor" in arg:
            t = arg["tensor"]
            g = Guarded(t["path"], t["dtype"], t["shape"], 0)
            tensors[name] = (t, g)
            base[name] = g.tensor
        else:
            base[name] = arg["value"]
    sets = [(base, [g for _, g in tensors.values()])]
    for extra in req.get("sets") or []:
        kw = dict(base)
        owned = []
        for name, path in extra.items():
            if name in tensors:
                t = tensors[name][0]
                g = Guarded(path, t["dtype"], t["shape"], 0)
                kw[name] = g.tensor
                owned.append(g)
        sets.append((kw, owned))
    flush_bytes = int(req.get("flush_bytes") or 0)
    flush = _Flusher(req.get("flush_ptx"), flush_bytes) if flush_bytes else None
    series = int(req.get("series") or 0)
    _bench.pop(series, None)
    _bench[series] = dict(fn=fn, sets=sets, flush=flush, next=0,
                          start=torch.cuda.Event(enable_timing=True), end=torch.cuda.Event(enable_timing=True))
    return _bench[series]


# CU_LIMIT_PERSISTING_L2_CACHE_SIZE: the L2 a context sets aside for accesses its streams'
# access policy windows mark persisting.
PERSISTING_L2 = 0x06
# The context's persisting-L2 set-aside as the child found it, before any version ran: an
# environment may start every context with one (MPS, or
# CUDA_DEVICE_DEFAULT_PERSISTING_L2_CACHE_PERCENTAGE_LIMIT), and that is not the version's doing.
_L2_BASELINE = None


def _note_l2_baseline():
    global _L2_BASELINE
    import ctypes
    try:
        size = ctypes.c_size_t(0)
        rc = ctypes.CDLL("libcuda.so.1").cuCtxGetLimit(ctypes.byref(size), PERSISTING_L2)
        _L2_BASELINE = int(size.value) if rc == 0 else 0
    except OSError:
        _L2_BASELINE = 0


class _Flusher:
    """rung's L2 flush, the same kernels the native worker runs (PTX from rung): read a buffer
    larger than L2 (evicting everything, writing back what was dirty), read it again evict-first,
    then discard the buffer's own lines, so a timed call starts from an L2 as near as user code
    can make it to Nsight Compute's `--cache-control all` (assets/kernels/copy.cu has why).
    Launched through the driver on torch's current stream, queued."""

    def __init__(self, ptx, nbytes):
        import ctypes
        import torch
        if not ptx:
            raise ValueError("bench: flush_bytes without flush_ptx")
        self.c = ctypes
        self.buf = torch.zeros(nbytes // 4, dtype=torch.int32, device="cuda")
        self.sink = torch.zeros(1, dtype=torch.int32, device="cuda")
        torch.cuda.synchronize()  # the runtime has made the primary context current
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.mod = ctypes.c_void_p()
        self._check(self.cu.cuModuleLoadData(ctypes.byref(self.mod), ctypes.c_char_p(ptx.encode())), "cuModuleLoadData")
        self.read, self.read_evict_first, self.discard = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        for f, name in ((self.read, b"rung_flush"), (self.read_evict_first, b"rung_flush_evict_first"),
                        (self.discard, b"rung_discard")):
            self._check(self.cu.cuModuleGetFunction(ctypes.byref(f), self.mod, name), name.decode())
        self.grid = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count * 4
        u64 = ctypes.c_uint64
        self.read_args = [u64(self.buf.data_ptr()), u64(nbytes // 16), u64(self.sink.data_ptr())]
        self.discard_args = [u64(self.buf.data_ptr()), u64(nbytes // 128)]
        self.read_params = (ctypes.c_void_p * 3)(*[ctypes.addressof(a) for a in self.read_args])
        self.discard_params = (ctypes.c_void_p * 2)(*[ctypes.addressof(a) for a in self.discard_args])
        self.torch = torch
        self.persisting = 0  # the largest persisting-L2 carve-out undone, bytes

    def _check(self, rc, what):
        if rc != 0:
            raise RuntimeError("L2 flush: %s failed with CUDA error %d" % (what, rc))

    def undo_persisting(self):
        """A carve-out of persisting L2 (cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize) and
        an access policy window) keeps a version's data through the flush. Every persisting
        line is turned back to normal before each timed call, so the flush evicts it; a limit
        raised above the context's baseline (_L2_BASELINE) is put back, and its size in bytes
        returned (0 when the version left it alone)."""
        c = self.c
        self.cu.cuCtxResetPersistingL2Cache()
        size = c.c_size_t(0)
        base = _L2_BASELINE or 0
        if self.cu.cuCtxGetLimit(c.byref(size), PERSISTING_L2) != 0 or size.value == base:
            return 0
        self.cu.cuCtxSetLimit(PERSISTING_L2, c.c_size_t(base))
        # A lowered limit is put back too, but it is no cache-state game.
        return int(size.value) if size.value > base else 0

    def __call__(self):
        c = self.c
        self.persisting = max(self.persisting, self.undo_persisting())
        stream = c.c_void_p(self.torch.cuda.current_stream().cuda_stream)
        for f, params in ((self.read, self.read_params), (self.discard, self.discard_params)):
            self._check(self.cu.cuLaunchKernel(f, self.grid, 1, 1, 512, 1, 1, 0, stream, params, None), "cuLaunchKernel")


class _Tracer:
    """CUPTI's activity records (kernels, copies, memsets on every stream), through ctypes: the
    same timing as the native worker's (src/core/cupti.rs). A call's time is the GPU's busy time for
    its work (the union of the intervals, overlaps once, idle gaps not at all), with the span
    from first start to last end beside it; rung's flush kernels are left out. The record fields
    are read at the offsets of CUDA 13's cupti_activity.h: start at 16, end at 24, a kernel's
    name at 104."""

    FLUSH = (b"rung_flush", b"rung_flush_evict_first", b"rung_discard")
    BUFFER = 1 << 20

    def __init__(self, path):
        import ctypes as c
        import struct
        self.c, self.work, self.buffers, self.spare = c, [], {}, []
        lib = c.CDLL(path)
        u8p = c.POINTER(c.c_uint8)
        req_t = c.CFUNCTYPE(None, c.POINTER(u8p), c.POINTER(c.c_size_t), c.POINTER(c.c_size_t))
        done_t = c.CFUNCTYPE(None, c.c_void_p, c.c_uint32, u8p, c.c_size_t, c.c_size_t)
        lib.cuptiActivityRegisterCallbacks.argtypes = [req_t, done_t]
        lib.cuptiActivityGetNextRecord.argtypes = [u8p, c.c_size_t, c.POINTER(u8p)]
        lib.cuptiActivityEnable.argtypes = [c.c_uint32]
        lib.cuptiActivityFlushAll.argtypes = [c.c_uint32]

        def requested(buf, size, max_records):
            b = self.spare.pop() if self.spare else (c.c_uint64 * (self.BUFFER // 8))()
            self.buffers[c.addressof(b)] = b
            buf[0] = c.cast(b, u8p)
            size[0] = self.BUFFER
            max_records[0] = 0

        def completed(_ctx, _stream, buf, _size, valid):
            rec = u8p()
            while lib.cuptiActivityGetNextRecord(buf, valid, c.byref(rec)) == 0 and rec:
                kind = struct.unpack_from("<I", c.string_at(rec, 4))[0]
                if kind in (3, 10):
                    raw = c.string_at(rec, 112)
                    ptr = struct.unpack_from("<Q", raw, 104)[0]
                    name = c.string_at(ptr) if ptr else b""
                elif kind in (1, 2):
                    raw, name = c.string_at(rec, 32), None
                else:
                    continue
                start, end = struct.unpack_from("<QQ", raw, 16)
                if start and end >= start:
                    self.work.append((start, end, name))
            b = self.buffers.pop(c.cast(buf, c.c_void_p).value, None)
            if b is not None:
                self.spare.append(b)

        self._callbacks = (req_t(requested), done_t(completed))  # kept alive for CUPTI
        self.lib = lib
        self.tracing = False
        lib.cuptiActivityDisable.argtypes = [c.c_uint32]
        self._check(lib.cuptiActivityRegisterCallbacks(*self._callbacks), "cuptiActivityRegisterCallbacks")
        self.on()

    KINDS = (10, 1, 2)  # concurrent kernels, copies, memsets

    def on(self):
        if not self.tracing:
            for kind in self.KINDS:
                self._check(self.lib.cuptiActivityEnable(kind), "cuptiActivityEnable(%d)" % kind)
            self.tracing = True

    def off(self):
        """Stops tracing (the device must be idle): calls made now pay no tracing overhead."""
        if self.tracing:
            for kind in self.KINDS:
                self._check(self.lib.cuptiActivityDisable(kind), "cuptiActivityDisable(%d)" % kind)
            self.tracing = False

    def _check(self, rc, what):
        if rc != 0:
            msg = self.c.c_char_p()
            self.lib.cuptiGetResultString(rc, self.c.byref(msg))
            raise RuntimeError("%s: %s" % (what, (msg.value or b"CUPTI error %d" % rc).decode()))

    def take(self):
        """The work CUPTI finished since the last call (the device must be idle)."""
        self._check(self.lib.cuptiActivityFlushAll(0), "cuptiActivityFlushAll")
        work, self.work = self.work, []
        return work

    @classmethod
    def call_ms(cls, work):
        """(busy, span) in ms, or None when the call left no record."""
        own = sorted((s, e) for s, e, name in work if name not in cls.FLUSH)
        if not own:
            return None
        busy, (lo, hi) = 0, own[0]
        for s, e in own[1:]:
            if s > hi:
                busy += hi - lo
                lo, hi = s, e
            else:
                hi = max(hi, e)
        busy += hi - lo
        return busy / 1e6, (max(e for _, e in own) - own[0][0]) / 1e6


_TRACER = []
# Under CUPTI's tracing a Python call's own host time grew two to three times on an H200 (torch
# and Triton make many driver calls per launch, each traced). So each sample of a Python bench is
# two calls on consecutive input sets: one untraced, for the host and event times, and one with
# tracing on, for the GPU's busy time (the headline, as the native worker's).


def _tracer():
    """(tracer, None) once CUPTI traces in this process, else (None, why). The libcupti already
    in the process (torch links one) comes first: two copies cannot both trace."""
    if _TRACER:
        return _TRACER[0]
    path, why = os.environ.get("RUNG_CUPTI") or None, None
    if path == "off":
        path, why = None, "RUNG_CUPTI=off"
    try:
        with open("/proc/self/maps") as maps:
            loaded = [line.split()[-1] for line in maps if "/libcupti.so" in line]
        if loaded and why is None:
            path = loaded[0]
    except OSError:
        pass
    if path is None and why is None:
        import glob
        found = [f for base in sys.path for f in sorted(glob.glob(os.path.join(base or ".", "nvidia", "*", "lib", "libcupti.so*")))]
        path = found[0] if found else None
        why = None if path else "no libcupti found (RUNG_CUPTI, or a nvidia-cuda-cupti wheel)"
    got = (None, why)
    if path:
        try:
            got = (_Tracer(path), None)
        except Exception as e:  # noqa: BLE001 - any failure means events
            got = (None, "%s: %s" % (path, e))
    if got[1]:
        got = (None, got[1] + "; timed by events")
    _TRACER.append(got)
    return got


def _bench_one(b, fn, kw):
    if b["flush"] is not None:
        b["flush"]()
    # Queued behind the flush, so the host's launch overhead is hidden as in real use.
    b["start"].record()
    t0 = time.perf_counter()
    fn(**kw)
    t1 = time.perf_counter()
    b["end"].record()
    import torch
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return {"gpu_ms": b["start"].elapsed_time(b["end"]), "host_ms": (t1 - t0) * 1e3, "wall_ms": (t2 - t0) * 1e3}


def _traced_one(b, fn, kw, tracer):
    """One more call with CUPTI tracing on: (busy, span) in ms from its activity records, or
    None when it left none."""
    import torch
    tracer.take()  # the device is idle: what CUPTI holds is older work
    tracer.on()
    try:
        if b["flush"] is not None:
            b["flush"]()
        fn(**kw)
        torch.cuda.synchronize()
    finally:
        tracer.off()
    return _Tracer.call_ms(tracer.take())


def _graph_replay(b, calls, replays):
    """`calls` calls on set 0 captured into one CUDA graph, replayed once to warm and then
    `replays` times between events: per-call milliseconds. No flush between captured calls."""
    import torch
    kw = b["sets"][0][0]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        b["fn"](**kw)  # launched once outside the capture, as torch asks
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            b["fn"](**kw)
    g.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(replays):
        b["start"].record()
        g.replay()
        b["end"].record()
        torch.cuda.synchronize()
        out.append(b["start"].elapsed_time(b["end"]) / calls)
    return out


def _bench_req(req, state):
    resp = {}
    series = int(req.get("series") or 0)
    if req.get("call") or req.get("problem"):
        b = _bench_setup(req)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < float(req.get("warmup_seconds") or 0):
            kw = b["sets"][b["next"] % len(b["sets"])][0]
            b["next"] += 1
            _bench_one(b, b["fn"], kw)
        empty = sorted(_bench_one(b, lambda **_: None, {})["wall_ms"] for _ in range(32))
        resp["fixed_ms"] = empty[len(empty) // 2]
        tracer, why = _tracer()
        if tracer is not None:
            try:
                __import__("torch").cuda.synchronize()
                tracer.off()
            except Exception as e:  # noqa: BLE001 - a tracer that cannot stop is not used
                tracer, why = None, "CUPTI: %s; timed by events" % e
        b["tracer"], b["timer_note"] = tracer, why
    b = _bench.get(series)
    if b is None:
        raise ValueError("bench: series %d has no call set up" % series)
    if req.get("profile"):
        _profiled_call(b)
        return resp
    samples = []
    tracer = b.get("tracer")
    for _ in range(int(req.get("samples") or 0)):
        kw = b["sets"][b["next"] % len(b["sets"])][0]
        b["next"] += 1
        sample = _bench_one(b, b["fn"], kw)
        if tracer is not None:
            # The traced call takes the next input set, as the next sample would.
            kw = b["sets"][b["next"] % len(b["sets"])][0]
            b["next"] += 1
            try:
                traced = _traced_one(b, b["fn"], kw, tracer)
            except Exception as e:  # noqa: BLE001 - events from here on, with the reason
                tracer, b["tracer"], traced = None, None, None
                b["timer_note"] = "CUPTI stopped: %s; timed by events" % e
            if traced:
                sample["busy_ms"], sample["span_ms"] = traced
        samples.append(sample)
    if int(req.get("graph_calls") or 0) > 0:
        resp["graph_ms"] = _graph_replay(b, int(req["graph_calls"]), int(req.get("graph_replays") or 1))
    if req.get("write_back") and b.get("recheck"):
        # A problem: a judged case on set 0's buffers, refilled.
        with __import__("torch").no_grad():
            failed = b["recheck"]()
        if failed:
            resp["recheck_reason"], resp["recheck"] = failed
    elif req.get("write_back"):
        # The outputs are shared by the input sets: one more call on set 0 (the real one).
        _bench_one(b, b["fn"], b["sets"][0][0])
        for g in b["sets"][0][1]:
            g.write_back()
    harness = rp.patched_harness()
    if harness:
        raise HarnessPatched("the version replaced or changed %s, which rung's judge runs: its verdict cannot be trusted"
                             % ", ".join(harness))
    patched = rp.patched_timers()
    if patched:
        raise TimerPatched("the version replaced %s: its timing cannot be trusted" % ", ".join(patched))
    resp["samples"] = samples
    if b.get("timer_note"):
        resp["timer_note"] = b["timer_note"]
    if b["flush"] is not None and b["flush"].persisting:
        resp["l2_persisting_bytes"] = b["flush"].persisting
    return resp


class TimerPatched(Exception):
    """A version replaced a clock or a synchronisation point the bench reads."""


class HarnessPatched(Exception):
    """A version replaced or changed a function its judge runs (rung_problem.patched_harness)."""


def _profiled_call(b):
    """For `rung profile`: a call on set 0 outside the profiler (Triton compiles on its first
    call), then one between cuProfilerStart and cuProfilerStop, for Nsight Compute started with
    --profile-from-start off."""
    import ctypes
    import torch
    kw = b["sets"][0][0]
    b["fn"](**kw)
    torch.cuda.synchronize()
    cu = ctypes.CDLL("libcuda.so.1")
    rc = cu.cuProfilerStart()
    if rc != 0:
        raise RuntimeError("cuProfilerStart failed with CUDA error %d" % rc)
    try:
        b["fn"](**kw)
        torch.cuda.synchronize()
    finally:
        cu.cuProfilerStop()


def _ceiling(req):
    """A large bf16 GEMM through torch.matmul (cuBLAS): the best of `reps`, in TFLOP/s."""
    import torch
    if req.get("kind") != "gemm-bf16":
        raise ValueError("the Python worker measures the bf16 GEMM ceiling only")
    n = int(req["size"])
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    # Timed as the native worker times the copy ceiling and CUDA benches: CUPTI's busy time when
    # it traces, else events.
    tracer, note = _tracer()
    if tracer:
        tracer.on()
    for _ in range(3):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(max(1, int(req.get("reps") or 10))):
        if tracer:
            tracer.take()  # the device is idle: what CUPTI holds is older work
        start.record()
        torch.matmul(a, b)
        end.record()
        torch.cuda.synchronize()
        times = _Tracer.call_ms(tracer.take()) if tracer else None
        best = min(best, times[0] if times else start.elapsed_time(end))
    out = {"ceilings": {"torch.matmul": 2.0 * n ** 3 / (best * 1e-3) / 1e12}}
    if note:
        out["timer_note"] = note
    return out


# ---------------------------------------------------------------------------------------------
# GPU MODE and KernelBench problems


RUNG_DTYPES = {v: k for k, v in TORCH_NAMES.items()}


def _problem(req, state):
    """One test of a GPU MODE or KernelBench problem: with `warmup`, the version's compile phase
    (one unjudged call); otherwise one judged case per seed (rung_problem.py)."""
    import torch
    device = "cuda" if state["mode"] == "cuda" else "cpu"
    seeds = [int(s) for s in (req.get("seeds") or [req["seed"]])]
    tolerances = req.get("tolerances") or {}
    phases = {}
    t = time.perf_counter()
    prob, version = _problem_modules(req["problem"], req["version"], req["format"])
    phases["import"] = time.perf_counter() - t
    args = dict(req.get("args") or {})
    gm = req["format"] == "gpu-mode"

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    cases = []
    with torch.no_grad():
        if not gm:
            torch.manual_seed(seeds[0])
            with torch.device(device):
                init = prob.get_init_inputs()
            if "model_new" not in state:
                state["model_new"] = _seeded_model(version.ModelNew, init, seeds[0], device)
            model_new = state["model_new"]
        if req.get("warmup"):
            # The compile phase: the version's first call (load_inline, torch.compile and
            # Triton compile here), then, for a version that declares Triton kernels, a second
            # whose launches are listed; for GPU MODE, the tensors ref_kernel writes.
            t = time.perf_counter()
            # Its inputs are drawn under a seed of their own (seeds[-1]), so nothing it leaves
            # behind, freed memory included, holds a judged case's answer.
            lap = [t]

            def mark(name):
                # Where the compile phase's time goes: warmup_inputs (the inputs and the
                # reference's look), warmup_call (the version's first call), warmup_listing.
                sync()
                now = time.perf_counter()
                phases["warmup_" + name] = now - lap[0]
                lap[0] = now

            names = gpu_names = None
            gpu = device == "cuda" and bool(req.get("list_gpu_kernels"))
            listing = device == "cuda" and (req.get("list_kernels") or gpu)
            if gm:
                a = dict(args)
                if "seed" in a:
                    a["seed"] = seeds[-1]
                def draw():
                    torch.manual_seed(seeds[-1])
                    return prob.generate_input(**a)

                data = draw()
                rp.learn_ref_slots(prob, data, state, device, draw)
                mark("inputs")
                version.custom_kernel(rp.clone(data) if listing else data)
                mark("call")
                if listing:
                    names, gpu_names = _kernel_launches(lambda: version.custom_kernel(data), gpu)
                    mark("listing")
                del data
            else:
                inputs = rp.kernelbench_inputs(prob, seeds[-1], device)
                state["regenerable"] = rp.drawn_alike(inputs, rp.kernelbench_inputs(prob, seeds[-1], device), "inputs")
                mark("inputs")
                model_new(*inputs)
                mark("call")
                if listing:
                    names, gpu_names = _kernel_launches(lambda: model_new(*inputs), gpu)
                    mark("listing")
                del inputs
            sync()
            phases["warmup"] = time.perf_counter() - t
            out = {"args": args, "cases": []}
            if names is not None and req.get("list_kernels"):
                out["launched"] = names
            if gpu_names is not None:
                out["launched_gpu"] = gpu_names
            patched = rp.patched_timers()
            if patched:
                out["patched"] = patched
            harness = rp.patched_harness()
            if harness:
                out["harness"] = harness
            return {"seconds": phases["warmup"], "phases": phases, "problem": out}
        if gm:
            for k, seed in enumerate(seeds):
                cases.append(rp.gpu_mode_case(prob, version, args, seed, rp.POISONS[k % 2], state, device,
                                              tolerances, RUNG_DTYPES, probe=k == 0 and not req.get("benchmark")))
        else:
            for seed in seeds:
                cases.append(rp.kernelbench_case(prob, lambda: _seeded_model(prob.Model, init, seeds[0], device),
                                                 model_new, seed, device, tolerances, RUNG_DTYPES,
                                                 state.get("regenerable", ())))
    rp.mark_replays(cases)
    for c in cases:
        for k, v in c.pop("phases").items():
            phases[k] = phases.get(k, 0.0) + v
    resp = {"seconds": sum(c["seconds"] for c in cases), "phases": phases,
            "problem": {"args": args, "cases": cases}}
    if device == "cuda":
        kernels = _captured(os.path.join(state["dir"], "launched"))
        if kernels:
            resp["kernels"] = kernels
    return resp


# ---------------------------------------------------------------------------------------------
# The child: one check


_done_fd = None  # the child's end of the pipe that tells the zygote an exit was asked for


def _leave():
    """The child's one way out when rung asked it to (or rung is gone): it tells the zygote
    first, so that any other ending, a version's os._exit(0) included, is reported at once."""
    try:
        if _done_fd is not None:
            os.write(_done_fd, b"x")
    except OSError:
        pass
    os._exit(0)


def _serve_child(fork_req, t_fork, gate):
    global _token
    _token = fork_req.get("token")
    mode = fork_req.get("mode", "interpret")
    state = {"mode": mode, "imported": set(), "dir": os.environ.get("RUNG_WORKER_DIR", "/tmp")}
    phases = {"fork": time.perf_counter() - t_fork}
    if mode == "cuda":
        t = time.perf_counter()
        try:
            import torch
            torch.cuda.init()
            torch.empty(1, device="cuda")
            torch.cuda.synchronize()
        except BaseException as exc:
            _send({"id": fork_req.get("id"), "ok": False, "error": _error(exc, None)})
            os._exit(3)
        phases["cuda_init"] = time.perf_counter() - t
        _note_l2_baseline()
        _hook_triton()
    if gate is not None:
        # The prewarm's time and how many of its children were killed, when it is done.
        text = b""
        while True:
            chunk = os.read(gate, 64)
            if not chunk:
                break
            text += chunk
        os.close(gate)
        parts = text.decode().split()
        if len(parts) == 2:
            phases["prewarm"] = float(parts[0])
            if int(parts[1]):
                phases["prewarm_killed"] = float(parts[1])
    _send({"id": fork_req.get("id"), "ok": True, "pid": os.getpid(), "phases": phases})
    while True:
        line = _readline()
        if line is None:
            _leave()
        if not line.strip():
            continue
        req = json.loads(line)
        op = req.get("op")
        if op == "exit":
            _send({"id": req.get("id"), "ok": True})
            _leave()
        try:
            resp = {"id": req.get("id"), "ok": True}
            if op == "checks":
                resp.update(_user_rungs(req))
            elif op == "call":
                resp.update(_call(req, state))
            elif op == "problem":
                resp.update(_problem(req, state))
            elif op == "bench":
                resp.update(_bench_req(req, state))
            elif op == "ceiling":
                resp.update(_ceiling(req))
            else:
                raise ValueError("unknown op %r" % op)
        except BaseException as exc:  # the verdict is rung's to give
            file = req.get("file") or req.get("version")
            resp = {"id": req.get("id"), "ok": False, "error": _error(exc, file)}
        _send(resp)


def _prewarm_start(req):
    """Starts the fork's prewarm calls at once, each in its own child that exits without a word,
    so Triton compiles every specialisation in parallel into the cache the check's child then
    reads. With `prewarm_arch` a child compiles for that GPU without opening it (run() with fake
    tensors, triton_capture.warm_cache); otherwise it opens the GPU and calls run(). Returns what
    _prewarm_wait needs, or None when there is nothing to do."""
    calls = req.get("prewarm") or []
    if not calls:
        return None
    arch = req.get("prewarm_arch")
    limit = float(req.get("prewarm_seconds") or 30.0)
    t0 = time.perf_counter()
    pids = []
    for call in calls:
        pid = os.fork()
        if pid == 0:
            try:
                if arch:
                    # The capture's own time limit is past the zygote's, which kills the child:
                    # a run() that never returns is then reported as the time-out it is.
                    os.environ["RUNG_CAPTURE_SECONDS"] = str(int(limit) + 30)
                    here = os.path.dirname(os.path.abspath(__file__))
                    if here not in sys.path:
                        sys.path.insert(0, here)
                    import triton_capture
                    args = {k: ({"tensor": {"dtype": v["tensor"]["dtype"], "shape": v["tensor"]["shape"]}}
                                if "tensor" in v else v) for k, v in (call.get("args") or {}).items()}
                    triton_capture.warm_cache(call["file"], {"args": args}, int(arch))
                else:
                    import torch
                    torch.cuda.init()
                    _call(call, {"mode": "cuda", "imported": set(),
                                 "dir": os.environ.get("RUNG_WORKER_DIR", "/tmp")})
                    torch.cuda.synchronize()
            except BaseException as exc:
                sys.stderr.write("rung prewarm: %s: %s\n" % (type(exc).__name__, exc))
            sys.stderr.flush()
            os._exit(0)
        pids.append(pid)
    return pids, t0, limit


def _prewarm_wait(pids, t0, limit):
    """Waits for the prewarm children; those still running at the limit are killed. Returns the
    seconds it took and how many were killed."""
    deadline = t0 + limit
    killed = 0
    while pids:
        for pid in list(pids):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                pids.remove(pid)
        if pids and time.perf_counter() > deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            for pid in pids:
                os.waitpid(pid, 0)
            killed = len(pids)
            break
        if pids:
            time.sleep(0.002)
    return time.perf_counter() - t0, killed


def _death(status):
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "signal %d" % sig
        return "the child running the check was killed by %s" % name
    return ("the process running the check exited with status %d before it answered "
            "(the version, or something it called, ended it)" % os.WEXITSTATUS(status))


def _preimport():
    """Modules that torch imports on first use, imported here once so every forked child finds
    them (RUNG_PREIMPORT, comma-separated): torch.use_deterministic_algorithms and torch.compile
    import torch._inductor.config, 900 modules and 4-6 s, in every process that calls them.
    Before the harness's torch entries are remembered, so the children see the same torch."""
    import importlib
    for name in filter(None, os.environ.get("RUNG_PREIMPORT", "").split(",")):
        try:
            importlib.import_module(name)
        except Exception as exc:
            sys.stderr.write("rung: preimport %s: %s: %s\n" % (name, type(exc).__name__, exc))
        # A module that opened CUDA here would leave every forked child unable to use it.
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            sys.stderr.write("rung: preimport %s initialised CUDA in the zygote: forked children cannot use it\n" % name)


def main():
    global _proto
    t_start = time.perf_counter()
    # The protocol keeps the real standard output; prints go to standard error.
    _proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    interpret = "--interpret" in sys.argv
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    packages = {}
    for mod in ("numpy", "triton", "torch"):
        try:
            packages[mod] = str(__import__(mod).__version__)
        except Exception:
            pass
    if "torch" in packages:
        _preimport()
        rp.save_timers()
        rp.watch_torch()
    caps = ["call", "checks", "fork"]
    if "triton" in packages:
        caps.append("triton-interpret")
    if "torch" in packages:
        caps.append("problems")
        if not interpret:
            caps.append("cuda")
    _send({"protocol": PROTOCOL, "worker": "python", "pid": os.getpid(), "capabilities": caps,
           "python": sys.version.split()[0], "packages": packages,
           "start_seconds": time.perf_counter() - t_start})
    while True:
        line = _readline()
        if line is None:
            break
        if not line.strip():
            continue
        req = json.loads(line)
        op = req.get("op")
        if op == "exit":
            break
        if op != "fork":
            _send({"id": req.get("id"), "ok": False,
                   "error": {"type": "BadRequest", "message": "the zygote takes fork and exit; %r needs a fork first" % op}})
            continue
        t_fork = time.perf_counter()
        _proto.flush()
        sys.stderr.flush()
        prewarm = _prewarm_start(req)
        # Prewarm children that open the GPU: the check's child is forked after them, since
        # opening the GPU while six processes do so at once took 0.68 s instead of 0.14 s on the
        # H200 and slowed the compiles too. Children that compile without the GPU: it is forked
        # at once and opens the GPU alone while they compile, then waits at the gate.
        compile_only = bool(prewarm and req.get("prewarm_arch"))
        gate = None
        if prewarm and not compile_only:
            seconds, killed = _prewarm_wait(*prewarm)
            gate = os.pipe()
            os.write(gate[1], ("%f %d\n" % (seconds, killed)).encode())
            os.close(gate[1])
            t_fork = time.perf_counter()
        elif compile_only:
            gate = os.pipe()
        done = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                global _done_fd
                os.close(done[0])
                _done_fd = done[1]
                if compile_only:
                    os.close(gate[1])
                _serve_child(req, t_fork, gate[0] if gate else None)
            finally:
                os._exit(4)
        os.close(done[1])
        if gate:
            os.close(gate[0])
        if compile_only:
            seconds, killed = _prewarm_wait(*prewarm)
            try:
                os.write(gate[1], ("%f %d\n" % (seconds, killed)).encode())
            except OSError:
                pass  # the child is gone: waitpid below reports it
            os.close(gate[1])
        _, status = os.waitpid(pid, 0)
        # Non-blocking: anything the version forked may still hold the write end.
        os.set_blocking(done[0], False)
        try:
            asked = os.read(done[0], 1) == b"x"
        except BlockingIOError:
            asked = False
        os.close(done[0])
        # Asked to exit, or 3: it already said why it could not start. Anything else (a signal,
        # an abort, a version's own exit) is reported at once, with its status.
        if not ((asked and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)
                or (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3)):
            _send({"ok": False, "error": {"type": "WorkerDied", "message": _death(status)}})


if __name__ == "__main__":
    main()
