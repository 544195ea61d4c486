"""A decode step's attention as torch-tpu runs it: one kernel call plus the eager ops around it, each a launch of
its own on the chip (GRPO's rollouts were 1.70x slower with the kernel's attention than with eager attention,
2.97 s against 1.75 s for 64 tokens, when the step's bookkeeping made 22 eager ops per layer, 17 without a
mask, where transformers' eager attention makes 11; docs/torch-chip.md).
Counted with a dispatch mode over the calls transformers makes in one step of a 2-layer model with a dynamic
cache (the same mask or position ids handed to both layers); and what is derived once per step is derived again
when the mask changes in place."""

from __future__ import annotations

import types

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..ops import checks

pytestmark = pytest.mark.kernels_ci

MODULE = types.SimpleNamespace(is_causal=True)
SCALE = 128**-0.5


class _Launches(TorchDispatchMode):
    """The ops that run on the device (views, which only re-describe a tensor, left out)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if not func.is_view:
            self.ops.append(func.name())
        return func(*args, **(kwargs or {}))


def _step(kv_len: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (checks.randn(2, 4, 1, 128, seed=seed), checks.randn(2, 2, kv_len, 128, seed=seed + 1),
            checks.randn(2, 2, kv_len, 128, seed=seed + 2))


@pytest.mark.parametrize("given", ["mask", "position_ids"])
def test_a_decode_step_is_the_kernel_and_the_caches_padding(tokamax, given):
    """A left-padded batch (its mask) or an unpadded one (generate() drops the mask; the position ids say where
    the step sits), 75 keys: the first layer derives the kernel's inputs (the mask as int32, padded to the
    bucket's 128 slots; or the first position id) and pads k and v; the second pads k and v only."""
    mask = torch.ones(2, 75, dtype=torch.int64)
    mask[1, :9] = 0
    kwargs = dict(position_ids=torch.tensor([[74], [65]])) if given == "position_ids" else {}
    layers = []
    with torch.no_grad():
        for layer in range(2):
            q, k, v = _step(75, seed=10 * layer)
            with _Launches() as launches:
                tokamax.attention(MODULE, q, k, v, mask if given == "mask" else None, scaling=SCALE, **kwargs)
            layers.append(launches.ops)
    kernel = [op for op in layers[1] if "splash_attention_cache" in op]
    assert len(kernel) == 1, layers[1]
    assert sorted(op for op in layers[1] if op not in kernel) == ["aten::constant_pad_nd"] * 2, layers[1]
    assert len(layers[0]) <= 6, layers[0]  # + the mask's cast and padding (or the position's), the lengths once


def test_a_mask_changed_in_place_is_read_again(tokamax):
    """The mask is the same object in both calls; the second, after an in-place change, must see the change."""
    q, k, v = _step(75, seed=30)
    mask = torch.ones(2, 75, dtype=torch.int64)
    with torch.no_grad():
        tokamax.attention(MODULE, q, k, v, mask, scaling=SCALE)
        mask[1, :20] = 0
        got, _ = tokamax.attention(MODULE, q, k, v, mask, scaling=SCALE)
        want, _ = tokamax.attention(MODULE, q, k, v, mask.clone(), scaling=SCALE)
        unmasked, _ = tokamax.attention(MODULE, q, k, v, torch.ones_like(mask), scaling=SCALE)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert not torch.allclose(got[1], unmasked[1]), "the change did not reach the kernel"
