"""Causal attention, fwd and fwd+bwd: `tokamax.splash.attend` (upstream's splash kernel, its blocks), JAX's
bundled splash kernel with 512 blocks and its fused backward (MaxText's choice), and XLA's
`jax.nn.dot_product_attention` where its [heads, q, kv] logits fit."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import jax
import jax.numpy as jnp

from ..models import ATTENTION, ATTENTION_LENGTHS
from . import Workload, normal, summed, with_grads

XLA_MAX_LENGTH = 8192  # past it XLA's float32 logits ([heads, q, kv]) and their gradient outgrow the chip


def _jax_splash(block: int):  # noqa: ANN202
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    sizes = sk.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
                          block_kv_dkv=block, block_kv_dkv_compute=block, use_fused_bwd_kernel=True)

    def attend(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:  # q [B, H, S, D], k and v [B, Hkv, S, D]
        b, h, s, d = q.shape
        group = h // k.shape[1]
        mask = sm.MultiHeadMask([sm.CausalMask((s, s))] * group)
        kernel = sk.make_splash_mqa_single_device(mask, block_sizes=sizes)
        out = jax.vmap(jax.vmap(kernel))(q.reshape(b, k.shape[1], group, s, d), k, v)
        return out.reshape(b, h, s, d)
    return attend


def _xla(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    def t(a: jax.Array) -> jax.Array:
        return jnp.swapaxes(a, 1, 2)
    return t(jax.nn.dot_product_attention(t(q), t(k), t(v), scale=1.0, is_causal=True, implementation="xla"))


def workloads(tk: ModuleType) -> Iterator[Workload]:
    spec = tk.splash.MaskSpec("causal")

    def ours(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        return tk.splash.attend(q, k, v, None, None, None, spec=spec)[0]

    for shape in ATTENTION.values():
        for length in ATTENTION_LENGTHS:
            def make_args(shape=shape, length=length) -> tuple:  # noqa: ANN001
                scale = shape.head_dim ** -0.5  # q scaled first: the kernels take logits as q k^T
                return (normal(1, (1, shape.heads, length, shape.head_dim), scale=scale),
                        normal(2, (1, shape.kv_heads, length, shape.head_dim)),
                        normal(3, (1, shape.kv_heads, length, shape.head_dim)))

            fwd_flops = 4 * shape.heads * length * length * shape.head_dim / 2  # causal: half the pairs
            case = f"{shape.model}: {shape.heads}/{shape.kv_heads} heads of {shape.head_dim}, {length} tokens, causal"
            impls = {"tokamax": ours, "jax splash (512 blocks, fused bwd)": _jax_splash(512)}
            if length <= XLA_MAX_LENGTH:
                impls["xla"] = _xla
            for impl, fn in impls.items():
                yield Workload("attention", case, impl, "fwd", lambda fn=fn, m=make_args: (fn, m()), fwd_flops)
                yield Workload("attention", case, impl, "fwd+bwd",
                               lambda fn=fn, m=make_args: (with_grads(summed(fn), (0, 1, 2)), m()), 3 * fwd_flops)
