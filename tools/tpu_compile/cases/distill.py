"""Our distillation kernels (`tokamax.distill.divergence`: one forward kernel, two backward) for one
DistillationTrainer step at the issue's size (the kernels forced: `auto` would take the stored scheme
where its [tokens, vocabulary] residual fits the chip, v7x here): a student of hidden 2048 distilled from a teacher of
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
# The widest teacher the kernels take beside a student of 2048 in bf16 at the smallest blocks (128 x 128), per
# chip: what `blocks.choose` accepts within `vmem_limit` (0.9 of 128 MiB of VMEM on v5e and v6e, of 64 MiB on v7x)
WIDEST_TEACHER = {"v6e": 89984, "v7x": 42752}
BOUNDARY = dict(tokens=2048, student=2048, vocab=32000)
REFUSAL = "tokamax distill: hidden sizes of"


def step(kernel: Any, mesh: Any, beta: float, tokens: int, student: int, teacher: int, vocab: int
         ) -> tuple[Any, list[jax.ShapeDtypeStruct]]:
    """d/d(x_s, w_s) of sum(divergence) (heads without biases; soft caps 30 and 50, temperature 0.9)."""
    specs = [spec(mesh, (tokens, student), jnp.bfloat16), spec(mesh, (vocab, student), jnp.bfloat16),
             spec(mesh, (tokens, teacher), jnp.bfloat16), spec(mesh, (vocab, teacher), jnp.bfloat16)]

    def loss(xs: Any, ws: Any, xt: Any, wt: Any) -> Any:
        divergence, _ = kernel.distill.divergence(xs, ws, None, xt, wt, None, beta=beta, temperature=0.9,
                                                  student_soft_cap=30.0, teacher_soft_cap=50.0, scheme="kernels")
        return jnp.sum(divergence)

    return jax.grad(loss, argnums=(0, 1)), specs


def _build(beta: float, tokens: int = TOKENS, student: int = STUDENT_HIDDEN, teacher: int = TEACHER_HIDDEN,
           vocab: int = VOCAB) -> Any:
    return lambda kernel, mesh: step(kernel, mesh, beta, tokens, student, teacher, vocab)


def cases() -> list[Case]:
    out = []
    for name, beta in BETAS.items():
        out += on_chips(lambda chip, name=name, beta=beta: Case(
            f"distill/{name}/hs{STUDENT_HIDDEN}-ht{TEACHER_HIDDEN}-v{VOCAB}-t{TOKENS}/fwd+bwd", "distill",
            "Qwen-vocabulary pair", chip, _build(beta),
            tier="default" if (name, chip) == ("jsd", "v6e") else "all"))
    for chip, teacher in WIDEST_TEACHER.items():
        for t, expect in ((teacher, "compiles"), (teacher + 128, REFUSAL)):
            out.append(Case(f"distill/widest-teacher/hs{BOUNDARY['student']}-ht{t}-v{BOUNDARY['vocab']}/fwd+bwd",
                            "distill", "boundary", chip,
                            _build(0.5, BOUNDARY["tokens"], BOUNDARY["student"], t, BOUNDARY["vocab"]),
                            expect=expect, tier="default" if chip == "v7x" else "all"))
    return out
