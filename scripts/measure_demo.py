#!/usr/bin/env python3
"""Check and time every version of the embedded demo workspace (assets/demo) on a CUDA GPU.

For each version in assets/demo/versions/ it checks the output against reference.py at every
test size of rung.toml (plus a few extra sizes that reach the long-row paths), then times it at
the benchmark size with triton.testing.do_bench (which flushes L2 between runs) and with CUDA
events (median over many back-to-back runs). It prints a markdown table and writes it, with the
tuning variants, to $OUT (or --out).

Needs python3 with torch, triton and cupy, and nvcc on PATH (else CuPy's NVRTC is used):

    PYTHONUNBUFFERED=1 python3 scripts/measure_demo.py --out "$OUT" 2>&1 | tee "$OUT/measure_demo.log"
"""

import argparse
import importlib.util
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "assets" / "demo"
PEAK_GBS = 4300.0  # device-to-device copy rate measured on this workplace's H200s
ATOL, RTOL = 1e-5, 1e-4
# Extra correctness sizes beyond rung.toml's: rows longer than the register cache of the vector
# version (aligned and misaligned) and longer than the Triton one-pass limit.
EXTRA_SIZES = [{"rows": 3, "cols": 16388}, {"rows": 2, "cols": 12345}, {"rows": 4, "cols": 20000}, {"rows": 5, "cols": 2}]


# Cache-hint experiments on a CUDA version: its streaming loads (__ldcs) and stores (__stcs) are
# rewritten to these helpers, prepended to the source.
HINT_HELPERS = r"""
__device__ __forceinline__ float4 rung_ld_ef(const float4* p) {  // L1 and L2 evict-first, as Triton does
    float4 v;
    asm volatile("{\n\t.reg .b64 pol;\n\tcreatepolicy.fractional.L2::evict_first.b64 pol, 1.0;\n\t"
                 "ld.global.L1::evict_first.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], pol;\n\t}"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}
template <class T> __device__ __forceinline__ T rung_ld_plain(const T* p) { return *p; }
template <class T> __device__ __forceinline__ void rung_st_plain(T* p, T v) { *p = v; }
"""
PATCHES = {
    "plain stores": {"__stcs(": "rung_st_plain("},
    "plain loads+stores": {"__stcs(": "rung_st_plain(", "__ldcs(": "rung_ld_plain("},
    "evict-first loads, plain stores": {"__stcs(": "rung_st_plain(", "__ldcs(": "rung_ld_ef("},
}


def patch_source(src, subs):
    for a, b in subs.items():
        src = src.replace(a, b)
    lines = src.splitlines(keepends=True)
    first_code = next(i for i, l in enumerate(lines) if l.strip() and not l.lstrip().startswith("//"))
    return "".join(lines[:first_code]) + HINT_HELPERS + "".join(lines[first_code:])


def log(*a):
    print(*a, flush=True)


def cdiv(a, b):
    return -(-a // b)


def eval_expr(text, env):
    text = str(text).replace("/", "//")
    return int(eval(text, {"__builtins__": {}}, {"cdiv": cdiv, "min": min, "max": max, **env}))


def parse_header(src):
    out = {}
    for line in src.splitlines():
        m = re.match(r"\s*//\s*rung:(.*)", line)
        if not m:
            continue
        for k, q, v in re.findall(r'(\w+)=(?:"([^"]*)"|(\S+))', m.group(1)):
            out[k] = q if q else v
    return out


def kernel_params(src):
    m = re.search(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(([^)]*)\)', src)
    if not m:
        raise ValueError("no extern \"C\" __global__ kernel found")
    names = [re.findall(r"(\w+)\s*$", p.strip())[0] for p in m.group(2).split(",")]
    return m.group(1), names


class CudaVersion:
    def __init__(self, path, launch_defaults, defines=(), block=None, patch=None, label=None):
        import cupy

        self.path = path
        self.label = label or path.stem
        self.src = path.read_text()
        hdr = {**launch_defaults, **parse_header(self.src)}
        self.grid_expr = hdr.get("grid", "rows")
        self.block_expr = str(block) if block else hdr.get("block", "256")
        self.smem_expr = hdr.get("smem", "0")
        self.kname, self.params = kernel_params(self.src)
        if patch:
            path = Path(tempfile.mkdtemp()) / path.name
            path.write_text(patch_source(self.src, PATCHES[patch]))
        flags = ["-arch=sm_90", "-O3"] + [f"-D{d}" for d in defines]
        nvcc = shutil.which("nvcc")
        if nvcc:
            tmp = Path(tempfile.mkdtemp())
            cubin = tmp / (path.stem + ".cubin")
            r = subprocess.run([nvcc, "-cubin", "-lineinfo", "-Xptxas", "-v", *flags, "-o", str(cubin), str(path)],
                               capture_output=True, text=True)
            info = " ".join(l.strip() for l in r.stderr.splitlines() if "registers" in l or "spill" in l)
            log(f"  nvcc {self.label}: rc={r.returncode} {info}")
            if r.returncode != 0:
                raise RuntimeError(r.stderr)
            self.module = cupy.RawModule(path=str(cubin))
        else:
            self.module = cupy.RawModule(code=self.src, options=tuple(flags[:1] + flags[2:]))
        self.fn = self.module.get_function(self.kname)

    def __call__(self, x, w, y, eps, rows, cols, num_sms):
        import cupy

        env = {"rows": rows, "cols": cols, "num_sms": num_sms}
        grid = eval_expr(self.grid_expr, env)
        block = eval_expr(self.block_expr, env)
        smem = eval_expr(self.smem_expr, env)
        vals = {"x": np.uint64(x.data_ptr()), "w": np.uint64(w.data_ptr()), "y": np.uint64(y.data_ptr()),
                "eps": np.float32(eps), "rows": np.int32(rows), "cols": np.int32(cols)}
        self.fn((grid,), (block,), tuple(vals[p] for p in self.params), shared_mem=smem)


class TritonVersion:
    def __init__(self, path, num_warps=None, label=None):
        self.path = path
        self.label = label or path.stem
        spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
        self.mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.mod)
        self.num_warps = num_warps

    def __call__(self, x, w, y, eps, rows, cols, num_sms):
        if self.num_warps is None:
            self.mod.run(x=x, w=w, y=y, eps=eps, rows=rows, cols=cols)
        else:
            block, one_pass, _ = self.mod.launch_config(cols)
            self.mod.rmsnorm_kernel[(rows,)](x, w, y, float(eps), int(cols), BLOCK=block, ONE_PASS=one_pass,
                                             num_warps=self.num_warps)


class TorchBaseline:
    def __init__(self, label):
        self.label = label
        self.timing = False  # when timing, leave the result in torch's own buffer: no extra copy

    def __call__(self, x, w, y, eps, rows, cols, num_sms):
        import torch

        out = torch.nn.functional.rms_norm(x, (cols,), w, eps)
        if not self.timing:
            y.copy_(out)


def make_inputs(rows, cols, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(rows, cols, device="cuda", dtype=torch.float32, generator=g)
    w = torch.rand(cols, device="cuda", dtype=torch.float32, generator=g) + 0.5  # uniform(0.5, 1.5)
    return x, w


def check(version, sizes, eps, num_sms, reference):
    import torch

    worst_abs, worst_rel, fails = 0.0, 0.0, []
    for i, s in enumerate(sizes):
        rows, cols = s["rows"], s["cols"]
        x, w = make_inputs(rows, cols, seed=100 + i)
        y = torch.full((rows, cols), float("nan"), device="cuda", dtype=torch.float32)
        version(x, w, y, eps, rows, cols, num_sms)
        torch.cuda.synchronize()
        ref = reference(x=x.cpu().numpy(), w=w.cpu().numpy(), eps=eps, rows=rows, cols=cols)
        got = y.cpu().numpy()
        d = np.abs(got.astype(np.float64) - ref)
        big = np.abs(ref) >= 1e-3
        finite = bool(np.isfinite(d).all())
        a = float(d.max()) if finite else math.inf
        r = (float(np.max(d[big] / np.abs(ref[big]))) if big.any() else 0.0) if finite else math.inf  # where |ref| >= 1e-3
        worst_abs, worst_rel = max(worst_abs, a), max(worst_rel, r)
        ok = np.isfinite(got).all() and np.allclose(got, ref, atol=ATOL, rtol=RTOL)
        if not ok:
            fails.append(f"{rows}x{cols} (max abs {a:.3g})")
    return worst_abs, worst_rel, fails


def check_bench(version, x, w, y, eps, rows, cols, num_sms, ref):
    import torch

    y.fill_(float("nan"))
    version(x, w, y, eps, rows, cols, num_sms)
    torch.cuda.synchronize()
    d = (y.double() - ref).abs()
    ok = bool(torch.isfinite(y).all()) and bool((d <= ATOL + RTOL * ref.abs()).all())
    return ok, float(d.max())


def time_it(fn, reps_target_ms=300.0):
    import torch
    import triton

    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    est_ms = (time.perf_counter() - t0) * 1e3
    db_ms = triton.testing.do_bench(fn, warmup=max(25, 3 * est_ms), rep=max(100, 10 * est_ms), return_mode="median")
    reps = int(min(500, max(20, reps_target_ms / max(est_ms, 1e-3))))
    for _ in range(5):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    ev = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return db_ms * 1e3, statistics.median(ev) * 1e3, reps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for the table (default $OUT or .)")
    ap.add_argument("--no-variants", action="store_true", help="skip the tuning variants and baselines")
    ap.add_argument("--repeat", type=int, default=3, help="timing rounds for the versions (default 3)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import cupy
    import torch
    import triton

    spec = tomllib.loads((DEMO / "rung.toml").read_text())
    eps = float(spec["scalars"][0]["value"])
    launch_defaults = {k: str(v) for k, v in spec.get("launch", {}).items()}
    test_sizes = spec["sizes"]["test"]
    bench = spec["sizes"]["bench"][0]
    rspec = importlib.util.spec_from_file_location("reference", DEMO / "reference.py")
    rmod = importlib.util.module_from_spec(rspec)
    rspec.loader.exec_module(rmod)
    reference = rmod.reference

    props = torch.cuda.get_device_properties(0)
    num_sms = props.multi_processor_count
    log(f"device: {props.name}, {num_sms} SMs, {props.total_memory / 2**30:.0f} GiB")
    log(f"torch {torch.__version__}, triton {triton.__version__}, cupy {cupy.__version__}, nvcc {shutil.which('nvcc')}")
    try:
        log(subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1])
        log(subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit",
                            "--format=csv"], capture_output=True, text=True).stdout.strip())
    except Exception as e:  # noqa: BLE001
        log(f"(tool info unavailable: {e})")

    versions = []
    for p in sorted((DEMO / "versions").iterdir()):
        if p.suffix == ".cu":
            versions.append(CudaVersion(p, launch_defaults))
        elif p.suffix == ".py":
            versions.append(TritonVersion(p))
    variants = []
    if not args.no_variants:
        # Tuning variants of the CUDA versions: launch shapes through the macros a file exposes,
        # and cache hints by rewriting its streaming loads and stores (see PATCHES).
        for p in sorted((DEMO / "versions").glob("*.cu")):
            src = p.read_text()
            tries = []
            if "RUNG_VPT" in src:
                tries += [(["RUNG_VPT=8"], 256, None), (["RUNG_VPT=4"], 512, None)]
            if "__stcs(" in src:
                tries += [([], None, name) for name in PATCHES]
            for defines, block, patch in tries:
                tag = " ".join(defines + ([f"block={block}"] if block else []) + ([patch] if patch else []))
                try:
                    variants.append(CudaVersion(p, launch_defaults, defines=defines, block=block, patch=patch,
                                                label=f"{p.stem} [{tag}]"))
                except Exception as e:  # noqa: BLE001
                    log(f"  variant {p.stem} [{tag}] failed to build: {e}")
        for p in sorted((DEMO / "versions").glob("*.py")):
            for nw in (8, 16, 32):
                variants.append(TritonVersion(p, num_warps=nw, label=f"{p.stem} [num_warps={nw}]"))
        variants.append(TorchBaseline("torch.nn.functional.rms_norm (baseline)"))

    rows, cols = bench["rows"], bench["cols"]
    nbytes = 4 * (2 * rows * cols + cols)
    xb, wb = make_inputs(rows, cols, seed=1)
    yb = torch.empty_like(xb)
    refb = (xb.double() * torch.rsqrt(xb.double().pow(2).mean(dim=1, keepdim=True) + eps) * wb.double())

    # Ceiling: a plain device-to-device copy of x into y (reads and writes the same bytes).
    cp_db, cp_ev, _ = time_it(lambda: yb.copy_(xb))
    cp_gbs = 2 * 4 * rows * cols / (cp_db * 1e-6) / 1e9
    log(f"copy ceiling: do_bench {cp_db:.1f} us, events {cp_ev:.1f} us, {cp_gbs:.0f} GB/s")

    results = []
    for v in versions + variants:
        log(f"== {v.label}")
        a, r, fails = check(v, test_sizes + EXTRA_SIZES, eps, num_sms, reference)
        bok, babs = check_bench(v, xb, wb, yb, eps, rows, cols, num_sms, refb)
        log(f"  correctness: max abs {a:.3g}, max rel {r:.3g}, failures {fails or 'none'}; bench size ok={bok} max abs {babs:.3g}")
        results.append(dict(label=v.label, main=v in versions, ok=not fails and bok, abs=max(a, babs), rel=r, v=v, dbs=[], evs=[]))

    # Timing: the versions in round-robin for --repeat rounds (so drift hits all alike), then the
    # variants once. Each round is do_bench's median and the CUDA-event median.
    def timed(x):
        x["v"].timing = True
        db, ev, reps = time_it(lambda: x["v"](xb, wb, yb, eps, rows, cols, num_sms))
        x["dbs"].append(db)
        x["evs"].append(ev)
        log(f"  {x['label']}: do_bench median {db:.1f} us, events median {ev:.1f} us ({reps} reps), "
            f"{nbytes / (db * 1e-6) / 1e9:.0f} GB/s")

    for rnd in range(args.repeat):
        log(f"== timing round {rnd + 1} of {args.repeat}")
        for x in results:
            if x["main"]:
                timed(x)
    log("== timing variants")
    for x in results:
        if not x["main"]:
            timed(x)
    for x in results:
        x["db"], x["ev"] = statistics.median(x["dbs"]), statistics.median(x["evs"])
        x["gbs"] = nbytes / (x["db"] * 1e-6) / 1e9

    def table(rows_):
        lines = ["| version | correct | max abs err | max rel err | do_bench median (us) | events median (us) | GB/s | % of 4.3 TB/s | do_bench per round (us) |",
                 "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for x in rows_:
            lines.append(f"| {x['label']} | {'yes' if x['ok'] else 'NO'} | {x['abs']:.2e} | {x['rel']:.2e} | {x['db']:.1f} | "
                         f"{x['ev']:.1f} | {x['gbs']:.0f} | {100 * x['gbs'] / PEAK_GBS:.1f}% | {' / '.join(f'{d:.1f}' for d in x['dbs'])} |")
        return "\n".join(lines)

    main_rows = [x for x in results if x["main"]]
    fastest = min(main_rows, key=lambda x: x["db"])
    md = [f"# rmsnorm demo on {props.name}", "",
          f"bench size rows={rows} cols={cols}; medians over {args.repeat} rounds for the versions; bytes = 4*(2*rows*cols + cols) = {nbytes}; "
          f"copy ceiling {cp_gbs:.0f} GB/s ({cp_db:.1f} us for the same {2 * 4 * rows * cols} bytes)", "",
          "## Versions", "", table(main_rows), "",
          f"fastest version: {fastest['label']}; last version: {main_rows[-1]['label']}; "
          f"last is fastest: {fastest is main_rows[-1]}", ""]
    if len(results) > len(main_rows):
        md += ["## Tuning variants and baselines", "", table([x for x in results if not x["main"]]), ""]
    text = "\n".join(md)
    log("\n" + text)
    (out / "measure_demo.md").write_text(text + "\n")
    if not all(x["ok"] for x in main_rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
