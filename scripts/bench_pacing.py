"""Times demo versions with CUDA events, with L2 flushed (two reads and a discard, as rung does) and
different things between the flush and the timed launch: nothing (rung's bench), an on-GPU wait
of a few microseconds, a host synchronise, a synchronise plus a host sleep. With PACING=l2, the
state the kernel starts from instead: parts of rung's flush, a write flush, none, one input set
or three rotating. With PACING=size, rung's flush with buffers of 64 to 512 MB. With PACING=tlb,
whether the flush's cost is address translation or L2 state: the call's own pages touched after
the flush, a pause. With PACING=flush, the flush read at normal
priority or evict-first, with and without the discard. Under Nsight Compute (`ncu -k regex:rmsnorm
--cache-control none`) it shows what ncu times for the same launches.

    [PACING=l2|size|tlb|flush] python3 bench_pacing.py WORKSPACE REPORT.json N VERSION...
"""
import os, sys, time, statistics
sys.path.insert(0, os.path.dirname(__file__))
import bench_validate as bv
import json

SPIN = r'''
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}
'''

TOUCH = r'''
extern "C" __global__ void touch(const char* p, unsigned long long n, unsigned long long stride, int* sink) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n && *(const volatile int*)(p + i * stride) == 0x7fffffff) *sink = 1;
}
'''

def main():
    ws, report_path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    want = sys.argv[4:]
    report = json.load(open(report_path))
    sizes = bv.bench_size(ws)
    import torch, cupy
    spin = cupy.RawKernel(SPIN, "spin")
    clock_khz = cupy.cuda.runtime.getDeviceProperties(0)["clockRate"]
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

    def wait_gpu(us):
        def f():
            with stream:
                spin((1,), (1,), (cupy.int64(int(us * clock_khz / 1e3)),))
        return f

    def sync():
        torch.cuda.synchronize()

    def sync_sleep():
        torch.cuda.synchronize()
        time.sleep(50e-6)

    read, read_ef, discard, zero = bv.flush_kernels()
    flush = [read, read_ef, discard]  # rung's flush
    touch_k = cupy.RawKernel(TOUCH, "touch")
    sink = cupy.zeros(1, dtype=cupy.int32)

    def touch(stride):
        # One 4-byte load every `stride` bytes of the call's buffers: warms the address
        # translation for them while bringing almost nothing into L2.
        def f(call):
            with stream:
                for t in call.buffers:
                    nb = t.numel() * t.element_size()
                    n = (nb + stride - 1) // stride
                    touch_k(((n + 255) // 256,), (256,), (cupy.uint64(t.data_ptr()), cupy.uint64(n), cupy.uint64(stride), sink))
        f.per_call = True
        return f

    # Each condition: what runs before the timed launch, and how many input sets rotate.
    if os.environ.get("PACING") == "flush":
        # The flush read's cache policy: normal priority (`.cg`), evict-first (`.cs`), with and
        # without the discard, and both in turn (cg+cs+discard is rung's flush).
        conds = [("cg+discard", [read, discard], 1), ("cs+discard", [read_ef, discard], 1), ("cs", [read_ef], 1),
                 ("cg+cs+discard", flush, 1), ("cs+cg+discard", [read_ef, read, discard], 1), ("none", [], 1)]
    elif os.environ.get("PACING") == "tlb":
        # Whether what the flush costs is address translation (touch the call's own pages after
        # the flush) or L2 state (a pause after the flush).
        conds = [("flush", flush, 1), ("flush+touch2M", flush + [touch(2 << 20)], 1),
                 ("flush+touch64K", flush + [touch(64 << 10)], 1), ("touch2M", [touch(2 << 20)], 1),
                 ("flush,spin20us", flush + [wait_gpu(20)], 1), ("flush+touch2M,3sets", flush + [touch(2 << 20)], 3),
                 ("none", [], 1)]
    elif os.environ.get("PACING") == "l2":
        # What L2 state the kernel starts from: rung's flush, part of it, a write flush (as
        # triton.testing.do_bench does), none; one input set (as ncu replays) or three rotating
        # (as rung's bench does).
        conds = [("flush,1set", flush, 1), ("flush,3sets", flush, 3), ("read,1set", [read], 1),
                 ("zero,1set", [zero], 1), ("zero+discard,1set", [zero, discard], 1),
                 ("none,1set", [], 1), ("none,3sets", [], 3)]
    elif os.environ.get("PACING") == "size":
        # rung's flush with buffers of other sizes (H200's L2 is 50 MB).
        conds = []
        for mb in (64, 128, 256, 512):
            r, ef, d, _ = bv.flush_kernels(mb << 20)
            conds.append(("flush,%dMB" % mb, [r, ef, d], 1))
    else:
        conds = [(c, flush + pre, 1) for c, pre in [
            ("flush", []), ("flush,spin5us", [wait_gpu(5)]), ("flush,spin20us", [wait_gpu(20)]),
            ("flush,spin100us", [wait_gpu(100)]), ("flush,sync", [sync]), ("flush,sync,sleep50us", [sync_sleep])]]
    for v, prep in bv.versions(report):
        if v["id"] not in want:
            continue
        calls = [bv.make_call(ws, v, prep, sizes) for _ in range(max(k for _, _, k in conds))]
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for cname, pre, k in conds:
            ts = []
            for i in range(n):
                for p in pre:
                    p(calls[i % k]) if getattr(p, "per_call", False) else p()
                s.record(); calls[i % k](); e.record()
                torch.cuda.synchronize()
                ts.append(s.elapsed_time(e) * 1e3)
            ts = ts[min(10, n // 4):]
            print("%s %-22s median %.1f us  min %.1f  max %.1f" % (v["id"], cname, statistics.median(ts), min(ts), max(ts)), flush=True)

main()
