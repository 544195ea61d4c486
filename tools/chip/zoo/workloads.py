"""The zoo's workloads (`python3 -m tools.chip bench --only zoo`): each planned (call, pass, way) that runs, as the
benchmark's `Workload` (inputs made only when it runs), the package's public call beside the alternatives
(`plan`'s docstring), at the part of the plan the environment names (`select`). The calls are the benchmark's own:
`splash.attend`, `ops.ragged_dot`, `lm_head.row_stats` (the labels path's forward) and `lm_head.loss.loss` (its
forward and backward), `lm_head.statistics`, `distill.divergence` and `distill.loss`, each with the model's mask,
window, soft caps, sinks and logit scale."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

from ..workloads import Workload, group_sizes, normal, summed, with_grads
from ..workloads.attention import _xla, jax_splash
from ..workloads.lm_head import _head_args, distill_args
from . import baselines, memory, plan, select
from .shapes import Attention, Distill, Experts, Head


def _attention(tk: ModuleType, c: Attention, way: str) -> tuple[Callable[..., Any], Callable[[], tuple]]:
    def make() -> tuple:
        args = (normal(1, (1, c.heads, c.tokens, c.head_dim), scale=c.q_scale),
                normal(2, (1, c.kv_heads, c.tokens, c.head_dim)), normal(3, (1, c.kv_heads, c.tokens, c.v_head_dim)))
        return (*args, normal(4, (c.heads,), jnp.float32)) if c.sinks else args

    if way == "tokamax":
        spec = tk.splash.MaskSpec.of(True, None if c.window is None else (c.window - 1, 0))

        def fn(q: jax.Array, k: jax.Array, v: jax.Array, sinks: jax.Array | None = None) -> jax.Array:
            return tk.splash.attend(q, k, v, None, None, sinks, spec=spec, soft_cap=c.soft_cap)[0]
    elif way.startswith("jax splash"):
        fn = jax_splash(min(512, c.tokens), c.window, soft_cap=c.soft_cap, fused_backward=way.endswith("fused"))
    elif memory.xla_attention_formulation(c) == "jax.nn":
        fn = _xla(c.window)  # the benchmark's: jax.nn.dot_product_attention
    else:
        fn = baselines.attention(c.window, c.soft_cap)
    return fn, make


def _experts(tk: ModuleType, c: Experts, way: str) -> tuple[Callable[..., Any], Callable[[], tuple]]:
    def make() -> tuple:
        return (normal(1, (c.rows, c.hidden)), normal(2, (c.experts, c.hidden, c.out), scale=c.hidden ** -0.5),
                group_sizes(c.rows, c.experts, skew=c.skew))
    return (tk.ops.ragged_dot if way == "tokamax" else jax.lax.ragged_dot), make


def _head(tk: ModuleType, c: Head, way: str, pass_: str) -> tuple[Callable[..., Any], Callable[[], tuple]]:
    def make() -> tuple:
        return _head_args(c.rows, c.hidden, c.vocab)

    lm_head = tk.lm_head
    transform = lm_head.LogitTransform.of(scale=c.scale, soft_cap=c.soft_cap)
    if way != "tokamax":
        loss = (baselines.labels if c.op == "lm_head_loss" else baselines.statistics)(c.scale, c.soft_cap)
        return (baselines.chunked(loss, (0, 2), memory.XLA_CHUNK) if way == "xla chunked" else loss), make
    if c.op == "lm_head_statistics":
        def fn(x: jax.Array, w: jax.Array, t: jax.Array) -> jax.Array:
            s = lm_head.statistics(x, w, None, t, transform)
            return -(s.target_logit - s.lse).sum() + s.entropy.sum()
    elif pass_ == "fwd":
        def fn(x: jax.Array, w: jax.Array, t: jax.Array) -> jax.Array:
            s = lm_head.row_stats(x, w, None, t, transform)
            return jnp.sum(s.lse - s.target_logit)
    else:
        def fn(x: jax.Array, w: jax.Array, t: jax.Array) -> jax.Array:
            return lm_head.loss.loss(x, w, t, jnp.ones(t.shape, jnp.float32), transform=transform)
    return fn, make


def _distill(tk: ModuleType, c: Distill, way: str) -> tuple[Callable[..., Any], Callable[[], tuple]]:
    def make() -> tuple:
        return distill_args(c)

    caps = {"student_scale": c.student_scale, "student_soft_cap": c.student_cap, "teacher_scale": c.teacher_scale,
            "teacher_soft_cap": c.teacher_cap}
    if way == "tokamax" and c.op == "distillation":
        def fn(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> jax.Array:
            return tk.distill.divergence(xs, ws, None, xt, wt, None, beta=c.beta, **caps)[0].sum()
    elif way == "tokamax":
        def fn(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> jax.Array:
            weights = jnp.ones((xs.shape[0],), jnp.float32)
            return tk.distill.loss(xs, ws, None, xt, wt, None, weights, beta=c.beta, **caps)[0]
    else:
        per_token = baselines.divergence(c.beta, (c.student_scale, c.student_cap), (c.teacher_scale, c.teacher_cap))

        def total(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> jax.Array:
            return per_token(xs, ws, xt, wt).sum()
        fn = baselines.chunked(total, (0, 2), memory.XLA_CHUNK) if way == "xla chunked" else total
    return fn, make


def workload(tk: ModuleType, e: plan.Entry) -> Workload:
    """`e` as the benchmark's workload: its pass's function (the forward, or the value and gradients in the inputs
    the model trains: q, k, v; the tokens and the experts' weights; the hidden states and the head; the student's)."""
    c = e.call
    if isinstance(c, Attention):
        fn, make = _attention(tk, c, e.way)
        argnums = (0, 1, 2)
    elif isinstance(c, Experts):
        fn, make = _experts(tk, c, e.way)
        argnums = (0, 1)
    elif isinstance(c, Head):
        fn, make = _head(tk, c, e.way, e.pass_)
        argnums = (0, 1)
    else:
        fn, make = _distill(tk, c, e.way)
        argnums = (0, 1)
    if e.pass_ == "fwd+bwd":
        fn = with_grads(summed(fn), argnums)
    return Workload(e.op, e.case, e.impl, e.pass_, lambda f=fn, m=make: (f, m()), e.flops)


def chosen(selection: select.Selection | None = None) -> list[plan.Entry]:
    """The plan's entries `selection` (default: the environment's) names, skipped ones included."""
    return select.chosen(plan.entries(), select.from_env() if selection is None else selection)


def workloads(tk: ModuleType, selection: select.Selection | None = None) -> Iterator[Workload]:
    for e in chosen(selection):
        if not e.skipped:
            yield workload(tk, e)


def header(selection: select.Selection | None = None, case: str = "") -> dict[str, Any]:
    """What a run's results file records of the zoo: the selection (and the bench's `--case` text), each entry of
    it skipped, with the reason, and JAX's persistent compilation cache (`compilation_cache`)."""
    selection = select.from_env() if selection is None else selection
    skipped = [{"op": e.op, "case": e.case, "pass": e.pass_, "impl": e.impl, "models": list(e.models),
                "skipped": e.skipped} for e in chosen(selection) if e.skipped and case in e.case]
    return {"selection": {**selection.describe(), "case": case}, "skipped": skipped,
            "compilation_cache": compilation_cache()}


def compilation_cache(directory: str | None = None) -> dict[str, Any] | None:
    """JAX's persistent compilation cache as the run starts: its directory and how many entries it holds (None: no
    cache). A shard run twice with `JAX_COMPILATION_CACHE_DIR` set gives first calls cold, then from the cache: what
    the cache saves a user, which only the chip can show (a CPU host compiling for a topology writes entries it
    cannot read back). `directory`: the configured one where not given."""
    directory = directory or jax.config.jax_compilation_cache_dir
    if not directory:
        return None
    path = Path(directory)
    entries = sum(1 for f in path.iterdir() if f.name.endswith("-cache")) if path.is_dir() else 0
    return {"dir": str(directory), "entries_at_start": entries,
            "min_compile_time_s": jax.config.jax_persistent_cache_min_compile_time_secs}
