"""TRL 1.16's DistillationTrainer as a user runs it: `tokamax.use_fused_loss(student)` before the trainer,
TRL's code unchanged, one on-policy step (the student generates its completions with `generate()`) of a
tiny Qwen3 student distilled from a wider tiny Qwen3 teacher (hidden 128 and 256, one vocabulary), with
the real distillation kernels in interpret mode, against the same step on TRL's own
`ChunkedDivergenceFunction`: the logged loss and entropy and every parameter's change under SGD (the
gradient) equal, for beta 0, 0.5 and 1 with a temperature; the kernel served every loss of ours (the fused
loss's op, its gradients made in the forward: no backward op), TRL's function every call of theirs. A LoRA
student (PEFT) trains its adapters through the kernel's dx alone. Gradient accumulation (two micro-batches,
`num_items_in_batch`) gives the same step as TRL's too."""

from __future__ import annotations

import collections
import importlib

import pytest
import torch
import transformers

pytest.importorskip("trl", reason="TRL is pinned in the main Torch tier only (requirements/torch-tier.in)")

from tests.torch.doc_models import byte_tokenizer  # noqa: E402
from tests.torch.export_probe import ExportProbe  # noqa: E402
from tests.torch.transformers.models import namespace  # noqa: E402

from . import trainers  # noqa: E402

PROMPTS = ["ab", "cd", "hello", "tpu"]


def _teacher() -> transformers.PreTrainedModel:
    torch.manual_seed(1)
    config = transformers.Qwen3Config(vocab_size=trainers.VOCAB, hidden_size=256, intermediate_size=256,
                                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                                      max_position_embeddings=128, pad_token_id=1, eos_token_id=0, bos_token_id=None,
                                      tie_word_embeddings=False, attention_dropout=0.0)
    config._attn_implementation = "sdpa"
    teacher = transformers.Qwen3ForCausalLM(config).float()
    with torch.no_grad():
        teacher.lm_head.weight.mul_(8.0)  # a confident teacher (entropy ~2 nats), far from the student's
    return teacher


def _trainer(net, tok, beta: float, lora: bool, accumulation: int):  # noqa: ANN001, ANN202
    from datasets import Dataset
    from trl import DistillationConfig, DistillationTrainer

    peft = None
    if lora:
        from peft import LoraConfig

        peft = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    args = trainers.arguments(gradient_accumulation_steps=accumulation)
    args["per_device_train_batch_size"] = 4 // accumulation
    return DistillationTrainer(
        model=net, teacher_model=_teacher(), train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
        processing_class=tok, peft_config=peft,
        args=DistillationConfig(beta=beta, temperature=0.8, max_completion_length=6, **args))


def _step(tokamax, beta: float, ours: bool, lora: bool = False, accumulation: int = 1) -> dict:  # noqa: ANN001
    """One step of a fresh student: its logged numbers, its parameters' changes, the divergence calls each
    side served and the kernel's custom ops that ran."""
    distill = importlib.import_module(f"{tokamax.__name__}.integrations.trl.distill")
    net = trainers.model("sdpa")
    if ours:
        tokamax.use_fused_loss(net)
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    counted = dict(distill.calls)
    trainer = _trainer(net, byte_tokenizer(), beta, lora, accumulation)
    with ExportProbe(namespace(tokamax)) as probe:
        trainer.train()
    logs = next(entry for entry in trainer.state.log_history if "loss" in entry)
    deltas = {n: p.detach() - before[n.removeprefix("base_model.model.")] for n, p in trainer.model.named_parameters()
              if p.requires_grad and n.removeprefix("base_model.model.") in before}
    deltas.update({n: p.detach() for n, p in trainer.model.named_parameters() if "lora_" in n})
    return {"logs": {k: v for k, v in logs.items() if k not in trainers.NOT_COMPARED}, "deltas": deltas,
            "calls": {k: v - counted[k] for k, v in distill.calls.items()},
            "ops": collections.Counter(name for name, _ in probe.calls)}


@pytest.mark.parametrize(("beta", "lora", "accumulation"), [(0.0, False, 1), (0.5, False, 1), (1.0, False, 1),
                                                            (0.5, True, 1), (0.5, False, 2)],
                         ids=["forward-kl", "jsd", "reverse-kl", "jsd-lora", "jsd-accumulation"])
def test_one_step_equals_trls_own_function(tokamax, beta, lora, accumulation):
    ours = _step(tokamax, beta, ours=True, lora=lora, accumulation=accumulation)
    theirs = _step(tokamax, beta, ours=False, lora=lora, accumulation=accumulation)
    assert {"loss", "entropy"} <= ours["logs"].keys(), sorted(ours["logs"])
    assert ours["calls"] == {"kernel": accumulation, "trl": 0}, ours["calls"]
    assert theirs["calls"] == {"kernel": 0, "trl": accumulation}, theirs["calls"]
    op = "distill_loss_grad_x" if lora else "distill_loss_grads"  # a frozen head: dx alone
    # the backward scales each gradient the forward made by the loss's cotangent in one exported pass: dx, and dW
    # where the head trains (torch_ops/_forward_grads.py)
    assert ours["ops"] == {op: accumulation, "forward_grads_scale": accumulation * (1 if lora else 2)}, ours["ops"]
    assert not theirs["ops"], theirs["ops"]
    trainers.assert_same_step(ours, theirs)


def test_a_call_the_kernel_cannot_serve_runs_trls_function_and_says_why_once(tokamax):
    """A served student computing in float16: TRL's own function runs (same numbers as calling it), with one
    warning naming the dtype; a student never served runs TRL's function without a word."""
    import trl.trainer.distillation_trainer as trainer_module

    distill = importlib.import_module(f"{tokamax.__name__}.integrations.trl.distill")
    student, other = torch.nn.Linear(64, trainers.VOCAB, bias=False), torch.nn.Linear(64, trainers.VOCAB, bias=False)
    served = torch.nn.Module()
    served.get_output_embeddings = lambda: student
    distill.serve(served)
    assert isinstance(trainer_module.ChunkedDivergenceFunction, distill.Dispatcher)
    torch.manual_seed(0)
    hidden_s, hidden_t = torch.randn(1, 5, 64), torch.randn(1, 5, 96)
    teacher = torch.randn(trainers.VOCAB, 96)
    mask = torch.ones(1, 5)

    def loss(weight, h=hidden_s):  # noqa: ANN001, ANN202
        return trainer_module._chunked_divergence_loss(h, hidden_t, weight, teacher, mask, 0.5)[0]

    before = dict(distill.calls)
    with pytest.warns(UserWarning, match=r"^tokamax use_fused_loss: DistillationTrainer's divergence runs TRL's own "
                                         r"function: the student computes in torch\.float16; the kernel takes "
                                         r"bfloat16 and float32$"):
        half = loss(student.weight.half(), hidden_s.half())  # not the served weight: TRL's, quietly
        assert distill.calls["trl"] == before["trl"] + 1
        student.weight.data = student.weight.data.half()
        half = loss(student.weight, hidden_s.half())
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss(student.weight, hidden_s.half())  # said once
        loss(other.weight)
    assert distill.calls == {"kernel": before["kernel"], "trl": before["trl"] + 4}
    want = trainer_module._chunked_divergence_loss.__wrapped__(hidden_s.half(), hidden_t, student.weight, teacher,
                                                               mask, 0.5)[0]
    torch.testing.assert_close(half, want)


@pytest.mark.parametrize("case", ["negative-soft-cap", "past-vmem"])
def test_a_call_the_op_refuses_runs_trls_function_and_says_why_once(tokamax, case):
    """Calls the kernel would refuse (a negative soft cap, which TRL computes with; hidden sizes whose smallest
    blocks fit no VMEM of the chip) passed the fallback's own checks and raised from the op, where the docstring
    promises TRL's own function: the fallback now asks the op's own checks, so TRL's function runs (the same
    numbers as calling it), with one warning quoting the op's refusal."""
    import trl.trainer.distillation_trainer as trainer_module

    distill = importlib.import_module(f"{tokamax.__name__}.integrations.trl.distill")
    hidden, options = (64, {"student_final_logit_softcapping": -2.0}) if case == "negative-soft-cap" else (65536, {})
    said = (r"student_soft_cap must be > 0 or None, got -2\.0" if case == "negative-soft-cap"
            else r"hidden sizes of 65536 \(student\) and 96 \(teacher\) need \d+ bytes of VMEM")
    student = torch.nn.Linear(hidden, trainers.VOCAB, bias=False).to(torch.bfloat16)
    served = torch.nn.Module()
    served.get_output_embeddings = lambda: student
    distill.serve(served)
    torch.manual_seed(0)
    hidden_s, hidden_t = torch.randn(1, 5, hidden, dtype=torch.bfloat16), torch.randn(1, 5, 96)
    teacher, mask = torch.randn(trainers.VOCAB, 96), torch.ones(1, 5)
    before = dict(distill.calls)
    with pytest.warns(UserWarning, match=r"^tokamax use_fused_loss: DistillationTrainer's divergence runs TRL's own "
                                         r"function: the kernel refuses the call \(tokamax distillation_divergence: "
                                         + said):
        got = trainer_module._chunked_divergence_loss(hidden_s, hidden_t, student.weight, teacher, mask, 0.5,
                                                      **options)[0]
    assert distill.calls == {"kernel": before["kernel"], "trl": before["trl"] + 1}
    want = trainer_module._chunked_divergence_loss.__wrapped__(hidden_s, hidden_t, student.weight, teacher, mask, 0.5,
                                                               **options)[0]
    torch.testing.assert_close(got, want)


def test_names_bound_at_the_students_first_forward_after_trl_is_imported(tokamax, monkeypatch):
    """`use_fused_loss(student)` before TRL's trainer module is imported: a forward pre-hook binds TRL's two
    names at the student's next forward once it is, then removes itself."""
    import sys

    import trl.trainer.distillation_trainer as trainer_module

    distill = importlib.import_module(f"{tokamax.__name__}.integrations.trl.distill")
    original = trainer_module.ChunkedDivergenceFunction
    original = getattr(original, "original", original)
    loss = trainer_module._chunked_divergence_loss
    monkeypatch.setattr(trainer_module, "ChunkedDivergenceFunction", original)
    monkeypatch.setattr(trainer_module, "_chunked_divergence_loss", getattr(loss, "_tokamax_original", loss))
    monkeypatch.delitem(sys.modules, distill.MODULE)
    net = trainers.model("sdpa")
    tokamax.use_fused_loss(net)
    assert trainer_module.ChunkedDivergenceFunction is original  # nothing to bind yet
    hooks = len(net._forward_pre_hooks)
    monkeypatch.setitem(sys.modules, distill.MODULE, trainer_module)
    net(input_ids=torch.tensor([[3, 4, 5]]))
    assert isinstance(trainer_module.ChunkedDivergenceFunction, distill.Dispatcher)
    assert hasattr(trainer_module._chunked_divergence_loss, "_tokamax_original")
    assert len(net._forward_pre_hooks) == hooks - 1
