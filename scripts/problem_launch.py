"""Calls a GPU MODE or KernelBench version on its problem's benchmark inputs, for Nsight
Compute: three calls to warm up, then N calls each inside an NVTX range named `timed`, so
`ncu --nvtx --nvtx-include timed/` profiles the version's kernels and not the inputs' drawing.

    python3 problem_launch.py WORKSPACE VERSION_FILE BENCHMARK_INDEX N

GPU MODE (a task.yml): custom_kernel on generate_input's data for that benchmark of task.yml,
drawn once; every call gets the same tensors, as the pmpp_v2 convention allows (the output is
handed in). KernelBench (a problem file with get_inputs): ModelNew built from
get_init_inputs(), called on get_inputs() under torch.no_grad(); the index is ignored (the
problem has its one published size).

PROBLEM_LAUNCH_FLUSH=1 reads a buffer of twice L2 before each call, outside its range.
"""

import importlib.util
import json
import os
import sys


def benchmarks(ws):
    text = open(os.path.join(ws, "task.yml")).read()
    try:
        import yaml
        return yaml.safe_load(text)["benchmarks"]
    except ImportError:
        # Without PyYAML: task.yml's benchmark lines are JSON flow mappings,
        # `  - {"size": 4096, "seed": 8421}`, as GPU MODE's problems write them.
        out, inside = [], False
        for line in text.splitlines():
            if not line.startswith((" ", "-")):
                inside = line.startswith("benchmarks:")
                continue
            item = line.strip()
            if inside and item.startswith("- {"):
                out.append(json.loads(item[2:]))
        return out


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def gpumode_call(ws, version, index):
    import reference
    args = benchmarks(ws)[index]
    mod = load(os.path.join(ws, version), "submission")
    data = reference.generate_input(**args)
    return (lambda: mod.custom_kernel(data)), args


def kernelbench_call(ws, version):
    import torch
    problem = next(f for f in sorted(os.listdir(ws)) if f.endswith(".py")
                   and "def get_inputs" in open(os.path.join(ws, f)).read())
    prob = load(os.path.join(ws, problem), "problem")
    mod = load(os.path.join(ws, version), "version")
    torch.manual_seed(0)
    model = mod.ModelNew(*prob.get_init_inputs()).cuda()
    inputs = [x.cuda() if hasattr(x, "cuda") else x for x in prob.get_inputs()]

    def call():
        with torch.no_grad():
            return model(*inputs)
    return call, problem


def main():
    ws, version, index, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ws = os.path.abspath(ws)
    sys.path.insert(0, ws)
    os.chdir(ws)
    import torch
    if os.path.exists(os.path.join(ws, "task.yml")):
        call, what = gpumode_call(ws, version, index)
    else:
        call, what = kernelbench_call(ws, version)
    # PROBLEM_LAUNCH_FLUSH=1: L2 flushed before each call, outside its range, as rung's bench
    # flushes it (for `ncu --cache-control none`, which then flushes nothing between a call's own
    # kernels). A read of twice L2 leaves only clean lines of the buffer, nothing to write back.
    flush = None
    if os.environ.get("PROBLEM_LAUNCH_FLUSH") == "1":
        l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
        buf = torch.ones(max(l2, 1 << 20) * 2 // 4, dtype=torch.float32, device="cuda")
        flush = lambda: buf.sum()
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    for _ in range(n):
        if flush:
            flush()
        torch.cuda.nvtx.range_push("timed")
        call()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print(json.dumps({"benchmark": what, "calls": n}))


if __name__ == "__main__":
    main()
