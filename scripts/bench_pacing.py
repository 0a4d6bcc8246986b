"""Times demo CUDA versions with CUDA events, with L2 flushed (read + discard, as rung does) and
different things between the flush and the timed launch: nothing (rung's bench), an on-GPU wait
of a few microseconds, a host synchronise, a synchronise plus a host sleep. Under Nsight Compute
(`ncu -k rmsnorm`) it shows what ncu times for the same launches.

    python3 bench_pacing.py WORKSPACE REPORT.json N VERSION...
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
    read, discard, _ = bv.flush_kernels()
    spin = cupy.RawKernel(SPIN, "spin")
    clock_khz = cupy.cuda.runtime.getDeviceProperties(0)["clockRate"]
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

    def flush():
        read()
        discard()

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

    conds = [("flush", []), ("flush,spin5us", [wait_gpu(5)]), ("flush,spin20us", [wait_gpu(20)]),
             ("flush,spin100us", [wait_gpu(100)]), ("flush,sync", [sync]), ("flush,sync,sleep50us", [sync_sleep])]
    for v, prep in bv.versions(report):
        if v["id"] not in want:
            continue
        call = bv.make_call(ws, v, prep, sizes)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for cname, pre in conds:
            ts = []
            for i in range(n):
                flush()
                for p in pre:
                    p()
                s.record(); call(); e.record()
                torch.cuda.synchronize()
                ts.append(s.elapsed_time(e) * 1e3)
            ts = ts[min(10, n // 4):]
            print("%s %-22s median %.1f us  min %.1f  max %.1f" % (v["id"], cname, statistics.median(ts), min(ts), max(ts)), flush=True)


main()
