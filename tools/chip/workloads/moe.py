"""Grouped matmul (MoE experts), fwd and fwd+bwd: `tokamax.ops.ragged_dot` (upstream's public op: its
tuned table, else the package's tile choice) against `jax.lax.ragged_dot` (XLA)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import jax

from ..models import EXPERTS
from . import Workload, group_sizes, normal, summed, with_grads


def workloads(tk: ModuleType) -> Iterator[Workload]:
    impls = {"tokamax": tk.ops.ragged_dot, "xla": jax.lax.ragged_dot}
    for shape in EXPERTS:
        def make_args(shape=shape) -> tuple:  # noqa: ANN001
            return (normal(1, (shape.rows, shape.hidden)),
                    normal(2, (shape.experts, shape.hidden, shape.out), scale=shape.hidden ** -0.5),
                    group_sizes(shape.rows, shape.experts))

        flops = 2 * shape.rows * shape.hidden * shape.out
        case = f"{shape.model}: {shape.rows} x {shape.hidden} -> {shape.out}, {shape.experts} experts"
        for impl, fn in impls.items():
            yield Workload("grouped_matmul", case, impl, "fwd", lambda fn=fn, m=make_args: (fn, m()), flops)
            yield Workload("grouped_matmul", case, impl, "fwd+bwd",
                           lambda fn=fn, m=make_args: (with_grads(summed(fn), (0, 1)), m()), 3 * flops)
