"""rung's Python worker: executes, never judges.

rung (Rust) owns the inputs, the poisoning, the hashing, the metrics and the verdicts. This
process only calls functions: a version's `run(...)` or the problem's `reference(...)`, with
tensors that live in files rung wrote (memory-mapped here, so a kernel's writes land straight in
rung's buffers and a mutated input is visible to rung's hash).

Protocol: JSON lines. The first line out is the handshake:
  {"protocol": 1, "worker": "python", "capabilities": [...], "python": "3.11.7", "packages": {...}}
Each request is one line in, one line out:
  {"id": 1, "op": "call", "file": "versions/v004.py", "function": "run", "mode": "interpret",
   "args": {"x": {"tensor": {"path": "/dev/shm/...", "dtype": "f32", "shape": [3, 1000]}},
            "eps": {"value": 1e-06}},
   "returns": {"y": {"path": "...", "dtype": "f32", "shape": [3, 1000]}}}
  -> {"id": 1, "ok": true, "seconds": 0.12}
  -> {"id": 1, "ok": false, "error": {"type": "...", "message": "...", "traceback": "...",
                                      "lineno": 12, "file": "versions/v004.py"}}
`returns` is for functions that return their outputs (the reference): they are written to the
given paths. Versions write their outputs in place instead. {"op": "exit"} ends the worker.
"""

import importlib.util
import json
import os
import sys
import time
import traceback

PROTOCOL = 1

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


def _load(path):
    path = os.path.abspath(path)
    if path not in _modules:
        name = "rung_version_%d" % len(_modules)
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
    return {
        "type": type(exc).__name__,
        "message": str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__,
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "lineno": lineno,
        "file": file,
    }


def _call(req):
    np = _np()
    mode = req.get("mode", "interpret")
    module = _load(req["file"])
    fn = getattr(module, req["function"], None)
    if fn is None:
        raise AttributeError("%s defines no %s()" % (req["file"], req["function"]))
    kwargs = {}
    mapped = {}
    for name, arg in req.get("args", {}).items():
        if "tensor" in arg:
            arr = _map(arg["tensor"], "r+")
            mapped[name] = arr
            if req["function"] == "reference":
                kwargs[name] = arr
            elif mode == "cuda":
                import torch
                kwargs[name] = torch.from_numpy(np.ascontiguousarray(arr)).to("cuda")
            else:
                kwargs[name] = HostTensor(arr, arg["tensor"]["dtype"])
        else:
            kwargs[name] = arg["value"]
    t0 = time.perf_counter()
    result = fn(**kwargs)
    if mode == "cuda" and req["function"] != "reference":
        import torch
        torch.cuda.synchronize()
        # Every tensor back into rung's buffers: outputs, and inputs so a mutation shows.
        for name, arr in mapped.items():
            arr[...] = kwargs[name].cpu().numpy()
    seconds = time.perf_counter() - t0
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
            arr = np.asarray(value)
            if tuple(arr.shape) != tuple(spec["shape"]) and arr.size == int(np.prod(spec["shape"])):
                arr = arr.reshape(spec["shape"])
            if tuple(arr.shape) != tuple(spec["shape"]):
                raise ValueError("reference() returned %s with shape %s; rung.toml says %s" % (name, list(arr.shape), spec["shape"]))
            out = _map(spec, "w+")
            out[...] = arr.astype(out.dtype)
            out.flush()
    for arg in kwargs.values():
        if isinstance(arg, HostTensor):
            arg.arr.flush()
        elif hasattr(arg, "flush"):
            arg.flush()
    return {"seconds": seconds}


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
    _modules["checks:" + path] = module
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
            results.append({"name": name, "ok": False, "error": err["message"], "traceback": err["traceback"], "lineno": err["lineno"]})
    return {"rungs": results}


def main():
    if "--interpret" in sys.argv:
        os.environ["TRITON_INTERPRET"] = "1"
    elif "--cuda" in sys.argv:
        os.environ.pop("TRITON_INTERPRET", None)
    packages = {}
    for mod in ("numpy", "triton", "torch"):
        try:
            packages[mod] = __import__(mod).__version__
        except Exception:
            pass
    caps = ["reference"] + (["triton-interpret"] if "triton" in packages else [])
    if "--cuda" in sys.argv and "torch" in packages:
        caps.append("cuda")
    out = sys.stdout
    out.write(json.dumps({"protocol": PROTOCOL, "worker": "python", "capabilities": caps,
                          "python": sys.version.split()[0], "packages": packages}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("op") == "exit":
            break
        try:
            resp = {"id": req.get("id"), "ok": True}
            resp.update(_user_rungs(req) if req.get("op") == "checks" else _call(req))
        except BaseException as exc:  # the verdict is rung's to give
            resp = {"id": req.get("id"), "ok": False, "error": _error(exc, req.get("file"))}
        out.write(json.dumps(resp) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
