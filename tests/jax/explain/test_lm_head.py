"""`tokamax.explain` on the LM head's loss names the scheme `lm_head.fused.loss_and_grads` takes when `jax.grad` of the
loss is traced for the chip (seen at the scheme's own entry: `_chunked`'s chunk and accumulation, or `_kernels`'), a
trained head and a frozen one, at heads where the streamed, the accumulator-kernel and the kernels' ways win."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

S = jax.ShapeDtypeStruct
HEADS = {"llama3-8b": (8192, 4096, 128256), "small": (300, 256, 1000), "qwen3-8b-16k": (16384, 4096, 151936)}


def _taken(kernel, monkeypatch, chip: str, rows: int, hidden: int, vocab: int, weight_grad: bool):  # noqa: ANN001
    fused, seen = kernel.lm_head.fused, []
    chunked, kernels = fused._chunked, fused._kernels

    def spy_chunked(x, w, b, t, m, transform, z_loss, smoothing, chunk, wg, pair, kern, scaled=False,  # noqa: ANN001
                    streamed_block=None, **kw):  # noqa: ANN003
        seen.append(fused.Scheme(chunk, kern and not streamed_block, pair, scaled and bool(pair),
                                 bool(streamed_block)))
        return chunked(x, w, b, t, m, transform, z_loss, smoothing, chunk, wg, pair, kern, scaled,
                       streamed_block=streamed_block, **kw)

    monkeypatch.setattr(fused, "_chunked", spy_chunked)
    monkeypatch.setattr(fused, "_kernels", lambda *a: seen.append(fused.Scheme(None)) or kernels(*a))
    specs = (S((rows, hidden), jnp.bfloat16), S((vocab, hidden), jnp.bfloat16), S((rows,), jnp.int32),
             S((rows,), jnp.float32))
    with kernel.emulation.emulated_chip(chip):
        jax.jit(jax.grad(kernel.lm_head.loss.loss, (0, 1) if weight_grad else 0)).trace(*specs)
    assert len(seen) == 1, seen
    return seen[0], specs


@pytest.mark.kernels_ci
@pytest.mark.parametrize("weight_grad", [True, False], ids=["trained", "frozen"])
@pytest.mark.parametrize("head", sorted(HEADS))
@pytest.mark.parametrize("chip", ["v5e", "v6e"])
def test_explain_names_the_scheme_the_loss_takes(kernel, monkeypatch, chip, head, weight_grad):
    taken, specs = _taken(kernel, monkeypatch, chip, *HEADS[head], weight_grad)
    explained = kernel.explain(kernel.lm_head.loss.loss, *specs, chip=chip, weight_grad=weight_grad)
    scheme = explained["scheme"]
    assert kernel.lm_head.fused.Scheme(**scheme.sizes) == taken, (chip, head, explained.path)
    assert explained.path == kernel.explain.lm_head.label(taken)
    assert [a.label for a in explained.alternatives if a.fits][0] == explained.path  # the fastest within the share
    if taken.chunk is None:
        assert {c.kernel for c in explained.choices} >= {"forward", "backward_x"}
