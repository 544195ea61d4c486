"""The chip tier's padded-rows pieces on this CPU host: `moe_padded`'s workloads trace for the v5e as they will on the
chip, and the check of the rows past the groups (`check.padded_rows`) passes on the port's kernel and catches
upstream's as released (the kernel in interpret mode at a small capacity-padded shape)."""

from __future__ import annotations

import importlib

import jax
import pytest

from tools.chip import check
from tools.chip.workloads import moe_padded


@pytest.mark.kernels_ci
def test_the_padded_rows_workloads_trace_for_the_v5e(kernel, emulation):
    traced = []
    with emulation.emulated_chip("v5e"), kernel.ops.config.cross_compile(True):
        for w in moe_padded.workloads(kernel):
            fn, specs = w.make_specs()
            jax.jit(fn).trace(*specs)
            traced.append((w.case.rsplit(", ", 1)[1], w.impl, w.pass_))
    used, padded = "fully used", "1638 rows padded (10%)"
    assert sorted(traced) == sorted((c, i, p) for c in (used, padded) for i in ("tokamax", moe_padded.UNWRITTEN, "xla")
                                    for p in ("fwd", "fwd+bwd"))


@pytest.mark.kernels_ci
def test_capacity_padded_sizes_leave_rows_and_empty_experts():
    sizes = check.capacity_padded_sizes(2048, 8)
    assert sum(sizes) == 1843 and sizes[4] == 0 and sizes[7] == 0 and min(sizes[:4]) > 0


@pytest.mark.kernels_ci
def test_the_padded_rows_check_passes_and_catches_unwritten_rows(kernel, emulation):
    hook = importlib.import_module(kernel.ops.tpu.RaggedDot.__module__.rsplit(".", 1)[0] + ".tiles_hook")
    sizes = check.capacity_padded_sizes(512, 4)
    with emulation.interpret_on_cpu("v5e"), kernel.ops.config.cross_compile(True):
        ours = check.padded_rows(kernel, 512, 128, 256, sizes)
        with hook.padded_rows_unwritten():
            released = check.padded_rows(kernel, 512, 128, 256, sizes)
    assert ours.status == "passed", ours.detail
    assert released.status == "failed" and "out past the groups" in released.detail, released.detail
