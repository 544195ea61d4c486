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


def main() -> int:
    os.environ["LOCAL_KERNELS"] = f"kernels-community/tokamax={REPO / 'build/torch-tpu'}"
    tokamax = kernels.get_kernel("kernels-community/tokamax", version=1)
    for check in CHECKS:
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
