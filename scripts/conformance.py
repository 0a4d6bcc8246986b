#!/usr/bin/env python3
"""rung's verdicts on a conformance folder, beside the expected ones.

    python3 scripts/conformance.py RUNG CONFORMANCE_DIR [WORK_DIR]

CONFORMANCE_DIR holds `gpu-mode/` (GPU MODE reference-kernels problem folders, each with
`solutions/correct/` and `solutions/wrong/`, `utils.py` and `eval.py` one level up) and
`kernelbench/` (KernelBench problem files). Each problem becomes a workspace under WORK_DIR
(the problem's files, unmodified, and its solutions as versions); KernelBench problems get the
versions under `scripts/conformance/kernelbench/<problem>/`. rung checks each workspace
(`rung check --json --no-bench`) and a row per version says what rung said, what was expected,
the reason and how long the check took. It exits 1 when any row disagrees.

Expected: a correct solution passes and a wrong one fails, except where GPU MODE's own check
fails a solution its folder calls correct (EXPECT below, with the cause rung must name).
KernelBench versions say it in their name: `wrong` fails, `warn` passes with a warning.
Afterwards vectoradd's (or the first GPU MODE problem's) first version is saved again under
`rung watch`: the time of that warm re-check is the loop's. CONFORMANCE_ONLY=a,b keeps only
the problems named. CONFORMANCE_BENCH=1 checks with the bench (a bench that fails fails the
row) and skips the warm re-check.
"""

import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ONLY = [p for p in os.environ.get("CONFORMANCE_ONLY", "").split(",") if p]
BENCH = os.environ.get("CONFORMANCE_BENCH") == "1"


def wanted(name):
    return not ONLY or name in ONLY

# (problem, solution file) -> (verdict, words the failing summary must contain, why).
EXPECT = {
    ("vectorsum_py", "correct/pytorch.py"): (
        "fail", ["shape"], "GPU MODE's own check fails it: it returns shape (1,), the reference ()"),
    ("conv2d_py", "correct/ref.py"): (
        "fail", ["TF32"], "GPU MODE's own check fails it at atol = rtol = 1e-3: cuDNN's TF32 is on"),
}


def check(rung, ws, versions=()):
    t = time.perf_counter()
    p = subprocess.run([rung, "check", "--json", *([] if BENCH else ["--no-bench"]), "-C", ws, *versions],
                       capture_output=True, text=True)
    wall = time.perf_counter() - t
    try:
        report = json.loads(p.stdout)
    except ValueError:
        sys.stderr.write("%s: rung check printed no report (exit %d):\n%s\n" % (ws, p.returncode, p.stderr[-3000:]))
        return None, wall
    return report, wall


def verdict_of(v):
    """(verdict, reason, summary, warnings) of one version of a report."""
    stages = v.get("stages", [])
    bad = next((s for s in stages if s.get("verdict") not in ("pass", "skipped")), None)
    chk = next((s for s in stages if s.get("stage") == "check"), None)
    warnings = ((chk or {}).get("detail") or {}).get("warnings") or []
    if bad:
        # fail, or error (rung's own: no verdict on the version), as rung said it.
        verdict = "fail" if bad.get("verdict") == "fail" else bad.get("verdict", "fail")
        return verdict, bad.get("reason") or "", "%s: %s" % (bad.get("stage"), bad.get("summary", "")), warnings
    if not chk or chk.get("verdict") != "pass":
        # Nothing was judged (a skipped run: no GPU here): no verdict to compare.
        run = next((s for s in stages if s.get("stage") == "run"), {})
        return "skipped", "", "run: %s" % run.get("summary", ""), warnings
    bench = next((s for s in stages if s.get("stage") == "bench"), None)
    timed = "; bench: %s" % bench.get("summary", "") if bench else ""
    return "pass", "", "%s: %s%s" % (chk.get("stage"), chk.get("summary", ""), timed), warnings


def phases_of(v):
    """The run's phases (seconds) of one version of a report, largest first: where its check's
    time went."""
    run = next((s for s in v.get("stages", []) if s.get("stage") == "run"), {})
    phases = (run.get("detail") or {}).get("phases") or {}
    return ", ".join("%s %.2f" % kv for kv in sorted(phases.items(), key=lambda kv: -kv[1]) if kv[1] >= 0.01)


class Rows(list):
    """The rows, each also written to standard error as it comes, with its run's phases: a run
    cut short by a time limit still says what it judged and where the time went."""

    def append(self, r):
        sys.stderr.write("%s %s: %s (expected %s)%s\n" % (
            r["problem"], r["version"], r["got"], r["expected"], "" if r["ok"] else "  DISAGREES"))
        if r.get("phases"):
            sys.stderr.write("    phases (s): %s\n" % r["phases"])
        sys.stderr.flush()
        list.append(self, r)


def gpu_mode(root, work):
    rows = Rows()
    for name in sorted(os.listdir(root)):
        src = os.path.join(root, name)
        if not os.path.isfile(os.path.join(src, "task.yml")) or not wanted(name):
            continue
        ws = os.path.join(work, "gpu-mode", name)
        shutil.rmtree(ws, ignore_errors=True)
        os.makedirs(os.path.join(ws, "versions"))
        for f in os.listdir(src):
            if f.endswith((".py", ".yml")):
                shutil.copy(os.path.join(src, f), ws)
        for f in ("utils.py",):
            if os.path.isfile(os.path.join(root, f)):
                shutil.copy(os.path.join(root, f), ws)
        names = {}
        n = 0
        for kind in ("correct", "wrong"):
            d = os.path.join(src, "solutions", kind)
            for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
                n += 1
                vid = "v%03d" % n
                shutil.copy(os.path.join(d, f), os.path.join(ws, "versions", "%s-%s-%s" % (vid, kind, f)))
                names[vid] = "%s/%s" % (kind, f)
        report, wall = check(RUNG, ws)
        for v in (report or {}).get("versions", []):
            sol = names.get(v["id"], v["id"])
            want, words, why = EXPECT.get((name, sol), ("pass" if sol.startswith("correct") else "fail", [], ""))
            got, reason, summary, warnings = verdict_of(v)
            ok = got == want and all(w.lower() in summary.lower() for w in words)
            rows.append(dict(problem=name, version=sol, expected=want, got=got, reason=reason, ok=ok,
                             summary=summary, warnings=warnings, why=why, seconds=wall, phases=phases_of(v)))
        if report is None:
            rows.append(dict(problem=name, version="*", expected="a report", got="none", reason="", ok=False,
                             summary="", warnings=[], why="", seconds=wall))
    return rows


def kernelbench(root, work):
    rows = Rows()
    for f in sorted(os.listdir(root)):
        if not f.endswith(".py"):
            continue
        stem = f[:-3]
        mine = os.path.join(HERE, "conformance", "kernelbench", stem)
        if not os.path.isdir(mine) or not wanted(stem):
            continue
        ws = os.path.join(work, "kernelbench", stem)
        shutil.rmtree(ws, ignore_errors=True)
        os.makedirs(os.path.join(ws, "versions"))
        shutil.copy(os.path.join(root, f), ws)
        for v in sorted(os.listdir(mine)):
            shutil.copy(os.path.join(mine, v), os.path.join(ws, "versions", v))
        for v in sorted(os.listdir(mine)):
            vid = v.split("-")[0]
            report, wall = check(RUNG, ws, [vid])
            for r in (report or {}).get("versions", []):
                want = "fail" if "wrong" in v else "pass"
                got, reason, summary, warnings = verdict_of(r)
                ok = got == want and (("warn" not in v) or bool(warnings))
                rows.append(dict(problem=stem, version=v, expected=want + (" + warning" if "warn" in v else ""),
                                 got=got + (" + warning" if warnings else ""), reason=reason, ok=ok,
                                 summary=summary, warnings=warnings, why="", seconds=wall, phases=phases_of(r)))
            if report is None:
                rows.append(dict(problem=stem, version=v, expected="a report", got="none", reason="", ok=False,
                                 summary="", warnings=[], why="", seconds=wall))
    return rows


def warm_recheck(work, limit=300.0):
    """The loop's figure: `rung watch --json --no-bench` on the first GPU MODE problem; once every
    version is checked, its first version is saved again. Returns (problem, version, seconds from
    the save to the check's result, seconds from rung seeing the change to the result)."""
    base = os.path.join(work, "gpu-mode")
    # Only a problem this run checked: another run's folder may be left in WORK_DIR.
    names = sorted(n for n in os.listdir(base) if wanted(n) and os.path.isdir(os.path.join(base, n, "versions"))) \
        if os.path.isdir(base) else []
    if not names:
        return None
    # GPU MODE's own eval.py is timed on vectoradd: the same problem, when it is there.
    name = "vectoradd_py" if "vectoradd_py" in names else names[0]
    ws = os.path.join(base, name)
    vdir = os.path.join(ws, "versions")
    versions = sorted(os.listdir(vdir))
    if not versions:
        return None
    first = versions[0]
    vid = first.split("-")[0]
    p = subprocess.Popen([RUNG, "watch", "--json", "--no-bench", "-C", ws], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    done, saved, seen = set(), None, None
    start = time.time()
    try:
        for line in p.stdout:
            ev = json.loads(line)
            if time.time() - start > limit:
                return None
            if ev.get("event") == "done" and ev.get("generation") == 1:
                done.add(ev["version"])
                if len(done) == len(versions) and saved is None:
                    time.sleep(1.0)
                    saved = time.time()
                    with open(os.path.join(vdir, first), "a") as fh:
                        fh.write("\n# saved again\n")
            elif ev.get("event") == "changed" and saved is not None:
                seen = ev["unix_ms"] / 1e3
            elif ev.get("event") == "done" and saved is not None and ev.get("version") == vid:
                t = ev["unix_ms"] / 1e3
                run = next((st for st in ev["report"]["stages"] if st["stage"] == "run"), {})
                phases = (run.get("detail") or {}).get("phases") or {}
                print("warm re-check phases (s): " + ", ".join("%s %.3f" % kv for kv in sorted(phases.items())))
                return name, first, t - saved, t - (seen or saved)
    finally:
        p.kill()
        p.wait()
    return None


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    RUNG = os.path.abspath(sys.argv[1])
    conf = os.path.abspath(sys.argv[2])
    work = os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 else os.path.join(os.getcwd(), "conformance-work")
    rows = []
    if os.path.isdir(os.path.join(conf, "gpu-mode")):
        rows += gpu_mode(os.path.join(conf, "gpu-mode"), work)
    if os.path.isdir(os.path.join(conf, "kernelbench")):
        rows += kernelbench(os.path.join(conf, "kernelbench"), work)
    print("| problem | version | expected | rung | reason | check (s) | agrees | rung's summary |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        s = r["summary"].replace("|", "/").replace("\n", " ")
        # A warning the summary does not already carry (a passing check's summary names its first).
        extra = [w for w in r["warnings"] if w.replace("\n", " ") not in r["summary"].replace("\n", " ")]
        if extra:
            s += " WARNING: " + extra[0].replace("|", "/")
        print("| %s | %s | %s | %s | %s | %.1f | %s | %s |" % (
            r["problem"], r["version"], r["expected"], r["got"], r["reason"], r["seconds"],
            "yes" if r["ok"] else "**NO**", s[:900 if BENCH else 400]))
    w = None if BENCH else warm_recheck(work)
    if w:
        print("\nwarm re-check after a save (rung watch): %s %s: %.2f s from the save to its check's result, "
              "%.2f s from rung seeing the change" % w)
    # A zygote that restarted (a preimport opened CUDA) costs each check its start again.
    restarts = []
    for dirpath, _, names in os.walk(work):
        for n in names:
            if dirpath.endswith(os.path.join(".rung", "logs")) and n.endswith(".log"):
                with open(os.path.join(dirpath, n), errors="replace") as fh:
                    restarts += [line.strip() for line in fh if "opened CUDA in the zygote" in line]
    print("\nzygote restarts (a preimport opened CUDA): %d%s" % (len(restarts), "".join("\n  " + r for r in sorted(set(restarts)))))
    bad = sum(1 for r in rows if not r["ok"])
    print("\n%d passed, %d failed" % (len(rows) - bad, bad))
    sys.exit(1 if bad else 0)
