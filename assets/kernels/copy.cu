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

// Flushes L2 by reading a buffer larger than it: the lines left behind are clean, so the timed
// kernel pays no write-back for them (a memset would leave them dirty). The store never happens
// for a zero-filled buffer; it keeps the loads from being removed.
extern "C" __global__ void rung_flush(const int4* __restrict__ src, unsigned long long n, int* __restrict__ sink) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    int acc = 0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int4 v = __ldcg(src + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x7fffffff) *sink = acc;
}

// Run after rung_flush: invalidates the flush buffer's lines in L2 without writing them back
// (PTX `discard.global.L2`), so the timed kernel starts from an L2 holding nothing, as under
// Nsight Compute's `--cache-control all`. A line still holding the flush buffer's clean data is
// not free to the next kernel: on the H200 a kernel with evict-first hints ran 5% slower after a
// read-only flush than after ncu's invalidation. The buffer's contents are undefined afterwards,
// which does not matter for a buffer that is only ever read to evict.
extern "C" __global__ void rung_discard(char* __restrict__ buf, unsigned long long lines) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < lines; i += stride) {
        asm volatile("discard.global.L2 [%0], 128;" ::"l"(buf + i * 128) : "memory");
    }
}
