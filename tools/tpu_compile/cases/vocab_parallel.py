"""The vocabulary-parallel linear softmax cross-entropy over a pod: what each rank runs when an LM head's
weight is split over its vocabulary (torch_ops/_sharding/vocab_parallel.py, the Torch op under
transformers' tensor-parallel plan), written in JAX with the same steps, so that the TPU compiler sees
the kernel on one rank's columns and the collectives between ranks in one program.

Per rank: the per-row kernel (`tokamax.lm_loss`) on its columns (Llama 3's 128,256 / 8 = 16,032, off
the 128 lanes: padded), one all-gather of (lse, label logit) per row, the kernel's backward with the
rank's share of each row's softmax mass, the label column's correction, one all-reduce of dx. The
point: no rank ever forms, or gathers, [rows, vocab] logits.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..case import Case, spec
from ._models import LLAMA_3_8B, QWEN3_8B, Model
from ._pods import bytes_of, check_all

RANKS = 8
AXIS = "tp"
ROWS = 8192  # a step's tokens on one data-parallel replica


def per_rank(kernel: Any, x: jax.Array, labels: jax.Array, w_local: jax.Array) -> tuple[jax.Array, ...]:
    """(mean loss, dx, dw_local) on one rank, as `_VocabParallelRows` forward and backward compute them
    (every label valid)."""
    rows, vocab_r = x.shape[0], w_local.shape[1]
    start = jax.lax.axis_index(AXIS) * vocab_r
    owned = (labels >= start) & (labels < start + vocab_r)
    local_labels = jnp.where(owned, labels - start, 0).astype(jnp.int32)
    losses_p, lse_p = kernel.lm_loss.row_losses(x, local_labels, w_local)
    lse_r = lse_p[:rows]
    label_logit = jnp.where(owned, lse_r - losses_p[:rows], 0.0)
    every = jax.lax.all_gather(jnp.stack([lse_r, label_logit]), AXIS)  # [ranks, 2, rows]
    lse = jax.nn.logsumexp(every[:, 0], axis=0)
    loss = jnp.mean(lse - every[:, 1].sum(axis=0))
    g = jnp.full((rows,), 1.0 / rows, jnp.float32)  # d mean / d losses
    share = jnp.exp(lse_r - lse)
    d_kernel = jnp.pad(g * share, (0, lse_p.shape[0] - rows))
    dx, dw = kernel.lm_loss.row_losses_vjp(x, local_labels, w_local, lse_p, losses_p, d_kernel)
    c = g * (share - owned.astype(jnp.float32))
    dx = dx + c[:, None] * w_local.T[local_labels].astype(jnp.float32)
    dw = dw.at[:, local_labels].add((x.astype(jnp.float32) * c[:, None]).T)
    return loss, jax.lax.psum(dx, AXIS).astype(x.dtype), dw.astype(w_local.dtype)


def _build(model: Model) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        P = jax.sharding.PartitionSpec
        specs = [spec(mesh, (ROWS, model.hidden), jnp.bfloat16), spec(mesh, (ROWS,), jnp.int32),
                 spec(mesh, (model.hidden, model.vocab), jnp.bfloat16, (None, AXIS))]
        fn = jax.shard_map(lambda x, labels, w: per_rank(kernel, x, labels, w), mesh=mesh,
                           in_specs=(P(), P(), P(None, AXIS)), out_specs=(P(), P(), P(None, AXIS)), check_vma=False)
        return fn, specs
    return build


def _check(model: Model) -> Any:
    x_bytes, w_bytes = bytes_of((ROWS, model.hidden), 2), bytes_of((model.hidden, model.vocab), 2)

    def check(outcome: Any) -> None:
        check_all(outcome, arguments=x_bytes + 4 * ROWS + w_bytes // RANKS, kernels=2)
        hlo, largest = outcome.hlo, outcome.largest
        assert hlo["all-gather"] == 1 and largest["all-gather"] == RANKS * 2 * ROWS * 4, \
            f"{outcome.name}: all-gathers {hlo['all-gather']}, largest {largest['all-gather']} bytes; expected " \
            f"(lse, label logit) per row from each rank, {RANKS * 2 * ROWS * 4} bytes"
        assert hlo["all-reduce"] == 1 and largest["all-reduce"] <= bytes_of((ROWS, model.hidden), 4), \
            f"{outcome.name}: all-reduces {hlo['all-reduce']}, largest {largest['all-reduce']} bytes; expected dx's"
    return check


def cases() -> list[Case]:
    out = []
    for model in (LLAMA_3_8B, QWEN3_8B):
        for target in ("v6e:2x4", "tpu7x:2x2x1"):
            # Llama's shard (16,128 columns padded) gets 5,376-wide vocabulary tiles from upstream's config
            # choice and compiles about 9x longer than Qwen3's (19,072 = 149 x 128: 128-wide tiles)
            default = model is QWEN3_8B and target == "v6e:2x4"
            out.append(Case(f"vocab_parallel/{model.name}/{ROWS}x{model.vocab}/fwd+bwd", "vocab_parallel", model.name,
                            target, _build(model), tier="default" if default else "all", axes=(AXIS,),
                            check=_check(model)))
    return out
