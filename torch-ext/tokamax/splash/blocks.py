"""The blocks each splash kernel runs with: upstream's config choice where the kernel fits the chip's scoped VMEM,
else the blocks of least modelled time that do.

Upstream's Ops pick 1024 queries by 1024 keys computed 512 at a time for every head dim (`pallas_mosaic_tpu`'s and
its VJP Op's heuristics) and compile their kernels at libtpu's default scoped-VMEM limit (16 MiB on v5e, 32 MiB on
v6e and v7x: `roofline.Chip.scoped_vmem`). At head dim 256 (Gemma 2 and 3) the fused backward then asks for 19.0
MiB on the v5e, and libtpu refuses it (`CompileTimeScopedVmemOom` in `splash_mha_dkv`): a Gemma model could not
take a training step. `vmem_bytes` models what Mosaic allocates for each kernel (its pipelined blocks, scratch and
the score tiles' temporaries), fitted to libtpu's own figures (`VMEM_FIT`); `fitted_forward` and
`fitted_backward` keep upstream's config where that fits `VMEM_SHARE` of the limit and otherwise take the fitting
blocks (`candidates`: no larger than upstream's, dividing the lengths) that `cost` times least. A caller's blocks
that do not fit are refused before the compiler sees them. The compile tier (`tools/tpu_compile/cases/splash.py`)
compiles the choice for v5e, v6e and v7x at head dims 64, 128, 192 and 256, causal, windowed and soft-capped.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from .. import roofline
from . import cost

SIZES = (1024, 512, 256, 128)
LANES = 128
KIB = 1024
VMEM_SHARE = 0.9
"""Of the scoped limit, what a kernel's modelled VMEM may take: the model is within 4.5% of libtpu's figure at every
block it was fitted to (`VMEM_FIT`)."""


class Blocks(NamedTuple):
    """One kernel's blocks: `q` queries by `kv` keys, the keys computed `kv_compute` at a time."""

    q: int
    kv: int
    kv_compute: int


class Fit(NamedTuple):
    """KiB per query row and per key row of a block for each 128 lanes of the padded head dim, per 1,024 score
    elements of a compute tile (queries x `kv_compute`), and a constant."""

    q_row: float
    kv_row: float
    score: float
    constant: float


VMEM_FIT = {
    "forward": Fit(2.664, 1.725, 3.404, -1262.8),
    "backward": Fit(1.922, 7.142, 5.324, -2232.4),
}
"""Fitted by least squares to the scoped VMEM libtpu 0.0.52 asks for at head dim 256 (the compile-only v5e, its limit
raised until the kernel compiled: `--xla_tpu_scoped_vmem_limit_kib`; causal, 8 query heads over 4 KV heads, 8,192
tokens): 8 backward blocks from 256/512/256 (6.5 MiB) to 1024/1024/512 (19.0 MiB), within 4.1% of each, and 5 forward
blocks from 512/512/512 (4.2 MiB) to 1024/1024/1024 (11.0 MiB), within 3.2%. At head dim 128 (one lane tile) libtpu
asks for about half of what the lanes' scaling says (the backward at 1024/1024/512: 4.9 MiB, modelled 9.5): a
margin, which keeps upstream's blocks there on every chip as before."""
ONE_LANE_FORWARD = Fit(3.903, 0.898, 1.951, 0.0)
"""The forward at a head dim of one lane tile (128 or less), where the scaling by lanes of `VMEM_FIT`'s put it
under libtpu (5.8 MiB at 1024/1024/512 against 4.9 modelled): fitted to its four blocks 512/512/512 to
1024/1024/512, within 2.1%. The backward there keeps `VMEM_FIT`'s scaling, which is above libtpu (a margin)."""
SEGMENT_KIB = (1 / 16, 1.0)
"""KiB per query row and per key row of the segment ids' blocks, double-buffered int32 (8 sublanes of a query block,
128 lanes of a key block): not fitted, counted as laid out."""


def _lanes(head_dim: int) -> int:
    return -(-head_dim // LANES)


def vmem_bytes(kernel: str, blocks: Blocks, head_dim: int, head_dim_v: int | None = None,
               segments: bool = False) -> int:
    """What Mosaic allocates for `kernel` ("forward" or "backward") at `blocks` (`VMEM_FIT`): each block row's share
    of the head dim padded to the lanes (q, k, v, dO, dq, dk, dv and their buffers), the score tiles' float32
    temporaries, and with `segments` the segment ids' blocks (`SEGMENT_KIB`)."""
    lanes = (_lanes(head_dim) + _lanes(head_dim if head_dim_v is None else head_dim_v)) / 2
    fit = ONE_LANE_FORWARD if kernel == "forward" and lanes == 1 else VMEM_FIT[kernel]
    kib = (fit.q_row * blocks.q + fit.kv_row * blocks.kv) * lanes + fit.score * blocks.q * blocks.kv_compute / KIB \
        + fit.constant
    if segments:
        kib += SEGMENT_KIB[0] * blocks.q + SEGMENT_KIB[1] * blocks.kv
    return max(int(kib * KIB), 0)


def fits(kernel: str, blocks: Blocks, head_dim: int, head_dim_v: int | None, on: roofline.Chip,
         segments: bool = False) -> bool:
    return vmem_bytes(kernel, blocks, head_dim, head_dim_v, segments) <= VMEM_SHARE * on.scoped_vmem


def candidates(q_len: int, kv_len: int, upper: Blocks) -> list[Blocks]:
    """Blocks no larger than `upper` that divide the lengths, each compute slice dividing its key block."""
    return [Blocks(q, kv, c) for q in SIZES if q <= upper.q and q_len % q == 0
            for kv in SIZES if kv <= upper.kv and kv_len % kv == 0
            for c in SIZES if c <= min(kv, upper.kv_compute) and kv % c == 0]


def choose(kernel: str, upstream: Blocks, q_len: int, kv_len: int, head_dim: int, head_dim_v: int,
           heads: int, kv_heads: int, on: roofline.Chip, segments: bool = False) -> Blocks:
    """Upstream's blocks where they fit; else the fitting candidate of least modelled time (`cost`), among equals
    the larger blocks. Raises where none fits (a head dim past every block's VMEM)."""
    if fits(kernel, upstream, head_dim, head_dim_v, on, segments):
        return upstream
    fitting = [b for b in candidates(q_len, kv_len, upstream) if fits(kernel, b, head_dim, head_dim_v, on, segments)]
    if not fitting:
        smallest = vmem_bytes(kernel, Blocks(LANES, LANES, LANES), head_dim, head_dim_v)
        raise ValueError(f"tokamax splash attention: no {kernel} blocks of {SIZES} fit head dim {head_dim} "
                         f"(values {head_dim_v}) within {VMEM_SHARE:.0%} of the chip's scoped VMEM "
                         f"({on.scoped_vmem >> 20} MiB): the smallest need {smallest >> 10} KiB")
    timed = cost.forward if kernel == "forward" else cost.backward

    def seconds(b: Blocks) -> float:
        return timed(heads, kv_heads, q_len, kv_len, head_dim, head_dim_v, at=b).seconds(on)
    return min(fitting, key=lambda b: (seconds(b), -b.q * b.kv, -b.kv_compute))


def _check_asked(kernel: str, asked: Blocks, q_len: int, kv_len: int, head_dim: int, head_dim_v: int,
                 on: roofline.Chip, segments: bool) -> Blocks:
    asked = Blocks(*asked)
    if q_len % asked.q or kv_len % asked.kv or asked.kv % asked.kv_compute or min(asked) < LANES:
        raise ValueError(f"tokamax splash attention: {kernel} blocks {tuple(asked)} must be multiples of {LANES} "
                         f"dividing the padded lengths ({q_len} queries, {kv_len} keys), the compute slice dividing "
                         f"the key block")
    if not fits(kernel, asked, head_dim, head_dim_v, on, segments):
        raise ValueError(f"tokamax splash attention: {kernel} blocks {tuple(asked)} at head dim {head_dim} need "
                         f"{vmem_bytes(kernel, asked, head_dim, head_dim_v, segments) >> 10} KiB of VMEM, past "
                         f"{VMEM_SHARE:.0%} of the chip's scoped limit ({on.scoped_vmem >> 20} MiB)")
    return asked


FIELDS = {"forward": ("block_q", "block_kv", "block_kv_compute"),
          "backward": ("block_q_dkv", "block_kv_dkv", "block_kv_dkv_compute")}
"""Each kernel's blocks in upstream's Op configs (the forward Op's and its VJP Op's)."""


def _fitted(kernel: str, config: Any, q_len: int, kv_len: int, head_dim: int, head_dim_v: int, heads: int,
            kv_heads: int, segments: bool, asked: Blocks | None) -> Any:
    on = roofline.chip()
    q, kv, compute = (getattr(config, f) for f in FIELDS[kernel])
    upstream = Blocks(q, kv, compute or kv)
    chosen = (_check_asked(kernel, asked, q_len, kv_len, head_dim, head_dim_v, on, segments) if asked is not None
              else choose(kernel, upstream, q_len, kv_len, head_dim, head_dim_v, heads, kv_heads, on, segments))
    if chosen == upstream:
        return config
    return dataclasses.replace(config, **dict(zip(FIELDS[kernel], chosen, strict=True)))


def fitted_forward(config: Any, q_len: int, kv_len: int, head_dim: int, head_dim_v: int, heads: int, kv_heads: int,
                   segments: bool = False, asked: Blocks | None = None) -> Any:
    """Upstream's forward Op config with its blocks `asked` (checked) or chosen (`choose`) on the chip traced for."""
    return _fitted("forward", config, q_len, kv_len, head_dim, head_dim_v, heads, kv_heads, segments, asked)


def fitted_backward(config: Any, q_len: int, kv_len: int, head_dim: int, head_dim_v: int, heads: int, kv_heads: int,
                    segments: bool = False, asked: Blocks | None = None) -> Any:
    """Upstream's VJP Op config with its blocks `asked` (checked) or chosen (`choose`) on the chip traced for."""
    return _fitted("backward", config, q_len, kv_len, head_dim, head_dim_v, heads, kv_heads, segments, asked)


def seconds(heads: int, kv_heads: int, length: int, head_dim: int, on: roofline.Chip, *, backward_pass: bool = False,
            backward: Blocks | None = None) -> float:
    """Causal self-attention over `length` tokens (one sequence) by `cost`, at the blocks the package runs (upstream's
    where they fit, `choose`) or the backward's `backward`: what the chip benchmark predicts."""
    padded = cost.padded(length)
    upstream = Blocks(*cost.blocks(padded, padded))

    def at(kernel: str) -> Blocks:
        return choose(kernel, upstream, padded, padded, head_dim, head_dim, heads, kv_heads, on)
    args = (heads, kv_heads, length, length, head_dim)
    total = cost.forward(*args, at=at("forward")).seconds(on)
    if backward_pass:
        total += cost.backward(*args, at=backward or at("backward")).seconds(on)
    return total
