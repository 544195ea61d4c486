"""Distillation's divergence as a step's loss (`tokamax.distill.loss`: TRL's DistillationTrainer's weighted sum, its
gradients made in the forward by the fused scheme), past the rows where the per-token call's stored scheme fits:
the package's choice "tokamax (loss)" and its chunks forced, the per-token call summed ("tokamax": the kernels
there), XLA's plain loss with both models' float32 [rows, vocab] logits (where it fits the chip), and the same in
XLA over chunks of rows under `jax.checkpoint` (what a JAX user writes where it does not)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import jax
import jax.numpy as jnp

from ..models import DISTILL_LOSS
from . import Workload, with_grads
from .lm_head import distill_args, xla_jsd, xla_kl

KINDS = {0.0: "forward KL", 1.0: "reverse KL", 0.5: "JSD, beta 0.5"}
CHUNKS = (512, 768, 1024)  # the fused scheme at fixed chunks, beside the package's own choice
XLA_CHUNK = 2048  # the rows of each checkpointed chunk of XLA's loss
XLA_MAX_ROWS = 8192  # past it both models' float32 logits and their gradient outgrow the v5e


def xla_loss(beta: float):  # noqa: ANN201
    """XLA's plain loss: the mean divergence over the rows."""
    def loss(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> jax.Array:
        total = xla_kl(xs, ws, xt, wt, beta) if beta in (0.0, 1.0) else xla_jsd(xs, ws, xt, wt)
        return total / xs.shape[0]
    return loss


def xla_chunked(beta: float, chunk: int = XLA_CHUNK):  # noqa: ANN201
    """XLA's loss over chunks of rows, each under `jax.checkpoint` (its logits made again in the backward)."""
    plain = xla_loss(beta)

    def loss(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> jax.Array:
        rows = xs.shape[0]

        def body(total: jax.Array, inputs: tuple) -> tuple:
            return total + jax.checkpoint(lambda a, b: plain(a, ws, b, wt) * chunk)(*inputs), None

        split = (xs.reshape(rows // chunk, chunk, -1), xt.reshape(rows // chunk, chunk, -1))
        return jax.lax.scan(body, jnp.zeros((), jnp.float32), split)[0] / rows
    return loss


def workloads(tk: ModuleType) -> Iterator[Workload]:
    def fused(beta: float, chunk: object = "auto"):  # noqa: ANN202
        def loss(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> jax.Array:
            weights = jnp.full((xs.shape[0],), 1.0 / xs.shape[0], jnp.float32)
            return tk.distill.loss(xs, ws, None, xt, wt, None, weights, beta=beta, chunk=chunk)[0]
        return loss

    def per_token(beta: float):  # noqa: ANN202
        def loss(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> jax.Array:
            return tk.distill.divergence(xs, ws, None, xt, wt, None, beta=beta)[0].mean()
        return loss

    for d in DISTILL_LOSS:
        beta = 0.5 if d.rows == 4096 else 0.0
        case = (f"{d.model} ({KINDS[beta]}, the loss): {d.rows} rows, student {d.student_hidden}, teacher "
                f"{d.teacher_hidden}, vocabulary {d.vocab}")

        def make(d=d) -> tuple:  # noqa: ANN001
            return distill_args(d)

        flops = 2 * d.rows * d.vocab * (d.student_hidden + d.teacher_hidden) + 4 * d.rows * d.vocab * d.student_hidden
        impls = {"tokamax (loss)": fused(beta), **{f"tokamax (loss, chunks of {c})": fused(beta, c) for c in CHUNKS},
                 "tokamax": per_token(beta), "xla (chunked, checkpointed)": xla_chunked(beta)}
        if d.rows <= XLA_MAX_ROWS:
            impls["xla"] = xla_loss(beta)
        for impl, fn in impls.items():
            yield Workload("distillation_loss", case, impl, "fwd+bwd",
                           lambda m=make, fn=fn: (with_grads(fn, (0, 1)), m()), flops)
