"""The bridge's Torch side on a CPU host (`--tiny` shapes, `--device cpu`: the kernels in Pallas TPU interpret mode on
both sides): each way's gradients against the JAX side's, and the way with its cotangent given, which the chip times
against JAX's two programs, giving the same gradients as the benchmark's float32 sum without computing that sum."""

from __future__ import annotations

import json

import pytest

from tools.torch_chip import bridge
from tools.torch_chip.impls import GIVEN
from tools.torch_chip.records import open_results


@pytest.mark.kernels_ci
@pytest.mark.parametrize("op", ["grouped_matmul", "attention"])
def test_the_op_with_its_cotangent_given_has_the_sums_gradients_and_the_jax_sides(tmp_path, op, tokamax):
    tk = tokamax  # the kernel as the tier loads it: a second copy of the bundle would register its ops again
    shapes = tuple(s for s in bridge.TINY if s.op == op)[:1]
    bridge.jax_side(tk, open_results(tmp_path / "bridge-jax.json", "bridge", "c0ffee", side="jax"), runs=2,
                    shapes=shapes)
    jax_records = bridge.read_jax(tmp_path / "bridge-jax.json")
    bridge.torch_side(tk, open_results(tmp_path / "bridge.json", "bridge", "c0ffee"), jax_records, runs=2,
                      device="cpu", shapes=shapes)
    records = json.loads((tmp_path / "bridge.json").read_text())["records"]
    by = {r["impl"]: r for r in records if r["pass"] == "fwd+bwd"}
    given, summed = by[GIVEN], by["tokamax (torch)"]
    assert given["median_s"] > 0 and given["numerics"] == "passed", given  # its gradients against the JAX side's
    assert "loss" not in given  # it computes none: its cotangent is given
    assert given["grad_norms"] == pytest.approx(summed["grad_norms"], rel=1e-6)


@pytest.mark.kernels_ci
def test_the_host_mode_splits_launch_from_wait_and_names_the_package_in_its_profile(tmp_path, tokamax):
    from tools.torch_chip import host_times

    shapes = tuple(s for s in bridge.TINY if s.op == "attention")
    host_times.host_side(tokamax, open_results(tmp_path / "host.json", "host", "c0ffee"), 2, "cpu", shapes)
    records = json.loads((tmp_path / "host.json").read_text())["records"]
    assert {(r["impl"], r["pass"]) for r in records} == {("tokamax (torch)", "fwd"), ("tokamax (torch)", "fwd+bwd"),
                                                         (GIVEN, "fwd+bwd")}
    for r in records:
        assert r["launch_s"] > 0 and r["wait_s"] >= 0 and r["median_s"] >= r["launch_min_s"], r
        ours = [row["function"] for row in r["profile"]["package"]]
        assert any(f.startswith("tokamax/torch_ops/splash_attention/api.py:") for f in ours), ours  # its own call
