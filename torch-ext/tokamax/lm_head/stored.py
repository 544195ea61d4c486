"""The LM head's statistics in plain XLA with the softmax stored: three matmuls, as XLA's formulation, holding p and
its gradient in x's dtype where XLA holds float32 logits and theirs. TRL's path (log-probabilities, the entropy,
...) cannot know its cotangents in the forward, so the kernels' backward computes the logits again (twice: once per
gradient kernel, five matmuls in all, 1.75x XLA's time on the v5e at Gemma 3 4B's head). Here the forward keeps
what the backward needs instead.

Per row r, with z = transform(x @ w.T + b) and p = softmax(z), every differentiable statistic's gradient to z
is p_j (a + b log p_j) + c [j = target] + d for per-row (a, b, c, d) made of the cotangents (`stats.coefficients`),
and a scale or temperature multiplies it by dz/dl, one number. So p alone, [rows, vocab] in x's dtype, is the
residual:

- `forward`: a `lax.scan` over chunks of `chunk` rows (the rows padded with zeros to a multiple): per chunk the
  float32 logits (one matmul in the operands' dtype, float32 out), the six statistics the forward kernel gives
  (`kernels.FORWARD_OUTPUTS`' order) and p in x's dtype. No chunk holds more than its own [chunk, vocab] logits.
- `backward`: G = dz/dl (p (a + b log p) + c [j = target] + d) in float32, rounded once to x's dtype (as TRL
  rounds its logits' gradient to the compute dtype), then dx = G @ w and dw = G.T @ x with float32 accumulation,
  no loop; db = sum_r G in float32. In bf16, p is rounded once (2^-9 relative): log p to 2^-9 absolute, so G's
  error is p's. An entry of p below bf16's smallest number (z more than ~87 under the row's log-sum-exp) is 0,
  and so is its term p log p.

A soft cap makes dz/dl differ per logit (1 - tanh^2), which p does not give back to bf16's precision near the
cap: `stats.statistics` refuses the scheme there (the kernels take it). Temporaries (`temporaries`): p, G and one
chunk's float32 logits; `chunk` takes the largest chunk whose temporaries fit an eighth of HBM. `cost` is the
scheme's roofline (`tools.chip bench` times it as "tokamax (stored)" beside the kernels and XLA).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import roofline
from .blocks import round_up
from .cost import HBM_SHARE, STATISTICS_SECONDS, StoredCost
from .softmax import log_softmax
from .transform import LogitTransform

CHUNKS = (1024, 512, 256)
"""Chunk rows, largest first: each chunk reads the whole weight (1.24 GB at Qwen3 8B's head in bf16), so at 256
rows a chunk's matmul (1.9 ms on the v5e) is about as long as that read (2.1 ms), and smaller chunks only lose."""
LOGITS_HELD = 1
"""[chunk, vocab] float32 arrays a chunk holds: its logits (XLA fuses what is made from them into the reductions and
p's write; distillation's stored scheme, two models' logits, was laid out so on the v5e to the byte)."""
WEIGHT_COPIED = ("TPU7x",)
"""Chips whose compiler holds a copy of the weight ([vocab, hidden] in its dtype) in the buffer G takes later: the
compile-only v7x (Qwen3 8B's head: 2,390 MiB at 2,048 rows, 3,000 at 4,096)."""
LOGITS_IN_GRADIENT = ("TPU v5 lite", "TPU v6 lite")
"""Chips whose compiler puts a chunk's float32 logits in the buffer G takes later (they are dead by then): the
v5e's own (Qwen3 8B's head at 2,048 rows: 1.159 GiB of temporaries, p and G to the MiB; Gemma 3 4B's at 8,192
rows 12.0 GiB as the buffer assignment holds them, benchmarks/measured/v5e-2026-12-04-bench-lm_head-2cd2df2.json)
and the compile-only v6e (1,187 MiB at Qwen3 8B's 2,048 rows)."""


def chunk_for(rows: int, chunk: int) -> int:
    """`chunk` capped at the rows rounded up to 8 (one chunk, barely padded, for fewer rows; 8 for none)."""
    return min(chunk, round_up(max(rows, 1), 8))


def temporaries(rows: int, vocab: int, itemsize: int, chunk: int, hidden: int = 0, kind: str = "") -> int:
    """Bytes the scheme holds beyond its operands and outputs: p at the padded rows in x's dtype; the backward's G
    as large, which XLA computes in one fusion that dx's and dw's matmuls read and does not write over p (on
    `WEIGHT_COPIED` chips a copy of the weight takes that buffer first: the larger of the two); and `LOGITS_HELD`
    chunks' float32 logits, in G's buffer on `LOGITS_IN_GRADIENT` chips (the larger of the two), beside it
    elsewhere (the most a chip not yet laid out can hold)."""
    chunk = chunk_for(rows, chunk)
    wide = round_up(rows, chunk) * vocab * itemsize
    gradient = max(wide, vocab * hidden * itemsize) if kind in WEIGHT_COPIED else wide
    logits = LOGITS_HELD * chunk * vocab * 4
    return wide + (max(gradient, logits) if kind in LOGITS_IN_GRADIENT else gradient + logits)


def chunk(rows: int, vocab: int, itemsize: int, on: roofline.Chip, hidden: int = 0) -> int:
    """The largest chunk of `CHUNKS` whose temporaries fit 1/`HBM_SHARE` of `on`'s HBM (the LM head's rule), else the
    smallest (asked for, the scheme runs past the share: p and G alone are 2 x rows x vocab)."""
    sizes = [chunk_for(rows, c) for c in CHUNKS]
    return next((c for c in sizes if temporaries(rows, vocab, itemsize, c, hidden, on.kind) <= on.hbm // HBM_SHARE),
                sizes[-1])


def cost(rows: int, hidden: int, vocab: int, itemsize: int, chunk: int, *, backward: bool = True,
         weight_grad: bool = True) -> StoredCost:
    """Flops: the logits, then dx = G @ w and dw = G.T @ x (not dw's for a frozen head; neither without
    `backward`). Bytes: per chunk the weight and bias read, x's chunk read, its float32 logits written and read
    once, p written in x's dtype (where there is a backward: a forward alone does not make it), six per-row
    vectors; the backward reads p and writes G in x's dtype, reads G and w and writes dx, reads G and x and writes
    dw (in w's dtype) and db."""
    chunk = chunk_for(rows, chunk)
    padded = round_up(rows, chunk)
    w, x, wide = vocab * hidden * itemsize, padded * hidden * itemsize, padded * vocab * itemsize
    moved = padded // chunk * (w + vocab * 4) + x + 2 * padded * vocab * 4 + 6 * padded * 4
    flops = 2 * padded * vocab * hidden
    if backward:
        moved += wide + 2 * wide + wide + w + x  # p written; p read, G written; G and w read, dx written
        flops += 2 * padded * vocab * hidden
        if weight_grad:
            moved += wide + x + w + vocab * 4  # G and x read, dw and db written
            flops += 2 * padded * vocab * hidden
    # the forward's statistics over each logit: the kernels' measured figure for the same reductions (a prediction
    # until the chip times this scheme)
    return StoredCost(chunk, flops, moved, temporaries(rows, vocab, itemsize, chunk, hidden), padded * vocab,
                      STATISTICS_SECONDS)


def _chunk(x: jax.Array, w: jax.Array, b: jax.Array, targets: jax.Array, transform: LogitTransform
           ) -> tuple[tuple[jax.Array, ...], jax.Array]:
    raw = jax.lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) + b
    z, _ = transform(raw)
    log_p, lse, entropy = log_softmax(z)
    vocab = z.shape[1]
    target_logit = jnp.take_along_axis(z, jnp.clip(targets, 0, vocab - 1)[:, None], axis=1)[:, 0]
    log_sum_sq = jax.nn.logsumexp(2.0 * log_p, axis=1)
    top1 = (jnp.argmax(z, axis=1) == targets).astype(jnp.float32)  # argmax: the first maximum
    return (lse, target_logit, entropy, log_sum_sq, jnp.sum(z, axis=1), top1), jnp.exp(log_p).astype(x.dtype)


def forward(x: jax.Array, w: jax.Array, b: jax.Array, targets: jax.Array, transform: LogitTransform, chunk: int
            ) -> tuple[tuple[jax.Array, ...], jax.Array]:
    """(lse, target_logit, entropy, log_sum_sq_probs, sum_logits, top1: float32 [rows] each; p [rows padded to
    `chunk`, vocab] in x's dtype) for x [rows, hidden], w [vocab, hidden], b float32 [vocab], targets int32
    [rows] (one outside the vocabulary reads a clipped column: the caller makes its row NaN)."""
    if transform.tanh:
        raise ValueError("tokamax lm_head: the stored scheme takes no soft cap (the kernels do)")
    rows = x.shape[0]
    padded = round_up(rows, chunk)
    xs = jnp.pad(x, ((0, padded - rows), (0, 0))).reshape(padded // chunk, chunk, x.shape[1])
    ts = jnp.pad(targets.astype(jnp.int32), (0, padded - rows)).reshape(padded // chunk, chunk)

    def step(carry: None, inputs: tuple[jax.Array, jax.Array]) -> tuple[None, tuple]:
        return carry, _chunk(inputs[0], w, b[None], inputs[1], transform)

    _, (vectors, p) = jax.lax.scan(step, None, (xs, ts))
    return tuple(v.reshape(padded)[:rows] for v in vectors), p.reshape(padded, w.shape[0])


def backward(x: jax.Array, w: jax.Array, p: jax.Array, targets: jax.Array, coefficients: tuple[jax.Array, ...],
             transform: LogitTransform, *, weight_grad: bool = True
             ) -> tuple[jax.Array, jax.Array | None, jax.Array | None]:
    """(dx in x's dtype, dw in w's dtype, db float32 [vocab]; dw and db None where not `weight_grad`) from
    `forward`'s p and the per-row (a, b, c, d), float32 [rows] each (0 in rows that add nothing)."""
    rows, padded = x.shape[0], p.shape[0]
    a, b, c, d = (jnp.pad(v.astype(jnp.float32), (0, padded - rows))[:, None] for v in coefficients)
    t = jnp.pad(targets.astype(jnp.int32), (0, padded - rows))[:, None]
    p32 = p.astype(jnp.float32)
    log_p = jnp.where(p32 > 0, jnp.log(jnp.where(p32 > 0, p32, 1.0)), 0.0)
    is_target = jax.lax.broadcasted_iota(jnp.int32, p.shape, 1) == t
    g = (p32 * (a + b * log_p) + jnp.where(is_target, c, 0.0) + d) * (transform.pre * transform.post)
    g_low = g.astype(x.dtype)  # G, [rows, vocab]: XLA holds it beside p (`temporaries`)
    dx = jax.lax.dot_general(g_low, w, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    dx = dx[:rows].astype(x.dtype)
    if not weight_grad:
        return dx, None, None
    xp = jnp.pad(x, ((0, padded - rows), (0, 0)))
    dw = jax.lax.dot_general(g_low, xp, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    return dx, dw.astype(w.dtype), jnp.sum(g, axis=0)
