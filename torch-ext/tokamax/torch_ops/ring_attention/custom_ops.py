"""The custom ops behind `ring_attention`: one forward/backward pair per mesh and options (`Layout`),
made on first use and cached, since torch-tpu's `jax_op` fixes the mesh and partition specs when it
registers an op.

- forward: (q, k, v, segment_ids) -> (out, logsumexp), this rank's shards; autograd runs backward.
- backward: (q, k, v, segment_ids, out, logsumexp, dout) -> (dq, dk, dv).

Each pair is named by its layout (`op_names`: the mesh's axes and sizes, the ring, batch and head axes,
multi-query, the mask, the layout, and a digest of all that and the mesh's devices), so a process
names the same layout's ops alike whatever else it made first, and a saved export finds its own.

Specs go one per positional argument (torch-tpu pairs arguments and specs with `zip`, so a short list
drops the trailing arguments from the export); outputs get specs too (else torch-tpu sizes them globally).
CPU tensors run a ring of one chip (a mesh of size 1, on JAX's CPU device, interpret mode); a larger
ring needs torch-tpu's collectives, which only TPU tensors have.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import re
from typing import Any

import jax
import numpy as np
import torch

from ...ring import sharded
from .._bridge import register

OP = "ring_attention"


@dataclasses.dataclass(frozen=True)
class RingOps:
    """The pair of custom ops made for one `Layout`, and the JAX functions they export."""

    layout: sharded.Layout
    forward: Any
    backward: Any
    forward_fn: Any
    backward_fn: Any


_OPS: dict[sharded.Layout, RingOps] = {}
_BY_NAME: dict[str, RingOps] = {}


def _word(value: Any) -> str:
    """`value` as a piece of a Torch op name (letters, digits and underscores)."""
    return re.sub(r"[^A-Za-z0-9]", "_", str(value))


def op_names(layout: sharded.Layout) -> tuple[str, str]:
    """The forward and backward ops' names for `layout`, from its options alone, e.g.
    `ring_attention_dp2_sp4_ring_sp_batch_dp_mha_causal_balanced_<digest>`: the readable part says the
    options, the digest (sha256 of every field and the mesh's devices, by platform, kind and id in mesh
    order) keeps two layouts that read alike apart."""
    mesh = layout.mesh
    window = "" if layout.window is None else "_window_" + "_".join("none" if w is None else str(w)
                                                                    for w in layout.window)
    parts = ["_".join(f"{_word(name)}{size}" for name, size in mesh.shape.items()), f"ring_{_word(layout.axis)}",
             *([f"batch_{_word(layout.batch_axis)}"] if layout.batch_axis is not None else []),
             *([f"heads_{_word(layout.head_axis)}"] if layout.head_axis is not None else []),
             "mqa" if layout.mqa else "mha", ("causal" if layout.causal else "full") + window,
             "balanced" if layout.balanced else "contiguous"]
    devices = [(d.platform, getattr(d, "device_kind", ""), int(d.id)) for d in mesh.devices.flat]
    fields = (tuple(mesh.axis_names), tuple(mesh.devices.shape), repr(getattr(mesh, "axis_types", None)), devices,
              layout.axis, layout.batch_axis, layout.head_axis, layout.mqa, layout.causal, layout.balanced,
              layout.window)
    digest = hashlib.sha256(repr(fields).encode()).hexdigest()[:10]
    suffix = "_".join([*parts, digest])
    return f"{OP}_{suffix}", f"{OP}_bwd_{suffix}"


def _cpu_twin(layout: sharded.Layout) -> sharded.Layout:
    """The same layout over JAX's own CPU device, for CPU tensors (a mesh of size 1 only)."""
    devices = np.array(jax.devices("cpu")[:1]).reshape(layout.mesh.devices.shape)
    return dataclasses.replace(layout, mesh=jax.sharding.Mesh(devices, layout.mesh.axis_names))


def _cpu_refusal(layout: sharded.Layout) -> Any:
    def refuse(*args: Any) -> Any:
        raise NotImplementedError(
            f"tokamax {OP}: CPU tensors run a ring of one chip only (a mesh of size 1), this mesh holds "
            f"{layout.mesh.size}; across chips the K/V shards travel through torch-tpu's collectives, which "
            "only TPU tensors have")
    return refuse


def _cpu_functions(layout: sharded.Layout) -> tuple[Any, Any]:
    if layout.mesh.size != 1:
        return _cpu_refusal(layout), _cpu_refusal(layout)
    twin = _cpu_twin(layout)
    return sharded.forward(twin), sharded.backward(twin)


def ops_for(layout: sharded.Layout) -> RingOps:
    """The ops of `layout`, registered on first use (never inside torch.compile: registering a custom
    op there cannot be traced)."""
    if layout in _OPS:
        return _OPS[layout]
    if torch.compiler.is_compiling():
        raise RuntimeError(
            f"tokamax {OP}: the op for this mesh and these options is made on first use, which cannot happen "
            f"inside torch.compile; call tokamax.torch_ops.ring_attention_ops(mesh, ...) with the same mesh and "
            f"options (or ring_attention once) before compiling")
    forward_name, backward_name = op_names(layout)
    if forward_name in _BY_NAME:  # a mesh equal in every named field and device (another Mesh object)
        _OPS[layout] = _BY_NAME[forward_name]
        return _OPS[layout]
    cpu_forward, cpu_backward = _cpu_functions(layout)
    q, kv, rows, ids = layout.q, layout.kv, layout.rows, layout.ids
    forward_fn, backward_fn = sharded.forward(layout), sharded.backward(layout)
    forward = register(forward_name, forward_fn, cpu_fn=cpu_forward, mesh=layout.mesh,
                       input_partition_specs=_specs(forward_fn, (q, kv, kv, ids)), output_partition_specs=(q, rows))
    backward = register(backward_name, backward_fn, cpu_fn=cpu_backward, mesh=layout.mesh,
                        input_partition_specs=_specs(backward_fn, (q, kv, kv, ids, q, rows, q)),
                        output_partition_specs=(q, kv, kv))
    forward.register_fake(_forward_fake)
    backward.register_fake(_backward_fake)
    forward.register_autograd(_make_backward(backward), setup_context=_setup)
    _OPS[layout] = _BY_NAME[forward_name] = RingOps(layout, forward, backward, forward_fn, backward_fn)
    return _OPS[layout]


def _specs(fn: Any, specs: tuple) -> tuple:
    """One spec per positional argument of `fn` (checked: torch-tpu's `zip` of arguments and specs would
    leave the arguments past a short list out of the export)."""
    arguments = len(inspect.signature(fn).parameters)
    assert len(specs) == arguments, f"{len(specs)} partition specs for {arguments} arguments"
    return specs


# ---- Fake kernels: this rank's shards in, this rank's shards out (symbolic sizes welcome) ---------
def _forward_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segment_ids: torch.Tensor | None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    return q.new_empty((*q.shape[:-1], v.shape[-1])), q.new_empty(q.shape[:-1], dtype=torch.float32)


def _backward_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segment_ids: torch.Tensor | None,
                   out: torch.Tensor, lse: torch.Tensor, dout: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


# ---- Autograd: upstream's ring backward on the saved residuals ----------------------------------
def _setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    q, k, v, segment_ids = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, segment_ids, out, lse)
    ctx.mark_non_differentiable(lse)


def _make_backward(backward_op: Any) -> Any:
    def backward(ctx: Any, grad: torch.Tensor, d_lse: torch.Tensor | None) -> tuple:
        q, k, v, segment_ids, out, lse = ctx.saved_tensors
        dq, dk, dv = backward_op(q, k, v, segment_ids, out, lse, grad.contiguous())
        return dq, dk, dv, None
    return backward
