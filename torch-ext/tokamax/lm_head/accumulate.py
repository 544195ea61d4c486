"""dW += G.T @ x over one chunk of rows, the accumulator streamed under the matmul: the chunked scheme's weight
gradient (`fused`), where XLA's loop reads and writes the whole [vocab, hidden] accumulator per chunk after the
matmul, unhidden (`fused.ACCUMULATOR_PASSES`).

One Pallas kernel. Its grid walks blocks of the accumulator's rows (vocabulary entries); each step reads that
block's columns of G [chunk, block], all of the chunk's x [chunk, hidden] (the same block every step: fetched
once) and the accumulator's block, adds the product and writes the block back in place (`input_output_aliases`),
so the pipeline fetches the next block while the MXU works this one. The accumulator is float32, or the pair
`fused` keeps: high, the float32 sum rounded to the 16-bit float dtype of x (dW itself at the end), and low, what
that rounding left, in that dtype (added to exactly as `add` adds it in XLA: the same sums, the product's
summation order aside) or in int8 as a multiple of 1/256 of high's last place (`SCALED`: the remainder is at most
half that place, so 8 bits keep about the same 16 bits of the sum as a 16-bit low half, within 1/512 of high's
last place per addition, 1/256 where the remainder is within 1/512 of half of it (its 128 held as 127), for 3
bytes an entry where the 16-bit pair takes 4).

Shapes: acc [vocab, hidden] (float32, or high in x's dtype and low in it or int8), g [chunk, vocab], x [chunk,
hidden], a vocabulary some block divides: a multiple of 128 with g as it is, or, with g given as its transpose
[vocab, chunk] (`transposed`: the chunked scheme's layout for a vocabulary off the lanes), a multiple of 32 (the
int8 low half's sublane tile; Gemma 3's 262,208 = 544 x 482). Where no block divides it or fits the chip's VMEM
beside x's chunk, `fits` says no and the caller adds the product itself.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .blocks import vmem_limit

BLOCKS = (1024, 512, 256, 128)
"""Accumulator rows per step: the widest that divides the vocabulary and whose VMEM (`vmem_bytes`) fits `VMEM_SHARE`
of the kernel's limit (Qwen3's 151,936 = 1,187 x 128 takes 128, Llama 3's 128,256 = 501 x 256 256). With g
transposed, any multiple of `SUBLANE_ROWS` up to the largest of these that divides the vocabulary (Gemma 3's
262,208 = 2^6 x 17 x 241: 544 beside a chunk of 1,024 rows at hidden 2,560)."""
SUBLANE_ROWS = 32
"""A block's rows with g transposed (its rows then on the sublanes, not the lanes): a multiple of the int8 low half's
sublane tile (32 rows; bf16's 16 and float32's 8 divide it)."""
VMEM_SHARE = 0.6
"""Of the scoped limit the kernel is compiled with: Mosaic's own temporaries beside what `vmem_bytes` counts."""

Accumulator = jax.Array | tuple[jax.Array, jax.Array]
SCALED = jnp.int8
"""The low half's dtype where it holds the remainder in 1/256ths of high's last place."""


def _place_exponents(high: jax.Array, mantissa_bits: int) -> tuple[jax.Array, jax.Array]:
    """The float32 exponent fields of 2^-8 x high's last place and of its inverse, from high (float32, a value of
    a float dtype with `mantissa_bits` explicit bits): high's biased exponent e gives the place 2^(e - 127 -
    mantissa_bits), held within [mantissa_bits + 9, 254] so that both are normal float32 numbers (a high below
    2^(-118 + mantissa_bits) keeps its remainder to 2^-126, far below any gradient)."""
    e = jnp.clip(jax.lax.shift_right_logical(jax.lax.bitcast_convert_type(high, jnp.int32), 23) & 0xFF,
                 mantissa_bits + 9, 254)
    return e - mantissa_bits - 8, 262 + mantissa_bits - e


def _power(field: jax.Array) -> jax.Array:
    return jax.lax.bitcast_convert_type(jax.lax.shift_left(field, 23), jnp.float32)


def scaled_low(high: jax.Array, total: jax.Array, mantissa_bits: int) -> jax.Array:
    """total - high (float32, at most half high's last place) in int8 units of 1/256 of that place, rounded to the
    nearest (half away from zero) and held within +-127."""
    _, inverse = _place_exponents(high, mantissa_bits)
    units = (total - high) * _power(inverse)
    rounded = jnp.where(units >= 0, units + 0.5, units - 0.5).astype(jnp.int32)
    return jnp.clip(rounded, -127, 127).astype(jnp.int8)


def scaled_value(high: jax.Array, low: jax.Array, mantissa_bits: int) -> jax.Array:
    """high + low's remainder, float32, from high (float32) and `scaled_low`'s int8."""
    place, _ = _place_exponents(high, mantissa_bits)
    return high + low.astype(jnp.int32).astype(jnp.float32) * _power(place)


def add_in_kernel(ins: tuple, outs: tuple, part: jax.Array, bits: int) -> None:
    """Inside a Pallas kernel: the accumulator's block read from `ins` (float32, or the pair's refs), `part`
    (float32) added, written to `outs` as `_added` adds it in XLA; `bits`: high's explicit mantissa bits."""
    if len(ins) == 1:
        outs[0][...] = ins[0][...] + part
        return
    held = ins[0][...].astype(jnp.float32)
    scaled = ins[1].dtype == SCALED
    total = (scaled_value(held, ins[1][...], bits) if scaled else held + ins[1][...].astype(jnp.float32)) + part
    high = total.astype(outs[0].dtype)
    outs[0][...] = high
    if scaled:
        outs[1][...] = scaled_low(high.astype(jnp.float32), total, bits)
    else:
        outs[1][...] = (total - high.astype(jnp.float32)).astype(outs[1].dtype)


def vmem_bytes(chunk: int, hidden: int, block: int, itemsize: int) -> int:
    """x's block and G's block double-buffered, the accumulator's block in and out double-buffered (float32 or the
    pair: four bytes an entry either way), and three float32 [block, hidden] values (the product, the sum, the
    rounding's remainder)."""
    return 2 * chunk * (hidden + block) * itemsize + 4 * block * hidden * 4 + 3 * block * hidden * 4


def block_rows(chunk: int, hidden: int, vocab: int, itemsize: int, vmem_capacity: int,
               transposed: bool = False) -> int | None:
    """The accumulator rows one step takes (`BLOCKS`' rule), or None where no block divides the vocabulary within
    the chip's VMEM beside x's chunk."""
    budget = VMEM_SHARE * vmem_limit(vmem_capacity)
    sizes = range(BLOCKS[0], 0, -SUBLANE_ROWS) if transposed else BLOCKS
    for block in sizes:
        if vocab % block == 0 and vmem_bytes(chunk, hidden, block, itemsize) <= budget:
            return block
    return None


def fits(chunk: int, hidden: int, vocab: int, itemsize: int, vmem_capacity: int, transposed: bool = False) -> bool:
    return block_rows(chunk, hidden, vocab, itemsize, vmem_capacity, transposed) is not None


def into(acc: Accumulator, g: jax.Array, x: jax.Array, transposed: bool = False) -> Accumulator:
    """acc + g.T @ x (float32 products), acc updated in place where the caller's buffer can be donated; with
    `transposed`, g is given as g.T [vocab, chunk] (the chunked scheme's layout for a vocabulary off the lanes)."""
    pair = isinstance(acc, tuple)
    vocab, hidden = (acc[0] if pair else acc).shape
    chunk = x.shape[0]
    want = (vocab, chunk) if transposed else (chunk, vocab)
    if g.shape != want or x.shape != (chunk, hidden) or g.dtype != x.dtype:
        names = "[vocab, chunk]" if transposed else "[chunk, vocab]"
        raise ValueError(f"tokamax lm_head accumulate: g must be {names} = {list(want)} and x "
                         f"[chunk, hidden] = [{chunk}, {hidden}] of one dtype, got g {g.dtype}{list(g.shape)}, "
                         f"x {x.dtype}{list(x.shape)}")
    capacity = pltpu.get_tpu_info().vmem_capacity_bytes
    block = block_rows(chunk, hidden, vocab, x.dtype.itemsize, capacity, transposed)
    if block is None:
        sizes = f"multiple of {SUBLANE_ROWS} up to {BLOCKS[0]}" if transposed else f"block of {BLOCKS}"
        raise ValueError(f"tokamax lm_head accumulate: no {sizes} rows divides the vocabulary ({vocab}) with x's "
                         f"chunk [{chunk}, {hidden}] within the chip's VMEM ({capacity >> 20} MiB); add the product "
                         f"in XLA, or take a smaller chunk")
    arrays = tuple(acc) if pair else (acc,)
    scaled = pair and arrays[1].dtype == SCALED
    if pair and (arrays[0].dtype != x.dtype or arrays[1].dtype not in (x.dtype, SCALED)
                 or (scaled and x.dtype.itemsize != 2)):
        raise ValueError(f"tokamax lm_head accumulate: the pair is high in x's dtype and low in it or, for a 16-bit "
                         f"x, int8; got {arrays[0].dtype} and {arrays[1].dtype} for x {x.dtype}")
    bits = jnp.finfo(x.dtype).nmant if pair else 0

    def kernel(g_ref, x_ref, *refs) -> None:  # noqa: ANN001
        ins, outs = refs[:len(arrays)], refs[len(arrays):]
        part = jax.lax.dot_general(g_ref[...], x_ref[...], (((1 if transposed else 0,), (0,)), ((), ())),
                                   preferred_element_type=jnp.float32)
        add_in_kernel(ins, outs, part, bits)

    acc_spec = pl.BlockSpec((block, hidden), lambda i: (i, 0))
    out = pl.pallas_call(
        kernel,
        grid=(vocab // block,),
        in_specs=[pl.BlockSpec((block, chunk), lambda i: (i, 0)) if transposed
                  else pl.BlockSpec((chunk, block), lambda i: (0, i)),
                  pl.BlockSpec((chunk, hidden), lambda i: (0, 0)), *[acc_spec] * len(arrays)],
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


def _added(arrays: tuple[jax.Array, ...], part: jax.Array, bits: int) -> tuple[jax.Array, ...]:
    """arrays + part in XLA, as the kernel adds it: float32 (one array), or the pair (high, low), its low half in
    x's dtype or in int8 (`scaled_low`; `bits`, high's explicit mantissa bits)."""
    if len(arrays) == 1:
        return (arrays[0] + part,)
    high, low = arrays
    held = high.astype(jnp.float32)
    scaled = low.dtype == SCALED
    total = (scaled_value(held, low, bits) if scaled else held + low.astype(jnp.float32)) + part
    rounded = total.astype(high.dtype)
    if scaled:
        return rounded, scaled_low(rounded.astype(jnp.float32), total, bits)
    return rounded, (total - rounded.astype(jnp.float32)).astype(low.dtype)


def start(shape: tuple[int, int], dtype: jnp.dtype, pair: bool, scaled: bool) -> Accumulator:
    """A zero accumulator for dW of `shape` in `dtype`: float32, or the pair (high in `dtype`, low in it or, with
    `scaled` and a 16-bit `dtype`, in int8: `SCALED`)."""
    if not pair:
        return jnp.zeros(shape, jnp.float32)
    low = SCALED if scaled and jnp.dtype(dtype).itemsize == 2 else dtype
    return jnp.zeros(shape, dtype), jnp.zeros(shape, low)


def add(acc: Accumulator, g: jax.Array, x: jax.Array, kernel: bool, transposed: bool = False) -> Accumulator:
    """acc + g.T @ x (g given as g.T with `transposed`): by this module's kernel (`into`), or by XLA (float32 products;
    the pair's sum rounded to high and what that left in low, as the kernel adds them)."""
    if kernel:
        return into(acc, g, x, transposed)
    part = jax.lax.dot_general(g, x, (((1 if transposed else 0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    if not isinstance(acc, tuple):
        return acc + part
    return _added(acc, part, jnp.finfo(acc[0].dtype).nmant)


def finish(acc: Accumulator, dtype: jnp.dtype, scale: jax.Array | None = None) -> jax.Array:
    """dW in `dtype`: the float32 sum rounded, or the pair's high half (that sum rounded as it went); with `scale`
    (float32 [], a loss's cotangent) the sum times it, rounded once: the pair's high + low in float32 (a scale of 1
    keeps high: low is itself rounded, so high + low can sit on a tie the float32 sum was not on)."""
    if scale is None:
        return acc[0] if isinstance(acc, tuple) else acc.astype(dtype)
    if not isinstance(acc, tuple):
        return (acc * scale).astype(dtype)
    high, low = acc
    held = high.astype(jnp.float32)
    total = scaled_value(held, low, jnp.finfo(high.dtype).nmant) if low.dtype == SCALED else held + low.astype(
        jnp.float32)
    return jnp.where(scale == 1.0, high, (total * scale).astype(dtype))
