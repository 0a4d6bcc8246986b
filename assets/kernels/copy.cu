// The copy kernels rung times to measure a GPU's memory ceiling (roofline): 16-byte loads and
// stores with streaming cache hints, grid-stride, one or four vectors in flight per thread. rung
// loads copy.ptx (made from this file by `nvcc -ptx -arch=compute_90 copy.cu`) through the
// driver, which compiles it for the GPU at hand, and keeps the best configuration.

extern "C" __global__ void rung_copy1(const int4* __restrict__ src, int4* __restrict__ dst, unsigned long long n) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        __stcs(dst + i, __ldcs(src + i));
    }
}

extern "C" __global__ void rung_copy4(const int4* __restrict__ src, int4* __restrict__ dst, unsigned long long n) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        int4 a = __ldcs(src + i);
        int4 b = __ldcs(src + i + stride);
        int4 c = __ldcs(src + i + 2 * stride);
        int4 d = __ldcs(src + i + 3 * stride);
        __stcs(dst + i, a);
        __stcs(dst + i + stride, b);
        __stcs(dst + i + 2 * stride, c);
        __stcs(dst + i + 3 * stride, d);
    }
    for (; i < n; i += stride) {
        __stcs(dst + i, __ldcs(src + i));
    }
}

// Reads the buffer and folds it into a word, the loads evict-first (`ld.global.cs`) or at normal
// priority (`ld.global.cg`). The store never happens for a zero-filled buffer; it keeps the loads
// from being removed.
template <bool EvictFirst>
__device__ __forceinline__ void read_all(const int4* __restrict__ src, unsigned long long n, int* __restrict__ sink) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    int acc = 0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int4 v = EvictFirst ? __ldcs(src + i) : __ldcg(src + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x7fffffff) *sink = acc;
}

// Flushes L2 by reading a buffer larger than it: every other line is evicted (what was dirty is
// written back) and the lines left behind are clean, so the timed kernel pays no write-back for
// them (a memset would leave them dirty).
extern "C" __global__ void rung_flush(const int4* __restrict__ src, unsigned long long n, int* __restrict__ sink) {
    read_all<false>(src, n, sink);
}

// Run after rung_flush, over the same buffer: reads it again with evict-first loads, so the lines
// L2 holds before the discard were last allocated evict-first. The cache policy of what L2 held
// before a kernel changes the kernel's time even after the discard. On the H200, under Nsight
// Compute with `--cache-control none` (µs; ncu's own flush gives about 250.4-253.7, 258.9-260.2
// and 250.1-252.7):
//
//   flush, then discard                    v003 (.cs hints) 258.9  v004 (Triton) 259.0  v005 250.6
//   this read alone, then discard                           251.4                261.5       252.2
//   rung_flush, this read, then discard                     250.8                257.6       250.3
//
// The evict-first read alone leaves some of what ran before in L2 (v005 is then near its time
// with no flush at all, 254.1); the normal read first evicts it.
extern "C" __global__ void rung_flush_evict_first(const int4* __restrict__ src, unsigned long long n,
                                                  int* __restrict__ sink) {
    read_all<true>(src, n, sink);
}

// Run after rung_flush and rung_flush_evict_first: invalidates the flush buffer's lines in L2
// without writing them back (PTX `discard.global.L2`), so the timed kernel starts from an L2
// holding none of them, as near as user code comes to Nsight Compute's `--cache-control all`. A line still holding the flush buffer's clean data is
// not free to the next kernel: on the H200 a kernel with evict-first hints ran 5% slower after a
// read-only flush than after ncu's invalidation. The buffer's contents are undefined afterwards,
// which does not matter for a buffer that is only ever read to evict.
extern "C" __global__ void rung_discard(char* __restrict__ buf, unsigned long long lines) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < lines; i += stride) {
        asm volatile("discard.global.L2 [%0], 128;" ::"l"(buf + i * 128) : "memory");
    }
}
