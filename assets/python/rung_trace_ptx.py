"""The parts rung's Python tracers share (rung_trace.py for Triton, rung_trace_cute.py for the
CuTe DSL): the inline PTX that writes one record, in rung_trace.cuh's layout, the tags, and the
traced call's buffer on the GPU. No DSL is imported here."""

# One record, laid out as rung_trace.cuh's RungTraceRecord: %globaltimer (u64), the tag, the
# kind (0 begin, 1 end, 2 mark), the SM, the linear block index, the warp in the block, a pad.
# Operands: $0 a dummy result, $1 tag, $2 kind, $3 records, $4 counts, $5 regions, $6 per region.
RECORD_ASM = """{
    .reg .pred %rt_lead, %rt_room;
    .reg .b32 %rt_lane, %rt_sm, %rt_part, %rt_tid, %rt_warp, %rt_blk, %rt_b, %rt_n, %rt_zero;
    .reg .b64 %rt_time, %rt_i, %rt_count, %rt_slot;
    mov.u32 %rt_lane, %laneid;
    setp.eq.u32 %rt_lead, %rt_lane, 0;
    mov.u64 %rt_time, %globaltimer;
    mov.u32 %rt_sm, %smid;
    rem.u32 %rt_part, %rt_sm, $5;
    mul.wide.u32 %rt_count, %rt_part, 8;
    add.u64 %rt_count, %rt_count, $4;
    mov.u64 %rt_i, 0;
    @%rt_lead atom.global.add.u64 %rt_i, [%rt_count], 1;
    setp.lt.and.u64 %rt_room, %rt_i, $6, %rt_lead;
    cvt.u64.u32 %rt_slot, %rt_part;
    mul.lo.u64 %rt_slot, %rt_slot, $6;
    add.u64 %rt_slot, %rt_slot, %rt_i;
    shl.b64 %rt_slot, %rt_slot, 5;
    add.u64 %rt_slot, %rt_slot, $3;
    mov.u32 %rt_tid, %tid.z;
    mov.u32 %rt_n, %ntid.y;
    mov.u32 %rt_b, %tid.y;
    mad.lo.u32 %rt_tid, %rt_tid, %rt_n, %rt_b;
    mov.u32 %rt_n, %ntid.x;
    mov.u32 %rt_b, %tid.x;
    mad.lo.u32 %rt_tid, %rt_tid, %rt_n, %rt_b;
    shr.u32 %rt_warp, %rt_tid, 5;
    mov.u32 %rt_blk, %ctaid.z;
    mov.u32 %rt_n, %nctaid.y;
    mov.u32 %rt_b, %ctaid.y;
    mad.lo.u32 %rt_blk, %rt_blk, %rt_n, %rt_b;
    mov.u32 %rt_n, %nctaid.x;
    mov.u32 %rt_b, %ctaid.x;
    mad.lo.u32 %rt_blk, %rt_blk, %rt_n, %rt_b;
    mov.u32 %rt_zero, 0;
    @%rt_room st.global.u64 [%rt_slot], %rt_time;
    @%rt_room st.global.v2.u32 [%rt_slot+8], {$1, $2};
    @%rt_room st.global.v4.u32 [%rt_slot+16], {%rt_sm, %rt_blk, %rt_warp, %rt_zero};
    mov.u32 $0, 0;
}"""

# Bytes of one record.
RECORD_BYTES = 32


def tag(name):
    """FNV-1a, 32 bits, of a section's name: rung_trace.cuh's rung_trace_hash, and rung's."""
    h = 2166136261
    for b in name.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def parts(capacity, regions):
    """The buffer's parts and their size for `capacity` records: the worker's trace_parts."""
    regions = max(1, int(regions))
    per = -(-int(capacity) // regions)
    return regions, max(1, min(per, 2**32 - 1))


def kept(counts, per):
    """What a traced launch's parts hold: (part, records kept) for each part that has any, the
    records asked for in all, and the room that would have held them all (the fullest part's
    count times the parts): the worker's trace_kept."""
    held = [(i, min(c, per)) for i, c in enumerate(counts) if min(c, per) > 0]
    return held, sum(counts), (max(counts) if counts else 0) * len(counts)


def buffer(req):
    """A traced call's buffer on the GPU for `req` (the protocol's TraceRequest: capacity, out,
    regions): (records address, counts address, parts, records per part, collect), where
    `collect()`, after the call, writes the records kept to `req["out"]`, part after part, and
    answers `trace_requested` and `trace_needed`."""
    import torch
    regions, per = parts(req["capacity"], req.get("regions") or 1)
    records = torch.empty(regions * per * RECORD_BYTES, dtype=torch.uint8, device="cuda")
    counts = torch.zeros(regions, dtype=torch.int64, device="cuda")

    def collect():
        torch.cuda.synchronize()
        held, requested, needed = kept([int(c) for c in counts.cpu().tolist()], per)
        with open(req["out"], "wb") as f:
            for part, n in held:
                start = part * per * RECORD_BYTES
                f.write(records[start:start + n * RECORD_BYTES].cpu().numpy().tobytes())
        return {"trace_requested": requested, "trace_needed": needed}

    return records.data_ptr(), counts.data_ptr(), regions, per, collect
