"""Causal and sliding-window attention, fwd and fwd+bwd: `tokamax.splash.attend` (upstream's splash kernel at the
package's blocks: upstream's where they fit the chip's scoped VMEM, `splash.blocks`), JAX's bundled splash kernel
with 512 blocks and its fused backward (MaxText's choice), and XLA's `jax.nn.dot_product_attention` where its
[heads, q, kv] logits fit. At head dim 256 (Gemma 3) the backward at other blocks too ("tokamax (backward blocks
q/kv/compute)"): the side by side `splash.blocks`' choice rests on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType

import jax
import jax.numpy as jnp

from ..models import ATTENTION, ATTENTION_LENGTHS, WINDOWS
from . import Workload, normal, summed, with_grads

XLA_MAX_LENGTH = 8192  # past it XLA's float32 logits ([heads, q, kv]) and their gradient outgrow the chip
BACKWARD_BLOCKS = ((1024, 512, 512), (512, 512, 512), (256, 1024, 512), (512, 512, 256), (1024, 256, 256))
"""The fused backward's (block_q_dkv, block_kv_dkv, block_kv_dkv_compute) timed beside the package's choice at head
dim 256, each within 90% of the v5e's 16 MiB of scoped VMEM by `splash.blocks`' model (upstream's 1024/1024/512 asks
for 19.0 MiB there)."""


def jax_splash(block: int, window: int | None = None, *, soft_cap: float | None = None, fused_backward: bool = True
               ) -> Callable[..., jax.Array]:
    """JAX's bundled splash kernel at `block` everywhere with its fused backward (MaxText's call); `soft_cap` its
    attention logit soft cap, `fused_backward=False` its separate dq and dkv kernels (the fused one keeps dq per KV
    block: (length / block) x heads x length x head dim, past the chip at long lengths). The call takes q [B, H, S,
    D], k [B, Hkv, S, D], v [B, Hkv, S, Dv] (Dv may differ from D) and optionally sinks [H] (gpt-oss's)."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    backward = {} if fused_backward else {"block_q_dq": block, "block_kv_dq": block}
    sizes = sk.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
                          block_kv_dkv=block, block_kv_dkv_compute=block, use_fused_bwd_kernel=fused_backward,
                          **backward)

    def attend(q: jax.Array, k: jax.Array, v: jax.Array, sinks: jax.Array | None = None) -> jax.Array:
        b, h, s, d = q.shape
        group = h // k.shape[1]
        one = sm.CausalMask((s, s)) if window is None else sm.LocalMask((s, s), (window - 1, 0), 0)
        mask = sm.MultiHeadMask([one] * group)
        kernel = sk.make_splash_mqa_single_device(mask, block_sizes=sizes, attn_logits_soft_cap=soft_cap)
        grouped = q.reshape(b, k.shape[1], group, s, d)
        if sinks is None:
            out = jax.vmap(jax.vmap(kernel))(grouped, k, v)
        else:
            per_kv = sinks.reshape(k.shape[1], group)
            out = jax.vmap(jax.vmap(lambda q, k, v, s: kernel(q, k, v, sinks=s)), (0, 0, 0, None))(grouped, k, v,
                                                                                                   per_kv)
        return out.reshape(b, h, s, v.shape[-1])
    return attend


def _xla(window: int | None = None):  # noqa: ANN202
    def attend(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        def t(a: jax.Array) -> jax.Array:
            return jnp.swapaxes(a, 1, 2)
        local = None if window is None else (window - 1, 0)
        return t(jax.nn.dot_product_attention(t(q), t(k), t(v), scale=1.0, is_causal=True, local_window_size=local,
                                              implementation="xla"))
    return attend


def workloads(tk: ModuleType) -> Iterator[Workload]:
    def ours(window: int | None = None, backward: tuple[int, int, int] | None = None):  # noqa: ANN202
        spec = tk.splash.MaskSpec.of(True, None if window is None else (window - 1, 0))
        chosen = None if backward is None else tk.splash.Blocks(*backward)

        def attend(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            return tk.splash.attend(q, k, v, None, None, None, spec=spec, backward_blocks=chosen)[0]
        return attend

    for shape in ATTENTION.values():
        window = WINDOWS.get(shape.model)
        calls = [(length, None) for length in ATTENTION_LENGTHS] + [(ATTENTION_LENGTHS[0], window)] * bool(window)
        for length, window in calls:
            def make_args(shape=shape, length=length) -> tuple:  # noqa: ANN001
                scale = shape.head_dim ** -0.5  # q scaled first: the kernels take logits as q k^T
                return (normal(1, (1, shape.heads, length, shape.head_dim), scale=scale),
                        normal(2, (1, shape.kv_heads, length, shape.head_dim)),
                        normal(3, (1, shape.kv_heads, length, shape.head_dim)))

            pairs = length * length / 2 if window is None else length * window - window * (window - 1) / 2
            fwd_flops = 4 * shape.heads * pairs * shape.head_dim
            kind = "causal" if window is None else f"causal, window {window}"
            case = f"{shape.model}: {shape.heads}/{shape.kv_heads} heads of {shape.head_dim}, {length} tokens, {kind}"
            impls = {"tokamax": ours(window), "jax splash (512 blocks, fused bwd)": jax_splash(512, window)}
            if length <= XLA_MAX_LENGTH:
                impls["xla"] = _xla(window)
            for impl, fn in impls.items():
                yield Workload("attention", case, impl, "fwd", lambda fn=fn, m=make_args: (fn, m()), fwd_flops)
                yield Workload("attention", case, impl, "fwd+bwd",
                               lambda fn=fn, m=make_args: (with_grads(summed(fn), (0, 1, 2)), m()), 3 * fwd_flops)
            if shape.head_dim == 256 and length == ATTENTION_LENGTHS[0]:
                for blocks in BACKWARD_BLOCKS:
                    impl = f"tokamax (backward blocks {'/'.join(map(str, blocks))})"
                    yield Workload("attention", case, impl, "fwd+bwd", lambda m=make_args, w=window, b=blocks: (
                        with_grads(summed(ours(w, b)), (0, 1, 2)), m()), 3 * fwd_flops)
