"""What the TRL trainer tests share: a tiny Qwen3 from a config (vocabulary 260 for the byte-level
tokenizer, head_dim 128 as the attention kernels take it), tiny datasets, one-step training
arguments (float32, no gradient checkpointing, plain SGD so that the step's parameter change is
the gradient), and `one_step`, which trains a fresh copy of the model under a trainer and reports
its logged metrics, every parameter's change, how many fused-head calls each function served and
which of the kernel's custom ops ran (in this thread: continuous batching generates in it too).
`saved(attention)` is the same model loaded from a checkpoint on disk, as TRL needs it to load a
reference model itself."""

from __future__ import annotations

import collections
import copy
import importlib
import tempfile
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
import transformers

from tests.torch.doc_models import byte_tokenizer
from tests.torch.export_probe import ExportProbe
from tests.torch.transformers.models import namespace

VOCAB = 260
# logged every step but not a property of the loss: wall-clock and bookkeeping
NOT_COMPARED = {"step_time", "learning_rate", "epoch", "grad_norm", "train_runtime", "train_samples_per_second",
                "train_steps_per_second"}


def model(attention: str) -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    config = transformers.Qwen3Config(vocab_size=VOCAB, hidden_size=128, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                                      max_position_embeddings=128, pad_token_id=1, eos_token_id=0, bos_token_id=None,
                                      tie_word_embeddings=False, attention_dropout=0.0)
    config._attn_implementation = attention
    return transformers.Qwen3ForCausalLM(config).float()


def saved(attention: str) -> transformers.PreTrainedModel:
    """`model(attention)` saved and loaded back (`config._name_or_path` names its directory, which TRL
    loads a reference model from when given none)."""
    directory = tempfile.mkdtemp()
    model(attention).save_pretrained(directory)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                               attn_implementation=attention)
    assert loaded.config._name_or_path == directory
    return loaded


def arguments(**extra: Any) -> dict[str, Any]:
    return dict(output_dir=tempfile.mkdtemp(), max_steps=1, per_device_train_batch_size=2, report_to="none",
                save_strategy="no", logging_steps=1, use_cpu=True, bf16=False, gradient_checkpointing=False,
                disable_tqdm=True, optim="sgd", learning_rate=0.5, lr_scheduler_type="constant", max_grad_norm=0.0,
                seed=0, **extra)


def one_step(tokamax: ModuleType, attention: str, make_trainer: Callable[[torch.nn.Module, Any], Any],
             ours: bool, build: Callable[[str], torch.nn.Module] = model, after: bool = False) -> dict[str, Any]:
    """One training step of a fresh tiny model (`build(attention)`; with `use_fused_loss` when `ours`, called
    after the trainer was built when `after`) under `make_trainer(model, tokenizer)`: {"logs": the step's logged
    numbers, "deltas": each trained parameter's change, "calls": the fused-head calls served by the kernel and by
    TRL's own function}."""
    dispatch = importlib.import_module(f"{tokamax.__name__}.integrations.trl.dispatch")
    net = build(attention)
    if ours and not after:
        tokamax.use_fused_loss(net)
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    counted = dict(dispatch.calls)
    trainer = make_trainer(net, byte_tokenizer())
    if ours and after:
        tokamax.use_fused_loss(net)
    with ExportProbe(namespace(tokamax)) as probe:
        trainer.train()
    logs = next(entry for entry in trainer.state.log_history if "loss" in entry)
    deltas = {n: p.detach() - before[n.removeprefix("base_model.model.")] for n, p in trainer.model.named_parameters()
              if p.requires_grad and n.removeprefix("base_model.model.") in before}
    deltas.update({n: p.detach() for n, p in trainer.model.named_parameters() if "lora_" in n})
    return {"logs": {k: v for k, v in logs.items() if k not in NOT_COMPARED},
            "deltas": deltas, "calls": {k: v - counted[k] for k, v in dispatch.calls.items()},
            "ops": collections.Counter(name for name, _ in probe.calls)}


CLEAR_MARGIN = 1e-3
"""DPO's logged rewards below which the pairs' reward margins are rounding, not preference: at the first step the
policy is its reference, so each reward (beta times their log-probability difference) is 0 up to the two heads'
rounding, and which of a pair's two rewards is larger is a coin toss (seen on a fresh machine: accuracies 0.5
against 0.0)."""


def _accuracy_is_rounding(key: str, logs: dict[str, Any]) -> bool:
    """An accuracy (a share of pairs whose chosen reward beats the rejected one) compares two rewards: where every
    logged reward is within `CLEAR_MARGIN` of 0, no pair's margin is clear of the rounding and the share says
    nothing of the numerics (the rewards themselves are compared, within the tolerance)."""
    if not key.endswith("accuracies"):
        return False
    prefix = key.rsplit("/", 1)[0]
    rewards = [float(v) for k, v in logs.items() if k.startswith(f"{prefix}/") and k != key]
    return bool(rewards) and max(map(abs, rewards)) <= CLEAR_MARGIN


def assert_same_step(got: dict[str, Any], want: dict[str, Any], rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Equal logged numbers and parameter changes (float32 on both sides: summation order only). An accuracy
    whose rewards are all rounding (`_accuracy_is_rounding`) is checked to be a share, not compared."""
    assert got["logs"].keys() == want["logs"].keys(), (sorted(got["logs"]), sorted(want["logs"]))
    for key, value in want["logs"].items():
        if _accuracy_is_rounding(key, want["logs"]) and _accuracy_is_rounding(key, got["logs"]):
            assert 0.0 <= float(got["logs"][key]) <= 1.0, (key, got["logs"][key])
            continue
        torch.testing.assert_close(torch.tensor(float(got["logs"][key])), torch.tensor(float(value)), rtol=rtol,
                                   atol=atol, msg=lambda m, k=key: f"logged {k}: {m}")
    assert got["deltas"].keys() == want["deltas"].keys() and got["deltas"]
    moved = [n for n, d in want["deltas"].items() if d.abs().max() > 0]
    assert moved, "the step changed no parameter"
    for name, delta in want["deltas"].items():
        torch.testing.assert_close(got["deltas"][name], delta, rtol=rtol, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


def deepcopied(net: torch.nn.Module) -> torch.nn.Module:
    """A reference model as a user passes one (TRL otherwise loads one from the model's path)."""
    return copy.deepcopy(net)
