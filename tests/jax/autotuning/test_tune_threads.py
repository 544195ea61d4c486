"""`tune` collects the bound arguments of the Ops a call's trace asks a config of by recording
`BoundArguments.default_config` while it traces. Other threads trace at the same time (a server, a data
loader, another `tune`): their Ops must not enter this call's list, and two `tune`s at once must each get
their own and leave `BoundArguments` as it was. The interleavings are forced with events (each wait
bounded, so a `tune` that serialises the other only delays it)."""

from __future__ import annotations

import importlib
import threading
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest

from tests.jax.autotuning import calls

WAIT = 5.0  # seconds: a wait the other side may never end (it is serialised behind this one)


def _call(kernel, rows: int, before=lambda: None):  # noqa: ANN001, ANN202
    """A recorded call: the ragged dot with `rows` rows, `before()` run first inside its trace."""
    def fn(lhs, rhs, sizes, token):  # noqa: ANN001, ANN202
        before()
        return kernel.ops.ragged_dot(lhs, rhs, sizes)

    specs = calls.specs()
    lhs = jax.ShapeDtypeStruct((rows, calls.LHS[1]), jnp.bfloat16)
    return SimpleNamespace(jax_fn=fn, args=(lhs, *specs[1:], ""))


def _rows(found: list) -> list[int]:
    return [ba.arguments["lhs"].shape[0] for ba in found]


def _run(target, results: dict, name: str) -> threading.Thread:  # noqa: ANN001
    def body() -> None:
        try:
            results[name] = target()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            results[name] = e

    thread = threading.Thread(target=body)
    thread.start()
    return thread


def test_two_tunes_at_once_each_get_their_own_and_restore_the_class(kernel):
    """A starts, B starts inside A's trace, A ends first, then B: before, B took A's Op for its own, missed
    its own, and left A's recorder installed on the class for good."""
    tune = importlib.import_module(f"{kernel.__name__}.tuning.tune")
    op_lib = tune._op_lib()
    original = op_lib.BoundArguments.__dict__["default_config"]
    a_tracing, b_tracing, a_done = threading.Event(), threading.Event(), threading.Event()
    call_a = _call(kernel, 128, lambda: (a_tracing.set(), b_tracing.wait(WAIT)))
    call_b = _call(kernel, 256, lambda: (b_tracing.set(), a_done.wait(WAIT)))
    results: dict = {}

    def first() -> list:
        try:
            return tune.bound_arguments(call_a, calls.CHIP)
        finally:
            a_done.set()

    a = _run(first, results, "a")
    assert a_tracing.wait(WAIT)
    b = _run(lambda: tune.bound_arguments(call_b, calls.CHIP), results, "b")
    a.join()
    b.join()
    try:
        assert not isinstance(results["a"], BaseException), results["a"]
        assert not isinstance(results["b"], BaseException), results["b"]
        assert (_rows(results["a"]), _rows(results["b"])) == ([128], [256])
        assert op_lib.BoundArguments.__dict__["default_config"] is original
    finally:
        op_lib.BoundArguments.default_config = original


def test_a_trace_in_another_thread_during_tune_is_not_recorded(kernel, emulation):
    tune = importlib.import_module(f"{kernel.__name__}.tuning.tune")
    tracing, other_done = threading.Event(), threading.Event()
    call = _call(kernel, 128, lambda: (tracing.set(), other_done.wait(WAIT)))
    results: dict = {}
    thread = _run(lambda: tune.bound_arguments(call, calls.CHIP), results, "tune")
    try:
        assert tracing.wait(WAIT)
        with calls.for_tpu(kernel.ops.config, emulation):  # this thread's own work: a ragged dot of 384 rows
            other = _call(kernel, 384)
            jax.jit(other.jax_fn, static_argnums=3).trace(*other.args)
    finally:
        other_done.set()
        thread.join()
    assert not isinstance(results["tune"], BaseException), results["tune"]
    assert _rows(results["tune"]) == [128]


@pytest.fixture(autouse=True)
def _no_recorder_left(kernel):  # noqa: ANN001, ANN202
    """Whatever a test did, `BoundArguments.default_config` is the class's own afterwards."""
    op_lib = importlib.import_module(f"{kernel.__name__}._ported._src.ops.op")
    original = op_lib.BoundArguments.__dict__["default_config"]
    yield
    op_lib.BoundArguments.default_config = original
