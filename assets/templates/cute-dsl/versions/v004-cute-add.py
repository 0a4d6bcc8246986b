"""v004: elementwise out = a + b over f32 with the CuTe DSL, one thread per element.

`add` (@cute.jit, host side) launches `add_kernel` (@cute.kernel, device side) with
256-thread blocks; cute_aot.py compiles `add` ahead of time and never calls run().
"""
import cutlass
import cutlass.cute as cute

THREADS = 256


@cute.kernel
def add_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, n: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    i = bidx * bdim + tidx
    if i < n:
        gC[i] = gA[i] + gB[i]


@cute.jit
def add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, n: cutlass.Int32):
    add_kernel(mA, mB, mC, n).launch(
        grid=((n + THREADS - 1) // THREADS, 1, 1),
        block=(THREADS, 1, 1),
    )


_compiled = {}


def run(a, b, out, n):
    """a, b, out: contiguous 1-D float32 CUDA torch tensors of n elements."""
    from cutlass.cute.runtime import from_dlpack

    mA, mB, mC = (from_dlpack(t, assumed_align=16) for t in (a, b, out))
    key = (a.shape, a.device)
    if key not in _compiled:
        _compiled[key] = cute.compile(add, mA, mB, mC, cutlass.Int32(n))
    _compiled[key](mA, mB, mC, cutlass.Int32(n))
    return out
