#!/usr/bin/env python3
"""Where each rung's wall time went, from `rung check --json` or `rung history --json` output.

    python3 scripts/phases.py FILE.json            a line per stage result, its phases beside it
    python3 scripts/phases.py --repeat FILE...     each file's bench medians, and their spread

A stage result is any object with `stage` and `duration_ms`; its phases are every `phases`
object inside it (the run rung's, each bench size's), in seconds.
"""

import json
import sys


def results(node, version=None):
    """(version, stage result) for every stage result in a document, in order."""
    if isinstance(node, dict):
        version = node.get("id") if isinstance(node.get("id"), str) else node.get("version", version)
        if "stage" in node and "duration_ms" in node:
            yield version, node
            return
        for v in node.values():
            yield from results(v, version)
    elif isinstance(node, list):
        for v in node:
            yield from results(v, version)


def phases(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "phases" and isinstance(v, dict):
                yield v
            else:
                yield from phases(v)
    elif isinstance(node, list):
        for v in node:
            yield from phases(v)


def medians(node):
    if isinstance(node, dict):
        h = node.get("headline")
        if isinstance(h, dict) and "median" in h:
            yield h["median"]
        for k, v in node.items():
            if k != "headline":
                yield from medians(v)
    elif isinstance(node, list):
        for v in node:
            yield from medians(v)


def main(argv):
    if argv and argv[0] == "--repeat":
        firsts = []
        for path in argv[1:]:
            doc = json.load(open(path))
            for version, r in results(doc):
                if r["stage"] == "bench":
                    m = list(medians(r))
                    print("%s %s bench %.0f ms, medians (ms) %s" % (path, version, r["duration_ms"], m))
                    if m:
                        firsts.append(m[0])
        if firsts:
            lo, hi = min(firsts), max(firsts)
            print("spread of %d medians: %.3f%% (min %.6g, max %.6g)" % (len(firsts), (hi / lo - 1) * 100, lo, hi))
        return 0
    for path in argv:
        doc = json.load(open(path))
        rows = list(results(doc))
        if "results" in doc:  # a history, newest first
            rows.reverse()
        for version, r in rows:
            parts = []
            for ph in phases(r.get("detail", {})):
                parts.append(" ".join("%s=%.0f" % (k, v * 1e3) for k, v in sorted(ph.items(), key=lambda kv: -kv[1])))
            print("%-6s %-9s %-5s %8.0f ms  %s" % (version, r["stage"], r.get("verdict", ""), r["duration_ms"], " | ".join(parts)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
