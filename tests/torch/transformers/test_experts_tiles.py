"""Issue 51 through transformers: a training step of a tiny Mixtral on tokamax's experts (`register_experts`:
`torch_ops.gmm` -> upstream's ragged dot, CPU tensors in interpret mode as `emulation.cpu_chip()`), at sizes where
`tokamax.moe.tiles` chooses tiles other than upstream's 128 x 128 x 128 (hidden 512, expert intermediate 768,
512 routed rows): every gmm, dlhs and tgmm call of the step, forward and backward, runs with the rule's tiles
(the Config upstream's Op hands its kernel, recorded at the Op's `_fwd`), and the logits and every gradient
still match transformers' eager experts."""

from __future__ import annotations

import copy
import functools
import importlib
from typing import Any

import jax
import pytest
import torch
import transformers

from tests.torch.export_probe import ExportProbe

from .models import VOCAB, namespace, tokens
from .test_training import _assert_same, _loss_and_grads

HIDDEN, INTERMEDIATE, EXPERTS, TOP_K = 512, 768, 4, 2
BATCH, LENGTH = 2, 128  # 512 routed rows


def _models(tokamax: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(eager, tokamax experts) Mixtral of one layer, equal float32 weights; attention eager on both sides."""
    config = transformers.MixtralConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=1, head_dim=128, num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K, max_position_embeddings=512, attention_dropout=0.0)
    torch.manual_seed(0)
    eager = transformers.MixtralForCausalLM(copy.deepcopy(config)).float().train()
    ours = transformers.MixtralForCausalLM(copy.deepcopy(config)).float().train()
    ours.load_state_dict(eager.state_dict())
    for model in (eager, ours):
        model.set_attn_implementation("eager")
    eager.set_experts_implementation("eager")
    ours.set_experts_implementation(tokamax.register_experts())
    return eager, ours


@pytest.fixture
def recorded(tokamax, monkeypatch) -> list[tuple]:
    """(dimension numbers, lhs, rhs, groups, Config) of each call upstream's Mosaic ragged dot traces."""
    module = importlib.import_module(f"{tokamax.__name__}._ported._src.ops.ragged_dot.pallas_mosaic_tpu")
    cls, calls = module.PallasMosaicTpuRaggedDot, []
    original = cls._fwd

    @functools.wraps(original)
    def recording(self: Any, lhs: Any, rhs: Any, *, config: Any, **kwargs: Any) -> Any:
        sizes = kwargs["group_sizes"]
        calls.append((kwargs["ragged_dot_dimension_numbers"], lhs, rhs,
                      getattr(sizes, "value", sizes).shape[0], config))
        return original(self, lhs, rhs, config=config, **kwargs)

    monkeypatch.setattr(cls, "_fwd", recording)
    jax.clear_caches()  # a trace cached by an earlier test of the same shapes would run no `_fwd`
    return calls


def test_training_step_runs_the_rules_tiles(tokamax, recorded):
    module = importlib.import_module(f"{tokamax.__name__}._ported._src.ops.ragged_dot.pallas_mosaic_tpu")
    tiles = importlib.import_module(f"{tokamax.__name__}.moe.tiles")
    roofline = importlib.import_module(f"{tokamax.__name__}.roofline")
    eager, ours = _models(tokamax)
    ids = tokens(BATCH, LENGTH, seed=51)
    reference = _loss_and_grads(eager, input_ids=ids, labels=ids)
    with ExportProbe(namespace(tokamax)) as probe:
        got = _loss_and_grads(ours, input_ids=ids, labels=ids)
    _assert_same(reference, got, torch.ones(BATCH, LENGTH, dtype=torch.bool))
    assert probe.count("gmm") == 2 and probe.count("gmm_bwd") == 2, probe.calls  # gate/up and down, each way

    chip = tokamax.emulation.cpu_chip()
    with tokamax.emulation.emulated_chip(chip):
        figures = roofline.chip()
    rows = BATCH * LENGTH * TOP_K
    seen = set()
    for dims, lhs, rhs, groups, config in recorded:
        # (kernel, m, k, n) as upstream's Config names them (tokamax.moe.tiles)
        if dims == module.DEFAULT_RAGGED_DOT_DIM_NUMS:
            call = ("gmm", *lhs.shape, rhs.shape[2])
        elif dims == module.DLHS_RAGGED_DOT_DIM_NUMS:
            call = ("dlhs", lhs.shape[0], rhs.shape[1], lhs.shape[1])
        else:
            assert dims == module.DRHS_RAGGED_DOT_DIM_NUMS, dims
            call = ("tgmm", *lhs.shape, rhs.shape[1])
        assert call[1] == rows and groups == EXPERTS and lhs.dtype == rhs.dtype == jax.numpy.float32, call
        expected = tiles.choose(*call, groups, figures, 4)
        assert tuple(expected) != (128, 128, 128), call
        assert (config.tile_m, config.tile_k, config.tile_n) == tuple(expected), f"{call}: {config}, not {expected}"
        seen.add(call)
    # Mixtral's weights are [experts, out, in]: the forward runs the transposed-rhs (dlhs) kernel, its backward
    # the plain gmm (dx) and tgmm (dw, [groups, in, out]), for gate/up (512 -> 1536) and down (768 -> 512)
    up, down = (HIDDEN, 2 * INTERMEDIATE), (INTERMEDIATE, HIDDEN)
    assert seen == {(kernel, rows, *dims) for inner, outer in (up, down) for kernel, dims in (
        ("dlhs", (outer, inner)), ("gmm", (outer, inner)), ("tgmm", (inner, outer)))}, seen
