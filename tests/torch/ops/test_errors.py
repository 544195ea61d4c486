"""Every bad call in tests/errors (the Torch tier's) fails with the error docs/errors.md says, its message naming
the op and the argument."""

from __future__ import annotations

import builtins

import pytest

from tests.errors import BadInput, cases

CASES = [c for c in cases() if c.tier == "torch"]


def _id(c: BadInput) -> str:
    return f"{c.entry.removeprefix('tokamax.torch_ops.')}-{c.argument}-{c.given}"


@pytest.mark.kernels_ci
@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_a_bad_call_gets_the_documented_error(tokamax, case: BadInput):
    with pytest.raises(getattr(builtins, case.error)) as info:
        case.call(tokamax)
    assert case.message in str(info.value), f"{type(info.value).__name__}: {info.value}"


def test_the_list_is_read():
    assert len(CASES) >= 10
