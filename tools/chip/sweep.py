"""The grouped matmul's tiles measured on the chip: each of its three kernels (the forward `gmm`, the
backward's dlhs `gmm` on the transposed weights, its drhs `tgmm`) at each model shape of `models.EXPERTS`,
over a grid of tiles; what the tile rule (`tokamax.ragged_dot_tiles`) is checked against. With `uneven`, the shapes
of `models.IMBALANCED` with their rows spread as an uneven router does (`models.ROUTING_SKEW`), over a wider grid
(`UNEVEN_TILE_M`: row tiles down to 128). Both grids take each dimension whole as well as in tiles of `TILE_KN`."""

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


def _clip(tile: int, size: int) -> int:
    return size if tile >= size else tile


def _vmem(a: tuple[int, int], b: tuple[int, int], out: tuple[int, int]) -> int:
    return 2 * 2 * (a[0] * a[1] + b[0] * b[1]) + 3 * 2 * out[0] * out[1] + 4 * out[0] * out[1]


def tiles(m: int, k: int, n: int, uneven: bool = False) -> Iterator[tuple[int, int, int]]:
    seen = set()
    # the whole dimension too: the rule offers it (`tiles._options`)
    grid = itertools.product(UNEVEN_TILE_M if uneven else TILE_M, (*TILE_KN, k), (*TILE_KN, n))
    for tm, tk, tn in grid:
        t = (_clip(tm, m), _clip(tk, k), _clip(tn, n))
        if t not in seen and _vmem((t[0], t[1]), (t[1], t[2]), (t[0], t[2])) <= LOOSE_VMEM:
            seen.add(t)
            yield t


def workloads(tk: ModuleType, uneven: bool = False) -> Iterator[Workload]:
    rd = tk.ragged_dot
    skew = ROUTING_SKEW if uneven else 0.0
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
        for t in tiles(s.rows, s.hidden, s.out, uneven):
            def gmm(a, b, g, t=t):  # noqa: ANN001, ANN202
                return rd.gmm(a, b, g, precision=jax.lax.Precision.DEFAULT, out_dtype=jnp.bfloat16, tiling=t)
            yield Workload("gmm", case, "x".join(map(str, t)), "fwd", lambda f=gmm, m=fwd: (f, m()), flops)
        for t in tiles(s.rows, s.out, s.hidden, uneven):  # dlhs: contracts `out`, writes `hidden`
            def gmm_t(a, b, g, t=t):  # noqa: ANN001, ANN202
                return rd.gmm(a, b, g, precision=jax.lax.Precision.DEFAULT, out_dtype=jnp.bfloat16, tiling=t,
                              transpose_rhs=True)
            yield Workload("dlhs", case, "x".join(map(str, t)), "fwd", lambda f=gmm_t, m=dlhs: (f, m()), flops)
        for t in tiles(s.rows, s.hidden, s.out, uneven):
            def tgmm(a, b, g, t=t):  # noqa: ANN001, ANN202
                return rd.tgmm(a, b, g, precision=jax.lax.Precision.DEFAULT, out_dtype=jnp.bfloat16, tiling=t)
            yield Workload("tgmm", case, "x".join(map(str, t)), "fwd", lambda f=tgmm, m=drhs: (f, m()), flops)
