"""The labels path with each chunk in `lm_head.streamed`'s two kernels (`loss_and_grads(streamed=True)`; the v5e's
default there, in the 16-bit pair, `lm_head_fused`'s case) at Gemma 3 4B's head (8,192 rows, hidden 2,560,
vocabulary 262,208, bf16; chunks of 1,024, dW in the pair with an int8 low half, the logits compact by default), fwd
and bwd in one call: Mosaic's VMEM allocation is what `streamed.block_for` must agree with. The v5e, v6e and v7x
compile it (two kernels in the chunks' loop, temporaries of one chunk's compact logits and the low half: 1.14 GiB,
as the v5e's own run laid them out in benchmarks/measured/
v5e-2026-12-06-bench-lm_head-streamed-compact-dcc176a.json; 1.64 GiB with float32 logits at f98634e). The v7x (64
MiB of VMEM) refused it until x and dx took one VMEM buffer each (dcc176a); a chunk no block fits is refused before
the compiler sees it (tests/jax/lm_head/test_fused.py)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..case import Case, spec
from ._pods import MiB, check_all

ROWS, HIDDEN, VOCAB, CHUNK = 8192, 2560, 262208, 1024
TEMP_BELOW = 1300 * MiB  # one chunk's compact logits (0.5 GiB) and the int8 low half (0.63 GiB), and small buffers


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


def _check_v7x(outcome: Any) -> None:
    """The v7x's compile-only layout of the chunked scheme holds more (4.2 GiB here: as `fused.temporaries` says of
    it, the sum of what the chips that ran it overlap); only its two kernels are checked."""
    check_all(outcome, kernels=2)


def cases() -> list[Case]:
    name = f"lm_head_streamed/Gemma-3-4B/h{HIDDEN}-v{VOCAB}-c{CHUNK}/fwd+bwd"
    return [Case(name, "lm_head_streamed", "Gemma-3-4B", chip, _build, check=_check) for chip in ("v5e", "v6e")] + \
        [Case(name, "lm_head_streamed", "Gemma-3-4B", "v7x", _build, check=_check_v7x)]
