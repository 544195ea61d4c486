"""Whole training steps (`tools.chip.step`): a model's layers and head, forward and backward over every weight,
with the package's ops against JAX's best (its splash kernel, `lax.ragged_dot`, XLA's head materialized where it
fits beside the layers and chunked past that). Their peak fraction is the step's MFU against the chip's measured
matmul peak; their peak bytes the step's HBM."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

from ..step import decoder, ops
from ..step.models import MATERIALIZED_TOKENS, STEPS, flops
from . import Workload

TOKAMAX = "tokamax"
JAX = "jax (splash 512 blocks, lax.ragged_dot, XLA head)"
JAX_CHUNKED = "jax (splash 512 blocks, lax.ragged_dot, XLA head chunked)"


def workloads(tk: ModuleType) -> Iterator[Workload]:
    for step in STEPS:
        def make(step=step) -> tuple:  # noqa: ANN001
            return (decoder.init(step), *decoder.inputs(step))

        impls = {TOKAMAX: ops.tokamax(tk), JAX_CHUNKED: ops.jax_best(chunked_head=True)}
        if step.tokens <= MATERIALIZED_TOKENS:
            impls[JAX] = ops.jax_best(chunked_head=False)
        for impl, chosen in impls.items():
            yield Workload("step", step.case, impl, "fwd+bwd",
                           lambda m=make, s=step, o=chosen: (decoder.train_step(s, o), m()), flops(step))
