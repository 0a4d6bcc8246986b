// rung_trace.cuh: time the sections inside a kernel. rung puts this file on every CUDA build's
// include path; a version includes it and marks its sections:
//
//     #include <rung_trace.cuh>
//     __global__ void rmsnorm(...) {
//         RUNG_TRACE_BEGIN(load);  ... RUNG_TRACE_END(load);
//         RUNG_TRACE_BEGIN(reduce); ... RUNG_TRACE_END(reduce);
//         RUNG_TRACE_MARK(done);
//     }
//
// Every macro compiles to nothing unless rung builds the traced variant (-DRUNG_TRACE), so the
// version that is checked and benched is the version as written. In the traced variant one
// leader lane per warp (or thread 0 of each block, see below) writes a record
// at each marker: the %globaltimer nanosecond clock, the section's name as a 32-bit hash (FNV-1a
// of the name, computed at compile time; rung hashes the names it finds in the source the same
// way), what happened (begin, end, mark), the SM, the block and the warp. The buffer is rung's:
// it allocates it and writes its address into the `rung_trace` symbol before the traced launch,
// so the kernel's signature does not change. The buffer has one part per SM, each with its own
// counter, so leaders on different SMs never add to the same address (one counter for the whole
// kernel serialised every leader's record: a vector add ran 77x its untraced time). A full part
// is counted, never written past. Which leader writes: rung builds with -DRUNG_TRACE_LEADER_WARP
// or -DRUNG_TRACE_LEADER_BLOCK (`rung trace --leader`); with neither, a source's own
// `#define RUNG_TRACE_PER_BLOCK` before the include asks for block leaders. Each record says which
// wrote it, and rung reports what the records say.
//
// A .ptx version gets the same through comment lines in its kernel, `// rung_trace begin NAME`,
// `// rung_trace end NAME` and `// rung_trace mark NAME`: its own build sees comments, and
// `rung trace` builds a variant in which each is replaced by the record's PTX (a scoped block of
// its own registers: the leader test, `%globaltimer`, `%smid`, the part `%smid % regions`, one
// `atom.global.add.u64` on that part's counter, and, when the index is below `per_region`, the
// 32-byte record at `records[part * per_region + index]`, all read from this buffer, which the
// variant declares as `.global .align 8 .b8 rung_trace[32];`). `rung trace` writes the variant
// to the version's dumps for reading (core/trace.rs `ptx_record` is the sequence).
#pragma once

#include <stdint.h>

// One record: 32 bytes.
struct RungTraceRecord {
    uint64_t time_ns;  // %globaltimer
    uint32_t tag;      // FNV-1a of the section's name
    uint32_t kind;     // 0 begin, 1 end, 2 mark
    uint32_t sm;       // %smid
    uint32_t block;    // linear block index
    uint32_t warp;     // warp within the block (0 for block leaders)
    uint32_t leader;   // 0: lane 0 of a warp wrote it; 1: thread 0 of a block
};

// The buffer rung hands the traced kernel: `regions` parts of `per_region` records each (a
// record goes to the part of the SM it was written on) and, for each part, how many records were
// asked for (past `per_region`, counted and dropped). 32 bytes; `layout` is 2.
struct RungTraceBuffer {
    RungTraceRecord* records;
    unsigned long long* counts;
    uint32_t regions;
    uint32_t per_region;
    uint32_t layout;
    uint32_t pad;
};

// FNV-1a, 32 bits, of a name at compile time.
__host__ __device__ constexpr uint32_t rung_trace_hash(const char* s, uint32_t h = 2166136261u) {
    return *s ? rung_trace_hash(s + 1, (h ^ static_cast<uint8_t>(*s)) * 16777619u) : h;
}

#ifdef RUNG_TRACE

#if defined(RUNG_TRACE_LEADER_WARP)
#define RUNG_TRACE_BLOCK_LEADERS_ 0
#elif defined(RUNG_TRACE_LEADER_BLOCK) || defined(RUNG_TRACE_PER_BLOCK)
#define RUNG_TRACE_BLOCK_LEADERS_ 1
#else
#define RUNG_TRACE_BLOCK_LEADERS_ 0
#endif

__device__ RungTraceBuffer rung_trace;

__device__ __forceinline__ void rung_trace_record(uint32_t tag, uint32_t kind) {
    const uint32_t tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
#if RUNG_TRACE_BLOCK_LEADERS_
    if (tid != 0) return;
    const uint32_t warp = 0;
#else
    if ((tid & 31u) != 0) return;
    const uint32_t warp = tid >> 5;
#endif
    uint64_t t;
    uint32_t sm;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    if (rung_trace.counts == nullptr || rung_trace.regions == 0u) return;
    const uint32_t part = sm % rung_trace.regions;
    const unsigned long long i = atomicAdd(&rung_trace.counts[part], 1ull);
    if (rung_trace.records == nullptr || i >= rung_trace.per_region) return;
    const uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    rung_trace.records[static_cast<unsigned long long>(part) * rung_trace.per_region + i] =
        RungTraceRecord{t, tag, kind, sm, block, warp, RUNG_TRACE_BLOCK_LEADERS_};
}

#define RUNG_TRACE_BEGIN(name) rung_trace_record(rung_trace_hash(#name), 0u)
#define RUNG_TRACE_END(name) rung_trace_record(rung_trace_hash(#name), 1u)
#define RUNG_TRACE_MARK(name) rung_trace_record(rung_trace_hash(#name), 2u)

#else

#define RUNG_TRACE_BEGIN(name) ((void)0)
#define RUNG_TRACE_END(name) ((void)0)
#define RUNG_TRACE_MARK(name) ((void)0)

#endif
