# One file on purpose: the version's side watches this module for a version's patches
# (watch_torch), so every function its observation rests on lives in the one module that is
# watched; the judge's side shares the comparison with it.
"""GPU MODE and KernelBench problems in rung's Python worker: one check case in two processes.

The version's process (observe_gpu_mode, observe_kernelbench) draws the problem's inputs under
a seed of rung's, poisons the output slots, calls the version once, and writes down what it saw:
the tensors it returned (files in the run's data folder), a digest of each input before and
after the call, the input itself where it changed, and copies of the inputs the problem cannot
draw twice. A judge's process that never ran a version (judge_gpu_mode, judge_kernelbench,
served by rung_judge.py) draws the inputs again from the seed, computes the reference on its own
copy, and compares. Everything that looks at every element (the metrics, the digests, the
unwritten count) runs on the tensors' device a chunk at a time.

Which tensors of GPU MODE's `data` are outputs (the pmpp_v2 convention hands the output in:
vectoradd's data is `(A, B, C)`): those `ref_kernel` writes on its copy, and, when `data` holds
two or more tensors, its last one when the version returns it (vectorsum's and prefixsum's
`ref_kernel` return a new tensor while a solution fills the one it was given). Every other
tensor is an input: checked bit for bit against the judge's own draw.

The metrics are metrics.rs's formulas (max abs err, rel err with its floor, MSE, PSNR, cosine,
allclose's mismatch rule, the error map); `tests/problems.rs` holds the two to the same figures.
"""

import ctypes
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


def _masks(oc, rc):
    """One f64 chunk pair's NaN and finite masks (output, reference), and the pairs both finite."""
    torch = _torch()
    onan, ofin = torch.isnan(oc), torch.isfinite(oc)
    rnan, rfin = torch.isnan(rc), torch.isfinite(rc)
    return onan, ofin, rnan, rfin, ofin & rfin


def _mismatched(oc, rc, masks, err, ra, atol, rtol):
    """metrics.rs's mismatch rule on one chunk: outside atol + rtol·|ref| where both are finite
    (`err` is |o - r| there), a non-finite output the reference does not share, a finite output
    for a non-finite reference."""
    onan, ofin, rnan, rfin, both = masks
    return (both & (err > atol + rtol * ra)) \
        | (~ofin & ~((onan & rnan) | (oc == rc))) \
        | (ofin & ~rfin)


def compare(o, r, atol, rtol, rule=None):
    """metrics.rs's `compare` of output `o` against reference `r` (same number of elements; the
    dtypes may differ: both are read as f64), on their device. With `rule` = (atol, rtol), also
    the format's own allclose mismatches and how many elements an all-zero output, or one
    constant (the reference's mean), would get past that rule.

    Every running total stays on the device and is read back once at the end (one
    synchronisation per output, not a dozen per chunk); the first mismatches are looked for in a
    second pass only when there are any."""
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
    dev, f64, i64 = of.device, torch.float64, torch.int64
    emap = torch.zeros(mr * mc, dtype=f64, device=dev)

    def zero(dtype):
        return torch.zeros((), dtype=dtype, device=dev)

    # First pass: the reference's largest finite magnitude (the relative error's floor, PSNR)
    # and its mean (the constant output the vacuity test tries). The sums add the chunks' sums
    # in order, as the host did when it read each one.
    max_ref, ref_sum, ref_finite = zero(f64), zero(f64), zero(i64)
    for s in range(0, n, CHUNK):
        rc = rf[s:s + CHUNK].to(f64)
        fin = torch.isfinite(rc)
        a = torch.where(fin, rc, 0.0)
        max_ref = torch.maximum(max_ref, a.abs().max())
        ref_sum = ref_sum + a.sum()
        ref_finite = ref_finite + fin.sum()
    floor = torch.clamp(max_ref * 1e-6, min=2.2250738585072014e-308)
    mean_ref = torch.where(ref_finite > 0, ref_sum / torch.clamp(ref_finite, min=1).to(f64), 0.0)

    # Running totals: the f64 ones (sum |err|, sum err², o·r, o·o, r·r, max abs, max rel) and the
    # counts (finite pairs, NaN, Inf, mismatches, the rule's mismatches, zero and constant passes).
    sum_abs, sum_sq, dot, oo, rr, max_abs, max_rel = (zero(f64) for _ in range(7))
    finite, nans, infs, mism, rule_mis, zero_pass, const_pass = (zero(i64) for _ in range(7))
    # The error map: where a row's columns split evenly into the map's cells, each chunk covers
    # whole segments (a cell's share of one row), reduced by a reshape and then scattered, one
    # value per segment; otherwise every element is scattered (small or oddly shaped outputs).
    seg = cols // mc if cols % mc == 0 else 0
    step = CHUNK
    if seg >= 8:
        step = max(seg, (CHUNK // seg) * seg)
    for s in range(0, n, step):
        oc = of[s:s + step].to(f64)
        rc = rf[s:s + step].to(f64)
        masks = _masks(oc, rc)
        onan, ofin, rnan, rfin, both = masks
        nans = nans + onan.sum()
        infs = infs + (~ofin & ~onan).sum()
        # Both zero wherever either is not finite, so the sums, products and the map read only
        # the pairs metrics.rs reads.
        oz = torch.where(both, oc, 0.0)
        rz = torch.where(both, rc, 0.0)
        err = (oz - rz).abs()
        ra = rc.abs()
        finite = finite + both.sum()
        sum_abs = sum_abs + err.sum()
        sum_sq = sum_sq + torch.dot(err, err)
        dot = dot + torch.dot(oz, rz)
        oo = oo + torch.dot(oz, oz)
        rr = rr + torch.dot(rz, rz)
        max_abs = torch.maximum(max_abs, err.max())
        max_rel = torch.maximum(max_rel, (err / torch.clamp(rz.abs(), min=floor)).max())
        mism = mism + _mismatched(oc, rc, masks, err, ra, atol, rtol).sum()
        if seg >= 8:
            segmax = err.view(-1, seg).amax(dim=1)
            sidx = torch.arange(s // seg, s // seg + segmax.numel(), device=dev, dtype=i64)
            row = (sidx // mc) % max(rows, 1)
            cell = (row * mr // max(rows, 1)) * mc + sidx % mc
            emap.scatter_reduce_(0, cell, segmax, reduce="amax")
        else:
            idx = torch.arange(s, s + oc.numel(), device=dev, dtype=i64)
            row = (idx // max(cols, 1)) % max(rows, 1)
            col = idx % max(cols, 1)
            cell = (row * mr // max(rows, 1)) * mc + col * mc // max(cols, 1)
            emap.scatter_reduce_(0, cell, err, reduce="amax")
        if rule is not None:
            ratol, rrtol = rule
            bound = ratol + rrtol * ra
            # allclose without equal_nan: a NaN anywhere is a mismatch.
            rule_mis = rule_mis + ((both & (err > bound)) | (~both & ~(oc == rc))).sum()
            zero_pass = zero_pass + (rfin & (ra <= bound)).sum()
            const_pass = const_pass + (rfin & ((mean_ref - rc).abs() <= bound)).sum()

    # The one read back.
    (max_ref, mean_ref, sum_abs, sum_sq, dot, oo, rr, max_abs, max_rel), counts, error_map = (
        torch.stack([max_ref, mean_ref, sum_abs, sum_sq, dot, oo, rr, max_abs, max_rel]).tolist(),
        torch.stack([finite, nans, infs, mism, rule_mis, zero_pass, const_pass]).tolist(),
        emap.cpu().tolist())
    finite, nans, infs, mism, rule_mis, zero_pass, const_pass = counts
    c = dict(elements=n, max_abs_err=max_abs, max_rel_err=max_rel, mean_abs_err=0.0, mse=0.0,
             rmse=0.0, psnr=None, cosine=1.0, mismatches=mism, first_mismatches=[],
             nan_count=nans, inf_count=infs, error_map=[float(x) for x in error_map],
             map_shape=[mr, mc])
    if mism:
        for s in range(0, n, CHUNK):
            oc = of[s:s + CHUNK].to(f64)
            rc = rf[s:s + CHUNK].to(f64)
            masks = _masks(oc, rc)
            err = torch.where(masks[4], (oc - rc).abs(), 0.0)
            mis = _mismatched(oc, rc, masks, err, rc.abs(), atol, rtol)
            for i in torch.nonzero(mis).reshape(-1)[:MAX_LISTED - len(c["first_mismatches"])].tolist():
                c["first_mismatches"].append({"index": _unravel(s + i, shape),
                                              "output": _finite_or_none(oc[i]),
                                              "reference": _finite_or_none(rc[i])})
            if len(c["first_mismatches"]) >= MAX_LISTED:
                break
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


def _judge_outputs(outs, refs, tolerances, dtype_names, rule, case, notes=True):
    """Compares each returned tensor with the reference's, the same position in each; fills
    `case["outputs"]` and, with `notes`, notes on counts, promotions and shapes (a rule that
    fails on each of those says them itself)."""
    if len(outs) != len(refs) and notes:
        case["notes"].append("the version returned %d tensor(s), the reference %d" % (len(outs), len(refs)))
    for (name, o), (_, r) in zip(outs, refs):
        om, rm = _meta(o, dtype_names), _meta(r, dtype_names)
        entry = {"name": name, "output": om, "reference": rm}
        if o.numel() != r.numel():
            entry["comparison"] = None
        else:
            if om["shape"] != rm["shape"] and notes:
                case["notes"].append("`%s` has shape %s, the reference's %s: compared element by element"
                                     % (name, tuple(om["shape"]), tuple(rm["shape"])))
            if om["dtype"] != rm["dtype"] and notes:
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


def refill(into, fresh, name):
    """Copies each tensor of `fresh` into the tensor at the same place in `into` (a bench's timed
    buffers): the same pointers, new contents."""
    a, b = flatten(into, name, []), flatten(fresh, name, [])
    if [(n, tuple(x.shape), x.dtype) for n, x in a] != [(n, tuple(x.shape), x.dtype) for n, x in b]:
        raise ValueError("the timed inputs and a fresh draw differ in their tensors")
    for (_, x), (_, f) in zip(a, b):
        x.copy_(f)
    return into


def _mean(refs):
    torch = _torch()
    if not refs:
        return None
    r = refs[0][1]
    if not r.is_floating_point():
        return None
    v = float(torch.nan_to_num(r.detach().double()).mean()) if r.numel() else 0.0
    return v


def forward_seed(seed):
    """Seeds torch's generators for a KernelBench forward the same way in both processes, right
    before it: a Model with dropout (or any draw in its forward) and a ModelNew that draws the
    same way agree, as in KernelBench, which seeds both forwards alike."""
    _torch().manual_seed((int(seed) + 1) & 0x7FFFFFFFFFFFFFFF)


def kernelbench_inputs(prob, seed, device):
    """get_inputs() under `seed`, made on the device."""
    torch = _torch()
    torch.manual_seed(seed)
    with problem_code("get_inputs()", device), torch.device(device):
        return [x.to(device) if hasattr(x, "to") else x for x in prob.get_inputs()]


class ProblemCode(Exception):
    """The problem's own code (its module's import, its inputs' draw, its reference) failed where
    no code of the version's ran: there is no verdict on the version."""


class ProblemNeedsGpu(ProblemCode):
    """The problem's own code asked for CUDA on a machine without a GPU (pmpp_v2's
    generate_input draws on the GPU): the problem runs only on a GPU."""


def _is_oom(exc):
    """The card (or the host) ran out of memory: rung's own rule for that, never the version's
    failure or the problem's."""
    return isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"


def _exc_line(exc, n):
    """`Kind: message`, its first line, at most `n` characters."""
    return ("%s: %s" % (type(exc).__name__, exc)).strip().splitlines()[0][:n]


def gpu_mode_draw(prob, args, seed, device):
    """generate_input(**args) under `seed`, the test's own seed replaced by it where it has one,
    as a function: each call draws again."""
    torch = _torch()
    a = dict(args)
    if "seed" in a:
        a["seed"] = seed

    def draw():
        torch.manual_seed(seed)
        with problem_code("generate_input()", device):
            return prob.generate_input(**a)

    return draw


class problem_code:
    """Around a call into the problem's own code: its exception becomes ProblemCode (or
    ProblemNeedsGpu, on the CPU, where it asked for CUDA), naming `what` failed. With
    `gpu_only` (the problem's check, given the version's output, whose exception may be the
    version's doing) only the second: any other exception is left as it is."""

    def __init__(self, what, device, gpu_only=False):
        self.what, self.device, self.gpu_only = what, device, gpu_only

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or isinstance(exc, ProblemCode) or not isinstance(exc, Exception):
            return False
        if _is_oom(exc):
            return False  # the card the two processes share ran out: rung's own rule for that
        text = _exc_line(exc, 300)
        gpu_words = ("cuda", "nvidia", "accelerator")
        if self.device != "cuda" and any(w in text.lower() for w in gpu_words):
            raise ProblemNeedsGpu("the problem's %s needs a GPU (%s)" % (self.what, text)) from exc
        if self.gpu_only:
            return False
        raise ProblemCode("the problem's %s failed (%s)" % (self.what, text)) from exc


def _kernelbench_rule(outs, refs, tolerances, dtype_names, case):
    """KernelBench's own rule (same shape, allclose at atol = rtol = 1e-2) beside rung's metrics,
    and whether a vacuous answer would pass it too."""
    # KernelBench's rule fails a different count, shape or dtype and names it: no notes besides.
    _judge_outputs(outs, refs, tolerances, dtype_names, (1e-2, 1e-2), case, notes=False)
    fails = []
    if len(outs) != len(refs):
        fails.append("the version returned %d tensor(s), Model %d" % (len(outs), len(refs)))
    for e in case["outputs"]:
        if e["output"]["shape"] != e["reference"]["shape"]:
            fails.append("output shape %s is not Model's %s" % (tuple(e["output"]["shape"]), tuple(e["reference"]["shape"])))
        elif e["output"]["dtype"] != e["reference"]["dtype"]:
            # torch.allclose raises on two dtypes, and KernelBench counts that a failure.
            fails.append("`%s` is %s, Model's %s (torch.allclose does not compare two dtypes)"
                         % (e["name"], e["output"]["dtype"], e["reference"]["dtype"]))
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


# ---------------------------------------------------------------------------------------------
# The sparse probe
#
# A reduction's answer (a loss, a norm, a sum over millions of elements) hardly moves when a few
# of its inputs do, so a version that reads a sample of its inputs, or estimates the answer from
# their distribution, passes an allclose rule on the problem's own draws (KernelBench's
# partial-computation and analytical hacks). On such a problem each test gets one more call:
# the first case's draw with `k` elements of every floating input scaled far out, at positions
# drawn from a seed of rung's. The judge learns first that this moves the reference well past
# the rule; a version that did not read those elements answers as if they had not changed.

PROBE_RATIO = 256  # input elements per output element from which a problem is a reduction
# One element per input first: a version that reads a sample of its inputs then misses it most
# of the time, and answers as if nothing had moved; more where one does not move the answer.
PROBE_SPECS = ({"k": 1, "factor": 1e3}, {"k": 1, "factor": 1e6}, {"k": 64, "factor": 1e3})
PROBE_MARGIN = 0.1  # how far (atol = rtol) the moved reference must be from the unmoved one


def _elements(obj, name, floating=False, skip=()):
    return sum(x.numel() for n, x in flatten(obj, name, [])
               if n not in skip and (not floating or x.is_floating_point()))


def sparse_probe(obj, name, seed, spec, skip=()):
    """Moves `spec["k"]` elements of each floating tensor of `obj` (not those named in `skip`)
    in place, at positions drawn from `seed`: each becomes the tensor's largest magnitude times
    `spec["factor"]`, its sign kept (capped where a square or a product of two could overflow
    the dtype). The same draw and seed give the same bits in every process."""
    torch = _torch()
    for i, (n, x) in enumerate(flatten(obj, name, [])):
        if n in skip or not x.is_floating_point() or x.numel() == 0 or not x.is_contiguous():
            continue
        flat = x.detach().view(-1)
        g = torch.Generator().manual_seed((int(seed) * 1000003 + i) & 0x7FFFFFFFFFFFFFFF)
        pos = torch.randint(0, flat.numel(), (min(spec["k"], flat.numel()),), generator=g).to(flat.device)
        lo, hi = torch.aminmax(flat)  # no copy of the tensor, unlike abs()
        big = max(abs(float(lo)), abs(float(hi)))
        if not big > 0 or big != big or big == float("inf"):
            big = 1.0
        value = min(big * spec["factor"], float(torch.finfo(x.dtype).max) ** 0.25)
        signs = torch.where(flat[pos] < 0, -1.0, 1.0).to(flat.dtype)
        flat[pos] = signs * value
    return obj


def probe_seed(seed):
    """The positions' seed of a probe drawn under `seed` (the draw's own seed is the first
    case's, in the problem's own range)."""
    return (int(seed) * 0x9E3779B1 + 0x7F4A7C15) & 0x7FFFFFFFFFFFFFFF


def _far_apart(a, b):
    """Whether two answers of the reference (lists of (name, tensor)) differ well past any rule:
    some element beyond atol = rtol = PROBE_MARGIN. None when they differ in structure or either
    is not finite: a moved draw that changes what the reference returns, or breaks it, changed
    the problem, and the probe says nothing."""
    torch = _torch()
    if len(a) != len(b):
        return None
    far = False
    for (_, x), (_, y) in zip(a, b):
        if tuple(x.shape) != tuple(y.shape) or x.dtype != y.dtype:
            return None
        xf, yf = x.detach().double().reshape(-1), y.detach().double().reshape(-1)
        if not bool(torch.isfinite(xf).all()) or not bool(torch.isfinite(yf).all()):
            return None
        far = far or not torch.allclose(xf, yf, atol=PROBE_MARGIN, rtol=PROBE_MARGIN)
    return far


def learn_probe(draw, reference, name, skip, seed, device):
    """The probe a problem gets, or None: only for a reduction (PROBE_RATIO input elements per
    output element) whose reference, on a draw with a few elements moved, lands far from its
    answer to the draw as it was. `draw()` draws the inputs, `reference(inputs)` answers them,
    `skip` names the output slots."""
    inputs = draw()
    answer = flatten(reference(inputs), "output", [])
    n_in, n_out = _elements(inputs, name, True, skip), sum(r.numel() for _, r in answer)
    del inputs
    if n_out == 0 or n_in < PROBE_RATIO * n_out:
        return None
    for spec in PROBE_SPECS:
        moved = sparse_probe(draw(), name, probe_seed(seed), spec, skip)
        try:
            far = _far_apart(flatten(reference(moved), "output", []), answer)
        except Exception as exc:
            if _is_oom(exc):
                raise
            return None  # the reference refuses such inputs: no probe
        del moved
        if device == "cuda":
            _torch().cuda.synchronize()
        if far is None:
            return None
        if far:
            return dict(spec, skip=sorted(skip))
    return None


def judge_probe(outs, moved, plain, matches_plain):
    """The verdict on a probe call whose answer `outs` failed the rule against the moved
    reference `moved`: ("ignored", why) when it passes the rule against `plain`, the answer to
    the inputs before they moved (`matches_plain`), and that answer is far from the moved one;
    else ("differs", why), a warning: the version may rely on the inputs' distribution."""
    if matches_plain and _far_apart(moved, plain):
        return "ignored", ("its answer did not move with them: it matches the answer to the inputs as "
                           "drawn, not the reference's to the moved ones, so it does not read every input "
                           "(a sampled or estimated reduction)")
    worst = max([compare(o, r, 0.0, 0.0)[0]["max_rel_err"] for (_, o), (_, r) in zip(outs, moved)
                 if o.numel() == r.numel() and o.numel()] or [0.0])
    return "differs", ("its answer differs from the reference's (max rel err %.3g), though not as one that "
                       "ignored them: it may rely on the inputs' distribution" % worst)


def case_failure(case):
    """(reason code, why) for a judged case that fails, or None: rung's defences first, then the
    format's own rule (or, without one, allclose at 1e-2 on what was returned)."""
    if case.get("harness"):
        return "harness-patched", "the version replaced or changed %s" % ", ".join(case["harness"])
    if case.get("patched"):
        return "timer-patched", "the version replaced %s" % ", ".join(case["patched"])
    if case.get("lazy"):
        return "lazy-output", "the version returned %s" % ", ".join(case["lazy"])
    for i in case["inputs"]:
        if i["changed"]:
            return "input-mutated", "the version changed its input `%s` (%d element(s))" % (i["name"], i["changed"])
    for n, k in case["unwritten"].items():
        if k:
            return "unwritten", "%d element(s) of `%s` were never written" % (k, n)
    own = case.get("own")
    if own is not None:
        return None if own["pass"] else ("problem-check", own["message"] or "the problem's own check failed")
    differs = _returned_differs(*case.get("_tensors", ([], [])))
    return ("mismatch", differs) if differs else None


def _returned_differs(outs, refs):
    """Where the format has no rule: why what was returned is not the reference's at allclose
    1e-2, or None."""
    torch = _torch()
    if len(outs) != len(refs):
        return "the version returned %d tensor(s), the reference %d" % (len(outs), len(refs))
    for (n, o), (_, r) in zip(outs, refs):
        if o.numel() != r.numel() or not torch.allclose(o.float().reshape(-1), r.float().reshape(-1), atol=1e-2, rtol=1e-2):
            return "`%s` differs from the reference's (atol = rtol = 1e-2)" % n
    return None


def recheck_verdict(timed, fresh):
    """A problem bench's re-check: the version called on the timed buffers (set 0) refilled with
    a fresh draw, and on new buffers, each judged as a check case; (reason code, why) when it
    fails, else None. A failure on the timed buffers that new ones do not repeat is a result
    remembered by pointer or shape (a cache, a CUDA graph replayed on the old buffers): its timed
    calls did no real work."""
    failed = case_failure(timed)
    if failed is None:
        return None
    if case_failure(fresh) is None and failed[0] in ("problem-check", "mismatch", "unwritten"):
        return ("memoised", "called on the timed buffers refilled with fresh values, its answer is wrong "
                "(%s), while on new buffers it is right: it remembers results by pointer or shape, so "
                "its timed calls did no real work" % failed[1])
    return failed


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


# Taken before any version runs: one the version replaces later is not the one called.
_frames = sys._current_frames
_STDLIB = os.path.dirname(os.path.abspath(os.__file__)) + os.sep


def threads_now():
    """The threads running Python code now, by ident (sys._current_frames: a thread a version
    takes out of `threading`'s own table is still there), each with where it is: the file and
    line of every frame of its stack, so one that was there before a call can be seen to move."""
    return {ident: _stack_key(f) for ident, f in _frames().items()}


def _stack_key(frame):
    key = []
    while frame is not None:
        key.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return tuple(key)


# Python's own machinery for processes and their pools: threads that wait on pipes for other
# processes (a multiprocessing queue's feeder, a process pool's manager), not a version's work.
_MACHINERY = ("multiprocessing", "concurrent.futures.process")


def _machinery(t):
    target = getattr(t, "_target", None)
    mods = (getattr(target, "__module__", None) or "", type(t).__module__ or "")
    return any(m == k or m.startswith(k + ".") for m in mods for k in _MACHINERY)


def _library(path, packages):
    """Whether a frame's file is a package's (torch, triton, anything installed: `packages` is
    _package_dirs()), not Python's own library nor a version's."""
    return "site-packages" in path or "dist-packages" in path or path.startswith(packages)


def _idle_pool_worker(t):
    """A worker of a concurrent.futures thread pool with nothing to do: a pool stays, idle,
    after the work it was given has ended."""
    try:
        from concurrent.futures import thread as cft
        if getattr(t, "_target", None) is not cft._worker:
            return False
        pool = t._args[0]()
        return pool is None or (pool._work_queue.empty() and pool._idle_semaphore._value >= len(pool._threads))
    except Exception:
        return False


def _woken(frame):
    """Whether a thread waiting in threading.Condition.wait (a queue's get, an event's wait) has
    been notified and not yet run: its waiter is no longer in the condition's list, whether or
    not the system has scheduled it since."""
    import threading
    wait = threading.Condition.wait.__code__
    f = frame
    while f is not None:
        if f.f_code is wait:
            waiter, cond = f.f_locals.get("waiter"), f.f_locals.get("self")
            try:
                return waiter is not None and waiter not in cond._waiters
            except Exception:
                return False
        f = f.f_back
    return False


def late_threads(before, settle=0.002):
    """The threads a version's call left running when it returned and rung synchronised: one it
    started (not in `before`, threads_now's), or one that was there before and is no longer
    where it was (a worker the version started earlier, handed the call's work through a
    queue). Work its time leaves out, which may still change its outputs after rung reads them.
    Each as `name at file:line in function()`, the innermost place in code that is neither
    Python's own library nor a package's (the version's), else where it waits.
    Not flagged: a thread another library runs into Python (a `_DummyThread`: CUPTI's
    callbacks), an idle worker of a thread pool, Python's machinery for other processes, a
    thread whose target has returned (it is ending), and one running only packages' code
    (torch's compile workers). With threads there before the call, they are given `settle`
    seconds to move first."""
    import threading
    out = []
    me = threading.get_ident()
    frames = _frames()
    if settle and any(i in before and i != me for i in frames):
        # A worker the call woke (a queue's put) may not have run yet: let it, once.
        time.sleep(settle)
        frames = _frames()
    packages = _package_dirs()
    for ident, frame in frames.items():
        if ident == me:
            continue
        unmoved = ident in before and before[ident] == _stack_key(frame)
        if unmoved and not _woken(frame):
            continue  # there before the call, and where it was: waiting, as it was
        t = threading._active.get(ident)
        if isinstance(t, threading._DummyThread) or (t is not None and (_idle_pool_worker(t) or _machinery(t))):
            continue
        if t is not None and not hasattr(t, "_target"):
            continue  # Thread.run has returned: only its ending is left
        own = lib = None
        f = frame
        while f is not None:
            path = os.path.abspath(f.f_code.co_filename)
            if _library(path, packages):
                lib = lib or f
            elif not path.startswith(_STDLIB):
                own = f
                break
            f = f.f_back
        if own is None and lib is not None:
            continue
        at = own or frame
        out.append("%s at %s:%d in %s()%s" % (t.name if t is not None else "thread %d" % ident,
                                              os.path.basename(at.f_code.co_filename), at.f_lineno, at.f_code.co_name,
                                              "" if ident not in before else
                                              " (started before the call, and woken by it)" if unmoved else
                                              " (started before the call, and no longer where it waited)"))
    return sorted(out)


class LateWork(Exception):
    """A version's call returned while a thread it started was still running."""


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


def _alike(xs, ys):
    """Two runs of the reference as one: integers bit for bit, floats within 1e-3 (a reference
    whose float sums land in another order each run is still one that never read the poison,
    which turns what reads it into NaN or 3e38)."""
    torch = _torch()
    if len(xs) != len(ys):
        return False
    for (_, a), (_, b) in zip(xs, ys):
        if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
            return False
        if a.is_floating_point():
            if not torch.allclose(a.double(), b.double(), rtol=1e-3, atol=1e-6, equal_nan=True):
                return False
        elif changed(a, b):
            return False
    return True


def learn_model_inout(model, draw, seed, state):
    """The inputs a KernelBench `Model` changes in place (`torch.relu_(x)`): KernelBench hands
    both models the same tensors, so a version that does as its reference does is right."""
    inputs = draw()
    before = clone(inputs)
    forward_seed(seed)
    model(*inputs)
    pr = dict(flatten(before, "inputs", []))
    state["inout"] = {n for n, x in flatten(inputs, "inputs", []) if n in pr and changed(x, pr[n])}


def learn_ref_slots(prob, data, state, device, draw=None):
    """The compile phase's look at the reference: which tensors of `data` ref_kernel writes,
    which of those it also reads or writes only in part (`inout`: run again with the tensor
    poisoned, it ends or answers otherwise), and, given `draw` (generate_input again under the
    same seed), which tensors it draws the same way twice: those need no copy kept while the
    version runs."""
    torch = _torch()
    pristine = clone(data)
    ref_in = clone(data)
    with problem_code("ref_kernel()", device):
        expected = prob.ref_kernel(ref_in)
    if device == "cuda":
        torch.cuda.synchronize()
    state["ref_slots"] = _ref_written(pristine, ref_in, expected)
    after, answer = flatten(ref_in, "data", []), flatten(expected, "output", [])

    def poisoned_run(n):
        """ref_kernel on a copy with tensor `n` poisoned: (the copy's tensors after it, what it
        returned, whether part of `n` still holds the poison), or None where `n` cannot be."""
        trial = clone(pristine)
        target = dict(flatten(trial, "data", [])).get(n)
        if target is None or not poison(target, POISONS[0]):
            return None
        with problem_code("ref_kernel()", device):
            got = prob.ref_kernel(trial)
        if device == "cuda":
            torch.cuda.synchronize()
        return flatten(trial, "data", []), flatten(got, "output", []), unwritten(target, POISONS[0]) > 0

    state["inout"] = set()
    for n in sorted(state["ref_slots"]):
        run = poisoned_run(n)
        # A tensor the reference fully overwrites and never reads ends the same whatever it held.
        if run and (run[2] or not _alike(run[0] + run[1], after + answer)):
            state["inout"].add(n)
    # The last tensor when the reference neither writes nor reads it: the pmpp_v2 buffer a
    # version may fill and return (the `late` slot). One whose content the answer depends on is
    # an input, and a version that writes it changed its input.
    names = [n for n, _ in flatten(pristine, "data", [])]
    run = poisoned_run(names[-1]) if len(names) >= 2 and names[-1] not in state["ref_slots"] else None
    state["reads_last"] = bool(run) and not _alike(run[1], answer)
    del ref_in, expected, after, answer, run
    if draw is not None:
        state["regenerable"] = drawn_alike(pristine, draw(), "data")


# ---------------------------------------------------------------------------------------------
# One case in two processes: the version's (observe_*) and a judge's (judge_*)
#
# The version's process draws its inputs, calls the version and writes down what it saw: the
# tensors it returned (files in the run's data folder, or kept in memory when `dump` is None), a
# digest of every input after the call (and the input itself where it changed), and copies of
# the inputs that the problem does not draw the same way twice. The judge's process, forked from
# a zygote that never ran a version's code, draws the inputs again under the same seed, runs the
# reference and the problem's own check on them, and compares: nothing the version does in its
# process (patching the reference, the check, torch or rung's own functions, writing a forged
# answer) reaches the answer it is judged against or the verdict.


class Redo(Exception):
    """The judge's draw of these inputs differs from a second draw of its own: the problem does
    not draw them the same way twice, so the case is run again with copies of them kept."""

    def __init__(self, names):
        Exception.__init__(self, ", ".join(names))
        self.names = list(names)


_K1 = 0x9E3779B97F4A7C15 - (1 << 64)
_K2 = 0xC2B2AE3D27D4EB4F - (1 << 64)


def digest(t):
    """A digest of a tensor's dtype, shape and bits, on its device a chunk at a time: the same in
    any process for the same bits; any one element changed, or two swapped, changes it. Integer
    sums only, so the order of the device's reduction does not matter."""
    torch = _torch()
    x = t.detach()
    head = "%s%s" % (str(x.dtype).replace("torch.", ""), tuple(int(d) for d in x.shape))
    if x.numel() == 0:
        return head
    b = x.contiguous().reshape(-1).view(torch.uint8)
    n = b.numel()
    whole = n - n % 8
    words = b[:whole].view(torch.int64) if whole else b[:0]
    acc = [0, 0]
    if whole:
        step = min(CHUNK, words.numel())
        pos = torch.arange(step, device=x.device, dtype=torch.int64)
        for s in range(0, words.numel(), step):
            w = words[s:s + step]
            p = pos[:w.numel()] + s
            h = (w ^ (w >> 29)) * _K1
            h = h ^ (h >> 32)
            acc[0] += int((h * (p * 2 + 1)).sum())
            acc[1] += int(((h + p) * _K2 ^ (h >> 17)).sum())
    tail = bytes(int(v) for v in b[whole:].cpu().tolist())
    return "%s:%016x%016x:%s" % (head, acc[0] % (1 << 64), acc[1] % (1 << 64), tail.hex())


def dump(t, path):
    """Writes a tensor's elements (in order, as if contiguous) to `path` through a shared map:
    one copy from the device; returns what `load` needs."""
    torch = _torch()
    x = t.detach()
    meta = {"file": path, "dtype": str(x.dtype).replace("torch.", ""), "shape": [int(d) for d in x.shape],
            "stride": [int(s) for s in x.stride()]}
    n = x.numel() * x.element_size()
    with open(path, "wb") as f:
        f.truncate(n)
    if n:
        m = torch.from_file(path, shared=True, size=n, dtype=torch.uint8)
        m.view(x.dtype).view(x.shape).copy_(x)
        del m
    return meta


def load(meta, device):
    """A tensor `dump` wrote, or the version's process handed over by CUDA IPC (or kept in
    memory: `_t`), as a tensor of this process on `device`, with its strides where they
    describe a dense tensor."""
    torch = _torch()
    if "_t" in meta:
        return meta["_t"]
    raw = _ipc_handle(meta, device) if "ipc" in meta else None
    dtype = getattr(torch, meta["dtype"])
    shape, stride = [int(d) for d in meta["shape"]], [int(s) for s in meta["stride"]]
    n = 1
    for d in shape:
        n *= d
    nbytes = n * torch.empty((), dtype=dtype).element_size()
    span = 1 + sum((d - 1) * s for d, s in zip(shape, stride)) if n else 0
    if not (n and span == n and all(s >= 0 for s in stride)):
        stride = list(torch.empty(shape, dtype=torch.uint8, device="meta").stride())
    try:
        out = torch.empty_strided(shape, stride, dtype=dtype, device=device)
    except torch.cuda.OutOfMemoryError:
        give_back(device)
        out = torch.empty_strided(shape, stride, dtype=dtype, device=device)
    if raw is not None:
        _ipc_copy(raw, int(meta["offset"]), nbytes, out)
    elif nbytes:
        out.copy_(torch.from_file(meta["file"], shared=False, size=nbytes, dtype=torch.uint8).view(dtype).view(shape))
    return out


# CUDA IPC: a tensor on the GPU reaches the judge's process as a handle to a copy of it that the
# version's process keeps (`_IPC["held"]`, each beside a marker file in the run's data folder)
# until the judge has taken its own copy and removed the marker (or rung removed the folder).
# A copy on the device takes milliseconds where a file of a 7.5 GB output took 13 s to write and
# 5 s to read back. Where the handle cannot be made (memory from cuMemCreate, as with torch's
# expandable segments) or the copy would leave less than half the card free, the tensor goes
# through a file as before.
_IPC = {"lib": None, "held": []}


class _IpcHandle(ctypes.Structure):
    """CUipcMemHandle: 64 opaque bytes, passed by value to cuIpcOpenMemHandle."""
    _fields_ = [("reserved", ctypes.c_char * 64)]


def _cuda():
    """libcuda through ctypes, with the signatures of the calls used here."""
    if _IPC["lib"] is None:
        lib = ctypes.CDLL("libcuda.so.1")
        u64, p = ctypes.c_uint64, ctypes.POINTER
        lib.cuMemGetAddressRange_v2.argtypes = [p(u64), p(ctypes.c_size_t), u64]
        lib.cuIpcGetMemHandle.argtypes = [p(_IpcHandle), u64]
        lib.cuIpcOpenMemHandle_v2.argtypes = [p(u64), _IpcHandle, ctypes.c_uint]
        lib.cuIpcCloseMemHandle.argtypes = [u64]
        _IPC["lib"] = lib
    return _IPC["lib"]


def _release_judged():
    """Drops the copies whose marker is gone: the judge has its own copy of each."""
    _IPC["held"] = [(m, c) for m, c in _IPC["held"] if os.path.exists(m)]


def _ipc_export(t, marker):
    """A copy of CUDA tensor `t` made here and kept, and what the judge needs to open it; None
    where that cannot be done (the caller writes a file instead)."""
    torch = _torch()
    x = t.detach()
    _release_judged()
    # The two processes share the card: a copy is kept here only while half of it stays free
    # for the judge's (its inputs, the reference, its copy of this tensor, the comparison's).
    free, total = torch.cuda.mem_get_info(x.device)
    if free - x.numel() * x.element_size() < total // 2:
        return None
    try:
        c = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        c.copy_(x)
    except torch.cuda.OutOfMemoryError:
        return None
    lib = _cuda()
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    handle = _IpcHandle()
    if lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), c.data_ptr()) != 0 \
            or lib.cuIpcGetMemHandle(ctypes.byref(handle), base.value) != 0:
        return None
    # The copy is complete before the judge can see the marker.
    torch.cuda.current_stream(x.device).synchronize()
    open(marker, "wb").close()
    _IPC["held"].append((marker, c))
    return {"file": marker, "ipc": bytes(handle).hex(), "offset": c.data_ptr() - base.value,
            "dtype": str(x.dtype).replace("torch.", ""), "shape": [int(d) for d in x.shape],
            "stride": [int(s) for s in x.stride()]}


def _ipc_handle(meta, device):
    """The 64 bytes of a record's CUDA IPC handle, or an error that says what is wrong with it."""
    if device != "cuda":
        raise ValueError("the version's process handed a tensor over by CUDA IPC to a judge on the CPU")
    try:
        raw = bytes.fromhex(meta["ipc"])
        ok = len(raw) == 64 and int(meta["offset"]) >= 0
    except (TypeError, ValueError, KeyError):
        ok = False
    if not ok:
        raise ValueError("the version's record names a malformed CUDA IPC handle")
    return raw


def _ipc_copy(raw, offset, nbytes, out):
    """Copies `nbytes` at `offset` in the memory the handle `raw` opens into `out`, and closes the
    handle: an extent past that memory, or a handle that does not open, is an error."""
    torch = _torch()
    lib = _cuda()
    ptr = ctypes.c_uint64()
    rc = lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), _IpcHandle.from_buffer_copy(raw), 1)
    if rc != 0:
        raise ValueError("the version's output could not be opened in the judge's process "
                         "(cuIpcOpenMemHandle: CUDA error %d)" % rc)
    try:
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        if lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ptr.value) != 0 \
                or offset + nbytes > base.value + size.value - ptr.value:
            raise ValueError("the version's record names %d bytes past the memory its handle opens" % nbytes)
        if nbytes:

            class Span:
                __cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                            "data": (ptr.value + offset, False), "version": 3}

            src = torch.as_tensor(Span(), device="cuda")
            out.copy_(src.view(out.dtype).view(out.shape))
            torch.cuda.synchronize()
            del src
    finally:
        lib.cuIpcCloseMemHandle(ptr.value)


def give_back(device):
    """The memory torch keeps cached in this process, returned to the device for the other
    process of the check (a KernelBench problem's 7.5 GB tensors are held twice over otherwise)."""
    if device == "cuda":
        _torch().cuda.empty_cache()


def _put(t, dump_dir, name, record):
    """A tensor for the judge: a CUDA IPC handle to a copy kept here (its marker file in
    `dump_dir`), else a file in `dump_dir` (names numbered in `record`), or, with no folder, the
    tensor itself (a judge in this process)."""
    if dump_dir is None:
        return {"_t": t.detach().clone()}
    record["_files"] = record.get("_files", 0) + 1
    path = os.path.join(dump_dir, "%s-%d" % (name, record["_files"]))
    if getattr(t, "is_cuda", False) and t.numel() and os.environ.get("RUNG_NO_IPC") != "1":
        meta = _ipc_export(t, path + ".ipc")
        if meta is not None:
            return meta
    return dump(t, path + ".bin")


def _shape_of(obj, tensors):
    """The structure of what the version returned, its tensors replaced by their index in
    `tensors`: a tensor, a tuple or list of them, a dict, or a plain value."""
    if hasattr(obj, "detach") and hasattr(obj, "dtype"):
        tensors.append(obj)
        return {"tensor": len(tensors) - 1}
    if isinstance(obj, (tuple, list)):
        return {"tuple" if isinstance(obj, tuple) else "list": [_shape_of(x, tensors) for x in obj]}
    if isinstance(obj, dict):
        return {"dict": [[k, _shape_of(v, tensors)] for k, v in obj.items()]}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"value": obj}
    raise TypeError("the version returned a %s, which rung cannot hand to its judge: return tensors "
                    "(or a tuple, list or dict of them)" % type(obj).__name__)


def _rebuild(shape, tensors):
    if "tensor" in shape:
        return tensors[shape["tensor"]]
    if "tuple" in shape:
        return tuple(_rebuild(x, tensors) for x in shape["tuple"])
    if "list" in shape:
        return [_rebuild(x, tensors) for x in shape["list"]]
    if "dict" in shape:
        return {k: _rebuild(v, tensors) for k, v in shape["dict"]}
    return shape.get("value")


def _seen(record, output, dump_dir):
    """Puts what the version returned in `record`: its structure and its tensors."""
    tensors = []
    record["output"] = _shape_of(output, tensors)
    record["tensors"] = [_put(t, dump_dir, "out", record) for t in tensors]


def _inputs_after(record, slots, before, dump_dir):
    """Each input's digest after the call, and the input itself where it changed."""
    for n, x in slots:
        if n not in before:
            continue
        entry = {"name": n, "digest": digest(x)}
        if entry["digest"] != before[n]:
            entry["changed"] = _put(x, dump_dir, "in", record)
        record["slots"].append(entry)


def _observed_call(record, call, sync):
    """The version's call, synchronised and timed into `record`, with what it left behind:
    threads it started that still run, clocks and judge functions it replaced."""
    threads = threads_now()
    t0 = time.perf_counter()
    output = call()
    sync()
    record["seconds"] = time.perf_counter() - t0
    record["late"] = late_threads(threads)
    record["patched"] = patched_timers()
    record["harness"] = patched_harness()
    record["lazy"] = lazy_outputs(output)
    return output


def lazy_outputs(output):
    """The outputs that are not plain tensors (`output[0]: Lazy, a torch.Tensor subclass`): a
    subclass's operations are the version's own, so its work can run when the output is read,
    after the timed call. Only types are looked at: nothing of the subclass's runs here."""
    torch = _torch()
    plain = (torch.Tensor, torch.nn.Parameter)
    # flatten takes anything with `detach` and `dtype` for a tensor: an object that only looks
    # like one is as lazy as a subclass.
    return ["%s: %s, %s" % (n, type(x).__name__,
                            "a torch.Tensor subclass" if isinstance(x, torch.Tensor) else "not a torch.Tensor")
            for n, x in flatten(output, "output", []) if type(x) not in plain]


class LazyOutput(Exception):
    """A timed call returned an output that is not a plain tensor (lazy_outputs)."""


def observe_probe(observe, seed, *args, **kwargs):
    """The sparse probe's call (`observe` with `sparse` among `kwargs`), contained: it moves
    inputs out of the problem's range, where a version may rightly refuse them, so its exception
    is recorded (`probe_raised`) for the judge, not raised."""
    try:
        return observe(*args, **kwargs)
    except Exception as exc:
        if _is_oom(exc):
            raise
        return {"seed": seed, "probe_raised": _exc_line(exc, 240), "seconds": 0.0, "phases": {}, "slots": [],
                "kept": {}, "output_slots": [], "unwritten": {}, "tensors": [], "output": None}


def observe_gpu_mode(prob, version, args, seed, byte, hints, late, device, dump_dir=None, into=None, no_tf32=False,
                     sparse=None):
    """The version's side of one GPU MODE case: generate_input under `seed` (copied into `into`, a
    bench's timed `data`, when given; moved by the sparse probe `sparse` when given), the output
    slots the judge named (`hints`) and those learnt in this process (`late`) poisoned with
    `byte`, custom_kernel once; what it saw goes in the record for judge_gpu_mode."""
    torch = _torch()

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    t = time.perf_counter()
    data = gpu_mode_draw(prob, args, seed, device)()
    if into is not None:
        data = refill(into, data, "data")
    if sparse is not None:
        sparse_probe(data, "data", probe_seed(seed), sparse, sparse.get("skip", ()))
    slots = flatten(data, "data", [])
    outs_known = set(hints.get("output_slots", ())) | late
    # Outputs the reference also reads or writes in part keep what the draw put in them.
    inout = set(hints.get("inout_slots", ()))
    again = set(hints.get("regenerable", ()))
    record = {"seed": seed, "slots": [], "kept": {}, "tf32": device == "cuda" and _tf32_on()}
    # Copies of the inputs a second draw cannot stand for, taken before the version runs.
    for n, x in slots:
        if n not in again and (n not in outs_known or n in inout):
            record["kept"][n] = _put(x, dump_dir, "kept", record)
    before = {n: digest(x) for n, x in slots if n not in outs_known}
    poisoned = {n: poison(x, byte) for n, x in slots if n in outs_known and n not in inout}
    sync()
    record["phases"] = {"inputs": time.perf_counter() - t}
    if no_tf32:
        with _NoTF32():
            output = _observed_call(record, lambda: version.custom_kernel(data), sync)
    else:
        output = _observed_call(record, lambda: version.custom_kernel(data), sync)
    t = time.perf_counter()
    by_storage = {}
    for n, x in slots:
        by_storage.setdefault(_storage(x), []).append(n)
    aliased = set()
    for _, o in flatten(output, "output", []):
        aliased.update(by_storage.get(_storage(o), []))
    last = slots[-1][0] if len(slots) >= 2 else None
    if last in aliased and last not in outs_known and not hints.get("reads_last"):
        late.add(last)
    out_slots = outs_known | late
    record["output_slots"] = [n for n, _ in slots if n in out_slots]
    record["unwritten"] = {n: unwritten(x, byte) for n, x in slots if n in aliased and poisoned.get(n)}
    _inputs_after(record, slots, {n: d for n, d in before.items() if n not in out_slots}, dump_dir)
    _seen(record, output, dump_dir)
    sync()
    record["phases"]["outputs"] = time.perf_counter() - t
    return record


def observe_kernelbench(prob, model_new, seed, device, regenerable, dump_dir=None, into=None, sparse=None, inout=()):
    """The version's side of one KernelBench case: get_inputs() under `seed` made on the device
    (copied into `into` when given; moved by the sparse probe `sparse` when given), ModelNew
    once; the record for judge_kernelbench. The inputs `Model` itself changes (`inout`, an
    in-place op on its argument) are not held against the version when it changes them too."""
    torch = _torch()

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    t = time.perf_counter()
    inputs = kernelbench_inputs(prob, seed, device)
    if into is not None:
        inputs = refill(into, inputs, "inputs")
    if sparse is not None:
        sparse_probe(inputs, "inputs", probe_seed(seed), sparse, sparse.get("skip", ()))
    slots = flatten(inputs, "inputs", [])
    record = {"seed": seed, "slots": [], "kept": {}, "output_slots": [], "unwritten": {},
              "tf32": device == "cuda" and _tf32_on()}
    for n, x in slots:
        if n not in regenerable:
            record["kept"][n] = _put(x, dump_dir, "kept", record)
    before = {n: digest(x) for n, x in slots if n not in inout}
    sync()
    record["phases"] = {"inputs": time.perf_counter() - t}
    forward_seed(seed)
    output = _observed_call(record, lambda: model_new(*inputs), sync)
    t = time.perf_counter()
    _inputs_after(record, slots, before, dump_dir)
    _seen(record, output, dump_dir)
    sync()
    record["phases"]["outputs"] = time.perf_counter() - t
    return record


def _pristine(record, draw, name, device):
    """The inputs as the version got them before its call, drawn again here; the copies the
    version's process kept put back. Each input the version reported checked: changed elements
    counted on its copy, else its digest against this draw's. Raises Redo for inputs this
    process does not draw the same way twice."""
    pristine = draw()
    pr = dict(flatten(pristine, name, []))
    for n, meta in record["kept"].items():
        if n in pr:
            pr[n].copy_(load(meta, device))
    checks, suspects = [], []
    for s in record["slots"]:
        n = s["name"]
        if n not in pr:
            continue
        if "changed" in s:
            checks.append({"name": n, "changed": changed(load(s["changed"], device), pr[n])})
        elif s["digest"] != digest(pr[n]):
            suspects.append(n)
            checks.append({"name": n, "changed": max(1, pr[n].numel()), "drawn": True})
        else:
            checks.append({"name": n, "changed": 0})
    if suspects:
        third = dict(flatten(draw(), name, []))
        redo = [n for n in suspects if n in third and changed(third[n], pr[n]) != 0]
        if redo:
            raise Redo(redo)
    return pristine, pr, checks


def _case_from(record, phases):
    case = {"seed": record["seed"], "seconds": record["seconds"], "phases": phases, "outputs": [],
            "inputs": [], "output_slots": list(record["output_slots"]), "unwritten": dict(record["unwritten"]),
            "notes": []}
    for k in ("patched", "harness", "late", "lazy"):
        if record.get(k):
            case[k] = record[k]
    return case


def _drawn_note(case):
    for c in case["inputs"]:
        if c.pop("drawn", False):
            case["notes"].append(
                "the version's process drew input `%s` differently from a fresh process under the same "
                "seed (does the version change torch's defaults or its random generator when it is "
                "imported?)" % c["name"])


def _returned(record, device):
    tensors = [load(m, device) for m in record["tensors"]]
    return _rebuild(record["output"], tensors)


def judge_gpu_mode(prob, args, records, tolerances, dtype_names, probe, device, state):
    """The judge's side of GPU MODE cases (observe_gpu_mode's records, in order): each drawn
    again, the reference on its own copy, rung's metrics, the problem's check_implementation on
    a pristine copy; with `probe`, that check tried on vacuous answers too. `state` keeps the
    slots ref_kernel writes, for the hints the version's next cases get."""
    torch = _torch()

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    cases = []
    for k, record in enumerate(records):
        draw = gpu_mode_draw(prob, args, record["seed"], device)
        t = time.perf_counter()
        pristine, pr, checks = _pristine(record, draw, "data", device)
        sync()
        phases = {"judge_inputs": time.perf_counter() - t}
        t = time.perf_counter()
        ref_in = clone(pristine)
        with problem_code("ref_kernel()", device):
            expected = prob.ref_kernel(ref_in)
        sync()
        phases["reference"] = time.perf_counter() - t
        written = _ref_written(pristine, ref_in, expected)
        del ref_in
        state["ref_slots"] = set(state.get("ref_slots", ())) | set(written)
        case = _case_from(record, phases)
        outs = set(record["output_slots"]) | set(written)
        case["output_slots"] = [n for n in pr if n in outs]
        case["inputs"] = [c for c in checks if c["name"] not in outs]
        _drawn_note(case)
        t = time.perf_counter()
        output = _returned(record, device)
        returned = flatten(output, "output", [])
        refs = flatten(expected, "output", [])
        if k == 0:
            # Whether this test is a reduction: a later test's sparse probe is learnt from it.
            n_out = sum(r.numel() for _, r in refs)
            state["reduction"] = bool(n_out) and _elements(pristine, "data", True, outs) >= PROBE_RATIO * n_out
        case["_tensors"] = (returned, [(n, r.detach().clone()) for n, r in refs])
        _judge_outputs(returned, refs, tolerances, dtype_names, None, case)
        check = getattr(prob, "check_implementation", None)
        if check is not None:
            with problem_code("check_implementation()", device, gpu_only=True):
                own = own_verdict(check(clone(pristine), output))
            sync()
            if own["pass"] and probe and k == 0:
                # Would the problem's own check pass a vacuous answer too? One constant only
                # means something for outputs of more than one element.
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
            elif not own["pass"] and record.get("tf32") and any(o.dtype == torch.float32 for _, o in returned):
                # rung calls the version again with TF32 off (`no_tf32`), and says so if that passes.
                case["tf32_suspect"] = True
            case["own"] = own
        phases["metrics"] = time.perf_counter() - t
        cases.append(case)
    return cases


def _kernelbench_passes(outs, refs, tolerances, dtype_names):
    """KernelBench's rule (_kernelbench_rule) on two answers, as a yes or no."""
    case = {"notes": [], "outputs": []}
    _kernelbench_rule(outs, refs, tolerances, dtype_names, case)
    return case["own"]["pass"]


def _probe_unjudged(record, spec, why):
    return _probe_case(record, [], {"probe": 0.0}, spec, ("unjudged", why))


def _probe_case(record, checks, phases, spec, found):
    case = _case_from(record, phases)
    case["inputs"] = checks
    case["output_slots"] = list(record["output_slots"])
    kind, message = found if found else ("followed", "")
    case["probe"] = {"outcome": kind, "k": int(spec["k"]), "factor": float(spec["factor"]), "message": message}
    return case


def probe_gpu_mode(prob, args, record, spec, device):
    """The sparse probe's call of a GPU MODE test, judged: its draw moved the same way here, the
    problem's own check (or KernelBench's rule) against the moved reference and, where that
    fails, against the reference to the draw before it moved."""
    plain = gpu_mode_draw(prob, args, record["seed"], device)
    if record.get("probe_raised"):
        return _probe_unjudged(record, spec, "the version raised on that draw (%s)" % record["probe_raised"])
    skip = spec.get("skip", ())
    t = time.perf_counter()
    pristine, pr, checks = _pristine(record, lambda: sparse_probe(plain(), "data", probe_seed(record["seed"]), spec, skip),
                                     "data", device)
    ref_in = clone(pristine)
    try:
        moved = prob.ref_kernel(ref_in)
    except Exception as exc:
        if _is_oom(exc):
            raise
        return _probe_unjudged(record, spec, "the reference raised on that draw (%s)" % _exc_line(exc, 240))
    outs = set(record["output_slots"]) | _ref_written(pristine, ref_in, moved)
    del ref_in
    output = _returned(record, device)
    check = getattr(prob, "check_implementation", None)

    def passes(data, expected):
        if check is None:
            return _returned_differs(flatten(output, "output", []), flatten(expected, "output", [])) is None
        with problem_code("check_implementation()", device, gpu_only=True):
            return own_verdict(check(clone(data), output))["pass"]

    found = None
    if not passes(pristine, moved):
        before = plain()
        with problem_code("ref_kernel()", device):
            answer = prob.ref_kernel(clone(before))
        found = judge_probe(flatten(output, "output", []), flatten(moved, "output", []), flatten(answer, "output", []),
                            passes(before, answer))
    return _probe_case(record, [c for c in checks if c["name"] not in outs], {"probe": time.perf_counter() - t},
                       spec, found)


def probe_kernelbench(prob, make_model, record, spec, tolerances, dtype_names, device):
    """The sparse probe's call of a KernelBench problem, judged with KernelBench's rule."""
    if record.get("probe_raised"):
        return _probe_unjudged(record, spec, "the version raised on that draw (%s)" % record["probe_raised"])
    t = time.perf_counter()
    skip = spec.get("skip", ())
    plain = lambda: kernelbench_inputs(prob, record["seed"], device)  # noqa: E731
    pristine, pr, checks = _pristine(record, lambda: sparse_probe(plain(), "inputs", probe_seed(record["seed"]), spec,
                                                                  skip), "inputs", device)
    with problem_code("Model", device):
        model = make_model()
    forward_seed(record["seed"])
    try:
        moved = flatten(model(*pristine), "output", [])
    except Exception as exc:
        if _is_oom(exc):
            raise
        return _probe_unjudged(record, spec, "the reference raised on that draw (%s)" % _exc_line(exc, 240))
    del pristine, pr
    outs = flatten(_returned(record, device), "output", [])
    found = None
    if not _kernelbench_passes(outs, moved, tolerances, dtype_names):
        with problem_code("Model", device):
            before = plain()
            forward_seed(record["seed"])
            answer = flatten(model(*before), "output", [])
        found = judge_probe(outs, moved, answer, _kernelbench_passes(outs, answer, tolerances, dtype_names))
    return _probe_case(record, checks, {"probe": time.perf_counter() - t}, spec, found)


def judge_kernelbench(prob, make_model, records, tolerances, dtype_names, device):
    """The judge's side of KernelBench cases: get_inputs() drawn again under each case's seed,
    Model (built by `make_model`, with ModelNew's weights) on them, KernelBench's own rule."""
    torch = _torch()

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    cases = []
    for record in records:
        t = time.perf_counter()
        pristine, pr, checks = _pristine(record, lambda s=record["seed"]: kernelbench_inputs(prob, s, device),
                                         "inputs", device)
        sync()
        phases = {"judge_inputs": time.perf_counter() - t}
        case = _case_from(record, phases)
        case["inputs"] = checks
        _drawn_note(case)
        t = time.perf_counter()
        with problem_code("Model", device):
            model = make_model()
            forward_seed(record["seed"])
            expected = model(*pristine)
        # The inputs are not needed past the reference: their memory is, for the outputs.
        del model, pristine, pr
        sync()
        phases["reference"] = time.perf_counter() - t
        t = time.perf_counter()
        outs = flatten(_returned(record, device), "output", [])
        refs = flatten(expected, "output", [])
        case["_tensors"] = (outs, refs)
        _kernelbench_rule(outs, refs, tolerances, dtype_names, case)
        phases["metrics"] = time.perf_counter() - t
        cases.append(case)
    return cases
