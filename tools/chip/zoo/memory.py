"""What each way of running a call holds in the chip's HBM at its peak, estimated from the shapes (no JAX), so that
`plan` skips with a reason what would not fit rather than letting it fail: the v5e's 15.75 GiB less room for what
the estimate leaves out (`BUDGET`). The factors are what the v5e's compiler assigned (the compile-only v5e on this
host, `memory_analysis()`'s temporaries, which the chip's own runs match: docs/benchmarks.md), in units of each way's
largest array:

- XLA's attention: float32 [heads, tokens, tokens] logits, `xla_attention_arrays` of them by formulation and pass
  (`jax.nn.dot_product_attention`, the benchmark's, where it takes the call; else `baselines.attention`, whose
  forward under a soft cap and without sinks XLA fuses whole).
- JAX's splash with its fused backward: dq kept per KV block, (tokens / block) x heads x tokens x head dim in bf16,
  the head dim padded to the lanes (128); its separate dq and dkv kernels hold a tenth of that or less.
- XLA's LM head: float32 [rows, vocabulary] logits, one for the labels path (two forward and backward under a soft
  cap), two for TRL's statistics and for distillation (both models' logits); over checkpointed chunks, two of a
  chunk's.
- The package's head and distillation: their operands and gradients and the eighth of HBM their schemes take.

Estimates matched the compile-only v5e's totals (arguments, outputs, temporaries) within 0.5 GiB at every shape
tried near the budget; a call past the chip fails at compile (a recorded error, no time on the chip), so `BUDGET` is
the chip's HBM less a margin for what the estimates leave out, and XLA's chunked head runs beside the whole one from
`CHUNKED_FROM`, so that one of them is sure to run.
"""

from __future__ import annotations

from .shapes import Attention, Call, Distill, Experts, Head

GiB = 2**30
HBM = 15.75 * GiB
BUDGET = 15 * GiB
CHUNKED_FROM = 11 * GiB
SHARE = HBM / 8  # the package's LM-head and distillation schemes take at most an eighth (`cost.HBM_SHARE`)
XLA_CHUNK = 2048  # rows of each checkpointed chunk of XLA's head or distillation where the whole does not fit
LANES = 128
BF16, F32 = 2, 4


def xla_attention_formulation(c: Attention) -> str:
    """"jax.nn" (`jax.nn.dot_product_attention`, the benchmark's) where it takes the call, else "written out" (with
    a soft cap, sinks, or a v head dim of its own: `baselines.attention`)."""
    return "jax.nn" if c.soft_cap is None and not c.sinks and c.head_dim == c.v_head_dim else "written out"


def xla_attention_arrays(c: Attention, pass_: str) -> float:
    """The float32 [heads, tokens, tokens] arrays XLA's attention holds at its peak, as the compile-only v5e assigned
    them (32/8 heads of 128 at 4,096 tokens, 8/4 of 256 at 8,192, 16/16 of 192 with v 128 at 4,096)."""
    if xla_attention_formulation(c) == "jax.nn":
        return 1.0 if pass_ == "fwd" else 1.55
    if pass_ == "fwd+bwd":
        return 1.5 if c.soft_cap else 1.8
    return 1.0 if c.sinks else 0.15 if c.soft_cap else 2.0


def _attention(c: Attention, impl: str, pass_: str) -> float:
    q = c.heads * c.tokens * c.head_dim * BF16
    kv = c.kv_heads * c.tokens * (c.head_dim + c.v_head_dim) * BF16
    o = c.heads * c.tokens * c.v_head_dim * BF16
    held = q + kv + o + 2 * c.heads * c.tokens * F32
    if pass_ == "fwd+bwd":
        held += q + kv + o  # the gradients and the output's cotangent
    if impl == "xla":
        held += xla_attention_arrays(c, pass_) * c.heads * c.tokens * c.tokens * F32
    if impl == "jax splash fused" and pass_ == "fwd+bwd":
        lanes = -(-c.head_dim // LANES) * LANES
        held += max(1, c.tokens // 512) * c.heads * c.tokens * lanes * BF16
    return held


def _experts(c: Experts, pass_: str) -> float:
    lhs, rhs, out = c.rows * c.hidden * BF16, c.experts * c.hidden * c.out * BF16, c.rows * c.out * BF16
    return (lhs + rhs + out) * (2 if pass_ == "fwd+bwd" else 1)


def _head(c: Head, impl: str, pass_: str) -> float:
    operands = (c.rows + c.vocab) * c.hidden * BF16 * (2 if pass_ == "fwd+bwd" else 1)
    if impl == "tokamax":
        return operands + SHARE
    if impl == "xla chunked":
        return operands + 2 * min(c.rows, XLA_CHUNK) * c.vocab * F32
    arrays = 2 if c.op == "lm_head_statistics" or (c.soft_cap and pass_ == "fwd+bwd") else 1
    return operands + arrays * c.rows * c.vocab * F32


def _distill(c: Distill, impl: str, pass_: str) -> float:
    operands = (c.rows + c.vocab) * (c.student_hidden + c.teacher_hidden) * BF16
    if pass_ == "fwd+bwd":
        operands += (c.rows + c.vocab) * c.student_hidden * BF16
    if impl == "tokamax":
        return operands + SHARE
    rows = min(c.rows, XLA_CHUNK) if impl == "xla chunked" else c.rows
    return operands + 2 * rows * c.vocab * F32


def need(c: Call, impl: str, pass_: str) -> float:
    """Bytes `impl` ("tokamax", "xla", "xla chunked", "jax splash fused", "jax splash") holds for `c`'s `pass_`."""
    if isinstance(c, Attention):
        return _attention(c, impl, pass_)
    if isinstance(c, Experts):
        return _experts(c, pass_)
    if isinstance(c, Head):
        return _head(c, impl, pass_)
    return _distill(c, impl, pass_)


def fits(c: Call, impl: str, pass_: str) -> bool:
    return need(c, impl, pass_) <= BUDGET
