"""The alternatives in plain JAX where the benchmark's own do not take a zoo model's options: XLA's attention with a
soft cap, sinks or a v head dim of its own (else `workloads.attention`'s `jax.nn.dot_product_attention`), and XLA's
LM head, TRL's statistics and distillation with the model's logit transform (Gemma 2's soft cap, Granite's scale),
whole or over checkpointed chunks of rows. Each is the same formulation as the benchmark's (float32 logits from a
bf16 matmul, the softmax in float32); with no transform the same computation as `workloads.lm_head`'s."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from ..workloads.lm_head import _logits


def transformed(logits: jax.Array, scale: float, cap: float | None) -> jax.Array:
    """TRL's order: the raw float32 logits times `scale`, then `cap * tanh(. / cap)`."""
    z = logits * scale if scale != 1.0 else logits
    return z if cap is None else cap * jnp.tanh(z / cap)


def attention(window: int | None, soft_cap: float | None) -> Callable[..., jax.Array]:
    """XLA's causal attention of q [B, H, S, D] (scaled), k [B, Hkv, S, D], v [B, Hkv, S, Dv] and optional sinks
    [H]: float32 [B, Hkv, H / Hkv, S, S] logits, capped, masked, softmaxed (each head's sink logit in the
    denominator). The softmax written out: the compile-only v5e holds it in 1.5 to 1.8 float32 [H, S, S] arrays
    forward and backward, as `jax.nn`'s 1.5 (`memory.XLA_ATTENTION`)."""
    def attend(q: jax.Array, k: jax.Array, v: jax.Array, sinks: jax.Array | None = None) -> jax.Array:
        b, h, s, d = q.shape
        kv = k.shape[1]
        grouped = q.reshape(b, kv, h // kv, s, d)
        logits = jnp.einsum("bkgqd,bksd->bkgqs", grouped, k, preferred_element_type=jnp.float32)
        if soft_cap is not None:
            logits = soft_cap * jnp.tanh(logits / soft_cap)
        pos = jnp.arange(s)
        keep = pos[None, :] <= pos[:, None]
        if window is not None:
            keep &= pos[None, :] > pos[:, None] - window
        logits = jnp.where(keep, logits, -jnp.inf)
        top = jnp.max(logits, axis=-1, keepdims=True)
        sink = None if sinks is None else sinks.astype(jnp.float32).reshape(1, kv, h // kv, 1, 1)
        top = top if sink is None else jnp.maximum(top, sink)
        e = jnp.exp(logits - top)
        total = e.sum(-1, keepdims=True) + (0.0 if sink is None else jnp.exp(sink - top))
        out = jnp.einsum("bkgqs,bksd->bkgqd", (e / total).astype(v.dtype), v, preferred_element_type=jnp.float32)
        return out.astype(v.dtype).reshape(b, h, s, v.shape[-1])
    return attend


def labels(scale: float, cap: float | None) -> Callable[..., jax.Array]:
    """The labels path's cross-entropy of x [rows, hidden] against w [vocab, hidden] at targets [rows], summed."""
    def loss(x: jax.Array, w: jax.Array, t: jax.Array) -> jax.Array:
        z = transformed(_logits(x, w), scale, cap)
        lse = jax.nn.logsumexp(z, axis=1)
        return jnp.sum(lse - jnp.take_along_axis(z, t[:, None], axis=1)[:, 0])
    return loss


def statistics(scale: float, cap: float | None) -> Callable[..., jax.Array]:
    """TRL's statistics as its loss uses them: the target log-probabilities and the entropy, summed."""
    def loss(x: jax.Array, w: jax.Array, t: jax.Array) -> jax.Array:
        log_p = jax.nn.log_softmax(transformed(_logits(x, w), scale, cap), axis=1)
        entropy = -(jnp.exp(log_p) * log_p).sum(1)
        return -jnp.take_along_axis(log_p, t[:, None], axis=1).sum() + entropy.sum()
    return loss


def divergence(beta: float, student: tuple[float, float | None], teacher: tuple[float, float | None]
               ) -> Callable[..., jax.Array]:
    """TRL's divergence per token [rows], float32: beta 0 the forward KL, 1 the reverse, between the JSD."""
    def per_token(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> jax.Array:
        log_ps = jax.nn.log_softmax(transformed(_logits(xs, ws), *student), axis=1)
        log_pt = jax.nn.log_softmax(transformed(_logits(xt, wt), *teacher), axis=1)
        if beta in (0.0, 1.0):
            first, second = (log_pt, log_ps) if beta == 0.0 else (log_ps, log_pt)
            return (jnp.exp(first) * (first - second)).sum(1)
        log_m = jnp.logaddexp(log_ps + jnp.log1p(-beta), log_pt + jnp.log(beta))
        return beta * (jnp.exp(log_pt) * (log_pt - log_m)).sum(1) + \
            (1 - beta) * (jnp.exp(log_ps) * (log_ps - log_m)).sum(1)
    return per_token


def chunked(loss: Callable[..., jax.Array], rows_args: tuple[int, ...], chunk: int) -> Callable[..., jax.Array]:
    """`loss` (a sum over rows) over chunks of `chunk` rows of the arguments in `rows_args`, each chunk under
    `jax.checkpoint` (its logits made again in the backward): what a JAX user writes where the whole does not fit."""
    def total(*args: jax.Array) -> jax.Array:
        rows = args[rows_args[0]].shape[0]
        if rows % chunk:
            raise ValueError(f"zoo baseline: {rows} rows are not a multiple of the chunk {chunk}")
        split = tuple(args[i].reshape(rows // chunk, chunk, *args[i].shape[1:]) for i in rows_args)

        def body(acc: jax.Array, parts: tuple) -> tuple[jax.Array, None]:
            def one(*parts: jax.Array) -> jax.Array:
                full = list(args)
                for i, p in zip(rows_args, parts, strict=True):
                    full[i] = p
                return loss(*full)
            return acc + jax.checkpoint(one)(*parts), None

        return jax.lax.scan(body, jnp.zeros((), jnp.float32), split)[0]
    return total
