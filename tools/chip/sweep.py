"""The grouped matmul's tiles measured on the chip: each of its three kernels (the forward `gmm`, the
backward's dlhs `gmm` on the transposed weights, its drhs `tgmm`) at each model shape of `models.EXPERTS`,
over a grid of tiles; what the tile rule (`tokamax.ragged_dot_tiles`) is checked against. With `uneven`, the shapes
of `models.IMBALANCED` with their rows spread as an uneven router does (`models.ROUTING_SKEW`), over a wider grid
(`UNEVEN_TILE_M`: row tiles down to 128). Both grids take each dimension whole as well as in tiles of `TILE_KN`.
With `wide`, only the tilings past libtpu's default scoped VMEM that the package's raised limit holds
(`tokamax.moe.tiles.vmem_limit`), each compiled with that limit, beside the fastest the default held in the last sweep
(`REFERENCE`), in the same run. With `ranked`, the tilings the rule ranks first (`tokamax.moe.tiles.rank`, its
choice first), each at the VMEM limit the package compiles it with. The kernels are called as released, the weights
fetched one step ahead (no `rhs_lookahead`): gmm's and dlhs' times run over what the Op gives at the same tiles
(Qwen3-235B-A22B's uneven forward 7.35 ms here, 6.62 through `ops.ragged_dot`), the same for every tiling compared."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from types import ModuleType

import jax
import jax.numpy as jnp

from .models import EXPERTS, IMBALANCED, ROUTING_SKEW
from .workloads import Workload, group_sizes, normal

TILE_M = (256, 512, 1024)
TILE_KN = (512, 1024, 2048)
UNEVEN_TILE_M = (128, 256, 512)
LOOSE_VMEM = 24 << 20  # tiles past this never fit a v5e's 16 MiB scoped VMEM: not compiled
REFERENCE = {("Qwen3-235B-A22B", "gmm"): (256, 4096, 512), ("Qwen3-235B-A22B", "dlhs"): (128, 1536, 2048),
             ("Qwen3-235B-A22B", "tgmm"): (128, 1024, 1536), ("gpt-oss-120b", "gmm"): (128, 2880, 1024),
             ("gpt-oss-120b", "dlhs"): (128, 5760, 512), ("gpt-oss-120b", "tgmm"): (128, 2880, 512)}
"""The fastest tiling per kernel the default scoped VMEM held at the uneven shapes (v5e-2026-12-05-tiles-uneven-2b6da0b,
-sweep-gpt-oss-120b-uneven-f38ceff), (m, k, n) as the kernel is called."""


def _clip(tile: int, size: int) -> int:
    return size if tile >= size else tile


def _vmem(a: tuple[int, int], b: tuple[int, int], out: tuple[int, int]) -> int:
    return 2 * 2 * (a[0] * a[1] + b[0] * b[1]) + 3 * 2 * out[0] * out[1] + 4 * out[0] * out[1]


def tiles(m: int, k: int, n: int, uneven: bool = False, loose: int = LOOSE_VMEM) -> Iterator[tuple[int, int, int]]:
    seen = set()
    # the whole dimension too: the rule offers it (`tiles._options`)
    grid = itertools.product(UNEVEN_TILE_M if uneven else TILE_M, (*TILE_KN, k), (*TILE_KN, n))
    for tm, tk, tn in grid:
        t = (_clip(tm, m), _clip(tk, k), _clip(tn, n))
        if t not in seen and _vmem((t[0], t[1]), (t[1], t[2]), (t[0], t[2])) <= loose:
            seen.add(t)
            yield t


def _wide(tk: ModuleType, kernel: str, tiles: Iterator[tuple[int, int, int]], reference: tuple | None
          ) -> Iterator[tuple[tuple[int, int, int], int | None]]:
    """(tiles, vmem_limit_bytes): those past the default scoped VMEM that the raised limit holds, and `reference`."""
    rule, on = tk.moe.tiles, tk.roofline.chip()
    for t in tiles:
        named = rule.Tiles(t[0], t[2], t[1]) if kernel == "dlhs" else rule.Tiles(*t)  # dlhs: Config's names
        limit = rule.vmem_limit(kernel, named, on)
        if t == reference or (limit is not None and rule.fits(kernel, named, on)):
            yield t, limit


def _ranked(tk: ModuleType, kernel: str, m: int, k: int, n: int, groups: int, count: int
            ) -> Iterator[tuple[tuple[int, int, int], int | None]]:
    """The rule's first `count` tilings (as the kernel is called) and the limit each compiles with."""
    rule, on = tk.moe.tiles, tk.roofline.chip()
    chosen = rule.choose(kernel, m, k, n, groups, on)
    ranked = [t for t in rule.rank(kernel, m, k, n, groups, rule.candidates(m, k, n), on) if t != chosen]
    for t in [chosen, *ranked[:count - 1]]:
        yield (t.tm, t.tn, t.tk) if kernel == "dlhs" else tuple(t), rule.vmem_limit(kernel, t, on)


def workloads(tk: ModuleType, uneven: bool = False, wide: bool = False, ranked: int = 0) -> Iterator[Workload]:
    rd = tk.ragged_dot
    skew = ROUTING_SKEW if uneven else 0.0
    loose = 80 << 20 if wide else LOOSE_VMEM

    def grid(m: int, k: int, n: int, kernel: str, model: str) -> Iterator[tuple[tuple[int, int, int], int | None]]:
        if ranked:  # the rule's own names: dlhs's k is the output (the sweep's n)
            s_ = next(e for e in (*EXPERTS, *IMBALANCED) if e.model == model)
            return _ranked(tk, kernel, s_.rows, s_.hidden, s_.out, s_.experts, ranked)
        found = tiles(m, k, n, uneven, loose)
        return _wide(tk, kernel, found, REFERENCE.get((model.split(",")[0], kernel))) if wide else (
            (t, None) for t in found)

    for s in IMBALANCED if uneven else EXPERTS:
        case = f"{s.model}: {s.rows} x {s.hidden} -> {s.out}, {s.experts} experts"
        flops = 2 * s.rows * s.hidden * s.out

        def fwd(s=s) -> tuple:  # noqa: ANN001
            return (normal(1, (s.rows, s.hidden)), normal(2, (s.experts, s.hidden, s.out)),
                    group_sizes(s.rows, s.experts, skew=skew))

        def dlhs(s=s) -> tuple:  # noqa: ANN001 - the output's gradient against the weights, transposed in the kernel
            return (normal(1, (s.rows, s.out)), normal(2, (s.experts, s.hidden, s.out)),
                    group_sizes(s.rows, s.experts, skew=skew))

        def drhs(s=s) -> tuple:  # noqa: ANN001 - lhs transposed [hidden, rows] and the output's gradient
            return (normal(1, (s.hidden, s.rows)), normal(2, (s.rows, s.out)),
                    group_sizes(s.rows, s.experts, skew=skew))

        # (kernel, inputs, its (m, k, n) as tiled: m the rows, k the contracted or first output dim, n the other)
        for t, limit in grid(s.rows, s.hidden, s.out, "gmm", s.model):
            def gmm(a, b, g, t=t, limit=limit):  # noqa: ANN001, ANN202
                return rd.gmm(a, b, g, precision=jax.lax.Precision.DEFAULT, out_dtype=jnp.bfloat16, tiling=t,
                              **_limit(limit))
            yield Workload("gmm", case, _name(t, limit), "fwd", lambda f=gmm, m=fwd: (f, m()), flops)
        for t, limit in grid(s.rows, s.out, s.hidden, "dlhs", s.model):  # dlhs: contracts `out`, writes `hidden`
            def gmm_t(a, b, g, t=t, limit=limit):  # noqa: ANN001, ANN202
                return rd.gmm(a, b, g, precision=jax.lax.Precision.DEFAULT, out_dtype=jnp.bfloat16, tiling=t,
                              transpose_rhs=True, **_limit(limit))
            yield Workload("dlhs", case, _name(t, limit), "fwd", lambda f=gmm_t, m=dlhs: (f, m()), flops)
        for t, limit in grid(s.rows, s.hidden, s.out, "tgmm", s.model):
            def tgmm(a, b, g, t=t, limit=limit):  # noqa: ANN001, ANN202
                return rd.tgmm(a, b, g, precision=jax.lax.Precision.DEFAULT, out_dtype=jnp.bfloat16, tiling=t,
                               **_limit(limit))
            yield Workload("tgmm", case, _name(t, limit), "fwd", lambda f=tgmm, m=drhs: (f, m()), flops)


def _limit(limit: int | None) -> dict:
    """The kernels' `vmem_limit_bytes` (port.kdl's argument) where raised; nothing otherwise (the call as before)."""
    return {} if limit is None else {"vmem_limit_bytes": limit}


def _name(t: tuple[int, int, int], limit: int | None) -> str:
    return "x".join(map(str, t)) + ("" if limit is None else f" (VMEM {limit >> 20} MiB)")
