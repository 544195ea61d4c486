"""Distillation's choices: for `distill.divergence` the scheme (`distill.scheme_of`: the stored scheme at a chunk, the
recompute scheme at its chunks, or the kernels at their blocks) with each scheme's roofline time and the plain-XLA
ones' temporaries against the share of HBM; for `distill.loss` the fused scheme's chunk (`distill.fused.loss_chunk`)
and every chunk `fused.choose` weighed, or the per-token call's scheme and why."""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import roofline
from ..distill import blocks, cost, fused, kernels, recompute, stored
from ..distill.divergence import blocks_for, scheme_of
from ..distill.divergence import setting as setting_of
from ..lm_head.blocks import round_up
from .report import Alternative, Choice, Explanation
from .target import device_kind, spec


def _operands(xs: Any, ws: Any, xt: Any, wt: Any) -> tuple[Any, Any, int, blocks.Sizes]:
    xs, ws, xt, wt = (spec(a) for a in (xs, ws, xt, wt))
    for name, a in (("student_hidden", xs), ("student_weight", ws), ("teacher_hidden", xt), ("teacher_weight", wt)):
        if getattr(a, "ndim", None) != 2:
            raise ValueError(f"tokamax explain distill: {name} must be a 2-D array, got {getattr(a, 'shape', a)}")
    return xs, xt, ws.shape[0], kernels.sizes_of(xs, xt, ws.shape[0])


def _divergence(chip: str, xs: Any, xt: Any, vocab: int, sizes: blocks.Sizes, setting: kernels.Setting, scheme: str,
                op: str) -> Explanation:
    on = roofline.chip()
    chosen = scheme_of(scheme, xs, xt, vocab, setting)
    chunk = chosen.chunk if chosen.scheme == "stored" else None
    source = "the cost model (scheme_of)" if scheme == "auto" else f"given (scheme={scheme!r})"
    budget = on.hbm // stored.HBM_SHARE
    try:
        by = {k: blocks_for(xs, xt, vocab, k) for k in blocks.KERNELS}
    except ValueError as e:  # hidden sizes the kernels' smallest blocks do not fit
        by, why = {}, str(e)
    weighed = [Alternative(f"stored {c}", cost.stored(sizes, c).seconds(on), cost.stored(sizes, c).temp_bytes,
                           cost.stored(sizes, c).temp_bytes <= budget)
               for c in sorted({stored.chunk_for(sizes.rows, c) for c in stored.CHUNKS}, reverse=True)]
    row_chunk, vchunk = recompute.row_chunk(sizes, on), recompute.choose_chunk(sizes, on)
    again = cost.recompute(sizes, vchunk, chunk=row_chunk)
    weighed.append(Alternative(f"recompute {row_chunk} x {vchunk}", again.seconds(on), again.temp_bytes,
                               again.temp_bytes <= budget))
    kernel_choices: list[Choice] = []
    if by:
        costs = cost.costs(sizes, by, beta=setting.beta, soft_caps=setting.soft_caps)
        weighed.append(Alternative("kernels", sum(c.seconds(on) for c in costs.values()), 0, True))
        run = "the package's block rule" if chosen.scheme == "kernels" else "not run"
        kernel_choices = [Choice(k, run, {"rows": by[k].rows, "vocab": by[k].vocab},
                                 vmem_bytes=by[k].kernel_vmem_bytes(k, sizes), seconds=costs[k].seconds(on),
                                 note="the largest blocks that fit the chip's VMEM (distill.blocks.choose)")
                          for k in blocks.KERNELS]
    if chosen.scheme == "kernels":
        if not by:
            raise ValueError(f"tokamax explain distill: the kernels take no blocks at these sizes ({why})")
        path, seconds = "kernels", sum(c.seconds for c in kernel_choices)
        note = "the kernels: no rows, or the stored and recompute schemes past the share or slower"
    elif chosen.scheme == "recompute":
        path, seconds = f"recompute {chosen.chunk} x {chosen.vchunk}", again.seconds(on)
        note = (f"Q made again by {chosen.vchunk} vocabulary columns a step: temporaries {again.temp_bytes >> 20} MiB "
                "(the stored scheme's Q past the share, or slower)")
    else:
        path, seconds = f"stored {chunk}", cost.stored(sizes, chunk).seconds(on)
        note = f"Q [rows, vocab] kept: temporaries {cost.stored(sizes, chunk).temp_bytes >> 20} MiB"
    scheme_choice = Choice("scheme", source, {"chunk": chosen.chunk, "vchunk": chosen.vchunk} if chosen.vchunk
                           else {"chunk": chunk}, seconds=seconds, note=note)
    kernels_run = kernel_choices if chosen.scheme == "kernels" else ()
    return Explanation(op, chip, device_kind(chip), path, (scheme_choice, *kernels_run),
                       tuple(sorted(weighed, key=lambda a: (not a.fits, a.seconds))), budget)


def explain(chip: str, student_hidden: Any, student_weight: Any, student_bias: Any, teacher_hidden: Any,
            teacher_weight: Any, teacher_bias: Any, *, beta: float, temperature: float = 1.0,
            student_scale: float = 1.0, student_soft_cap: float | None = None, teacher_scale: float = 1.0,
            teacher_soft_cap: float | None = None, scheme: str = "auto") -> Explanation:
    """`distill.divergence(...)` on the chip."""
    del student_bias, teacher_bias
    xs, xt, vocab, sizes = _operands(student_hidden, student_weight, teacher_hidden, teacher_weight)
    setting = setting_of(beta, temperature, student_scale, student_soft_cap, teacher_scale, teacher_soft_cap)
    return _divergence(chip, xs, xt, vocab, sizes, setting, scheme, "distill.divergence")


def explain_loss(chip: str, student_hidden: Any, student_weight: Any, student_bias: Any, teacher_hidden: Any,
                 teacher_weight: Any, teacher_bias: Any, weights: Any = None, *, beta: float,
                 temperature: float = 1.0, student_scale: float = 1.0, student_soft_cap: float | None = None,
                 teacher_scale: float = 1.0, teacher_soft_cap: float | None = None,
                 chunk: int | str | None = "auto") -> Explanation:
    """`distill.loss(...)` on the chip: the fused scheme's chunk, or the per-token call's scheme and why."""
    del student_bias, teacher_bias, weights
    xs, xt, vocab, sizes = _operands(student_hidden, student_weight, teacher_hidden, teacher_weight)
    setting = setting_of(beta, temperature, student_scale, student_soft_cap, teacher_scale, teacher_soft_cap)
    on = roofline.chip()
    if chunk == "auto":
        chunk, source = fused.loss_chunk(sizes, on, setting), "the rule (fused.loss_chunk)"
    elif chunk is None or (isinstance(chunk, int) and not isinstance(chunk, bool) and chunk > 0):
        source = f"given (chunk={chunk})"
    else:
        raise ValueError(f"tokamax explain distill.loss: chunk must be \"auto\", a number of rows or None, got "
                         f"{chunk!r}")
    if chunk is None:
        per_token = _divergence(chip, xs, xt, vocab, sizes, setting, "auto", "distill.loss")
        why = (source if source.startswith("given") else "the fused scheme fits no chunk"
               if fused.choose(sizes, on) is None else "the fused scheme would add dW by the accumulator kernel, "
               "slower where the stored scheme fits: fused.PAIR_SLOWER")
        return dataclasses.replace(per_token, path=f"per-token {per_token.path} ({why})")
    budget = on.hbm // fused.HBM_SHARE - fused.SMALL_BUFFERS
    costs = [fused.cost(sizes, c, kernel=fused.held_pair(sizes, c, on)) for c in fused.CHUNKS
             if c <= round_up(sizes.rows, fused.CHUNKS[-1])]
    weighed = tuple(sorted((Alternative(f"fused {c.chunk}" + (": dW by the accumulator kernel" if c.kernel else ""),
                                        c.seconds(on), c.temp_bytes, c.temp_bytes <= budget) for c in costs),
                           key=lambda a: (not a.fits, a.seconds)))
    taken = fused.cost(sizes, chunk, kernel=fused.held_pair(sizes, chunk, on))
    choice = Choice("scheme", source, {"chunk": chunk, "accumulator_kernel": taken.kernel}, seconds=taken.seconds(on),
                    note="the gradients made in the forward, one chunk's memory (distill.fused)")
    return Explanation("distill.loss", chip, device_kind(chip), f"fused {chunk}", (choice,), weighed, budget)
