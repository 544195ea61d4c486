"""Every case of tests/jax/cases: interpret-mode numerics against its reference, and TPU lowering.

Numerics run in Pallas TPU interpret mode on this CPU with the case's chip emulated. Where JAX's
interpreter cannot run a kernel, the case says why and the test is a strict xfail that names the
exception and a fragment of its message: it must still fail, and fail that way (a JAX release that
lifts the limit shows up as XPASS; a numerics failure or another error fails the run).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from tests.jax.cases import Case, all_cases

CASES = all_cases()


def _numerics_params() -> list:
    params = []
    for case in CASES:
        marks = []
        if case.numerics_in:
            marks.append(pytest.mark.skip(reason=f"numerics are checked in {case.numerics_in}"))
        elif case.interpret_xfail:
            assert case.interpret_raises, f"{case.id}: an interpreter limit must name what it raises"
            marks.append(pytest.mark.xfail(reason=case.interpret_xfail, strict=True, raises=case.interpret_raises[0]))
        params.append(pytest.param(case, id=case.id, marks=marks))
    return params


def check_close(case: Case, out, expected) -> None:  # noqa: ANN001
    if case.compare is not None:
        case.compare(out, expected)
        return
    rtol, atol = case.tolerance
    out_leaves, expected_leaves = jax.tree.leaves(out), jax.tree.leaves(expected)
    assert len(out_leaves) == len(expected_leaves), f"{case.id}: output structure differs from the reference"
    for i, (o, e) in enumerate(zip(out_leaves, expected_leaves, strict=True)):
        assert o.shape == e.shape, f"{case.id}: output {i} has shape {o.shape}, reference {e.shape}"
        np.testing.assert_allclose(np.asarray(o, np.float32), np.asarray(e, np.float32), rtol=rtol, atol=atol,
                                   err_msg=f"{case.id}: output {i} ({case.tolerance_why})")


@pytest.mark.parametrize("case", _numerics_params())
def test_interpret_mode_matches_reference(case: Case, get, emulation):
    assert case.reference is not None or case.compare is not None, f"{case.id} has nothing to compare against"
    assert case.tolerance_why or case.compare, f"{case.id}: say why the tolerance fits"
    inputs = case.inputs()
    try:
        with emulation.interpret_on_cpu(case.interpret_chip):
            out = jax.jit(case.call(get))(*inputs)
    except Exception as e:
        if case.interpret_raises and isinstance(e, case.interpret_raises[0]):
            assert case.interpret_raises[1] in str(e), f"{case.id} raised {type(e).__name__}, not the declared limit"
        raise
    expected = case.reference(get)(*inputs) if case.reference else None
    check_close(case, out, expected)


@pytest.mark.kernels_ci
def test_no_declared_interpreter_limit_would_pass_a_numerics_failure():
    for case in CASES:
        if case.interpret_xfail:
            raises, fragment = case.interpret_raises
            assert not issubclass(AssertionError, raises) and fragment, f"{case.id}: {raises} would hide a failure"


@pytest.mark.parametrize(("case", "chip"), [
    pytest.param(c, chip, id=f"{c.id}@{chip}", marks=[pytest.mark.kernels_ci] if chip == c.chips[0] else [])
    for c in CASES for chip in c.chips])
def test_lowers_for_tpu(case: Case, chip: str, our_bodies):
    assert our_bodies(case, chip), f"{case.id} lowered for {chip} without a Mosaic kernel"


# Kernels that upstream builds for one TPU generation only (the reason is in their case file).
V7_ONLY = "upstream supports TPU generation 7 and later only (its supported_on and its tests)"
SINGLE_CHIP_OPS: dict[str, str] = {
    "topk": "SparseCore kernel written for 16 SparseCore lanes: v7x only",
    "ragged_gather_reduce": "SparseCore kernel that expects 16 SparseCore lanes: v7x only",
    "deepseek_rope": V7_ONLY,
    "grouped_lowrank_proj": V7_ONLY,
    "sparse_mla": V7_ONLY,
    "masked_dense_mla": V7_ONLY,
    "dsv4_compressor": V7_ONLY,
    "mla": V7_ONLY,
    "mla_swa": V7_ONLY,
    "fused_moe_decode": V7_ONLY,
    "fused_fp8_matmul": "needs an FP8 MXU, which only v7x has (fp8_matmul_supported_on)",
    "lightning_indexer": V7_ONLY + "; its top-k stage is the SparseCore topk kernel (16 SparseCore lanes)",
}


def test_every_kernel_module_has_cases_lowered_for_two_chips():
    from tests.conftest import REPO

    init = (REPO / "torch-ext/tokamax/__init__.py").read_text()
    exposed = {name.strip('",') for name in init.split("KERNEL_MODULES = (")[1].split(")")[0].split()}
    chips: dict[str, set[str]] = {}
    for c in CASES:
        chips.setdefault(c.id.split("/")[0], set()).update(c.chips)
    assert set(chips) == exposed, f"no cases for {sorted(exposed - set(chips))}; unknown {sorted(set(chips) - exposed)}"
    for op, seen in chips.items():
        assert len(seen) >= 2 or op in SINGLE_CHIP_OPS, f"{op} is lowered for {sorted(seen)} only"
