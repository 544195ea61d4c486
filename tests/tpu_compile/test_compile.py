"""Each compile case, compiled by libtpu for its chip or pod: it compiles, or the kernel refuses it
with its own message; never a compiler error, never a tracing error."""

from __future__ import annotations

import pytest

from tools.tpu_compile import compiler
from tools.tpu_compile.case import COMPILES, KNOWN_COMPILER_ERROR
from tools.tpu_compile.cases import selected

from .conftest import EVERYTHING

CASES = selected(EVERYTHING)


def _fast(cases: list) -> set[str]:
    """The kernels_ci subset: each family's first case on v6e (or its first case)."""
    first: dict[str, str] = {}
    for case in cases:
        if case.family not in first or (case.target == "v6e" and not first[case.family].endswith("@v6e")):
            first[case.family] = case.name
    return set(first.values())


FAST = _fast(CASES)


@pytest.mark.parametrize("case", [pytest.param(c, marks=[pytest.mark.kernels_ci] if c.name in FAST else [])
                                  for c in CASES], ids=[c.name for c in CASES])
def test_case(case, kernel, record):
    outcome = compiler.compile_case(case, kernel)
    record({**outcome.row(), "family": case.family, "model": case.model, "target": case.target,
            "expect": case.expect})
    if case.expect == COMPILES:
        assert outcome.status == "compiled", f"{case.name}: {outcome.status}: {outcome.message[:2000]}"
        assert case.xla_only or outcome.hlo["tpu_custom_call"] > 0, \
            f"{case.name}: compiled with no Pallas kernel in its HLO"
        if case.check is not None:
            case.check(outcome)
    elif case.expect.startswith(KNOWN_COMPILER_ERROR):  # a known gap: fails here until it is closed
        known = case.expect.removeprefix(KNOWN_COMPILER_ERROR)
        assert outcome.status == "compiler-error" and known in outcome.message, \
            f"{case.name}: the known compiler error ({known!r}) did not happen: {outcome.status}: " \
            f"{outcome.message[:2000]}"
    else:
        assert outcome.status == "refused", f"{case.name}: expected the kernel's refusal, got {outcome.status}: " \
                                            f"{outcome.message[:2000]}"
        assert case.expect in outcome.message, f"{case.name}: refused with {outcome.message!r}"
