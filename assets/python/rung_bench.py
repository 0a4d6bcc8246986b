"""The Python worker's timing: a bench request's input sets and flush, the timed calls (between
events, and traced by CUPTI's activity records every other call), CUDA graph replay, the re-check
of what the timed calls returned, a profiled call, and the GPU's ceilings. rung_worker.py serves
its requests; rung writes it beside the worker."""

import os
import sys
import time

import rung_problem as rp
from rung_host import Guarded, _load, _modules

# ---------------------------------------------------------------------------------------------
# Timing


_bench = {}


def _problem_modules(problem, version_path, fmt, device="cuda"):
    """The problem's module and the version's, each checked for what its format needs (GPU MODE:
    generate_input, ref_kernel, custom_kernel; KernelBench: Model, get_inputs, get_init_inputs,
    ModelNew). The problem's folder goes on sys.path first, for its own imports. The problem's
    failing to import is ProblemCode, not the version's failure."""
    pdir = os.path.dirname(os.path.abspath(problem))
    first = os.path.abspath(problem) not in _modules
    with rp.problem_code("module", device):
        prob = _problem_module(problem, fmt)
    if first:
        # Before the version is imported: what it may not replace (rung_problem.patched_harness).
        # The worker's own modules too: the version runs in the same process.
        rp.watch_problem(pdir, also=(sys.modules.get("__main__"), sys.modules.get("rung_host"), sys.modules.get("rung_bench")))
    version = _load(version_path)
    if fmt == "gpu-mode":
        if not hasattr(version, "custom_kernel"):
            raise AttributeError("%s defines no custom_kernel()" % version_path)
    elif not hasattr(version, "ModelNew"):
        raise AttributeError("%s defines no ModelNew" % version_path)
    return prob, version


def _problem_module(problem, fmt):
    """The problem's module alone, checked for what its format needs (a judge's process imports
    no version). Its folder goes on sys.path first, for its own imports."""
    pdir = os.path.dirname(os.path.abspath(problem))
    if pdir not in sys.path:
        sys.path.insert(0, pdir)
    prob = _load(problem, "reference" if fmt == "gpu-mode" else None)
    needs = ("generate_input", "ref_kernel") if fmt == "gpu-mode" else ("Model", "get_inputs", "get_init_inputs")
    for fn in needs:
        if not hasattr(prob, fn):
            raise AttributeError("%s defines no %s%s" % (problem, fn, "()" if fmt == "gpu-mode" else ""))
    return prob


def _seeded_model(cls, init, seed, device):
    """A KernelBench model built under `seed`, so Model and ModelNew get the same weights."""
    import torch
    torch.manual_seed(seed)
    return cls(*init).to(device)


def _fresh_seed():
    """A seed no one has seen: the bench's re-check draws its inputs from it."""
    return int.from_bytes(os.urandom(6), "little")


# An input set this large is far past any L2 (tens of MB): rotating several sets would not change
# what a timed call finds in the cache, and would hold several times the memory. One is kept.
ONE_SET_BYTES = 1 << 30


def _draw_sets(n, draw):
    """`n` input sets, `draw(k)` making set k's keyword arguments; only the first when it alone is
    past ONE_SET_BYTES."""
    first = draw(0)
    if sum(t.numel() * t.element_size() for _, t in rp.flatten(first, "kw", [])) > ONE_SET_BYTES:
        return [(first, {})]
    return [(first, {})] + [(draw(k), {}) for k in range(1, n)]


def _problem_bench_setup(req):
    """A GPU MODE or KernelBench series: the problem makes its own inputs, one independent set
    per seed; `fn` is the version's entry (or the problem's reference); `observe(into, hints,
    folder)` calls the version once on fresh inputs (copied into `into`, set 0's buffers, when
    given) and writes what it saw for a judge's process (rung_problem.observe_*)."""
    import torch
    pb = req["problem"]
    problem = pb["problem"]
    prob, version = _problem_modules(problem, pb["version"], pb["format"])
    seed = int(pb["seed"])
    device = pb.get("device") or "cuda"  # "cpu" only in tests of the re-check
    args = dict(pb.get("args") or {})
    n = max(1, int(pb.get("sets") or 1))
    with torch.no_grad():
        if pb["format"] == "gpu-mode":
            entry = prob.ref_kernel if pb.get("reference") else version.custom_kernel

            def draw(k):
                a = dict(args)
                if "seed" in a:
                    a["seed"] = int(a["seed"]) + k
                torch.manual_seed(seed + k)
                return {"data": prob.generate_input(**a)}

            sets = _draw_sets(n, draw)

            def fn(data):
                return entry(data)

            def observe(into, hints, folder):
                return rp.observe_gpu_mode(prob, version, args, _fresh_seed(), rp.POISONS[0], hints, set(), device,
                                           folder, into)

            fresh = ("data", lambda s: rp.gpu_mode_draw(prob, args, s, device)())

        else:
            torch.manual_seed(seed)
            init = prob.get_init_inputs()
            model = _seeded_model(prob.Model if pb.get("reference") else version.ModelNew, init, seed, device)
            # Drawn on the device, as the check and the re-check draw them: a published size of
            # several GB takes minutes to draw on the host.
            sets = _draw_sets(n, lambda k: {"inputs": rp.kernelbench_inputs(prob, seed + k, device)})

            def fn(inputs):
                return model(*inputs)

            def observe(into, hints, folder):
                return rp.observe_kernelbench(prob, model, _fresh_seed(), device, set(hints.get("regenerable", ())),
                                              folder, into, inout=set(hints.get("inout_slots", ())))

            fresh = ("inputs", lambda s: rp.kernelbench_inputs(prob, s, device))

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
    _bench[series] = dict(fn=timed, sets=sets, flush=flush, next=0, observe=observe, fresh=fresh,
                          poison=_output_slots(pb["format"], sets, req.get("hints") or {}),
                          start=torch.cuda.Event(enable_timing=True) if cuda else None,
                          end=torch.cuda.Event(enable_timing=True) if cuda else None)
    return _bench[series]


class _SlotPoison:
    """One output tensor of a GPU MODE input set, poisoned again before each timed call (as a
    rung.toml version's outputs are): a call that finds its answer still there from the last one
    cannot skip its work."""

    def __init__(self, t):
        self.t = t

    def refill(self):
        rp.poison(self.t, rp.POISONS[0])


def _output_slots(fmt, sets, hints):
    """The tensors of every set's `data` the judge found the reference writes (`output_slots`),
    less those it also reads (`inout_slots`, whose drawn values are part of the answer). A
    KernelBench model returns new tensors: nothing to poison."""
    if fmt != "gpu-mode":
        return []
    outs = set(hints.get("output_slots", ())) - set(hints.get("inout_slots", ()))
    return [_SlotPoison(x) for kw, _ in sets for n, x in rp.flatten(kw["data"], "data", []) if n in outs]


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
    filled = req.get("filled") or {}
    for name, arg in call.get("args", {}).items():
        if "tensor" in arg:
            t = arg["tensor"]
            g = Guarded(t["path"], t["dtype"], t["shape"], 0, fill=filled.get(t["path"]))
            tensors[name] = (t, g)
            base[name] = g.tensor
        else:
            base[name] = arg["value"]
    # Each set: its arguments, and the buffers it owns by parameter name (set 0's are every
    # tensor's, the outputs among them).
    sets = [(base, {name: g for name, (_, g) in tensors.items()})]
    for extra in req.get("sets") or []:
        kw = dict(base)
        owned = {}
        for name, path in extra.items():
            if name in tensors:
                t = tensors[name][0]
                g = Guarded(path, t["dtype"], t["shape"], 0)
                kw[name] = g.tensor
                owned[name] = g
        sets.append((kw, owned))
    flush_bytes = int(req.get("flush_bytes") or 0)
    flush = _Flusher(req.get("flush_ptx"), flush_bytes) if flush_bytes else None
    series = int(req.get("series") or 0)
    _bench.pop(series, None)
    # The outputs rung poisons are set 0's buffers, shared by every set: poisoned again before
    # every timed call (_bench_one).
    poison = [g for _, g in tensors.values() if g.fill]
    _bench[series] = dict(fn=fn, sets=sets, flush=flush, next=0,
                          read_only=set(req.get("read_only") or ()), poison=poison, start=torch.cuda.Event(enable_timing=True),
                          end=torch.cuda.Event(enable_timing=True))
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


def _poison(b):
    """Poisons the outputs again and waits for it, before anything is timed or traced: no call
    can tell the re-checked one from the timed ones by what its outputs hold. The L2 flush that
    follows evicts the poison's lines too."""
    if b.get("poison"):
        for g in b["poison"]:
            g.refill()
        __import__("torch").cuda.synchronize()


def _bench_one(b, fn, kw):
    _poison(b)
    if b["flush"] is not None:
        b["flush"]()
    # Queued behind the flush, so the host's launch overhead is hidden as in real use.
    b["start"].record()
    t0 = time.perf_counter()
    out = fn(**kw)
    t1 = time.perf_counter()
    b["end"].record()
    import torch
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    _plain(out)
    return {"gpu_ms": b["start"].elapsed_time(b["end"]), "host_ms": (t1 - t0) * 1e3, "wall_ms": (t2 - t0) * 1e3}


def _plain(out):
    """Raises LazyOutput when a timed call returned a tensor subclass (rung_problem.lazy_outputs):
    its work could run after the timed window, when the output is read."""
    lazy = rp.lazy_outputs(out)
    if lazy:
        raise rp.LazyOutput("the version returned %s: its work can run after its call is timed; return a plain "
                            "torch.Tensor" % ", ".join(lazy))


def _traced_one(b, fn, kw, tracer):
    """One more call with CUPTI tracing on: (busy, span) in ms from its activity records, or
    None when it left none."""
    import torch
    _poison(b)
    tracer.take()  # the device is idle: what CUPTI holds is older work (the poison's among it)
    tracer.on()
    try:
        if b["flush"] is not None:
            b["flush"]()
        out = fn(**kw)
        torch.cuda.synchronize()
    finally:
        tracer.off()
    _plain(out)
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
    # Where this request's time went, in seconds (the bench's timeline).
    phases = {}
    clock = [time.perf_counter()]

    def lap(name):
        now = time.perf_counter()
        phases[name] = phases.get(name, 0.0) + now - clock[0]
        clock[0] = now

    series = int(req.get("series") or 0)
    if req.get("call") or req.get("problem"):
        b = _bench_setup(req)
        lap("upload")
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < float(req.get("warmup_seconds") or 0):
            kw = b["sets"][b["next"] % len(b["sets"])][0]
            b["next"] += 1
            _bench_one(b, b["fn"], kw)
        lap("warmup")
        empty = sorted(_bench_one(b, lambda **_: None, {})["wall_ms"] for _ in range(32))
        resp["fixed_ms"] = empty[len(empty) // 2]
        resp["input_sets"] = len(b["sets"])
        lap("fixed_cost")
        tracer, why = _tracer()
        if tracer is not None:
            try:
                __import__("torch").cuda.synchronize()
                tracer.off()
            except Exception as e:  # noqa: BLE001 - a tracer that cannot stop is not used
                tracer, why = None, "CUPTI: %s; timed by events" % e
        b["tracer"], b["timer_note"] = tracer, why
        lap("timer_start")
    b = _bench.get(series)
    if b is None:
        raise ValueError("bench: series %d has no call set up" % series)
    if req.get("profile"):
        _profiled_call(b)
        return resp
    samples = []
    tracer = b.get("tracer")
    threads = rp.threads_now()
    for _ in range(int(req.get("samples") or 0)):
        kw = b["sets"][b["next"] % len(b["sets"])][0]
        b["next"] += 1
        sample = _bench_one(b, b["fn"], kw)
        _no_late_work(threads, 0)
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
    _no_late_work(threads, 0.002)
    lap("timed")
    if int(req.get("graph_calls") or 0) > 0:
        resp["graph_ms"] = _graph_replay(b, int(req["graph_calls"]), int(req.get("graph_replays") or 1))
        lap("graph_replay")
    if req.get("write_back") and b.get("observe"):
        # A problem: the version called on set 0's buffers refilled with a fresh draw, and on new
        # buffers; a judge's process says whether each is right (rung_problem.recheck).
        if not req.get("dump"):
            raise ValueError("a problem's re-check needs its `dump` folder")
        hints = req.get("hints") or {}
        if b["start"] is not None:  # events to time it by (a CPU bench in tests has none)
            resp["recheck_sample"] = _fresh_sample(b)
        observed = []
        with __import__("torch").no_grad():
            for k, into in enumerate((b["sets"][0][0], None)):
                folder = os.path.join(req["dump"], "recheck-%d" % k)
                os.makedirs(folder, exist_ok=True)
                rec = b["observe"](into and next(iter(into.values())), hints, folder)
                rec.pop("_files", None)
                observed.append(rec)
        resp["observed"] = observed
    elif req.get("write_back"):
        # One more call, made as a timed one is, on the fresh inputs copied into the buffers of
        # the set rung drew; the outputs, shared by the sets, are written back: this call's
        # work, since it found them poisoned, on data no timed call saw.
        k = int(req.get("recheck_set") or 0)
        if not 0 <= k < len(b["sets"]):
            raise ValueError("bench: no input set %d to re-check" % k)
        for name, path in (req.get("recheck_inputs") or {}).items():
            g = b["sets"][k][1].get(name) or b["sets"][0][1].get(name)
            if g is None:
                raise ValueError("bench: the fresh input `%s` matches no buffer" % name)
            g.load(path)
        resp["recheck_sample"] = _bench_one(b, b["fn"], b["sets"][k][0])
        for g in b["sets"][0][1].values():
            if g.path not in b.get("read_only", ()):
                g.write_back()
    harness = rp.patched_harness()
    if harness:
        raise HarnessPatched("the version replaced or changed %s, which rung's judge runs: its verdict cannot be trusted"
                             % ", ".join(harness))
    patched = rp.patched_timers()
    if patched:
        raise TimerPatched("the version replaced %s: its timing cannot be trusted" % ", ".join(patched))
    lap("write_back")
    resp["samples"] = samples
    resp["phases"] = {k: v for k, v in phases.items() if v > 0}
    if b.get("timer_note"):
        resp["timer_note"] = b["timer_note"]
    if b["flush"] is not None and b["flush"].persisting:
        resp["l2_persisting_bytes"] = b["flush"].persisting
    return resp


def _fresh_sample(b):
    """A problem's version timed as a timed call is, on inputs drawn afresh (from seeds no timed
    call saw) and copied into set 0's buffers: the faster of two such calls (the first may pay
    for what a first call on new data allocates). A version that keeps results across calls, or
    skips the work when it has seen its inputs, does the work only here. When the bench traces,
    two more fresh draws are each called once with CUPTI on, as the timed calls' traced twins
    are: the faster one's busy time goes beside theirs. (A call that waits for the device inside,
    `.tolist()` say, is timed between events at its host's pace; its busy time is the device's
    work alone, which a skipped call does not do.) None when a fresh draw does not fit the timed
    buffers (the judged re-check says so)."""
    import torch
    key, draw = b["fresh"]

    def refilled():
        """Set 0's buffers holding a fresh draw; None when it does not fit them."""
        try:
            with torch.no_grad():
                drawn = draw(_fresh_seed())
                rp.refill(b["sets"][0][0][key], drawn, key)
                del drawn
        except ValueError:
            return None
        torch.cuda.synchronize()  # the copies are not the call's work
        return b["sets"][0][0]

    best = None
    for _ in range(2):
        kw = refilled()
        if kw is None:
            return None
        sample = _bench_one(b, b["fn"], kw)
        if best is None or sample["gpu_ms"] < best["gpu_ms"]:
            best = sample
    tracer = b.get("tracer")
    if tracer is not None:
        traced = []
        for _ in range(2):
            kw = refilled()
            if kw is None:
                break
            try:
                t = _traced_one(b, b["fn"], kw, tracer)
            except Exception:  # noqa: BLE001 - as in the timed calls: no busy time, events alone
                break
            if t:
                traced.append(t)
        if traced:
            best["busy_ms"], best["span_ms"] = min(traced)
    return best


def _no_late_work(threads, settle):
    """Raises LateWork when a timed call left a thread running (rung_problem.late_threads): after
    each call at once, and after the last with a moment for a worker it woke to move."""
    late = rp.late_threads(threads, settle)
    if late:
        raise rp.LateWork("the version's call returned while a thread it started was still running (%s): "
                          "its time leaves that thread's work out" % "; ".join(late[:3]))


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
