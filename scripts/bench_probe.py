"""Times one demo CUDA version with CUDA events under different L2 / input / pacing conditions,
to see which one makes rung's bench differ from Nsight Compute's --cache-control all.

    python3 bench_probe.py WORKSPACE REPORT.json VERSION...
"""
import json, os, sys, time, statistics
sys.path.insert(0, os.path.dirname(__file__))
import bench_validate as bv


def main():
    ws, report_path = sys.argv[1], sys.argv[2]
    want = sys.argv[3:]
    report = json.load(open(report_path))
    sizes = bv.bench_size(ws)
    import torch
    f_read, f_discard, f_zero = bv.flush_kernels()

    conds = {
        "read+discard": [f_read, f_discard],
        "read": [f_read],
        "zero-write": [f_zero],
        "none": [],
    }
    for v, prep in bv.versions(report):
        if v["id"] not in want:
            continue
        calls = [bv.make_call(ws, v, prep, sizes) for _ in range(3)]
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for cname, pre in conds.items():
            for rot in (1, 3):
                for gap in (0.0, 0.002):
                    ts = []
                    for i in range(60):
                        c = calls[i % rot]
                        for p in pre:
                            p()
                        if gap:
                            torch.cuda.synchronize()
                            time.sleep(gap)
                        s.record(); c(); e.record()
                        torch.cuda.synchronize()
                        ts.append(s.elapsed_time(e) * 1e3)
                    ts = ts[10:]
                    print("%s %-13s sets=%d gap=%.3f  median %.1f us  min %.1f" % (v["id"], cname, rot, gap, statistics.median(ts), min(ts)), flush=True)


main()
