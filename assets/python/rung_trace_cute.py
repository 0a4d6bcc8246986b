"""rung's tracer for CuTe DSL versions: the sections inside a kernel timed as rung_trace.cuh times
a CUDA version's, with the same 32-byte records in the same buffer (one part per SM, each with
its own counter), so `rung trace` decodes all three the same way.

    import rung_trace_cute as rt

    LOAD = rt.section("load")        # module level: the name's tag, a Python int
    DONE = rt.section("done")

    @cute.kernel
    def kernel(...):
        rt.begin(LOAD)
        ...
        rt.end(LOAD)
        rt.mark(DONE)

rung puts this module beside the version whenever it runs or compiles one. Every marker
compiles to nothing unless rung traces the version: `rung trace` runs it in a process of its
own and, before the version is imported, gives this module the buffer (`arm`); each marker is
then rung_trace_ptx's inline PTX (an `llvm.inline_asm` with side effects, which the compiler
neither drops nor merges), in which lane 0 of every warp reads `%globaltimer` and `%smid`, takes
a slot in its SM's part with one atomic add, and stores the record. The kernel's arguments do
not change, and the version checked and benched is the version as written. The DSL hashes the
traced IR (the buffer's addresses are constants in it) for its compile cache, so a traced kernel
is never served where an untraced one is asked for, nor the reverse.

A section is as honest as the code between its markers stays in place: mark straight-line
phases or whole loops, not pieces of a software-pipelined loop's body.
"""

import rung_trace_ptx

# The traced run's buffer (device addresses), its parts and their size: `arm` sets them before
# the version is imported; RECORDS 0 everywhere else, and then the markers emit nothing.
RECORDS = 0
COUNTS = 0
REGIONS = 1
PER_REGION = 0


def section(name):
    """A section's (or a mark's) name as the tag the markers take; rung finds the names in the
    version's source by this call."""
    return rung_trace_ptx.tag(name)


def _record(tag, kind):
    """One record's inline PTX at this point of the kernel being traced by the DSL; nothing
    when rung is not tracing."""
    if RECORDS == 0:
        return
    from cutlass import Int32, Int64
    from cutlass._mlir.dialects import llvm

    def i32(x):
        return Int32(x - (1 << 32) if x >= 1 << 31 else x).ir_value()

    llvm.inline_asm(
        Int32.mlir_type,
        [i32(tag), i32(kind), Int64(RECORDS).ir_value(), Int64(COUNTS).ir_value(), i32(REGIONS),
         Int64(PER_REGION).ir_value()],
        rung_trace_ptx.RECORD_ASM,
        "=r,r,r,l,l,r,l",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )


def begin(tag):
    """The start of the section `tag` (a `section(name)`)."""
    _record(tag, 0)


def end(tag):
    """The end of the section `tag`."""
    _record(tag, 1)


def mark(tag):
    """A point in time named `tag`."""
    _record(tag, 2)


def arm(req):
    """A traced call's buffer on the GPU, for `req` (the protocol's TraceRequest), its addresses
    given to the markers. Called before the version is imported, so its kernels compile traced.
    Returns rung_trace_ptx.buffer's `collect`."""
    global RECORDS, COUNTS, REGIONS, PER_REGION
    RECORDS, COUNTS, REGIONS, PER_REGION, collect = rung_trace_ptx.buffer(req)
    return collect
