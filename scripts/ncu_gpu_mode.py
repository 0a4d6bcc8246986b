#!/usr/bin/env python3
"""Times a GPU MODE version's custom_kernel under Nsight Compute, for comparing with rung's bench.

    ncu --clock-control none --cache-control all --nvtx --nvtx-include "timed/" \\
        --metrics gpu__time_duration.sum --csv \\
        python3 scripts/ncu_gpu_mode.py run WORKSPACE VERSION_FILE SIZE SEED N > ncu.csv
    python3 scripts/ncu_gpu_mode.py sum ncu.csv

`run` draws the problem's inputs with its own generate_input(size, seed), calls the version three
times untimed, then N times, each inside an NVTX range named `timed`, so ncu measures those
calls' kernels alone. `sum` adds up each call's kernels (gpu__time_duration; a call is as many
kernels as there are distinct kernel names) and prints the
median, in µs, beside every call's figure.
"""

import csv
import importlib.util
import os
import statistics
import sys


def run(ws, version, size, seed, n):
    import torch
    sys.path.insert(0, ws)
    import reference
    spec = importlib.util.spec_from_file_location("submission", os.path.join(ws, "versions", version))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    data = reference.generate_input(size=size, seed=seed)
    for _ in range(3):
        m.custom_kernel(data)
    torch.cuda.synchronize()
    for _ in range(n):
        torch.cuda.nvtx.range_push("timed")
        m.custom_kernel(data)
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


SCALE = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def total(paths):
    for path in paths:
        rows = [l for l in open(path) if l.startswith('"')]
        kernels = []
        for row in csv.DictReader(rows):
            if row.get("Metric Name") == "gpu__time_duration.sum":
                value = float(row["Metric Value"].replace(",", "")) * SCALE.get(row.get("Metric Unit", ""), 1.0)
                kernels.append((row.get("ID"), row.get("Kernel Name", ""), value))
        names = sorted({k for _, k, _ in kernels})
        per_call = max(1, len(names))
        calls = [sum(v for _, _, v in kernels[i:i + per_call]) for i in range(0, len(kernels) - per_call + 1, per_call)]
        if not calls:
            print("%s: no kernels measured" % path)
            continue
        print("%s: %d call(s) of %d kernel(s) (%s); median %.2f µs; each: %s" % (
            path, len(calls), per_call, ", ".join(n[:60] for n in names), statistics.median(calls),
            " ".join("%.2f" % c for c in calls)))


if __name__ == "__main__":
    if len(sys.argv) >= 7 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    elif len(sys.argv) >= 3 and sys.argv[1] == "sum":
        total(sys.argv[2:])
    else:
        sys.exit(__doc__)
