"""`tokamax.explain` on splash attention gives the blocks `splash.attend` and its backward run with when traced for
the chip (seen at what `splash.blocks.fitted_forward` / `fitted_backward` return to `splash.fixed_offset`): upstream's
where they fit, the package's at head dim 256's backward on the v5e, a length the blocks do not divide (padded, with
segment ids), grouped and multi-query heads."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

S = jax.ShapeDtypeStruct
CALLS = {  # q shape, k shape, mask
    "gqa-128": ((1, 8, 2048, 128), (1, 4, 2048, 128), ("causal",)),
    "gqa-256": ((1, 8, 2048, 256), (1, 4, 2048, 256), ("causal",)),  # the backward's blocks past the v5e's VMEM
    "mqa-window-300": ((2, 4, 300, 64), (2, 300, 64), ("local", 128, 0)),
}


@pytest.mark.kernels_ci
@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("chip", ["v5e", "v6e"])
def test_explain_gives_the_blocks_attend_runs_with(kernel, monkeypatch, chip, call):
    splash, seen = kernel.splash, {}
    for kernel_name in ("forward", "backward"):
        real = getattr(splash.blocks, f"fitted_{kernel_name}")
        monkeypatch.setattr(splash.blocks, f"fitted_{kernel_name}",
                            lambda *a, _r=real, _k=kernel_name, **k: seen.setdefault(_k, _r(*a, **k)))
    q_shape, k_shape, mask = CALLS[call]
    q, k = S(q_shape, jnp.bfloat16), S(k_shape, jnp.bfloat16)
    spec = splash.MaskSpec(*mask)

    def attention(q, k, v):  # noqa: ANN001, ANN202
        return splash.attend(q, k, v, None, None, None, spec=spec)[0].astype(jnp.float32).sum()

    with kernel.emulation.emulated_chip(chip):
        jax.jit(jax.value_and_grad(attention, (0, 1, 2))).trace(q, k, k)
    explained = kernel.explain(splash.attend, q, k, k, spec=spec, chip=chip)
    assert set(seen) == {c.kernel for c in explained.choices} == {"forward", "backward"}
    for choice in explained.choices:
        taken = {f: getattr(seen[choice.kernel], f) for f in choice.sizes}
        assert taken == dict(choice.sizes), (chip, call, choice.kernel)
    if (chip, call) == ("v5e", "gqa-256"):
        assert explained["backward"].source == "the package's blocks"
