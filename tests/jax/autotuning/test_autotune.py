"""`ops.autotune` on a ragged dot, in Pallas TPU interpret mode on this CPU host.

Interpret-mode timings say nothing about a TPU: these tests check the machinery (the search space,
the result, the config choice order inside and outside `with result:`), never which config won.
"""

from __future__ import annotations

import dataclasses
import importlib

import jax
import pytest

from tests.jax.autotuning import calls
from tests.jax.public.normalise import normalise


def _module(fn, kernel, emulation) -> str:  # noqa: ANN001
    return normalise(calls.lower(fn, kernel.ops.config, emulation))


@pytest.mark.kernels_ci
def test_autotune_times_every_candidate_and_chooses_one_of_them(tuned):
    result, space = tuned["result"], tuned["space"]
    assert result.device_kind == calls.DEVICE_KIND  # the chip of the abstract mesh, not the CPU host
    ((bound, data),) = result.data
    assert type(bound.op).__name__ == "PallasMosaicTpuRaggedDot" and bound.op.config is None
    assert len(space) >= 2 and set(data) == space  # every candidate was compiled and run
    timings = data.prune_errors()
    assert set(timings) == space, f"candidates failed: {[c for c in space if c not in timings]}"
    assert all(len(t.evaluation_times_ms) == 5 and t.median_evaluation_time_ms > 0 for t in timings.values())
    assert data.fastest_config in space
    assert data.fastest_config == min(timings, key=lambda c: timings[c].median_evaluation_time_ms)


@pytest.mark.kernels_ci
def test_inside_the_result_the_call_lowers_to_the_chosen_config_and_outside_to_the_heuristic(
        tuned, kernel, emulation, ragged_op_class):
    result = tuned["result"]
    chosen = result.data[0][1].fastest_config
    with result:
        inside = _module(calls.public_call(kernel.ops), kernel, emulation)
    outside = _module(calls.public_call(kernel.ops), kernel, emulation)
    assert inside == _module(calls.explicit_call(kernel.ops, ragged_op_class, chosen), kernel, emulation)
    assert outside == _module(calls.explicit_call(kernel.ops, ragged_op_class, tuned["heuristic"]), kernel, emulation)


@pytest.mark.kernels_ci
def test_a_result_naming_any_candidate_steers_the_call_to_it(tuned, kernel, emulation, ragged_op_class):
    """The autotuned result holds every candidate; one narrowed to each non-heuristic candidate (its own
    measured timings) must steer the public call there, whole module, and a loaded copy must too."""
    autotuner = importlib.import_module(f"{kernel.__name__}._ported._src.autotuning.autotuner")
    ((bound, data),) = tuned["result"].data
    outside = _module(calls.public_call(kernel.ops), kernel, emulation)
    others = [c for c in sorted(tuned["space"], key=repr) if c != tuned["heuristic"]]
    assert others
    for config in others[:2]:
        only = autotuner.AutotuningData({config: data[config]})
        narrowed = dataclasses.replace(tuned["result"], data=((bound, only),))
        explicit = _module(calls.explicit_call(kernel.ops, ragged_op_class, config), kernel, emulation)
        assert explicit != outside, f"{config} lowers as the heuristic config does; the check would be vacuous"
        for result in (narrowed, kernel.ops.AutotuningResult.loads(narrowed.dumps())):
            with result:
                assert _module(calls.public_call(kernel.ops), kernel, emulation) == explicit, config


@pytest.mark.kernels_ci
def test_results_stack_innermost_first_and_a_caller_config_still_wins(tuned, kernel, emulation, ragged_op_class):
    autotuner = importlib.import_module(f"{kernel.__name__}._ported._src.autotuning.autotuner")
    ((bound, data),) = tuned["result"].data
    first, second = [c for c in sorted(tuned["space"], key=repr) if c != tuned["heuristic"]][:2]
    one = lambda c: dataclasses.replace(tuned["result"], data=((bound, autotuner.AutotuningData({c: data[c]})),))  # noqa: E731
    explicit = lambda c: _module(calls.explicit_call(kernel.ops, ragged_op_class, c), kernel, emulation)  # noqa: E731
    with one(first):
        with one(second):
            assert _module(calls.public_call(kernel.ops), kernel, emulation) == explicit(second)
        assert _module(calls.public_call(kernel.ops), kernel, emulation) == explicit(first)
        assert explicit(tuned["heuristic"]) != explicit(first)
        assert _module(calls.explicit_call(kernel.ops, ragged_op_class, tuned["heuristic"]), kernel, emulation) == \
            explicit(tuned["heuristic"])  # the caller's config first, as upstream orders the choice


@pytest.mark.kernels_ci
def test_bound_arguments_autotune_caches_its_result_for_later_calls(tuned, kernel, emulation, ragged_op_class):
    """`BoundArguments.autotune(configs, cache_results=True)` stores the result over the shipped table
    in this process, as upstream's does (the table here is a read-only file: stored over, not in it)."""
    bound = tuned["bound"]
    config = [c for c in sorted(tuned["space"], key=repr) if c != tuned["heuristic"]][0]
    table = bound.op.replace(vjp=None).get_autotuning_cache(calls.DEVICE_KIND)
    try:
        with kernel.ops.config.cross_compile(True), emulation.interpret_on_cpu(calls.CHIP), \
                jax.sharding.use_abstract_mesh(emulation.tpu_mesh(calls.CHIP)):
            data = bound.autotune({config}, cache_results=True)
        assert set(data) == {config} and data.fastest_config == config
        inside = _module(calls.public_call(kernel.ops), kernel, emulation)
        assert inside == _module(calls.explicit_call(kernel.ops, ragged_op_class, config), kernel, emulation)
    finally:
        del table[bound.autotuning_cache_key]
    assert _module(calls.public_call(kernel.ops), kernel, emulation) == \
        _module(calls.explicit_call(kernel.ops, ragged_op_class, tuned["heuristic"]), kernel, emulation)


@pytest.mark.kernels_ci
def test_bound_arguments_go_to_json_and_back(tuned, kernel, emulation, tmp_path):
    """Upstream's parser fails on the token values of interpret-mode HLO; here the call's op and
    arguments came back from it (config stripped), and `ops.autotuning`'s JSON helpers round-trip them,
    from a lowered function too."""
    bound = tuned["bound"]
    assert bound.op.config is None and dict(bound.arguments)["lhs"].shape == calls.LHS
    with calls.for_tpu(kernel.ops.config, emulation):
        lowered = jax.jit(calls.public_call(kernel.ops)).trace(*calls.specs()).lower(lowering_platforms=("tpu",))
    path = tmp_path / "bound.json"
    kernel.ops.autotuning.bound_args_to_json(lowered, str(path))
    (back,) = kernel.ops.autotuning.bound_args_from_json_file(str(path))
    assert back.autotuning_cache_key == bound.autotuning_cache_key
    assert back.op.replace(vjp=None) == bound.op.replace(vjp=None)
