"""Our linear softmax cross-entropy at any size (`tokamax.lm_loss`: upstream's Mosaic kernels on
operands padded to the lanes) for one training step at 8,192 tokens in bf16, as the Torch op and
transformers' fused causal-LM loss run it: the per-row losses and log-sum-exps, then upstream's VJP on
those residuals for the mean loss's dx and dw, at the vocabularies and hidden sizes people train."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, on_chips, spec
from .lm_head import MODELS, TOKENS

DEFAULT = {"Llama-3.1-8B"}  # the default tier's model (v6e); the rest of the grid is in "all"
# Heads no single chip of that kind holds with their step's temporaries: at Gemma 3's 262,208 vocabulary (off
# the lanes) the padded weight is copied and upstream's VJP returns dw in float32 (5.6 GB here), 18.75 GB of
# temporaries in all on v5e's 16 GiB (libtpu: CompileTimeHbmOom). Such a head is sharded in practice.
BEYOND_ONE_CHIP = {("Gemma-3-27B", "v5e")}


def _build(hidden: int, vocab: int) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        specs = [spec(mesh, (TOKENS, hidden), jnp.bfloat16), spec(mesh, (TOKENS,), jnp.int32),
                 spec(mesh, (hidden, vocab), jnp.bfloat16)]

        def step(x: Any, labels: Any, w: Any) -> Any:
            losses, lse = kernel.lm_loss.row_losses(x, labels, w)
            d_losses = jnp.full_like(losses, 1.0 / TOKENS)
            dx, dw = kernel.lm_loss.row_losses_vjp(x, labels, w, lse, losses, d_losses)
            return jnp.mean(losses), dx, dw

        return step, specs
    return build


def cases() -> list[Case]:
    out = []
    for model in MODELS:
        out += on_chips(lambda chip, model=model: Case(
            f"lm_loss/{model.name}/h{model.hidden}-v{model.vocab}/fwd+bwd", "lm_loss", model.name, chip,
            _build(model.hidden, model.vocab),
            tier="default" if model.name in DEFAULT and chip == "v6e" else "all"))
    return [c for c in out if (c.model, c.target) not in BEYOND_ONE_CHIP]
