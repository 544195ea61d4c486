"""Public flash attention (`ops.dot_product_attention(..., implementation="mosaic")`) on every
chip, forward and through `jax.grad`: table keys, upstream's default blocks on other shapes,
GQA; odd lengths, padding (sequence lengths), a local window with soft cap and a bias, which
the Mosaic kernel refuses as upstream's does (and which fall back to XLA with
`implementation=None`); and the flash attention tables (forward and VJP, v5p, v6e and v7x).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .cases import CALL_CHIPS, PublicCase, Table, dims, grad_of_square
from .keys import shape_dtype

ATTENTION = "_src.ops.attention"
TABLE_KEYS = 2


def _precision(value: list | str) -> Any:
    if isinstance(value, str):
        return jax.lax.DotAlgorithmPreset[value]
    return tuple(jax.lax.Precision[p] for p in value)


def _mask(value: dict, api: Any) -> Any:
    base = api.module(f"{ATTENTION}.base")
    causal = value["causal_mask"]
    return base.Mask(shape_dtype(value["bool_mask"]),
                     causal_mask=None if causal is None else base.CausalMask(causal["offset"], causal["window_size"]),
                     q_start=shape_dtype(value["q_start"]), q_end=shape_dtype(value["q_end"]),
                     k_start=shape_dtype(value["k_start"]), k_end=shape_dtype(value["k_end"]))


def flash_arguments(key: dict, api: Any) -> dict[str, Any]:
    """`bind` arguments of the flash attention Op (and of its VJP Op, with residuals/out/dout)."""
    if key["paging_info"] is not None:
        raise ValueError("paged keys are not parsed here")
    args = dict(q=shape_dtype(key["q"]), k=shape_dtype(key["k"]), v=shape_dtype(key["v"]),
                precision=tuple(_precision(p) for p in key["precision"]), logits_dtype=jnp.dtype(key["logits_dtype"]),
                logits_scale=key["logits_scale"], bias=shape_dtype(key["bias"]),
                logits_soft_cap=key["logits_soft_cap"], mask=_mask(key["mask"], api),
                dropout_mask=shape_dtype(key["dropout_mask"]), dropout_rate=key["dropout_rate"],
                q_indices=shape_dtype(key["q_indices"]), k_indices=shape_dtype(key["k_indices"]),
                normalize_output=key["normalize_output"], return_residuals=key["return_residuals"])
    if "residuals" in key:
        args.update(residuals=tuple(shape_dtype(r) for r in key["residuals"]), out=shape_dtype(key["out"]),
                    dout=shape_dtype(key["dout"]), paging_info=None)
    return args


TABLES = [
    Table("flash", "pallas_mosaic_tpu_flash_attention", lambda api: api.ops.tpu.FlashAttention(), flash_arguments),
    Table("flash_vjp", "pallas_mosaic_tpu_flash_attention_vjp",
          lambda api: api.module(f"{ATTENTION}.pallas_mosaic_tpu_vjp").PallasMosaicTpuFlashAttentionVjp(),
          flash_arguments),
]


def _specs(b: int, t: int, s: int, n: int, kv: int, h: int, extra: tuple = ()):  # noqa: ANN202
    return (((b, t, n, h), "bfloat16"), ((b, s, kv, h), "bfloat16"), ((b, s, kv, h), "bfloat16"), *extra)


def _call(api: Any, args: tuple, kw: dict) -> Any:
    q, k, v, *rest = args
    kw = dict(kw)
    if kw.pop("lengths", False):  # padding: each batch row has its own valid length
        kw["query_seq_lengths"], kw["key_value_seq_lengths"] = rest[0], rest[0]
    if kw.pop("bias", False):
        kw["bias"] = rest[0]
    implementation = kw.pop("implementation", "mosaic")
    return api.ops.dot_product_attention(q, k, v, implementation=implementation, **kw)


def _forward(**kw: Any) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda *args: _call(api, args, kw))


def _grad(**kw: Any) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: grad_of_square(lambda *args: _call(api, args, kw), argnums=(0, 1, 2))


def _plain(key: dict) -> bool:
    mask = key["mask"]
    return (mask["bool_mask"] is None and mask["q_end"] is None and mask["k_end"] is None and key["bias"] is None
            and key["logits_soft_cap"] is None
            and key["precision"] == [["DEFAULT", "DEFAULT"], ["DEFAULT", "DEFAULT"]]
            and not key["return_residuals"] and key["q"].startswith("bf16[")
            and mask["causal_mask"] in (None, {"offset": 0, "window_size": None}))


def _table_calls(chip: str) -> list[tuple[str, tuple, dict]]:
    calls = []
    for key in TABLES[0].tuned_keys(chip, _plain, TABLE_KEYS):
        (b, t, n, h), (_, s, kv, _) = dims(key["q"]), dims(key["k"])
        causal = key["mask"]["causal_mask"] is not None
        calls.append((f"table-b{b}-{t}x{s}-n{n}kv{kv}h{h}{'-causal' if causal else ''}",
                      _specs(b, t, s, n, kv, h), {"is_causal": causal}))
    return calls


def cases() -> list[PublicCase]:
    out: list[PublicCase] = []
    lengths = (((2,), "int32"),)
    for chip in CALL_CHIPS:
        calls = _table_calls(chip) + [
            ("causal-gqa-b1-1024-n4kv2h128", _specs(1, 1024, 1024, 4, 2, 128), {"is_causal": True}),
            ("odd-b1-200x328-n2kv2h64", _specs(1, 200, 328, 2, 2, 64), {}),
            ("padded-b2-256-n2kv1h128", _specs(2, 256, 256, 2, 1, 128, lengths), {"is_causal": True, "lengths": True}),
            ("window-softcap-b1-384-n2kv2h128", _specs(1, 384, 384, 2, 2, 128),
             {"local_window_size": (128, 0), "logits_soft_cap": 30.0}),
            ("bias-b1-256-n2kv2h128", _specs(1, 256, 256, 2, 2, 128, (((1, 2, 256, 256), "float32"),)),
             {"bias": True}),
        ]
        # The Mosaic kernel refuses padding and windows (upstream raises the same errors above); with a
        # fallback, upstream goes on to XLA, and so does this kernel. (`implementation=None` means the
        # same on a TPU; upstream's default list also holds Triton, which only a GPU runs.)
        calls += [
            ("fallback/padded-b2-256-n2kv1h128", _specs(2, 256, 256, 2, 1, 128, lengths),
             {"is_causal": True, "lengths": True, "implementation": ("mosaic", "xla")}),
            ("fallback/window-softcap-b1-384-n2kv2h128", _specs(1, 384, 384, 2, 2, 128),
             {"local_window_size": (128, 0), "logits_soft_cap": 30.0, "implementation": ("mosaic", "xla")}),
        ]
        for name, specs, kw in calls:
            out.append(PublicCase(f"attention/{name}/fwd", chip, specs, _forward(**kw)))
            out.append(PublicCase(f"attention/{name}/grad", chip, specs, _grad(**kw)))
    return out
