"""Public splash-attention calls (`ops.experimental.splash_attention`) on every chip, forward and
through `jax.grad`: table keys (v7x), upstream's heuristic blocks, odd lengths, MQA, GQA, soft
cap, segment ids, a local window as a dense mask; and the splash tables (forward and VJP).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from .cases import CALL_CHIPS, PublicCase, Table, dims, grad_of_square
from .keys import shape_dtype

SPLASH = "_src.ops.experimental.tpu.splash_attention"
TABLE_KEYS = 2


def _mask(value: dict | None, api: Any) -> Any:
    if value is None:
        return None
    return api.module(f"{SPLASH}.base").Mask(shape_dtype(value["bool_mask"]), is_causal=value["is_causal"])


def _segment_ids(value: dict | None, api: Any) -> Any:
    if value is None:
        return None
    return api.module(f"{SPLASH}.base").SegmentIds(shape_dtype(value["q"]), shape_dtype(value["kv"]))


def splash_arguments(key: dict, api: Any) -> dict[str, Any]:
    """`bind` arguments of the splash forward (and, with residuals/out/dout, of its VJP) Op."""
    args = dict(q=shape_dtype(key["q"]), k=shape_dtype(key["k"]), v=shape_dtype(key["v"]),
                mask=_mask(key["mask"], api), segment_ids=_segment_ids(key["segment_ids"], api),
                sinks=shape_dtype(key["sinks"]), is_mqa=key["is_mqa"], mask_value=key["mask_value"],
                attn_logits_soft_cap=key["attn_logits_soft_cap"], dropout_rate=key["dropout_rate"],
                prng_key=shape_dtype(key["prng_key"]), return_residuals=key["return_residuals"])
    if "residuals" in key:
        args.update(residuals=tuple(shape_dtype(r) for r in key["residuals"]), out=shape_dtype(key["out"]),
                    dout=shape_dtype(key["dout"]))
    return args


def _tpu(api: Any) -> Any:
    return api.ops.experimental.tpu


TABLES = [
    Table("splash", "pallas_mosaic_tpu_splash_attention", lambda api: _tpu(api).SplashAttention(), splash_arguments),
    Table("splash_vjp", "pallas_mosaic_tpu_splash_attention_vjp",
          lambda api: api.module(f"{SPLASH}.pallas_mosaic_tpu_vjp").PallasMosaicTpuSplashAttentionVjp(),
          splash_arguments),
]


def _specs(heads: int, kv_heads: int, q_len: int, kv_len: int, dim: int, mqa: bool = False):  # noqa: ANN202
    kv_shape = (kv_len, dim) if mqa else (kv_heads, kv_len, dim)
    return (((heads, q_len, dim), "bfloat16"), (kv_shape, "bfloat16"), (kv_shape, "bfloat16"))


def _call(api: Any, q: Any, k: Any, v: Any, kw: dict) -> Any:
    kw = dict(kw)
    mask = kw.pop("mask", None)
    if mask == "causal":
        mask = api.module(f"{SPLASH}.base").CAUSAL_MASK
    elif isinstance(mask, tuple) and mask[0] == "local":  # a sliding window, built here as a dense mask
        left = mask[1]
        rows, cols = np.arange(q.shape[1])[:, None], np.arange(k.shape[-2])[None, :]
        mask = jnp.asarray((cols <= rows) & (cols > rows - left))
    segment_ids = kw.pop("segment_ids", None)
    if segment_ids is not None:  # two documents: first half, second half
        ids = (jnp.arange(q.shape[1]) >= q.shape[1] // 2).astype(jnp.int32)
        segment_ids = api.module(f"{SPLASH}.base").SegmentIds(ids, ids)
    return api.ops.experimental.splash_attention(q, k, v, mask, segment_ids, implementation="mosaic_tpu", **kw)


def _forward(**kw: Any) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda q, k, v: _call(api, q, k, v, kw))


def _grad(**kw: Any) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: grad_of_square(lambda q, k, v: _call(api, q, k, v, kw), argnums=(0, 1, 2))


def _plain(key: dict) -> bool:
    return (key["segment_ids"] is None and key["sinks"] is None and key["dropout_rate"] == 0.0
            and not key["return_residuals"] and not key["is_mqa"] and key["mask"]["bool_mask"] is None
            and key["attn_logits_soft_cap"] is None)


def _table_calls(chip: str) -> list[tuple[str, tuple, dict]]:
    calls = []
    for key in TABLES[0].tuned_keys(chip, _plain, TABLE_KEYS):
        (h, q_len, d), (kh, kv_len, _) = dims(key["q"]), dims(key["k"])
        kw = {"mask": "causal"} if key["mask"]["is_causal"] else {}
        calls.append((f"table-h{h}kv{kh}-{q_len}x{kv_len}x{d}", _specs(h, kh, q_len, kv_len, d), kw))
    return calls


def cases() -> list[PublicCase]:
    out: list[PublicCase] = []
    for chip in CALL_CHIPS:
        calls = _table_calls(chip) + [
            ("heuristic-causal-h2-2048x2048x128", _specs(2, 2, 2048, 2048, 128), {"mask": "causal"}),
            ("gqa-full-h4kv2-256x512x128", _specs(4, 2, 256, 512, 128), {}),
            ("mqa-causal-h2-512x512x128", _specs(2, 1, 512, 512, 128, mqa=True), {"mask": "causal", "is_mqa": True}),
            ("softcap-segments-h2-256x256x128", _specs(2, 2, 256, 256, 128),
             {"mask": "causal", "attn_logits_soft_cap": 30.0, "segment_ids": True}),
            ("local-window-h2-384x384x128", _specs(2, 2, 384, 384, 128), {"mask": ("local", 128)}),
        ]
        for name, specs, kw in calls:
            out.append(PublicCase(f"splash/{name}/fwd", chip, specs, _forward(**kw)))
            out.append(PublicCase(f"splash/{name}/grad", chip, specs, _grad(**kw)))
    return out
