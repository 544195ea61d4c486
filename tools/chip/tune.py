"""The grouped matmul's tiles as the chip measures them: `tokamax.tuning.tune_functions` over the MoE experts'
forward and backward (`ops.ragged_dot` under `jax.value_and_grad`: its gmm, dlhs and tgmm calls) at the model
shapes of `models.EXPERTS`, written as one result file. Shipped as `tokamax/moe/measured/<chip>.json`, it is what
the package reads by default on that chip (`tokamax.moe.measured`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

from .models import EXPERTS
from .workloads import summed, with_grads

MAX_CONFIGS = 12
"""Candidates timed per kernel call: upstream's space (~700 per call) ranked by the package's roofline, the
tiles that fit the scoped VMEM first (`tuning.tune._ranked`), and the heuristic's choice among them."""


def calls(tk: ModuleType, only: set[str] | None = None) -> Iterator[tuple[str, Callable[..., Any], tuple]]:
    """The expert shapes' calls (`only`: the models named, by `models.EXPERTS`' model names)."""
    for s in EXPERTS:
        if only and s.model not in only:
            continue
        args = (jax.ShapeDtypeStruct((s.rows, s.hidden), jnp.bfloat16),
                jax.ShapeDtypeStruct((s.experts, s.hidden, s.out), jnp.bfloat16),
                jax.ShapeDtypeStruct((s.experts,), jnp.int32))
        yield f"{s.model}: {s.rows} x {s.hidden} -> {s.out}, {s.experts} experts", \
            with_grads(summed(tk.ops.ragged_dot), (0, 1)), args


def main(tk: ModuleType, out: Path, max_configs: int = MAX_CONFIGS, only: set[str] | None = None) -> int:
    if only and (unknown := only - {s.model for s in EXPERTS}):
        raise ValueError(f"tools.chip tune: no expert shape {sorted(unknown)}; one of {[s.model for s in EXPERTS]}")
    start = time.perf_counter()
    tuned = tk.tuning.tune_functions(list(calls(tk, only)), out=out, max_configs=max_configs, progress_bar=False)
    print(f"tune: {tuned.calls} calls, entries {tuned.entries}, {time.perf_counter() - start:.0f} s -> {out}",
          flush=True)
    for s in tuned.skipped:
        print(f"tune: skipped {s.op}: {s.reason}", flush=True)
    kind, table = tk.moe.measured.read(out)
    for key, m in sorted(table.items()):
        rule = tk.moe.tiles.choose(key.kernel, key.m, key.k, key.n, key.groups, tk.roofline.chip(), key.itemsize)
        print(f"tune: {kind} {key.kernel} {key.m} x {key.k} x {key.n}, {key.groups} groups: "
              f"{'x'.join(map(str, m.tiles))} {m.seconds * 1e3:.2f} ms (the rule: {'x'.join(map(str, rule))})",
              flush=True)
    return 0 if table else 1
