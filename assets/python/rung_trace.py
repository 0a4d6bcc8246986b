"""rung's tracer for Triton versions: the sections inside a kernel timed as rung_trace.cuh times
a CUDA version's, with the same 32-byte records in the same buffer (one part per SM, each with
its own counter), so `rung trace` decodes both the same way.

    import rung_trace as rt

    LOAD = rt.section("load")        # module level: a name as a constexpr tag
    DONE = rt.section("done")

    @triton.jit
    def kernel(...):
        rt.begin(LOAD)
        ...
        rt.end(LOAD)
        rt.mark(DONE)

rung puts this module beside the version whenever it runs or compiles one. Every marker
compiles to nothing unless rung traces the version: `rung trace` runs it in a process of its
own, and before the version is imported gives this module the buffer (`arm`); each marker is
then a few instructions of inline PTX, in which lane 0 of every warp reads `%globaltimer` and
`%smid`, takes a slot in its SM's part with one atomic add, and stores the record. The kernel's
arguments do not change, and the version that is checked and benched is the version as written.

A section is as honest as the code between its markers stays in place: Triton's compiler
pipelines loops (`tl.range` with stages) and moves independent instructions, so mark straight-
line phases or whole loops, not pieces of a pipelined loop's body.
"""

import triton
import triton.language as tl

import rung_trace_ptx

# The traced run's buffer (device addresses), its parts and their size: `arm` sets them before
# the version is imported; 0 everywhere else, and then the markers compile to nothing.
RECORDS = tl.constexpr(0)
COUNTS = tl.constexpr(0)
REGIONS = tl.constexpr(1)
PER_REGION = tl.constexpr(0)

# The record's inline PTX (rung_trace_ptx.RECORD_ASM: operands $0 a dummy result, $1 tag, $2
# kind, $3 records, $4 counts, $5 regions, $6 per region).
_RECORD_ASM = tl.constexpr(rung_trace_ptx.RECORD_ASM)


def section(name):
    """A section's (or a mark's) name as the constexpr the markers take; rung finds the names
    in the version's source by this call."""
    return tl.constexpr(rung_trace_ptx.tag(name))


@triton.jit
def _record(tag: tl.constexpr, kind: tl.constexpr):
    if RECORDS != 0:
        tl.inline_asm_elementwise(
            _RECORD_ASM, "=r,r,r,l,l,r,l",
            [tl.full([], tag, tl.uint32), tl.full([], kind, tl.uint32), tl.full([], RECORDS, tl.uint64),
             tl.full([], COUNTS, tl.uint64), tl.full([], REGIONS, tl.uint32), tl.full([], PER_REGION, tl.uint64)],
            dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def begin(tag: tl.constexpr):
    """The start of the section `tag` (a `section(name)`)."""
    _record(tag, 0)


@triton.jit
def end(tag: tl.constexpr):
    """The end of the section `tag`."""
    _record(tag, 1)


@triton.jit
def mark(tag: tl.constexpr):
    """A point in time named `tag`."""
    _record(tag, 2)


def arm(req):
    """A traced call's buffer on the GPU, for `req` (the protocol's TraceRequest), its addresses
    given to the markers. Called before the version is imported, so its kernels compile traced.
    Returns rung_trace_ptx.buffer's `collect`."""
    records, counts, regions, per, collect = rung_trace_ptx.buffer(req)
    g = globals()
    g["RECORDS"], g["COUNTS"] = tl.constexpr(records), tl.constexpr(counts)
    g["REGIONS"], g["PER_REGION"] = tl.constexpr(regions), tl.constexpr(per)
    return collect
