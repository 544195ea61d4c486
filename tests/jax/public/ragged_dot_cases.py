"""Public ragged-dot calls on every chip: exact table keys, heuristic cases, odd sizes, quantized
operands, each forward and through `jax.grad`; and the ragged-dot tables.

Table keys are taken from the ported compact tables themselves (the same files on both sides),
so each chip's cases include calls that hit upstream's tuned entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .cases import CALL_CHIPS, PublicCase, Table, dims, grad_of_square
from .ragged_dot_keys import ragged_dot_arguments

IMPLEMENTATIONS = {"mosaic": "pallas_mosaic_tpu_ragged_dot", "mosaic_tpu_v2": "pallas_mosaic_tpu_v2_ragged_dot"}
DTYPES = {"bf16": jnp.bfloat16, "f32": jnp.float32}
TABLE_KEYS_PER_CHIP = 3

TABLES = [
    Table("ragged_dot", IMPLEMENTATIONS["mosaic"], lambda api: api.ops.tpu.RaggedDot(), ragged_dot_arguments),
    Table("ragged_dot_v2", IMPLEMENTATIONS["mosaic_tpu_v2"], lambda api: api.ops.tpu.V2RaggedDot(),
          ragged_dot_arguments),
]


def _specs(m: int, k: int, n: int, g: int, dtype: str) -> tuple[tuple[tuple[int, ...], str], ...]:
    name = jnp.dtype(DTYPES[dtype]).name
    return (((m, k), name), ((g, k, n), name), ((g,), "int32"))


def _forward(implementation: str | tuple[str, ...], **kw: Any) -> Callable[[Any], Callable[..., Any]]:
    def build(api: Any) -> Callable[..., Any]:
        return lambda lhs, rhs, sizes: api.ops.ragged_dot(lhs, rhs, sizes, implementation=implementation, **kw)
    return build


def _grad(implementation: str, **kw: Any) -> Callable[[Any], Callable[..., Any]]:
    """Gradients of a loss that uses the output's values (so the forward kernel runs too)."""
    def build(api: Any) -> Callable[..., Any]:
        return grad_of_square(lambda lhs, rhs, sizes: api.ops.ragged_dot(
            lhs, rhs, sizes, implementation=implementation, **kw), argnums=(0, 1))
    return build


def _general(implementation: str, contracting: tuple, rhs_group: list) -> Callable[[Any], Callable[..., Any]]:
    dims = jax.lax.RaggedDotDimensionNumbers((contracting, ((), ())), [0], rhs_group)
    return lambda api: (lambda lhs, rhs, sizes: api.ops.ragged_dot_general(lhs, rhs, sizes, dims,
                                                                           implementation=implementation))


def _general_grad(implementation: str, contracting: tuple, rhs_group: list) -> Callable[[Any], Callable[..., Any]]:
    def build(api: Any) -> Callable[..., Any]:
        return grad_of_square(_general(implementation, contracting, rhs_group)(api), argnums=(0, 1))
    return build


def _with_group_offset() -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda lhs, rhs, sizes, offset: api.ops.ragged_dot(
        lhs, rhs, sizes, group_offset=offset, implementation="mosaic_tpu_v2"))


def _quantized(form: str) -> Callable[[Any], Callable[..., Any]]:
    def build(api: Any) -> Callable[..., Any]:
        quantization = api.module("_src.quantization")

        def fn(lhs: Any, rhs: Any, sizes: Any) -> Any:
            if form == "QArray":
                rhs = quantization.as_array_or_qarray(quantization.AsQArray(rhs, jnp.int8, channelwise_axes=(0, 2)))
            else:
                rhs = quantization.AsQArray(rhs, jnp.int8, channelwise_axes=(0, 2))
            return api.ops.ragged_dot(lhs, rhs, sizes, implementation="mosaic")
        return fn
    return build


def _plain(key: dict) -> bool:
    """A plain forward call: default dimension numbers and precision, no activation, unquantized."""
    return (key["ragged_dot_dimension_numbers"]["dot_dimension_numbers"] == [[[1], [1]], [[], []]]
            and key["precision"] == ["DEFAULT", "DEFAULT"] and key["preferred_element_type"] is None
            and key["activation"] is None and key["manual_axis_type"] is None
            and not key["return_residuals"] and isinstance(key["group_sizes"], dict)
            and isinstance(key["lhs"], str) and isinstance(key["rhs"], str)
            and key["lhs"].startswith(("bf16[", "f32[")) and key["rhs"][:4] == key["lhs"][:4])


def cases() -> list[PublicCase]:
    out: list[PublicCase] = []
    for chip in CALL_CHIPS:
        for impl, table in zip(IMPLEMENTATIONS, TABLES, strict=True):
            calls = []
            for key in table.tuned_keys(chip, _plain, TABLE_KEYS_PER_CHIP):
                (m, k), (g, _, n) = dims(key["lhs"]), dims(key["rhs"])
                if key["group_sizes"]["total_size"] == m:
                    calls.append((f"table-{m}x{k}x{n}g{g}", _specs(m, k, n, g, key["lhs"][: key["lhs"].index("[")])))
            calls.append(("heuristic-512x256x384g4", _specs(512, 256, 384, 4, "bf16")))
            calls.append(("odd-200x136x264g3", _specs(200, 136, 264, 3, "f32")))
            for name, specs in calls:
                out.append(PublicCase(f"ragged_dot/{impl}/{name}/fwd", chip, specs, _forward(impl)))
                out.append(PublicCase(f"ragged_dot/{impl}/{name}/grad", chip, specs, _grad(impl)))
        # The Mosaic kernel refuses m=200 on v5e/v6e; with a fallback upstream goes on to XLA (on a TPU
        # `implementation=None` means the same; its default list also holds Triton, which only a GPU runs).
        out.append(PublicCase("ragged_dot/fallback/odd-200x136x264g3/fwd", chip, _specs(200, 136, 264, 3, "f32"),
                              _forward(("mosaic", "xla"))))
        out.append(PublicCase("ragged_dot/mosaic/heuristic-256x256x512g4/f32-out/fwd", chip,
                              _specs(256, 256, 512, 4, "bf16"), _forward("mosaic", preferred_element_type=jnp.float32)))
        # ragged_dot_general with the backward's dimension numbers (v1 and v2 take all three).
        for impl in IMPLEMENTATIONS:
            out.append(PublicCase(f"ragged_dot_general/{impl}/rhs-transposed/fwd", chip,
                                  (((256, 384), "bfloat16"), ((4, 256, 384), "bfloat16"), ((4,), "int32")),
                                  _general(impl, ((1,), (2,)), [0])))
            # Upstream's VJP gives this call's rhs gradient the wrong layout (a fix over upstream here;
            # test_public_identity.FIXED_OVER_UPSTREAM).
            out.append(PublicCase(f"ragged_dot_general/{impl}/rhs-transposed/grad", chip,
                                  (((256, 384), "bfloat16"), ((4, 256, 384), "bfloat16"), ((4,), "int32")),
                                  _general_grad(impl, ((1,), (2,)), [0])))
            out.append(PublicCase(f"ragged_dot_general/{impl}/ragged-contracting/fwd", chip,
                                  (((256, 256), "bfloat16"), ((256, 384), "bfloat16"), ((4,), "int32")),
                                  _general(impl, ((0,), (0,)), [])))
        # A fused activation (applied in the kernel; upstream's VJP differentiates through it).
        specs = _specs(512, 256, 384, 4, "bf16")
        out.append(PublicCase("ragged_dot/mosaic/silu/fwd", chip, specs, _forward("mosaic", activation=jax.nn.silu)))
        out.append(PublicCase("ragged_dot/mosaic/silu/grad", chip, specs, _grad("mosaic", activation=jax.nn.silu)))
        # gmm_v2's own options: a fused gated activation, zero-initialized rows, a group offset.
        out.append(PublicCase("ragged_dot/mosaic_tpu_v2/gateup-silu-zero-init/fwd", chip,
                              _specs(512, 256, 512, 4, "bf16"),
                              _forward("mosaic_tpu_v2", fuse_gateup_activation="silu", zero_initialize=True)))
        out.append(PublicCase("ragged_dot/mosaic_tpu_v2/gateup-n384-refused/fwd", chip, specs,  # n/2 off the lanes
                              _forward("mosaic_tpu_v2", fuse_gateup_activation="silu")))
        out.append(PublicCase("ragged_dot/mosaic_tpu_v2/group-offset/fwd", chip, (*specs, ((1,), "int32")),
                              _with_group_offset()))
        for form in ("QArray", "AsQArray"):
            out.append(PublicCase(f"ragged_dot/mosaic/int8-rhs-{form}/fwd", chip, _specs(256, 256, 256, 4, "bf16"),
                                  _quantized(form)))
    return out
