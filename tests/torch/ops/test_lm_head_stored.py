"""`lm_head_statistics` on the stored scheme (`torch_ops.lm_head.stored_ops`, `tokamax.lm_head.stored`), which the op
takes where a layout of it fits the chip's share: which calls take it and at which layout (`statistics_layout`: every
row kept, some, none under a soft cap past one chunk; not where nothing fits, not at symbolic sizes); NaN rows for
targets outside the vocabulary where they are not read, some rows kept and the others computed again; the fakes against
JAX's shapes, autograd on meta tensors, and the build's namespace. Its statistics and gradients against float64 and a
frozen head's backward are `test_lm_head.py`'s, for either scheme."""

from __future__ import annotations

import importlib

import pytest
import torch

from tests.jax.cases import rng

from . import checks
from .test_lm_head import ROWS, VOCAB, _operands


@pytest.fixture(scope="module")
def stored(tokamax):  # noqa: ANN001, ANN201
    return importlib.import_module(f"{tokamax.__name__}.torch_ops.lm_head.stored_ops")


@pytest.mark.kernels_ci
def test_the_op_takes_it_where_a_layout_fits(tokamax, stored):
    """On the v5e at Qwen3 8B's head: 2,048 rows keep every row's p in chunks of 1024, 8,192 rows keep 5,632 in
    chunks of 512, a soft cap none past one chunk and in one chunk every row's float32 logits
    (`lm_head.stored.KEPT_LOGITS`); 200,000 rows take the kernels (dx's accumulator alone is past the share);
    at symbolic sizes the kernels (the choice would specialize a graph compiled for any rows)."""
    lm_head = tokamax.lm_head
    w = torch.zeros(151936, 4096, dtype=torch.bfloat16, device="meta")

    def layout(rows: int, transform: object = lm_head.IDENTITY) -> tuple[int, int] | None:
        return stored.statistics_layout(torch.zeros(rows, 4096, dtype=torch.bfloat16, device="meta"), w, transform)

    with tokamax.emulation.emulated_chip("v5e"):
        assert layout(2048) == (1024, 2048)
        assert layout(8192) == (512, 5632)
        assert layout(2048, lm_head.LogitTransform.of(soft_cap=30.0)) == (1024, 0)
        assert layout(256, lm_head.LogitTransform.of(soft_cap=30.0)) == (256, 256)
        assert layout(200_000) is None

    seen = []

    def step(x: torch.Tensor, w: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        seen.append(stored.statistics_layout(x, w, lm_head.IDENTITY))
        return x * (1 + (seen[-1] is None))

    checks.traces_symbolically(step, torch.zeros(200, 128, device="meta"), torch.zeros(384, 128, device="meta"),
                               torch.zeros(200, dtype=torch.int32, device="meta"))
    assert seen == [None], seen


def test_targets_outside_the_vocabulary_make_nan_rows_where_they_are_not_read(ops):
    """The op called as a TPU graph calls it (the targets not read on the host): the rows of out-of-range targets
    are NaN in every statistic and pass no gradient, the other rows as with valid targets."""
    x, w, b, _ = _operands()
    wrong = torch.from_numpy(rng(58).integers(0, VOCAB, size=ROWS)).to(torch.int32)
    wrong[[5, 6]] = torch.tensor([-1, VOCAB], dtype=torch.int32)
    ok = torch.ones(ROWS, dtype=torch.bool)
    ok[[5, 6]] = False
    outs, grads = [], []
    for t in (wrong, torch.where(ok, wrong, 0)):
        stats = ops.lm_head_stats_stored_op(x, w, b, t, 1.0, False, 1.0, 32, 32)[:7]  # 32 rows kept, the rest not
        torch.where(ok, stats[1] - stats[0] + stats[6], 0.0).sum().backward()
        outs.append(stats)
        grads.append([u.grad.clone() for u in (x, w, b)])
        for u in (x, w, b):
            u.grad = None
    for name, g, expected in zip(ops.LMHeadStatistics._fields, *outs, strict=True):
        assert g[~ok].isnan().all(), name
        torch.testing.assert_close(g[ok], expected[ok], rtol=0, atol=0, msg=lambda m, n=name: f"{n}: {m}")
    for name, g, want in zip(("dx", "dw", "db"), *grads, strict=True):
        torch.testing.assert_close(g, want, rtol=0, atol=0, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.kernels_ci
def test_fakes_match_jax_shapes(ops, stored):
    x, w, b = torch.zeros(200, 128, dtype=torch.bfloat16), torch.zeros(384, 128, dtype=torch.bfloat16), torch.zeros(384)
    targets, row = torch.zeros(200, dtype=torch.int32), torch.zeros(200)
    p = torch.zeros(128, 384, dtype=torch.bfloat16)  # 128 rows kept
    checks.fake_matches_jax(ops, ops.lm_head_stats_stored_op, stored._stored_jax, x, w, b, targets, 1.0, False, 1.0,
                            64, 128)
    checks.fake_matches_jax(ops, ops.lm_head_stats_stored_bwd_op, stored._stored_bwd_jax, x, w, b, targets, p, row,
                            row, row, row, row, row, 1.0, False, 1.0, 256)
    checks.fake_matches_jax(ops, ops.lm_head_stats_stored_bwd_x_op, stored._stored_bwd_x_jax, x, w, b, targets, p,
                            row, row, row, row, row, row, 1.0, False, 1.0, 256)
    # under a soft cap the kept rows hold their float32 logits (`lm_head.stored.KEPT_LOGITS`)
    checks.fake_matches_jax(ops, ops.lm_head_stats_stored_op, stored._stored_jax, x, w, b, targets, 1 / 30, True,
                            30.0, 200, 200)
    checks.fake_matches_jax(ops, ops.lm_head_stats_stored_bwd_op, stored._stored_bwd_jax, x, w, b, targets,
                            torch.zeros(200, 384), row, row, row, row, row, row, 1 / 30, True, 30.0, 384)


@pytest.mark.kernels_ci
def test_autograd_wiring_on_meta(ops, tokamax):
    """Gradients reach hidden, weight and bias in their dtypes through the five differentiable statistics;
    log_sum_sq_probs and top1 carry none (as TRL marks them)."""
    x = torch.zeros(200, 128, dtype=torch.bfloat16, device="meta", requires_grad=True)
    w = torch.zeros(384, 128, dtype=torch.bfloat16, device="meta", requires_grad=True)
    b = torch.zeros(384, dtype=torch.bfloat16, device="meta", requires_grad=True)
    with checks.OpsSeen() as probe:
        stats = ops.lm_head_statistics(x, w, b, torch.zeros(200, dtype=torch.int32, device="meta"))
        assert [s.requires_grad for s in stats] == [True, True, True, False, True, False, True]
        (stats.log_probs + stats.mean_logit + stats.entropy + stats.sum_logits).sum().backward()
    assert probe.seen["lm_head_stats_stored"] == 1, probe.seen
    for t in (x, w, b):
        assert (t.grad.shape, t.grad.dtype) == (t.shape, t.dtype)


@pytest.mark.kernels_ci
def test_in_build_namespace(ops, tokamax):
    checks.assert_in_build_namespace(tokamax, ops.lm_head_stats_stored_op, ops.lm_head_stats_stored_bwd_op,
                                     ops.lm_head_stats_stored_bwd_x_op)
