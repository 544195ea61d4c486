"""Interpret-mode numerics of the public fused MoE decode (upstream's
`_src.ops.experimental.fused_moe_decode.api.fused_moe_decode`), one rank, on CPU as TPU7x.

Called as a user calls it on one device: outside any mesh, upstream's Op maps the kernel over one device
itself. The reference is the dense jnp MoE over the dequantized FP8 weights written in
tests/jax/cases/fused_moe_decode.py (with the kernel's documented activation quantization), and the
inputs are that module's; the public call must run the Pallas kernel (checked in its jaxpr).
"""

from __future__ import annotations

import importlib

import jax
import numpy as np
import pytest

from tests.jax.cases import fused_moe_decode as moe

API = "_src.ops.experimental.fused_moe_decode.api"
E = moe.E


# FP8 weights and activations on both sides, quantized alike, f32 accumulation, bf16 output (|out| < ~5):
# seen within one bf16 ulp; 1e-2 covers an intermediate on an FP8 rounding boundary rounding one step
# apart under another summation order, and still fails a 128- vs 256-column activation block (~4e-2).
@pytest.mark.parametrize(("gated", "kw", "act_block"), [
    (True, {}, 512),
    (False, {"expert_start": 8, "routed_scale": 2.5}, 256),
], ids=["gated", "ep-ungated"])
def test_values(kernel, emulation, gated, kw, act_block):
    args = moe._inputs(0 if gated else 1, tokens=7 if gated else 6, k=3, n_global=E if gated else 3 * E,
                       gated=gated)
    fused_moe_decode = importlib.import_module(f"{kernel.__name__}._ported.{API}").fused_moe_decode

    def fn(*a):  # noqa: ANN002, ANN202
        if not gated:
            a = (*a[:10], None, *a[10:])
        return fused_moe_decode(*a, n_ranks=1, implementation="mosaic_tpu", **kw)

    with emulation.interpret_on_cpu("v7x"), kernel.ops.config.cross_compile(True):
        assert "pallas_call" in str(jax.make_jaxpr(fn)(*args)), "the public call did not run the kernel"
        got = jax.jit(fn)(*args)
    want = moe._reference(expert_start=kw.get("expert_start", 0), routed_scale=kw.get("routed_scale", 1.0),
                          act_block=act_block)(*args)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=1e-2, atol=1e-2)
