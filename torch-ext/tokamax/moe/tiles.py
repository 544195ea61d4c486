"""Tiles for upstream's ragged-dot kernels (`gmm`, the backward's dlhs `gmm` on transposed weights, `tgmm`)
on chips before TPU7x, where upstream's heuristics return the default 128 x 128 x 128 tiles (about 10 TFLOP/s
on a v5e, where wide tiles reach 100-170): upstream's tuned table still wins where it has the call's entry,
and TPU7x keeps upstream's own heuristic.

Where the chip measured the call's exact shape (`measured`: the result files shipped for it, made on the chip by
`tokamax.tuning`), its fastest tiles; elsewhere the rule: among tiles of 128 to 1024 rows that divide the rows (or
all of them) and 128 to 2048 of each other dimension or the whole dimension (past 2048 too: a contraction in one
tile), those whose VMEM (`vmem_bytes`) fits the chip's scoped VMEM, the fastest by the roofline (`seconds`): step by
step, the MXU time of the padded tiles actually visited (a group's last row tile is worked whole) against the HBM
time of what the grid fetches for the next step, and a fixed cost per grid step.
The VMEM model and the rule were checked on a v5e (tools/chip/sweep.py: 300 tilings at five model shapes, which
compiled and how fast) and by the compile tier for v5e, v6e and v7x.

Kernels and their dimensions, (m, k, n) as upstream's Config names them:
- "gmm": lhs [m, k] x rhs [g, k, n] -> [m, n]; tiles (tm, tk, tn).
- "dlhs": grad [m, n] x rhs [g, k, n] (transposed in the kernel) -> [m, k]; upstream's Config keeps the
  forward's names, so its tile_k tiles the output k and tile_n the contracted n.
- "tgmm": lhs [m, k] x grad [m, n] -> [g, k, n], m contracted.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

from .. import roofline
from ..roofline import Chip
from . import measured

ROWS = (128, 256, 512, 1024)
"""Row tiles. A group's last row tile is worked whole (`_step_classes`: row tiles + groups - 1 visits, the count
upstream's group metadata makes, within one at the benchmark's routings, even and uneven), so where groups are
short a smaller tile wastes less: at gpt-oss-120b's experts over 128 uneven groups (32,768 rows, 256 a group on
average) the v5e ran gmm in 128 x 2880 x 1024 at 14.10 ms against 15.08 for the best of 256 rows and more, dlhs
(128, 512, 5760) at 13.60 against 15.97 (benchmarks/measured/v5e-2026-12-05-sweep-gpt-oss-120b-uneven-f38ceff.json),
and the tune files' fastest include 128 rows at even routing too (gpt-oss-20b's gmm and dlhs, Qwen3-30B-A3B's and
OLMoE's dlhs: torch-ext/tokamax/moe/measured/). `seconds` counts a 128-row step as it does any other (the MXU's
fill on chips whose MXU is wider): a further cost per 128-row step, fitted to every gmm and dlhs record that timed
128 rows (those files, -tiles-uneven-2b6da0b, the gpt-oss-120b sweep), is best at none: the chip's spread about
the model within each call grows either way."""
COLUMNS = (128, 256, 512, 1024, 2048)
TGMM_VMEM_SHARE = 0.9
"""tgmm's tiles keep a tenth of the scoped VMEM free: on the v5e two tilings within the model's bound failed
to compile where every gmm within it compiled (the kernel's masking of a group's rows takes more)."""
RAISED_VMEM_SHARE = 0.9
"""Every kernel's tiles keep a tenth of the raised limit free: at 64 MiB on the v5e one tiling of 296 past the default
failed to compile, Mixtral's dlhs in 512 x 14336 x 512 (a whole contraction of 14,336) at 92% of the limit by
`vmem_bytes`, where tilings up to 99.8% compiled (benchmarks/measured/v5e-2026-12-05-sweep-wide-636e61e.json)."""


TGMM_TIE = 1.02
"""tgmm's tilings within 2% of the model's fastest are ties, and its ties go to the smaller row tile: where groups
are many, each group boundary inside a row tile visits the whole tile again (masked), a cost the model counts in
MXU time only, and the chip runs it slower than that the larger the tile. At uneven routing the v5e ran every
tgmm tiling faster at 128 rows than at 256 with the same columns (10 of 10 pairs: gpt-oss-120b's 128 x 2880 x 1024
15.88 ms against 16.80, 128 x 512 x 5760 16.49 against 17.79; benchmarks/measured/v5e-2026-12-05-sweep-wide-uneven-
2d18065.json); at the balanced shapes 128 rows ran within 1.5% of 256 or faster (gpt-oss-20b's 128 x 512 x 5760 6.53
ms against 6.92; -sweep-ranked-84d05f3)."""


SHORT_TIE = 1.05
"""Where the groups are `short`, gmm's and dlhs' tilings within 5% of the model's fastest are ties, and go to the
least MXU work: the weights stream there runs at 630-700 GB/s on the v5e, past the 590 the model is calibrated to
(`roofline.MEASURED`), so a row tile of 256 whose masked MXU work the model hides under that stream is the slower
(Granite 3.0 1B-A400M's down projection at 256 tokens: 256 x 512 x 1024 0.148 ms, 3.8% ahead in the model, against
128 x 512 x 1024 0.123; benchmarks/measured/v5e-2026-12-08-gmm-prefill-granite-3c4d6fc.json)."""


class Tiles(NamedTuple):
    tm: int
    tk: int
    tn: int


def _options(size: int, choices: tuple[int, ...]) -> list[int]:
    """Tile sizes for a dimension of `size`: the choices below it, and the whole dimension (a block equal to the
    array's dimension need not be a multiple of 128), past the largest choice too: a contraction in one tile fetches
    a group's weights block once per output tile, not once per row tile (the v5e at Qwen3-235B-A22B's experts,
    65,536 x 4096 -> 1536 over 128 uneven groups: 7.51 ms in 256 x 4096 x 512, 8.63 in the best of the choices,
    256 x 1024 x 1536; benchmarks/measured/v5e-2026-12-05-tiles-uneven-2b6da0b.json). `fits` keeps what VMEM holds."""
    return sorted({*(c for c in choices if c < size), size})


def _row_options(m: int) -> list[int]:
    """Row tiles for m rows: the kernels need m to be a multiple of the row tile (`make_group_metadata`), or the
    tile to be all of m (up to the largest row tile)."""
    return sorted({t for t in ROWS if t < m and m % t == 0} | ({m} if m <= ROWS[-1] else set()))


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def operand_tiles(kernel: str, t: Tiles) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """(lhs block, rhs block, output block) in elements, as the kernel holds them."""
    if kernel == "gmm":
        return (t.tm, t.tk), (t.tk, t.tn), (t.tm, t.tn)
    if kernel == "dlhs":  # contracted n, output k
        return (t.tm, t.tn), (t.tk, t.tn), (t.tm, t.tk)
    return (t.tm, t.tk), (t.tm, t.tn), (t.tk, t.tn)  # tgmm: the contraction over m


def vmem_bytes(kernel: str, t: Tiles, itemsize: int = 2, buffers: int = 2) -> int:
    """What the kernel holds in VMEM: the input blocks in `buffers` buffers (upstream's Config's
    `input_buffer_count`: the lhs's in gmm and dlhs, whose weights keep two, both inputs' in tgmm), the output
    block double-buffered, the float32 accumulator and the float32 product of a step (before it is added)."""
    a, b, out = operand_tiles(kernel, t)
    rhs_buffers = buffers if kernel == "tgmm" else 2
    return (itemsize * (buffers * a[0] * a[1] + rhs_buffers * b[0] * b[1]) + 2 * itemsize * out[0] * out[1]
            + 8 * out[0] * out[1])


def fits(kernel: str, t: Tiles, on: Chip, itemsize: int = 2, buffers: int = 2) -> bool:
    """Whether the tiles fit the VMEM the kernel is compiled with: `RAISED_VMEM_SHARE` of the chip's raised limit
    (`vmem_limit`)."""
    return vmem_bytes(kernel, t, itemsize, buffers) <= RAISED_VMEM_SHARE * on.raised_vmem


def vmem_limit(kernel: str, t: Tiles, on: Chip, itemsize: int = 2, buffers: int = 2) -> int | None:
    """The `vmem_limit_bytes` the kernel is compiled with at tiles `t` (port.kdl's argument, asked by the Op through
    `tiles_hook.vmem_limit`): None, libtpu's default, where they fit the default scoped VMEM (tgmm's within
    `TGMM_VMEM_SHARE` of it) or where the raised limit is the default (v7x), else the chip's raised limit
    (`Chip.raised_vmem`), which `fits` holds them to."""
    share = TGMM_VMEM_SHARE if kernel == "tgmm" else 1.0
    within = vmem_bytes(kernel, t, itemsize, buffers) <= share * on.scoped_vmem
    return None if within or on.raised_vmem <= on.scoped_vmem else on.raised_vmem


GROUP_WEIGHTS_UNHIDDEN = 0.4
"""The share of a group's weights block whose fetch no compute hides when the grid moves to the next group (per
output tile): the pipeline fetches it one step ahead, from the group metadata, while the other operands' fetches
queue beside it. Fitted on the v5e (benchmarks/measured/v5e-2026-12-04-bench-moe-8b33815.json and -9410969.json,
the tune file torch-ext/tokamax/moe/measured/v5e.json): without it the shapes of 64 and 128 groups of ~512 rows
(OLMoE, Qwen3-30B-A3B) ran 18-28% over the model, Mixtral's 8 groups of 2048 rows within 11%; 0.4 puts every
grouped-matmul benchmark record within 0.82-1.16 of the chip (0.5 and more put Mixtral's forward over 1.17, and
rank gpt-oss's dlhs tiles of a whole contraction too slow)."""


GROUP_WEIGHTS_UNHIDDEN_AHEAD = 0.5
"""The same share where gmm fetches the weights with lookahead (port.kdl's fix over upstream: the next group's
block is fetched as soon as a buffer frees, behind the whole current group, `_step_classes`): the rows' own
fetches still queue behind it. Fitted on the v5e (benchmarks/measured/v5e-2026-12-04-bench-moe-9357b96.json, which
times both fetches in one run). None where the groups are `short`: there the weights stream is the call (one row
tile a group), and with the share counted the rule split the contraction at every such zoo prefill call it was
timed at (0.50-1.23x `lax.ragged_dot`'s time, slower at 10 of 13), where one contraction tile of 128 rows ran at
1.00-2.03x XLA's speed (benchmarks/measured/v5e-2026-12-08-gmm-prefill-be20a9b.json). Letting it stall only where
the HBM had room (the same at a prefill's rows) moved 18 training calls to tiles that ran 5-30% slower
(-gmm-changed-20fb896.json)."""


def short(m: int, groups: int) -> bool:
    """Whether the groups average fewer rows than the smallest row tile (a prefill's: 2 to 64 rows a group at the
    zoo's 128 to 512 tokens): each group's rows are one visit of one row tile, mostly masked, so that no step of the
    group's own queues behind the next group's weights (`GROUP_WEIGHTS_UNHIDDEN_AHEAD` is 0 there), and a larger row
    tile is more MXU work, not fewer steps (`choose`'s ties)."""
    return m < groups * ROWS[0]


def _step_classes(kernel: str, m: int, k: int, n: int, groups: int, t: Tiles,
                  itemsize: int, lookahead: bool = True) -> tuple[list[tuple[int, int, float]], float]:
    """The grid's steps in classes of (count, flops per step, HBM bytes fetched for the next step), and the bytes
    nothing hides. Pallas fetches a block only when its index changes from one step to the next, so where the
    contraction is one tile (gmm and dlhs) a group's weights block is fetched once per output tile, at the group's
    first visit, and a row tile a group boundary crosses (visited again by the next group) fetches no rows again;
    edge blocks move only what is in bounds (the MXU works them whole). With `lookahead` (gmm and dlhs, as the
    package runs them) a group's weights block is fetched behind all the steps of the group before it, not one."""
    row_tiles = _cdiv(m, t.tm)
    revisits = groups - 1  # each group boundary inside a row tile visits it once more
    if kernel == "tgmm":  # grid (n, k, row visits): the [k, n] block written once per group
        tiles_k, tiles_n = _cdiv(k, t.tk), _cdiv(n, t.tn)
        flops = 2 * t.tm * t.tk * t.tn
        rows_in = t.tm * (k / tiles_k + n / tiles_n) * itemsize
        out = (k / tiles_k) * (n / tiles_n) * itemsize
        blocks = tiles_k * tiles_n
        return [(blocks * row_tiles, flops, rows_in), (blocks * revisits, flops, out)], blocks * out
    # gmm and dlhs: grid (output tiles, row visits, contraction tiles); dlhs contracts n (its tn), writes k (tk)
    size_c, tile_c, size_o, tile_o = (k, t.tk, n, t.tn) if kernel == "gmm" else (n, t.tn, k, t.tk)
    tiles_c, tiles_o = _cdiv(size_c, tile_c), _cdiv(size_o, tile_o)
    c, o = size_c / tiles_c, size_o / tiles_o
    lhs, weights, out = t.tm * c * itemsize, c * o * itemsize, t.tm * o * itemsize
    flops = 2 * t.tm * tile_c * tile_o
    unhidden = tiles_o * groups * GROUP_WEIGHTS_UNHIDDEN * weights
    if tiles_c == 1 and lookahead:  # every step, its share of the rows and of its group's weights
        steps = tiles_o * (row_tiles + revisits)
        moved = tiles_o * (row_tiles * (lhs + out) + (groups - 1) * weights)
        unhidden = 0.0 if short(m, groups) else tiles_o * groups * GROUP_WEIGHTS_UNHIDDEN_AHEAD * weights
        return [(steps, flops, moved / steps)], unhidden + tiles_o * weights
    if tiles_c > 1:  # every step fetches rows and weights; the output block is written once per row tile
        return [(tiles_o * row_tiles, flops, lhs + weights + out),
                (tiles_o * (row_tiles * (tiles_c - 1) + revisits * tiles_c), flops, lhs + weights)], unhidden
    # one contraction tile: a new row tile fetches rows (and writes the last), a group's first visit its weights
    return [(tiles_o * row_tiles, flops, lhs + out), (tiles_o * revisits, flops, weights)], unhidden + tiles_o * weights


def seconds(kernel: str, m: int, k: int, n: int, groups: int, t: Tiles, on: Chip, itemsize: int = 2,
            lookahead: bool = True) -> float:
    """The roofline time of one call, step by step: each class of grid steps at the larger of its MXU time (the
    tiles worked whole, a group's last row tile too) and the HBM time of what it fetches for the next step (what
    Pallas double-buffers behind it; `_step_classes`), a fixed cost per grid step, and the weights fetches no
    step hides (`GROUP_WEIGHTS_UNHIDDEN`, the first block).

    A roofline over the whole call instead hides a group's weights fetch behind other groups' compute and counted
    the weights once per row tile: predicted over measured on the v5e was 1.76 at Mixtral's forward and 1.82 at
    gpt-oss's with the contraction in one tile. Step by step, every grouped-matmul benchmark record on the v5e is
    within 0.82-1.16 (tools/chip/predict.py), and the tiles it ranks first among those the chip timed run within
    5% of the fastest at 14 of the tune file's 15 calls and within 6% at each kernel of the sweep's clean shapes
    (tests/chip/test_predict.py). tgmm runs slower than this count where its groups are many (the model is
    0.56-0.8 of the sweep's times at Qwen3-30B-A3B's 128 groups: storing each group's accumulator, masking the
    rows of a tile two groups share), which no term here holds: at that call its first ran 9.4% over the
    fastest. At uneven routing (128 experts, benchmarks/measured/v5e-2026-12-05-tiles-uneven-2b6da0b.json and
    -sweep-gpt-oss-120b-uneven-f38ceff.json) `choose` takes the fastest tiling timed within the VMEM model for gmm
    and dlhs (Qwen3-235B-A22B's gmm 0.8% over it) and tgmm 5.5-6% over (tests/jax/moe/test_tiles.py)."""
    ahead = lookahead and kernel != "tgmm" and t.tn % 128 == 0 and t.tk % 16 == 0  # as the port's tile hook allows
    classes, unhidden = _step_classes(kernel, m, k, n, groups, t, itemsize, ahead)
    mxu_fill = min(1.0, t.tm / on.mxu) * min(1.0, min(t.tk, t.tn) / on.mxu)
    return sum(roofline.seconds(count * flops, count * moved, count, on, mxu_fill) for count, flops, moved in classes
               if count > 0) + unhidden / on.hbm_bandwidth


def candidates(m: int, k: int, n: int) -> list[Tiles]:
    """Every tiling `choose` weighs at (m, k, n), fitting or not."""
    return [Tiles(*t) for t in itertools.product(_row_options(m), _options(k, COLUMNS), _options(n, COLUMNS))]


def choose(kernel: str, m: int, k: int, n: int, groups: int, on: Chip, itemsize: int = 2) -> Tiles:
    """The fastest fitting tiles for `kernel` at (m, k, n) over `groups` groups on `on`; upstream's default where
    no row tile divides m (the kernels refuse such an m whatever the tiles: upstream's op falls back as before)."""
    fitting = [t for t in candidates(m, k, n) if fits(kernel, t, on, itemsize)]
    if not fitting:
        return Tiles(128, 128, 128)
    # ties (within 1%) go to the larger tiles, then the larger row tile: fewer steps than the model counts; tgmm's
    # (within TGMM_TIE) to the smaller row tile first (`TGMM_TIE`)
    best = min(seconds(kernel, m, k, n, groups, t, on, itemsize) for t in fitting)
    tie = TGMM_TIE if kernel == "tgmm" else SHORT_TIE if short(m, groups) else 1.01
    near = [t for t in fitting if seconds(kernel, m, k, n, groups, t, on, itemsize) <= tie * best]
    if kernel == "tgmm":
        return max(near, key=lambda t: (-t.tm, t.tk * t.tn))
    if short(m, groups):  # a larger row tile is more masked work, not fewer steps
        return max(near, key=lambda t: (t.tk * t.tn, -_visited_flops(kernel, m, k, n, groups, t, itemsize)))
    return max(near, key=lambda t: (t.tk * t.tn, t.tm))


def _visited_flops(kernel: str, m: int, k: int, n: int, groups: int, t: Tiles, itemsize: int) -> float:
    """The MXU's work at tiles `t`, every visited tile worked whole."""
    classes, _ = _step_classes(kernel, m, k, n, groups, t, itemsize)
    return sum(count * flops for count, flops, _ in classes)


def _legal(t: Tiles, m: int, k: int, n: int) -> bool:
    """Row tiles that divide the rows (or all of them), column tiles of whole lanes (or the whole dimension)."""
    return (t.tm == m or m % t.tm == 0) and all(c == size or c % 128 == 0 for c, size in ((t.tk, k), (t.tn, n)))


def rank(kernel: str, m: int, k: int, n: int, groups: int, candidates: list[Tiles], on: Chip,
         itemsize: int = 2, lookahead: bool = True) -> list[Tiles]:
    """The candidates the kernels accept that fit the chip's scoped VMEM, fastest first by the roofline (what
    `tokamax.tuning` times first when it may time only some of upstream's candidates); `lookahead`: as gmm fetches
    its weights (the package's way, or upstream's one step ahead)."""
    fitting = [t for t in candidates if _legal(t, m, k, n) and fits(kernel, t, on, itemsize)]
    return sorted(fitting, key=lambda t: (seconds(kernel, m, k, n, groups, t, on, itemsize, lookahead), -t.tm))


def buffers_for_call(kernel: str, m: int, k: int, n: int, groups: int, itemsize: int) -> int:
    """The input buffering `for_call`'s tiles run with: what the chip measured them at, else upstream's default."""
    found = measured.lookup(roofline.chip().kind, measured.Key(kernel, m, k, n, groups, itemsize))
    return measured.BUFFERS if found is None else found.buffers


def for_call(kernel: str, m: int, k: int, n: int, groups: int, itemsize: int) -> Tiles:
    """What upstream's Op asks through port.kdl's hook on the chip being traced for: the tiles the chip measured
    fastest at this exact call (`measured`), else `choose`."""
    on = roofline.chip()
    found = measured.lookup(on.kind, measured.Key(kernel, m, k, n, groups, itemsize))
    if found is not None:
        return Tiles(*found.tiles)
    return choose(kernel, m, k, n, groups, on, itemsize)
