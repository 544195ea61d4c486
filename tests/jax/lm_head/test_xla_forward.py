"""`lm_head.row_stats`' forward in XLA's formulation (`stats.xla_forward`: a prefill's rows where the cost model puts
it under the kernel): the same seven statistics as the kernel's, and, lowered for the v5e, XLA's program at 1,024
rows (no Mosaic kernel) and the kernel at 256 (bound by the weight's read, where the chip has the kernel ahead)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from .reference import operands


@pytest.mark.kernels_ci
@pytest.mark.parametrize("transform", [{}, {"soft_cap": 3.0, "temperature": 0.7}], ids=["plain", "soft-cap"])
def test_xlas_formulation_gives_the_kernels_statistics(kernel, emulation, monkeypatch, transform):
    """Both in float32 from the same operands (interpret mode as v6e): the online softmax's summation order apart,
    the same numbers (rtol 2e-5: float32 sums of a few hundred terms of O(1)), and the same top-1 ids."""
    lm_head = kernel.lm_head
    t = lm_head.LogitTransform.of(**transform)
    x, w, b, targets = operands(37, 64, 200, seed=5)
    with emulation.interpret_on_cpu("v6e"):
        plan = lm_head.stats.plan_for(jnp.asarray(x), jnp.asarray(w))
        want = jax.jit(lambda x, w, b: lm_head.row_stats(x, w, b, targets, t, plan=plan))(x, w, b)
        monkeypatch.setattr(lm_head.stats, "xla_forward", lambda *a, **k: True)
        got = jax.jit(lambda x, w, b: lm_head.row_stats(x, w, b, targets, t))(x, w, b)
    for name, g, e in zip(lm_head.OUTPUTS, got, want, strict=True):
        if name == "top1":
            np.testing.assert_array_equal(np.asarray(g), np.asarray(e))
        else:
            np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=2e-5, atol=5e-5, err_msg=name)


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("rows", "kernels"), [(1024, 0), (256, 1)])
def test_lowered_for_the_v5e_a_prefill_takes_xlas_program_where_the_model_says(kernel, emulation, rows, kernels):
    lm_head = kernel.lm_head
    sd = jax.ShapeDtypeStruct
    specs = (sd((rows, 2048), jnp.bfloat16), sd((128256, 2048), jnp.bfloat16), sd((rows,), jnp.int32))
    with emulation.emulated_chip("v5e"), jax.sharding.use_abstract_mesh(emulation.tpu_mesh("v5e")):
        text = jax.jit(lambda x, w, t: lm_head.row_stats(x, w, None, t).lse).trace(*specs).lower(
            lowering_platforms=("tpu",)).as_text()
    assert text.count("tpu_custom_call") == kernels
