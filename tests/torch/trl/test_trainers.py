"""TRL 1.16's trainers as a user runs them, one step each on a tiny Qwen3 with the real LM-head kernel
in interpret mode (`tokamax.use_fused_loss(model)` before the trainer, TRL's code unchanged), against
the same step with TRL's own fused head on the same model: every logged number (the loss, entropy,
mean token accuracy, rewards, log-probabilities, ...) and every parameter's change under SGD (the
gradient) equal, and the kernel served every fused-head call of ours (TRL's function none), TRL's
every call of theirs.

SFT runs on tokamax attention (splash), with and without a LoRA adapter (PEFT; TRL patches
`get_base_model()`); DPO and KTO on sdpa, with a deep-copied reference model; GRPO trains on
`kernels-community/tokamax:flash_attention` and generates its rollouts with continuous batching on
the same name (batched RPA; upstream's reference on CPU), so both sides sample the same completions.

DPO without a reference model (TRL loads one from the policy's checkpoint): with `use_fused_loss` before
the trainer, the kernel serves that model too; after the trainer was built, the policy still trains on the
kernel (its TRL head kept) and the reference model, which TRL patched before, runs TRL's own function and
says so once.
"""

from __future__ import annotations

import importlib
import warnings

import pytest

pytest.importorskip("trl", reason="TRL is pinned in the main Torch tier only (requirements/torch-tier.in)")

from . import trainers  # noqa: E402

ATTENTION = "kernels-community/tokamax:attention"
FLASH = "kernels-community/tokamax:flash_attention"
TEXTS = ["hello world, said the kernel", "abc def ghi", "tpu kernels run in interpret mode", "fused head"]


def _sft(lora: bool):  # noqa: ANN202
    def make(net, tok):  # noqa: ANN001, ANN202
        from datasets import Dataset
        from trl import SFTConfig, SFTTrainer

        peft = None
        if lora:
            from peft import LoraConfig

            peft = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "gate_proj"], lora_dropout=0.0)
        return SFTTrainer(model=net, args=SFTConfig(max_length=40, **trainers.arguments()), peft_config=peft,
                          train_dataset=Dataset.from_dict({"text": TEXTS}), processing_class=tok)
    return make


def _dpo(net, tok):  # noqa: ANN001, ANN202
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    data = Dataset.from_dict({"prompt": ["ab", "cd"], "chosen": [" yes, surely", " ok"],
                              "rejected": [" no", " bad idea"]})
    return DPOTrainer(model=net, ref_model=trainers.deepcopied(net), train_dataset=data, processing_class=tok,
                      args=DPOConfig(max_length=32, **trainers.arguments()))


def _kto(net, tok):  # noqa: ANN001, ANN202
    from datasets import Dataset
    from trl import KTOConfig, KTOTrainer

    data = Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh"], "completion": [" yes", " no", " ok then", " bad"],
                              "label": [True, False, True, False]})
    return KTOTrainer(model=net, ref_model=trainers.deepcopied(net), train_dataset=data, processing_class=tok,
                      args=KTOConfig(max_length=32, **trainers.arguments()))


def _reward(completions, completion_ids, **kwargs):  # noqa: ANN001, ANN003, ANN202
    """A reward that differs between the samples of a prompt (a constant one gives no gradient)."""
    return [float(sum(ids) % 7) for ids in completion_ids]


def _grpo(net, tok):  # noqa: ANN001, ANN202
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    return GRPOTrainer(model=net, reward_funcs=_reward, train_dataset=Dataset.from_dict({"prompt": ["ab", "cd"]}),
                       processing_class=tok,
                       args=GRPOConfig(num_generations=2, max_completion_length=6, temperature=0.9,
                                       use_transformers_continuous_batching=True, **trainers.arguments()))


CASES = {  # name: (attention, trainer factory, metrics the step must log)
    "sft": (ATTENTION, _sft(False), {"loss", "entropy", "mean_token_accuracy"}),
    "sft-lora": (ATTENTION, _sft(True), {"loss", "entropy", "mean_token_accuracy"}),
    "dpo": ("sdpa", _dpo, {"loss", "entropy", "mean_token_accuracy", "rewards/chosen", "logits/chosen"}),
    "kto": ("sdpa", _kto, {"loss", "entropy", "kl", "logps/chosen", "logits/chosen"}),
    "grpo-continuous-batching": (FLASH, _grpo, {"loss", "entropy", "reward", "reward_std"}),
}


@pytest.fixture
def paged_calls(tokamax, monkeypatch):  # noqa: ANN001, ANN201
    """Counts the continuous-batching forwards `:flash_attention` hands to `flash_paged` (batched RPA), from any
    thread (continuous batching may generate in a thread of its own, which a dispatch mode would not see)."""
    module = importlib.import_module(f"{tokamax.__name__}.integrations.transformers.flash_attention")
    calls = []
    original = module.flash_paged

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, "flash_paged", counted)
    return calls


def _head_ops(ops: dict) -> tuple[int, int, int]:
    """(forwards, full backwards, dx-only backwards) of `lm_head_statistics`' custom ops in a step, by either of its
    schemes (the kernels', or the stored one, which these small heads without a soft cap take)."""
    def count(name: str) -> int:
        return ops.get(name, 0) + ops.get(name.replace("lm_head_stats", "lm_head_stats_stored"), 0)
    return count("lm_head_stats"), count("lm_head_stats_bwd"), count("lm_head_stats_bwd_x")


@pytest.mark.parametrize("case", list(CASES))
def test_one_step_equals_trls_own_head(tokamax, paged_calls, case):
    attention, make, logged = CASES[case]
    ours = trainers.one_step(tokamax, attention, make, ours=True)
    theirs = trainers.one_step(tokamax, attention, make, ours=False)
    assert logged <= ours["logs"].keys(), sorted(ours["logs"])
    assert ours["calls"]["kernel"] > 0 and ours["calls"]["trl"] == 0, ours["calls"]
    assert theirs["calls"]["kernel"] == 0 and theirs["calls"]["trl"] == ours["calls"]["kernel"], theirs["calls"]
    forwards, full, dx_only = _head_ops(ours["ops"])
    assert forwards == ours["calls"]["kernel"], ours["ops"]
    if case == "sft-lora":  # the head is frozen: dx alone, the weight's backward never runs
        assert dx_only >= 1 and full == 0, ours["ops"]
    else:
        assert full >= 1 and dx_only == 0, ours["ops"]
    assert _head_ops(theirs["ops"]) == (0, 0, 0), theirs["ops"]
    if attention != "sdpa":  # splash trained the model; under continuous batching, batched RPA sampled from it
        assert ours["ops"]["splash_attention"] >= 1 and ours["ops"]["splash_attention_bwd"] >= 1, ours["ops"]
    if attention == FLASH:
        assert paged_calls, "continuous batching's forwards did not reach flash_paged"
    trainers.assert_same_step(ours, theirs)


def _dpo_own_reference(net, tok):  # noqa: ANN001, ANN202
    """DPO given no ref_model: TRL loads the reference model from the policy's checkpoint."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    data = Dataset.from_dict({"prompt": ["ab", "cd"], "chosen": [" yes, surely", " ok"],
                              "rejected": [" no", " bad idea"]})
    trainer = DPOTrainer(model=net, train_dataset=data, processing_class=tok,
                         args=DPOConfig(max_length=32, **trainers.arguments()))
    assert trainer.ref_model is not None and trainer.ref_model is not net
    return trainer


@pytest.mark.parametrize("when", ["before the trainer", "after the trainer"])
def test_dpo_with_the_reference_model_trl_loads_itself(tokamax, monkeypatch, when):
    dispatch = importlib.import_module(f"{tokamax.__name__}.integrations.trl.dispatch")
    monkeypatch.setattr(dispatch, "_warned", set())  # each case sees its own warnings
    monkeypatch.setattr(dispatch, "missed", None, raising=False)  # and what use_fused_loss notes stays in it
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ours = trainers.one_step(tokamax, "sdpa", _dpo_own_reference, ours=True, build=trainers.saved,
                                 after=when == "after the trainer")
    said = [str(w.message) for w in seen if "tokamax use_fused_loss" in str(w.message)]
    theirs = trainers.one_step(tokamax, "sdpa", _dpo_own_reference, ours=False, build=trainers.saved)
    assert theirs["calls"]["kernel"] == 0 and theirs["calls"]["trl"] >= 2, theirs["calls"]  # policy and reference
    forwards, full, _ = _head_ops(ours["ops"])
    assert forwards == ours["calls"]["kernel"] and full >= 1, ours["ops"]
    assert sum(ours["calls"].values()) == theirs["calls"]["trl"], (ours["calls"], theirs["calls"])
    if when == "before the trainer":
        assert ours["calls"]["trl"] == 0 and not said, (ours["calls"], said)
    else:  # the policy on the kernel, the reference model (patched by TRL before) on TRL's own, said once
        assert ours["calls"]["kernel"] >= 1 and ours["calls"]["trl"] >= 1, ours["calls"]
        assert len(said) == 1 and "reference model" in said[0] and "before building the trainer" in said[0], said
    trainers.assert_same_step(ours, theirs)
