"""Times the demo's kernels outside rung, to validate rung's bench: with
triton.testing.do_bench (median, L2 cleared before each run) and, under Nsight Compute, as
`gpu__time_duration.sum` with `--clock-control none --cache-control all`.

    python3 bench_validate.py WORKSPACE REPORT.json do-bench          # prints JSON: version -> µs
    python3 bench_validate.py WORKSPACE REPORT.json launch VERSION N  # N launches, for ncu

WORKSPACE is a demo workspace rung has checked (its .rung/dumps hold each CUDA version's cubin);
REPORT.json is that check's `rung check --json` document (launch dimensions and bindings come
from its prepare results). CUDA versions are launched through CuPy, Triton ones by calling their
run() with torch tensors; inputs have the benchmark size.
"""

import importlib.util
import json
import os
import sys


def versions(report):
    for v in report["versions"]:
        prep = next(s for s in v["stages"] if s["stage"] == "prepare")
        yield v, prep["detail"]


def bench_size(ws):
    import tomllib
    with open(os.path.join(ws, "rung.toml"), "rb") as f:
        spec = tomllib.load(f)
    return spec["sizes"]["bench"][0]


def make_call(ws, v, prep, sizes):
    import torch
    rows, cols = sizes["rows"], sizes["cols"]
    x = torch.randn(rows, cols, device="cuda", dtype=torch.float32)
    w = torch.rand(cols, device="cuda", dtype=torch.float32) + 0.5
    y = torch.empty_like(x)
    eps = 1e-6
    if v["kind"] == "triton":
        spec = importlib.util.spec_from_file_location("version_" + v["id"], os.path.join(ws, v["path"]))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        call = lambda: mod.run(x, w, y, eps, rows, cols)
        call.buffers = (x, w, y)
        return call
    import cupy
    import numpy
    cubin = os.path.join(ws, ".rung", "dumps", v["id"], v["id"] + ".cubin")
    fn = cupy.RawModule(path=cubin).get_function(prep["entry"])
    launch = next(l["launch"] for l in prep["launches"] if l["sizes"] == sizes)
    values = {"x": x, "w": w, "y": y, "eps": numpy.float32(eps), "rows": numpy.int32(rows), "cols": numpy.int32(cols)}
    args = []
    for b in prep["bindings"]:
        key = b.get("tensor") or b.get("scalar") or b.get("var")
        a = values[key]
        args.append(cupy.asarray(a) if hasattr(a, "data_ptr") else a)
    grid, block, smem = tuple(launch["grid"]), tuple(launch["block"]), launch["smem_bytes"]
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

    def call():
        with stream:
            fn(grid, block, tuple(args), shared_mem=smem)
    call.buffers = (x, w, y)
    return call


def flush_kernels(nb=256 << 20):
    """rung's L2 flush as the bench runs it (assets/kernels/copy.ptx: read a 256 MB buffer, read
    it again evict-first, then discard its lines), launched through CuPy on torch's current
    stream, as separate steps: (read, read_evict_first, discard, zero). rung runs the first three
    in that order; `zero` writes the buffer (a write flush, as do_bench's). `nb` sizes the buffer
    for experiments."""
    import cupy
    import torch
    here = os.path.dirname(os.path.abspath(__file__))
    mod = cupy.cuda.function.Module()
    mod.load(open(os.path.join(here, "..", "assets", "kernels", "copy.ptx"), "rb").read())
    buf = cupy.zeros(nb // 4, dtype=cupy.int32)
    sink = cupy.zeros(1, dtype=cupy.int32)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

    def launch(name, *args):
        k = mod.get_function(name)

        def f():
            with stream:
                k((sms * 4,), (512,), (buf,) + args)
        return f

    def zero():
        buf.fill(0)

    read = launch("rung_flush", cupy.uint64(nb // 16), sink)
    read_evict_first = launch("rung_flush_evict_first", cupy.uint64(nb // 16), sink)
    discard = launch("rung_discard", cupy.uint64(nb // 128))
    return read, read_evict_first, discard, zero


def main():
    ws, report_path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(report_path) as f:
        report = json.load(f)
    sizes = bench_size(ws)
    import torch
    if mode == "do-bench":
        import triton.testing
        out = {}
        for v, prep in versions(report):
            try:
                call = make_call(ws, v, prep, sizes)
                out[v["id"]] = 1e3 * triton.testing.do_bench(call, warmup=100, rep=2000, return_mode="median")
            except Exception as e:  # report, do not hide
                out[v["id"]] = "error: %s: %s" % (type(e).__name__, e)
        print(json.dumps(out))
    elif mode == "launch":
        want, n = sys.argv[4], int(sys.argv[5])
        for v, prep in versions(report):
            if v["id"] == want:
                call = make_call(ws, v, prep, sizes)
                for _ in range(n):
                    call()
                torch.cuda.synchronize()


if __name__ == "__main__":
    main()
