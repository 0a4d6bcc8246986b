"""The Python worker's host side of a call: the dtypes rung names, tensors over rung's files (numpy
memmaps, and what Triton's interpreter asks of a tensor), the modules it loads (a version, a
problem) and the error it reports, and the guard zones around GPU buffers. rung_worker.py and
rung_bench.py import it; rung writes it beside them."""

import importlib.util
import os
import sys
import traceback

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

RUNG_DTYPES = {v: k for k, v in TORCH_NAMES.items()}


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

    def __init__(self, path, dtype, shape, guard, fill=None):
        import torch
        self.path = path
        self.guard = guard
        # `fill` ({"bytes", "value"}): the file is not written, the buffer is that byte throughout.
        self.nbytes = int(fill["bytes"]) if fill else os.path.getsize(path)
        self.raw = torch.empty(self.nbytes + 2 * guard, dtype=torch.uint8, device="cuda")
        if guard:
            self.raw[:guard].fill_(GUARD_BYTE)
            self.raw[guard + self.nbytes:].fill_(GUARD_BYTE)
        body = self.raw[guard:guard + self.nbytes]
        self.fill = fill
        if fill:
            self.refill()
        else:
            self.load(path)
        self.tensor = body.view(getattr(torch, TORCH_NAMES[dtype])).view(tuple(shape))

    def refill(self):
        """Fills a `fill` buffer with its byte again (a poisoned output before a checked call)."""
        if self.fill:
            self.raw[self.guard:self.guard + self.nbytes].fill_(int(self.fill["value"]))

    def load(self, path):
        """Copies the file at `path`, of this buffer's size, into it (the guards stay): a large one
        in parts, read by IO_LANES threads at once into pinned buffers, each part copied to the
        GPU (by this thread, the only one that calls CUDA) as soon as it is read."""
        import torch
        g, n = self.guard, self.nbytes
        with open(path, "rb", buffering=0) as f:
            fd = f.fileno()
            size = os.fstat(fd).st_size
            if size != n:
                raise ValueError("%s holds %d bytes, the buffer %d" % (path, size, n))
            if n <= DIRECT_BYTES:
                # A test size's buffer: no pinned buffers to allocate in this child for it.
                host = bytearray(n)
                _read_exact(fd, memoryview(host), 0, path)
                if n:
                    self.raw[g:g + n].copy_(torch.frombuffer(host, dtype=torch.uint8))
                return
            staging, parts = _staging(), _parts(n)
            lanes = len(staging)
            with _pool() as pool:
                reads = {}

                def read(i):
                    off, m = parts[i]
                    host, done = staging[i % lanes]
                    done.synchronize()  # its last copy out, this call's or an earlier one's, has ended
                    reads[i] = pool.submit(_read_exact, fd, memoryview(host.numpy())[:m], off, path)
                for i in range(min(lanes, len(parts))):
                    read(i)
                for i, (off, m) in enumerate(parts):
                    host, done = staging[i % lanes]
                    reads.pop(i).result()
                    self.raw[g + off:g + off + m].copy_(host[:m], non_blocking=True)
                    done.record()
                    if i + lanes < len(parts):
                        read(i + lanes)
        torch.cuda.current_stream().synchronize()

    def write_back(self):
        """Copies the tensor's bytes back to rung's file; returns the guard breach, if any."""
        g, n = self.guard, self.nbytes
        # A new file: a link planted at the path is replaced, not written through.
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if n <= DIRECT_BYTES:
                _write_exact(fd, memoryview(self.raw[g:g + n].cpu().numpy()))
                return self._breach()
            # Each part copied from the GPU into a pinned buffer (by this thread), then into a
            # mapping of the file by IO_LANES threads at once: writes to one file take its lock
            # one at a time, while a mapping's pages are filled side by side.
            import mmap
            os.ftruncate(fd, n)
            mapped = mmap.mmap(fd, n)
            try:
                staging, parts = _staging(), _parts(n)
                lanes = len(staging)
                with _pool() as pool:
                    fills = {}
                    for i, (off, m) in enumerate(parts):
                        host, done = staging[i % lanes]
                        if i >= lanes:
                            fills.pop(i - lanes).result()  # this buffer's last part is in the file
                        host[:m].copy_(self.raw[g + off:g + off + m], non_blocking=True)
                        done.record()
                        done.synchronize()
                        fills[i] = pool.submit(_fill, mapped, off, host.numpy()[:m])
                    for i in sorted(fills):
                        fills.pop(i).result()
            finally:
                mapped.close()
        finally:
            os.close(fd)
        return self._breach()

    def _breach(self):
        g = self.guard
        if not g:
            return None
        return _breach(self.raw[:g].cpu().numpy(), self.raw[g + self.nbytes:].cpu().numpy(), g)


# Bytes in each pinned buffer a GPU buffer is loaded and written back through, and how many
# such buffers there are, as many as threads that read and fill them: reading a benchmark size's
# input sets (gigabytes, in shared memory) on one thread took most of a Python version's bench
# set-up. A buffer of DIRECT_BYTES or fewer goes through pageable memory at once.
STAGE_BYTES = 16 << 20
IO_LANES = 4
DIRECT_BYTES = 8 << 20
_STAGING = []


def _staging():
    """The pinned buffers (each with its event) a large buffer goes through, made on first use
    in the child that has the GPU."""
    import torch
    if not _STAGING:
        for _ in range(IO_LANES):
            _STAGING.append((torch.empty(STAGE_BYTES, dtype=torch.uint8, pin_memory=True), torch.cuda.Event()))
    return _STAGING


def _parts(n):
    """(offset, length) of each STAGE_BYTES part of `n` bytes."""
    return [(off, min(STAGE_BYTES, n - off)) for off in range(0, n, STAGE_BYTES)]


def _pool():
    """The threads that read and fill the parts: file and memory work only, never CUDA (one
    thread calling CUDA is what profilers and sanitizers that wrap every call expect)."""
    from concurrent.futures import ThreadPoolExecutor
    return ThreadPoolExecutor(max_workers=IO_LANES, thread_name_prefix="rung-io")


def _fill(mapped, off, src):
    """Copies `src` (a part in a pinned buffer) into the mapping at `off`."""
    np = _np()
    np.frombuffer(mapped, np.uint8, len(src), off)[:] = src


def _read_exact(fd, view, off, path):
    got = 0
    while got < len(view):
        r = os.preadv(fd, [view[got:]], off + got)
        if not r:
            raise ValueError("%s ended after %d bytes" % (path, off + got))
        got += r


def _write_exact(fd, view):
    written = 0
    while written < len(view):
        written += os.write(fd, view[written:])


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


def cuda_opened():
    """Whether CUDA is open here: torch's lazy initialisation, or cuInit by anyone (cuDeviceGet
    answers CUDA_ERROR_NOT_INITIALIZED, 3, until then, without initialising it)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return True
    try:
        import ctypes
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    dev = ctypes.c_int()
    return cuda.cuDeviceGet(ctypes.byref(dev), 0) != 3


def _sync_and_pending():
    """Synchronises the call's stream, then the whole device: the second wait is work the call
    left running on another stream (milliseconds)."""
    import time
    import torch
    torch.cuda.current_stream().synchronize()
    t = time.perf_counter()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3
