"""The chip tier's Torch mode, the parts that need no chip: the mirror's comparison (NaN and inf where the CPU has
them, integers exact, shapes), the mirror as a pytest plugin (mirrored onto CPU tensors here: every call of an op
test recorded, passed), and which files of torch-tpu's wheel the chip package keeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO
from tools.torch_chip import pack
from tools.torch_chip.mirror import compare


@pytest.mark.kernels_ci
def test_compare_bounds_the_relative_error_and_wants_the_cpus_non_finite_values():
    want = torch.tensor([1.0, -2.0, float("-inf"), 4.0])
    assert compare(want.clone(), want)[0]
    assert compare(want * (1 + 5e-3), want)[0]  # within 1e-2 (Frobenius, over the finite values)
    ok, detail = compare(want * 1.05, want)
    assert not ok and "(|tpu - cpu| 2.3e-01, |cpu| 4.6e+00)" in detail  # past the bound: the norms
    assert not compare(torch.tensor([1.0, -2.0, 0.0, 4.0]), want)[0]  # a number where the CPU has -inf
    assert not compare(torch.tensor([1.0, float("nan"), float("-inf"), 4.0]), want)[0]  # NaN where it has a number
    nan = torch.tensor([float("nan"), 1.0])
    assert compare(nan.clone(), nan)[0]  # NaN rows where the CPU has them (bad targets) are the op's contract
    assert not compare(torch.tensor([1, 2], dtype=torch.int32), torch.tensor([1, 3], dtype=torch.int32))[0]
    assert not compare(torch.zeros(2, 3), torch.zeros(3, 2))[0]
    assert not compare((torch.zeros(2),), (torch.zeros(2), torch.zeros(2)))[0]


@pytest.mark.kernels_ci
def test_batched_rpas_padding_rows_are_not_compared_but_its_live_rows_and_cache_are():
    """Rows past cu_q_lens[distribution[2]] are padding batched_rpa's contract leaves unspecified (the JAX tier's
    case compares the live rows alone); a live row off, or the cache off, still fails."""
    args = [None] * 6 + [torch.tensor([0, 1, 9], dtype=torch.int32), torch.tensor([1, 1, 2], dtype=torch.int32)]
    out, cache = torch.randn(16, 4, 8), torch.randn(8, 16, 4, 8)
    padded = out.clone()
    padded[9:] = 1e4  # whatever the kernel left there
    ok, detail = compare((padded, cache.clone()), (out, cache), "batched_rpa", tuple(args))
    assert ok and "out0's first 9 of 16 rows" in detail
    assert not compare((padded, cache.clone()), (out, cache))[0]  # another op: every row is compared
    wrong = out.clone()
    wrong[8] += 1.0
    assert not compare((wrong, cache.clone()), (out, cache), "batched_rpa", tuple(args))[0]
    assert not compare((out.clone(), cache + 1.0), (out, cache), "batched_rpa", tuple(args))[0]


@pytest.mark.kernels_ci
def test_the_chip_package_keeps_torch_2_13s_glue_and_what_every_version_shares():
    assert pack.kept("torch_tpu/_internal/pallas/pallas.py")
    assert pack.kept("torch_tpu/csrc/common/libxla_base.so")
    assert pack.kept("torch_tpu/csrc/common/glue_2_13_0/libpywrap_2_13_0_common.so")
    assert pack.kept("torch_tpu/_internal/env_2_13_0.so")
    assert not pack.kept("torch_tpu/_internal/env_2_14_0.so")
    assert not pack.kept("torch_tpu/csrc/common/glue_2_11_0/libpywrap_2_11_0_common.so")


@pytest.mark.kernels_ci
def test_the_mirror_records_every_op_call_of_a_test_run(tmp_path):
    """Run as on the chip, but mirrored onto CPU tensors (the device this host has): the grouped matmul's tests'
    calls, each compared with itself, so the plumbing (interception, copies, records) is what is checked."""
    out = tmp_path / "mirror.json"
    env = {**os.environ, "TORCH_CHIP_MIRROR": str(out), "TORCH_CHIP_DEVICE": "cpu", "JAX_PLATFORMS": "cpu"}
    tests = ["tests/torch/ops/test_ragged_dot.py", "-k", "gmm_forward_and_gradients_match_torch or is_gmm_without"]
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "tools.torch_chip.mirror", "-q", "-p",
                          "no:cacheprovider", *tests], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads(out.read_text())
    ops = {r["op"] for r in data["records"]}
    assert "gmm" in ops and data["summary"]["pytest_exit"] == 0, data["summary"]
    assert all(r["status"] == "passed" and r["impl"] == "torch-cpu" for r in data["records"]), data["records"]
