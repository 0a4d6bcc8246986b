#!/usr/bin/env bash
# The GPU suite: on a machine with a GPU and rung's release binary, builds nothing and runs
# `rung selftest --gpu --bench` (the fault cases, the demo, GPU MODE and KernelBench problems, the
# warm path, the bench validation), then times the demo's kernels with triton.testing.do_bench
# and Nsight Compute to compare with rung's medians, and prints one table.
#
#   scripts/gpu-suite.sh [RUNG_BINARY] [OUT_DIR]
#
# GPU_SUITE_WORK=DIR keeps the checked workspaces there (DIR/bench/demo is the demo that the
# table times) for studies afterwards, such as bench_pacing.py.
set -uo pipefail
RUNG=${1:-target/release/rung}
OUT=${2:-gpu-suite-out}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
WORK=${GPU_SUITE_WORK:-$(mktemp -d)}
mkdir -p "$WORK"
PY=${RUNG_PYTHON:-python3}

# SELFTEST_ARGS adds options, e.g. "--only workspaces,warm,bench".
"$RUNG" selftest --gpu --bench ${SELFTEST_ARGS:-} --dir "$WORK" --out "$OUT/selftest.json" | tee "$OUT/selftest.txt"
status=${PIPESTATUS[0]}

DEMO="$WORK/bench/demo"
"$PY" - "$OUT/selftest.json" > "$OUT/demo-report.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
print(json.dumps(doc["bench_reports"]["demo-0"]))
PY
"$PY" "$HERE/bench_validate.py" "$DEMO" "$OUT/demo-report.json" do-bench > "$OUT/do-bench.json" 2> "$OUT/do-bench.err"

: > "$OUT/ncu.csv"
for v in $("$PY" -c "import json,sys; print(' '.join(v['id'] for v in json.load(open(sys.argv[1]))['versions']))" "$OUT/demo-report.json"); do
  ncu --clock-control none --cache-control all --metrics gpu__time_duration.sum --csv \
      --launch-skip 3 --launch-count 10 \
      "$PY" "$HERE/bench_validate.py" "$DEMO" "$OUT/demo-report.json" launch "$v" 13 \
      > "$OUT/ncu-$v.csv" 2> "$OUT/ncu-$v.err"
  # A version the launch script cannot start (a rung_run host entry, a cluster launch): Nsight
  # Compute through `rung profile` instead (its default --cache-control all, clocks as they are).
  if ! grep -qE 'gpu__time_duration\.sum","[^"]*","[0-9]' "$OUT/ncu-$v.csv"; then
    "$RUNG" profile -C "$DEMO" "$v" --json > "$OUT/profile-$v.json" 2> "$OUT/profile-$v.err"
  fi
done

"$PY" - "$OUT" <<'PY'
import csv, json, os, statistics, sys
out = sys.argv[1]
doc = json.load(open(os.path.join(out, "selftest.json")))
report = json.load(open(os.path.join(out, "demo-report.json")))
do_bench = json.load(open(os.path.join(out, "do-bench.json")))
print("\nbench validation at the benchmark size (µs; Δ = other / rung − 1)")
print("rung: the headline median (CUPTI's busy time when it traces); events: the same calls between events")
print("%-6s %-34s %10s %-6s %10s %10s %8s %10s %8s" % ("id", "version", "rung", "basis", "events", "ncu", "Δ ncu", "do_bench", "Δ do_b"))
for v in report["versions"]:
    size = next((s["detail"]["sizes"][0] for s in v["stages"] if s["stage"] == "bench" and s["verdict"] == "pass"), None)
    rung = size["headline"]["median"] * 1e3 if size else None
    events = size["gpu"]["median"] * 1e3 if size else None
    basis = size["basis"] if size else "-"
    ncu = []
    path = os.path.join(out, "ncu-%s.csv" % v["id"])
    lines = [l for l in open(path) if l.startswith('"')] if os.path.exists(path) else []
    for row in csv.DictReader(lines):
        if row.get("Metric Name") == "gpu__time_duration.sum":
            unit = row.get("Metric Unit", "")
            val = float(row["Metric Value"].replace(",", ""))
            scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit, 1.0)
            ncu.append(val * scale)
    ncu = [x for x in ncu if x == x]  # a failed launch reads "nan"
    n = statistics.median(ncu) if ncu else None
    prof = os.path.join(out, "profile-%s.json" % v["id"])
    if n is None and os.path.exists(prof):
        # gpu__time_duration summed over the call's kernels, from `rung profile`.
        try:
            kernels = json.load(open(prof))["result"]["detail"]["kernels"]
            n = sum(k["duration_us"] for k in kernels) if kernels else None
        except (ValueError, KeyError, TypeError):
            n = None
    d = do_bench.get(v["id"])
    d = d if isinstance(d, (int, float)) else None
    fmt = lambda x: "%.1f" % x if x is not None else "-"
    pct = lambda x: "%+.1f%%" % (100 * (x / rung - 1)) if x is not None and rung else "-"
    print("%-6s %-34s %10s %-6s %10s %10s %8s %10s %8s" % (v["id"], v["path"][9:], fmt(rung), basis[:6], fmt(events), fmt(n), pct(n), fmt(d), pct(d)))
PY
[ -n "${GPU_SUITE_WORK:-}" ] || rm -rf "$WORK"
exit $status
