"""The mask function this kernel's attention names get (`integrations/transformers/cache_masks.py`): transformers'
flash-attention masks, but a cache step's padding mask is never dropped by reading the device (`mask.all()`, a
host sync every generated token on torch-tpu: GRPO's rollouts 2.63 s against 1.62 s without it on the v5e).
Counted as `generate()` runs: each new token reads the device as often with the kernel's attention as with eager
attention (before, once more); the masks equal transformers' wherever it keeps one, and the tokens stay eager's."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

from .models import ATTENTION, pair, tokens

READS = {"aten::_local_scalar_dense", "aten::is_nonzero", "aten::item"}


class _Reads(TorchDispatchMode):
    """How many times the host read a value off a tensor (on torch-tpu: a wait for the queued work)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.count += func.name() in READS
        return func(*args, **(kwargs or {}))


def _reads(model: torch.nn.Module, new_tokens: int, **prompt: torch.Tensor) -> tuple[int, torch.Tensor]:
    with _Reads() as reads, torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                             pad_token_id=0)
    return reads.count, out


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left-padded"])
def test_each_new_token_reads_the_device_once_generates_own_stopping_check(tokamax, padded):
    """Qwen3-MoE on the kernel's attention and experts (eager's experts loop reads the device per expert), greedy:
    the tokens equal eager attention's, and each new token reads the device once, in generate's stopping check
    (`unfinished_sequences.max() == 0`); with transformers' flash masks, twice."""
    eager, ours = pair("qwen3_moe", tokamax, train=False)
    prompt = dict(input_ids=tokens(2, 21, seed=3))
    if padded:
        mask = torch.ones(2, 21, dtype=torch.int64)
        mask[1, :7] = 0
        prompt = dict(input_ids=prompt["input_ids"].masked_fill(mask == 0, 0), attention_mask=mask)
    _reads(ours, 2, **prompt)  # the first forward adopts the mask function for the model's attention name
    # a model loaded with the name again (`from_pretrained(attn_implementation=...)`, as TRL's trainers load theirs):
    # transformers registers its flash masks for the name again, as it does when it loads the kernel
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["flash_attention_2"])
    (short, _), (long, out) = _reads(ours, 3, **prompt), _reads(ours, 9, **prompt)
    assert torch.equal(out, _reads(eager, 9, **prompt)[1])
    assert (long - short) / 6 == 1, (short, long)


def test_the_masks_are_transformers_flash_masks_but_a_cache_steps_all_ones_mask_is_kept(tokamax):
    from transformers.masking_utils import flash_attention_mask

    module = importlib.import_module(f"{tokamax.__name__}.integrations.transformers.cache_masks")
    ones, padded = torch.ones(2, 30, dtype=torch.bool), torch.ones(2, 30, dtype=torch.bool)
    padded[1, :4] = False
    for q_length, kv_length in ((30, 30), (1, 30), (3, 25), (1, 64), (3, 48)):
        for mask in (ones, padded, None):
            with _Reads() as reads:
                got = module.cache_step_masks(2, q_length, kv_length, attention_mask=mask)
            want = flash_attention_mask(2, q_length, kv_length, attention_mask=mask)
            if q_length < kv_length and mask is not None and kv_length > mask.shape[1]:
                # a static cache's: padded to the cache's length (one shape every step), never read
                assert torch.equal(got, torch.cat([mask, mask.new_zeros(2, kv_length - 30)], 1)) and reads.count == 0
            elif q_length < kv_length and mask is not None:  # kept as is, never read
                assert torch.equal(got, mask[:, -kv_length:]) and reads.count == 0
            else:
                assert (got is None and want is None) or torch.equal(got, want)
