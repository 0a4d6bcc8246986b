#!/usr/bin/env python3
"""How soon a check's build starts after rung does, with the Python probe remembered and without.

    python3 benches/first_build.py [RUNG] [RUNS]     (default: target/release/rung, 5 runs)

Writes the vector-add template to a temporary folder, then, RUNS times each way (after one run
not counted), changes v001 (so it builds again) and times `rung check --no-bench --json v001`:
the build rung's `started_at` from the moment rung was spawned, and the whole wall time. "probe"
removes rung's remembered probes (`python-probes.json` in RUNG_HOME, else ~/.cache/rung) before
each run, so the probe runs; "remembered" leaves them.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime

rung = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else "target/release/rung")
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
home = os.environ.get("RUNG_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "rung")
remembered = os.path.join(home, "python-probes.json")

with tempfile.TemporaryDirectory() as tmp:
    ws = os.path.join(tmp, "ws")
    subprocess.run([rung, "new", ws, "-t", "vector-add"], check=True, capture_output=True)
    v001 = next(os.path.join(ws, "versions", f) for f in os.listdir(os.path.join(ws, "versions")) if f.startswith("v001"))
    for mode in ("probe", "remembered"):
        starts, walls = [], []
        for i in range(runs + 1):
            with open(v001, "a") as f:
                f.write("// %s %d\n" % (mode, i))
            if mode == "probe" and os.path.exists(remembered):
                os.remove(remembered)
            t0 = time.time()
            out = subprocess.run([rung, "check", "--no-bench", "--json", "v001"], cwd=ws, capture_output=True, text=True)
            wall = time.time() - t0
            build = next(s for s in json.loads(out.stdout)["versions"][0]["stages"] if s["stage"] == "build")
            start = datetime.fromisoformat(build["started_at"].replace("Z", "+00:00")).timestamp() - t0
            if i > 0:
                starts.append(start)
                walls.append(wall)
        print("%-10s the build starts at %s s; wall %s s"
              % (mode, " ".join("%.3f" % s for s in starts), " ".join("%.2f" % w for w in walls)))
