#!/usr/bin/env bash
# How much faster `rung check --no-bench` builds many CUDA versions at once than one at a time.
#
#   benches/check_builds.sh [RUNG] [N]     (default: target/release/rung, 200 versions)
#
# Writes a vector-add workspace with N distinct CUDA versions (v001-naive.cu with a comment that
# makes each one a new source, so no build is a cache hit), checks it once with
# RUNG_BUILD_THREADS=1 (the total compile time) and once as rung chooses, each in a fresh copy,
# and prints both wall times, the cores, and the parallel wall time over (the build tools' time /
# cores): the build rungs' and the SASS listings' that follow them (in the build cache's records);
# the target is at most 1.2. On a machine with a GPU the check's run and check
# rungs (serialised on the GPU, about 0.14 s a version on an H200) are in both wall times and
# can be the longer part; BUILDS_HIDE_GPU=1 hides the GPU from rung (CUDA_VISIBLE_DEVICES=""),
# so that both checks only build and the figure is the builds' alone.
set -euo pipefail
if [ "${BUILDS_HIDE_GPU:-}" = 1 ]; then
    export CUDA_VISIBLE_DEVICES=
    echo "the GPU hidden (CUDA_VISIBLE_DEVICES=\"\"): builds only"
fi
rung=$(realpath "${1:-target/release/rung}")
n=${2:-200}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$rung" new "$tmp/base" -t vector-add >/dev/null
rm -f "$tmp/base"/versions/*
src=$(ls "$(dirname "$0")/../assets/templates/vector-add/versions/"*naive.cu)
for i in $(seq 1 "$n"); do
    id=$(printf 'v%03d' "$i")
    { printf '// variant %d\n' "$i"; cat "$src"; } >"$tmp/base/versions/$id-naive.cu"
done
cores=$(nproc)
run() { # $1: label, $2: threads or empty
    rm -rf "$tmp/ws" && cp -r "$tmp/base" "$tmp/ws" && rm -rf "$tmp/ws/.rung"
    local t0 t1
    t0=$(date +%s.%N)
    (cd "$tmp/ws" && RUNG_BUILD_THREADS=$2 "$rung" check --no-bench --json >"$tmp/$1.json" 2>/dev/null) || true
    t1=$(date +%s.%N)
    python3 - "$tmp/$1.json" "$1" "$t0" "$t1" "${2:-$cores}" "$tmp/ws/.rung/history.db" <<'PY'
import json, sqlite3, sys
report = json.load(open(sys.argv[1]))
builds = [s for v in report["versions"] for s in v["stages"] if s["stage"] == "build"]
passed = sum(1 for s in builds if s["verdict"] == "pass")
wall = float(sys.argv[4]) - float(sys.argv[3])
# The SASS listings follow the build rungs (made while the versions run, by the time rung
# exits): their tool time is in the build cache's records, not in the report.
keys = [s["detail"]["cache_key"] for s in builds if (s.get("detail") or {}).get("cache_key")]
db = sqlite3.connect(sys.argv[6])
listings = 0.0
for k in keys:
    row = db.execute("SELECT detail FROM build_cache WHERE key = ?", (k,)).fetchone()
    if row:
        ph = json.loads(row[0]).get("phases", {})
        listings += ph.get("nvdisasm", 0.0) + ph.get("cuobjdump", 0.0)
rungs = sum(s["duration_ms"] for s in builds) / 1000
print("%-8s %3d versions, %3d builds passed, wall %.1f s, sum of build rungs %.1f s, of SASS listings after them %.1f s"
      % (sys.argv[2], len(report["versions"]), passed, wall, rungs, listings))
# Where the rest of the wall time went: every stage's summed time, and the build and run rungs'
# phases (the build's by tool).
stages, phases = {}, {}
for v in report["versions"]:
    for s in v["stages"]:
        stages[s["stage"]] = stages.get(s["stage"], 0.0) + s["duration_ms"] / 1000
        mine = phases.setdefault(s["stage"], {})
        for k, t in (s.get("detail") or {}).get("phases", {}).items():
            mine[k] = mine.get(k, 0.0) + t
print("         stages: " + ", ".join("%s %.1f s" % kv for kv in sorted(stages.items(), key=lambda kv: -kv[1])))
for stage in ("build", "run"):
    if phases.get(stage):
        print("         %s phases: " % stage
              + ", ".join("%s %.2f s" % kv for kv in sorted(phases[stage].items(), key=lambda kv: -kv[1])))
# The timeline from rung's start: where the wall time goes that the builds do not fill.
from datetime import datetime
t0 = float(sys.argv[3])
def starts(name):
    """Each rung of this stage: (its start from rung's start, its duration), s, by start."""
    return sorted((datetime.fromisoformat(s["started_at"].replace("Z", "+00:00")).timestamp() - t0, s["duration_ms"] / 1000)
                  for v in report["versions"] for s in v["stages"] if s["stage"] == name and s.get("started_at"))
def span(name):
    runs = starts(name)
    return (min(a for a, _ in runs), max(a + d for a, d in runs)) if runs else None
line = []
for name in ("build", "run", "check"):
    sp = span(name)
    if sp:
        line.append("%s %.2f-%.2f s" % (name, sp[0], sp[1]))
print("         timeline from the start: " + ", ".join(line) + ", exit %.2f s" % wall)
# The build threads' time not spent in build rungs: before each thread's first build, between a
# build's end and the same thread's next (the prepare rung, the history writes), and after its
# last. Threads are not in the report: each build goes to the thread free longest before it.
builds_at = starts("build")
threads = int(sys.argv[5])
free, start_idle, gaps = [], 0.0, 0.0
for at, d in builds_at:
    ready = [i for i, f in enumerate(free) if f <= at + 1e-3]
    if not ready and len(free) < threads:
        start_idle += at
        free.append(at + d)
        continue
    i = max(ready, key=lambda i: free[i]) if ready else min(range(len(free)), key=lambda i: free[i])
    gaps += max(0.0, at - free[i])
    free[i] = at + d
end_idle = sum(wall - f for f in free)
if builds_at:
    print("         build threads %d: idle before the first build %.2f thread-s, between builds %.2f thread-s"
          " (%.1f ms a build), after the last %.2f thread-s; busy %.1f of %.1f thread-s"
          % (len(free), start_idle, gaps, 1000 * gaps / len(builds_at), end_idle,
             sum(d for _, d in builds_at), wall * len(free)))
open(sys.argv[1] + ".wall", "w").write(str(wall))
open(sys.argv[1] + ".builds", "w").write(str(rungs + listings))
PY
}
run serial 1
run parallel ""
python3 - "$tmp/serial.json.wall" "$tmp/parallel.json.wall" "$tmp/serial.json.builds" "$tmp/parallel.json.builds" "$cores" <<'PY'
import sys
serial, parallel, compiles, parallel_compiles = (float(open(p).read()) for p in sys.argv[1:5])
cores = int(sys.argv[5])
print("cores %d: parallel / ((build rungs + listings) / cores) = %.2f (target <= 1.2); parallel / (serial / cores) = %.2f; speedup %.2fx"
      % (cores, parallel / (compiles / cores), parallel / (serial / cores), serial / parallel))
# How much of that is the builds' own slowdown with many at once, and how much the scheduling.
print("         the parallel check's build rungs and listings: %.2fx the serial one's; parallel / (its own / cores) = %.2f"
      % (parallel_compiles / compiles, parallel / (parallel_compiles / cores)))
PY
