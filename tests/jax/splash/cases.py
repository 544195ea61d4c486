"""Kernel-level splash calls, each built two ways: with this kernel's `tokamax.splash` (what the
Torch op and the transformers attention run), and with upstream tokamax 0.0.17's own kernel-level
call for the same mask and blocks: `make_splash_mha_single_device` with upstream's lazy mask and the
SplashConfig upstream's Op builds from its own config choice (forward, residuals kept), and
upstream's VJP Op on the lazy mask (backward), both `jax.vmap`-ed over the batch as upstream's flash
op vmaps splash. Both sides are lowered for TPU on this CPU host and compared as whole modules.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

CHIPS = ("v5e", "v6e", "v7x")
SPLASH = "_src.ops.experimental.tpu.splash_attention"


@dataclasses.dataclass(frozen=True)
class KernelCase:
    """[batch, heads, len, 128] bf16 queries against [batch, kv_heads, len, 128] keys and values."""

    id: str
    batch: int
    heads: int
    kv_heads: int
    length: int
    window: int | None  # a causal window of this many tokens (left = window - 1), else causal
    segments: bool = False  # two documents per sequence
    soft_cap: float | None = None
    sinks: bool = False
    grad: bool = False  # the backward call instead of the forward

    def shape_dtypes(self) -> list[jax.ShapeDtypeStruct]:
        q = jax.ShapeDtypeStruct((self.batch, self.heads, self.length, 128), jnp.bfloat16)
        kv = jax.ShapeDtypeStruct((self.batch, self.kv_heads, self.length, 128), jnp.bfloat16)
        rows = jax.ShapeDtypeStruct((self.batch, self.heads, self.length), jnp.float32)
        return [q, kv, kv] + ([q, rows, rows, q] if self.grad else [])

    def ids(self) -> jax.Array | None:
        if not self.segments:
            return None
        one = (jnp.arange(self.length) >= self.length // 2).astype(jnp.int32)
        return jnp.broadcast_to(one, (self.batch, self.length))

    def sink_logits(self) -> jax.Array | None:
        return jnp.linspace(-1.0, 1.0, self.heads, dtype=jnp.float32) if self.sinks else None


CASES = [KernelCase(f"window128-h8kv2-{n}", 2, 8, 2, n, 128) for n in (1024, 4096, 8192)] + [
    KernelCase("window128-h8kv2-1024/grad", 2, 8, 2, 1024, 128, grad=True),
    KernelCase("causal-segments-softcap-sinks-h4kv2-256", 2, 4, 2, 256, None, True, 30.0, True),
    KernelCase("causal-segments-softcap-sinks-h4kv2-256/grad", 2, 4, 2, 256, None, True, 30.0, True, grad=True),
]


def ours(kernel: ModuleType, case: KernelCase) -> Callable[..., Any]:
    """The call through this kernel's `tokamax.splash`."""
    splash = kernel.splash
    spec = splash.MaskSpec.of(True, None if case.window is None else (case.window - 1, 0))
    ids, sinks = case.ids(), case.sink_logits()
    if case.grad:
        return lambda q, k, v, out, m, lse, dout: splash.attend_vjp(q, k, v, ids, ids, sinks, out, m, lse, dout,
                                                                    spec=spec, soft_cap=case.soft_cap)
    return lambda q, k, v: splash.attend(q, k, v, ids, ids, sinks, spec=spec, soft_cap=case.soft_cap)


def upstream(case: KernelCase) -> Callable[..., Any]:
    """The same call built from upstream tokamax's modules only (run in the upstream venv)."""
    module = lambda name: importlib.import_module(f"tokamax.{SPLASH}.{name}")  # noqa: E731
    lib, mask_lib, base = module("splash_attention_kernel"), module("splash_attention_mask"), module("base")
    fwd_op = module("pallas_mosaic_tpu").PallasMosaicTpuSplashAttention()
    shape = (case.length, case.length)
    if case.window is None:
        mask, stand_in = mask_lib.CausalMask(shape), base.CAUSAL_MASK
    else:  # what upstream's public call binds for a local mask: a dense array (here only its shape)
        mask = mask_lib.LocalMask(shape, window_size=(case.window - 1, 0), offset=0)
        stand_in = base.Mask(jax.ShapeDtypeStruct(shape, jnp.bool_))
    ids, sinks = case.ids(), case.sink_logits()
    args = lambda seg: dict(segment_ids=None if seg is None else base.SegmentIds(seg, seg), sinks=sinks,  # noqa: E731
                            is_mqa=False, attn_logits_soft_cap=case.soft_cap)

    def forward(q: jax.Array, k: jax.Array, v: jax.Array, seg: jax.Array | None) -> tuple[jax.Array, ...]:
        config = fwd_op.bind(q, k, v, mask=stand_in, **args(seg), return_residuals=True).default_config
        splash_config = dataclasses.replace(lib.SplashConfig.get_default(), attn_logits_soft_cap=case.soft_cap,
                                            dropout_rate=0.0, block_q_dkv=None, block_kv_dkv=None,
                                            block_kv_dkv_compute=None, **dataclasses.asdict(config))
        kernel = lib.make_splash_mha_single_device(mask, config=splash_config, save_residuals=True)
        out, stats = kernel(q, k, v, segment_ids=args(seg)["segment_ids"], sinks=sinks)
        return out, stats["max_logits"], stats["logsumexp"]

    def backward(q, k, v, seg, out, m, lse, dout):  # noqa: ANN001, ANN202
        vjp_op = fwd_op.vjp
        config = vjp_op.bind((m, lse), out, dout, q, k, v, mask=stand_in, **args(seg)).default_config
        grads, _ = vjp_op._fwd((m, lse), out, dout, q, k, v, mask=mask, **args(seg), config=config)
        return grads["q"], grads["k"], grads["v"], grads.get("sinks")

    seg_axis = None if ids is None else 0
    if case.grad:
        def call(q, k, v, out, m, lse, dout):  # noqa: ANN001, ANN202
            dq, dk, dv, dsinks = jax.vmap(backward, in_axes=(0, 0, 0, seg_axis, 0, 0, 0, 0))(
                q, k, v, ids, out, m, lse, dout)
            return dq, dk, dv, None if dsinks is None else dsinks.sum(0)
        return call
    return lambda q, k, v: jax.vmap(forward, in_axes=(0, 0, 0, seg_axis))(q, k, v, ids)


_CONSTANT = re.compile(r"^\s*(%(?:c|cst)(?:_\d+)?) = stablehlo\.constant (.*)$", re.M)
_NAME = re.compile(r"%(?:c|cst)(?:_\d+)?\b")


def constants_in_order(module: str) -> str:
    """`module` with each function's constants declared in one canonical order (sorted by value) and
    named by it. Upstream's run-time type checks (pydantic's `validate_call` around each Op's `_fwd`,
    which this kernel's stand-in does not run) make JAX meet the same constants in another order: the
    same values, the same uses, other SSA names. Nothing else changes."""
    parts = re.split(r"(?=^\s*func\.func )", module, flags=re.M)
    out = []
    for part in parts:
        lines = _CONSTANT.findall(part)
        if not lines:
            out.append(part)
            continue
        order = sorted(range(len(lines)), key=lambda i: (lines[i][1], i))
        rename = {lines[i][0]: f"%const{n}" for n, i in enumerate(order)}
        signature, body = part.split("\n", 1)
        body = re.sub(r"\n?^\s*%(?:c|cst)(?:_\d+)? = stablehlo\.constant .*$", "", body, flags=re.M)
        body = _NAME.sub(lambda m, rename=rename: rename.get(m.group(0), m.group(0)), body)
        header = "".join(f"    {rename[lines[i][0]]} = stablehlo.constant {lines[i][1]}\n" for i in order)
        out.append(f"{signature}\n{header}{body.lstrip(chr(10))}")
    return "".join(out)


def lower(fn: Callable[..., Any], case: KernelCase, chip: str, cross_compile: Any, emulation: ModuleType) -> str:
    """StableHLO of `fn` lowered for TPU `chip` on this host, as the public-call checks lower."""
    def splash_call(*args: Any) -> Any:  # one name on both sides: the module is named after it
        return fn(*args)

    with cross_compile(True), emulation.emulated_chip(chip), jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip)):
        return jax.jit(splash_call).trace(*case.shape_dtypes()).lower(lowering_platforms=("tpu",)).as_text()
