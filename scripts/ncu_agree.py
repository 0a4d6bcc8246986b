"""rung's bench medians against Nsight Compute's `gpu__time_duration`, for the versions of a
checked workspace: one table, and a JSON document of the figures.

    python3 ncu_agree.py WORKSPACE REPORT.json OUT_DIR [VERSION ...]

REPORT.json is the workspace's `rung check --json` document; only versions whose bench passed
are timed (all of them, or those named). A rung.toml workspace's versions are launched by
bench_validate.py at its first benchmark size, 13 launches of which Nsight Compute times the
last 10; a GPU MODE or KernelBench version's calls by problem_launch.py at each of the
problem's benchmarks, 10 calls inside NVTX ranges, each call's kernels summed (rung's headline is the GPU's busy time
for the whole call). Nsight Compute runs with `--clock-control none --cache-control all`: the
clocks as they are, L2 flushed before every kernel, as rung flushes it before every call.
"""

import csv
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from problem_launch import benchmarks  # noqa: E402
CALLS = 10


def ncu_durations(cmd, extra, log):
    """gpu__time_duration of every kernel Nsight Compute profiled, µs, in launch order."""
    full = ["ncu", "--clock-control", "none", "--cache-control", "all", "--metrics",
            "gpu__time_duration.sum", "--csv"] + extra + cmd
    p = subprocess.run(full, capture_output=True, text=True)
    with open(log, "w") as f:
        f.write(" ".join(full) + "\n" + p.stdout + "\n--- stderr\n" + p.stderr)
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    rows = csv.DictReader([l for l in p.stdout.splitlines() if l.startswith('"')])
    out = []
    for row in rows:
        if row.get("Metric Name") == "gpu__time_duration.sum":
            v = float(row["Metric Value"].replace(",", ""))
            out.append((int(row.get("ID", len(out))), v * scale.get(row.get("Metric Unit", ""), 1.0)))
    return [v for _, v in sorted(out) if v == v]


def per_call(durations, calls):
    """Each call's kernels summed: the kernels split evenly over the calls (None when they do not)."""
    if not durations or len(durations) % calls:
        return None
    k = len(durations) // calls
    return [sum(durations[i * k:(i + 1) * k]) for i in range(calls)]


def bench_sizes(v):
    stage = next((s for s in v["stages"] if s["stage"] == "bench" and s["verdict"] == "pass"), None)
    return stage["detail"]["sizes"] if stage else []


def main():
    ws, report_path, out = sys.argv[1], sys.argv[2], sys.argv[3]
    want = set(sys.argv[4:])
    os.makedirs(out, exist_ok=True)
    report = json.load(open(report_path))
    # GPU MODE (task.yml) and KernelBench (no rung.toml) versions are called through their problem.
    problem = not os.path.exists(os.path.join(ws, "rung.toml"))
    py = sys.executable
    rows = []
    for v in report["versions"]:
        if want and v["id"] not in want:
            continue
        sizes = bench_sizes(v)
        if not sizes:
            rows.append({"id": v["id"], "path": v["path"], "note": "no passing bench"})
            continue
        targets = []
        if problem:
            listed = benchmarks(ws) if os.path.exists(os.path.join(ws, "task.yml")) else []
            for i, s in enumerate(sizes):
                # The benchmark these sizes are (rung benches them in task.yml's order).
                i = next((j for j, b in enumerate(listed) if b == s["sizes"]), i)
                cmd = [py, os.path.join(HERE, "problem_launch.py"), ws, v["path"], str(i), str(CALLS)]
                targets.append((s, cmd, ["--nvtx", "--nvtx-include", "timed/"]))
        else:
            cmd = [py, os.path.join(HERE, "bench_validate.py"), ws, report_path, "launch", v["id"], str(CALLS + 3)]
            targets.append((sizes[0], cmd, ["--launch-skip", "3", "--launch-count", str(CALLS)]))
        for i, (s, cmd, extra) in enumerate(targets):
            log = os.path.join(out, "ncu-%s-%d.log" % (v["id"], i))
            durations = ncu_durations(cmd, extra, log)
            calls = per_call(durations, CALLS) if problem else durations
            ncu = statistics.median(calls) if calls else None
            rung = s["headline"]["median"] * 1e3
            rows.append({
                "id": v["id"], "path": v["path"], "sizes": s["sizes"], "basis": s["basis"],
                "rung_us": rung, "rung_ci": s["headline"].get("ci_rel"), "ncu_us": ncu,
                "kernels_per_call": len(durations) // CALLS if durations else 0,
                "delta": (ncu / rung - 1) if ncu and rung else None,
            })
    json.dump(rows, open(os.path.join(out, "ncu-agree.json"), "w"), indent=1)
    print("rung's bench median against Nsight Compute's gpu__time_duration (µs; Δ = ncu / rung − 1)")
    print("%-6s %-40s %-26s %-6s %10s %10s %8s %4s" % ("id", "version", "sizes", "basis", "rung", "ncu", "Δ", "k"))
    worst = 0.0
    for r in rows:
        if "note" in r:
            print("%-6s %-40s %s" % (r["id"], r["path"][9:], r["note"]))
            continue
        fmt = lambda x: "%.1f" % x if x is not None else "-"
        d = "%+.2f%%" % (100 * r["delta"]) if r["delta"] is not None else "-"
        if r["delta"] is not None:
            worst = max(worst, abs(r["delta"]))
        sizes = json.dumps(r["sizes"], separators=(",", ":"))[:26]
        print("%-6s %-40s %-26s %-6s %10s %10s %8s %4d" % (r["id"], r["path"][9:49], sizes, r["basis"][:6], fmt(r["rung_us"]), fmt(r["ncu_us"]), d, r["kernels_per_call"]))
    timed = [r for r in rows if r.get("delta") is not None]
    print("%d timed, largest |Δ| %.2f%%" % (len(timed), 100 * worst))


if __name__ == "__main__":
    main()
