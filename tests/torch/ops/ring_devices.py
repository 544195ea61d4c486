"""Run by test_ring_attention in a process of its own (tests/jax/sharded/host_devices.py): `python
ring_devices.py CHECK...`. The JAX functions the Torch ring op exports for a mesh, run on 8 host CPU
devices in Pallas interpret mode on the whole sequence (what torch-tpu hands them: each rank's shard
laid side by side), against float64 Torch attention on one device: output, logsumexp and gradients.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from tests.jax.sharded import host_devices  # noqa: E402

CHECKS = host_devices.start(8)

import jax  # noqa: E402
import kernels  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from tests.torch import attention_reference as reference  # noqa: E402

LOCAL, DIM = 128, 128
# name -> (mesh shape, axis names, ring_attention_ops options, batch, heads, kv_heads (0: multi-query), segments,
# backward too)
CASES = {
    "ring8-causal-gqa-segments": ((8,), ("sp",), dict(causal=True), 1, 2, 1, True, True),
    "dp2-ring4-full-mqa": ((2, 4), ("dp", "sp"), dict(causal=False, batch_axis="dp", mqa=True), 2, 2, 0, False, False),
    # multi-query K/V whole on both head shards: each shard's dK/dV is a partial sum over its heads
    "tp2-ring4-causal-mqa": ((2, 4), ("tp", "sp"), dict(causal=True, head_axis="tp", mqa=True), 1, 2, 0, False, True),
    # the head-tail layout: each chip's queries and keys in two chunks, documents crossing chips
    "ring8-balanced-causal-gqa-segments": ((8,), ("sp",), dict(causal=True, load_balanced=True), 1, 2, 1, True, True),
    "ring4-balanced-window-mqa": ((4,), ("sp",), dict(causal=True, load_balanced=True, window=(300, 0), mqa=True),
                                  1, 2, 0, False, True),
    "ring4-window": ((4,), ("sp",), dict(causal=True, window=(200, 0)), 1, 2, 1, True, True),
}


# Each rank's shards picked as a rank does (`mesh_coordinate` on the mesh torch-tpu's `get_pallas_mesh`
# builds, rank r at position r), placed on rank r's device: the ring's axis the major one, so a rank's
# coordinate on it is not its rank. name -> (mesh shape, axis names, options, batch, heads, kv_heads, segments)
RANK_CASES = {
    "sp4-dp2-balanced-rank-shards": ((4, 2), ("sp", "dp"), dict(causal=True, batch_axis="dp", load_balanced=True),
                                     2, 2, 1, True),
}


def _inputs(batch: int, heads: int, kv_heads: int, seq: int, segmented: bool, seed: int) -> list:
    r = np.random.default_rng(seed)
    kv_shape = (batch, seq, DIM) if kv_heads == 0 else (batch, kv_heads, seq, DIM)
    arrays = [r.standard_normal((batch, heads, seq, DIM), np.float32) * DIM**-0.5,
              r.standard_normal(kv_shape, np.float32) * DIM**-0.5, r.standard_normal(kv_shape, np.float32)]
    ids = None
    if segmented:  # documents cut across shard boundaries
        cuts = [100, 300, 301, 700]
        ids = np.searchsorted(cuts, np.arange(seq), side="right").astype(np.int32)[None].repeat(batch, 0)
    return [*arrays, ids, r.standard_normal((batch, heads, seq, DIM), np.float32)]


def _reference(q, k, v, ids, dout, causal: bool, window: tuple | None = None) -> dict[str, np.ndarray]:  # noqa: ANN001
    """Float64 attention over the whole sequence (in its own order): out, logsumexp, dq, dk, dv."""
    seq = q.shape[2]
    tq, tk, tv = (torch.from_numpy(x).double().requires_grad_() for x in (q, k, v))
    kk, vv = (tk[:, None], tv[:, None]) if k.ndim == 3 else (tk, tv)
    ids_t = None if ids is None else torch.from_numpy(ids)
    kind = "local" if window is not None else "causal" if causal else "full"
    allowed = reference.allowed(torch.arange(seq).expand(q.shape[0], seq), seq, kind=kind, window=window,
                                q_ids=ids_t, kv_ids=ids_t)
    out = reference.attention(tq, kk, vv, allowed)
    (out * torch.from_numpy(dout).double()).sum().backward()
    group = q.shape[1] // kk.shape[1]
    logits = torch.einsum("bhqd,bhkd->bhqk", tq.detach(), kk.detach().repeat_interleave(group, 1))
    lse = logits.masked_fill(~allowed[:, None], float("-inf")).logsumexp(-1)
    return {"out": out.detach().numpy(), "lse": lse.numpy(), "dq": tq.grad.numpy(), "dk": tk.grad.numpy(),
            "dv": tv.grad.numpy()}


def _errors(got: dict, want: dict) -> dict:
    report = {}
    for name, expected in want.items():
        g = np.asarray(got[name], np.float64)
        assert g.shape == expected.shape, f"{name}: shape {g.shape}, reference {expected.shape}"
        diff = np.abs(g - expected)
        report[name] = {"max_abs": float(diff.max()), "max_ref": float(np.abs(expected).max()),
                        "excess": float((diff - (1e-4 * np.abs(expected) + 5e-5)).max())}
    return report


def _rank_shards(tokamax, check: str) -> None:  # noqa: ANN001
    """Out and logsumexp of each rank, its inputs its own shards (`mesh_coordinate` of each mesh axis on
    the mesh `get_pallas_mesh` builds, the whole sequence put in the ring's layout with `to_ring_layout`),
    against the same shards of float64 attention over the whole sequence."""
    from torch_tpu._internal.pallas._mock_device import _PallasDevice

    shape, names, options, batch, heads, kv_heads, segmented = RANK_CASES[check]
    ranks = int(np.prod(shape))
    pallas_mesh = jax.sharding.Mesh(np.array([_PallasDevice(id=i, process_index=i, device_kind="TPU v6 lite")
                                              for i in range(ranks)]).reshape(shape), names)
    devices = jax.devices("cpu")[:ranks]  # rank r's chip, at position r as in get_pallas_mesh
    mesh = jax.sharding.Mesh(np.array(devices).reshape(shape), names)
    ops = tokamax.torch_ops
    ring = ops.ring_attention_ops(mesh, **options)
    size, balanced, batch_axis = mesh.shape["sp"], options.get("load_balanced", False), options["batch_axis"]
    q, k, v, ids, dout = _inputs(batch, heads, kv_heads, LOCAL * size * (2 if balanced else 1), segmented,
                                 len(check))

    def shard(x: np.ndarray, rank: int, seq_dim: int) -> np.ndarray:  # what rank `rank` passes
        laid = ops.to_ring_layout(torch.from_numpy(np.asarray(x)), size, dim=seq_dim, load_balanced=balanced)
        mine = laid.chunk(size, dim=seq_dim)[ops.mesh_coordinate(pallas_mesh, "sp", rank)]
        return mine.chunk(mesh.shape[batch_axis], dim=0)[ops.mesh_coordinate(pallas_mesh, batch_axis, rank)].numpy()

    def global_array(x: np.ndarray, spec, seq_dim: int) -> jax.Array:  # noqa: ANN001 - each rank's shard on its chip
        return jax.make_array_from_single_device_arrays(
            x.shape, jax.sharding.NamedSharding(mesh, spec),
            [jax.device_put(shard(x, r, seq_dim), devices[r]) for r in range(ranks)])

    layout = ring.layout
    args = [global_array(q, layout.q, 2), global_array(k, layout.kv, 2), global_array(v, layout.kv, 2),
            global_array(ids, layout.ids, 1)]
    with tokamax.emulation.interpret_on_cpu("v6e"):
        out, lse = jax.jit(ring.forward_fn)(*args)
    want = _reference(q, k, v, ids, dout, options["causal"])

    def per_rank(x: jax.Array) -> np.ndarray:  # each rank's output, in rank order
        held = {s.device: np.asarray(s.data) for s in x.addressable_shards}
        return np.stack([held[devices[r]] for r in range(ranks)])

    got = {"out": per_rank(out), "lse": per_rank(lse)}
    expected = {name: np.stack([shard(want[name], r, 2) for r in range(ranks)]) for name in got}
    host_devices.report(check, devices=len(jax.devices("cpu")), errors=_errors(got, expected))


def main() -> int:
    os.environ["LOCAL_KERNELS"] = f"kernels-community/tokamax={REPO / 'build/torch-tpu'}"
    tokamax = kernels.get_kernel("kernels-community/tokamax", version=1)
    for check in CHECKS:
        if check in RANK_CASES:
            _rank_shards(tokamax, check)
            continue
        shape, names, options, batch, heads, kv_heads, segmented, backward = CASES[check]
        mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:int(np.prod(shape))]).reshape(shape), names)
        ring = tokamax.torch_ops.ring_attention_ops(mesh, **options)
        balanced = options.get("load_balanced", False)
        size = mesh.shape["sp"]
        # in the head-tail layout each chip's two chunks are a block each
        q, k, v, ids, dout = _inputs(batch, heads, kv_heads, LOCAL * size * (2 if balanced else 1), segmented,
                                     len(check))

        def seq_axis(x):  # noqa: ANN001, ANN202 - ids [b, s], lse [b, h, s], MQA k/v [b, s, d], the rest [b, h, s, d]
            return 1 if x.ndim == 2 else 2 if x.ndim == 4 else 1 if x.shape[-1] == DIM else 2

        def move(x, back=False, balanced=balanced, size=size):  # noqa: ANN001, ANN202 - into the ring's layout
            if x is None or not balanced:
                return x
            fn = tokamax.ring.from_ring_layout if back else tokamax.ring.to_ring_layout
            return fn(np.asarray(x), size, axis=seq_axis(np.asarray(x)))

        with tokamax.emulation.interpret_on_cpu("v6e"):
            args = [move(x) for x in (q, k, v, ids)]
            out, lse = jax.jit(ring.forward_fn)(*args)
            got = {"out": move(out, True), "lse": move(lse, True)}
            if backward:
                grads = jax.jit(ring.backward_fn)(*args, out, lse, move(dout))
                got.update(zip(("dq", "dk", "dv"), (move(g, True) for g in grads), strict=True))
        want = {name: x for name, x in _reference(q, k, v, ids, dout, options["causal"], options.get("window")).items()
                if name in got}
        host_devices.report(check, devices=len(jax.devices("cpu")), errors=_errors(got, want))
    return 0


if __name__ == "__main__":
    sys.exit(main())
