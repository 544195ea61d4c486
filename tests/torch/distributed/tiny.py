"""The tiny models and the batch of the multi-process tests, shared by the test process (which builds
the checkpoints and computes the one-process references) and the spawned ranks (which load the same
checkpoints).

- Qwen3-MoE (the transformers tests' config: grouped-query attention, q/k norms, 4 experts top 2) on
  tokamax attention and experts; vocab 128, 64 columns per rank under tensor parallelism.
- Llama (dense) with a vocabulary of 200 (100 columns per rank, padded to the kernel's lanes), its
  attention shaped as the Qwen3-MoE's (the same kernel compilations); and the same with its LM head
  tied to the embeddings.

Both float32 with random weights, saved with `save_pretrained` so that transformers' distributed
loading (`from_pretrained(distributed_config=...)`) can shard them as it shards a Hub checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import transformers

from tests.torch.transformers.models import ATTENTION, FAMILIES

LENGTH = 24  # tokens per row; 2 rows, one per rank under data parallelism


def _llama() -> transformers.PreTrainedConfig:
    # head_dim 128 and 4 heads on 2 key/value heads, as the Qwen3-MoE: the same attention kernels
    return transformers.LlamaConfig(vocab_size=200, hidden_size=256, intermediate_size=128, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=128,
                                    max_position_embeddings=512)


def _llama_tied() -> transformers.PreTrainedConfig:
    config = _llama()
    config.tie_word_embeddings = True
    return config


CONFIGS = {"qwen3_moe": (FAMILIES["qwen3_moe"][0], transformers.Qwen3MoeForCausalLM),
           "llama": (_llama, transformers.LlamaForCausalLM),
           "llama_tied": (_llama_tied, transformers.LlamaForCausalLM)}


def checkpoint(workdir: Path, family: str) -> Path:
    return workdir / f"{family}-checkpoint"


def save_checkpoint(workdir: Path, family: str) -> Path:
    """A random float32 `family` model saved where the ranks load it from."""
    make_config, model_cls = CONFIGS[family]
    torch.manual_seed(0)
    model = model_cls(make_config()).float()
    model.save_pretrained(checkpoint(workdir, family))
    return checkpoint(workdir, family)


def load(workdir: Path, family: str, tokamax: ModuleType | None, **kwargs: Any) -> torch.nn.Module:
    """The saved model on tokamax attention (and experts, for an MoE), or with `tokamax` None on
    transformers' eager ones; in training mode."""
    model_cls = CONFIGS[family][1]
    attention = "eager" if tokamax is None else ATTENTION
    experts = {} if family != "qwen3_moe" else {
        "experts_implementation": "eager" if tokamax is None else tokamax.register_experts()}
    model = model_cls.from_pretrained(checkpoint(workdir, family), dtype=torch.float32,
                                      attn_implementation=attention, **experts, **kwargs)
    return model.train()


def batch(family: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, labels) [2, LENGTH]: no padding, so each row has LENGTH - 1 predicted tokens and the
    mean of the two rows' means is the mean over the batch (what data parallelism averages)."""
    vocab = CONFIGS[family][0]().vocab_size
    ids = torch.randint(0, vocab, (2, LENGTH), generator=torch.Generator().manual_seed(5))
    return ids, ids.clone()


def with_ignored(labels: torch.Tensor) -> torch.Tensor:
    """`labels` with a few positions ignored (-100), a different number in each row."""
    labels = labels.clone()
    labels[0, 3:6] = -100
    labels[1, 10] = -100
    labels[1, -1] = -100
    return labels


def predicted(labels: torch.Tensor) -> int:
    """How many tokens the labels predict (transformers' `num_items_in_batch`: shifted, not ignored)."""
    return int((labels[:, 1:] != -100).sum())


def step(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """One forward and backward; returns the loss (detached)."""
    out = model(input_ids=ids, labels=labels, **kwargs)
    out.loss.backward()
    return out.loss.detach()


def full_grads(model: torch.nn.Module, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every parameter's gradient as one unsharded tensor (DTensor gradients gathered: a collective, so
    every rank calls this), by parameter name without `prefix`."""
    from torch.distributed.tensor import DTensor

    grads = {}
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        grad = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
        grads[name.removeprefix(prefix)] = grad.detach().clone()
    return grads


def teacher(workdir: Path) -> torch.nn.Module:
    """A distillation teacher for the Llama student: the same checkpoint on eager attention, its head three
    times sharper (so that it differs from the student), frozen."""
    model = load(workdir, "llama", None).eval().requires_grad_(False)
    with torch.no_grad():
        model.lm_head.weight.mul_(3.0)
    return model


def distillation_loss(model: torch.nn.Module, student: torch.nn.Module, teacher_model: torch.nn.Module,
                      ids: torch.Tensor) -> torch.Tensor:
    """TRL 1.16's DistillationTrainer loss on `ids` (every position, the JSD at beta 0.5, temperature 0.9):
    both backbones' last hidden states, then `_chunked_divergence_loss` as the trainer calls it (the name in
    its module, whatever stands there), routed through `model`'s forward as the trainer routes it (FSDP
    gathers the root's parameters); backward; returns the loss (detached)."""
    import trl.trainer.distillation_trainer as trainer
    from trl.models.utils import _ForwardRedirection

    def compute(unwrapped: torch.nn.Module) -> torch.Tensor:
        hidden = unwrapped.model(input_ids=ids).last_hidden_state
        with torch.no_grad():
            teacher_hidden = teacher_model.model(input_ids=ids).last_hidden_state
        loss, _, _ = trainer._chunked_divergence_loss(hidden, teacher_hidden, unwrapped.lm_head.weight,
                                                      teacher_model.lm_head.weight, torch.ones(ids.shape), 0.5,
                                                      temperature=0.9)
        return loss

    loss = _ForwardRedirection()(model, student, compute, student)
    loss.backward()
    return loss.detach()
