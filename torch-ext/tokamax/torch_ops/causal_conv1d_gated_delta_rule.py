"""Causal conv1d + gated delta rule (Qwen3-Next style linear attention) on Torch tensors:
`causal_conv1d_gated_delta_rule` through upstream's Op (`ops.tpu.CausalConv1dGatedDeltaRule`,
upstream's config choice per chip and shape), forward only, as upstream's Torch op.

TPU only (upstream runs it on v6e and newer): JAX's Pallas TPU interpreter cannot run the kernel,
so CPU tensors get a clear refusal; meta / fake tensors trace through a fake kernel.
"""

from __future__ import annotations

import jax
import torch

from .. import ops
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["causal_conv1d_gated_delta_rule", "causal_conv1d_gated_delta_rule_op"]

_OP = "causal_conv1d_gated_delta_rule"
_NO_CPU = ("the kernel reads its VMEM qkv and state buffers through flattening `ref.reshape(-1, lanes)` views, "
           "and the interpreter's loads resolve only integer/slice indexers: AttributeError: 'ReshapeTransform' "
           "object has no attribute 'indices'")


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing(upstream="CausalConv1dGatedDeltaRule", op=_OP)
def _gdn_jax(qkv: jax.Array, b: jax.Array, a: jax.Array, conv_state: jax.Array, recurrent_state: jax.Array,
             conv_weight: jax.Array, conv_bias: jax.Array | None, a_log: jax.Array, dt_bias: jax.Array,
             query_start_loc: jax.Array, state_indices: jax.Array, distribution: jax.Array, seq_lens: jax.Array,
             read_state_indices: jax.Array | None, read_offsets: jax.Array | None, n_kq: int, n_v: int, d_k: int,
             d_v: int, kernel_size: int, num_spec_tokens: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    # Upstream has no public function for this op: its Op object is the public call (config choice included).
    (new_conv_state, new_recurrent_state), out = ops.tpu.CausalConv1dGatedDeltaRule()(
        qkv, b, a, conv_state, recurrent_state, conv_weight, conv_bias, a_log, dt_bias, query_start_loc,
        state_indices, distribution, seq_lens, read_state_indices, read_offsets, n_kq=n_kq, n_v=n_v, d_k=d_k,
        d_v=d_v, kernel_size=kernel_size, num_spec_tokens=num_spec_tokens)
    return new_conv_state, new_recurrent_state, out


causal_conv1d_gated_delta_rule_op = register(_OP, _gdn_jax, no_cpu=_NO_CPU)


# ---- Fake kernel that takes symbolic sizes ------------------------------------------------------
@causal_conv1d_gated_delta_rule_op.register_fake
def _gdn_fake(qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor, conv_state: torch.Tensor,
              recurrent_state: torch.Tensor, conv_weight: torch.Tensor, conv_bias: torch.Tensor | None,
              a_log: torch.Tensor, dt_bias: torch.Tensor, query_start_loc: torch.Tensor, state_indices: torch.Tensor,
              distribution: torch.Tensor, seq_lens: torch.Tensor, read_state_indices: torch.Tensor | None,
              read_offsets: torch.Tensor | None, n_kq: int, n_v: int, d_k: int, d_v: int, kernel_size: int,
              num_spec_tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(conv_state), torch.empty_like(recurrent_state), qkv.new_empty((qkv.shape[0], n_v * d_v))


# ---- What users call ---------------------------------------------------------------------------
def _index(name: str, t: torch.Tensor, length: int | None, layout: str) -> None:
    """An int32 vector of `length` entries (None: any)."""
    _checks.dtype(_OP, name, t, (torch.int32,))
    _checks.shape(_OP, name, t, (length,), layout)


def _check(qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor, conv_state: torch.Tensor,
           recurrent_state: torch.Tensor, conv_weight: torch.Tensor, conv_bias: torch.Tensor | None,
           a_log: torch.Tensor, dt_bias: torch.Tensor, query_start_loc: torch.Tensor, state_indices: torch.Tensor,
           distribution: torch.Tensor, seq_lens: torch.Tensor, read_state_indices: torch.Tensor | None,
           read_offsets: torch.Tensor | None, n_kq: int, n_v: int, d_k: int, d_v: int, kernel_size: int,
           num_spec_tokens: int) -> None:
    op = _OP
    _checks.tensors(op, qkv=qkv, b=b, a=a, conv_state=conv_state, recurrent_state=recurrent_state,
                    conv_weight=conv_weight, conv_bias=conv_bias, a_log=a_log, dt_bias=dt_bias,
                    query_start_loc=query_start_loc, state_indices=state_indices, distribution=distribution,
                    seq_lens=seq_lens, read_state_indices=read_state_indices, read_offsets=read_offsets,
                    optional=("conv_bias", "read_state_indices", "read_offsets"))
    for name, value in (("n_kq", n_kq), ("n_v", n_v), ("d_k", d_k), ("d_v", d_v), ("kernel_size", kernel_size)):
        _checks.positive(op, name, value)
    if num_spec_tokens < 0:
        raise ValueError(f"tokamax {op}: num_spec_tokens must be >= 0, got {num_spec_tokens}")
    _checks.floats(op, qkv=qkv, b=b, a=a)  # upstream's kernel takes them in one dtype
    _checks.floats(op, conv_state=conv_state)
    _checks.floats(op, recurrent_state=recurrent_state)
    _checks.floats(op, conv_weight=conv_weight, **({} if conv_bias is None else {"conv_bias": conv_bias}))
    _checks.floats(op, a_log=a_log, dt_bias=dt_bias)
    dim = 2 * n_kq * d_k + n_v * d_v
    _checks.rank(op, "qkv", qkv, (2,), "[tokens, 2 * n_kq * d_k + n_v * d_v]")
    _checks.shape(op, "qkv", qkv, (None, dim), "[tokens, 2 * n_kq * d_k + n_v * d_v]")
    tokens = qkv.shape[0]
    _checks.shape(op, "b", b, (tokens, n_v), "[tokens, n_v]")
    _checks.shape(op, "a", a, (tokens, n_v), "[tokens, n_v]")
    _checks.rank(op, "conv_state", conv_state, (3,), "[slots, kernel_size - 1, dim]")
    slots = conv_state.shape[0]
    _checks.shape(op, "conv_state", conv_state, (slots, kernel_size - 1, dim), "[slots, kernel_size - 1, dim]")
    _checks.shape(op, "recurrent_state", recurrent_state, (slots, n_v, d_k, d_v), "[slots, n_v, d_k, d_v]")
    _checks.shape(op, "conv_weight", conv_weight, (dim, 1, kernel_size), "[dim, 1, kernel_size]")
    if conv_bias is not None:
        _checks.shape(op, "conv_bias", conv_bias, (dim,), "[dim]")
    _checks.shape(op, "a_log", a_log, (n_v,), "[n_v]")
    _checks.shape(op, "dt_bias", dt_bias, (n_v,), "[n_v]")
    _index("state_indices", state_indices, None, "[seqs]")
    seqs = state_indices.shape[0]
    _index("query_start_loc", query_start_loc, seqs + 1, "[seqs + 1]")
    _index("distribution", distribution, 3, "[3] (decode end, prefill end, mixed end)")
    _index("seq_lens", seq_lens, seqs, "[seqs]")
    if read_state_indices is not None:
        _index("read_state_indices", read_state_indices, seqs, "[seqs]")
    if read_offsets is not None:
        _index("read_offsets", read_offsets, seqs, "[seqs]")
    elif num_spec_tokens > 0:
        raise ValueError(f"tokamax {op}: read_offsets is required when num_spec_tokens > 0")


def causal_conv1d_gated_delta_rule(
        qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor, conv_state: torch.Tensor, recurrent_state: torch.Tensor,
        conv_weight: torch.Tensor, conv_bias: torch.Tensor | None, a_log: torch.Tensor, dt_bias: torch.Tensor,
        query_start_loc: torch.Tensor, state_indices: torch.Tensor, distribution: torch.Tensor,
        seq_lens: torch.Tensor, read_state_indices: torch.Tensor | None = None,
        read_offsets: torch.Tensor | None = None, *, n_kq: int, n_v: int, d_k: int, d_v: int, kernel_size: int,
        num_spec_tokens: int = 0) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Ragged causal conv1d, then the gated delta rule, over a batch of decode / prefill / mixed
    sequences (upstream's Op, forward only): returns `((new_conv_state, new_recurrent_state), out)`.

    qkv [tokens, dim] with dim = 2 * n_kq * d_k + n_v * d_v; b, a [tokens, n_v] in qkv's dtype (bf16
    or f32); conv_state [slots, kernel_size - 1, dim]; recurrent_state [slots, n_v, d_k, d_v] (slot 0
    is the null slot for padding); conv_weight [dim, 1, kernel_size]; conv_bias [dim] or None; a_log,
    dt_bias [n_v]. int32: query_start_loc [seqs + 1], state_indices [seqs], distribution [3]
    (cumulative sequence counts: decode end, prefill end, mixed end), seq_lens [seqs] (cached plus
    new tokens), read_state_indices and read_offsets [seqs] (optional; read_offsets is required with
    `num_spec_tokens` > 0). out is [tokens, n_v * d_v] in qkv's dtype; the states keep their shapes
    and dtypes.

    Upstream's kernel writes the states through input/output aliases (in place under JAX buffer
    donation); this op donates nothing: it returns NEW state tensors and leaves `conv_state` and
    `recurrent_state` unchanged, so assign the returned states back. TPU only (v6e and newer); CPU
    tensors are refused, meta tensors trace.
    """
    _check(qkv, b, a, conv_state, recurrent_state, conv_weight, conv_bias, a_log, dt_bias, query_start_loc,
           state_indices, distribution, seq_lens, read_state_indices, read_offsets, n_kq, n_v, d_k, d_v,
           kernel_size, num_spec_tokens)

    def c(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.contiguous()

    new_conv_state, new_recurrent_state, out = causal_conv1d_gated_delta_rule_op(
        c(qkv), c(b), c(a), c(conv_state), c(recurrent_state), c(conv_weight), c(conv_bias), c(a_log), c(dt_bias),
        c(query_start_loc), c(state_indices), c(distribution), c(seq_lens), c(read_state_indices), c(read_offsets),
        n_kq, n_v, d_k, d_v, kernel_size, num_spec_tokens)
    return (new_conv_state, new_recurrent_state), out
