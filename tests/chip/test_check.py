"""The chip check's selection (`python3 -m tools.chip check --only ...`): a run too long for one command is split
by family, and a family it does not know is refused before the chip is touched."""

from __future__ import annotations

import pytest

from tools.chip import check


@pytest.mark.kernels_ci
def test_the_families_name_the_model_shapes_and_every_jax_tier_family():
    from tests.jax.cases import all_cases

    names = check.families()
    assert names[0] == check.MODELS
    assert set(names[1:]) == {c.id.split("/")[0] for c in all_cases()}
    assert {"ragged_dot", "splash_attention", "ring_attention", "batched_rpa"} <= set(names)


@pytest.mark.kernels_ci
def test_an_unknown_family_is_refused_by_name():
    with pytest.raises(ValueError, match=r"tools.chip check: no family \['splash'\]"):
        next(check.outcomes(None, {"splash"}))
