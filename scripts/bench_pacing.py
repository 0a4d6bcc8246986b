"""Times demo CUDA versions with CUDA events, with L2 flushed (read + discard, as rung does) and
different things between the flush and the timed launch: nothing (rung's bench), an on-GPU wait
of a few microseconds, a host synchronise, a synchronise plus a host sleep. With PACING=l2, the
state the kernel starts from instead: parts of rung's flush, a write flush, none, one input set
or three rotating. With PACING=size, rung's flush with buffers of 64 to 512 MB. Under Nsight Compute (`ncu -k regex:rmsnorm --cache-control none`) it shows
what ncu times for the same launches.

    [PACING=l2|size] python3 bench_pacing.py WORKSPACE REPORT.json N VERSION...
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

    read, discard, zero = bv.flush_kernels()
    # Each condition: what runs before the timed launch, and how many input sets rotate.
    if os.environ.get("PACING") == "l2":
        # What L2 and TLB state the kernel starts from: rung's flush (read, then discard),
        # parts of it, a write flush (as triton.testing.do_bench does), none; one input set (as
        # ncu replays) or three rotating (as rung's bench does).
        conds = [("read+discard,1set", [read, discard], 1), ("read+discard,3sets", [read, discard], 3),
                 ("read,1set", [read], 1), ("zero,1set", [zero], 1), ("zero+discard,1set", [zero, discard], 1),
                 ("none,1set", [], 1), ("none,3sets", [], 3)]
    elif os.environ.get("PACING") == "size":
        # rung's flush with buffers of other sizes (H200's L2 is 50 MB).
        conds = []
        for mb in (64, 128, 256, 512):
            r, d, _ = bv.flush_kernels(mb << 20)
            conds.append(("read+discard,%dMB" % mb, [r, d], 1))
    else:
        conds = [(c, [read, discard] + pre, 1) for c, pre in [
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
                    p()
                s.record(); calls[i % k](); e.record()
                torch.cuda.synchronize()
                ts.append(s.elapsed_time(e) * 1e3)
            ts = ts[min(10, n // 4):]
            print("%s %-22s median %.1f us  min %.1f  max %.1f" % (v["id"], cname, statistics.median(ts), min(ts), max(ts)), flush=True)

main()
