"""Public-call identity: `tokamax.ops.ragged_dot` lowers to upstream's `tokamax.ragged_dot`,
forward and through `jax.grad`, each call on one of v5e, v6e and v7x (rotating), as one whole module.

Each case is lowered on both sides with upstream's cross-compile option, the same jax, the
same emulated chip and abstract TPU mesh; `normalise.py` says what is normalised (locations,
the Op-class path in the profiling payload) and keeps everything else, Mosaic bodies included
by hash. Where upstream refuses a call, this kernel must refuse it with the same error.
"""

from __future__ import annotations

import difflib

import pytest

from tests.jax.public.cases import PublicCase, all_public_cases
from tests.jax.public.lowering import lower_public
from tests.jax.public.normalise import mosaic_count, normalise


def _one_chip_each(cases: list[PublicCase]) -> list[PublicCase]:
    """Each public call on one of its chips, the chip rotating from call to call. What differs per chip
    is held elsewhere on every chip: the config each chip's table gives every key (test_selection.py,
    against upstream's choice) and the Mosaic bodies of every kernel case (test_mosaic_identity.py);
    what this file adds, the whole public module (the call's wrapping, VJP and dispatch), does not
    depend on the chip. Upstream's side lowers every call on every chip (upstream_run.py)."""
    by_id: dict[str, list[PublicCase]] = {}
    for case in cases:
        by_id.setdefault(case.id, []).append(case)
    return [group[i % len(group)] for i, group in enumerate(by_id.values())]


CASES = _one_chip_each(all_public_cases())

# Calls upstream 0.0.17 fails and this kernel fixes (tokamax/port/port.kdl says how): the error
# upstream raises, which must still be upstream's; this kernel's lowering holds the Mosaic kernels
# (values and gradients: test_public_numerics.py).
FIXED_OVER_UPSTREAM = {
    "ragged_dot_general/mosaic/rhs-transposed/grad": ("ValueError: Custom VJP bwd rule", "so the shapes do not match"),
    "ragged_dot_general/mosaic_tpu_v2/rhs-transposed/grad": ("ValueError: Custom VJP bwd rule",
                                                             "so the shapes do not match"),
}


def _diff(ours: str, theirs: str) -> str:
    lines = difflib.unified_diff(theirs.splitlines(), ours.splitlines(), "upstream", "ours", n=1, lineterm="")
    return "\n".join(line[:400] for line in list(lines)[:40])


@pytest.mark.parametrize("case", CASES, ids=[f"{c.id}@{c.chip}" for c in CASES])
def test_public_call_lowers_to_upstreams_module(case: PublicCase, our_public_lowering, upstream_public):
    key = f"{case.id}@{case.chip}"
    if case.id in FIXED_OVER_UPSTREAM:
        error = upstream_public["errors"].get(key, "")
        assert all(part in error for part in FIXED_OVER_UPSTREAM[case.id]), \
            f"{key}: upstream no longer fails this call as recorded; drop the fix?\n{error[-600:]}"
        assert mosaic_count(normalise(our_public_lowering(case))) >= 2, f"{key}: no backward Mosaic kernels"
        return
    if key in upstream_public["errors"]:
        expected = upstream_public["errors"][key].strip().splitlines()
        message = next(line for line in reversed(expected) if ":" in line and not line.startswith((" ", "-", "For ")))
        with pytest.raises(Exception) as raised:
            our_public_lowering(case)
        assert f"{type(raised.value).__name__}: {raised.value}" == message, "upstream refused this call differently"
        return
    ours, theirs = normalise(our_public_lowering(case)), upstream_public["modules"][key]
    assert ours == theirs, f"{key}: the module differs from upstream's:\n{_diff(ours, theirs)}"
    if "/fallback/" not in case.id:
        assert mosaic_count(ours) >= 1, f"{key}: no Mosaic kernel in the module"


def test_the_comparison_sees_a_different_config(public_api, emulation, upstream_public):
    """Guard against a vacuous check: the same call with another config gives another module."""
    import dataclasses

    case = next(c for c in all_public_cases()
                if c.id == "ragged_dot/mosaic/heuristic-512x256x384g4/fwd" and c.chip == "v6e")
    retiled = public_api.ops.tpu.RaggedDot(config=public_api.ops.tpu.RaggedDotConfig(tile_m=256))

    def build(api):  # noqa: ANN001, ANN202
        return lambda lhs, rhs, sizes: api.ops.ragged_dot(lhs, rhs, sizes, implementation=[retiled])

    other = lower_public(dataclasses.replace(case, build=build), public_api, emulation)
    assert other != upstream_public["modules"][f"{case.id}@{case.chip}"]
