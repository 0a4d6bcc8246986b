// rung: grid="rows" block=256
// v002: one block per row. Neighbouring threads now read neighbouring columns, so every warp's
// load is one coalesced 128-byte transaction, and there are `rows` blocks to fill the GPU. The
// partial sums meet in a shared-memory tree reduction. Loads are still scalar (4 bytes each),
// and the second pass reads x again (mostly from L2).
//
// Its three sections are marked for `rung trace v002` (rung_trace.cuh, found without copying
// it): the markers compile to nothing in the version that is checked and benched. Thread 0 of
// each block writes the records (RUNG_TRACE_PER_BLOCK): a block's eight warps run the same
// phases in step, and one record per block instead of one per warp keeps the traced kernel near
// the untraced one. `rung trace v002 --leader warp` traces every warp.

#define RUNG_TRACE_PER_BLOCK
#include <rung_trace.cuh>

extern "C" __global__ void rmsnorm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                   float eps, int rows, int cols) {
    __shared__ float partial[1024];  // one slot per thread; blockDim.x must be a power of two <= 1024
    const int r = blockIdx.x;
    const int tid = threadIdx.x;
    const float* xr = x + (size_t)r * cols;
    float* yr = y + (size_t)r * cols;

    RUNG_TRACE_BEGIN(sum_squares);
    float sum_sq = 0.0f;
    for (int c = tid; c < cols; c += blockDim.x) {
        const float v = xr[c];
        sum_sq += v * v;
    }
    partial[tid] = sum_sq;
    RUNG_TRACE_END(sum_squares);
    RUNG_TRACE_BEGIN(reduce);
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) partial[tid] += partial[tid + s];
        __syncthreads();
    }
    const float inv_rms = rsqrtf(partial[0] / (float)cols + eps);
    RUNG_TRACE_END(reduce);

    RUNG_TRACE_BEGIN(normalise);
    for (int c = tid; c < cols; c += blockDim.x) yr[c] = xr[c] * inv_rms * w[c];
    RUNG_TRACE_END(normalise);
}
