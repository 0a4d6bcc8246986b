// rung: grid="rows" block=1024
// v005: v003 with its cache hints taken out. Timed with CUDA events after an L2 flush, the
// streaming loads and stores (.cs) meant to keep L2 clean cost about 4% on the H200, as did
// Triton's evict-first policy in v004 (Nsight Compute with --cache-control all shows v003 and
// v005 alike); with plain loads and stores the kernel runs within 1% of a device-to-device copy.

#ifndef RUNG_VPT
#define RUNG_VPT 2  // float4s per thread kept in registers: 1024 threads * 2 * 4 = 8192 columns
#endif

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block; every thread gets the total. One barrier: each warp reduces the per-warp
// partials itself instead of waiting for warp 0 to broadcast them.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_part[32];
    const int lane = threadIdx.x & 31;
    v = warp_sum(v);
    if (lane == 0) warp_part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = lane < ((blockDim.x + 31) >> 5) ? warp_part[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float sum_sq4(float4 v) {
    return fmaf(v.x, v.x, fmaf(v.y, v.y, fmaf(v.z, v.z, v.w * v.w)));
}

__device__ __forceinline__ float4 scale4(float4 v, float s, float4 g) {
    return make_float4(v.x * s * g.x, v.y * s * g.y, v.z * s * g.z, v.w * s * g.w);
}

extern "C" __global__ void __launch_bounds__(1024) rmsnorm(const float* __restrict__ x, const float* __restrict__ w,
                                                           float* __restrict__ y, float eps, int rows, int cols) {
    const int tid = threadIdx.x;
    const int nt = blockDim.x;
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    const float inv_cols = 1.0f / (float)cols;

    // The same for every thread of the block, so the branches below never split a barrier.
    const bool aligned = ((reinterpret_cast<size_t>(xr) | reinterpret_cast<size_t>(yr) | reinterpret_cast<size_t>(w)) & 15) == 0;

    if (aligned) {
        const int n4 = cols >> 2;           // whole float4s in the row
        const int tail = (n4 << 2) + tid;   // threads 0..cols%4-1 take one leftover column each
        const bool has_tail = tid < (cols & 3);
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const float4* w4 = reinterpret_cast<const float4*>(w);
        float4* y4 = reinterpret_cast<float4*>(yr);

        if (n4 <= nt * RUNG_VPT) {
            // Fast path: the whole row lives in registers between the reduction and the store.
            float4 v[RUNG_VPT];
#pragma unroll
            for (int k = 0; k < RUNG_VPT; ++k) {
                const int i = tid + k * nt;
                v[k] = i < n4 ? x4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // plain load: no cache hint
            }
            const float t = has_tail ? xr[tail] : 0.0f;
            float s = t * t;
#pragma unroll
            for (int k = 0; k < RUNG_VPT; ++k) s += sum_sq4(v[k]);
            const float inv_rms = rsqrtf(block_sum(s) * inv_cols + eps);
#pragma unroll
            for (int k = 0; k < RUNG_VPT; ++k) {
                const int i = tid + k * nt;
                if (i < n4) y4[i] = scale4(v[k], inv_rms, __ldg(w4 + i));  // plain store: no cache hint
            }
            if (has_tail) yr[tail] = t * inv_rms * w[tail];
        } else {
            // Long rows: two passes over float4s; the second reads x again, mostly from L2.
            float s = 0.0f;
#pragma unroll 4
            for (int i = tid; i < n4; i += nt) s += sum_sq4(__ldg(x4 + i));
            const float t = has_tail ? xr[tail] : 0.0f;
            s = fmaf(t, t, s);
            const float inv_rms = rsqrtf(block_sum(s) * inv_cols + eps);
#pragma unroll 4
            for (int i = tid; i < n4; i += nt) y4[i] = scale4(x4[i], inv_rms, __ldg(w4 + i));
            if (has_tail) yr[tail] = t * inv_rms * w[tail];
        }
    } else {
        // Rows off a 16-byte boundary: scalar, still coalesced, two passes.
        float s = 0.0f;
#pragma unroll 4
        for (int c = tid; c < cols; c += nt) {
            const float v = __ldg(xr + c);
            s = fmaf(v, v, s);
        }
        const float inv_rms = rsqrtf(block_sum(s) * inv_cols + eps);
#pragma unroll 4
        for (int c = tid; c < cols; c += nt) yr[c] = xr[c] * inv_rms * __ldg(w + c);
    }
}
