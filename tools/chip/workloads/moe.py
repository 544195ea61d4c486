"""Grouped matmul (MoE experts), fwd and fwd+bwd: `tokamax.ops.ragged_dot` (upstream's public op: its
tuned table, else the package's tile choice) against `jax.lax.ragged_dot` (XLA), and the same op with the
weights fetched one grid step ahead as upstream releases its kernel (`UPSTREAM_FETCH`: the port's lookahead
off), so that one run shows what the lookahead is worth; at the model shapes of `models.EXPERTS` (rows spread
evenly) and `models.IMBALANCED` (spread as an uneven router does, `models.ROUTING_SKEW`)."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import jax

from ..models import EXPERTS, IMBALANCED, ROUTING_SKEW
from . import Workload, group_sizes, normal, summed, with_grads

UPSTREAM_FETCH = "tokamax (weights one step ahead)"


def _traced_within(context: Callable[[], contextlib.AbstractContextManager], fn: Callable[..., Any]
                   ) -> Callable[..., Any]:
    """fn, traced within `context` (the Op reads the port's hook when it is traced)."""
    def run(*args: Any) -> Any:
        with context():
            return fn(*args)
    return run


def workloads(tk: ModuleType) -> Iterator[Workload]:
    hook = importlib.import_module(tk.ops.tpu.RaggedDot.__module__.rsplit(".", 1)[0] + ".tiles_hook")
    impls = {"tokamax": (tk.ops.ragged_dot, contextlib.nullcontext),
             UPSTREAM_FETCH: (tk.ops.ragged_dot, hook.weights_one_step_ahead),
             "xla": (jax.lax.ragged_dot, contextlib.nullcontext)}
    for shape in (*EXPERTS, *IMBALANCED):
        def make_args(shape=shape) -> tuple:  # noqa: ANN001
            return (normal(1, (shape.rows, shape.hidden)),
                    normal(2, (shape.experts, shape.hidden, shape.out), scale=shape.hidden ** -0.5),
                    group_sizes(shape.rows, shape.experts, skew=ROUTING_SKEW * (shape in IMBALANCED)))

        flops = 2 * shape.rows * shape.hidden * shape.out
        case = f"{shape.model}: {shape.rows} x {shape.hidden} -> {shape.out}, {shape.experts} experts"
        for impl, (fn, context) in impls.items():
            fwd = _traced_within(context, fn)
            both = _traced_within(context, with_grads(summed(fn), (0, 1)))
            yield Workload("grouped_matmul", case, impl, "fwd", lambda f=fwd, m=make_args: (f, m()), flops)
            yield Workload("grouped_matmul", case, impl, "fwd+bwd", lambda f=both, m=make_args: (f, m()), 3 * flops)
