# v004: v003's plan (one program per row, the whole row in registers, x read once) in Triton.
# Triton adds the cache policy v003 lacks (x evict-first in L1 and L2, w evict-last, plain stores
# instead of streaming ones) and schedules the loads itself; 32 warps per row measured fastest.
# Rows longer than 16384 fall back to a chunked two-pass loop.

import triton
import triton.language as tl

MAX_ONE_PASS = 16384  # longest row held in registers at once
CHUNK = 4096          # chunk width for longer rows


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, eps, cols, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * cols
    y_row = y_ptr + row * cols
    offs = tl.arange(0, BLOCK)
    if ONE_PASS:
        mask = offs < cols
        xv = tl.load(x_row + offs, mask=mask, other=0.0, eviction_policy="evict_first")
        inv_rms = 1.0 / tl.sqrt(tl.sum(xv * xv, axis=0) / cols + eps)
        wv = tl.load(w_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last")
        tl.store(y_row + offs, xv * inv_rms * wv, mask=mask)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, cols, BLOCK):
            mask = start + offs < cols
            xv = tl.load(x_row + start + offs, mask=mask, other=0.0)
            acc += xv * xv
        inv_rms = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / cols + eps)
        for start in range(0, cols, BLOCK):
            mask = start + offs < cols
            xv = tl.load(x_row + start + offs, mask=mask, other=0.0, eviction_policy="evict_first")
            wv = tl.load(w_ptr + start + offs, mask=mask, other=0.0, eviction_policy="evict_last")
            tl.store(y_row + start + offs, xv * inv_rms * wv, mask=mask)


def launch_config(cols):
    """BLOCK, ONE_PASS and num_warps for a row of `cols` elements."""
    block = triton.next_power_of_2(max(int(cols), 1))
    if block <= MAX_ONE_PASS:
        return block, True, min(max(block // 256, 1), 32)
    return CHUNK, False, 16


def run(x, w, y, eps, rows, cols):
    block, one_pass, num_warps = launch_config(cols)
    rmsnorm_kernel[(int(rows),)](x, w, y, float(eps), int(cols), BLOCK=block, ONE_PASS=one_pass, num_warps=num_warps)
