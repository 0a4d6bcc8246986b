# One file on purpose: the judge watches its own module for a version's patches (watch_torch),
# so every function a verdict rests on lives in the one module that is watched.
"""GPU MODE and KernelBench problems in rung's Python worker: one check case, judged where the
tensors live.

A case draws the problem's inputs under a seed of rung's, computes the reference on its own
copy, poisons the output slots, calls the version once, and compares. Everything that looks at
every element (the comparison metrics, the input hashes, the unwritten count) runs on the
tensors' device a chunk at a time, so a 6 GB KernelBench tensor is never written to disk.

Which tensors of GPU MODE's `data` are outputs (the pmpp_v2 convention hands the output in:
vectoradd's data is `(A, B, C)`): those `ref_kernel` writes on its copy, and, when `data` holds
two or more tensors, its last one when the version returns it (vectorsum's and prefixsum's
`ref_kernel` return a new tensor while a solution fills the one it was given). Every other
tensor is an input: compared bit for bit with a copy taken before the call.

The metrics are metrics.rs's formulas (max abs err, rel err with its floor, MSE, PSNR, cosine,
allclose's mismatch rule, the error map); `tests/protocol.rs` holds the two to the same figures.
"""

import os
import sys
import time

# The clocks and synchronisation points a bench reads, as they were before any version was
# imported (save_timers, at the worker's start).
_TIMERS = {}

# The judge's own functions (the problem's modules, rung's, the torch operations it reads), as
# they were before the version was imported: name -> (namespace, key, parts, strict).
_HARNESS = {}
# torch's classes as watch_torch found them: (label, class, the names it had).
_CLASSES = []

# Elements per chunk of the on-device passes: 32 Mi elements is 256 MB of f64 per operand.
CHUNK = 1 << 25
# How many mismatches are listed (metrics.rs MAX_LISTED) and the error map's cells per side.
MAX_LISTED = 8
MAP_CELLS = 32
# The two poison bytes: 0xFF is a NaN in every float format and -1 in signed integers; 0x7F is a
# huge finite float (3.4e38 in f32) and 0x7F7F7F7F in i32. No honest output is either, twice.
POISONS = (0xFF, 0x7F)


def _torch():
    import torch
    return torch


def _finite_or_none(x):
    x = float(x)
    return x if x == x and x not in (float("inf"), float("-inf")) else None


def _unravel(i, shape):
    idx = [0] * len(shape)
    for d in range(len(shape) - 1, -1, -1):
        n = shape[d]
        if n > 0:
            idx[d] = i % n
            i //= n
    return idx


def compare(o, r, atol, rtol, rule=None):
    """metrics.rs's `compare` of output `o` against reference `r` (same number of elements; the
    dtypes may differ: both are read as f64), on their device. With `rule` = (atol, rtol), also
    the format's own allclose mismatches and how many elements an all-zero output, or one
    constant (the reference's mean), would get past that rule."""
    torch = _torch()
    shape = [int(d) for d in o.shape] or [1]
    of = o.detach().reshape(-1)
    rf = r.detach().reshape(-1)
    if rf.device != of.device:
        rf = rf.to(of.device)
    n = of.numel()
    if len(shape) == 1:
        rows, cols = 1, shape[0]
    else:
        rows, cols = shape[-2], shape[-1]
    mr, mc = max(1, min(rows, MAP_CELLS)), max(1, min(cols, MAP_CELLS))
    emap = torch.zeros(mr * mc, dtype=torch.float64, device=of.device)

    # First pass: the reference's largest finite magnitude (the relative error's floor, PSNR)
    # and its mean (the constant output the vacuity test tries).
    max_ref, ref_sum, ref_finite = 0.0, 0.0, 0
    for s in range(0, n, CHUNK):
        rc = rf[s:s + CHUNK].to(torch.float64)
        fin = torch.isfinite(rc)
        a = torch.where(fin, rc, torch.zeros_like(rc))
        if rc.numel():
            max_ref = max(max_ref, float(a.abs().max()))
        ref_sum += float(a.sum())
        ref_finite += int(fin.sum())
    floor = max(1e-6 * max_ref, 2.2250738585072014e-308)
    mean_ref = ref_sum / ref_finite if ref_finite else 0.0

    c = dict(elements=n, max_abs_err=0.0, max_rel_err=0.0, mean_abs_err=0.0, mse=0.0, rmse=0.0,
             psnr=None, cosine=1.0, mismatches=0, first_mismatches=[], nan_count=0, inf_count=0,
             error_map=[], map_shape=[mr, mc])
    sum_abs = sum_sq = dot = oo = rr = 0.0
    finite = 0
    rule_mis = zero_pass = const_pass = 0
    # The error map: where a row's columns split evenly into the map's cells, each chunk covers
    # whole segments (a cell's share of one row), reduced by a reshape and then scattered, one
    # value per segment; otherwise every element is scattered (small or oddly shaped outputs).
    seg = cols // mc if cols % mc == 0 else 0
    step = CHUNK
    if seg >= 8:
        step = max(seg, (CHUNK // seg) * seg)
    for s in range(0, n, step):
        oc = of[s:s + step].to(torch.float64)
        rc = rf[s:s + step].to(torch.float64)
        onan = torch.isnan(oc)
        ofin = torch.isfinite(oc)
        rnan = torch.isnan(rc)
        rfin = torch.isfinite(rc)
        c["nan_count"] += int(onan.sum())
        c["inf_count"] += int((~ofin & ~onan).sum())
        both = ofin & rfin
        zero = torch.zeros_like(oc)
        err = torch.where(both, (oc - rc).abs(), zero)
        ra = rc.abs()
        finite += int(both.sum())
        sum_abs += float(err.sum())
        sum_sq += float((err * err).sum())
        dot += float(torch.where(both, oc * rc, zero).sum())
        oo += float(torch.where(both, oc * oc, zero).sum())
        rr += float(torch.where(both, rc * rc, zero).sum())
        if oc.numel():
            c["max_abs_err"] = max(c["max_abs_err"], float(err.max()))
            rel = err / torch.clamp(ra, min=floor)
            c["max_rel_err"] = max(c["max_rel_err"], float(torch.where(both, rel, zero).max()))
        mis = (both & (err > atol + rtol * ra)) \
            | (~ofin & ~((onan & rnan) | (oc == rc))) \
            | (ofin & ~rfin)
        k = int(mis.sum())
        if k and len(c["first_mismatches"]) < MAX_LISTED:
            for i in torch.nonzero(mis).reshape(-1)[:MAX_LISTED - len(c["first_mismatches"])].tolist():
                c["first_mismatches"].append({"index": _unravel(s + i, shape),
                                              "output": _finite_or_none(oc[i]),
                                              "reference": _finite_or_none(rc[i])})
        c["mismatches"] += k
        if seg >= 8:
            segmax = err.view(-1, seg).amax(dim=1)
            sidx = torch.arange(s // seg, s // seg + segmax.numel(), device=oc.device, dtype=torch.int64)
            row = (sidx // mc) % max(rows, 1)
            cell = (row * mr // max(rows, 1)) * mc + sidx % mc
            emap.scatter_reduce_(0, cell, segmax, reduce="amax")
        else:
            idx = torch.arange(s, s + oc.numel(), device=oc.device, dtype=torch.int64)
            row = (idx // max(cols, 1)) % max(rows, 1)
            col = idx % max(cols, 1)
            cell = (row * mr // max(rows, 1)) * mc + col * mc // max(cols, 1)
            emap.scatter_reduce_(0, cell[both], err[both], reduce="amax")
        if rule is not None:
            ratol, rrtol = rule
            bound = ratol + rrtol * ra
            # allclose without equal_nan: a NaN anywhere is a mismatch.
            rule_mis += int(((both & (err > bound)) | (~both & ~(oc == rc))).sum())
            zero_pass += int((rfin & (ra <= bound)).sum())
            const_pass += int((rfin & ((mean_ref - rc).abs() <= bound)).sum())
    if finite:
        c["mean_abs_err"] = sum_abs / finite
        c["mse"] = sum_sq / finite
        c["rmse"] = c["mse"] ** 0.5
    import math
    if c["mse"] != 0.0:
        c["psnr"] = (20.0 * math.log10(max_ref) if max_ref > 0 else float("-inf")) - 10.0 * math.log10(c["mse"])
        c["psnr"] = _finite_or_none(c["psnr"])
    if oo == 0.0 and rr == 0.0:
        c["cosine"] = 1.0
    elif oo == 0.0 or rr == 0.0:
        c["cosine"] = 0.0
    else:
        c["cosine"] = dot / (oo ** 0.5 * rr ** 0.5)
    c["error_map"] = [float(x) for x in emap.cpu().tolist()]
    extra = None
    if rule is not None:
        extra = {"mismatches": rule_mis, "zero_pass": zero_pass, "constant_pass": const_pass,
                 "constant": mean_ref}
    return c, extra


# ---------------------------------------------------------------------------------------------
# Bits: poison, unwritten elements, changed elements


def _bytes(t):
    """A contiguous tensor's bytes as a flat uint8 view (no copy), or None if not contiguous."""
    if not t.is_contiguous():
        return None
    return t.detach().reshape(-1).view(_torch().uint8)


def poison(t, byte):
    """Fills `t` with `byte` in every byte; False when it cannot be done in place."""
    b = _bytes(t)
    if b is None:
        return False
    b.fill_(byte)
    return True


def unwritten(t, byte):
    """Elements of `t` whose every byte is still `byte`."""
    b = _bytes(t)
    if b is None or t.numel() == 0:
        return 0
    e = t.element_size()
    total = 0
    step = CHUNK * e
    for s in range(0, b.numel(), step):
        total += int((b[s:s + step].reshape(-1, e) == byte).all(dim=1).sum())
    return total


def changed(a, before):
    """Elements of `a` whose bits differ from `before`'s (NaN payloads included)."""
    if tuple(a.shape) != tuple(before.shape) or a.dtype != before.dtype:
        return max(1, a.numel())
    x = a.detach().contiguous().reshape(-1).view(_torch().uint8)
    y = before.detach().contiguous().reshape(-1).view(_torch().uint8)
    e = a.element_size()
    total = 0
    step = CHUNK * e
    for s in range(0, x.numel(), step):
        total += int((x[s:s + step] != y[s:s + step]).reshape(-1, e).any(dim=1).sum())
    return total


def _storage(t):
    try:
        return t.untyped_storage().data_ptr()
    except Exception:
        return None


def flatten(obj, name, out):
    """Tensors of a nested structure (tuple, list, dict) with names like `data[2]`."""
    if hasattr(obj, "detach") and hasattr(obj, "dtype"):
        out.append((name, obj))
    elif isinstance(obj, (tuple, list)):
        for i, x in enumerate(obj):
            flatten(x, "%s[%d]" % (name, i), out)
    elif isinstance(obj, dict):
        for k in obj:
            flatten(obj[k], "%s[%r]" % (name, k), out)
    return out


def clone(obj):
    if hasattr(obj, "detach") and hasattr(obj, "clone"):
        return obj.detach().clone()
    if isinstance(obj, tuple):
        return tuple(clone(x) for x in obj)
    if isinstance(obj, list):
        return [clone(x) for x in obj]
    if isinstance(obj, dict):
        return {k: clone(v) for k, v in obj.items()}
    return obj


def own_verdict(verdict):
    """GPU MODE's check_implementation answer (a tuple, a string, a list or a bool)."""
    if isinstance(verdict, tuple):
        return {"pass": bool(verdict[0]), "message": str(verdict[1]) if len(verdict) > 1 else ""}
    if isinstance(verdict, str):
        return {"pass": verdict == "", "message": verdict}
    if isinstance(verdict, list):
        return {"pass": not verdict, "message": "; ".join(str(x) for x in verdict)}
    return {"pass": bool(verdict), "message": ""}


def _meta(t, names):
    name = str(t.dtype).replace("torch.", "")
    return {"dtype": names.get(name, name), "shape": [int(d) for d in t.shape]}


def _filled_like(obj, value):
    torch = _torch()
    if hasattr(obj, "detach") and hasattr(obj, "dtype"):
        return torch.full_like(obj, value)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_filled_like(x, value) for x in obj)
    return obj


def _tf32_on():
    torch = _torch()
    return bool(torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32)


class _NoTF32:
    def __enter__(self):
        torch = _torch()
        self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def __exit__(self, *exc):
        torch = _torch()
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved


def _judge_outputs(outs, refs, tolerances, dtype_names, rule, case):
    """Compares each returned tensor with the reference's, the same position in each; fills
    `case["outputs"]` and notes on promotions and shapes."""
    if len(outs) != len(refs):
        case["notes"].append("the version returned %d tensor(s), the reference %d" % (len(outs), len(refs)))
    for (name, o), (_, r) in zip(outs, refs):
        om, rm = _meta(o, dtype_names), _meta(r, dtype_names)
        entry = {"name": name, "output": om, "reference": rm}
        if o.numel() != r.numel():
            entry["comparison"] = None
        else:
            if om["shape"] != rm["shape"]:
                case["notes"].append("`%s` has shape %s, the reference's %s: compared element by element"
                                     % (name, tuple(om["shape"]), tuple(rm["shape"])))
            if om["dtype"] != rm["dtype"]:
                case["notes"].append("`%s` is %s, the reference's %s: both compared as f64"
                                     % (name, om["dtype"], rm["dtype"]))
            # rung's tolerance: the less precise of the two dtypes'.
            ta = tolerances.get(om["dtype"], [0.0, 0.0])
            tb = tolerances.get(rm["dtype"], [0.0, 0.0])
            atol, rtol = max(ta[0], tb[0]), max(ta[1], tb[1])
            cmp, extra = compare(o, r, atol, rtol, rule)
            entry["comparison"] = cmp
            entry["tolerance"] = [atol, rtol]
            if extra is not None:
                entry["rule"] = extra
        case["outputs"].append(entry)


def drawn_alike(first, second, name):
    """The tensors of two draws under one seed that are the same bit for bit: those the problem
    draws the same way twice, which need no copy kept while the version runs."""
    twice = dict(flatten(second, name, []))
    return {n for n, x in flatten(first, name, []) if n in twice and changed(x, twice[n]) == 0}


def _keep(tensors, again):
    """Copies of the tensors a second draw cannot stand for."""
    return {n: x.detach().clone() for n, x in tensors if n not in again}


def _draw_again(draw, kept, name):
    """The inputs as they were before the call: drawn again, with the kept copies put back."""
    pristine = draw()
    for n, x in flatten(pristine, name, []):
        if n in kept:
            x.copy_(kept[n])
    return pristine


def refill(into, fresh, name):
    """Copies each tensor of `fresh` into the tensor at the same place in `into` (a bench's timed
    buffers): the same pointers, new contents."""
    a, b = flatten(into, name, []), flatten(fresh, name, [])
    if [(n, tuple(x.shape), x.dtype) for n, x in a] != [(n, tuple(x.shape), x.dtype) for n, x in b]:
        raise ValueError("the timed inputs and a fresh draw differ in their tensors")
    for (_, x), (_, f) in zip(a, b):
        x.copy_(f)
    return into


def gpu_mode_case(prob, version, args, seed, byte, state, device, tolerances, dtype_names, probe=True, into=None):
    """One GPU MODE case: generate_input under `seed`, ref_kernel on its own copy, the output
    slots poisoned with `byte`, custom_kernel once, check_implementation on a pristine copy.
    With `probe`, the check is also tried on vacuous answers (all zeros, one constant). With
    `into` (a bench's timed `data`), the draw is copied into those tensors and the version is
    called on them: a result remembered by pointer has the old contents' answer."""
    torch = _torch()

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    a = dict(args)
    if "seed" in a:
        a["seed"] = seed

    def draw():
        torch.manual_seed(seed)
        return prob.generate_input(**a)

    t = time.perf_counter()
    data = draw()
    if into is not None:
        data = refill(into, data, "data")
    slots = flatten(data, "data", [])
    # No copy of an input that generate_input draws the same way twice is kept while the version
    # runs (a version can find every tensor of its process): they are drawn again after the call.
    again = state.get("regenerable", set())
    kept = _keep(slots, again)
    sync()
    phases = {"inputs": time.perf_counter() - t}
    # The slots ref_kernel writes were learnt in the compile phase (ref_slots): the reference
    # runs after the version, so no expected answer is in memory while the version runs.
    late = state.setdefault("late_slots", set())
    outs_known = set(state.get("ref_slots", ())) | late
    poisoned = {}
    for n, x in slots:
        if n in outs_known:
            poisoned[n] = poison(x, byte)
    sync()
    t0 = time.perf_counter()
    output = version.custom_kernel(data)
    sync()
    seconds = time.perf_counter() - t0
    patched = patched_timers()
    harness = patched_harness()
    t = time.perf_counter()
    pristine = _draw_again(draw, kept, "data")
    del kept
    pr = dict(flatten(pristine, "data", []))
    sync()
    phases["inputs"] += time.perf_counter() - t
    returned = flatten(output, "output", [])
    by_storage = {}
    for n, x in slots:
        by_storage.setdefault(_storage(x), []).append(n)
    aliased = set()
    for _, o in returned:
        aliased.update(by_storage.get(_storage(o), []))
    last = slots[-1][0] if len(slots) >= 2 else None
    if last in aliased and last not in outs_known:
        late.add(last)
    t = time.perf_counter()
    ref_in = clone(pristine)
    expected = prob.ref_kernel(ref_in)
    sync()
    phases["reference"] = time.perf_counter() - t
    written = _ref_written(pristine, ref_in, expected)
    del ref_in
    state["ref_slots"] = set(state.get("ref_slots", ())) | set(written)
    out_slots = set(written) | late
    case = {"seed": seed, "seconds": seconds, "phases": phases, "outputs": [], "inputs": [],
            "output_slots": [n for n, _ in slots if n in out_slots], "unwritten": {}, "notes": []}
    if patched:
        case["patched"] = patched
    if harness:
        case["harness"] = harness
    for n, x in slots:
        if n in out_slots:
            continue
        case["inputs"].append({"name": n, "changed": changed(x, pr[n])})
    redo = _irreproducible(case["inputs"], again, pr, draw, "data")
    if redo:
        # Copied from now on, and this case judged again with the copies.
        again.difference_update(redo)
        del data, slots, pristine, pr, output, expected, returned
        return gpu_mode_case(prob, version, args, seed, byte, state, device, tolerances, dtype_names, probe, into)
    for n, x in slots:
        if n in aliased and poisoned.get(n):
            case["unwritten"][n] = unwritten(x, byte)
    refs = flatten(expected, "output", [])
    # Copies: an output a CUDA graph owns (torch.compile's reduce-overhead) is overwritten by the
    # next call, and the replay check looks at this one after the next.
    case["_tensors"] = ([(n, o.detach().clone()) for n, o in returned], [(n, r.detach().clone()) for n, r in refs])
    t = time.perf_counter()
    _judge_outputs(returned, refs, tolerances, dtype_names, None, case)
    check = getattr(prob, "check_implementation", None)
    if check is not None:
        own = own_verdict(check(clone(pristine), output))
        sync()
        if own["pass"] and probe:
            # Would the problem's own check pass a vacuous answer too?
            # One constant only means something for outputs of more than one element.
            many = sum(r.numel() for _, r in refs) > 1
            for what, value in (("an all-zero output", 0.0), ("a constant output", _mean(refs) if many else None)):
                if value is None:
                    continue
                try:
                    if own_verdict(check(clone(pristine), _filled_like(output, value)))["pass"]:
                        case["vacuous"] = "%s passes the problem's own check too" % what
                        break
                except Exception:
                    pass
        elif device == "cuda" and _tf32_on() and any(o.dtype == torch.float32 for _, o in returned):
            with _NoTF32():
                again = version.custom_kernel(clone(pristine))
                sync()
                if own_verdict(check(clone(pristine), again))["pass"]:
                    case["notes"].append(
                        "it passes with TF32 off: TF32 (torch.backends.cudnn.allow_tf32 and "
                        "torch.backends.cuda.matmul.allow_tf32, cuDNN's on by default) is the likely cause; "
                        "set both to False in the version, as the reference does")
        case["own"] = own
    phases["metrics"] = time.perf_counter() - t
    return case


def _mean(refs):
    torch = _torch()
    if not refs:
        return None
    r = refs[0][1]
    if not r.is_floating_point():
        return None
    v = float(torch.nan_to_num(r.detach().double()).mean()) if r.numel() else 0.0
    return v


def _irreproducible(checks, again, pristine, draw, name):
    """The inputs that differ from their draw after the call where a third draw differs from that
    draw too: the problem does not draw them the same way twice under one seed (a reduction on
    the GPU in the draw), so the difference says nothing about the version."""
    suspects = [c["name"] for c in checks if c["changed"] and c["name"] in again]
    if not suspects:
        return []
    third = dict(flatten(draw(), name, []))
    return [n for n in suspects if n in third and changed(third[n], pristine[n]) != 0]


def kernelbench_inputs(prob, seed, device):
    """get_inputs() under `seed`, made on the device."""
    torch = _torch()
    torch.manual_seed(seed)
    with torch.device(device):
        return [x.to(device) if hasattr(x, "to") else x for x in prob.get_inputs()]


def kernelbench_case(prob, make_model, model_new, seed, device, tolerances, dtype_names, again=(), into=None):
    """One KernelBench case: get_inputs() under `seed` made on the device, ModelNew then Model
    (same weights), KernelBench's own rule (same shape, allclose atol = rtol = 1e-2). Model is
    built by `make_model` after ModelNew's call, and the inputs named in `again` (those
    get_inputs draws the same way twice) are drawn again then: while the version runs, its
    process holds neither a reference nor a copy of those inputs to find and change. With
    `into` (a bench's timed inputs), the draw is copied into those tensors first."""
    torch = _torch()

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    t = time.perf_counter()
    inputs = kernelbench_inputs(prob, seed, device)
    if into is not None:
        inputs = refill(into, inputs, "inputs")
    kept = _keep(flatten(inputs, "inputs", []), again)
    sync()
    phases = {"inputs": time.perf_counter() - t}
    t0 = time.perf_counter()
    output = model_new(*inputs)
    sync()
    seconds = time.perf_counter() - t0
    patched = patched_timers()
    harness = patched_harness()
    t = time.perf_counter()
    pristine = _draw_again(lambda: kernelbench_inputs(prob, seed, device), kept, "inputs")
    del kept
    sync()
    phases["inputs"] += time.perf_counter() - t
    case = {"seed": seed, "seconds": seconds, "phases": phases, "outputs": [], "inputs": [],
            "output_slots": [], "unwritten": {}, "notes": []}
    if patched:
        case["patched"] = patched
    if harness:
        case["harness"] = harness
    pr = flatten(pristine, "inputs", [])
    for (n, x), (_, p) in zip(flatten(inputs, "inputs", []), pr):
        case["inputs"].append({"name": n, "changed": changed(x, p)})
    redo = _irreproducible(case["inputs"], again, dict(pr), lambda: kernelbench_inputs(prob, seed, device), "inputs")
    if redo and isinstance(again, set):
        again.difference_update(redo)
        del inputs, pristine, pr, output
        return kernelbench_case(prob, make_model, model_new, seed, device, tolerances, dtype_names, again, into)
    del inputs
    t = time.perf_counter()
    model = make_model()
    expected = model(*pristine)
    del model
    sync()
    phases["reference"] = time.perf_counter() - t
    del pristine
    t = time.perf_counter()
    outs = flatten(output, "output", [])
    refs = flatten(expected, "output", [])
    case["_tensors"] = ([(n, o.detach().clone()) for n, o in outs], refs)
    _judge_outputs(outs, refs, tolerances, dtype_names, (1e-2, 1e-2), case)
    fails = []
    if len(outs) != len(refs):
        fails.append("the version returned %d tensor(s), Model %d" % (len(outs), len(refs)))
    for e in case["outputs"]:
        if e["output"]["shape"] != e["reference"]["shape"]:
            fails.append("output shape %s is not Model's %s" % (tuple(e["output"]["shape"]), tuple(e["reference"]["shape"])))
        elif e.get("rule", {}).get("mismatches", 0):
            fails.append("torch.allclose(atol=1e-2, rtol=1e-2) is false: %d of %d elements differ"
                         % (e["rule"]["mismatches"], e["comparison"]["elements"]))
    case["own"] = {"pass": not fails, "message": "; ".join(fails)}
    if not fails:
        for e in case["outputs"]:
            r = e.get("rule") or {}
            n = e["comparison"]["elements"] if e.get("comparison") else 0
            if n and r.get("zero_pass") == n:
                case["vacuous"] = "an all-zero output passes KernelBench's rule too (every |reference| is within atol = 1e-2)"
            elif n > 1 and r.get("constant_pass") == n:
                case["vacuous"] = "a constant output (%.4g) passes KernelBench's rule too" % r["constant"]
    phases["metrics"] = time.perf_counter() - t
    return case


def case_failure(case):
    """(reason code, why) for a judged case that fails, or None: rung's defences first, then the
    format's own rule (or, without one, allclose at 1e-2 on what was returned)."""
    if case.get("harness"):
        return "harness-patched", "the version replaced or changed %s" % ", ".join(case["harness"])
    if case.get("patched"):
        return "timer-patched", "the version replaced %s" % ", ".join(case["patched"])
    for i in case["inputs"]:
        if i["changed"]:
            return "input-mutated", "the version changed its input `%s` (%d element(s))" % (i["name"], i["changed"])
    for n, k in case["unwritten"].items():
        if k:
            return "unwritten", "%d element(s) of `%s` were never written" % (k, n)
    own = case.get("own")
    if own is not None:
        return None if own["pass"] else ("problem-check", own["message"] or "the problem's own check failed")
    torch = _torch()
    outs, refs = case.get("_tensors", ([], []))
    if len(outs) != len(refs):
        return "mismatch", "the version returned %d tensor(s), the reference %d" % (len(outs), len(refs))
    for (n, o), (_, r) in zip(outs, refs):
        if o.numel() != r.numel() or not torch.allclose(o.float().reshape(-1), r.float().reshape(-1), atol=1e-2, rtol=1e-2):
            return "mismatch", "`%s` differs from the reference's (atol = rtol = 1e-2)" % n
    return None


def _same(xs, ys):
    return len(xs) == len(ys) and all(
        tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype and changed(a, b) == 0
        for (_, a), (_, b) in zip(xs, ys))


def mark_replays(cases):
    """Between consecutive cases (fresh inputs each): outputs bit for bit the same while the
    reference's changed is a remembered answer. Drops the tensors the cases kept."""
    prev = None
    for c in cases:
        outs, refs = c.pop("_tensors", ([], []))
        if prev is not None and outs and _same(outs, prev[0]) and not _same(refs, prev[1]):
            c["replayed"] = True
        prev = (outs, refs)


def _timer_table():
    import time as _t
    torch = _torch()
    c = torch.cuda
    return {
        "time.perf_counter": (_t, "perf_counter"), "time.perf_counter_ns": (_t, "perf_counter_ns"),
        "time.time": (_t, "time"), "time.monotonic": (_t, "monotonic"),
        "torch.cuda.synchronize": (c, "synchronize"), "torch.cuda.Event": (c, "Event"),
        "torch.cuda.Event.record": (c.Event, "record"), "torch.cuda.Event.elapsed_time": (c.Event, "elapsed_time"),
        "torch.cuda.Event.synchronize": (c.Event, "synchronize"), "torch.cuda.Event.query": (c.Event, "query"),
        "torch.cuda.Stream.synchronize": (c.Stream, "synchronize"), "torch.cuda.current_stream": (c, "current_stream"),
        "torch.cuda.Stream.record_event": (c.Stream, "record_event"),
    }


def save_timers():
    """Remembers the timing primitives, before any version runs."""
    try:
        for name, (owner, attr) in _timer_table().items():
            _TIMERS[name] = owner.__dict__.get(attr, getattr(owner, attr, None)) if isinstance(owner, type) \
                else getattr(owner, attr, None)
    except Exception:
        _TIMERS.clear()


def patched_timers():
    """The timing primitives that are no longer what they were at the worker's start."""
    if not _TIMERS:
        return []
    out = []
    for name, (owner, attr) in _timer_table().items():
        now = owner.__dict__.get(attr, getattr(owner, attr, None)) if isinstance(owner, type) else getattr(owner, attr, None)
        if now is not _TIMERS.get(name):
            out.append(name)
    return out


def _parts(v):
    """What a function is made of (the function, its code, defaults and closure cells): a version
    may replace the code or a cell of a closure (make_match_reference's atol) and keep the
    function."""
    out = [v, getattr(v, "__code__", None), getattr(v, "__defaults__", None), getattr(v, "__kwdefaults__", None)]
    for cell in getattr(v, "__closure__", None) or ():
        try:
            c = cell.cell_contents
        except ValueError:  # an empty cell
            c = None
        out.append(c)
        if isinstance(c, dict):  # keyword arguments kept for later: make_match_reference's
            out.extend(c.items())
    return out


def _same_part(a, b):
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) == 2:
        return a[0] == b[0] and a[1] is b[1]  # a (key, value) of a closure's dict
    return a is b


def _watch(label, namespace, strict):
    for k, v in list(namespace.items()):
        if callable(v) and k not in ("__class__",):
            _HARNESS["%s.%s" % (label, k)] = (namespace, k, _parts(v), strict)


def watch_torch():
    """Remembers the torch operations a judge reads (torch's, Tensor's, torch.nn.functional's,
    torch.testing's) and rung's own judging functions, before any version is imported. A torch
    entry counts as replaced only by something from outside torch and Triton (torch swaps some
    of its own entries as its parts load); rung's, by anything."""
    try:
        torch = _torch()
        import torch.nn.functional as F
        import torch.testing
        for label, ns in (("torch", vars(torch)), ("torch.Tensor", vars(torch.Tensor)),
                          ("torch._C.TensorBase", vars(torch._C.TensorBase)),
                          ("torch.nn.functional", vars(F)), ("torch.testing", vars(torch.testing))):
            _watch(label, ns, False)
        # A method set on the class that it inherited before (Tensor.__eq__ is TensorBase's):
        # nothing was replaced, yet every comparison now calls the version's.
        for label, cls in (("torch.Tensor", torch.Tensor), ("torch._C.TensorBase", torch._C.TensorBase)):
            _CLASSES.append((label, cls, frozenset(vars(cls))))
    except Exception:
        pass
    me = sys.modules.get(__name__)
    if me is not None:
        _watch(__name__, vars(me), True)


def watch_problem(folder, also=()):
    """Remembers the problem's own modules (every module loaded from its folder: reference.py,
    utils.py, task.py; a KernelBench file), their functions and their classes' methods, once they
    are loaded and before the version is: a version that replaces one is changing its judge.
    `also`: further modules to watch the same way (the worker itself)."""
    folder = os.path.abspath(folder)
    mods = [m for m in list(sys.modules.values())
            if os.path.dirname(os.path.abspath(getattr(m, "__file__", None) or "/")) == folder]
    for m in mods + [m for m in also if m is not None]:
        ns = vars(m)
        name = m.__name__
        _watch(name, ns, True)
        for k, v in list(ns.items()):
            if isinstance(v, type) and getattr(v, "__module__", None) == name:
                _watch("%s.%s" % (name, k), vars(v), True)


def patched_harness():
    """The judge's functions (see watch_problem and watch_torch) that are no longer what they
    were: replaced in their module or class, or changed in their code, defaults or closure."""
    out = []
    originals = {id(before[0]) for (_, _, before, _) in _HARNESS.values()}
    for name, (ns, k, before, strict) in _HARNESS.items():
        now = ns.get(k)  # a module's dict or a class's mappingproxy, both live
        parts = _parts(now)
        if len(parts) == len(before) and all(_same_part(a, b) for a, b in zip(parts, before)):
            continue
        if not strict and now is not None and _torch_made(now, originals):
            continue
        out.append(name)
    for label, cls, keys in _CLASSES:
        for k, v in list(vars(cls).items()):
            if k in keys or not callable(v):
                continue
            inherited = next((vars(b)[k] for b in cls.__mro__[1:] if k in vars(b)), None)
            if v is not inherited and not _torch_made(v, originals):
                out.append("%s.%s" % (label, k))
    return sorted(out)


def _package_dirs():
    dirs = []
    for name in ("torch", "triton"):
        m = sys.modules.get(name)
        f = getattr(m, "__file__", None)
        if f:
            dirs.append(os.path.dirname(os.path.abspath(f)) + os.sep)
    return tuple(dirs)


def _torch_made(v, originals):
    """Whether a replaced torch entry is torch's own doing (as its parts load, torch rebinds some
    of its entries, torch.compile wraps torch.manual_seed): a function whose code lives in torch's
    or Triton's package, or a builtin that names them as its module. Not when it is another watched entry's
    original (torch.allclose = torch.is_tensor), a functools.partial (torch.allclose with
    atol=1e9), or a function written elsewhere under the original's name (functools.wraps copies
    __module__, not the code's file)."""
    import functools
    if isinstance(v, functools.partial) or id(v) in originals:
        return False
    v = getattr(v, "__func__", v)  # a bound method: its function
    code = getattr(v, "__code__", None)
    if code is not None:
        return os.path.abspath(code.co_filename).startswith(_package_dirs())
    # A builtin (torch's C functions, a slot wrapper) by the module it names, else its type's.
    mod = getattr(v, "__module__", None)
    mod = mod if isinstance(mod, str) else type(v).__module__ or ""
    return mod.split(".")[0] in ("torch", "triton")


def _ref_written(pristine, ref_in, expected):
    """The tensors of data that ref_kernel wrote (their bits changed) or returned. Both, since
    torch.empty may hand out memory that already holds the answer, which writing leaves as it
    was."""
    pr = dict(flatten(pristine, "data", []))
    slots = flatten(ref_in, "data", [])
    back = {_storage(r) for _, r in flatten(expected, "output", [])}
    return {n for n, x in slots if _storage(x) in back or changed(x, pr[n])}


def learn_ref_slots(prob, data, state, device, draw=None):
    """The compile phase's look at the reference: which tensors of `data` ref_kernel writes,
    and, given `draw` (generate_input again under the same seed), which tensors it draws the
    same way twice: those need no copy kept while the version runs."""
    torch = _torch()
    pristine = clone(data)
    ref_in = clone(data)
    expected = prob.ref_kernel(ref_in)
    if device == "cuda":
        torch.cuda.synchronize()
    state["ref_slots"] = _ref_written(pristine, ref_in, expected)
    del ref_in, expected
    if draw is not None:
        state["regenerable"] = drawn_alike(pristine, draw(), "data")
