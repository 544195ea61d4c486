"""Paged attention refuses page tables the chip's SMEM cannot hold, before tracing the kernel (the TPU compiler would
fail: "Ran out of memory in memory space smem"), and passes smaller tables through to upstream.

`ops.batched_ragged_paged_attention` refuses a page table that does not fit SMEM beside upstream's schedule
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


def _mla_specs(pages_per_seq: int) -> list[jax.ShapeDtypeStruct]:
    """DeepSeek-V3's latent attention, 16 heads (8-way TP), 128 decoding sequences in 16-token pages."""
    s, bf16, seqs = jax.ShapeDtypeStruct, jnp.bfloat16, 128
    return [s((seqs, 16, 512), bf16), s((seqs, 16, 64), bf16), s((seqs, 512), bf16), s((seqs, 64), bf16),
            s((64, 8, 2, 640), bf16), s((seqs,), jnp.int32), s((seqs * pages_per_seq,), jnp.int32),
            s((seqs + 1,), jnp.int32), s((3,), jnp.int32)]


def _trace_mla(kernel, pages_per_seq: int) -> None:  # noqa: ANN001
    call = lambda *a: kernel.ops.experimental.tpu.MultiHeadLatentAttention()(*a, sm_scale=192**-0.5)  # noqa: E731
    with kernel.ops.config.cross_compile(True), kernel.emulation.emulated_chip("v7x"):
        jax.jit(call).trace(*_mla_specs(pages_per_seq))


def test_mla_refused_beyond_smem(kernel):
    """2,048 pages a sequence: a 1 MiB page table, where the compiler reported "Exceeded smem capacity by 4.6K"."""
    with pytest.raises(ValueError, match=r"tokamax MultiHeadLatentAttention: page_indices of 262144 entries "
                                         r"\(128 sequences\) do not fit the chip's SMEM"):
        _trace_mla(kernel, 2048)


def test_mla_within_smem_named_as_upstream(kernel):
    _trace_mla(kernel, 2016)  # the boundary case the compile tier compiles
    op = kernel.ops.experimental.tpu.MultiHeadLatentAttention
    assert (op.__name__, op.__module__.rsplit("._ported.", 1)[-1]) == (
        "PallasTpuMultiHeadLatentAttention", "_src.ops.experimental.mla.pallas_mosaic_tpu")
