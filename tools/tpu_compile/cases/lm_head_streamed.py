"""The labels path with each chunk in `lm_head.streamed`'s two kernels (`loss_and_grads(streamed=True)`, asked for
only) at Gemma 3 4B's head (8,192 rows, hidden 2,560, vocabulary 262,208, bf16; chunks of 1,024, dW in the pair with
an int8 low half), fwd and bwd in one call: Mosaic's VMEM allocation is what `streamed.block_for` must agree with.
The v5e and v6e compile it (two kernels in the chunks' loop, temporaries of one chunk's float32 logits and the low
half: 1.64 GiB, as the v5e's own run laid them out in benchmarks/measured/
v5e-2026-12-05-bench-lm_head-streamed-f98634e.json); on the v7x (64 MiB of VMEM) no vocabulary block fits beside the
chunk, and the package refuses the call before the compiler sees it."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..case import Case, spec
from ._pods import MiB, check_all

ROWS, HIDDEN, VOCAB, CHUNK = 8192, 2560, 262208, 1024
REFUSAL = "tokamax lm_head loss_and_grads: streamed finds no vocabulary block"
TEMP_BELOW = 1800 * MiB  # one chunk's float32 logits (1.0 GiB) and the int8 low half (0.63 GiB), and small buffers


def _build(kernel: Any, mesh: Any) -> tuple[Any, list[jax.ShapeDtypeStruct]]:
    lm_head = kernel.lm_head
    specs = [spec(mesh, (ROWS, HIDDEN), jnp.bfloat16), spec(mesh, (VOCAB, HIDDEN), jnp.bfloat16),
             spec(mesh, (ROWS,), jnp.int32)]

    def fn(x: Any, w: Any, t: Any) -> Any:
        weights = jnp.full(t.shape, 1.0 / ROWS, jnp.float32)
        return lm_head.fused.loss_and_grads(x, w, None, t, weights, lm_head.IDENTITY, chunk=CHUNK, streamed=True,
                                            pair_accumulator=True, scaled_low=True)[:3]
    return fn, specs


def _check(outcome: Any) -> None:
    check_all(outcome, kernels=2, temp_below=TEMP_BELOW)


def cases() -> list[Case]:
    name = f"lm_head_streamed/Gemma-3-4B/h{HIDDEN}-v{VOCAB}-c{CHUNK}/fwd+bwd"
    return [Case(name, "lm_head_streamed", "Gemma-3-4B", chip, _build, check=_check) for chip in ("v5e", "v6e")] + \
        [Case(name, "lm_head_streamed", "Gemma-3-4B", "v7x", _build, expect=REFUSAL)]
