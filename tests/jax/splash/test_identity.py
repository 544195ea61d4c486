"""`tokamax.splash` lowers to upstream's own kernel-level call: for sliding windows of 128 tokens at
1024, 4096 and 8192 tokens (the lazy `LocalMask` where upstream's public call builds a dense mask),
and causal attention with segment ids, a soft cap and sinks, forward and backward, on v5e, v6e and
v7x, the whole module is upstream's (`normalise.py` says what is normalised). So the kernel, its
blocks (upstream's Op's config choice) and its backward are upstream's; only the call differs from
upstream's public one (lazy masks, any length, the batch), and it adds nothing at these lengths.
Normalised beyond `normalise.py`: the order constants are declared in (`constants_in_order`)."""

from __future__ import annotations

import difflib

import pytest

from tests.jax.public.normalise import mosaic_count, normalise
from tests.jax.splash.cases import CASES, CHIPS, constants_in_order, lower, ours

PAIRS = [(case, chip) for case in CASES for chip in CHIPS]


@pytest.mark.parametrize(("case", "chip"), PAIRS, ids=[f"{c.id}@{chip}" for c, chip in PAIRS])
def test_lowers_to_upstreams_kernel_level_call(kernel, get, emulation, upstream_kernel_calls, case, chip):
    """With splash's dq sum as released (`dq_sum.as_released()`; test_dq_sum.py holds the port's own)."""
    with get("_src.ops.experimental.tpu.splash_attention.dq_sum").as_released():
        got = constants_in_order(normalise(lower(ours(kernel, case), case, chip, kernel.ops.config.cross_compile,
                                                 emulation)))
    want = upstream_kernel_calls[f"{case.id}@{chip}"]
    diff = "\n".join(list(difflib.unified_diff(want.splitlines(), got.splitlines(), "upstream", "ours", n=1,
                                               lineterm=""))[:40])
    assert got == want, f"{case.id}@{chip} differs from upstream's kernel-level call:\n{diff}"
    assert mosaic_count(got) == 1, "one Mosaic kernel for the whole batch"


def test_the_comparison_sees_another_window(kernel, emulation, upstream_kernel_calls):
    """Guard against a vacuous check: a window of 64 instead of 128 gives another module."""
    import dataclasses

    case = CASES[0]
    other = constants_in_order(normalise(lower(ours(kernel, dataclasses.replace(case, window=64)), case, "v6e",
                                               kernel.ops.config.cross_compile, emulation)))
    assert other != upstream_kernel_calls[f"{case.id}@v6e"]
