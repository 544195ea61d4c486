"""Splash attention: causal and local masks, MHA and MQA, segment ids, forward and gradients.

The reference is a plain masked softmax attention written here (no upstream code), in f32 at
HIGHEST precision. Inputs are f32 and small (2 heads, 256 tokens, head dim 128).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import Case, rng

KERNEL = "_src.ops.experimental.tpu.splash_attention.splash_attention_kernel"
MASKS = "_src.ops.experimental.tpu.splash_attention.splash_attention_mask"
HEADS, SEQ, DIM = 2, 256, 128
CHIP_TOLERANCE_WHY = ("compiled on a TPU, the kernel's f32 matmuls at the default precision are one bf16 pass: each "
                      "operand rounded to 8 significant bits (2^-8), a product within 2^-7; the outputs are averages "
                      "of values of order 1, within 2^-7 of 1 + |reference| (the v5e: 8e-4 at most); a gradient "
                      "chains three such passes (dp = do v, ds = p (dp - delta), dq = ds k), within 3 x 2^-7 of its "
                      "order-1 scale (the v5e: 9e-3 at most, where ds cancels)")
TOLERANCE_WHY = ("f32 inputs; the kernel's online softmax (base-2 exponent, blockwise rescaling) reorders the "
                 "f32 arithmetic, giving relative differences of a few 1e-6, well inside 1e-4")


def dense_attention(q, k, v, mask, segment_ids=None, *, is_mqa: bool):  # noqa: ANN001, ANN201
    """softmax(q k^T, masked) v per head; `mask` is [q_seq, kv_seq] bool."""
    if is_mqa:
        k, v = (jnp.broadcast_to(x, (q.shape[0], *x.shape)) for x in (k, v))
    hi = jax.lax.Precision.HIGHEST
    logits = jnp.einsum("hqd,hkd->hqk", q, k, precision=hi)
    allowed = jnp.asarray(mask)[None]
    if segment_ids is not None:
        allowed = allowed & (segment_ids[0][:, None] == segment_ids[1][None, :])[None]
    logits = jnp.where(allowed, logits, -1e30)
    return jnp.einsum("hqk,hkd->hqd", jax.nn.softmax(logits, axis=-1), v, precision=hi)


def _mask(get, kind: str):  # noqa: ANN001, ANN202
    masks = get(MASKS)
    if kind == "causal":
        return masks.CausalMask((SEQ, SEQ))
    return masks.LocalMask((SEQ, SEQ), window_size=(96, 32), offset=0)


def _inputs(is_mqa: bool, segmented: bool, with_cotangent: bool) -> tuple[np.ndarray, ...]:
    r = rng(7 + is_mqa + 2 * segmented)
    kv_shape = (SEQ, DIM) if is_mqa else (HEADS, SEQ, DIM)
    arrays = [r.standard_normal((HEADS, SEQ, DIM), np.float32) * DIM**-0.5,
              r.standard_normal(kv_shape, np.float32) * DIM**-0.5,
              r.standard_normal(kv_shape, np.float32)]
    if segmented:
        segments = np.repeat(np.arange(4, dtype=np.int32), [60, 100, 50, 46])
        arrays += [segments, segments.copy()]
    if with_cotangent:
        arrays.append(r.standard_normal((HEADS, SEQ, DIM), np.float32))
    return tuple(arrays)


def _split(args: tuple, segmented: bool, with_cotangent: bool):  # noqa: ANN202
    q, k, v, *rest = args
    segments = (rest[0], rest[1]) if segmented else None
    cotangent = rest[-1] if with_cotangent else None
    return q, k, v, segments, cotangent


def _kernel_fn(mask_kind: str, is_mqa: bool, segmented: bool, grads: bool):  # noqa: ANN202
    def call(get):  # noqa: ANN001, ANN202
        module = get(KERNEL)
        make = module.make_splash_mqa_single_device if is_mqa else module.make_splash_mha_single_device
        kernel = make(_mask(get, mask_kind))

        def fn(*args):  # noqa: ANN002, ANN202
            q, k, v, segments, do = _split(args, segmented, grads)
            seg = module.SegmentIds(q=segments[0], kv=segments[1]) if segments else None
            if not grads:
                return kernel(q, k, v, seg)
            out, vjp = jax.vjp(lambda q, k, v: kernel(q, k, v, seg), q, k, v)
            return (out, *vjp(do))

        return fn

    return call


def _reference_fn(mask_kind: str, is_mqa: bool, segmented: bool, grads: bool):  # noqa: ANN202
    def reference(get):  # noqa: ANN001, ANN202
        dense = _mask(get, mask_kind)[:, :]

        def fn(*args):  # noqa: ANN002, ANN202
            q, k, v, segments, do = _split(args, segmented, grads)
            attend = lambda q, k, v: dense_attention(q, k, v, dense, segments, is_mqa=is_mqa)  # noqa: E731
            if not grads:
                return attend(q, k, v)
            out, vjp = jax.vjp(attend, q, k, v)
            return (out, *vjp(do))

        return fn

    return reference


def _case(mask_kind: str, is_mqa: bool, segmented: bool, grads: bool) -> Case:
    name = f"{'mqa' if is_mqa else 'mha'}-{mask_kind}{'-segments' if segmented else ''}-{'grads' if grads else 'fwd'}"
    return Case(
        id=f"splash_attention/{name}",
        call=_kernel_fn(mask_kind, is_mqa, segmented, grads),
        inputs=lambda: _inputs(is_mqa, segmented, grads),
        reference=_reference_fn(mask_kind, is_mqa, segmented, grads),
        tolerance=(1e-4, 1e-5) if not grads else (1e-4, 2e-5),
        tolerance_why=TOLERANCE_WHY,
        chip_tolerance=(2**-7, 2**-7) if not grads else (2**-7, 3 * 2**-7),
        chip_tolerance_why=CHIP_TOLERANCE_WHY,
        chips=("v5e", "v6e", "v7x"),
    )


CASES = [
    _case("causal", is_mqa=False, segmented=False, grads=False),
    _case("local", is_mqa=True, segmented=False, grads=False),
    _case("causal", is_mqa=False, segmented=True, grads=True),
    _case("local", is_mqa=True, segmented=True, grads=True),
]
