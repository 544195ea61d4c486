"""Upstream's public ops inside `jax.shard_map` over 8 host CPU devices in Pallas TPU interpret mode
equal the same op on the whole arrays on one device: outputs and the gradients of sum(out^2).

- ragged dot (v1 Mosaic kernel), experts sharded: each shard its two experts' weights, rows and group
  sizes (the layout after an MoE's all-to-all); upstream's expert-parallel layout with a group offset
  needs gmm_v2, which JAX's interpreter cannot run (its lowering: test_sharded_lowering.py);
- splash attention (public op, `jax.vmap` over the batch) and flash attention, batch over "data"
  and heads over "model" (2 x 4), GQA;
- the linear softmax cross-entropy over rows (w replicated, its gradient summed over shards);
- upstream's ring attention (its kernel-level call, as its own test runs it) over the sequence on a
  ring of 4 with the heads over "model", against the public splash op on the whole sequence.

All cases run in one child process (one XLA start: tests/jax/sharded/host_devices.py), restarted
for the cases left if the interpreter stalls.
"""

from __future__ import annotations

import sys

import pytest

from tests.conftest import REPO
from tests.jax.sharded import host_devices
from tests.jax.sharded.cases import CASES

VALUE_CASES = [c for c in CASES if c.values_why_not is None]
# Silence after which the child counts as stalled: a healthy case takes 10-35 s of CPU here, several
# times that in wall time when other jobs share the two cores.
STALL_S = 300


@pytest.fixture(scope="module")
def sharded_values(kernel) -> dict:  # noqa: ANN001 - the kernel fixture checks the build exists
    return host_devices.run(sys.executable, REPO / "tests/jax/sharded/values_run.py", [c.id for c in VALUE_CASES],
                            stall_s=STALL_S)


@pytest.mark.parametrize("case", VALUE_CASES, ids=lambda c: c.id)
def test_sharded_call_on_8_host_devices_equals_the_whole_call(case, sharded_values):
    result = sharded_values[case.id]
    assert result["devices"] == 8
    expected = ["out", *(f"d{i}" for i in case.grads or ())]
    assert list(result["errors"]) == expected, result["errors"]
    rtol, atol = case.tolerance
    for name, err in result["errors"].items():
        assert err["finite"], f"{name}: non-finite values in the sharded call"
        assert err["excess"] <= 0, (f"{name}: max |sharded - whole| {err['max_abs']:.3g} over {rtol} |whole| + {atol} "
                                    f"(whole max {err['max_ref']:.3g}; {case.tolerance_why})")
