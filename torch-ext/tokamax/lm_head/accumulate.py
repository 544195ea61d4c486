"""dW += G.T @ x over one chunk of rows, the accumulator streamed under the matmul: the chunked scheme's weight
gradient (`fused`), where XLA's loop reads and writes the whole [vocab, hidden] accumulator per chunk after the
matmul, unhidden (`fused.ACCUMULATOR_PASSES`).

One Pallas kernel. Its grid walks blocks of the accumulator's rows (vocabulary entries); each step reads that
block's columns of G [chunk, block], all of the chunk's x [chunk, hidden] (the same block every step: fetched
once) and the accumulator's block, adds the product and writes the block back in place (`input_output_aliases`),
so the pipeline fetches the next block while the MXU works this one. The accumulator is float32, or the pair of
16-bit arrays `fused` keeps (high: the float32 sum rounded; low: what that rounding left), added to exactly as
`fused._accumulated` adds: the same sums, the product's summation order aside.

Shapes: acc [vocab, hidden] (float32, or two arrays of x's dtype), g [chunk, vocab], x [chunk, hidden], the
vocabulary a multiple of 128: every block divides it (`block_rows`), so no step reads past it; elsewhere `fits`
says no and the caller adds the product itself.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .blocks import vmem_limit

BLOCKS = (1024, 512, 256, 128)
"""Accumulator rows per step: the widest that divides the vocabulary and whose VMEM (`vmem_bytes`) fits
`VMEM_SHARE` of the kernel's limit (Qwen3's 151,936 = 1,187 x 128 takes 128, Llama 3's 128,256 = 501 x 256
256)."""
VMEM_SHARE = 0.6
"""Of the scoped limit the kernel is compiled with: Mosaic's own temporaries beside what `vmem_bytes` counts."""

Accumulator = jax.Array | tuple[jax.Array, jax.Array]


def vmem_bytes(chunk: int, hidden: int, block: int, itemsize: int) -> int:
    """x's block and G's block double-buffered, the accumulator's block in and out double-buffered (float32 or the
    pair: four bytes an entry either way), and three float32 [block, hidden] values (the product, the sum, the
    rounding's remainder)."""
    return 2 * chunk * (hidden + block) * itemsize + 4 * block * hidden * 4 + 3 * block * hidden * 4


def block_rows(chunk: int, hidden: int, vocab: int, itemsize: int, vmem_capacity: int) -> int | None:
    """The accumulator rows one step takes, or None where no block divides the vocabulary within the chip's VMEM."""
    budget = VMEM_SHARE * vmem_limit(vmem_capacity)
    for block in BLOCKS:
        if vocab % block == 0 and vmem_bytes(chunk, hidden, block, itemsize) <= budget:
            return block
    return None


def fits(chunk: int, hidden: int, vocab: int, itemsize: int, vmem_capacity: int) -> bool:
    return block_rows(chunk, hidden, vocab, itemsize, vmem_capacity) is not None


def into(acc: Accumulator, g: jax.Array, x: jax.Array) -> Accumulator:
    """acc + g.T @ x (float32 products), acc updated in place where the caller's buffer can be donated."""
    pair = isinstance(acc, tuple)
    vocab, hidden = (acc[0] if pair else acc).shape
    chunk = x.shape[0]
    if g.shape != (chunk, vocab) or x.shape != (chunk, hidden) or g.dtype != x.dtype:
        raise ValueError(f"tokamax lm_head accumulate: g must be [chunk, vocab] = [{chunk}, {vocab}] and x "
                         f"[chunk, hidden] = [{chunk}, {hidden}] of one dtype, got g {g.dtype}{list(g.shape)}, "
                         f"x {x.dtype}{list(x.shape)}")
    capacity = pltpu.get_tpu_info().vmem_capacity_bytes
    block = block_rows(chunk, hidden, vocab, x.dtype.itemsize, capacity)
    if block is None:
        raise ValueError(f"tokamax lm_head accumulate: no block of {BLOCKS} divides the vocabulary ({vocab}) with x's "
                         f"chunk [{chunk}, {hidden}] within the chip's VMEM ({capacity >> 20} MiB); add the product "
                         f"in XLA, or take a smaller chunk")
    arrays = tuple(acc) if pair else (acc,)

    def kernel(g_ref, x_ref, *refs) -> None:  # noqa: ANN001
        ins, outs = refs[:len(arrays)], refs[len(arrays):]
        part = jax.lax.dot_general(g_ref[...], x_ref[...], (((0,), (0,)), ((), ())),
                                   preferred_element_type=jnp.float32)
        if not pair:
            outs[0][...] = ins[0][...] + part
            return
        total = ins[0][...].astype(jnp.float32) + ins[1][...].astype(jnp.float32) + part
        high = total.astype(outs[0].dtype)
        outs[0][...] = high
        outs[1][...] = (total - high.astype(jnp.float32)).astype(outs[1].dtype)

    acc_spec = pl.BlockSpec((block, hidden), lambda i: (i, 0))
    out = pl.pallas_call(
        kernel,
        grid=(vocab // block,),
        in_specs=[pl.BlockSpec((chunk, block), lambda i: (0, i)), pl.BlockSpec((chunk, hidden), lambda i: (0, 0)),
                  *[acc_spec] * len(arrays)],
        out_specs=[acc_spec] * len(arrays),
        out_shape=[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays],
        input_output_aliases={2 + i: i for i in range(len(arrays))},
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",),
                                             vmem_limit_bytes=vmem_limit(capacity)),
        cost_estimate=pl.CostEstimate(
            flops=2 * chunk * vocab * hidden, transcendentals=0,
            bytes_accessed=chunk * (vocab + hidden) * x.dtype.itemsize + 2 * sum(a.size * a.dtype.itemsize
                                                                                for a in arrays)),
        name="tokamax_lm_head_dw_accumulate",
    )(g, x, *arrays)
    return tuple(out) if pair else out[0]
