"""The fused MoE decode's VMEM check (`ops._moe_decode`) at DeepSeek-V3's shapes on TPU7x: 96 tokens
pass it (the compiler took them), 112 and 256 are refused by name with the most one call takes (the
compiler ran out of VMEM on both), and a list with XLA goes on to XLA."""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import pytest

H, INTER, E, K = 7168, 2048, 256, 8


def _args(tokens: int) -> list[jax.ShapeDtypeStruct]:
    fp8, f32 = jnp.float8_e4m3fn, jnp.float32
    shapes = [((1,), jnp.int32), ((tokens, H), jnp.bfloat16), ((E, H, 2 * INTER), fp8), ((E, INTER, H), fp8),
              ((E, 1, 1, 2 * INTER), f32), ((E, 1, 1, H), f32), ((H, 2 * INTER), fp8), ((1, 2 * INTER), f32),
              ((INTER, H), fp8), ((1, H), f32)]
    return [jax.ShapeDtypeStruct(s, d) for s, d in shapes]


def _check(kernel, tokens: int, implementation):  # noqa: ANN001, ANN202
    module = importlib.import_module(f"{kernel.__name__}.ops._moe_decode")
    a = _args(tokens)
    with kernel.emulation.emulated_chip("v7x"):
        return module._vmem_check(implementation, None, a[1], a[3], a[8], a[2], 1)


def test_largest_batch_passes(kernel):
    assert _check(kernel, 96, "mosaic_tpu") == "mosaic_tpu"


@pytest.mark.parametrize("tokens", [112, 256])
def test_larger_batches_refused_by_name(kernel, tokens):
    with pytest.raises(NotImplementedError, match=rf"tokamax fused_moe_decode: {tokens} tokens .* at most 96 tokens"):
        _check(kernel, tokens, "mosaic_tpu")


def test_refused_batch_goes_on_to_xla(kernel):
    assert _check(kernel, 256, None) == ("xla",)
    assert _check(kernel, 256, ("mosaic_tpu", "xla")) == ("xla",)


def test_public_call_refuses_before_upstream(kernel):
    a = _args(256)
    routes = [jax.ShapeDtypeStruct((256, K), jnp.bfloat16), jax.ShapeDtypeStruct((256, K), jnp.int32)]
    with kernel.emulation.emulated_chip("v7x"), pytest.raises(NotImplementedError, match="tokamax fused_moe_decode"):
        jax.eval_shape(lambda *x: kernel.ops.experimental.fused_moe_decode(*x[:10], None, *x[10:],
                                                                           implementation="mosaic_tpu"), *a, *routes)
