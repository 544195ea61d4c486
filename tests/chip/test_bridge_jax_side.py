"""The bridge's JAX side on this host (`--tiny` shapes, the kernels in Pallas TPU interpret mode): its one-program
forward and backward, and the same two passes as two programs the way Torch's autograd runs them, with the same
gradients (the cotangent of the float32 sum is ones either way); splash's two programs pass the forward's
residuals, as the Torch op does, rather than recompute the forward."""

from __future__ import annotations

import json

import pytest

from tools.chip.load import package
from tools.torch_chip import bridge
from tools.torch_chip.records import open_results


@pytest.mark.kernels_ci
@pytest.mark.parametrize("op", ["grouped_matmul", "attention"])
def test_the_two_programs_give_the_one_programs_gradients(tmp_path, op):
    shapes = tuple(s for s in bridge.TINY if s.op == op)[:1]
    bridge.jax_side(package(), open_results(tmp_path / "bridge-jax.json", "bridge", "c0ffee", side="jax"), runs=2,
                    shapes=shapes)
    records = json.loads((tmp_path / "bridge-jax.json").read_text())["records"]
    one = next(r for r in records if r["impl"] == "jax" and r["pass"] == "fwd+bwd")
    two = next(r for r in records if r["impl"] == bridge.TWO_PROGRAMS)
    assert two["median_s"] > 0 and two["pipelined_s"] > 0 and two["pass"] == "fwd+bwd"
    assert two["grad_norms"] == pytest.approx(one["grad_norms"], rel=1e-6)
    # splash's backward takes the forward's residuals (as the Torch op's export does), the matmul's its inputs
    assert two["backward_takes"] == ("the forward's residuals" if op == "attention" else "the inputs")


@pytest.mark.kernels_ci
def test_the_heads_bar_is_its_loss_over_the_rows_under_jax_grad(tmp_path):
    """The LM head's JAX side also runs as training differentiates it (the loss / rows under `jax.grad`: dW scaled by
    a cotangent other than 1 and rounded once, as the Torch op's backward always does); scaled back by the rows, a
    power of two, its gradients are the direct call's."""
    shapes = tuple(s for s in bridge.TINY if s.op == "lm_head_loss")[:1]
    bridge.jax_side(package(), open_results(tmp_path / "bridge-jax.json", "bridge", "c0ffee", side="jax"), runs=2,
                    shapes=shapes)
    records = json.loads((tmp_path / "bridge-jax.json").read_text())["records"]
    one = next(r for r in records if r["impl"] == "jax" and r["pass"] == "fwd+bwd")
    scaled = next(r for r in records if r["impl"] == bridge.SCALED)
    assert scaled["median_s"] > 0 and scaled["pipelined_s"] > 0, scaled
    assert scaled["grad_norms"] == pytest.approx(one["grad_norms"], rel=1e-6)
    assert scaled["backward_takes"].startswith("the cotangent 1 / rows")
