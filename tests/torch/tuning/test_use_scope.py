"""What a `tokamax.tuning.use` block covers for the Torch ops: every op call made while it is open, in any
thread (continuous batching's worker, torch-tpu's autograd thread, threads a step starts), and the
backward of every op called inside it, wherever and whenever that backward runs. Checked on meta tensors
(the ops' fake kernels: no kernel runs) by the token each custom op call receives: the token is what
steers the call's config and keys its export."""

from __future__ import annotations

import contextlib
import importlib
import threading

import pytest
import torch
import torch.distributed as dist
from torch.utils.checkpoint import checkpoint

from tests.torch import op_spy


@pytest.fixture(scope="module")
def result(tokamax):  # noqa: ANN001, ANN201
    """An empty result for v6e (steers nothing; its token is what the ops must receive)."""
    return tokamax.ops.AutotuningResult("TPU v6 lite", ())


def _tokens(op) -> contextlib.AbstractContextManager[list[str]]:  # noqa: ANN001
    """The token of every call of the Torch op `op` (a `TunedOp`) made in the block, in any thread."""
    return op_spy.arguments(op, -1)


def _splash_ops(ops):  # noqa: ANN001, ANN202
    custom = importlib.import_module(f"{ops.__name__}.splash_attention.custom_ops")
    return custom.splash_op, custom.splash_bwd_op


def _qkv(grad: bool = False) -> tuple[torch.Tensor, ...]:
    q = torch.empty(1, 2, 128, 128, device="meta", requires_grad=grad)
    k = torch.empty(1, 2, 128, 128, device="meta", requires_grad=grad)
    return q, k, torch.empty_like(k, requires_grad=grad)


def _in_thread(fn) -> None:  # noqa: ANN001
    failed: list[BaseException] = []

    def body() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            failed.append(e)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


def test_a_thread_started_inside_the_block_runs_under_it(tokamax, ops, result):
    forward, _ = _splash_ops(ops)
    with _tokens(forward) as seen, tokamax.tuning.use(result) as applied:
        _in_thread(lambda: ops.splash_attention(*_qkv()))
    assert seen == [applied.token]


def test_a_thread_of_its_own_block_keeps_its_own(tokamax, ops, result, tmp_path):
    other = tmp_path / "other.json"
    other.write_text(result.dumps() + "\n")  # the same result in other bytes: another token
    forward, _ = _splash_ops(ops)
    with _tokens(forward) as seen, tokamax.tuning.use(result) as outer:
        def own() -> None:
            with tokamax.tuning.use(other) as inner:
                ops.splash_attention(*_qkv())
                seen.append(inner.token)

        _in_thread(own)
        ops.splash_attention(*_qkv())
    assert seen[0] == seen[1] != outer.token and seen[2] == outer.token
    with _tokens(forward) as after:
        _in_thread(lambda: ops.splash_attention(*_qkv()))
    assert after == [""]  # closed: nothing applies


def test_the_backward_takes_the_forwards_result_after_the_block_and_in_another_thread(tokamax, ops, result):
    forward, backward = _splash_ops(ops)
    with _tokens(backward) as seen:
        with tokamax.tuning.use(result) as applied:
            first = ops.splash_attention(*_qkv(grad=True)).sum()
            second = ops.splash_attention(*_qkv(grad=True)).sum()
        first.backward()  # after the block
        _in_thread(second.backward)  # after the block, in a thread of its own (as torch-tpu's autograd thread)
    assert seen == [applied.token, applied.token]


def test_a_checkpointed_recompute_on_another_thread_inside_the_block_runs_under_it(tokamax, ops, result):
    forward, backward = _splash_ops(ops)
    q, k, v = _qkv(grad=True)
    def layer(q, k, v):  # noqa: ANN001, ANN202 - the product saves out: its backward, first, recomputes
        out = ops.splash_attention(q, k, v)
        return out * out

    with _tokens(forward) as forwards, _tokens(backward) as backwards, tokamax.tuning.use(result) as applied:
        loss = checkpoint(layer, q, k, v, use_reentrant=False).sum()
        _in_thread(loss.backward)  # the recompute runs where the backward runs
    assert forwards == [applied.token, applied.token] and backwards == [applied.token]


@pytest.fixture
def fake_group():  # noqa: ANN201
    """A process group of 2 fake ranks (this process is rank 0; collectives do nothing)."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        pytest.skip(reason="a process group is already initialised in this process")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_the_vocabulary_splits_backward_takes_the_forwards_result(tokamax, ops, result, fake_group):
    """The cross-entropy over a vocabulary split across ranks runs its kernels from an autograd Function of
    its own (not a custom op's autograd): its backward kernel takes the forward's result too."""
    vocab_parallel = importlib.import_module(f"{ops.__name__}._sharding.vocab_parallel")
    custom = importlib.import_module(f"{ops.__name__}.linear_softmax_cross_entropy.custom_ops")
    x = torch.empty(256, 128, device="meta", requires_grad=True)
    w = torch.empty(128, 256, device="meta", requires_grad=True)
    labels = torch.zeros(256, dtype=torch.int32, device="meta")
    valid = torch.ones(256, dtype=torch.bool, device="meta")
    with _tokens(custom.linear_softmax_cross_entropy_rows_op) as forwards, \
            _tokens(custom.linear_softmax_cross_entropy_rows_bwd_op) as backwards:
        with tokamax.tuning.use(result) as applied:
            losses, _ = vocab_parallel.vocab_parallel_rows(x, labels, valid, w, 0, fake_group)
        losses.sum().backward()
    assert forwards == [applied.token] and backwards == [applied.token]
