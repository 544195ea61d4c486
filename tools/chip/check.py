"""The chip tier's checks: every kernel family compiled and run on the chip against an independent
reference computed on the host's CPU (float32, or float64 for our own kernels).

- The JAX tier's cases (tests/jax/cases: every upstream kernel entry point at the shapes the interpret-mode
  tests use), against their references, within each case's tolerance; where that tolerance was set for
  the interpreter's exact float32 and the chip's float32 matmul passes differ, the relative error is
  reported beside it.
- Our kernels and the public ops at model-sized shapes: the grouped matmul through `ops.ragged_dot`
  (forward and both gradients, the package's tiles; and capacity-padded, its rows past the groups zero), splash
  through `tokamax.splash` (GQA, causal, forward and gradients), the LM head (statistics; the loss and its
  gradients under both schemes) and distillation's JSD, against float32/float64 references on the CPU: relative
  error within `RELATIVE`.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

RELATIVE = 1e-2
"""Relative (Frobenius) error allowed at model shapes: bf16 inputs taken exactly by the reference, float32
accumulation, a bf16 output rounded to 2^-9 of each element (~2e-3 over a tensor), 5x that."""


@dataclasses.dataclass
class Outcome:
    name: str
    status: str  # "passed", "failed", "skipped"
    detail: str = ""
    seconds: float = 0.0


def _cpu() -> Any:
    return jax.devices("cpu")[0]


def _on_cpu(fn: Callable[..., Any], *args: Any) -> Any:
    with jax.default_device(_cpu()):
        return jax.device_get(fn(*(jax.device_put(np.asarray(a), _cpu()) if hasattr(a, "shape") else a
                                   for a in args)))


def relative_error(got: Any, want: Any) -> float:
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-30))


NEEDS_JAX_FLOOR = {"gmm_v2": "TENSORCORE_MESH", "linear_softmax_cross_entropy_loss": "TENSORCORE_MESH",
                   "topk": "MOSAIC_OPT_LEVEL", "lightning_indexer": "MOSAIC_OPT_LEVEL"}
"""Kernel families whose upstream kernels need what JAX added in 0.11.1 (`tokamax.ops._jax_floor`)."""


def _needs_newer_jax(tk: ModuleType, family: str) -> str | None:
    if family not in NEEDS_JAX_FLOOR:
        return None
    floor = tk.ops._jax_floor  # noqa: SLF001 - the package's own check
    return floor.lacks(*getattr(floor, NEEDS_JAX_FLOOR[family]))


def _jax_tier_cases(tk: ModuleType, only: set[str] | None = None) -> Iterator[Outcome]:
    from tests.jax.cases import all_cases, resolver

    get = resolver(f"{tk.__name__}._ported")
    first = ("ragged_dot", "splash_attention", "ring_attention", "batched_rpa")  # what v5e users run most
    cases = [c for c in all_cases() if only is None or c.id.split("/")[0] in only]
    for case in sorted(cases, key=lambda c: c.id.split("/")[0] not in first):
        start = time.perf_counter()
        if case.mesh[1] > 1:
            yield Outcome(case.id, "skipped", f"needs {case.mesh[1]} devices (this host has one chip)")
            continue
        if "v5e" not in case.chips:
            yield Outcome(case.id, "skipped", f"upstream's kernel is for {', '.join(case.chips)}, not v5e")
            continue
        if (why := _needs_newer_jax(tk, case.id.split("/")[0])) is not None:
            yield Outcome(case.id, "skipped", why)
            continue
        if case.reference is None and case.compare is None:
            yield Outcome(case.id, "skipped", "the case has no reference (its check is lowering and identity)")
            continue
        try:
            inputs = case.inputs()
            out = jax.device_get(jax.jit(case.call(get))(*inputs))
            expected = _on_cpu(case.reference(get), *inputs) if case.reference else None
            if case.compare:
                case.compare(out, expected)
                detail = "its own comparison"
            else:
                rtol, atol = case.chip_tolerance or case.tolerance
                errors = []
                for o, e in zip(jax.tree.leaves(out), jax.tree.leaves(expected), strict=True):
                    errors.append(relative_error(o, e))
                    np.testing.assert_allclose(np.asarray(o, np.float32), np.asarray(e, np.float32),
                                               rtol=rtol, atol=atol)
                detail = f"rtol {rtol}, atol {atol}; relative error {max(errors):.2e}"
            yield Outcome(case.id, "passed", detail, time.perf_counter() - start)
        except Exception as e:  # noqa: BLE001 - each case's outcome is recorded
            text = "".join(traceback.format_exception_only(e)).strip().splitlines()
            status = "skipped" if any(s in text[0] for s in ("TensorCoreMesh", "OptLevel")) else "failed"
            detail = ("needs jax >= 0.11.1: " if status == "skipped" else "") + " | ".join(text[:6])[:900]
            yield Outcome(case.id, status, detail, time.perf_counter() - start)


def _within(name: str, pairs: dict[str, tuple[Any, Any]], start: float, bound: float = RELATIVE) -> Outcome:
    errors = {k: relative_error(g, w) for k, (g, w) in pairs.items()}
    worst = max(errors, key=errors.get)
    status = "passed" if all(np.isfinite(list(errors.values()))) and errors[worst] <= bound else "failed"
    detail = ", ".join(f"{k} {v:.1e}" for k, v in errors.items()) + f" (bound {bound:g})"
    return Outcome(name, status, detail, time.perf_counter() - start)


def _guarded(name: str, fn: Callable[[], Outcome]) -> Outcome:
    start = time.perf_counter()
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        text = " | ".join("".join(traceback.format_exception_only(e)).strip().splitlines()[:6])
        return Outcome(name, "failed", text[:900], time.perf_counter() - start)


def capacity_padded_sizes(rows: int, experts: int, used: float = 0.9) -> list[int]:
    """Group sizes of a capacity-padded MoE step: `used` of the rows routed, one expert empty in the middle and the
    last one empty, the end off any row tile (an odd count)."""
    routed = int(rows * used) | 1
    sizes = [0] * experts
    takers = [e for e in range(experts - 1) if e != experts // 2]
    for i, e in enumerate(takers):
        sizes[e] = routed // len(takers) + (i < routed % len(takers))
    return sizes


def padded_rows(tk: ModuleType, rows: int, hidden: int, out: int, sizes: list[int]) -> Outcome:
    """`ops.ragged_dot` where the groups leave rows (capacity padding): the rows past them exactly zero in the
    forward and dlhs, empty experts' drhs exactly zero (the cotangent is nonzero on every row), and the rest within
    `RELATIVE` of a float32 reference on the CPU."""
    from .workloads import normal

    start = time.perf_counter()
    experts, end = len(sizes), sum(sizes)
    lhs, rhs = normal(1, (rows, hidden)), normal(2, (experts, hidden, out), scale=hidden ** -0.5)
    gs, ct = jnp.asarray(sizes, jnp.int32), normal(3, (rows, out))

    def both(f):  # noqa: ANN001, ANN202
        def run(a, b, g, c):  # noqa: ANN001, ANN202
            y, vjp = jax.vjp(lambda a, b: f(a, b, g), a, b)
            return y, *vjp(c.astype(y.dtype))
        return run

    got = jax.device_get(jax.jit(both(tk.ops.ragged_dot))(lhs, rhs, gs, ct))

    def f32(a, b, g):  # noqa: ANN001, ANN202
        return jax.lax.ragged_dot(a.astype(jnp.float32), b.astype(jnp.float32), g, precision=jax.lax.Precision.HIGHEST)

    want = _on_cpu(both(f32), lhs, rhs, gs, ct)
    name = f"ragged_dot capacity-padded at {rows} x {hidden} -> {out}, {experts} experts, {rows - end} rows padded"
    empty = [e for e, size in enumerate(sizes) if size == 0]
    nonzero = {"out past the groups": np.asarray(got[0][end:]), "dlhs past the groups": np.asarray(got[1][end:]),
               "drhs of empty experts": np.asarray(got[2][np.asarray(empty, np.int32)])}
    if bad := [f"{k}: {np.count_nonzero(v)} nonzero, {int(np.isnan(v).sum())} NaN" for k, v in nonzero.items()
               if np.count_nonzero(v)]:
        return Outcome(name, "failed", "; ".join(bad), time.perf_counter() - start)
    return _within(name, {"out": (got[0], want[0]), "dlhs": (got[1], want[1]), "drhs": (got[2], want[2])}, start)


def _model_shapes(tk: ModuleType, case: str = "") -> Iterator[Outcome]:
    from .workloads import group_sizes, normal

    def ragged(rows: int, hidden: int, out: int, experts: int) -> Callable[[], Outcome]:
        def check() -> Outcome:
            start = time.perf_counter()
            lhs, rhs = normal(1, (rows, hidden)), normal(2, (experts, hidden, out), scale=hidden ** -0.5)
            gs, ct = group_sizes(rows, experts), normal(3, (rows, out))

            def loss(f):  # noqa: ANN001, ANN202
                return lambda a, b, g, c: (f(a, b, g).astype(jnp.float32) * c.astype(jnp.float32)).sum()

            got = jax.jit(lambda *a: (tk.ops.ragged_dot(*a[:3]), jax.grad(loss(tk.ops.ragged_dot), (0, 1))(*a)))(
                lhs, rhs, gs, ct)
            def f32(a, b, g):  # noqa: ANN001, ANN202
                return jax.lax.ragged_dot(a.astype(jnp.float32), b.astype(jnp.float32), g,
                                          precision=jax.lax.Precision.HIGHEST)
            want = _on_cpu(lambda *a: (f32(*a[:3]), jax.grad(loss(f32), (0, 1))(*a)), lhs, rhs, gs, ct)
            return _within(f"ragged_dot at {rows} x {hidden} -> {out}, {experts} experts", {
                "out": (got[0], want[0]), "dlhs": (got[1][0], want[1][0]), "drhs": (got[1][1], want[1][1])}, start)
        return check

    def splash(heads: int, kv_heads: int, length: int, dim: int) -> Callable[[], Outcome]:
        def check() -> Outcome:
            start = time.perf_counter()
            q = normal(1, (1, heads, length, dim), scale=dim ** -0.5)
            k, v, ct = normal(2, (1, kv_heads, length, dim)), normal(3, (1, kv_heads, length, dim)), \
                normal(4, (1, heads, length, dim))
            spec = tk.splash.MaskSpec("causal")

            def ours(q, k, v):  # noqa: ANN001, ANN202
                return tk.splash.attend(q, k, v, None, None, None, spec=spec)[0]

            def reference(q, k, v):  # noqa: ANN001, ANN202
                q, k, v = (a.astype(jnp.float32) for a in (q, k, v))
                k, v = (jnp.repeat(a, heads // kv_heads, axis=1) for a in (k, v))
                s = jnp.einsum("bhqd,bhkd->bhqk", q, k, precision=jax.lax.Precision.HIGHEST)
                s = jnp.where(jnp.tril(jnp.ones((length, length), bool)), s, -jnp.inf)
                return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1), v, precision=jax.lax.Precision.HIGHEST)

            def both(f):  # noqa: ANN001, ANN202
                return lambda q, k, v, c: (f(q, k, v), jax.grad(
                    lambda *a: (f(*a).astype(jnp.float32) * c.astype(jnp.float32)).sum(), (0, 1, 2))(q, k, v))

            got = jax.jit(both(ours))(q, k, v, ct)
            want = _on_cpu(both(reference), q, k, v, ct)
            return _within(f"splash causal, {heads}/{kv_heads} heads of {dim}, {length} tokens", {
                "out": (got[0], want[0]), "dq": (got[1][0], want[1][0]), "dk": (got[1][1], want[1][1]),
                "dv": (got[1][2], want[1][2])}, start)
        return check

    def lm_head(rows: int, hidden: int, vocab: int) -> Callable[[], Outcome]:
        def check() -> Outcome:
            start = time.perf_counter()
            x, w = normal(1, (rows, hidden)), normal(2, (vocab, hidden), scale=hidden ** -0.5)
            t = jax.random.randint(jax.random.key(3), (rows,), 0, vocab, jnp.int32)
            weights = jnp.where(jnp.arange(rows) % 7 == 3, 0.0, 1.0).astype(jnp.float32)  # some rows ignored
            x64, w64 = np.asarray(x, np.float64), np.asarray(w, np.float64)  # float64 on the host
            z = x64 @ w64.T
            lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
            p = np.exp(z - lse[:, None])
            zt = z[np.arange(rows), np.asarray(t)]
            m = np.asarray(weights, np.float64)
            g = m[:, None] * (p - np.eye(vocab)[np.asarray(t)])
            want = {"loss": (m * (lse - zt)).sum(), "dx": g @ w64, "dw": g.T @ x64,
                    "entropy": lse - (p * z).sum(1), "lse": lse}
            stats = jax.jit(lambda x, w, t: tk.lm_head.row_stats(x, w, None, t))(x, w, t)
            pairs = {"lse": (stats.lse, want["lse"]), "entropy": (stats.entropy, want["entropy"])}
            # chunks of 1024: the streamed kernels where `accumulation` takes them, and the other ways' fastest
            for scheme, chunk, streamed in (("kernels", None, None), ("chunked", 1024, False), ("auto", 1024, None)):
                loss, dx, dw, _ = jax.jit(lambda x, w, t, m, c=chunk, s=streamed: tk.lm_head.fused.loss_and_grads(
                    x, w, None, t, m, tk.lm_head.IDENTITY, chunk=c, streamed=s))(x, w, t, weights)
                pairs |= {f"{scheme} loss": (loss, want["loss"]), f"{scheme} dx": (dx, want["dx"]),
                          f"{scheme} dw": (dw, want["dw"])}
            return _within(f"lm_head at {rows} rows, hidden {hidden}, vocabulary {vocab}", pairs, start)
        return check

    def distill(rows: int, hs: int, ht: int, vocab: int) -> Callable[[], Outcome]:
        def check() -> Outcome:
            from tests.jax.distill import reference

            start = time.perf_counter()
            xs, ws = normal(1, (rows, hs), jnp.float32), normal(2, (vocab, hs), jnp.float32, hs ** -0.5)
            xt, wt = normal(3, (rows, ht), jnp.float32), normal(4, (vocab, ht), jnp.float32, ht ** -0.5)
            g_div, g_ent = normal(5, (rows,), jnp.float32), normal(6, (rows,), jnp.float32)

            def ours(scheme, entropy):  # noqa: ANN001, ANN202 - the stored scheme's backward differs without one
                def run(xs, ws, xt, wt, g_div, g_ent):  # noqa: ANN001, ANN202
                    def loss(xs, ws):  # noqa: ANN001, ANN202
                        div, ent = tk.distill.divergence(xs, ws, None, xt, wt, None, beta=0.5, scheme=scheme)
                        return (div * g_div).sum() + ((ent * g_ent).sum() if entropy else 0.0), (div, ent)
                    (_, (div, ent)), grads = jax.value_and_grad(loss, (0, 1), has_aux=True)(xs, ws)
                    return div, ent, grads
                return run

            operands = [np.asarray(a) for a in (xs, ws)] + [None] + [np.asarray(a) for a in (xt, wt)] + [None]
            pairs = {}
            w_div, _, (w_dxs, w_dws, _) = reference.reference(operands, {"beta": 0.5}, np.asarray(g_div),
                                                              np.zeros(rows, np.float32))
            for chunk in (128, "auto"):  # the loss of a step, weighted by g_div: its gradients made in the forward
                def weighted(xs, ws, c=chunk):  # noqa: ANN001, ANN202
                    total, div, _ = tk.distill.loss(xs, ws, None, xt, wt, None, g_div, beta=0.5, chunk=c)
                    return total, div
                (total, div), (dxs, dws) = jax.jit(jax.value_and_grad(weighted, (0, 1), has_aux=True))(xs, ws)
                pairs |= {f"loss (chunks of {chunk}) divergence": (div, w_div),
                          f"loss (chunks of {chunk})": (total, (np.asarray(g_div, np.float64) * w_div).sum()),
                          f"loss (chunks of {chunk}) dx": (dxs, w_dxs), f"loss (chunks of {chunk}) dw": (dws, w_dws)}
            for scheme, entropy in (("kernels", True), ("stored", True), ("stored", False)):
                div, ent, (dxs, dws) = jax.jit(ours(scheme, entropy))(xs, ws, xt, wt, g_div, g_ent)
                g = np.asarray(g_ent) if entropy else np.zeros(rows, np.float32)
                w_div, w_ent, (w_dxs, w_dws, _) = reference.reference(operands, {"beta": 0.5}, np.asarray(g_div), g)
                name = scheme + ("" if entropy else " (no entropy cotangent)")
                pairs |= {f"{name} divergence": (div, w_div), f"{name} entropy": (ent, w_ent),
                          f"{name} dx": (dxs, w_dxs), f"{name} dw": (dws, w_dws)}
            return _within(f"distillation JSD at {rows} rows, student {hs}, teacher {ht}, vocabulary {vocab}", pairs,
                           start)
        return check

    checks = {
        "ragged_dot Mixtral-like": ragged(1024, 4096, 1792, 8),
        "ragged_dot gpt-oss-like (hidden 2880)": ragged(1024, 2880, 1440, 32),
        "ragged_dot Qwen3-30B-A3B-like": ragged(2048, 2048, 768, 128),
        "ragged_dot Mixtral-like, capacity-padded (rows past the groups zero)":
            lambda: padded_rows(tk, 2048, 4096, 1792, capacity_padded_sizes(2048, 8)),
        "splash GQA": splash(8, 2, 2048, 128),
        "splash head 256": splash(4, 2, 1536, 256),
        "splash head 256, 1024-token blocks (the backward's fitted to VMEM)": splash(8, 4, 4096, 256),
        "lm_head": lm_head(1536, 512, 10007),
        "lm_head, a vocabulary off the lanes (the transposed chunk, the accumulator kernel)": lm_head(1536, 512, 10016),
        "distill": distill(256, 256, 384, 2003),
    }
    for name, check in checks.items():
        if case in name:
            yield _guarded(name, check)


MODELS = "models"
"""The name `--only` takes for the checks at real model shapes (the rest are the JAX tier's case families)."""


def families() -> list[str]:
    """What `outcomes(only=...)` can select: the model-shape checks and each JAX-tier case family."""
    from tests.jax.cases import all_cases

    return [MODELS, *sorted({c.id.split("/")[0] for c in all_cases()})]


def outcomes(tk: ModuleType, only: set[str] | None = None, case: str = "") -> Iterator[Outcome]:
    """Every check (`only`: those of the named families, `families()`; `case`: of the model shapes, those whose name
    holds it), the model shapes first: a run cut at its time limit has done those (split a run by `only` where one
    command cannot hold it)."""
    if only is not None and (unknown := only - set(families())):
        raise ValueError(f"tools.chip check: no family {sorted(unknown)}; one of {families()}")
    if only is None or MODELS in only:
        yield from _model_shapes(tk, case)
    yield from _jax_tier_cases(tk, only)
