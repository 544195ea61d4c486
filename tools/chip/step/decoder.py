"""A decoder in plain JAX, the same on both sides of the benchmark: only the ops it is handed (`Ops`) differ.

Pre-norm blocks (and post-norm ones where the model has them), RoPE, grouped-query attention over [batch, heads,
tokens, head_dim], SwiGLU or GeGLU, and a MoE layer as users write it around a grouped matmul: the router's top-k,
the routed rows sorted by expert, gate-and-up as one grouped matmul, down, and the rows scattered back weighted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .models import ROUTER_SKEW, Model, Step

Params = dict[str, Any]
EPS = 1e-6
ROPE_THETA = 500_000.0


class Ops(NamedTuple):
    """What a step's layers and loss call: attention(q [1, H, S, D] scaled, k, v [1, Hkv, S, D], window) -> like q;
    grouped(x [rows, k], w [experts, k, n], group_sizes int32 [experts]) -> [rows, n]; head(x [S, hidden],
    w [vocab, hidden], targets int32 [S], weights float32 [S]) -> the weighted sum of the tokens' cross-entropies."""

    attention: Callable[[jax.Array, jax.Array, jax.Array, int | None], jax.Array]
    grouped: Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
    head: Callable[[jax.Array, jax.Array, jax.Array, jax.Array], jax.Array]


def init(step: Step, seed: int = 0, dtype: Any = jnp.bfloat16) -> Params:
    """The step's weights (`dtype`; norms' gains float32, zero: Gemma's 1 + g and the others' alike)."""
    m = step.model
    keys = iter(jax.random.split(jax.random.key(seed), 16 * step.layers + 2))

    def _normal(key: jax.Array, shape: tuple[int, ...], fan_in: int) -> jax.Array:
        return (jax.random.normal(key, shape, jnp.float32) * fan_in ** -0.5).astype(dtype)

    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
    layers = []
    for _ in range(step.layers):
        p = {"wq": _normal(next(keys), (m.hidden, q), m.hidden), "wk": _normal(next(keys), (m.hidden, kv), m.hidden),
             "wv": _normal(next(keys), (m.hidden, kv), m.hidden), "wo": _normal(next(keys), (q, m.hidden), q),
             "norms": jnp.zeros((4 if m.sandwich else 2, m.hidden), jnp.float32)}
        if m.qk_norm:
            p["qk_norms"] = jnp.zeros((2, m.head_dim), jnp.float32)
        if m.experts:
            p["router"] = _normal(next(keys), (m.hidden, m.experts), m.hidden)
            p["gate_up"] = _normal(next(keys), (m.experts, m.hidden, 2 * m.expert_intermediate), m.hidden)
            p["down"] = _normal(next(keys), (m.experts, m.expert_intermediate, m.hidden), m.expert_intermediate)
        else:
            p["gate_up"] = _normal(next(keys), (m.hidden, 2 * m.intermediate), m.hidden)
            p["down"] = _normal(next(keys), (m.intermediate, m.hidden), m.intermediate)
        layers.append(p)
    return {"layers": layers, "final_norm": jnp.zeros((m.hidden,), jnp.float32),
            "head": _normal(next(keys), (m.vocab, m.hidden), m.hidden)}


def router_bias(m: Model, seed: int = 7) -> jax.Array:
    """The router's fixed per-expert skew (`models.ROUTER_SKEW`): a constant of the step, not a weight."""
    return jnp.asarray(np.random.default_rng(seed).normal(0.0, ROUTER_SKEW, m.experts), jnp.float32)


def inputs(step: Step, seed: int = 1, dtype: Any = jnp.bfloat16) -> tuple[jax.Array, jax.Array]:
    """The first layer's input (the embeddings of the tokens) and the next-token targets."""
    m = step.model
    x = jax.random.normal(jax.random.key(seed), (step.tokens, m.hidden), jnp.float32).astype(dtype)
    targets = jax.random.randint(jax.random.key(seed + 1), (step.tokens,), 0, m.vocab, jnp.int32)
    return x, targets


def rms_norm(x: jax.Array, gain: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + EPS)
    return (y * (1.0 + gain)).astype(x.dtype)


def rope(x: jax.Array) -> jax.Array:
    """Rotary embedding over [tokens, heads, head_dim] (the halves rotated, as Llama's)."""
    tokens, _, dim = x.shape
    freq = ROPE_THETA ** (-jnp.arange(0, dim // 2, dtype=jnp.float32) * 2 / dim)
    angle = jnp.arange(tokens, dtype=jnp.float32)[:, None] * freq[None, :]
    cos, sin = jnp.cos(angle)[:, None, :], jnp.sin(angle)[:, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def attention(p: Params, x: jax.Array, m: Model, window: int | None, ops: Ops) -> jax.Array:
    tokens = x.shape[0]
    q = (x @ p["wq"]).reshape(tokens, m.heads, m.head_dim)
    k = (x @ p["wk"]).reshape(tokens, m.kv_heads, m.head_dim)
    v = (x @ p["wv"]).reshape(tokens, m.kv_heads, m.head_dim)
    if m.qk_norm:
        q, k = rms_norm(q, p["qk_norms"][0]), rms_norm(k, p["qk_norms"][1])
    q, k = rope(q), rope(k)
    q = (q.astype(jnp.float32) * m.head_dim ** -0.5).astype(q.dtype)

    def heads_first(a: jax.Array) -> jax.Array:
        return jnp.transpose(a, (1, 0, 2))[None]

    out = ops.attention(heads_first(q), heads_first(k), heads_first(v), window)
    return jnp.transpose(out[0], (1, 0, 2)).reshape(tokens, m.heads * m.head_dim) @ p["wo"]


def _glu(gate_up: jax.Array, gelu: bool) -> jax.Array:
    gate, up = jnp.split(gate_up, 2, axis=-1)
    act = jax.nn.gelu(gate, approximate=True) if gelu else jax.nn.silu(gate)
    return act * up


def mlp(p: Params, x: jax.Array, m: Model) -> jax.Array:
    return _glu(x @ p["gate_up"], m.gelu) @ p["down"]


def moe(p: Params, x: jax.Array, m: Model, ops: Ops) -> jax.Array:
    """The router's top-k (probabilities renormalized over the k, Qwen3's), the routed rows sorted by expert, the
    experts as grouped matmuls, the rows weighted and added back to their tokens."""
    logits = (x @ p["router"]).astype(jnp.float32) + router_bias(m)
    weights, experts = jax.lax.top_k(jax.nn.softmax(logits, axis=-1), m.top_k)
    weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    flat = experts.reshape(-1)
    order = jnp.argsort(flat, stable=True)
    token = order // m.top_k
    sizes = jnp.bincount(flat, length=m.experts).astype(jnp.int32)
    h = _glu(ops.grouped(x[token], p["gate_up"], sizes), m.gelu)
    y = ops.grouped(h, p["down"], sizes)
    y = (y.astype(jnp.float32) * weights.reshape(-1)[order][:, None]).astype(x.dtype)
    return jnp.zeros_like(x).at[token].add(y)


def layer(p: Params, x: jax.Array, m: Model, window: int | None, ops: Ops) -> jax.Array:
    norms = p["norms"]
    a = attention(p, rms_norm(x, norms[0]), m, window, ops)
    x = x + (rms_norm(a, norms[2]) if m.sandwich else a)
    f = moe(p, rms_norm(x, norms[1]), m, ops) if m.experts else mlp(p, rms_norm(x, norms[1]), m)
    return x + (rms_norm(f, norms[3]) if m.sandwich else f)


def loss(params: Params, x: jax.Array, targets: jax.Array, step: Step, ops: Ops) -> jax.Array:
    """The mean next-token cross-entropy of the step's layers and head."""
    m = step.model
    for i, p in enumerate(params["layers"]):
        def block(p: Params, x: jax.Array, window: int | None = step.window_of(i)) -> jax.Array:
            return layer(p, x, m, window, ops)
        x = (jax.checkpoint(block) if step.remat else block)(p, x)
    x = rms_norm(x, params["final_norm"])
    weights = jnp.full(targets.shape, 1.0 / targets.shape[0], jnp.float32)
    return ops.head(x, params["head"], targets, weights)


def train_step(step: Step, ops: Ops) -> Callable[[Params, jax.Array, jax.Array], tuple[jax.Array, Params]]:
    """(params, x, targets) -> (loss, d loss / d params): forward and backward over every weight."""
    def run(params: Params, x: jax.Array, targets: jax.Array) -> tuple[jax.Array, Params]:
        return jax.value_and_grad(loss)(params, x, targets, step, ops)
    return run
