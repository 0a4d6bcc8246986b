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
    import torch, cupy
    here = os.path.dirname(os.path.abspath(__file__))
    ptx_mod = cupy.cuda.function.Module()
    ptx_mod.load(open(os.path.join(here, "..", "assets", "kernels", "copy.ptx"), "rb").read())
    read = ptx_mod.get_function("rung_flush")
    discard = ptx_mod.get_function("rung_discard")
    nb = 256 << 20
    buf = cupy.zeros(nb // 4, dtype=cupy.int32)
    sink = cupy.zeros(1, dtype=cupy.int32)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

    def f_read():
        with stream:
            read((sms * 4,), (512,), (buf, cupy.uint64(nb // 16), sink))

    def f_discard():
        with stream:
            discard((sms * 4,), (512,), (buf, cupy.uint64(nb // 128)))

    def f_zero():
        buf.fill(0)

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
