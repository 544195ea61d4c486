"""A cross-entropy that is the last op of a step, with its gradients computed in the forward: Liger's
fused linear cross-entropy, on TPU.

Where the loss is a weighted sum of per-token losses fixed in the forward (transformers' labels
path: each kept token's cross-entropy, optionally label-smoothed and with z-loss, summed; the mean is
a scalar division after), d(loss)/d(logits) is known as soon as a row's log-sum-exp is, so the
forward can give dx, dW and db at once and the backward only scales them by the loss's cotangent.

Three ways, one result (`loss_and_grads`):
- **chunked** (Liger's): per chunk of rows, the [chunk, vocab] float32 logits in HBM from one XLA
  matmul, the gradient block G from them, dx = G @ w and dW += G.T @ x (float32, in HBM): three
  vocabulary-sized matmuls per step, for a float32 dW or two chunks' float32 logits of temporaries
  (`temporaries`: the larger, as the chip's compiler lays them out). With `accumulator_kernel`, each chunk's dW
  is added by a Pallas kernel that streams the accumulator under its matmul (`accumulate`): 14-19% faster on the
  v5e at the same chunks; with it and `pair_accumulator`, dW accumulates as two arrays of w's dtype (the float32
  sum rounded, and what that rounding left; the high half is dW itself), with `scaled_low` the pair's low half
  int8 in 1/256ths of dW's last place (`accumulate.SCALED`). `choose_scheme` (`Scheme`) takes the fastest way
  that fits the share (the streamed one below, where it fits), elsewhere XLA's float32 accumulator. XLA adding
  dW into the pair (no accumulate kernel) was retired (issue 72): the rule picked it at no zoo shape on the v5e,
  v6e or v7x, and it was never the fastest in a committed chip run (192.5 against XLA's float32 197.4 ms at
  Llama 3 8B's head in chunks of 1024, the kernel's pair 164.6 there in a later run); `pair_accumulator` without
  the kernel is refused.
- **streamed**: the chunked scheme's chunks in two Pallas kernels (`streamed`): the logits stored compact (bf16 less
  the running maximum), G made in VMEM, dW into the pair in place. On the v5e the fastest way within the share at
  all three heads of the chip benchmark (`STREAMED`), so `choose_scheme` takes it wherever it fits (`streamed_cost`)
  and the logits can be compact (no soft cap, no bias).
- **kernels**: our Pallas kernels (`kernels`): the statistics, then dx and dW with the loss's per-row
  coefficients: five matmuls (the backward kernels recompute the logits), about 1 MiB of temporaries.

A kept row's target outside the vocabulary gets the kernels' treatment by every way (`targets`):
refused where it is on the host, else a NaN loss and no gradient from that row.

`choose` takes the chunked scheme where its temporaries fit `HBM_SHARE` of the chip's HBM and its
roofline (`cost`) beats the kernels' on the chip, else the kernels. Per token r with weight m_r (0 for
an ignored token), label t, log-sum-exp L and logits z over vocab V:
    loss_r = m_r [(1 - eps) (L - z_t) + eps (L - sum_j z_j / V) + zl L^2]
    d loss_r / d z_j = m_r [(1 + 2 zl L) p_j - (1 - eps) [j = t] - eps / V]
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .. import checks, hosts, roofline
from . import accumulate
from . import plan as plans
from . import streamed as streaming
from . import targets as target_checks
from .blocks import LANES, round_up
from .cost import HBM_SHARE, Chip, chip
from .stats import _check, plan_for, row_stats, row_stats_vjp
from .transform import LogitTransform

STREAMED = "v5e-2026-12-06-bench-lm_head-streamed-6c4eeed.json"
"""The record (benchmarks/measured/) that `streamed_cost` rests on: on the v5e the streamed kernels with compact logits
and dW in the 16-bit pair, in chunks of 1024, ran within 4% of their roofline at all three heads of the chip benchmark,
faster than the other ways' fastest there (timed in the same run, "streamed=False"): Gemma 3 4B's (8,192 x 2,560 ->
262,208) 199.4 ms in 1.76 GiB against 232.1 (XLA's 200.0 in 8.0 GiB), Llama 3 8B's 161.6 against 164.6 (XLA's 160.5),
Qwen3 8B's 378.1 against 390.7 (XLA's 394.9); so the model takes them wherever they fit. They got there when each
kernel stopped doing what the loss does not use (the target's logit is XLA's, one row of w a row; the sum of logits
is made only for label smoothing; the bias read only where there is one; the column mask only in the last block) and
the gradients kernel made dx's product before its wait on dW's block (Gemma 3's 223.3 ms at dcc176a, 214.7 with the
order alone). At hidden 2,048 (the record's unlisted heads, rows left past the whole chunks) neither way comes
within 1.15x of XLA: Qwen3 1.7B's at 4,100 rows 55.5 ms streamed, 56.7 the other ways' fastest (the model's
choice), XLA's 48.4."""
STREAMED_CHUNKS = (1024,)
"""Chunk rows the streamed way is offered at: the one the chip measured at all three heads (in 512 and 768 rows the
w and accumulator traffic per chunk was not hidden: 294.2 and 249.6 ms at Gemma 3's head with the float32
accumulator, v5e-2026-12-05-bench-lm_head-streamed-f98634e.json; 2048 takes blocks of 256 at hidden 2,560)."""
STREAMED_SCALED_SLOWDOWN = 1.09
"""The streamed kernels with the pair's low half in int8 against the 16-bit one: its vector work per entry of dW is
not hidden (the v5e: 8-10% slower at the heads where both fit)."""
CHUNKS = (4096, 2048, 1024)
"""Chunk rows the chunked scheme takes with XLA adding dW: below 1024, re-reading and re-writing the float32 dW per
chunk costs more HBM time than the two matmuls it serves (the v5e at Llama 3 8B's head: 231.5 ms in chunks of 512,
197.4 in 1024, 195.0 in 2048; at Qwen3 8B's 540.9, 466.0, 458.7)."""
KERNEL_CHUNKS = tuple(range(2048, 511, -256))
"""Chunk rows the chunked scheme takes with `accumulate`'s kernel adding dW: its accumulator traffic runs under the
matmul, so smaller chunks cost little time and hold less (the pair at Qwen3 8B's head fits an eighth of the v5e's
HBM at 512 rows, not at 1024). Every multiple of 256 from 512 to 2048, not only the powers of two: a head whose
chunk of 1024 is just past the share takes the largest that fits (Gemma 3's 262,208 entries at hidden 2,560 on the
v5e: 768 rows, where 512 leave the matmuls waiting on the accumulator's traffic)."""
ONE_CHUNK = "v5e-2026-12-07-lmhead-onechunk-256-bd81221-patched.json"
"""The record (benchmarks/measured/) of the chunked scheme's XLA way at one chunk of all the rows, offered where they
are fewer than `CHUNKS`' smallest (a prefill's 128 to 1,023; before, only the kernels ran there): one chunk is XLA's own
plain formulation (the v5e's compiler, compile-only, at 256 rows x 3,584 -> 152,064: the same program as the zoo's
float32-logits baseline, 148.6 MiB of temporaries, 3.91 GB moved, dW's matmul writing bf16 with the cotangent's scale
fused in), three matmuls reading w twice, where the kernels' five read it three times and are bound by their matmuls.
Forward and backward at 256 rows, medians: 6.65 ms against the kernels' 9.18 and XLA's 6.71 at Qwen2.5 7B's head,
13.68 against 19.07 and 13.63 at Qwen2.5 72B's (XLA's from the same session's run, whose file its time limit cut:
docs/zoo.md; `v5e-2026-12-07-zoo-shard6of56-6c78e5c.json` has XLA's at 6.67 and 13.72)."""
TAIL_ROWS = 16
"""The rows left after the whole chunks run as one more chunk of their own, padded to a multiple of this (a 16-bit
operand's sublane tile), rather than a whole chunk's worth: 8,192 rows in chunks of 768 compute 8,192 rows, not
8,448."""
SCALED_SLOWDOWN = 1.03
"""The accumulator kernel with the pair's low half in int8 (`accumulate.SCALED`) against its 16-bit low half, beyond
the bytes it saves: the scale's vector work per entry. On the v5e 1.6-3.9% slower in chunks of 1024 and 2048
(Llama 3 8B's head 168.7 against 164.6 ms at 1024; Qwen3 8B's 391.8 against 385.7), where the matmul bounds it; in
chunks of 512, bound by the accumulator's traffic, 12% faster (the bytes count that)."""
ACCUMULATOR_PASSES = 12
"""What the float32 dW accumulator costs beyond the roofline, in passes over it at the HBM bandwidth: XLA's
loop does not hide its read-modify-write behind the matmuls. Measured on the v5e (benchmarks/measured/
v5e-2026-12-04-bench-a9c94e4.json): the chunked scheme ran 29.8 ms over its roofline at Llama 3 8B's head in
chunks of 2048 (8.4 passes over its 2.1 GB accumulator), 60.7 and 67.1 ms at Qwen3 8B's in chunks of 8192 and
2048 (14.4 and 15.9 passes over 2.5 GB), and at its roofline in one chunk (no accumulator); 12 puts all four
within 8%. With smaller accumulators XLA hides more of it: at 4,096 rows of Qwen3 0.6B's to 4B's heads (0.6 to 1.6 GB,
`ROWS_RECORD`) these ways ran 1.20-1.32x faster than the model says; the streamed way was faster than any of them
all the same, so the overstatement takes nothing the chip has faster."""
KERNEL_UNHIDDEN = 0.5
"""The share of `accumulate`'s accumulator traffic past its own matmul's time that nothing hides (the chunk's other
two matmuls run before the kernel, not beside it): the roofline over the whole step hid it under all three, which
put the small chunks 3-15% under the chip. Fitted on the v5e (benchmarks/measured/
v5e-2026-12-05-bench-attention-lm_head-distill-286717f.json: Qwen3 8B's head in the 16-bit pair, chunks of 768, 1024
and 1280, 431.2, 385.9 and 369.9 ms, modelled 410, 378 and 369; Llama 3 8B's 183.8, 164.6 and 159.6, modelled 173, 159
and 156): every LM-head record since within 15% at 0.5 to 0.8, none at 1 (the chunks of 512 at 1b5b766 1.15-1.2).
Refitted with the pass making G (`KERNEL_G_SECONDS`), which the chunks of 512 carried before: 0.5 keeps every
accumulator kernel record within 15% (0.7 puts 1b5b766's chunks of 512 at 1.16-1.18)."""

KERNEL_G_SECONDS = 11.3e-12
"""Seconds per logit, on the v5e, of the vector pass that makes each chunk's G (p less the target's one-hot, in w's
dtype) for `accumulate`'s kernel: a Pallas call's operand is not fused into its producer, so XLA makes G in a loop
fusion of its own (the v5e's compiler: a bf16 [chunk, vocab] fusion before the kernel), where its own dW matmul takes
G as its input fusion and the streamed kernels make it in VMEM beside their matmuls. Its exponentials, compares and
selects are vector work no matmul hides. Fitted on the v5e at 4,096 rows of Qwen3 0.6B's, 1.7B's and 4B's heads
(`ROWS_RECORD`): the accumulator kernel's eighteen ways ran 3.4-10.7 ms past the roofline, 11.3 ps per logit on
average, where the streamed way ran within 4% of its own; without it the model took the accumulator kernel
there (24.13 ms modelled at Qwen3 0.6B's head, 32.91 measured) over the streamed way (24.46, 25.52). Other chips:
scaled by their matmul peak (`roofline.scaled`)."""
ROWS_RECORD = "v5e-2026-12-07-bench-lm_head_rows-235962c.json"
"""The record (benchmarks/measured/) of every way the rules weigh at 4,096 rows of small heads, XLA's beside them."""


@dataclasses.dataclass(frozen=True)
class ChunkedCost:
    """The chunked scheme's cost over a step (as `cost.KernelCost`'s roofline counts it)."""

    chunk: int
    flops: int
    bytes_accessed: int
    temp_bytes: int
    accumulator_bytes: int = 0  # dW's float32 accumulator, where there is more than one chunk
    kernel: bool = False  # dW added by `accumulate`'s kernel: its traffic under its own matmul
    pair: bool = False  # dW accumulated in the pair of w's dtype
    scaled: bool = False  # the pair's low half in int8 (`accumulate.SCALED`)
    chunks: int = 1
    kernel_flops: int = 0  # the kernel's matmul per chunk
    kernel_bytes: int = 0  # the accumulator's bytes the kernel reads and writes per chunk
    streamed: bool = False  # each chunk in `streamed`'s two kernels, the logits compact (`streamed_cost`)
    steps: int = 0  # the streamed kernels' grid steps over the call
    tail_flops: int = 0  # the chunk of the rows left past the whole chunks: its matmuls
    tail_bytes: int = 0  # and what it moves (w, the accumulator, its rows' arrays)
    zeroed_bytes: int = 0  # dW's accumulator zeroed before the first chunk (a kernel reads it in place)
    g_logits: int = 0  # the logits whose G a pass of its own makes for the accumulator kernel (`KERNEL_G_SECONDS`)

    def tail_seconds(self, on: Chip) -> float:
        """The rows left's chunk moves w and dW's accumulator as a whole chunk does, for a few rows' matmuls: what
        its own matmuls do not hide is not hidden by the others' matmuls."""
        return max(0.0, self.tail_bytes / on.hbm_bandwidth - self.tail_flops / on.peak_flops)

    def seconds(self, on: Chip) -> float:
        """The roofline of the step; XLA's accumulator `ACCUMULATOR_PASSES` times over, serial; the kernel's
        accumulator traffic past its own matmul's time, `KERNEL_UNHIDDEN` of it per chunk, and the pass making its G
        (`KERNEL_G_SECONDS`), serial. The streamed
        kernels: their roofline and grid steps (`STREAMED`), `STREAMED_SCALED_SLOWDOWN` over with the int8 low half.
        A kernel's accumulator zeroed before the first chunk, and the rows left's chunk (`tail_seconds`): serial."""
        if self.streamed:
            serial = self.tail_seconds(on) + self.zeroed_bytes / on.hbm_bandwidth
            return roofline.seconds(self.flops, self.bytes_accessed, self.steps, on, serial=serial) * (
                STREAMED_SCALED_SLOWDOWN if self.scaled else 1.0)
        if self.kernel:
            past = self.kernel_bytes / on.hbm_bandwidth - self.kernel_flops / on.peak_flops
            serial = KERNEL_UNHIDDEN * self.chunks * max(0.0, past) + self.zeroed_bytes / on.hbm_bandwidth \
                + self.g_logits * roofline.scaled(KERNEL_G_SECONDS, on)
        else:
            serial = ACCUMULATOR_PASSES * self.accumulator_bytes / on.hbm_bandwidth
        return roofline.seconds(self.flops, self.bytes_accessed, 0, on, serial=serial + self.tail_seconds(on)) * (
            SCALED_SLOWDOWN if self.scaled else 1.0)


def chunk_rows(rows: int, chunk: int) -> tuple[int, int]:
    """(chunks, rows computed) of `rows` in chunks of `chunk`: the whole chunks, and the rows left as one more chunk
    padded to `TAIL_ROWS`."""
    whole, left = divmod(rows, chunk)
    return whole + (left > 0), whole * chunk + round_up(left, TAIL_ROWS)


def cost(rows: int, hidden: int, vocab: int, itemsize: int, chunk: int, weight_grad: bool = True,
         pair: bool = False, kind: str = "", kernel: bool = False, scaled: bool = False) -> ChunkedCost:
    """Per chunk (`chunk_rows`: the whole chunks and the rows left, padded to `TAIL_ROWS`, as one more): w read by
    the logits' and dx's matmuls (a frozen head's too), x_c by the logits' and dW's,
    dx_c written, the logits written and read in float32, G written once and read by dx's and dW's matmuls;
    dW's float32 accumulator read and written per chunk (written only by the first). Three matmuls (two for
    a frozen head: no dW). `pair`: the accumulator as high and low in w's dtype, or with `scaled` (the kernel's
    only) low in int8, only the low half a temporary (the high half is dW). `kernel`: dW added by `accumulate`'s
    kernel, the same bytes streamed under the matmul (no `ACCUMULATOR_PASSES`). `pair` without `kernel` (XLA adding
    into the pair) is a retired way, costed only for its committed chip records."""
    chunks, computed = chunk_rows(rows, chunk)
    matmuls = 3 if weight_grad else 2
    w = vocab * hidden * itemsize
    per_row = matmuls * hidden * itemsize + 2 * vocab * 4 + matmuls * vocab * itemsize
    kernel = kernel and weight_grad
    scaled = scaled and pair and kernel
    low = 1 if scaled else itemsize
    accumulator = vocab * hidden * (itemsize + low if pair else 4) if weight_grad else 0
    # one chunk XLA adds into: dW's matmul writes w's dtype, the cotangent's scale and the rounding fused into it
    # (`ONE_CHUNK`), so no float32 accumulator is written
    written = vocab * hidden * itemsize if chunks == 1 and weight_grad and not kernel and not pair else accumulator
    moved = chunks * 2 * w + computed * per_row + (2 * chunks - 2) * accumulator + written
    # with rows left after the whole chunks, the whole chunks' dx is a temporary until it is joined to the rest's
    # (the v5e: Qwen3 8B's 16,384 rows in chunks of 1280, 120 MiB more than without)
    joined = (rows // chunk) * chunk * hidden * itemsize if rows % chunk and rows > chunk else 0
    tail = computed - rows // chunk * chunk if rows % chunk and rows > chunk else 0
    return ChunkedCost(chunk, matmuls * 2 * computed * vocab * hidden, moved,
                       temporaries(chunks, chunk, vocab, accumulator, pair, kind, computed * hidden * itemsize,
                                   kernel, itemsize, vocab * hidden * low) + joined,
                       accumulator if chunks > 1 else 0, kernel, pair and weight_grad, scaled, chunks,
                       2 * (computed // chunks) * vocab * hidden, 2 * accumulator,
                       tail_flops=matmuls * 2 * tail * vocab * hidden,
                       tail_bytes=(2 * w + tail * per_row + 2 * accumulator) if tail else 0,
                       zeroed_bytes=accumulator if kernel and chunks > 1 else 0,
                       g_logits=computed * vocab if kernel else 0)


LAID_OUT_ON_CHIP = ("TPU v5 lite",)
"""Chips whose own compiler's layout of the chunked scheme was measured (`temporaries`)."""


def temporaries(chunks: int, chunk: int, vocab: int, accumulator: int, pair: bool = False, kind: str = "",
                rows_bytes: int = 0, kernel: bool = False, itemsize: int = 2, low_half: int = 0) -> int:
    """The chunked scheme's temporaries: a float32 dW accumulator (the pair's low half, `low_half` bytes), up to two
    chunks' float32 logits, and dx's chunks before they are cut to the rows (`rows_bytes`).

    On the chips of `LAID_OUT_ON_CHIP` as their own compiler lays them out (`memory_analysis()` of the call
    compiled on the v5e, benchmarks/measured/v5e-2026-12-04-bench-lm_head-9aff1ec.json and -bf5a22b.json): with
    a float32 accumulator, the larger of it and two chunks' logits (one chunk's where there is one: no
    accumulator); with the pair, its low half and two chunks' logits; all fourteen measured at Llama 3 8B's and
    Qwen3 8B's heads (chunks of 512 to 8192) to the byte's rounding. Elsewhere the sum of all three, the most the
    compile-only topologies laid out (v7x: the accumulator and two chunks' logits; v5e compile-only: one chunk's).
    Where the logits outweigh the accumulator (4,096 rows of Qwen3 0.6B's head in chunks of 1,024, `ROWS_RECORD`)
    the chip held both, 1.87 GB against this 1.24: not yet modelled, and not the way the rule takes there
    (tests/jax/lm_head/test_rows_records.py).

    With `kernel` (`accumulate`), as the v5e's compiler assigns the buffers (its buffer assignment, what the
    runtime reserves: the first benchmarks/measured/ bench-lm_head run that reads it, chunks of 512 to 2048, float32
    and pair, both heads, to the MiB): the float32 accumulator beside one chunk's G in w's dtype; the pair's low
    half beside one chunk's float32 logits and its G (the high half is dW, the output); and x's chunk. Its
    `memory_analysis()` says more there (a second chunk's logits and G, or the high half): Gemma 3 4B's stored
    statistics ran on the v5e where that figure (16.0 GiB) was past the chip's 15.75 GiB and the assigned one
    12.0. Elsewhere the sum, as without the kernel, with the pair's high half."""
    logits = min(chunks, 2) * chunk * vocab * 4
    held = (low_half if pair else accumulator) if chunks > 1 else 0
    if kernel and chunks > 1:
        if kind in LAID_OUT_ON_CHIP:
            x_chunk = rows_bytes // chunks
            gradient = chunk * vocab * itemsize
            return (held + chunk * vocab * 4 if pair else accumulator) + gradient + x_chunk
        return accumulator + logits + rows_bytes
    if kind in LAID_OUT_ON_CHIP:
        return held + logits if pair else max(held, logits)
    return held + logits + rows_bytes


class Scheme(NamedTuple):
    """The labels path's scheme for a call: the chunked one at `chunk` rows (None: the kernels), dW added by
    `accumulate`'s kernel or by XLA, into a float32 accumulator or the pair; or each chunk in `streamed`'s kernels."""

    chunk: int | None
    kernel: bool = False
    pair: bool = False
    scaled: bool = False  # the pair's low half in int8 (`accumulate.SCALED`), with the kernel or streamed
    streamed: bool = False  # the chunks in `streamed`'s two kernels, the logits compact, dW in the pair


def _ways(chunk: int, rows: int, hidden: int, vocab: int, itemsize: int, chip: Chip, weight_grad: bool,
          soft_cap: bool = False, streamed: bool = True, bias: bool = False) -> list[ChunkedCost]:
    """The chunked scheme's costs at `chunk` rows, one per way of adding dW offered there (`Scheme`'s kernel and
    pair): XLA's float32 accumulator at `CHUNKS`; on the chips whose compiler's layout of the accumulator kernel
    was measured (`LAID_OUT_ON_CHIP`) and where its VMEM holds the chunk, the kernel into a float32 accumulator or
    the pair (its low half in w's 16-bit dtype or in int8) at `KERNEL_CHUNKS`, and there `streamed`'s kernels with
    compact logits into the pair at `STREAMED_CHUNKS` (16-bit operands, no soft cap and no `bias`:
    `streamed.compacts`, a vocabulary block that fits the chip's VMEM beside the chunk; `streamed` False: not). XLA
    adding into the pair is retired (the module's docstring)."""
    ways = [(False, False, False)] * (chunk in CHUNKS or 0 < rows == chunk < CHUNKS[-1])
    if weight_grad and chip.kind in LAID_OUT_ON_CHIP and chunk in KERNEL_CHUNKS \
            and accumulate.fits(chunk, hidden, vocab, itemsize, chip.vmem, vocab % LANES != 0):
        ways += [(True, False, False), (True, True, False)] + [(True, True, True)] * (itemsize == 2)
    costs = [cost(rows, hidden, vocab, itemsize, chunk, weight_grad, pair=p, kind=chip.kind, kernel=k, scaled=q)
             for k, p, q in ways]
    if streamed and weight_grad and chip.kind in LAID_OUT_ON_CHIP and chunk in STREAMED_CHUNKS and itemsize == 2 \
            and not soft_cap and not bias and hidden % LANES == 0:
        for scaled in (False, True):
            acc_bytes = streaming.accumulator_bytes(itemsize, True, scaled)
            block = streaming.block_for(chunk, hidden, vocab, itemsize, chip.vmem, acc_bytes, compact=True)
            if block:
                costs.append(streamed_cost(rows, hidden, vocab, itemsize, chunk, block, scaled))
    return costs


def streamed_cost(rows: int, hidden: int, vocab: int, itemsize: int, chunk: int, block: int, scaled: bool
                  ) -> ChunkedCost:
    """`streamed`'s kernels with compact logits and dW in the pair, per chunk (the rows left as one more, padded to
    `streamed.compact_rows`): w read by both kernels, dW's pair read and written, the chunk's compact logits written
    and read, x read twice and dx written; three matmuls; grid steps over the vocabulary in blocks of `block`, both
    kernels. Temporaries: one chunk's compact logits (and the rows left's, where they run as a chunk of their own)
    and the pair's low half (the high half is dW), and the whole chunks' dx until it is joined to the rest's; as the
    v5e laid them out within 16 MiB at all three heads (benchmarks/measured/, `STREAMED`)."""
    whole, left = divmod(rows, chunk)
    if left and streaming.compact_rows(left) >= chunk:  # in the scan as one more whole chunk (`_chunked`)
        whole, left = whole + 1, 0
    chunks = whole + (left > 0)
    computed = whole * chunk + (streaming.compact_rows(left) if left else 0)
    low = 1 if scaled else itemsize
    moved = chunks * vocab * hidden * (2 * itemsize + 2 * (itemsize + low)) \
        + computed * (2 * vocab * jnp.dtype(streaming.COMPACT).itemsize + 3 * hidden * itemsize)
    joined = whole * chunk * hidden * itemsize if left and whole else 0
    # the rows left's own logits beside the scan's (the v5e held both at Llama 3.2 1B's 1,500 rows)
    temp = (chunk + (computed - whole * chunk)) * vocab * jnp.dtype(streaming.COMPACT).itemsize \
        + vocab * hidden * low + joined
    tail = computed - whole * chunk if left and whole else 0
    per_row = 2 * vocab * jnp.dtype(streaming.COMPACT).itemsize + 3 * hidden * itemsize
    return ChunkedCost(chunk, 6 * computed * vocab * hidden, moved, temp, pair=True, scaled=scaled, chunks=chunks,
                       streamed=True, steps=chunks * 2 * -(-vocab // block), tail_flops=6 * tail * vocab * hidden,
                       zeroed_bytes=vocab * hidden * (itemsize + low),
                       tail_bytes=(vocab * hidden * (4 * itemsize + 2 * low) + tail * per_row) if tail else 0)


SMALL_BUFFERS = 64 << 20
"""What the compiler holds beside the arrays `temporaries` counts (per-row vectors, its small buffers: within 64 MiB
of every chunked record on the v5e), counted against the share so that a scheme at its edge is not taken."""


def _fastest(costs: list[ChunkedCost], chip: Chip) -> ChunkedCost | None:
    """The fastest of `costs` whose temporaries and `SMALL_BUFFERS` fit `HBM_SHARE` of the chip's HBM (among equals
    the larger chunk, then the smaller temporaries), or None."""
    fitting = [c for c in costs if c.temp_bytes + SMALL_BUFFERS <= chip.hbm // HBM_SHARE]
    return min(fitting, key=lambda c: (c.seconds(chip), -c.chunk, c.temp_bytes)) if fitting else None


def _scheme(c: ChunkedCost) -> Scheme:
    return Scheme(c.chunk, c.kernel, c.pair, c.scaled, c.streamed)


def offered_chunks(rows: int) -> list[int]:
    """The chunks the chunked scheme is weighed at for `rows` (`choose_scheme`, and `tokamax.explain`'s alternatives):
    those no larger than the rows (the rows left past the whole chunks run as one more), and fewer rows than the
    smallest of `CHUNKS` as one chunk of their own too (`ONE_CHUNK`: XLA's plain formulation)."""
    chunks = [c for c in sorted({*CHUNKS, *KERNEL_CHUNKS}, reverse=True) if c <= rows]
    return chunks + [rows] * (0 < rows < CHUNKS[-1] and rows not in chunks)


def choose_scheme(rows: int, hidden: int, vocab: int, itemsize: int, chip: Chip, weight_grad: bool = True,
                  soft_cap: bool = False, streamed: bool = True, bias: bool = False) -> Scheme:
    """The chunked scheme's fastest way (`_ways`; `soft_cap`: the transform has one, `bias`: the head has one, so no
    compact logits; `streamed` False: the streamed way not offered) at the chunk whose cost is least, among those
    that fit the share, where it beats the kernels' roofline; else the kernels (`Scheme(None)`)."""
    plan = plans.choose(rows, hidden, vocab, itemsize, chip)
    costs = plan.costs(hidden, vocab, itemsize)
    kernels = sum(c.seconds(chip) for name, c in costs.items() if weight_grad or name != "backward_w")
    best = _fastest([c for chunk in offered_chunks(rows)
                     for c in _ways(chunk, rows, hidden, vocab, itemsize, chip, weight_grad, soft_cap, streamed,
                                    bias)],
                    chip)
    if best is None or best.seconds(chip) >= kernels:
        return Scheme(None)
    return _scheme(best)


def accumulation(chunk: int, rows: int, hidden: int, vocab: int, itemsize: int, chip: Chip,
                 weight_grad: bool = True, soft_cap: bool = False, streamed: bool = True, bias: bool = False
                 ) -> Scheme:
    """How the chunked scheme adds dW at a chunk asked for: the fastest way offered at it that fits the share, else
    XLA's float32 accumulator."""
    best = _fastest(_ways(chunk, rows, hidden, vocab, itemsize, chip, weight_grad, soft_cap, streamed, bias), chip)
    return _scheme(best) if best is not None else Scheme(chunk)


def held_accumulator(chunk: int, rows: int, hidden: int, vocab: int, itemsize: int, chip: Chip,
                     weight_grad: bool = True, soft_cap: bool = False, bias: bool = False) -> tuple[bool, bool]:
    """(pair, int8 low) of dW's accumulator as `loss_and_exact_grads` leaves it at a chunk asked for, no way forced
    (`accumulation`'s): the pair where the way adds into it, its low half int8 where that way's kernel (`accumulate`'s
    or `streamed`'s) keeps it `scaled`; else float32. For the Torch ops' fakes, which give it without tracing."""
    s = accumulation(chunk, rows, hidden, vocab, itemsize, chip, weight_grad, soft_cap, True, bias)
    kernel = s.streamed or s.kernel and weight_grad and accumulate.fits(chunk, hidden, vocab, itemsize, chip.vmem,
                                                                          vocab % LANES != 0)
    return s.pair, s.pair and s.scaled and kernel and itemsize == 2


STREAMED_FALLBACK_CHUNKS = (512, 256, 128)
"""Chunk rows `streamed_scheme` tries after `STREAMED_CHUNKS` where no vocabulary block fits those beside them (v7x's
64 MiB at hidden 4096): powers of two, which the compact logits' maxima can be cut into (`streamed.compact_rows`)."""


def streamed_scheme(rows: int, hidden: int, vocab: int, itemsize: int, chip: Chip, weight_grad: bool = True,
                    compact: bool = True) -> Scheme | None:
    """The streamed way where it is asked for (`streamed=True`) and the chunk is not (`chunk="auto"`), on any chip: the
    fastest way `choose_scheme` offers it that fits the share (the chips whose layout of it was measured), else the
    first of `STREAMED_CHUNKS` and `STREAMED_FALLBACK_CHUNKS` whose vocabulary block fits the chip's VMEM, dW in the
    16-bit pair as measured (`STREAMED`); None where no chunk's block fits. `compact`: the logits can be compact."""
    chosen = _fastest([c for chunk in STREAMED_CHUNKS
                       for c in _ways(chunk, rows, hidden, vocab, itemsize, chip, weight_grad, soft_cap=not compact)
                       if c.streamed], chip)
    if chosen is not None:
        return _scheme(chosen)
    pair = weight_grad and itemsize == 2
    acc_bytes = streaming.accumulator_bytes(itemsize, pair, False, weight_grad)
    for chunk in (*STREAMED_CHUNKS, *STREAMED_FALLBACK_CHUNKS):
        if streaming.block_for(chunk, hidden, vocab, itemsize, chip.vmem, acc_bytes, compact):
            return Scheme(chunk, pair=pair, streamed=True)
    return None


def choose(rows: int, hidden: int, vocab: int, itemsize: int, chip: Chip, weight_grad: bool = True,
           soft_cap: bool = False) -> int | None:
    """The chunk of the chunked scheme, or None where the kernels are faster or the chunks do not fit
    (`choose_scheme`'s)."""
    return choose_scheme(rows, hidden, vocab, itemsize, chip, weight_grad, soft_cap).chunk


def _weighted(m: jax.Array, lse: jax.Array, zt: jax.Array, sum_z: jax.Array, vocab: int, z_loss: float,
              smoothing: float) -> jax.Array:
    loss = (1.0 - smoothing) * (lse - zt) + smoothing * (lse - sum_z / vocab) + z_loss * lse * lse
    return jnp.where(m > 0, m * loss, 0.0)


def _chunked(x: jax.Array, w: jax.Array, b: jax.Array, targets: jax.Array, m: jax.Array, transform: LogitTransform,
             z_loss: float, smoothing: float, chunk: int, weight_grad: bool, pair: bool, kernel: bool,
             scaled: bool = False, streamed_block: int | None = None, compact: bool = False, has_bias: bool = True,
             exact: bool = False) -> tuple[jax.Array, jax.Array, accumulate.Accumulator | None, jax.Array | None]:
    """(loss, dx, dW, db) by the chunked scheme; `exact`: dx float32 and dW's accumulator as it stands (float32 or the
    pair), for a cotangent to scale before their one rounding (`Pending`)."""
    rows, vocab = x.shape[0], w.shape[0]
    if streamed_block and compact and rows % chunk and streaming.compact_rows(rows % chunk) >= chunk:
        # rows left that run as a whole chunk anyway run in the scan (their padding rows weigh 0): a step of their
        # own held its logits beside the scan's on the v5e (Gemma 2 2B's 3,000 rows: 2.10 GiB, not 1.60)
        pad = chunk - rows % chunk
        loss, dx, dw, db = _chunked(jnp.pad(x, ((0, pad), (0, 0))), w, b, jnp.pad(targets, (0, pad)),
                                    jnp.pad(m, (0, pad)), transform, z_loss, smoothing, chunk, weight_grad, pair,
                                    kernel, scaled, streamed_block, compact, has_bias, exact)
        return loss, dx[:rows], dw, db
    whole = rows // chunk * chunk

    # A vocabulary off the lanes: XLA lays the [chunk, vocab] logits out vocabulary-major and copies them back
    # row-major for G and the kernel (a float32 chunk's copy: +0.5 GiB and 37 ms at Gemma 3's head, chunks of 1024);
    # there every [chunk, vocab] array is made as its transpose, [vocab, chunk], the rows on the lanes.
    transposed = vocab % LANES != 0
    v_axis = 0 if transposed else 1  # the vocabulary's axis of the [chunk, vocab] arrays as made

    def per_row(v: jax.Array) -> jax.Array:  # a [chunk] vector against a [chunk, vocab] array as made
        return v[None, :] if transposed else v[:, None]

    def step(carry, inputs):  # noqa: ANN001, ANN202
        x_c, t_c, m_c = inputs
        operands = (w, x_c) if transposed else (x_c, w)
        raw = jax.lax.dot_general(*operands, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) \
            + (b[:, None] if transposed else b)
        z, dz = transform(raw)
        top = jnp.max(z, axis=v_axis)
        lse = top + jnp.log(jnp.sum(jnp.exp(z - per_row(top)), axis=v_axis))
        onehot = jnp.expand_dims(jnp.arange(vocab), 1 - v_axis) == per_row(t_c)
        zt = jnp.sum(jnp.where(onehot, z, 0.0), axis=v_axis)
        nan_lse, nan_zt = target_checks.nan_rows([lse, zt], t_c, vocab)  # as the kernels' statistics
        loss = jnp.sum(_weighted(m_c, nan_lse, nan_zt, jnp.sum(z, axis=v_axis), vocab, z_loss, smoothing))
        p = jnp.exp(z - per_row(lse))
        g = per_row(m_c) * (per_row(1.0 + 2.0 * z_loss * lse) * p - (1.0 - smoothing) * onehot - smoothing / vocab)
        kept = (m_c > 0) & ~target_checks.outside(t_c, vocab)  # a NaN row adds nothing, as the kernels' backward
        g = jnp.where(per_row(kept), g * dz, 0.0)
        g_low = g.astype(x.dtype)
        dx_c = jax.lax.dot_general(g_low, w, (((v_axis,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        if weight_grad:
            dw, db = carry
            carry = (accumulate.add(dw, g_low, x_c, kernel, transposed), db + jnp.sum(g, axis=1 - v_axis))
        return carry, (loss, dx_c if exact else dx_c.astype(x.dtype))

    if streamed_block:  # each chunk in `streamed`'s kernels at that vocabulary block
        step = _streamed_step(w, b, transform, z_loss, smoothing, weight_grad, streamed_block, compact, has_bias,
                              exact)
    # the pair is a kernel's alone (`accumulate`'s or `streamed`'s: `_loss_and_pending` refuses it elsewhere)
    zeros = accumulate.start(w.shape, w.dtype, pair, scaled)
    carry = (zeros, jnp.zeros((vocab,), jnp.float32)) if weight_grad else ()
    losses, dxs = [], []

    def whole_chunks(carry):  # noqa: ANN001, ANN202 - in a scan
        chunks = (x[:whole].reshape(-1, chunk, x.shape[1]), targets[:whole].reshape(-1, chunk),
                  m[:whole].reshape(-1, chunk))
        carry, (loss, dx) = jax.lax.scan(step, carry, chunks)
        losses.append(jnp.sum(loss))
        dxs.append(dx.reshape(whole, x.shape[1]))
        return carry

    def rows_left(carry):  # noqa: ANN001, ANN202 - one more chunk, padded (its padding rows' weights zero)
        left = rows - whole
        extra = (streaming.compact_rows(left) if compact else round_up(left, TAIL_ROWS)) - left
        carry, (loss, dx) = step(carry, (jnp.pad(x[whole:], ((0, extra), (0, 0))), jnp.pad(targets[whole:], (0, extra)),
                                         jnp.pad(m[whole:], (0, extra))))
        losses.append(loss)
        dxs.append(dx[:left])
        return carry

    # the streamed kernels update dW's accumulator in place: after the scan XLA copies it for them (the pair's high
    # half, 1.25 GiB at Gemma 3's head), before it not; their rows left run first
    parts = [whole_chunks] * bool(whole) + [rows_left] * (whole < rows)
    for part in parts[::-1] if streamed_block else parts:
        carry = part(carry)
    if streamed_block and len(parts) == 2:
        losses, dxs = losses[::-1], dxs[::-1]
    loss = sum(losses[1:], losses[0]) if losses else jnp.zeros((), jnp.float32)  # no rows: nothing to add
    dx = dxs[0] if len(dxs) == 1 else jnp.concatenate(dxs) if dxs else jnp.zeros(
        x.shape, jnp.float32 if exact else x.dtype)
    if not weight_grad:
        return loss, dx, None, None
    dw, db = carry
    return loss, dx, dw if exact else accumulate.finish(dw, w.dtype), db


def _streamed_step(w: jax.Array, b: jax.Array, transform: LogitTransform, z_loss: float, smoothing: float,
                   weight_grad: bool, block: int, compact: bool = False, has_bias: bool = True,
                   exact: bool = False):  # noqa: ANN202
    """The chunked scheme's step in `streamed`'s two kernels at vocabulary blocks of `block` (what fits the whole
    chunk fits the rows left too), the logits stored `compact` or in float32: the same carry (dW's accumulator, db)
    and outputs (dx float32 with `exact`)."""
    vocab = w.shape[0]

    def step(carry, inputs):  # noqa: ANN001, ANN202
        x_c, t_c, m_c = inputs
        # a head without a bias reads none, a loss without smoothing sums no logits and adds no d
        smooth = bool(smoothing)
        raw, lse, sum_z, maxima = streaming.logits(x_c, w, b[None, :], transform=transform, block=block,
                                                   compact=compact, bias=has_bias, sums=smooth)
        zt = streaming.target_logits(x_c, w, b, t_c, transform=transform, bias=has_bias)
        nan_lse, nan_zt = target_checks.nan_rows([lse, zt], t_c, vocab)  # as the kernels' statistics
        loss = jnp.sum(_weighted(m_c, nan_lse, nan_zt, sum_z, vocab, z_loss, smoothing))
        kept = jnp.where((m_c > 0) & ~target_checks.outside(t_c, vocab), m_c, 0.0)  # a NaN row adds nothing
        rows = (t_c, lse, kept * (1.0 + 2.0 * z_loss * lse), -kept * (1.0 - smoothing), -kept * (smoothing / vocab))
        acc, dx_c, db_c = streaming.gradients(raw, x_c, w, *rows, carry[0] if weight_grad else None,
                                              transform=transform, block=block, maxima=maxima, db=has_bias,
                                              smooth=smooth)
        db_c = db_c[0]
        if vocab % block:  # the entries past the whole blocks, in XLA
            acc, dx_c, db_tail = streaming.tail(raw, x_c, w, *rows, acc, dx_c, transform=transform,
                                                start=vocab // block * block, maxima=maxima)
            db_c = jnp.concatenate([db_c, db_tail])
        if weight_grad:
            carry = (acc, carry[1] + db_c)
        return carry, (loss, dx_c if exact else dx_c.astype(x_c.dtype))

    return step


def _kernel_rows(x: jax.Array, w: jax.Array, b: jax.Array, targets: jax.Array, m: jax.Array,
                 transform: LogitTransform, z_loss: float, smoothing: float, plan: plans.Plan | None
                 ) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    """The kernels' forward: (loss, the rows their backward reads: lse, entropy and the loss's per-row coefficients
    d_lse, d_target, d_sum, float32 [rows] each)."""
    vocab = w.shape[0]
    stats = row_stats(x, w, b, targets, transform, plan=plan or plan_for(x, w))  # the kernels, as asked
    loss = jnp.sum(_weighted(m, stats.lse, stats.target_logit, stats.sum_logits, vocab, z_loss, smoothing))
    kept = m > 0
    d_lse = jnp.where(kept, m * (1.0 + 2.0 * z_loss * stats.lse), 0.0)
    d_target = jnp.where(kept, -m * (1.0 - smoothing), 0.0)
    d_sum = jnp.where(kept, -m * smoothing / vocab, 0.0)
    return loss, (stats.lse, stats.entropy, d_lse, d_target, d_sum)


def kernels_backward(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, lse: jax.Array,
                     entropy: jax.Array, d_lse: jax.Array, d_target: jax.Array, d_sum: jax.Array,
                     scale: jax.Array | None, transform: LogitTransform, weight_grad: bool = True,
                     plan: plans.Plan | None = None) -> tuple[jax.Array, jax.Array | None, jax.Array | None]:
    """The kernels' backward from their forward's rows (`kernels_forward`): the loss's cotangent `scale` (float32 [];
    None: 1) in the per-row coefficients, so (dx, dW, db float32) come out of the kernels rounded once."""
    if scale is not None:
        d_lse, d_target, d_sum = (v * scale for v in (d_lse, d_target, d_sum))
    return row_stats_vjp(x, w, b, targets, lse, entropy, d_lse, d_target, jnp.zeros_like(d_lse), d_sum, transform,
                         weight_grad=weight_grad, plan=plan)


def _kernels(x: jax.Array, w: jax.Array, b: jax.Array, targets: jax.Array, m: jax.Array, transform: LogitTransform,
             z_loss: float, smoothing: float, weight_grad: bool, plan: plans.Plan | None
             ) -> tuple[jax.Array, Pending]:
    """(loss, the backward kernels still to run): they take the cotangent in their per-row coefficients, so the
    scaled dx and dW are rounded once, at the kernels' end, and no gradient is held from the forward."""
    loss, rows = _kernel_rows(x, w, b, targets, m, transform, z_loss, smoothing, plan)

    def backward(*residuals):  # noqa: ANN002, ANN202 - x, w, b, targets, the rows, the scale
        return kernels_backward(*residuals, transform, weight_grad, plan)

    return loss, Pending(backward, x, w, b, targets, *rows)


Pending = jax.tree_util.Partial
"""The gradients a forward leaves, a pytree (a `jax.custom_vjp`'s residuals): `pending(scale)` gives (dx in x's
dtype, dW in w's or None, db float32 or None) times the loss's cotangent `scale` (float32 []; None: 1), each rounded
once: the chunked scheme's float32 dx and dW's accumulator scaled then rounded (`exact`), the kernels' backward run
with the cotangent in its coefficients. Scaling gradients already rounded to bf16 rounded them twice."""


def _scaled_once(g: jax.Array, scale: jax.Array | None, dtype: jnp.dtype) -> jax.Array:
    """g (float32, or already in `dtype` where `scale` is None) times `scale`, rounded once to `dtype`."""
    return (g if scale is None else g.astype(jnp.float32) * scale).astype(dtype)


def _chunked_pending(dx: jax.Array, dw: accumulate.Accumulator | None, db: jax.Array | None, x_dtype: jnp.dtype,
                     w_dtype: jnp.dtype) -> Pending:
    """`Pending` for the chunked scheme's `exact` gradients: dx float32, dW's accumulator (float32 or the pair)."""
    def finish(dx, dw, db, scale):  # noqa: ANN001, ANN202
        return (_scaled_once(dx, scale, x_dtype), None if dw is None else accumulate.finish(dw, w_dtype, scale),
                db if db is None or scale is None else db * scale)
    return Pending(finish, dx, dw, db)


def check_options(op: str, weights: jax.Array, rows: int, transform: LogitTransform, z_loss: float,
                  smoothing: float, chunk: int | None | str) -> None:
    """The loss's options, refused by name before anything is traced: weights [rows] of a float dtype (a mask's
    bools too), z_loss >= 0, smoothing in [0, 1) (1 would leave no target), `chunk` "auto", None or rows."""
    checks.array(op, "weights", weights)
    if tuple(weights.shape) != (rows,):
        raise ValueError(f"tokamax {op}: weights must be [rows] ({rows}), got {tuple(weights.shape)}")
    if not isinstance(transform, LogitTransform):
        raise TypeError(f"tokamax {op}: transform must be a lm_head.LogitTransform (LogitTransform.of(...)), got "
                        f"{type(transform).__name__}")
    checks.number(op, "z_loss", z_loss, 0.0, high_open=True)
    checks.number(op, "smoothing", smoothing, 0.0, 1.0, high_open=True)
    checks.chunk(op, chunk)


@hosts.emulated("lm_head.fused.loss_and_grads")
def loss_and_grads(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, weights: jax.Array,
                   transform: LogitTransform, *, z_loss: float = 0.0, smoothing: float = 0.0, weight_grad: bool = True,
                   chunk: int | None | str = "auto", plan: plans.Plan | None = None,
                   pair_accumulator: bool | None = None, accumulator_kernel: bool | None = None,
                   scaled_low: bool | None = None, streamed: bool | None = None, compact: bool | None = None
                   ) -> tuple[jax.Array, jax.Array, jax.Array | None, jax.Array | None]:
    """(sum_r weights_r loss_r float32 [], dx in x's dtype, dW in w's dtype, db float32 [vocab]; dW and db None
    where `weight_grad` is False, db None where b is). `targets` int [rows] in [0, vocab) where `weights` > 0
    (others are not read): one outside is refused where it is on the host, else makes the loss NaN and adds nothing
    to the gradients, by every way (`targets`); `chunk`: "auto" (`choose_scheme` on the chip being traced for), None
    (the kernels) or the chunk rows; `plan`: the kernels' blocks where they run (default: `plan.choose`'s);
    `pair_accumulator`: the chunked scheme accumulates dW in two arrays of w's dtype, not one float32 array
    (half its temporaries at 16 bits; dW within one rounding of the float32 accumulator's), added only by the
    accumulate kernel or the streamed ones: True where neither takes the head (`accumulator_kernel` False, or no
    block of the vocabulary fitting beside the chunk in the chip's VMEM) is refused; `accumulator_kernel`: the
    chunked scheme adds each chunk's dW in a Pallas kernel that streams the accumulator under the matmul
    (`accumulate`), where its VMEM holds the chunk (else XLA adds it; None with `pair_accumulator` True: the
    kernel); `scaled_low`: with both and a 16-bit w, the pair's low half in int8 (`accumulate.SCALED`: a quarter
    less traffic and half the low half's bytes, the same bits of the sum to 1/256 of dW's last place per chunk).
    Each None: as `choose_scheme` says with `chunk="auto"`,
    as `accumulation` says at a chunk asked for. `streamed`: the chunked scheme's chunks in `streamed`'s two
    kernels (G made in VMEM, never in HBM), dW into the float32 accumulator or the pair (`accumulator_kernel` then
    unread; refused where no vocabulary block fits the chunk in VMEM; with `chunk="auto"` on every chip, at the chunk
    `streamed_scheme` picks); None: where `choose_scheme` (or `accumulation`) takes it (`STREAMED`), False: never
    (nor with `accumulator_kernel` given). `compact`: the streamed way's stored logits in bf16 less the running
    maximum (`streamed`: half the bytes, p within 2^-8 / e, `streamed.P_ERROR`), where the transform has no soft cap,
    the head no bias (db stays float32's) and x is 16-bit (None: wherever it can; True elsewhere is refused; a chunk
    of other rows is not compact, and the rows left past the whole chunks run padded to `streamed.compact_rows`)."""
    loss, pending = _loss_and_pending(x, w, b, targets, weights, transform, z_loss, smoothing, weight_grad, chunk,
                                      plan, pair_accumulator, accumulator_kernel, scaled_low, streamed, compact,
                                      exact=False)
    return _unbiased(b, (loss, *pending(None)))


@hosts.emulated("lm_head.fused.loss_and_grads")
def loss_and_pending(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, weights: jax.Array,
                     transform: LogitTransform, *, z_loss: float = 0.0, smoothing: float = 0.0,
                     weight_grad: bool = True, chunk: int | None | str = "auto", plan: plans.Plan | None = None,
                     pair_accumulator: bool | None = None, accumulator_kernel: bool | None = None,
                     scaled_low: bool | None = None, streamed: bool | None = None, compact: bool | None = None
                     ) -> tuple[jax.Array, Pending]:
    """`loss_and_grads`' loss and its gradients still to be scaled by the loss's cotangent and rounded once
    (`Pending`; its db is None where b is): for a `jax.custom_vjp` (`loss`). The chunked scheme's dx stays float32
    and dW's accumulator unrounded until then (dx's float32 bytes held where the rounded dx was)."""
    loss, pending = _loss_and_pending(x, w, b, targets, weights, transform, z_loss, smoothing, weight_grad, chunk,
                                      plan, pair_accumulator, accumulator_kernel, scaled_low, streamed, compact,
                                      exact=True)

    has_bias = b is not None  # the closure holds no array: `Pending`'s function is its pytree's static part

    def unbiased(pending, scale):  # noqa: ANN001, ANN202
        dx, dw, db = pending(scale)
        return dx, dw, db if has_bias else None

    return loss, Pending(unbiased, pending)


@hosts.emulated("lm_head.fused.loss_and_grads")
def loss_and_exact_grads(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, weights: jax.Array,
                         transform: LogitTransform, *, z_loss: float = 0.0, smoothing: float = 0.0,
                         weight_grad: bool = True, chunk: int
                         ) -> tuple[jax.Array, jax.Array, accumulate.Accumulator | None, jax.Array | None]:
    """The chunked scheme's loss and gradients before their one rounding, in chunks of `chunk` rows (the way
    `accumulation`'s): dx float32, dW's accumulator as the way left it (float32, or the pair: `held_accumulator`;
    None where not `weight_grad`) and db float32 (None where b is), what `loss_and_pending` holds: for ops that
    cannot hold a `Pending` (the Torch ones), whose backward scales them by the cotangent and rounds them once
    (`accumulate.finish`)."""
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"tokamax lm_head loss_and_exact_grads: chunk must be a number of rows, got {chunk!r}")
    loss, pending = _loss_and_pending(x, w, b, targets, weights, transform, z_loss, smoothing, weight_grad, chunk,
                                      None, None, None, None, None, None, exact=True)
    return loss, *pending.args  # `_chunked_pending`'s


@hosts.emulated("lm_head.fused.loss_and_grads")
def kernels_forward(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, weights: jax.Array,
                    transform: LogitTransform, *, z_loss: float = 0.0, smoothing: float = 0.0
                    ) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    """The kernels' forward alone: (loss, the rows `kernels_backward` reads with x, w and b: the targets as the
    kernels take them, int32 and 0 where the weight is not > 0, then lse, entropy and the loss's per-row
    coefficients), what `loss_and_pending` holds with `chunk=None`: for ops that cannot hold a `Pending` (the Torch
    ones), whose backward runs the kernels with the cotangent (no gradient held from the forward)."""
    _check(x, w, b, targets)
    check_options("lm_head kernels_forward", weights, x.shape[0], transform, z_loss, smoothing, None)
    m = weights.astype(jnp.float32)
    t = jnp.where(m > 0, targets, 0).astype(jnp.int32)
    target_checks.refuse("lm_head", t, w.shape[0])
    loss, rows = _kernel_rows(x, w, b, t, m, transform, z_loss, smoothing, None)
    return loss, (t, *rows)


def _loss_and_pending(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, weights: jax.Array,
                      transform: LogitTransform, z_loss: float, smoothing: float, weight_grad: bool,
                      chunk: int | None | str, plan: plans.Plan | None, pair_accumulator: bool | None,
                      accumulator_kernel: bool | None, scaled_low: bool | None, streamed: bool | None,
                      compact: bool | None, *, exact: bool) -> tuple[jax.Array, Pending]:
    """`loss_and_grads`' work: the loss and the `Pending` gradients (`exact`: the chunked scheme's unrounded)."""
    _check(x, w, b, targets)
    check_options("lm_head loss_and_grads", weights, x.shape[0], transform, z_loss, smoothing, chunk)
    itemsize = jnp.dtype(x.dtype).itemsize
    shape = (x.shape[0], x.shape[1], w.shape[0], itemsize, chip(), weight_grad)
    # streamed=False (or the accumulator kernel asked for) chooses among the other ways
    offer = streamed is not False and accumulator_kernel is None
    has_bias = b is not None
    if chunk == "auto" and streamed:  # the streamed way asked for: the rule picks its chunk, on every chip
        chosen = streamed_scheme(*shape, compact=streaming.compacts(transform, itemsize, has_bias)
                                  and compact is not False)
        if chosen is None:
            _refuse_off_lanes(x.shape[1])
            raise ValueError(f"tokamax lm_head loss_and_grads: streamed finds no chunk of "
                             f"{(*STREAMED_CHUNKS, *STREAMED_FALLBACK_CHUNKS)} rows whose vocabulary block fits at "
                             f"hidden {x.shape[1]} in the chip's VMEM ({chip().vmem >> 20} MiB): take streamed=None "
                             f"or False")
    elif chunk == "auto":
        chosen = choose_scheme(*shape, soft_cap=transform.tanh, streamed=offer, bias=has_bias)
    elif chunk is not None:
        chosen = accumulation(chunk, *shape, soft_cap=transform.tanh, streamed=offer, bias=has_bias)
    if chunk is not None:
        chunk = chosen.chunk
        streamed = chosen.streamed if streamed is None else streamed
        if accumulator_kernel is None:  # the pair asked for: only the kernel adds it
            accumulator_kernel = chosen.kernel or bool(pair_accumulator)
        if pair_accumulator is None:  # the rule's pair, where its way (the streamed kernels or `accumulate`'s) runs
            pair_accumulator = chosen.pair and (bool(streamed) or bool(accumulator_kernel))
        scaled_low = chosen.scaled if scaled_low is None else scaled_low
    m = weights.astype(jnp.float32)
    t = jnp.where(m > 0, targets, 0).astype(jnp.int32)
    target_checks.refuse("lm_head", t, w.shape[0])
    if chunk is None:
        return _kernels(x, w, b, t, m, transform, z_loss, smoothing, weight_grad, plan)
    bias = jnp.zeros((w.shape[0],), jnp.float32) if b is None else b.astype(jnp.float32)
    if streamed:
        scaled = bool(scaled_low) and itemsize == 2
        acc_bytes = streaming.accumulator_bytes(itemsize, bool(pair_accumulator), scaled, weight_grad)
        can = streaming.compacts(transform, itemsize, has_bias) and streaming.compact_rows(chunk) == chunk
        if compact and not can:
            raise ValueError(f"tokamax lm_head loss_and_grads: compact needs 16-bit x and w, no soft cap (its "
                             f"dz/dl is taken as a constant), no bias (db is float32) and a chunk that is a power of "
                             f"two from 128 or a multiple of 1024; got {jnp.dtype(x.dtype).name}, "
                             f"{'a soft cap' if transform.tanh else 'no soft cap'}, {'a' if has_bias else 'no'} bias, "
                             f"chunk {chunk}: take compact=None or False")
        compact = can if compact is None else compact
        block = streaming.block_for(chunk, x.shape[1], w.shape[0], itemsize, chip().vmem, acc_bytes, compact)
        _refuse_off_lanes(x.shape[1])
        if block is None:
            raise ValueError(f"tokamax lm_head loss_and_grads: streamed finds no vocabulary block of "
                             f"{streaming.BLOCKS} that fits beside a chunk of {chunk} rows at hidden {x.shape[1]} "
                             f"in the chip's VMEM ({chip().vmem >> 20} MiB): take a smaller chunk or streamed=False")
        return _pending(x, w, b, _chunked(x, w, bias, t, m, transform, z_loss, smoothing, chunk, weight_grad,
                                          bool(pair_accumulator), False, scaled, streamed_block=block,
                                          compact=compact, has_bias=b is not None, exact=exact))
    kernel = bool(accumulator_kernel) and weight_grad and accumulate.fits(
        chunk, x.shape[1], w.shape[0], jnp.dtype(x.dtype).itemsize, chip().vmem, w.shape[0] % LANES != 0)
    if pair_accumulator and weight_grad and not kernel:
        where = ("accumulator_kernel is False" if accumulator_kernel is False else
                 f"no block of the vocabulary ({w.shape[0]}) fits beside a chunk of {chunk} rows at hidden "
                 f"{x.shape[1]} in the chip's VMEM ({chip().vmem >> 20} MiB)")
        raise ValueError(f"tokamax lm_head loss_and_grads: pair_accumulator=True: the pair is only added by the "
                         f"accumulate kernel (XLA adding into it is retired), which takes the head where a block of "
                         f"its vocabulary fits beside the chunk in the chip's VMEM; here {where}: take "
                         f"pair_accumulator=None or False, accumulator_kernel=True at a chunk it takes, or "
                         f"streamed=True")
    return _pending(x, w, b, _chunked(x, w, bias, t, m, transform, z_loss, smoothing, chunk, weight_grad,
                                      bool(pair_accumulator), kernel, bool(scaled_low), exact=exact))


def _pending(x: jax.Array, w: jax.Array, b: jax.Array | None, out: tuple) -> tuple[jax.Array, Pending]:
    loss, dx, dw, db = out
    return loss, _chunked_pending(dx, dw, None if b is None else db, x.dtype, w.dtype)


def _refuse_off_lanes(hidden: int) -> None:
    if hidden % LANES:
        raise ValueError(f"tokamax lm_head loss_and_grads: streamed needs a hidden size that is a multiple of "
                         f"{LANES} (the TPU lays a [n, hidden] array off the lanes column-major); got hidden "
                         f"{hidden}: take streamed=False")


def _unbiased(b: jax.Array | None, out: tuple) -> tuple:
    """`out` with no db for a head without a bias (the streamed kernels make none)."""
    loss, dx, dw, db = out
    return loss, dx, dw, None if b is None else db
