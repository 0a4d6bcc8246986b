"""v004: elementwise out = a + b over f32 in TileLang, one thread per element.

`vector_add` is a @tilelang.jit factory: called with its defaults it returns the compiled
kernel, which run() calls on the three tensors rung passes (out is written in place:
out_idx=None). tilelang_aot.py compiles it ahead of time and never calls run().
"""
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=None)
def vector_add(block_N: int = 256, dtype: str = "float32"):
    N = T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=block_N) as bx:
            for i in T.Parallel(block_N):
                idx = bx * block_N + i
                if idx < N:
                    C[idx] = A[idx] + B[idx]

    return main


def run(a, b, out, n):
    """a, b, out: contiguous 1-D float32 CUDA torch tensors of n elements."""
    vector_add()(a, b, out)
    return out
