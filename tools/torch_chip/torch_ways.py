"""The Torch side's ways of running each bridge shape (`bridge.SHAPES`): the package's Torch op (eager autograd,
its custom op alone, torch.compile's graph) and torch-tpu's own way (a per-expert loop, SDPA or eager attention,
`cross_entropy` of float32 logits). Each way is timed, and where it computes the JAX side's pass its loss and
gradient norms are checked against that side's."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

from tools.chip.check import RELATIVE

from .impls import GIVEN
from .records import record
from .timing import timed

LOSS_BOUND = 1e-4
"""The LM head's summed loss on both sides: the same bf16 inputs, float32 sums in another order (~1e-6 here)."""


@dataclasses.dataclass
class Way:
    impl: str
    pass_: str
    call: Callable[[], Any]  # one pass: the forward's output, or (loss, {name: grad}) for fwd+bwd
    leaves: tuple[torch.Tensor, ...] = ()  # tensors whose .grad each pass sets
    checked: bool = True  # computes the JAX side's pass (its figures compared)

    def run(self, runs: int, out: Any, shape: Any, jax_rec: dict | None) -> dict | None:
        def once() -> Any:
            for t in self.leaves:
                t.grad = None
            return self.call()
        try:
            t = timed(once, runs=runs)
            result = once()
            figures = self._figures(result)
        except Exception as e:  # noqa: BLE001  (recorded: what torch-tpu could not run, and why)
            text = f"{type(e).__name__}: {e}".splitlines()
            out.add(record(shape.op, shape.case, self.impl, self.pass_, None, error=" | ".join(text[:4])[:800]))
            print(f"torch | {shape.case} | {self.impl} | {self.pass_}: {text[0][:300]}", flush=True)
            gc.collect()
            return None
        extra: dict[str, Any] = {"first_s": round(t.first_s, 2), "min_s": t.min_s, "max_s": t.max_s, "runs": t.runs,
                                 "pipelined_s": t.pipelined_s, "flops": shape.flops(self.pass_), **figures}
        if jax_rec is not None:
            extra["jax_median_s"] = jax_rec["median_s"]
            extra["ratio_to_jax"] = t.median_s / jax_rec["median_s"]
            if jax_rec.get("pipelined_s") and t.pipelined_s:
                extra["pipelined_ratio_to_jax"] = t.pipelined_s / jax_rec["pipelined_s"]
            if self.checked:
                extra.update(_compare(figures, jax_rec))
        elif self.checked:
            extra["numerics"] = "no JAX side record of this pass to compare with"
        out.add(record(shape.op, shape.case, self.impl, self.pass_, t.median_s, **extra))
        gc.collect()
        return {k: v for k, v in extra.items() if k in ("ratio_to_jax", "pipelined_ratio_to_jax", "numerics",
                                                          "first_s")} | {"median_ms": round(t.median_s * 1e3, 2)}

    def _figures(self, result: Any) -> dict:
        if self.pass_ == "fwd":
            return {"out_norm": float(result.double().norm())}
        loss, grads = result
        norms = {"grad_norms": {k: float(g.double().norm()) for k, g in grads.items()}}
        return norms if loss is None else {"loss": float(loss), **norms}


def _compare(figures: dict, jax_rec: dict) -> dict:
    errors: dict[str, float] = {}
    bounds: dict[str, float] = {}
    if "out_norm" in figures and "out_norm" in jax_rec:
        errors["out_norm"], bounds["out_norm"] = _rel(figures["out_norm"], jax_rec["out_norm"]), RELATIVE
    if "grad_norms" in figures and "grad_norms" in jax_rec:
        for k, v in jax_rec["grad_norms"].items():
            errors[f"d{k}_norm"], bounds[f"d{k}_norm"] = _rel(figures["grad_norms"].get(k, float("nan")), v), RELATIVE
    if jax_rec.get("op") == "lm_head_loss" and "loss" in figures and "loss" in jax_rec:  # others' sums cancel
        errors["loss"], bounds["loss"] = _rel(figures["loss"], jax_rec["loss"]), LOSS_BOUND
    ok = bool(errors) and all(e <= bounds[k] for k, e in errors.items())  # NaN compares False
    return {"numerics": "passed" if ok else "failed", "errors_vs_jax": errors, "bounds": bounds}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-30)


def _grad_of(names: tuple[str, ...], fn: Callable[..., torch.Tensor], tensors: dict[str, torch.Tensor]
             ) -> tuple[Callable[[], Any], tuple[torch.Tensor, ...]]:
    """A fwd+bwd pass: leaves for `names` (requires_grad copies), the float32 sum of fn's output (or fn's loss)
    backpropagated, (loss, grads) returned. The sum is one reduction (`sum(dtype=float32)`), as the JAX side's
    `astype(float32).sum()` fuses into one: `.float().sum()` would add a float32 copy of the output and a pass over
    it that only Torch's eager side pays (2.2 + 1.2 ms at Mixtral's experts, traced on the v5e)."""
    leaves = {k: tensors[k].detach().clone().requires_grad_(True) for k in names}
    args = {k: leaves.get(k, v) for k, v in tensors.items()}

    def call() -> Any:
        out = fn(**args)
        loss = out if out.dim() == 0 else out.sum(dtype=torch.float32)
        loss.backward()
        return loss.detach(), {k: t.grad for k, t in leaves.items()}
    return call, tuple(leaves.values())


def _grad_given(names: tuple[str, ...], fn: Callable[..., torch.Tensor], tensors: dict[str, torch.Tensor]
                ) -> tuple[Callable[[], Any], tuple[torch.Tensor, ...]]:
    leaves = {k: tensors[k].detach().clone().requires_grad_(True) for k in names}
    args = {k: leaves.get(k, v) for k, v in tensors.items()}
    made: dict[str, torch.Tensor] = {}

    def call() -> Any:
        out = fn(**args)
        if "cotangent" not in made:  # the first (untimed) call makes it
            made["cotangent"] = torch.ones_like(out)
        out.backward(made["cotangent"])
        return None, {k: t.grad for k, t in leaves.items()}
    return call, tuple(leaves.values())


def ways(tk: Any, shape: Any, tensors: dict[str, torch.Tensor]) -> Iterator[Way]:
    """Each way of `shape`. Not torch-tpu's DEFER_AND_FUSE eager mode: under it `torch.accelerator.synchronize()`
    returns before the deferred work has run (measured on the v5e: a 10.6 ms grouped matmul "took" 0.26 ms, and a
    traced forward+backward never ran the forward), so no timing of it would be the work's."""
    return _ways(tk, shape, tensors)


def _ways(tk: Any, shape: Any, tensors: dict[str, torch.Tensor]) -> Iterator[Way]:
    ops = tk.torch_ops
    if shape.op == "grouped_matmul":
        def ours(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
            return ops.gmm(lhs, rhs, group_sizes)

        def loop(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
            sizes = shape.dims["rows"] // shape.dims["experts"]  # the even split both sides draw
            return torch.cat([lhs[g * sizes:(g + 1) * sizes] @ rhs[g] for g in range(rhs.shape[0])])

        family = ops.families["ragged_dot"]
        token = family._tuning_token()
        yield Way("tokamax (torch)", "fwd", lambda: ours(**tensors))
        yield Way("tokamax (torch, custom op alone)", "fwd", lambda: family.gmm_op(
            tensors["lhs"], tensors["rhs"], tensors["group_sizes"], False, token))
        yield Way("tokamax (torch)", "fwd+bwd", *_grad_of(("lhs", "rhs"), ours, tensors))
        yield Way(GIVEN, "fwd+bwd", *_grad_given(("lhs", "rhs"), ours, tensors))
        yield Way("tokamax (torch.compile)", "fwd+bwd", *_grad_of(("lhs", "rhs"), torch.compile(ours), tensors))
        yield Way("torch-tpu (per-expert loop)", "fwd+bwd", *_grad_of(("lhs", "rhs"), loop, tensors))
    elif shape.op == "attention":
        def ours(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return ops.splash_attention(q, k, v, causal=True)

        def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0, enable_gqa=True)

        def eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # transformers' eager path
            group = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
            s = q.shape[2]
            mask = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
            w = (q @ k.transpose(-1, -2)).masked_fill(~mask, float("-inf")).float().softmax(-1).to(q.dtype)
            return w @ v

        yield Way("tokamax (torch)", "fwd", lambda: ours(**tensors))
        yield Way("tokamax (torch)", "fwd+bwd", *_grad_of(("q", "k", "v"), ours, tensors))
        yield Way(GIVEN, "fwd+bwd", *_grad_given(("q", "k", "v"), ours, tensors))
        yield Way("tokamax (torch.compile)", "fwd+bwd", *_grad_of(("q", "k", "v"), torch.compile(ours), tensors))
        yield Way("torch-tpu (sdpa)", "fwd+bwd", *_grad_of(("q", "k", "v"), sdpa, tensors))
        yield Way("torch-tpu (eager attention)", "fwd+bwd", *_grad_of(("q", "k", "v"), eager, tensors))
    else:
        weights = torch.ones(tensors["targets"].shape, dtype=torch.float32, device=tensors["x"].device)
        identity = tk.lm_head.IDENTITY

        def ours(x: torch.Tensor, w: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return ops.lm_head_cross_entropy(x, w, None, targets, weights, identity)

        def plain(x: torch.Tensor, w: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy((x @ w.T).float(), targets.long(), reduction="sum")

        family = ops.families["lm_head"]
        x, w, t = tensors["x"], tensors["w"].detach().clone().requires_grad_(True), tensors["targets"]
        chunk = family.loss_chunk(x.shape[0], x.shape[1], w.shape[0], x.dtype, True)
        raw = (x, w, None, t, weights, identity.pre, identity.tanh, identity.post, 0.0, 0.0, int(chunk))
        yield Way("tokamax (torch, custom op alone)", "fwd+bwd", lambda: _as_pass(family.lm_head_loss_grads_op(*raw)),
                  checked=True)
        yield Way("tokamax (torch)", "fwd+bwd", *_grad_of(("x", "w"), ours, tensors))
        yield Way("tokamax (torch.compile)", "fwd+bwd", *_grad_of(("x", "w"), torch.compile(ours), tensors))
        yield Way("torch-tpu (cross_entropy of float32 logits)", "fwd+bwd", *_grad_of(("x", "w"), plain, tensors))


def _as_pass(out: tuple) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The LM head's custom op's (loss, dx, dW, db) as a pass's (loss, grads)."""
    return out[0].reshape(()), {"x": out[1], "w": out[2]}
