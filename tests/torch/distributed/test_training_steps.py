"""One training step of tiny models on tokamax attention, experts and the fused loss across 2 gloo
processes, under DDP, FSDP2 and transformers' tensor- and expert-parallel plans, against the same
step in one process on transformers' eager attention, experts and loss (logits): the loss on every
rank and every parameter's gradient (sharded gradients gathered). Under transformers' plans the LM head is split
over the vocabulary, so the fused loss is vocabulary-parallel; after the step the model evaluates
to the one-process logits (the head's tensor-parallel forward is back in place). Also: FSDP2 with
the LM head a unit of its own (resharded after its forward), TRL's fused LM head under FSDP2 (on
the kernel), tied embeddings under tensor parallelism, and gradient accumulation with
`num_items_in_batch` and ignored labels; DistillationTrainer's divergence with the student under FSDP2
(on the kernel)."""

from __future__ import annotations

import pytest
import torch

from . import launcher

# float32 on both sides; the kernels (online softmax, tiled grouped matmuls, the fused loss's float32
# accumulators) and the ranks' reductions differ from eager in summation order only: ~1e-5 relative,
# the tolerance of the one-process training tests (tests/torch/transformers/test_training.py)
TOL = dict(rtol=1e-3, atol=1e-4)


def _assert_step(ranks: list[dict], reference: dict) -> None:
    for r, got in enumerate(ranks):
        torch.testing.assert_close(got["loss"], reference["loss"], **TOL, msg=lambda m, r=r: f"rank {r} loss: {m}")
    grads = ranks[0]["grads"]
    assert grads.keys() == reference["grads"].keys() and grads
    for name, want in reference["grads"].items():
        torch.testing.assert_close(grads[name], want, **TOL, msg=lambda m, n=name: f"{n}: {m}")
    if "eval_logits" in ranks[0]:
        torch.testing.assert_close(ranks[0]["eval_logits"], reference["eval_logits"], **TOL)


@pytest.mark.parametrize("scenario", ["ddp", "fsdp2", "fsdp2_head_unit", "trl_fsdp2", "tensor_parallel",
                                      "expert_parallel", "expert_parallel_router"])
def test_qwen3_moe_step_equals_one_process(job, scenario):  # noqa: ANN001
    _assert_step(launcher.result(job["records"], scenario), job["references"]["qwen3_moe"])


@pytest.mark.parametrize("scenario", ["dense_tensor_parallel"])
def test_llama_vocabulary_parallel_step_equals_one_process(job, scenario):  # noqa: ANN001
    """A dense family, a vocabulary of 200 split 100 + 100 (each shard padded to the kernel's lanes)."""
    _assert_step(launcher.result(job["records"], scenario), job["references"]["llama"])


@pytest.mark.parametrize("scenario", ["trl_distill_fsdp2"])
def test_distillation_under_fsdp2_equals_one_process(job, scenario):  # noqa: ANN001
    """DistillationTrainer's loss with the student under FSDP2 (its head a DTensor TRL gathers) on the kernel,
    against the whole batch in one process on TRL's own function: the loss and every student gradient."""
    _assert_step(launcher.result(job["records"], scenario), job["references"]["distillation"])


@pytest.mark.parametrize("scenario", ["tied_tensor_parallel"])
def test_tied_embeddings_under_tensor_parallelism_equal_one_process(job, scenario):  # noqa: ANN001
    _assert_step(launcher.result(job["records"], scenario), job["references"]["llama_tied"])


@pytest.mark.parametrize("scenario", ["accumulated_tensor_parallel"])
def test_gradient_accumulation_with_num_items_in_batch_equals_the_whole_batch(job, scenario):  # noqa: ANN001
    _assert_step(launcher.result(job["records"], scenario), job["references"]["llama, labels ignored"])
