"""The custom ops behind `ring_attention`: one forward/backward pair per mesh and options (`Layout`),
made on first use and cached, since torch-tpu's `jax_op` fixes the mesh and partition specs when it
registers an op.

- forward: (q, k, v, segment_ids) -> (out, logsumexp), this rank's shards; autograd runs backward.
- backward: (q, k, v, segment_ids, out, logsumexp, dout) -> (dq, dk, dv).

Specs go one per positional argument (torch-tpu pairs arguments and specs with `zip`, so a short list
drops the trailing arguments from the export); outputs get specs too (else torch-tpu sizes them globally).
CPU tensors run a ring of one chip (a mesh of size 1, on JAX's CPU device, interpret mode); a larger
ring needs torch-tpu's collectives, which only TPU tensors have.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
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
_COUNTER = itertools.count()


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
    index = next(_COUNTER)
    cpu_forward, cpu_backward = _cpu_functions(layout)
    q, kv, rows, ids = layout.q, layout.kv, layout.rows, layout.ids
    forward_fn, backward_fn = sharded.forward(layout), sharded.backward(layout)
    forward = register(f"{OP}_{index}", forward_fn, cpu_fn=cpu_forward, mesh=layout.mesh,
                       input_partition_specs=_specs(forward_fn, (q, kv, kv, ids)), output_partition_specs=(q, rows))
    backward = register(f"{OP}_bwd_{index}", backward_fn, cpu_fn=cpu_backward, mesh=layout.mesh,
                        input_partition_specs=_specs(backward_fn, (q, kv, kv, ids, q, rows, q)),
                        output_partition_specs=(q, kv, kv))
    forward.register_fake(_forward_fake)
    backward.register_fake(_backward_fake)
    forward.register_autograd(_make_backward(backward), setup_context=_setup)
    _OPS[layout] = RingOps(layout, forward, backward, forward_fn, backward_fn)
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
