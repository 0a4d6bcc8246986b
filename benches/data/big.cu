// Benchmark input for rung's SASS parser and differ: many instantiations of an unrolled
// tile kernel give a listing of about 100,000 lines. Built twice, with VARIANT 0 and 1; the
// variant changes the epilogue of one instantiation in 36, so a few percent of lines differ.
#ifndef VARIANT
#define VARIANT 0
#endif

template <int TILE, int STEPS, int SALT>
__global__ void tile_kernel(float* __restrict__ out, const float* __restrict__ a, const float* __restrict__ b, int n) {
    float acc[TILE];
#pragma unroll
    for (int t = 0; t < TILE; ++t) acc[t] = 0.0f;
    int base = (blockIdx.x * blockDim.x + threadIdx.x) * TILE;
#pragma unroll
    for (int s = 0; s < STEPS; ++s) {
#pragma unroll
        for (int t = 0; t < TILE; ++t) {
            int i = (base + t + s * 97 + SALT) % n;
            acc[t] = fmaf(a[i], b[(i * 7 + s) % n], acc[t] * (1.0f + 0.001f * SALT));
        }
    }
#pragma unroll
    for (int t = 0; t < TILE; ++t) {
#if VARIANT
        if (SALT == 9) acc[t] = acc[t] * 0.5f + (float)t;
#endif
        out[(base + t) % n] = acc[t];
    }
}

#define INST(T, S, SALT) template __global__ void tile_kernel<T, S, SALT>(float*, const float*, const float*, int);
#define ROW(SALT) INST(8, 12, SALT) INST(4, 16, SALT + 100) INST(16, 6, SALT + 200)
ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5) ROW(6) ROW(7) ROW(8) ROW(9) ROW(10) ROW(11)
