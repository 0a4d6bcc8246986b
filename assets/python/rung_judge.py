"""The judge's side of a GPU MODE or KernelBench test: served by a child of a zygote that never
ran a version's code (rung's `Runners::judge`). It draws the problem's inputs again under each
case's seed, runs the reference and the problem's own check on them, and judges what the
version's process observed (rung_problem.observe_*), so nothing a version does in its own
process reaches its verdict. rung_worker.py serves its requests."""

import os
import time

import rung_problem as rp
from rung_bench import _problem_module, _seeded_model
from rung_host import RUNG_DTYPES


def judge(req, state):
    """The judge's side of a GPU MODE or KernelBench test, in a child of a zygote that never ran a
    version: with `learn`, what the problem's inputs and reference look like (the hints for the
    version's process); otherwise the verdict on each case the version's process observed."""
    import torch
    device = "cuda" if state["mode"] == "cuda" else "cpu"
    gm = req["format"] == "gpu-mode"
    t = time.perf_counter()
    with rp.problem_code("module", device):
        prob = _problem_module(req["problem"], req["format"])
    phases = {"judge_import": time.perf_counter() - t}
    args = dict(req.get("args") or {})
    seed = int(req["seed"])
    judged = state.setdefault("judged", {})
    t = time.perf_counter()
    with torch.no_grad():
        if req.get("learn"):
            if gm:
                draw = rp.gpu_mode_draw(prob, args, seed, device)
                rp.learn_ref_slots(prob, draw(), judged, device, draw)
                if req.get("probe"):
                    _learn_gpu_mode_probe(prob, draw, judged, seed, device)
            else:
                judged["regenerable"] = rp.drawn_alike(rp.kernelbench_inputs(prob, seed, device),
                                                       rp.kernelbench_inputs(prob, seed, device), "inputs")
                model = _kernelbench_model(prob, seed, device)
                draw = lambda: rp.kernelbench_inputs(prob, seed, device)  # noqa: E731
                with rp.problem_code("Model", device):
                    rp.learn_model_inout(model, draw, seed, judged)
                    if req.get("probe"):
                        judged["sparse"] = rp.learn_probe(draw, lambda x: (rp.forward_seed(seed), model(*x))[1],
                                                          "inputs", (), seed, device)
                del model
            phases["judge_learn"] = time.perf_counter() - t
            # What the draws left cached goes back to the card, for the version's process.
            rp.give_back(device)
            return {"phases": phases, "hints": _hints(judged)}
        records = req.get("observed") or []
        _within(records, req.get("dump"))
        tolerances = req.get("tolerances") or {}
        try:
            if req.get("sparse_call"):
                # The sparse probe's call, alone in a check's last request.
                if not judged.get("sparse") or len(records) != 1:
                    raise ValueError("a sparse probe's request holds one call of a probe this process learnt")
                if gm:
                    cases = [rp.probe_gpu_mode(prob, args, records[0], judged["sparse"], device)]
                else:
                    cases = [rp.probe_kernelbench(prob, lambda: _kernelbench_model(prob, seed, device), records[0],
                                                  judged["sparse"], tolerances, RUNG_DTYPES, device)]
            elif gm:
                cases = rp.judge_gpu_mode(prob, args, records, tolerances, RUNG_DTYPES, bool(req.get("probe")),
                                          device, judged)
            else:
                cases = rp.judge_kernelbench(prob, lambda: _kernelbench_model(prob, seed, device), records,
                                             tolerances, RUNG_DTYPES, device)
        except rp.Redo as r:
            return {"phases": phases, "redo": r.names}
        finally:
            _remove_files(records)
    if req.get("recheck"):
        # A bench's re-check: the case on the timed buffers, then the one on new buffers.
        phases["judge"] = time.perf_counter() - t
        resp = {"phases": phases, "hints": _hints(judged)}
        if len(cases) != 2:
            raise ValueError("a re-check judges two calls, not %d" % len(cases))
        failed = rp.recheck_verdict(*cases)
        if failed:
            resp["recheck_reason"], resp["recheck"] = failed
        return resp
    rp.mark_replays(cases)
    for c in cases:
        for k, v in c.pop("phases").items():
            phases[k] = phases.get(k, 0.0) + v
    if gm and req.get("probe") and not judged.get("sparse") and judged.get("reduction"):
        # A GPU MODE test larger than the first is a reduction: the next tests get the sparse
        # probe (the hints change, so rung makes their calls with it).
        t_learn = time.perf_counter()
        s = cases[0]["seed"]
        with torch.no_grad():
            _learn_gpu_mode_probe(prob, rp.gpu_mode_draw(prob, args, s, device), judged, s, device)
        rp.give_back(device)
        phases["judge_learn"] = phases.get("judge_learn", 0.0) + time.perf_counter() - t_learn
    phases["judge"] = time.perf_counter() - t
    return {"phases": phases, "hints": _hints(judged), "problem": {"args": args, "cases": cases}}


def _hints(judged):
    hints = {"output_slots": sorted(judged.get("ref_slots", ())), "regenerable": sorted(judged.get("regenerable", ()))}
    if judged.get("inout"):
        hints["inout_slots"] = sorted(judged["inout"])
    if judged.get("reads_last"):
        hints["reads_last"] = True
    if judged.get("sparse"):
        hints["sparse"] = judged["sparse"]
    return hints


def _learn_gpu_mode_probe(prob, draw, judged, seed, device):
    """The sparse probe of a GPU MODE test (rung_problem.learn_probe) into `judged`."""
    with rp.problem_code("ref_kernel()", device):
        judged["sparse"] = rp.learn_probe(draw, lambda d: prob.ref_kernel(rp.clone(d)), "data",
                                          judged.get("ref_slots", ()), seed, device)


def _kernelbench_model(prob, seed, device):
    """Model built from get_init_inputs() under `seed`: ModelNew's weights are drawn the same way."""
    import torch
    torch.manual_seed(seed)
    with rp.problem_code("get_init_inputs()", device), torch.device(device):
        init = prob.get_init_inputs()
    with rp.problem_code("Model", device):
        return _seeded_model(prob.Model, init, seed, device)


def _metas(records):
    """Every tensor a record names (what the version returned, the inputs it changed, the copies
    kept before its call)."""
    for rec in records:
        yield from rec.get("tensors") or []
        yield from (rec.get("kept") or {}).values()
        yield from (s["changed"] for s in rec.get("slots") or [] if "changed" in s)


def _within(records, dump):
    """The records come from the version's process: every file they name must be in the folder
    rung gave it (`dump`), or the judge would read (and then remove) whatever a version names."""
    if not dump:
        raise ValueError("the judge needs the folder of the version's files")
    root = os.path.realpath(dump) + os.sep
    for m in _metas(records):
        f = m.get("file") if isinstance(m, dict) else None
        if not isinstance(f, str) or not os.path.realpath(f).startswith(root):
            raise ValueError("the version's record names a file outside its folder: %r" % (f,))


def _remove_files(records):
    """The version's files, once judged (in shared memory they hold memory until removed)."""
    for m in _metas(records):
        try:
            os.remove(m["file"])
        except (OSError, KeyError, TypeError):
            pass
