"""`ops.experimental.tpu.MultiHeadLatentAttention`: upstream's MLA Op, refusing a page table its kernel cannot hold.

Upstream's kernel prefetches `page_indices`, `kv_lens` and `cu_q_lens` into SMEM and checks none of them against its
size, so 128 sequences of 32k tokens in 16-token pages (a 1 MiB page table) reach the TPU compiler, which fails:
"Ran out of memory in memory space smem. Used 1.00M of 1.00M smem. Exceeded smem capacity by 4.6K" (the page table
the largest allocation, a few KiB of scalars and spill slots beside it). The subclass keeps upstream's class name and
module, so autotuning tables, results and the op metadata in lowered modules name it as upstream does.
"""

from __future__ import annotations

from typing import Any

from .._ported._src.ops.experimental.mla import pallas_mosaic_tpu as _upstream

RESERVE_BYTES = 8 * 1024  # the kernel's other SMEM: its scalars and the register allocator's spill slots


def check(kv_lens: Any, page_indices: Any) -> None:
    """Refuses (ValueError) a page table and sequence metadata that do not fit the chip's SMEM."""
    from jax.experimental.pallas import tpu as pltpu

    table = 4 * (page_indices.shape[0] + 2 * kv_lens.shape[0] + 1)
    capacity = pltpu.get_tpu_info().smem_capacity_bytes
    if table + RESERVE_BYTES > capacity:
        kib = 1024
        raise ValueError(
            f"tokamax MultiHeadLatentAttention: page_indices of {page_indices.shape[0]} entries "
            f"({kv_lens.shape[0]} sequences) do not fit the chip's SMEM: the page table and sequence metadata take "
            f"{table // kib} KiB and the kernel needs {RESERVE_BYTES // kib} KiB more there, against "
            f"{capacity // kib} KiB; use fewer sequences a call, larger pages, or fewer pages a sequence")


class PallasTpuMultiHeadLatentAttention(_upstream.PallasTpuMultiHeadLatentAttention):
    """Upstream's Op; binding checks the page table against SMEM first."""

    def bind(self, ql_nope: Any, q_pe: Any, new_kv_c: Any, new_k_pe: Any, cache_kv: Any, kv_lens: Any,
             page_indices: Any, *args: Any, **kwargs: Any) -> Any:
        check(kv_lens, page_indices)
        return super().bind(ql_nope, q_pe, new_kv_c, new_k_pe, cache_kv, kv_lens, page_indices, *args, **kwargs)


# Named as upstream's class: autotuning keys and the op's metadata in lowered modules stay upstream's.
PallasTpuMultiHeadLatentAttention.__qualname__ = _upstream.PallasTpuMultiHeadLatentAttention.__qualname__
PallasTpuMultiHeadLatentAttention.__module__ = _upstream.__name__
