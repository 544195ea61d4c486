"""`ops.batched_ragged_paged_attention` refuses a page table that does not fit SMEM beside upstream's schedule
(ops/_rpa_smem.py), before tracing the kernel, and passes smaller tables through to upstream's op.

The bound: 256 sequences in 16-token pages fit 576 pages each on v6e (the compile tier compiles it) but not 592; the
compiler's own failure at 768 pages each ("Ran out of memory in memory space smem. Used 1.18M of 1.00M") is what the
estimate reproduces: its schedule term (430 KiB) is the SMEM the compiler reported beside the page table (~436 KiB).
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import pytest

HQ, HKV, D, PAGE, SEQS = 32, 8, 128, 16, 256  # Llama 3 8B's attention, 16-token pages


def _specs(pages_per_seq: int) -> list[jax.ShapeDtypeStruct]:
    s = jax.ShapeDtypeStruct
    return [s((64, HQ, D), jnp.bfloat16), s((64, HKV, D), jnp.bfloat16), s((64, HKV, D), jnp.bfloat16),
            s((1024, PAGE, 2 * HKV, D), jnp.bfloat16), s((SEQS,), jnp.int32), s((SEQS * pages_per_seq,), jnp.int32),
            s((SEQS + 1,), jnp.int32), s((3,), jnp.int32)]


def _trace(kernel, chip: str, pages_per_seq: int, implementation: str = "mosaic_tpu") -> None:  # noqa: ANN001
    call = lambda *a: kernel.ops.batched_ragged_paged_attention(*a, sm_scale=D**-0.5,  # noqa: E731
                                                                implementation=implementation)
    with kernel.ops.config.cross_compile(True), kernel.emulation.emulated_chip(chip):
        jax.jit(call).trace(*_specs(pages_per_seq))


@pytest.mark.parametrize("chip", ["v5e", "v6e", "v7x"])
def test_refused_beyond_smem(kernel, chip):
    with pytest.raises(ValueError, match=r"tokamax batched_ragged_paged_attention: page_indices of 151552 entries "
                                         r"\(256 sequences\) do not fit the chip's SMEM"):
        _trace(kernel, chip, 592)


def test_estimate_matches_the_compiler(kernel):
    smem = importlib.import_module(f"{kernel.__name__}.ops._rpa_smem")
    with kernel.emulation.emulated_chip("v6e"):
        need, table = smem.smem_bytes(*[_specs(768)[i] for i in (0, 1, 3, 4, 5)])
    # the compiler: 768 KiB of page indices (its largest allocation), 1.18 MiB in all
    assert 768 * 1024 < table < 772 * 1024
    assert abs(need - 1.18 * 2**20) < 0.03 * 2**20, need


def test_within_smem_and_reference_pass_through(kernel):
    _trace(kernel, "v6e", 576)  # the largest accepted at this shape: traced through upstream's kernel
    _trace(kernel, "v6e", 2048, implementation="reference")  # the reference keeps no page table in SMEM
