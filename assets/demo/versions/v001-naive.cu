// rung: grid="cdiv(rows, 256)" block=256
// v001, the obvious first attempt: one thread per row, looping over its columns. It is correct,
// but the 32 threads of a warp read 32 addresses one row (cols * 4 bytes) apart, so no load is
// coalesced, and only cdiv(rows, 256) blocks exist to keep 132 multiprocessors busy.

extern "C" __global__ void rmsnorm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                   float eps, int rows, int cols) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + (size_t)r * cols;
    float* yr = y + (size_t)r * cols;

    float sum_sq = 0.0f;
    for (int c = 0; c < cols; ++c) sum_sq += xr[c] * xr[c];
    const float inv_rms = rsqrtf(sum_sq / (float)cols + eps);

    for (int c = 0; c < cols; ++c) yr[c] = xr[c] * inv_rms * w[c];
}
