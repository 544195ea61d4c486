"""`tokamax.explain` on distillation names what `distill.divergence` and `distill.loss` take when traced for the chip:
the stored scheme's chunk, the recompute scheme's chunks or the kernels' blocks (seen at `stored.forward`,
`recompute.forward` and `kernels.forward`), and the fused loss's chunk (seen at `fused.loss`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

S = jax.ShapeDtypeStruct
CALLS = {  # rows, student hidden, teacher hidden, vocabulary
    "qwen-4k": (4096, 2048, 4096, 151936),  # the stored scheme on the v5e
    "qwen-16k": (16384, 2048, 4096, 151936),  # Q past the share: Q made again (the recompute scheme)
    "small": (100, 256, 384, 1000),  # fewer rows than a chunk: one chunk of their own (distill.stored.PREFILL)
    "qwen05-8k": (8192, 896, 3584, 151936),  # Q past the share: the loss's fused chunks with the pair
    "narrow": (4096, 128, 128, 151936),  # narrow hidden sizes: the float32 logits' traffic loses to the kernels
}


def _specs(rows: int, hs: int, ht: int, vocab: int) -> tuple:
    return (S((rows, hs), jnp.bfloat16), S((vocab, hs), jnp.bfloat16), None, S((rows, ht), jnp.bfloat16),
            S((vocab, ht), jnp.bfloat16), None)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("call", sorted(CALLS))
def test_explain_names_the_divergences_scheme_and_blocks(kernel, monkeypatch, call):
    distill, seen = kernel.distill, []
    stored_forward, kernels_forward = distill.stored.forward, distill.kernels.forward
    recompute_forward, recompute_backward = distill.recompute.forward, distill.recompute.backward
    monkeypatch.setattr(distill.stored, "forward", lambda *a: seen.append(("stored", a[-1])) or stored_forward(*a))
    monkeypatch.setattr(distill.recompute, "forward",
                        lambda *a: seen.append(("recompute", a[-1])) or recompute_forward(*a))
    monkeypatch.setattr(distill.recompute, "backward",
                        lambda *a, **k: seen.append(("columns", a[-1])) or recompute_backward(*a, **k))
    monkeypatch.setattr(distill.kernels, "forward",
                        lambda *a, **k: seen.append(("kernels", k["blocks"])) or kernels_forward(*a, **k))
    specs = _specs(*CALLS[call])

    def divergence(xs, ws, xt, wt):  # noqa: ANN001, ANN202
        return distill.divergence(xs, ws, None, xt, wt, None, beta=0.5)[0].sum()

    with kernel.emulation.emulated_chip("v5e"):
        jax.jit(jax.grad(divergence, (0, 1))).trace(specs[0], specs[1], specs[3], specs[4])
    explained = kernel.explain(distill.divergence, *specs, beta=0.5, chip="v5e")
    (scheme, value), *rest = seen
    if scheme == "stored":
        assert explained.path == f"stored {value}" and explained["scheme"].sizes == {"chunk": value}
    elif scheme == "recompute":
        [(what, columns)] = rest
        assert what == "columns"
        assert explained.path == f"recompute {value} x {columns}"
        assert explained["scheme"].sizes == {"chunk": value, "vchunk": columns}
    else:
        assert explained.path == "kernels" and explained["scheme"].sizes == {"chunk": None}
        assert (explained["forward"].sizes["rows"], explained["forward"].sizes["vocab"]) == (value.rows, value.vocab)
    expected = {"qwen-16k": "recompute", "qwen05-8k": "recompute", "narrow": "kernels"}.get(call, "stored")
    assert scheme == expected


@pytest.mark.kernels_ci
@pytest.mark.parametrize("call", ["qwen05-8k", "small"])
def test_explain_names_the_fused_losss_chunk(kernel, monkeypatch, call):
    distill, seen = kernel.distill, []
    loss = distill.fused.loss
    monkeypatch.setattr(distill.fused, "loss", lambda *a: seen.append(a[-1]) or loss(*a))
    specs = _specs(*CALLS[call])
    weights = S((CALLS[call][0],), jnp.float32)

    def step(xs, ws, xt, wt, m):  # noqa: ANN001, ANN202
        return distill.loss(xs, ws, None, xt, wt, None, m, beta=0.5)[0]

    with kernel.emulation.emulated_chip("v5e"):
        jax.jit(jax.grad(step, (0, 1))).trace(specs[0], specs[1], specs[3], specs[4], weights)
    explained = kernel.explain(distill.loss, *specs, weights, beta=0.5, chip="v5e")
    assert seen == [explained["scheme"].sizes["chunk"]] and explained.path == f"fused {seen[0]}"


@pytest.mark.kernels_ci
def test_explain_says_why_the_loss_takes_the_per_token_call(kernel, monkeypatch):
    """At 4,096 rows of Qwen3 1.7B <- 8B on the v5e the fused scheme would add dW by the pair
    (`distill.fused.PAIR_SLOWER`): the loss takes the per-token call's stored scheme, and explain says which and why."""
    distill, seen = kernel.distill, []
    monkeypatch.setattr(distill.fused, "loss", lambda *a: seen.append(a[-1]))
    specs = _specs(*CALLS["qwen-4k"])
    weights = S((CALLS["qwen-4k"][0],), jnp.float32)

    def step(xs, ws, xt, wt, m):  # noqa: ANN001, ANN202
        return distill.loss(xs, ws, None, xt, wt, None, m, beta=0.5)[0]

    with kernel.emulation.emulated_chip("v5e"):
        jax.jit(jax.grad(step, (0, 1))).trace(specs[0], specs[1], specs[3], specs[4], weights)
    explained = kernel.explain(distill.loss, *specs, weights, beta=0.5, chip="v5e")
    assert seen == [] and explained.path.startswith("per-token stored ") and "PAIR_SLOWER" in explained.path
