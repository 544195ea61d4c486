"""The chunked scheme's per-chunk work in two Pallas kernels, the gradient block G made in VMEM and never in HBM:
`fused`'s streamed way.

XLA's chunked step writes a chunk's float32 logits, reads them back for the row maximum, the sum of exponentials
and G, writes G in w's dtype and reads it in dx's matmul and in dW's (`accumulate`): at Gemma 3's 262,208 entries
those passes over [chunk, vocab] arrays, not the matmuls, set the step's time (232 ms where XLA's materialized head
takes 200). Here:

- `logits`: grid over vocabulary blocks; each step makes the chunk's raw logits x w_j.T (+ b_j) for its block,
  writes them (float32, the backward reads them once) and carries the rows' online maximum and sum of
  exponentials, and with label smoothing the sum of logits: the statistics cost no pass of their own. The target's
  logit is `target_logits`' (XLA: one row of w a row), not a select and a sum over every entry here.
- `gradients`: grid over vocabulary blocks; each step reads its block of raw logits, makes G = (a p + c [j = t] +
  d) dz/dl in VMEM (per-row coefficients from the loss, as `kernels`' backward), adds G w_j to dx's float32
  accumulator (VMEM, written once at the end) and G.T x to dW's block in place (`accumulate`'s float32 or pair
  accumulator, aliased), and for a head with a bias writes G's column sums (db's share of the chunk).

Three matmuls per chunk, as XLA's step, with every [chunk, vocab] array touched twice (written and read once).
A step's vector work is not hidden by its matmuls, so each kernel does only what the loss uses (the column mask in
the last block alone, no bias or db without a bias, no sums without smoothing). Measured on the v5e, with compact
logits in chunks of 1024, the fastest way within the share at the chip benchmark's three heads, at XLA's speed
(`fused.STREAMED`): `fused.choose_scheme` takes it wherever it fits.

Compact logits (`compact`, where the transform has no soft cap, the head no bias and x is 16-bit): `logits` stores
each block as z - m_j in bf16 (m_j the row's running maximum of z up to that block, kept per block), so a chunk's
stored logits take half float32's bytes, and `gradients` makes p = e^(z - lse) as e^(s + m_j - lse). Entries near
the row's maximum are held near 0, where bf16's absolute rounding is least: bf16 keeps 8 significant bits, so an
entry's stored s <= 0 is off by at most |s| 2^-8, and p by at most p |s| 2^-8 <= e^s |s| 2^-8 <= 2^-8 / e
(`P_ERROR`; p <= e^s, as m_j <= lse), of the order of bf16's rounding of G itself (2^-8 of G). Not with a bias: db,
G's float32 column sums, would carry that error (`compacts`). x is copied into VMEM once and dx leaves it by one copy
at the end (one buffer each, not the pipeline's two): a chunk of 2,048 rows at hidden 2,560 then fits beside the
blocks.

Shapes: x [chunk, hidden] (hidden a multiple of 128), w [vocab, hidden], b float32 [1, vocab], per-row vectors
[chunk]. The vocabulary need not be a multiple of the block. `logits`' last block runs past w's rows: its statistics
mask those columns with a select (what is read past the end is undefined), what it writes there is dropped.
`gradients` walks the whole blocks only (dW's block is updated in place, and a block past its end is no block of
it); the entries left after them (`tail`, fewer than a block: 64 of Gemma 3's 262,208 at blocks of 512) are added
by XLA from the same logits.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import accumulate
from .blocks import LANES, round_up, vmem_limit
from .kernels import _contract
from .transform import LogitTransform

BLOCKS = (1024, 512, 256, 128)
"""Vocabulary entries per grid step, the widest whose VMEM (`vmem_bytes`) fits `VMEM_SHARE` of the limit."""
VMEM_SHARE = 0.8
"""Of the scoped limit the kernels are compiled with: Mosaic's own temporaries beside what `vmem_bytes` counts."""
COMPACT = jnp.bfloat16
"""The stored logits' dtype with `compact` (z less the running maximum)."""
P_ERROR = 2.0 ** -(jnp.finfo(COMPACT).nmant + 1) / math.e
"""The most a compact entry's p is off by (absolute): `COMPACT` keeps nmant + 1 significant bits, so rounding to the
nearest moves s = z - m_j by at most |s| 2^-(nmant + 1) (bf16: 2^-8), p by p |s| 2^-8 <= e^s |s| 2^-8 <= 2^-8 / e."""


def accumulator_bytes(itemsize: int, pair: bool, scaled: bool, weight_grad: bool = True) -> int:
    """Bytes per entry of dW's accumulator as `gradients` moves it: float32 (4), the pair in w's dtype, its low half
    in int8 with `scaled`; 0 for a frozen head (no accumulator)."""
    if not weight_grad:
        return 0
    return itemsize + (1 if scaled else itemsize) if pair else 4


def vmem_bytes(kernel: str, chunk: int, hidden: int, block: int, itemsize: int, acc_bytes: int = 4,
               compact: bool = False) -> int:
    """What a kernel holds: its blocks double-buffered and its float32 temporaries. `logits`: x (its index never
    changes, but two buffers are reserved), w's block, the stored block out (float32, or bf16 `compact`) and four
    [chunk, block] temporaries. `gradients`: x once (copied in by the kernel), the stored block, w's, dW's block in
    and out (`acc_bytes` an entry: 4 for float32 or the 16-bit pair, 3 with the int8 low half; 0 for a frozen head),
    four [chunk, block] temporaries, dx's float32 accumulator and the [chunk, hidden] product added to it, and three
    [block, hidden] float32 ones (the product, the sum, the rounding's remainder)."""
    c, h, b, s = chunk, hidden, block, itemsize
    stored = 2 if compact else 4
    blocks = 2 * b * h * s + 2 * c * b * stored + 4 * c * b * 4
    if kernel == "logits":
        return 2 * c * h * s + blocks
    weights = 4 * acc_bytes * b * h + (3 * b * h * 4 if acc_bytes else 0)
    return c * h * s + blocks + weights + 2 * c * h * 4


def block_for(chunk: int, hidden: int, vocab: int, itemsize: int, vmem_capacity: int, acc_bytes: int = 4,
              compact: bool = False) -> int | None:
    """The vocabulary block both kernels take (`BLOCKS`' rule, none wider than the vocabulary; a vocabulary under
    128 whole), or None where not even the narrowest fits beside the chunk, or the hidden size is off the lanes
    (the TPU lays such arrays out column-major: XLA would copy w around the kernels)."""
    if hidden % LANES:
        return None
    budget = VMEM_SHARE * vmem_limit(vmem_capacity)
    for block in [b for b in BLOCKS if b <= vocab] or [vocab]:
        if max(vmem_bytes(k, chunk, hidden, block, itemsize, acc_bytes, compact)
               for k in ("logits", "gradients")) <= budget:
            return block
    return None


def compacts(transform: LogitTransform, itemsize: int, bias: bool = False) -> bool:
    """Whether the stored logits can be compact (bf16, relative to the running maximum): a transform with no soft
    cap (dz/dl is then a constant, not a function of the raw logit), 16-bit operands and no bias (db is float32, G's
    column sums before any rounding: compact logits would put their 2^-8 of p into it, `P_ERROR`, where dx and dW
    round G to bf16 anyway)."""
    return not transform.tanh and itemsize == 2 and not bias


def compact_rows(rows: int) -> int:
    """The rows a compact chunk of `rows` runs as: `logits`' maxima are cut into blocks of a chunk, and Mosaic cuts a
    vector into blocks of a power of two from 128 or a multiple of 1024 only (at most 1,023 rows of padding)."""
    if rows > 1024:
        return round_up(rows, 1024)
    return max(128, 1 << (rows - 1).bit_length())


def _params() -> pltpu.CompilerParams:
    # the vocabulary is a reduction for the row statistics and for dx: one core walks it in order
    return pltpu.CompilerParams(dimension_semantics=("arbitrary",),
                                vmem_limit_bytes=vmem_limit(pltpu.get_tpu_info().vmem_capacity_bytes))


def logits(x: jax.Array, w: jax.Array, b: jax.Array, *, transform: LogitTransform, block: int, compact: bool = False,
           bias: bool = True, sums: bool = True) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array | None]:
    """(the stored logits [chunk, vocab]; float32 [chunk] each: the log-sum-exp of the transformed logits z, the sum of
    z over the vocabulary (with `sums`, else 0); the running maxima or None). Stored: the raw logits in float32, or with
    `compact` z - m_j in bf16 and the maxima m_j float32 [blocks * chunk], block j's at [j * chunk, (j + 1) * chunk)
    (`compact_rows`: a chunk Mosaic can cut such a vector into). Without `bias` b is not read (a head without one).
    The target's logit is `target_logits`' (XLA's, one row of w a row): a select and a sum per entry fewer here."""
    chunk, hidden = x.shape
    vocab = w.shape[0]
    steps = -(-vocab // block)
    masked_last = vocab % block != 0

    def kernel(x_ref, w_ref, b_ref, raw_ref, lse_ref, sum_ref, *refs) -> None:  # noqa: ANN001
        max_ref, (m_s, s_s) = (refs[0], refs[1:]) if compact else (None, refs)
        j = pl.program_id(0)

        @pl.when(j == 0)
        def _init() -> None:
            m_s[...] = jnp.full_like(m_s, -jnp.inf)
            for ref in (s_s, sum_ref):
                ref[...] = jnp.zeros_like(ref)

        def block_step(masked: bool) -> None:
            raw = _contract(x_ref[...], w_ref[...], (1, 1))
            if bias:
                raw = raw + b_ref[...]
            z, _ = transform(raw)
            col = jax.lax.broadcasted_iota(jnp.int32, z.shape, 1) + j * block
            if masked:  # undefined past the vocabulary: out of the maximum, the exponentials and the sum
                valid = col < vocab
                top, z_sum = jnp.where(valid, z, -jnp.inf), jnp.where(valid, z, 0.0)
            else:
                top = z_sum = z
            m_old = m_s[...]
            m_new = jnp.maximum(m_old, jnp.max(top, axis=1))
            if compact:  # what is stored past the vocabulary is dropped
                raw_ref[...] = (z - m_new[:, None]).astype(raw_ref.dtype)
                max_ref[...] = m_new
            else:
                raw_ref[...] = raw
            s_s[...] = s_s[...] * jnp.exp(m_old - m_new) + jnp.sum(jnp.exp(top - m_new[:, None]), axis=1)
            m_s[...] = m_new
            if sums:
                sum_ref[...] += jnp.sum(z_sum, axis=1)

        if masked_last and steps > 1:  # only the last block runs past the vocabulary
            pl.when(j < steps - 1)(lambda: block_step(False))
            pl.when(j == steps - 1)(lambda: block_step(True))
        else:
            block_step(masked_last)

        @pl.when(j == steps - 1)
        def _finish() -> None:
            lse_ref[...] = m_s[...] + jnp.log(s_s[...])

    row = pl.BlockSpec((chunk,), lambda j: (0,))
    vector = jax.ShapeDtypeStruct((chunk,), jnp.float32)
    itemsize = x.dtype.itemsize
    stored = COMPACT if compact else jnp.float32
    maxima = [pl.BlockSpec((chunk,), lambda j: (j,))] if compact else []
    out = pl.pallas_call(
        kernel,
        grid=(steps,),
        in_specs=[pl.BlockSpec((chunk, hidden), lambda j: (0, 0)), pl.BlockSpec((block, hidden), lambda j: (j, 0)),
                  pl.BlockSpec((1, block), lambda j: (0, j))],
        out_specs=[pl.BlockSpec((chunk, block), lambda j: (0, j)), row, row, *maxima],
        out_shape=[jax.ShapeDtypeStruct((chunk, vocab), stored), vector, vector,
                   *[jax.ShapeDtypeStruct((steps * chunk,), jnp.float32)] * compact],
        scratch_shapes=[pltpu.VMEM((chunk,), jnp.float32) for _ in range(2)],
        compiler_params=_params(),
        cost_estimate=pl.CostEstimate(
            flops=2 * chunk * vocab * hidden, transcendentals=chunk * vocab * (2 if transform.tanh else 1),
            bytes_accessed=(vocab + chunk) * hidden * itemsize + chunk * vocab * jnp.dtype(stored).itemsize),
        name=f"tokamax_lm_head_chunk_logits_v{block}{'_compact' if compact else ''}",
    )(x, w, b)
    return (*out[:3], out[3] if compact else None)


def target_logits(x: jax.Array, w: jax.Array, b: jax.Array, targets: jax.Array, *, transform: LogitTransform,
                  bias: bool) -> jax.Array:
    """z at each row's target, float32 [chunk]: x . w_t (+ b_t) transformed (a target outside the vocabulary reads
    the last entry; the caller makes such a row NaN: `targets`)."""
    raw = jnp.einsum("rh,rh->r", x, jnp.take(w, targets, axis=0, mode="clip"), preferred_element_type=jnp.float32)
    if bias:
        raw = raw + jnp.take(b, targets, mode="clip")
    return transform(raw)[0]


def _gradient(shifted: jax.Array, dz: jax.Array | float, col: jax.Array, t: jax.Array, a: jax.Array, c: jax.Array,
              d: jax.Array | None) -> jax.Array:
    """G = (a p + c [col = t] + d) dz/dl, float32 [chunk, columns], p = e^shifted (z - lse), from the per-row vectors
    given as [chunk, 1]."""
    g = a * jnp.exp(shifted)
    if d is not None:
        g = g + d
    g = g + jnp.where(col == t, c, 0.0)
    return g if isinstance(dz, float) and dz == 1.0 else g * dz


def _shifted(stored: jax.Array, lse: jax.Array, m_j: jax.Array | None, transform: LogitTransform
             ) -> tuple[jax.Array, jax.Array | float]:
    """(z - lse, dz/dl) from the stored logits: the raw ones (float32), or with the block's maxima `m_j` the compact
    z - m_j (bf16; the transform then has no soft cap, dz/dl its constant scale); lse and m_j as [chunk, 1]."""
    if m_j is None:
        z, dz = transform(stored)
        return z - lse, dz
    return stored.astype(jnp.float32) + (m_j - lse), transform.pre * transform.post


def _accumulator_copies(ins: tuple, slots: tuple, sems, j, block: int):  # noqa: ANN001, ANN202
    """copy(step, slot, out): the async copies of dW's block `step` between HBM and VMEM slot `slot` of each
    accumulator array (in: HBM to VMEM; out: back), one semaphore per array, slot and direction."""
    def copy(step, slot, out: bool) -> list:  # noqa: ANN001
        rows = pl.ds(pl.multiple_of(step * block, block), block)
        return [pltpu.make_async_copy(v.at[slot], h.at[rows], sems.at[1, i, slot]) if out
                else pltpu.make_async_copy(h.at[rows], v.at[slot], sems.at[0, i, slot])
                for i, (h, v) in enumerate(zip(ins, slots, strict=True))]
    return copy


def gradients(raw: jax.Array, x: jax.Array, w: jax.Array, targets: jax.Array, lse: jax.Array, a: jax.Array,
              c: jax.Array, d: jax.Array, acc: accumulate.Accumulator | None, *, transform: LogitTransform, block: int,
              maxima: jax.Array | None = None, db: bool = True, smooth: bool = True
              ) -> tuple[accumulate.Accumulator | None, jax.Array, jax.Array]:
    """Over the whole blocks of the vocabulary: (acc + G.T x in those rows, or None for a frozen head; G w float32
    [chunk, hidden]; G's column sums float32 [1, whole blocks' entries]) with G = (a p + c [j = t] + d) dz/dl,
    p = e^(z - lse), per-row a, c, d float32 [chunk] (0 in a row that adds nothing; d read only with `smooth`; the
    column sums made only with `db`, else zeros) and z, dz/dl the transform of
    `raw` (or, with `maxima`, `raw` is `logits`' compact z - m_j). `acc`: dW's float32 accumulator or `fused`'s pair,
    updated in place (aliased): its blocks are copied in and out by the kernel itself, two slots deep (the next
    block's fetch and this one's write-back under this step's matmuls), so that the grid never names a block past its
    end. x is copied into VMEM once, and dx out of it once at the end. The entries past the whole blocks are
    `tail`'s."""
    chunk, hidden = x.shape
    vocab = w.shape[0]
    steps = vocab // block
    arrays = () if acc is None else tuple(acc) if isinstance(acc, tuple) else (acc,)
    bits = jnp.finfo(x.dtype).nmant if len(arrays) == 2 else 0
    n = len(arrays)
    compact = maxima is not None
    ins = 8 + compact  # the inputs before the accumulator's

    def kernel(t_ref, lse_ref, a_ref, c_ref, d_ref, raw_ref, *refs) -> None:  # noqa: ANN001
        # refs: [the block's maxima], x (HBM), w's block, the accumulator's HBM inputs (aliased to its outputs, which
        # are the same buffers), its outputs, dx (HBM), db, then x's and dx's VMEM, the accumulator's VMEM slots
        # and its semaphores, x's and dx's semaphores
        max_ref, refs = (refs[0], refs[1:]) if compact else (None, refs)
        x_hbm, w_ref = refs[:2]
        outs, dx_hbm = refs[2 + n:2 + 2 * n], refs[2 + 2 * n]
        db_ref, refs = (refs[3 + 2 * n], refs[4 + 2 * n:]) if db else (None, refs[3 + 2 * n:])
        x_ref, dx_ref = refs[:2]
        slots, sems, io = refs[2:2 + n], refs[2 + n] if n else None, refs[-1]
        j = pl.program_id(0)
        copy = _accumulator_copies(outs, slots, sems, j, block) if n else None
        x_in = pltpu.make_async_copy(x_hbm, x_ref, io.at[0])
        dx_out = pltpu.make_async_copy(dx_ref, dx_hbm, io.at[1])

        def each(copies: list, action: str) -> None:
            for c_ in copies:
                getattr(c_, action)()

        @pl.when(j == 0)
        def _init() -> None:
            x_in.start()
            dx_ref[...] = jnp.zeros_like(dx_ref)
            if n:
                each(copy(0, 0, False), "start")
            x_in.wait()

        m_j = max_ref[...][:, None] if compact else None
        shifted, dz = _shifted(raw_ref[...], lse_ref[...][:, None], m_j, transform)
        col = jax.lax.broadcasted_iota(jnp.int32, shifted.shape, 1) + j * block
        g = _gradient(shifted, dz, col, *(ref[...][:, None] for ref in (t_ref, a_ref, c_ref)),
                      d_ref[...][:, None] if smooth else None)
        if db:
            db_ref[...] = jnp.sum(g, axis=0, keepdims=True)
        g_low = g.astype(x_ref.dtype)
        slot, other = j % 2, (j + 1) % 2
        dx_ref[...] += _contract(g_low, w_ref[...], (1, 0))
        if n:  # dW's block waited for after dx's product, not between it and dW's (8 ms at Gemma 3's head)
            @pl.when(j + 1 < steps)
            def _fetch_next() -> None:
                @pl.when(j > 0)
                def _free() -> None:  # the other slot's write-back (the block before) done before it is refilled
                    each(copy(j - 1, other, True), "wait")
                each(copy(j + 1, other, False), "start")

            each(copy(j, slot, False), "wait")
            part = _contract(g_low, x_ref[...], (0, 0))
            views = tuple(s_.at[slot] for s_ in slots)
            accumulate.add_in_kernel(views, views, part, bits)

        @pl.when(j == steps - 1)
        def _write_dx() -> None:
            dx_out.start()
            dx_out.wait()

        if not n:
            return
        each(copy(j, slot, True), "start")

        @pl.when(j == steps - 1)
        def _drain() -> None:
            @pl.when(j > 0)
            def _before() -> None:
                each(copy(j - 1, other, True), "wait")
            each(copy(j, slot, True), "wait")

    row = pl.BlockSpec((chunk,), lambda j: (0,))
    hbm = pl.BlockSpec(memory_space=pl.ANY)
    itemsize = x.dtype.itemsize
    scratch = [pltpu.VMEM((chunk, hidden), x.dtype), pltpu.VMEM((chunk, hidden), jnp.float32)]
    scratch += [pltpu.VMEM((2, block, hidden), a_.dtype) for a_ in arrays]
    scratch += [pltpu.SemaphoreType.DMA((2, n, 2))] * (n > 0) + [pltpu.SemaphoreType.DMA((2,))]
    out = pl.pallas_call(
        kernel,
        grid=(steps,),
        in_specs=[row] * 5 + [pl.BlockSpec((chunk, block), lambda j: (0, j)),
                              *[pl.BlockSpec((chunk,), lambda j: (j,))] * compact, hbm,
                              pl.BlockSpec((block, hidden), lambda j: (j, 0)), *[hbm] * n],
        out_specs=[*[hbm] * n, hbm, *[pl.BlockSpec((1, block), lambda j: (0, j))] * db],
        out_shape=[*(jax.ShapeDtypeStruct(a_.shape, a_.dtype) for a_ in arrays),
                   jax.ShapeDtypeStruct((chunk, hidden), jnp.float32),
                   *[jax.ShapeDtypeStruct((1, steps * block), jnp.float32)] * db],
        scratch_shapes=scratch,
        input_output_aliases={ins + i: i for i in range(n)},
        compiler_params=_params(),
        cost_estimate=pl.CostEstimate(
            flops=(2 + 2 * (n > 0)) * chunk * steps * block * hidden,
            transcendentals=chunk * steps * block * (2 if transform.tanh else 1),
            bytes_accessed=(steps * block + chunk) * hidden * itemsize + chunk * steps * block * raw.dtype.itemsize
            + 2 * sum(a_.size * a_.dtype.itemsize for a_ in arrays) * steps * block // vocab),
        name=f"tokamax_lm_head_chunk_gradients_v{block}{'_compact' if compact else ''}",
    )(targets, lse, a, c, d, raw, *[maxima] * compact, x, w, *arrays)
    dw = None if not n else tuple(out[:n]) if n == 2 else out[0]
    return dw, out[n], out[n + 1] if db else jnp.zeros((1, steps * block), jnp.float32)


def tail(raw: jax.Array, x: jax.Array, w: jax.Array, targets: jax.Array, lse: jax.Array, a: jax.Array, c: jax.Array,
         d: jax.Array, acc: accumulate.Accumulator | None, dx: jax.Array, *, transform: LogitTransform, start: int,
         maxima: jax.Array | None = None) -> tuple[accumulate.Accumulator | None, jax.Array, jax.Array]:
    """`gradients` for the entries from `start` (past its whole blocks) in XLA: (acc with G.T x added in those rows,
    dx + G w float32, G's column sums float32 [entries]); `dx` float32 [chunk, hidden]. With `maxima`, `raw` is
    compact and those entries lie in `logits`' last block (its maxima the last [chunk])."""
    m_j = None if maxima is None else maxima[-lse.shape[0]:][:, None]
    shifted, dz = _shifted(raw[:, start:], lse[:, None], m_j, transform)
    col = jax.lax.broadcasted_iota(jnp.int32, shifted.shape, 1) + start
    g = _gradient(shifted, dz, col, *(v[:, None] for v in (targets, a, c, d)))
    g_low = g.astype(x.dtype)
    dx = dx + _contract(g_low, w[start:], (1, 0))
    if acc is not None:
        part = accumulate.add(jax.tree.map(lambda arr: arr[start:], acc), g_low, x, kernel=False)
        acc = jax.tree.map(lambda arr, p: jax.lax.dynamic_update_slice_in_dim(arr, p, start, 0), acc, part)
    return acc, dx, jnp.sum(g, axis=0)

