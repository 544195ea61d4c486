"""DTensors given to the Torch ops directly, on a DeviceMesh over the 2 gloo ranks (`launcher`): each
case runs the op on DTensors split as named and on the whole tensors as plain tensors, on every
rank, forward and backward, and returns (rank 0) both sides' outputs and gradients gathered, for the
test to compare; and the placements DTensor gave the outputs and gradients."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist


def _run(fn: Callable[..., Any], inputs: dict[str, torch.Tensor], differentiable: tuple[str, ...],
         cotangent_seed: int) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """fn(**inputs)'s outputs (a tensor or a tuple; non-float outputs skipped) and the gradients of
    sum(out * a fixed random cotangent) over the float outputs, for the inputs named `differentiable`."""
    from torch.distributed.tensor import DTensor, Replicate, distribute_tensor

    leaves = {n: (t.detach().requires_grad_() if n in differentiable else t) for n, t in inputs.items()}
    outs = fn(**leaves)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    total = torch.zeros(())
    generator = torch.Generator().manual_seed(cotangent_seed)
    for out in outs:
        if not out.requires_grad:
            continue
        cotangent = torch.randn(out.shape, generator=generator)
        if isinstance(out, DTensor):  # DTensor matches it to out's placement (a Partial out stays Partial)
            cotangent = distribute_tensor(cotangent, out.device_mesh, [Replicate()])
        term = (out * cotangent).sum()
        total = total + (term.full_tensor() if isinstance(term, DTensor) else term)
    total.backward()
    return outs, {n: leaves[n].grad for n in differentiable}


def _full(t: torch.Tensor | None) -> torch.Tensor | None:
    from torch.distributed.tensor import DTensor

    if t is None:
        return None
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach()


def _case(fn: Callable[..., Any], reference: Callable[..., Any], whole: dict[str, torch.Tensor],
          placements: dict[str, Any], differentiable: tuple[str, ...]) -> dict[str, Any]:
    """fn on DTensors (`placements` by input name; absent: replicated) against `reference` (float64
    Torch) on the whole tensors."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, distribute_tensor

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    split = {n: distribute_tensor(t, mesh, [placements.get(n, Replicate())]) for n, t in whole.items()}
    outs, grads = _run(fn, split, differentiable, cotangent_seed=1)
    doubled = {n: t.double() if t.is_floating_point() else t for n, t in whole.items()}
    want_outs, want_grads = _run(reference, doubled, differentiable, cotangent_seed=1)
    return {"outs": [_full(o) for o in outs], "grads": {n: _full(g) for n, g in grads.items()},
            "want_outs": [o.detach() for o in want_outs], "want_grads": want_grads,
            "out_placements": [o.placements if isinstance(o, DTensor) else None for o in outs],
            "grad_placements": {n: g.placements if isinstance(g, DTensor) else None for n, g in grads.items()}}


def _refusal(fn: Callable[..., Any], whole: dict[str, torch.Tensor], placements: dict[str, Any]) -> dict[str, str]:
    """fn on DTensors (as `_case`), expected to raise: the message each rank gets (rank 0's reported)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, distribute_tensor

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    split = {n: distribute_tensor(t, mesh, [placements.get(n, Replicate())]) for n, t in whole.items()}
    try:
        fn(**split)
    except Exception as error:  # noqa: BLE001  (the test checks its type and message)
        return {"raised": f"{type(error).__name__}: {error}"}
    return {"raised": None}


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


# ---- float64 references, from the definitions -------------------------------------------------
def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_ids: torch.Tensor,
               kv_ids: torch.Tensor) -> torch.Tensor:
    from tests.torch.attention_reference import allowed, attention

    positions = torch.arange(q.shape[2]).expand(q.shape[0], -1)
    return attention(q, k, v, allowed(positions, k.shape[2], kind="causal", q_ids=q_ids, kv_ids=kv_ids))


def _mqa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Multi-query: k and v [batch, len, dim], one key/value head for every query head."""
    from tests.torch.attention_reference import allowed, attention

    positions = torch.arange(q.shape[2]).expand(q.shape[0], -1)
    return attention(q, k[:, None], v[:, None], allowed(positions, k.shape[1], kind="causal"))


def _grouped(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """rhs [groups, n, k] (transposed, as transformers' experts hold it)."""
    out, start = lhs.new_zeros(lhs.shape[0], rhs.shape[1]), 0
    for g, size in enumerate(group_sizes.tolist()):
        out = out.index_add(0, torch.arange(start, start + size), lhs[start:start + size] @ rhs[g].t())
        start += size
    return out


def _cross_entropy(reduction: str) -> Callable[..., Any]:
    def fn(x: torch.Tensor, labels: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = x @ w
        lse = torch.logsumexp(logits, dim=-1)
        valid = labels != -100
        picked = logits.gather(1, torch.where(valid, labels, 0).long()[:, None])[:, 0]
        losses = torch.where(valid, lse - picked, 0.0)
        out = {"none": losses, "sum": losses.sum(), "mean": losses.sum() / valid.sum()}[reduction]
        return out, lse.detach()
    return fn


def all_cases(tokamax: ModuleType, workdir: Path) -> dict[str, Any]:
    """Every case, in one scenario. The shapes are those the training steps' kernels ran at in the same
    process (`steps`: data parallelism's 1 row a rank, tensor parallelism's 2 heads and half the experts'
    features a rank), so that the kernels' interpret-mode compilations are reused (only the experts
    split is new)."""
    from torch.distributed.tensor import Shard

    ops = tokamax.torch_ops
    cases: dict[str, Any] = {}
    # grouped-query attention, 4 query heads on 2 key/value heads, 128 positions in one segment
    ids = torch.zeros(2, 128, dtype=torch.int32)
    attention = dict(q=_randn(2, 4, 128, 128, seed=1) / 8, k=_randn(2, 2, 128, 128, seed=2),
                     v=_randn(2, 2, 128, 128, seed=3), q_ids=ids, kv_ids=ids.clone())

    def splash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_ids: torch.Tensor,
               kv_ids: torch.Tensor) -> torch.Tensor:
        return ops.splash_attention(q, k, v, segment_ids=(q_ids, kv_ids))

    qkv = ("q", "k", "v")
    cases["splash over the batch"] = _case(splash, _attention, attention,
                                           dict(q=Shard(0), k=Shard(0), v=Shard(0), q_ids=Shard(0),
                                                kv_ids=Shard(0)), qkv)
    cases["splash over the heads"] = _case(splash, _attention, attention, dict(q=Shard(1), k=Shard(1), v=Shard(1)),
                                           qkv)
    # multi-query k and v, whole on both ranks while q's heads are split: dk and dv are partial sums
    mqa = dict(q=attention["q"], k=attention["k"][:, 0], v=attention["v"][:, 0])
    cases["splash multi-query over the heads"] = _case(
        lambda q, k, v: ops.splash_attention(q, k, v), _mqa_attention, mqa, dict(q=Shard(1)), qkv)
    # 96 rows in 4 groups, one empty (40 + 0 + 36 + 20), experts' weights [4, n, k]; under the experts
    # split each rank's rows are part of the 96, the others masked
    sizes = torch.tensor([40, 0, 36, 20], dtype=torch.int32)

    def gmm(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
        return ops.gmm(lhs, rhs, group_sizes, transpose_rhs=True)

    lr = ("lhs", "rhs")
    up = dict(lhs=_randn(96, 256, seed=5), rhs=_randn(4, 256, 256, seed=6) / 16, group_sizes=sizes)
    down = dict(lhs=_randn(96, 128, seed=7), rhs=_randn(4, 256, 128, seed=8) / 16, group_sizes=sizes)
    cases["gmm over the experts' outputs"] = _case(gmm, _grouped, up, dict(rhs=Shard(1)), lr)
    cases["gmm over the contraction"] = _case(gmm, _grouped, down, dict(lhs=Shard(1), rhs=Shard(2)), lr)
    cases["gmm over the experts"] = _case(gmm, _grouped, up, dict(rhs=Shard(0)), lr)
    # 48 rows, hidden 256, a vocabulary of 128 (64 a rank); 6 ignored rows
    labels = torch.randint(0, 128, (48,), generator=torch.Generator().manual_seed(9), dtype=torch.int32)
    labels[::8] = -100
    entropy = dict(x=_randn(48, 256, seed=10) / 4, labels=labels, w=_randn(256, 128, seed=11) / 4)

    def loss(reduction: str) -> Callable[..., Any]:
        def fn(x: torch.Tensor, labels: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return ops.linear_softmax_cross_entropy_loss(x, labels, w, reduction=reduction, ignore_index=-100)
        return fn

    xw = ("x", "w")
    for reduction in ("mean", "sum", "none"):
        cases[f"cross-entropy over the vocabulary, {reduction}"] = _case(
            loss(reduction), _cross_entropy(reduction), entropy, dict(w=Shard(1)), xw)
    # an uneven split (DTensor's: 64 + 63 columns), and a vocabulary of one (rank 1's shard empty)
    for vocab in (127, 1):
        uneven = dict(entropy, labels=torch.where(labels == -100, -100, labels % vocab).to(torch.int32),
                      w=entropy["w"][:, :vocab].contiguous())
        cases[f"cross-entropy over a vocabulary of {vocab}"] = _case(
            loss("mean"), _cross_entropy("mean"), uneven, dict(w=Shard(1)), xw)
    bf16 = {n: t.bfloat16() if t.is_floating_point() else t for n, t in entropy.items()}
    cases["cross-entropy over the vocabulary, bf16"] = _case(loss("sum"), _cross_entropy("sum"), bf16,
                                                             dict(w=Shard(1)), xw)
    outside = labels.clone()
    outside[3] = 128
    cases["cross-entropy over the vocabulary, a label outside it"] = _refusal(
        loss("sum"), dict(entropy, labels=outside), dict(w=Shard(1)))
    for reduction in ("mean", "sum", "none"):
        cases[f"cross-entropy over rows, {reduction}"] = _case(
            loss(reduction), _cross_entropy(reduction), entropy, dict(x=Shard(0), labels=Shard(0)), xw)
    return cases if dist.get_rank() == 0 else {}
