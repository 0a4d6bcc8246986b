"""rung's bench medians against Nsight Compute's `gpu__time_duration`, for the versions of a
checked workspace: one table, and a JSON document of the figures.

    python3 ncu_agree.py WORKSPACE REPORT.json OUT_DIR [VERSION ...]

REPORT.json is the workspace's `rung check --json` document; only versions whose bench passed
are timed (all of them, or those named). A rung.toml workspace's versions are launched by
bench_validate.py at its first benchmark size, 13 launches of which Nsight Compute times the
last 10; a GPU MODE or KernelBench version's calls by problem_launch.py at each of the
problem's benchmarks, 10 calls inside NVTX ranges, each call's kernels summed (rung's headline is the GPU's busy time
for the whole call). Nsight Compute runs with `--clock-control none --cache-control all`: the
clocks as they are, every cache flushed before every kernel (rung flushes L2 before every call);
GPU MODE and KernelBench versions are timed a second time with `--cache-control none` and L2
flushed by the launcher before each call, rung's own conditions.
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


METRICS = ["gpu__time_duration.sum", "gpc__cycles_elapsed.max", "gpc__cycles_elapsed.avg.per_second"]


def ncu_durations(cmd, extra, log, cache="all", env=None):
    """Every kernel Nsight Compute profiled, in launch order: (gpu__time_duration, the GPCs'
    elapsed time), µs. The second is gpc__cycles_elapsed.max over its clock rate, None where a
    metric is missing; it gave the clock a kernel ran at (on an H100 it tracks
    gpu__time_duration to 0.1%, so it does not separate launch work from execution), and is kept
    in the JSON, not the table."""
    full = ["ncu", "--clock-control", "none", "--cache-control", cache, "--metrics",
            ",".join(METRICS), "--csv"] + extra + cmd
    p = subprocess.run(full, capture_output=True, text=True, env=env)
    with open(log, "w") as f:
        f.write(" ".join(full) + "\n" + p.stdout + "\n--- stderr\n" + p.stderr)
    time_scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    rate_scale = {"cycle/nsecond": 1e9, "cycle/usecond": 1e6, "cycle/msecond": 1e3, "cycle/second": 1.0,
                  "Ghz": 1e9, "Mhz": 1e6, "khz": 1e3, "hz": 1.0}
    rows = csv.DictReader([l for l in p.stdout.splitlines() if l.startswith('"')])
    kernels = {}
    for n, row in enumerate(rows):
        name, unit = row.get("Metric Name"), row.get("Metric Unit", "")
        try:
            v = float(row["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        k = kernels.setdefault(int(row.get("ID", n)), {})
        if name == "gpu__time_duration.sum":
            k["duration"] = v * time_scale.get(unit, 1.0)
        elif name == "gpc__cycles_elapsed.max":
            k["cycles"] = v
        elif name == "gpc__cycles_elapsed.avg.per_second":
            k["rate"] = v * rate_scale.get(unit, rate_scale.get(unit.lower(), 1.0))
    out = []
    for _, k in sorted(kernels.items()):
        if "duration" not in k or k["duration"] != k["duration"]:
            continue
        gpc = k["cycles"] / k["rate"] * 1e6 if k.get("cycles") and k.get("rate") else None
        out.append((k["duration"], gpc))
    return out


def per_call(values, calls):
    """Each call's kernels summed: the kernels split evenly over the calls (None when they do not
    or a value is missing)."""
    if not values or len(values) % calls or any(v is None for v in values):
        return None
    k = len(values) // calls
    return [sum(values[i * k:(i + 1) * k]) for i in range(calls)]


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
            kernels = ncu_durations(cmd, extra, log)
            durations, gpcs = [d for d, _ in kernels], [g for _, g in kernels]
            calls = per_call(durations, CALLS) if problem else durations
            gpc_calls = per_call(gpcs, CALLS) if problem else (gpcs if None not in gpcs else None)
            ncu = statistics.median(calls) if calls else None
            gpc = statistics.median(gpc_calls) if gpc_calls else None
            # The same calls under rung's cache conditions: L2 flushed before each call by the
            # launcher, nothing flushed between one call's kernels (`--cache-control all` also
            # flushes before the second and third kernel of a call, and more than L2).
            flushed = None
            if problem:
                log = os.path.join(out, "ncu-%s-%d-call-flush.log" % (v["id"], i))
                env = dict(os.environ, PROBLEM_LAUNCH_FLUSH="1")
                again = per_call([d for d, _ in ncu_durations(cmd, extra, log, "none", env)], CALLS)
                flushed = statistics.median(again) if again else None
            rung = s["headline"]["median"] * 1e3
            k = len(durations) // CALLS if durations else 0
            rows.append({
                "id": v["id"], "path": v["path"], "sizes": s["sizes"], "basis": s["basis"],
                "rung_us": rung, "rung_ci": s["headline"].get("ci_rel"), "ncu_us": ncu,
                "ncu_gpc_us": gpc, "ncu_call_flush_us": flushed,
                "kernels_per_call": k,
                "delta": (ncu / rung - 1) if ncu and rung else None,
                # What Nsight Compute reads over rung, per kernel of a call: a constant here
                # (not a fraction) is a fixed cost in each profiled kernel's measurement.
                "offset_per_kernel_us": ((flushed or ncu) - rung) / k if (flushed or ncu) and rung and k else None,
                "delta_gpc": (gpc / rung - 1) if gpc and rung else None,
                "delta_call_flush": (flushed / rung - 1) if flushed and rung else None,
            })
    json.dump(rows, open(os.path.join(out, "ncu-agree.json"), "w"), indent=1)
    print("rung's bench median against Nsight Compute's gpu__time_duration, µs, each call's kernels summed;")
    print("ncu: `--cache-control all` (every cache flushed before every kernel); ncu·call: `--cache-control none`")
    print("with L2 flushed before each call, as rung does (GPU MODE and KernelBench versions); Δ = ncu / rung − 1.")
    print("rung's busy time also counts a call's copies and memsets, which Nsight Compute does not profile.")
    print("µs/k: (ncu·call, else ncu) − rung, per kernel of a call.")
    print("%-6s %-34s %-22s %9s %9s %8s %9s %8s %3s %6s" % ("id", "version", "sizes", "rung", "ncu", "Δ", "ncu·call", "Δ", "k", "µs/k"))
    worst = worst_call = 0.0
    fmt = lambda x: "%.1f" % x if x is not None else "-"
    pct = lambda x: "%+.2f%%" % (100 * x) if x is not None else "-"
    for r in rows:
        if "note" in r:
            print("%-6s %-34s %s" % (r["id"], r["path"][9:], r["note"]))
            continue
        if r["delta"] is not None:
            worst = max(worst, abs(r["delta"]))
        if r.get("delta_call_flush") is not None:
            worst_call = max(worst_call, abs(r["delta_call_flush"]))
        sizes = json.dumps(r["sizes"], separators=(",", ":"))[:22]
        off = r.get("offset_per_kernel_us")
        print("%-6s %-34s %-22s %9s %9s %8s %9s %8s %3d %6s" % (
            r["id"], r["path"][9:43], sizes, fmt(r["rung_us"]), fmt(r["ncu_us"]), pct(r["delta"]),
            fmt(r.get("ncu_call_flush_us")), pct(r.get("delta_call_flush")), r["kernels_per_call"],
            "%+.2f" % off if off is not None else "-"))
    timed = [r for r in rows if r.get("delta") is not None]
    print("%d timed, largest |Δ| %.2f%% (ncu), %.2f%% (ncu·call)" % (len(timed), 100 * worst, 100 * worst_call))


if __name__ == "__main__":
    main()
