"""The grouped matmul with the rows past the groups zeroed and without (`bench --only moe_padded`): `ops.ragged_dot`
as the package runs it ("tokamax": those rows written zero, port.kdl's fix over upstream) against the same op within
the port's `padded_rows_unwritten()` (upstream's kernel leaves them unwritten), fwd and fwd+bwd, at Mixtral's experts
fully used (the zeroing runs nothing: the cost of asking) and capacity-padded (`PADDED` of the rows past the groups,
as a fixed per-step capacity leaves them: the cost of the zeros, which the issue holds under 1%); beside them XLA's
`jax.lax.ragged_dot` (what a user has instead, rows past the groups zero too)."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from types import ModuleType

import jax
import jax.numpy as jnp

from ..models import EXPERTS
from . import Workload, group_sizes, normal, summed, with_grads
from .moe import _traced_within

UNWRITTEN = "tokamax (padded rows unwritten)"
PADDED = 0.1


def workloads(tk: ModuleType) -> Iterator[Workload]:
    hook = importlib.import_module(tk.ops.tpu.RaggedDot.__module__.rsplit(".", 1)[0] + ".tiles_hook")
    shape = next(s for s in EXPERTS if s.model.startswith("Mixtral"))
    for padded in (0.0, PADDED):
        routed = shape.rows - int(shape.rows * padded)

        def make_args(routed=routed) -> tuple:  # noqa: ANN001
            sizes = group_sizes(routed, shape.experts)
            return (normal(1, (shape.rows, shape.hidden)),
                    normal(2, (shape.experts, shape.hidden, shape.out), scale=shape.hidden ** -0.5),
                    jnp.asarray(sizes, jnp.int32))

        flops = 2 * routed * shape.hidden * shape.out
        use = "fully used" if not padded else f"{shape.rows - routed} rows padded ({padded:.0%})"
        case = f"{shape.model}: {shape.rows} x {shape.hidden} -> {shape.out}, {shape.experts} experts, {use}"
        for impl, op, context in (("tokamax", tk.ops.ragged_dot, contextlib.nullcontext),
                                  (UNWRITTEN, tk.ops.ragged_dot, hook.padded_rows_unwritten),
                                  ("xla", jax.lax.ragged_dot, contextlib.nullcontext)):
            fwd = _traced_within(context, op)
            both = _traced_within(context, with_grads(summed(op), (0, 1)))
            yield Workload("grouped_matmul", case, impl, "fwd", lambda f=fwd, m=make_args: (f, m()), flops)
            yield Workload("grouped_matmul", case, impl, "fwd+bwd", lambda f=both, m=make_args: (f, m()), 3 * flops)
