"""The package's cost models against what the chip measured: for each benchmark record of a kernel that has
a model (the grouped matmul's tiles, the LM head's kernels and chunked scheme, distillation's kernels), the
seconds `tokamax.roofline` predicts on the measured chip with its calibrated figures, the way the package
itself chooses (the tiles and blocks it would pick at that shape). Splash has no cost model here (upstream's
kernel and blocks): its records have no prediction."""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

from .models import DISTILL, EXPERTS, HEADS

BEFORE_TILES = (128, 128, 128)  # upstream's default tiles, what the grouped matmul ran before the rule


def v5e(tk: ModuleType) -> Any:
    """The measured v5e as the package weighs it (libtpu's figures for the rest)."""
    peak, bandwidth = tk.roofline.MEASURED["TPU v5 lite"]
    return tk.roofline.Chip("v5e", peak, bandwidth, mxu=128, vmem=128 << 20, hbm=16 << 30, generation=5)


def _shape(case: str, shapes: tuple) -> Any:
    return next((s for s in shapes if case.startswith(s.model)), None)


def _grouped(tk: ModuleType, r: dict, chip: Any, rule: bool) -> float | None:
    s = _shape(r["case"], EXPERTS)
    tiles = tk.moe.tiles
    kernels = ("gmm",) if r["pass"] == "fwd" else ("gmm", "dlhs", "tgmm")
    total = 0.0
    for k in kernels:
        t = tiles.choose(k, s.rows, s.hidden, s.out, s.experts, chip) if rule else tiles.Tiles(*BEFORE_TILES)
        total += tiles.seconds(k, s.rows, s.hidden, s.out, s.experts, t, chip)
    return total


def _head(tk: ModuleType, r: dict, chip: Any) -> float | None:
    h = _shape(r["case"], HEADS)
    if h is None:
        return None
    lm = tk.lm_head
    if chunked := re.fullmatch(r"tokamax \(chunks of (\d+)(, pair accumulator)?\)", r["impl"]):
        return lm.fused.cost(h.rows, h.hidden, h.vocab, 2, int(chunked[1]), pair=bool(chunked[2])).seconds(chip)
    if r["impl"] in ("tokamax", "tokamax (kernels)"):
        if r["impl"] == "tokamax" and r["pass"] == "fwd+bwd" and lm.fused.choose(h.rows, h.hidden, h.vocab, 2, chip):
            chunk = lm.fused.choose(h.rows, h.hidden, h.vocab, 2, chip)
            return lm.fused.cost(h.rows, h.hidden, h.vocab, 2, chunk).seconds(chip)
        costs = lm.plan.choose(h.rows, h.hidden, h.vocab, 2, chip).costs(h.hidden, h.vocab, 2)
        names = ("forward",) if r["pass"] == "fwd" else tuple(costs)
        return sum(costs[n].seconds(chip) for n in names)
    return None


def _distill(tk: ModuleType, r: dict, chip: Any) -> float | None:
    d = _shape(r["case"], DISTILL)
    blocks = tk.distill.blocks
    sizes = blocks.Sizes(d.rows, d.student_hidden, d.teacher_hidden, d.vocab)
    by = {k: blocks.choose(sizes, chip.vmem, k) for k in ("forward", "backward_x", "backward_w")}
    costs = tk.distill.cost.costs(sizes, by, beta=0.5)
    names = ("forward",) if r["pass"] == "fwd" else tuple(costs)
    return sum(costs[n].seconds(chip) for n in names)


def predicted(tk: ModuleType, r: dict, *, tiles_rule: bool = True) -> float | None:
    """The cost model's seconds for record `r` (a tokamax record of a modelled kernel), else None.
    `tiles_rule`: the grouped matmul ran the package's tiles (False: upstream's default tiles)."""
    if not r["impl"].startswith("tokamax") or not r.get("median_s"):
        return None
    chip = v5e(tk)
    if r["op"] == "grouped_matmul":
        return _grouped(tk, r, chip, tiles_rule)
    if r["op"] == "lm_head_loss":
        return _head(tk, r, chip)
    if r["op"] == "distillation" and r["impl"] == "tokamax":
        return _distill(tk, r, chip)
    return None
