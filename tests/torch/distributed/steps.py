"""Training-step scenarios, run on every rank by `launcher` (each `f(tokamax, workdir)`): one step of a
tiny model on tokamax attention, experts and fused loss under one of PyTorch's or transformers'
engines; each returns the loss and (rank 0) every parameter's unsharded gradient, for the test to
compare with the same step in one process on transformers' own eager model (`reference`, run by
the test process itself)."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist

from . import tiny


def reference(workdir: Path, family: str, ignored: bool = False) -> dict[str, Any]:
    """The whole batch in one process on transformers' eager attention, experts and loss (logits); with
    `ignored`, a few labels ignored (`tiny.with_ignored`), and no evaluation."""
    model = tiny.load(workdir, family, None)
    ids, labels = tiny.batch(family)
    if ignored:
        labels = tiny.with_ignored(labels)
    report = {"loss": tiny.step(model, ids, labels), "grads": tiny.full_grads(model)}
    if ignored:
        return report
    model.eval()
    with torch.no_grad():
        report["eval_logits"] = model(input_ids=ids).logits
    return report


def _mean_over_ranks(loss: torch.Tensor) -> torch.Tensor:
    total = loss.clone()
    dist.all_reduce(total)
    return total / dist.get_world_size()


def _report(loss: torch.Tensor, grads: dict[str, torch.Tensor]) -> dict[str, Any]:
    return {"loss": loss, "grads": grads if dist.get_rank() == 0 else None}


def ddp(tokamax: ModuleType, workdir: Path) -> dict[str, Any]:
    """DistributedDataParallel: one row per rank; DDP averages the gradients."""
    model = tokamax.use_fused_loss(tiny.load(workdir, "qwen3_moe", tokamax))
    wrapped = torch.nn.parallel.DistributedDataParallel(model)
    ids, labels = tiny.batch("qwen3_moe")
    r = dist.get_rank()
    loss = tiny.step(wrapped, ids[r:r + 1], labels[r:r + 1])
    return _report(_mean_over_ranks(loss), tiny.full_grads(wrapped, prefix="module."))


def fsdp2(tokamax: ModuleType, workdir: Path) -> dict[str, Any]:
    """FSDP2: `fully_shard` on each decoder layer and the root; one row per rank; the gradients come back
    as DTensor shards (averaged), gathered to compare."""
    from torch.distributed.fsdp import fully_shard

    model = tokamax.use_fused_loss(tiny.load(workdir, "qwen3_moe", tokamax))
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    ids, labels = tiny.batch("qwen3_moe")
    r = dist.get_rank()
    loss = tiny.step(model, ids[r:r + 1], labels[r:r + 1])
    return _report(_mean_over_ranks(loss), tiny.full_grads(model))


def fsdp2_head_unit(tokamax: ModuleType, workdir: Path) -> dict[str, Any]:
    """FSDP2 with the LM head a unit of its own (`fully_shard(model.lm_head)`, which reshards after its
    forward by default): the fused loss, which runs after the head's forward, still sees the whole
    weight and this rank's rows, and FSDP reduces the head's gradient."""
    from torch.distributed.fsdp import fully_shard

    model = tokamax.use_fused_loss(tiny.load(workdir, "qwen3_moe", tokamax))
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model.lm_head)
    fully_shard(model)
    ids, labels = tiny.batch("qwen3_moe")
    r = dist.get_rank()
    loss = tiny.step(model, ids[r:r + 1], labels[r:r + 1])
    report = _report(_mean_over_ranks(loss), tiny.full_grads(model))
    model.eval()
    with torch.no_grad():  # the head's own forward again after the step (its setting put back)
        logits = model(input_ids=ids).logits
    report["eval_logits"] = logits if r == 0 else None
    return report


def trl_fsdp2(tokamax: ModuleType, workdir: Path) -> dict[str, Any]:
    """TRL's fused LM head (as its trainers add it) under FSDP2, on the kernel: `use_fused_loss`, then TRL's
    `add_fused_lm_head`, then the call TRL's trainers make (`fused_lm_head=True`); its loss, the mean negative
    log-probability of the shifted labels, is transformers' loss (one row per rank, gradients averaged)."""
    from torch.distributed.fsdp import fully_shard
    from trl.trainer.utils import add_fused_lm_head

    dispatch = importlib.import_module(f"{tokamax.__name__}.integrations.trl.dispatch")
    model = tokamax.use_fused_loss(tiny.load(workdir, "qwen3_moe", tokamax))
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    ids, labels = tiny.batch("qwen3_moe")
    r, served = dist.get_rank(), dispatch.calls["kernel"]
    out = model(input_ids=ids[r:r + 1], labels=labels[r:r + 1], fused_lm_head=True)
    out.loss.backward()
    assert dispatch.calls["kernel"] == served + 1, "TRL's fused head did not run on the kernel"
    return _report(_mean_over_ranks(out.loss.detach()), tiny.full_grads(model))


def trl_distill_fsdp2(tokamax: ModuleType, workdir: Path) -> dict[str, Any]:
    """DistillationTrainer's loss under FSDP2, on the kernel: `use_fused_loss(student)`, `fully_shard` on each
    decoder layer and the root (the head's weight a DTensor, which TRL gathers before its function), one
    row per rank, the teacher unsharded; gradients averaged."""
    from torch.distributed.fsdp import fully_shard

    distill = importlib.import_module(f"{tokamax.__name__}.integrations.trl.distill")
    student = tokamax.use_fused_loss(tiny.load(workdir, "llama", tokamax))
    for layer in student.model.layers:
        fully_shard(layer)
    fully_shard(student)
    ids, _ = tiny.batch("llama")
    r, served = dist.get_rank(), distill.calls["kernel"]
    loss = tiny.distillation_loss(student, student, tiny.teacher(workdir), ids[r:r + 1])
    assert distill.calls["kernel"] == served + 1, "DistillationTrainer's divergence did not run on the kernel"
    return _report(_mean_over_ranks(loss), tiny.full_grads(student))


def distillation_reference(workdir: Path) -> dict[str, Any]:
    """The whole batch in one process on eager attention and TRL's own divergence function (where tokamax's
    names stand, they serve no head of this student)."""
    student = tiny.load(workdir, "llama", None)
    ids, _ = tiny.batch("llama")
    loss = tiny.distillation_loss(student, student, tiny.teacher(workdir), ids)
    return {"loss": loss, "grads": tiny.full_grads(student)}


def _sharded_step(tokamax: ModuleType, workdir: Path, family: str, **distributed: Any) -> dict[str, Any]:
    """transformers' own sharding (`from_pretrained(distributed_config=...)`), the whole batch on every
    rank, the fused loss vocabulary-parallel; also checks the head's weight is split over the vocabulary
    and that the head still runs transformers' tensor-parallel forward after the step (eval logits)."""
    from torch.distributed.tensor import DTensor, Shard
    from transformers.distributed import DistributedConfig

    model = tiny.load(workdir, family, tokamax, distributed_config=DistributedConfig(**distributed))
    tokamax.use_fused_loss(model)
    weight = model.lm_head.weight
    assert isinstance(weight, DTensor) and weight.placements == (Shard(0),), weight
    ids, labels = tiny.batch(family)
    loss = tiny.step(model, ids, labels)
    report = _report(loss, tiny.full_grads(model))
    model.eval()
    with torch.no_grad():  # every rank runs it (collectives); rank 0 reports
        logits = model(input_ids=ids).logits
    report["eval_logits"] = logits if dist.get_rank() == 0 else None
    return report


def tensor_parallel(tokamax: ModuleType, workdir: Path) -> dict[str, Any]:
    """transformers' tensor-parallel plan (`tp_plan="auto"`): attention heads, the experts' features, the
    embeddings and the LM head split over 2 ranks."""
    return _sharded_step(tokamax, workdir, "qwen3_moe", tp_plan="auto")


def expert_parallel(tokamax: ModuleType, workdir: Path) -> dict[str, Any]:
    """transformers' expert-parallel plan (Qwen3-MoE's `base_model_ep_plan`: token dispatch, 2 experts a
    rank) with its tensor-parallel plan for the rest (`tp_size=2, ep_size=2`)."""
    return _sharded_step(tokamax, workdir, "qwen3_moe", tp_size=2, ep_size=2)


def expert_parallel_router(tokamax: ModuleType, workdir: Path) -> dict[str, Any]:
    """transformers' other expert-parallel plan, router masking (`ep_router` + `moe_tp_experts`, which
    needs `ep_size=tp_size`): every rank keeps every token, another rank's experts come to the experts as
    a sentinel id of weight 0, and the ranks' outputs are summed."""
    plan = {"model.layers.*.mlp.gate": "ep_router", "model.layers.*.mlp.experts": "moe_tp_experts"}
    return _sharded_step(tokamax, workdir, "qwen3_moe", tp_size=2, ep_size=2, ep_plan=plan)


def dense_tensor_parallel(tokamax: ModuleType, workdir: Path) -> dict[str, Any]:
    """Llama under `tp_plan="auto"`: the vocabulary-parallel loss on a dense family, 100 columns a rank."""
    return _sharded_step(tokamax, workdir, "llama", tp_plan="auto")


def tied_tensor_parallel(tokamax: ModuleType, workdir: Path) -> dict[str, Any]:
    """Llama with its LM head tied to the embeddings under `tp_plan="auto"`: the loss's gradient and the
    embedding's reach the one shared weight."""
    return _sharded_step(tokamax, workdir, "llama_tied", tp_plan="auto")


def accumulated_tensor_parallel(tokamax: ModuleType, workdir: Path) -> dict[str, Any]:
    """Gradient accumulation under `tp_plan="auto"`, as transformers' Trainer runs it: the batch in two
    micro-batches of one row, each loss divided by the whole batch's `num_items_in_batch`, a few labels
    ignored; the summed losses and the accumulated gradients are the whole batch's mean."""
    from transformers.distributed import DistributedConfig

    model = tiny.load(workdir, "llama", tokamax, distributed_config=DistributedConfig(tp_plan="auto"))
    tokamax.use_fused_loss(model)
    ids, labels = tiny.batch("llama")
    labels = tiny.with_ignored(labels)
    items = torch.tensor(tiny.predicted(labels))
    loss = sum(tiny.step(model, ids[r:r + 1], labels[r:r + 1], num_items_in_batch=items) for r in range(2))
    return _report(loss, tiny.full_grads(model))
