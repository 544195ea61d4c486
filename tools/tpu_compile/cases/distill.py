"""Our distillation kernels (`tokamax.distill.divergence`: one forward kernel, two backward) for one
DistillationTrainer step at the issue's size: a student of hidden 2048 distilled from a teacher of
hidden 4096 over Qwen's 151,936 vocabulary, 16,384 tokens, bf16, `jax.grad` in the student's hidden
states and head of the summed divergence (the trainer's loss before its division). beta 0.5 (the
generalized JSD: two forward sweeps) with both soft caps and a temperature is the default tier's case on
v6e; the KLs (one sweep) and every chip are in the "all" tier."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..case import Case, on_chips, spec

TOKENS, STUDENT_HIDDEN, TEACHER_HIDDEN, VOCAB = 16384, 2048, 4096, 151936
BETAS = {"jsd": 0.5, "forward-kl": 0.0, "reverse-kl": 1.0}


def step(kernel: Any, mesh: Any, beta: float) -> tuple[Any, list[jax.ShapeDtypeStruct]]:
    """d/d(x_s, w_s) of sum(divergence) (heads without biases; soft caps 30 and 50, temperature 0.9)."""
    specs = [spec(mesh, (TOKENS, STUDENT_HIDDEN), jnp.bfloat16), spec(mesh, (VOCAB, STUDENT_HIDDEN), jnp.bfloat16),
             spec(mesh, (TOKENS, TEACHER_HIDDEN), jnp.bfloat16), spec(mesh, (VOCAB, TEACHER_HIDDEN), jnp.bfloat16)]

    def loss(xs: Any, ws: Any, xt: Any, wt: Any) -> Any:
        divergence, _ = kernel.distill.divergence(xs, ws, None, xt, wt, None, beta=beta, temperature=0.9,
                                                  student_soft_cap=30.0, teacher_soft_cap=50.0)
        return jnp.sum(divergence)

    return jax.grad(loss, argnums=(0, 1)), specs


def _build(beta: float) -> Any:
    return lambda kernel, mesh: step(kernel, mesh, beta)


def cases() -> list[Case]:
    out = []
    for name, beta in BETAS.items():
        out += on_chips(lambda chip, name=name, beta=beta: Case(
            f"distill/{name}/hs{STUDENT_HIDDEN}-ht{TEACHER_HIDDEN}-v{VOCAB}-t{TOKENS}/fwd+bwd", "distill",
            "Qwen-vocabulary pair", chip, _build(beta),
            tier="default" if (name, chip) == ("jsd", "v6e") else "all"))
    return out
