"""Ring attention over a ring of 2 or 4 devices: causal, MHA and MQA, segment ids, forward and gradients.

`ring_fn` builds the sharded call for any mesh: an abstract TPU mesh for lowering (the cases
here), or real host devices in interpret mode (tests/jax/test_ring_attention.py).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np

from . import Case, rng
from .splash_attention import HEADS, dense_attention

RING = "_src.ops.experimental.tpu.splash_attention.ring_attention_kernel"
SPLASH = "_src.ops.experimental.tpu.splash_attention.splash_attention_kernel"
MASKS = "_src.ops.experimental.tpu.splash_attention.splash_attention_mask"
AXIS = "ring"
SHARD_SEQ, DIM = 256, 128
P = jax.sharding.PartitionSpec


def ring_inputs(devices: int, is_mqa: bool, segmented: bool, grads: bool) -> tuple[np.ndarray, ...]:
    seq = SHARD_SEQ * devices
    r = rng(100 + devices + 2 * is_mqa)
    kv_shape = (seq, DIM) if is_mqa else (HEADS, seq, DIM)
    arrays = [r.standard_normal((HEADS, seq, DIM), np.float32) * DIM**-0.5,
              r.standard_normal(kv_shape, np.float32) * DIM**-0.5,
              r.standard_normal(kv_shape, np.float32)]
    if segmented:
        cuts = np.sort(r.choice(np.arange(1, seq), size=3, replace=False))
        segments = np.searchsorted(cuts, np.arange(seq), side="right").astype(np.int32)
        arrays += [segments, segments.copy()]
    if grads:
        arrays.append(r.standard_normal((HEADS, seq, DIM), np.float32))
    return tuple(arrays)


def ring_fn(get, mesh, devices: int, is_mqa: bool, segmented: bool, grads: bool):  # noqa: ANN001, ANN201
    """fn(*ring_inputs) running ring attention sharded over `mesh`'s ring axis."""
    ring, splash = get(RING), get(SPLASH)
    seq = SHARD_SEQ * devices
    config = dataclasses.replace(splash.SplashConfig.get_default(), use_base2_exp=False)
    kernel = ring.make_ring_attention(get(MASKS).make_causal_mask((seq, seq)), is_mqa=is_mqa, ring_axis=AXIS,
                                      config=config, q_seq_shards=devices, kv_seq_shards=devices)
    q_spec = P(None, AXIS, None)
    kv_spec = P(AXIS, None) if is_mqa else q_spec
    seg_spec = ring.SegmentIds(q=P(AXIS), kv=P(AXIS)) if segmented else None
    sharded = functools.partial(jax.shard_map, mesh=mesh, out_specs=q_spec, check_vma=False,
                                in_specs=(kernel.manual_sharding_spec(), q_spec, kv_spec, kv_spec, seg_spec))
    attend = sharded(lambda kern, q, k, v, seg: kern(q, k, v, seg))

    def fn(q, k, v, *rest):  # noqa: ANN001, ANN002, ANN202
        seg = ring.SegmentIds(q=rest[0], kv=rest[1]) if segmented else None
        if not grads:
            return attend(kernel, q, k, v, seg)
        out, vjp = jax.vjp(lambda q, k, v: attend(kernel, q, k, v, seg), q, k, v)
        return (out, *vjp(rest[-1]))

    return fn


def ring_reference(get, devices: int, is_mqa: bool, segmented: bool, grads: bool):  # noqa: ANN001, ANN201
    seq = SHARD_SEQ * devices
    dense = get(MASKS).make_causal_mask((seq, seq))

    def fn(q, k, v, *rest):  # noqa: ANN001, ANN002, ANN202
        segments = (rest[0], rest[1]) if segmented else None
        attend = lambda q, k, v: dense_attention(q, k, v, dense, segments, is_mqa=is_mqa)  # noqa: E731
        if not grads:
            return attend(q, k, v)
        out, vjp = jax.vjp(attend, q, k, v)
        return (out, *vjp(rest[-1]))

    return fn


def _case(devices: int, is_mqa: bool, segmented: bool, grads: bool) -> Case:
    name = f"ring{devices}-{'mqa' if is_mqa else 'mha'}{'-segments' if segmented else ''}-{'grads' if grads else 'fwd'}"
    return Case(
        id=f"ring_attention/{name}",
        # Built while tracing, so that it shards over the abstract mesh it is lowered under.
        call=lambda get: lambda *args: ring_fn(get, jax.sharding.get_abstract_mesh(), devices, is_mqa, segmented,
                                               grads)(*args),
        inputs=lambda: ring_inputs(devices, is_mqa, segmented, grads),
        chips=("v5e", "v6e", "v7x"),
        mesh=(AXIS, devices),
        numerics_in="tests/jax/test_ring_attention.py (needs several host devices)",
    )


CASES = [
    _case(2, is_mqa=False, segmented=False, grads=False),
    _case(4, is_mqa=True, segmented=True, grads=True),
]
