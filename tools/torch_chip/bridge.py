"""The bridge's cost: each op at the issue's shapes from Torch (torch-tpu tensors through `jax_op`) beside the JAX
path (the same public JAX op under `jax.jit`) and torch-tpu's own way, in one command of two processes.

    python3 -m tools.torch_chip jax   --out DIR   # JAX on the chip: DIR/bridge-jax.json (times, losses, norms)
    python3 -m tools.torch_chip bridge --out DIR  # Torch on the chip: DIR/bridge.json, the JAX side's records in it

Both sides draw the same inputs (numpy's generator, float32 rounded to bf16 on the device) and pass the same
cotangent (the float32 sum of the output, or the loss itself), so the Torch side checks its loss and gradient norms
against the JAX side's. The Torch side also times pieces of its own pass (the custom op alone with its arguments
made beforehand, the forward alone), so that the record says where a difference goes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .records import record

RUNS = 10


@dataclasses.dataclass(frozen=True)
class Shape:
    op: str  # "grouped_matmul", "attention", "lm_head_loss"
    case: str
    dims: dict[str, int]

    def flops(self, pass_: str) -> float:
        d = self.dims
        if self.op == "grouped_matmul":
            f = 2 * d["rows"] * d["hidden"] * d["out"]
        elif self.op == "attention":  # causal: half the square, q k^T and p v
            f = 2 * 2 * d["heads"] * d["length"] ** 2 * d["dim"] / 2
        else:
            f = 2 * d["rows"] * d["hidden"] * d["vocab"]
        return f * (1 if pass_ == "fwd" else 3 if self.op != "attention" else 3.5)


SHAPES = (
    Shape("grouped_matmul", "Mixtral 8x7B experts: 16,384 x 4,096 -> 14,336, 8 experts",
          {"rows": 16384, "hidden": 4096, "out": 14336, "experts": 8}),
    Shape("grouped_matmul", "OLMoE experts: 32,768 x 2,048 -> 1,024, 64 experts",
          {"rows": 32768, "hidden": 2048, "out": 1024, "experts": 64}),
    Shape("attention", "causal, 32/8 heads of 128, 8,192 tokens", {"heads": 32, "kv": 8, "length": 8192, "dim": 128}),
    Shape("lm_head_loss", "Llama 3 8B head: 8,192 rows, hidden 4,096, vocabulary 128,256",
          {"rows": 8192, "hidden": 4096, "vocab": 128256}),
)

TINY = tuple(dataclasses.replace(s, case=f"tiny {s.case.split(':')[0]}", dims=d) for s, d in zip(SHAPES, (
    {"rows": 256, "hidden": 128, "out": 128, "experts": 4}, {"rows": 256, "hidden": 128, "out": 128, "experts": 8},
    {"heads": 2, "kv": 1, "length": 256, "dim": 128}, {"rows": 128, "hidden": 128, "vocab": 1024}), strict=True))
"""The same ways at small sizes: the tool's plumbing checked on a CPU host (`--tiny`), not a measurement."""


def inputs(shape: Shape) -> dict[str, np.ndarray]:
    """The shape's inputs as float32 / int32 numpy arrays (the float ones rounded to bf16 on the device)."""
    rng, d = np.random.default_rng(0), shape.dims
    if shape.op == "grouped_matmul":
        sizes = np.full(d["experts"], d["rows"] // d["experts"], np.int32)
        return {"lhs": rng.standard_normal((d["rows"], d["hidden"]), np.float32),
                "rhs": rng.standard_normal((d["experts"], d["hidden"], d["out"]), np.float32) * d["hidden"] ** -0.5,
                "group_sizes": sizes}
    if shape.op == "attention":
        s = d["dim"] ** -0.5  # splash does not scale q: scaled here, as a model does
        return {"q": rng.standard_normal((1, d["heads"], d["length"], d["dim"]), np.float32) * s,
                "k": rng.standard_normal((1, d["kv"], d["length"], d["dim"]), np.float32),
                "v": rng.standard_normal((1, d["kv"], d["length"], d["dim"]), np.float32)}
    return {"x": rng.standard_normal((d["rows"], d["hidden"]), np.float32),
            "w": rng.standard_normal((d["vocab"], d["hidden"]), np.float32) * d["hidden"] ** -0.5,
            "targets": rng.integers(0, d["vocab"], d["rows"], dtype=np.int32)}


def norms(grads: dict[str, Any]) -> dict[str, float]:
    """Each gradient's float64 Frobenius norm (what the two sides compare)."""
    return {k: float(np.linalg.norm(np.asarray(v, np.float64).ravel())) for k, v in grads.items()}


def agree(torch_side: dict[str, float], jax_side: dict[str, float], bound: float) -> tuple[bool, dict[str, float]]:
    errors = {k: abs(torch_side[k] - v) / max(abs(v), 1e-30) for k, v in jax_side.items() if k in torch_side}
    return bool(errors) and all(math.isfinite(e) and e <= bound for e in errors.values()), errors


# ---- the JAX side (JAX on the chip) ----

def jax_side(tk: Any, out: Any, runs: int = RUNS, shapes: tuple[Shape, ...] = SHAPES) -> None:
    """Times each shape's public JAX op forward and forward+backward; records its loss and gradient norms."""
    import jax
    import jax.numpy as jnp

    from tools.chip.measure import measure

    for shape in shapes:
        arrays = {k: jnp.asarray(v).astype(jnp.bfloat16) if v.dtype == np.float32 else jnp.asarray(v)
                  for k, v in inputs(shape).items()}
        for pass_, fn, argnums in _jax_passes(tk, shape):
            args = tuple(arrays.values())
            try:
                m = measure(fn, args, runs=runs)
                result = jax.jit(fn)(*args)
                figures = _jax_figures(shape, pass_, result, list(arrays), argnums)
                del result
                out.add(record(shape.op, shape.case, "jax", pass_, m.median_s, min_s=m.min_s, max_s=m.max_s,
                               runs=m.runs, first_s=round(m.compile_s, 2), peak_bytes=m.peak_bytes,
                               pipelined_s=pipelined(jax.jit(fn), args, runs), flops=shape.flops(pass_), **figures))
                print(f"jax | {shape.case} | {pass_}: {m.median_s * 1e3:.2f} ms {figures}", flush=True)
            except Exception as e:  # noqa: BLE001  (recorded)
                out.add(record(shape.op, shape.case, "jax", pass_, None, error=f"{type(e).__name__}: {e}"[:600]))
                print(f"jax | {shape.case} | {pass_}: {type(e).__name__}: {e}"[:300], flush=True)
        if shape.op != "lm_head_loss":
            _jax_two_programs(tk, shape, tuple(arrays.values()), out, runs)
        else:
            _jax_scaled_head(tk, shape, tuple(arrays.values()), out, runs)
        del arrays


TWO_PROGRAMS = "jax (fwd, then bwd: two programs)"
"""The JAX side's forward and backward as a Torch user's autograd runs them: the forward one jitted program, the
backward another, its cotangent an array in HBM (ones, as the float32 sum's backward gives Torch's op). The JAX
path's one program shares the two passes' prologues and folds the sum's cotangent (a splat) into the backward; the
compiler's model on this host put OLMoE's pair at 1.106x that program, its backward alone equal to the Torch op's
export (3.28 ms). Against this, the Torch op's ratio is the bridge's own cost.

Where the op's backward needs more than its inputs (`RESIDUALS`: splash's output and log-sum-exp), the forward
program returns them (`jax.vjp` under `jit`: the pullback's residuals are arrays), as the Torch op's forward export
does; the backward program takes them and does not recompute the forward. The grouped matmul's backward needs only
its inputs, so its forward returns its output alone (a returned input would be a copy)."""

RESIDUALS = ("attention",)


def named(shapes: tuple[Shape, ...], prefixes: list[str]) -> tuple[Shape, ...]:
    """The shapes whose case starts with one of `prefixes` (a run of a few of them); none is refused."""
    chosen = tuple(s for s in shapes if s.case.startswith(tuple(prefixes)))
    if not chosen:
        raise SystemExit(f"--shapes {','.join(prefixes)}: no case starts with these; the cases: "
                         + "; ".join(s.case for s in shapes))
    return chosen


def split_of(op: str, record: dict | None = None) -> str:
    """What the two programs' backward takes (a record's `backward_takes`; dde9797's, without it, recomputed
    splash's forward in its backward)."""
    if record is not None and "backward_takes" in record:
        return record["backward_takes"]
    if op in RESIDUALS:
        return "the forward's residuals" if record is None else "the inputs (recomputes the forward)"
    return "the inputs"


def _jax_two_programs(tk: Any, shape: Shape, args: tuple, out: Any, runs: int) -> None:
    import jax
    import jax.numpy as jnp

    (_, fwd, _), (_, _, argnums) = list(_jax_passes(tk, shape))
    forward = jax.jit(fwd)

    def vjp(*operands: Any) -> Any:
        *inputs, cotangent = operands
        diff = tuple(inputs[i] for i in argnums)

        def partial(*d: Any) -> Any:
            full = list(inputs)
            for i, x in zip(argnums, d, strict=True):
                full[i] = x
            return fwd(*full)
        return jax.vjp(partial, *diff)[1](cotangent)

    backward = jax.jit(vjp)
    if shape.op in RESIDUALS:
        forward = jax.jit(lambda *operands: jax.vjp(fwd, *operands))  # (output, the pullback holding residuals)
        pull = jax.jit(lambda pullback, cotangent: pullback(cotangent))

        def run_backward(cotangent: Any) -> Any:
            return pull(saved[1], cotangent)
    else:
        def run_backward(cotangent: Any) -> Any:
            return backward(*args, cotangent)
    try:
        start = time.perf_counter()
        saved = forward(*args)
        result = saved[0] if shape.op in RESIDUALS else saved
        cotangent = jnp.ones(result.shape, result.dtype)
        grads = jax.block_until_ready(run_backward(cotangent))
        first = time.perf_counter() - start
        names = list(inputs(shape))
        grad_norms = norms({names[i]: g for i, g in zip(argnums, grads, strict=True)})

        def both() -> Any:
            nonlocal saved
            saved = forward(*args)
            return run_backward(cotangent)

        times = []
        for _ in range(runs):
            start = time.perf_counter()
            jax.block_until_ready(both())
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
        for _ in range(runs):
            last = both()
        jax.block_until_ready(last)
        piped = (time.perf_counter() - start) / runs
        median = statistics.median(times)
        out.add(record(shape.op, shape.case, TWO_PROGRAMS, "fwd+bwd", median, min_s=min(times), max_s=max(times),
                       runs=runs, first_s=round(first, 2), pipelined_s=piped, flops=shape.flops("fwd+bwd"),
                       grad_norms=grad_norms, backward_takes=split_of(shape.op)))
        print(f"jax | {shape.case} | two programs | fwd+bwd: {median * 1e3:.2f} ms", flush=True)
    except Exception as e:  # noqa: BLE001  (recorded)
        out.add(record(shape.op, shape.case, TWO_PROGRAMS, "fwd+bwd", None, error=f"{type(e).__name__}: {e}"[:600]))


SCALED = "jax (the loss / rows under jax.grad)"
"""The LM head's JAX path as training differentiates it: `lm_head.loss` divided by the rows (transformers' mean over
its tokens) under `jax.grad`, so dW's float32 sum is scaled by a cotangent other than 1 and rounded once: the pass
the Torch op's backward always makes (autograd gives it the cotangent only then), which the JAX side's direct call,
its cotangent the constant 1, folds away. The gradients are 1 / rows the sum's; rows is a power of two, so scaled back
their norms are the sum's."""


def _jax_scaled_head(tk: Any, shape: Shape, args: tuple, out: Any, runs: int) -> None:
    import jax
    import jax.numpy as jnp

    from tools.chip.measure import measure

    rows = args[0].shape[0]

    def grads(x, w, t):  # noqa: ANN001, ANN202
        weights = jnp.ones(t.shape, jnp.float32)
        return jax.grad(lambda x, w: tk.lm_head.loss.loss(x, w, t, weights) / rows, argnums=(0, 1))(x, w)
    try:
        m = measure(grads, args, runs=runs)
        dx, dw = jax.jit(grads)(*args)
        grad_norms = {k: v * rows for k, v in norms({"x": dx, "w": dw}).items()}
        del dx, dw
        out.add(record(shape.op, shape.case, SCALED, "fwd+bwd", m.median_s, min_s=m.min_s, max_s=m.max_s,
                       runs=m.runs, first_s=round(m.compile_s, 2), pipelined_s=pipelined(jax.jit(grads), args, runs),
                       flops=shape.flops("fwd+bwd"), grad_norms=grad_norms,
                       backward_takes="the cotangent 1 / rows (dW scaled and rounded once)"))
        print(f"jax | {shape.case} | loss / rows under jax.grad | fwd+bwd: {m.median_s * 1e3:.2f} ms", flush=True)
    except Exception as e:  # noqa: BLE001  (recorded)
        out.add(record(shape.op, shape.case, SCALED, "fwd+bwd", None, error=f"{type(e).__name__}: {e}"[:600]))


def pipelined(fn: Callable[..., Any], args: tuple, runs: int) -> float:
    """Seconds per call of `runs` calls issued back to back, one wait at the end (JAX dispatches asynchronously;
    the calls run in order on the chip, so waiting for the last waits for all). Only the last output is kept."""
    import jax

    jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    for _ in range(runs):
        result = fn(*args)
    jax.block_until_ready(result)
    return (time.perf_counter() - start) / runs


def _jax_passes(tk: Any, shape: Shape) -> Iterator[tuple[str, Callable[..., Any], tuple[int, ...]]]:
    import jax
    import jax.numpy as jnp

    if shape.op == "grouped_matmul":
        def fwd(lhs, rhs, sizes):  # noqa: ANN001, ANN202
            return tk.ops.ragged_dot(lhs, rhs, sizes)
    elif shape.op == "attention":
        spec = tk.splash.MaskSpec.of(True, None)

        def fwd(q, k, v):  # noqa: ANN001, ANN202
            return tk.splash.attend(q, k, v, None, None, None, spec=spec)[0]
    else:
        def loss_and_grads(x, w, t):  # noqa: ANN001, ANN202
            weights = jnp.ones(t.shape, jnp.float32)
            loss, dx, dw, _ = tk.lm_head.fused.loss_and_grads(x, w, None, t, weights, tk.lm_head.IDENTITY)
            return loss, dx, dw
        yield "fwd+bwd", loss_and_grads, (0, 1)
        return

    def loss(*args):  # noqa: ANN002, ANN202
        return fwd(*args).astype(jnp.float32).sum()

    yield "fwd", fwd, ()
    yield "fwd+bwd", jax.value_and_grad(loss, argnums=(0, 1, 2) if shape.op == "attention" else (0, 1)), \
        (0, 1, 2) if shape.op == "attention" else (0, 1)


def _jax_figures(shape: Shape, pass_: str, result: Any, names: list[str], argnums: tuple[int, ...]) -> dict:
    if pass_ == "fwd":
        return {"out_norm": float(np.linalg.norm(np.asarray(result, np.float64).ravel()))}
    if shape.op == "lm_head_loss":
        loss, dx, dw = result
        return {"loss": float(loss), "grad_norms": norms({"x": dx, "w": dw})}
    loss, grads = result
    return {"loss": float(loss), "grad_norms": norms({names[i]: g for i, g in zip(argnums, grads, strict=True)})}


# ---- the Torch side (torch-tpu on the chip) ----

def torch_side(tk: Any, out: Any, jax_records: list[dict], runs: int = RUNS, device: str = "tpu",
               shapes: tuple[Shape, ...] = SHAPES) -> None:
    """Times each shape from Torch: the public Torch op forward and forward+backward (autograd), its custom op
    alone on arguments made beforehand, torch.compile's graph of the same pass, and torch-tpu's own way; checks
    the loss and gradient norms against the JAX side's record of the same pass."""
    import torch

    from . import torch_ways

    jax_by = {(r["case"], r["pass"]): r for r in jax_records if r.get("median_s") is not None and r["impl"] == "jax"}
    for shape in shapes:
        tensors = {k: torch.from_numpy(v).to(device) for k, v in inputs(shape).items()}
        tensors = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in tensors.items()}
        for way in torch_ways.ways(tk, shape, tensors):
            jax_rec = jax_by.get((shape.case, way.pass_))
            figures = way.run(runs, out, shape, jax_rec)
            if figures is None:
                continue
            print(f"torch | {shape.case} | {way.impl} | {way.pass_}: {figures}", flush=True)
        del tensors


def read_jax_stack(path: Path) -> dict:
    """The JAX side's versions (libtpu among them: the JAX process may run on the host's or on torch-tpu's)."""
    return json.loads(Path(path).read_text())["stack"] if Path(path).exists() else {}


def read_jax(path: Path) -> list[dict]:
    """The JAX side's records (none where its file is missing: the Torch side then says so in its records)."""
    return json.loads(Path(path).read_text())["records"] if Path(path).exists() else []
