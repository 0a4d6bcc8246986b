"""Summarises `rung watch --json` events: per version, its GPU job's start and end (ms after the
first), its verdict and where it ran; and whether any two GPU jobs overlapped."""
import json
import sys

events = [json.loads(line) for line in sys.stdin if line.strip().startswith("{")]
t0 = events[0]["unix_ms"] if events else 0
spans, done = {}, {}
for e in events:
    if e.get("event") == "job" and e.get("job") == "gpu" and e.get("state") in ("running", "done"):
        spans.setdefault(e["version"], {})[e["state"]] = e["unix_ms"] - t0
    if e.get("event") == "done":
        done[e["version"]] = e["report"]
for v, r in sorted(done.items()):
    s = spans.get(v, {})
    ran = r.get("ran_on", {})
    print(f"{v} {r['verdict']:<8} gpu job {s.get('running')}..{s.get('done')} ms  ran on {ran}")
iv = sorted((s["running"], s["done"]) for s in spans.values() if "running" in s and "done" in s)
overlap = any(b[0] < a[1] for a, b in zip(iv, iv[1:]))
print(f"{len(done)} versions done; GPU jobs overlapped: {overlap}")
