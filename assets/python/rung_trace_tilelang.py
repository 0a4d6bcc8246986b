"""rung's tracer for TileLang versions: the sections inside a kernel timed as rung_trace.cuh times
a CUDA version's, with the same 32-byte records in the same buffer (one part per SM, each with
its own counter), so `rung trace` decodes them as it decodes every other version's.

    import rung_trace_tilelang as rt

    LOAD = rt.section("load")        # module level: the name's tag, a Python int
    DONE = rt.section("done")

    @T.prim_func
    def main(...):
        with T.Kernel(..., prelude=rt.prelude()) as bx:
            rt.begin(LOAD)
            for i in T.Parallel(...):
                ...
            rt.end(LOAD)
            rt.mark(DONE)

The kernel's `prelude` carries the record's device function (pass your own prelude through it:
`prelude=rt.prelude(mine)`), and each marker is a call of it at kernel scope, which every thread
makes; lane 0 of each warp writes. Everything is nothing unless rung traces the version:
`prelude()` is the prelude given and the markers add no statement, so the checked and benched
kernel is the one written. `rung trace` runs the version in a process of its own and, before it
is imported, gives this module the buffer (`arm`); the device function is then rung_trace_ptx's
record PTX as inline assembly, the buffer's addresses constants in it (TileLang's compile cache
keys on the source, so a traced kernel is never served for an untraced one).

A section is as honest as the code between its markers stays in place: mark straight-line
phases or whole loops, not pieces of a pipelined loop's body.
"""

import re

import rung_trace_ptx

# The traced run's buffer (device addresses), its parts and their size: `arm` sets them before
# the version is imported; RECORDS 0 everywhere else, and then the markers add nothing.
RECORDS = 0
COUNTS = 0
REGIONS = 1
PER_REGION = 0

# The device function's name, as the markers call it.
FUNCTION = "rung_trace_record"


def section(name):
    """A section's (or a mark's) name as the tag the markers take; rung finds the names in the
    version's source by this call."""
    return rung_trace_ptx.tag(name)


def prelude(other=None):
    """What `T.Kernel(..., prelude=)` takes: `other` (your own prelude, or None) and, when rung
    traces the version, the record's device function before it."""
    if RECORDS == 0:
        return other
    # rung_trace_ptx's operands ($N) as CUDA's (%N), its registers' % escaped.
    asm = re.sub(r"\$(\d)", r"%\1", rung_trace_ptx.RECORD_ASM.replace("%", "%%"))
    text = "\n".join('        "%s\\n"' % line for line in asm.split("\n"))
    record = """#ifndef RUNG_TRACE_RECORD_DEFINED
#define RUNG_TRACE_RECORD_DEFINED
extern "C" __device__ __forceinline__ int %s(unsigned int tag, unsigned int kind) {
    int done;
    asm volatile(
%s
        : "=r"(done)
        : "r"(tag), "r"(kind), "l"(%dull), "l"(%dull), "r"(%du), "l"(%dull)
        : "memory");
    return done;
}
#endif
""" % (FUNCTION, text, RECORDS, COUNTS, REGIONS, PER_REGION)
    return record + (other or "")


def _record(tag, kind):
    """One record's call at this point of the kernel being built; nothing when rung is not
    tracing."""
    if RECORDS == 0:
        return None
    import tilelang.language as T
    T.evaluate(T.call_extern("int32", FUNCTION, tag, kind))
    return None


def begin(tag):
    """The start of the section `tag` (a `section(name)`)."""
    return _record(tag, 0)


def end(tag):
    """The end of the section `tag`."""
    return _record(tag, 1)


def mark(tag):
    """A point in time named `tag`."""
    return _record(tag, 2)


def arm(req):
    """A traced call's buffer on the GPU, for `req` (the protocol's TraceRequest), its addresses
    given to the markers. Called before the version is imported, so its kernels compile traced.
    Returns rung_trace_ptx.buffer's `collect`."""
    global RECORDS, COUNTS, REGIONS, PER_REGION
    RECORDS, COUNTS, REGIONS, PER_REGION, collect = rung_trace_ptx.buffer(req)
    return collect
