"""`ops.batched_ragged_paged_attention`: upstream's public op, refusing a page table its Mosaic kernel cannot hold.

The kernel prefetches `kv_lens`, `cu_q_lens`, `page_indices` and `distribution` into SMEM and keeps its step
schedule there too. Upstream sizes the schedule from a third of SMEM less the page table, but never below one
128-step block (`RpaConfigs.max_steps_ub`), so a page table larger than that third is not refused: the TPU compiler
fails instead ("Ran out of memory in memory space smem", the page table the largest allocation; seen for 256
sequences of 12k tokens in 16-token pages on v6e). Here the same sum is checked before the kernel is traced: the
page table's words plus the largest per-mode schedule of upstream's block sizes (upstream's default config, the
one its heuristics choose) must fit the chip's SMEM. Calls that pass their own block sizes are not checked.
"""

from __future__ import annotations

import importlib
from typing import Any

_PORTED = __name__.rsplit(".", 2)[0] + "._ported._src.ops.batched_rpa"
_MOSAIC = ("mosaic_tpu", None)


def _module(name: str) -> Any:
    return importlib.import_module(f"{_PORTED}.{name}")


def smem_bytes(queries: Any, keys: Any, kv_cache: Any, kv_lens: Any, page_indices: Any, *, kv_layout: Any = None,
               decode_query_size: int = 1, config: Any = None) -> tuple[int, int]:
    """(SMEM the kernel needs, bytes of it the page table and sequence metadata take), as upstream's kernel
    allocates them for the blocks of `config` (upstream's `Config`; its defaults when None)."""
    from jax.experimental.pallas import tpu as pltpu

    configs = _module("kernel.configs")
    config = config or _module("pallas_mosaic_tpu").Config()
    layout = configs.KVLayout[str(kv_layout or config.kv_layout).rsplit(".", 1)[-1].upper()]
    page = kv_cache.shape[4] if layout == configs.KVLayout.SEQ_ALONG_LANE else kv_cache.shape[1]
    seqs = kv_lens.shape[0]
    model = configs.ModelConfigs(num_q_heads=queries.shape[1], num_kv_heads=keys.shape[1], head_dim=queries.shape[2],
                                 sliding_window=None, sm_scale=1.0, soft_cap=None, mask_value=None)
    serve = configs.ServingConfigs(num_seqs=seqs, page_size=page, total_q_tokens=queries.shape[0],
                                   num_page_indices=page_indices.shape[0], dtype_q=queries.dtype,
                                   dtype_kv=kv_cache.dtype, dtype_out=queries.dtype, kv_layout=layout,
                                   decode_query_size=decode_query_size)
    blocks = {configs.RpaCase.DECODE: configs.BlockSizes(decode_query_size, 1, config.bkv_sz,
                                                         config.decode_batch_size, config.n_buffer),
              configs.RpaCase.PREFILL: configs.BlockSizes(config.prefill_bq_sz, config.prefill_bq_c_sz,
                                                          config.bkv_sz, config.prefill_batch_size, config.n_buffer)}
    blocks[configs.RpaCase.MIXED] = blocks[configs.RpaCase.PREFILL]
    schedule = 0
    for mode, block in blocks.items():
        c = configs.RpaConfigs(block=block, model=model, serve=serve, mode=mode,
                               vmem_limit_bytes=pltpu.get_tpu_info().vmem_capacity_bytes)
        per_step = (28 + 12 * c.bkv_p_cache + 4 * c.dma_kv_new_size * c.bkv_p_new) * block.batch_size + 20
        schedule = max(schedule, c.max_steps_ub * per_step)
    table = 4 * (2 * seqs + 1 + page_indices.shape[0] + 3) + 4 * (max(b.batch_size for b in blocks.values()) + 1)
    return table + schedule, table


def check(queries: Any, keys: Any, kv_cache: Any, kv_lens: Any, page_indices: Any, **kw: Any) -> None:
    """Refuses (ValueError) a call whose SMEM need exceeds the chip's SMEM."""
    from jax.experimental.pallas import tpu as pltpu

    need, table = smem_bytes(queries, keys, kv_cache, kv_lens, page_indices, **kw)
    capacity = pltpu.get_tpu_info().smem_capacity_bytes
    if need > capacity:
        kib = 1024
        raise ValueError(
            f"tokamax batched_ragged_paged_attention: page_indices of {page_indices.shape[0]} entries "
            f"({kv_lens.shape[0]} sequences) do not fit the chip's SMEM: the page table and sequence metadata take "
            f"{table // kib} KiB and upstream's kernel schedules {(need - table) // kib} KiB more there, against "
            f"{capacity // kib} KiB; use fewer sequences a call, larger pages, or fewer pages a sequence")


def batched_ragged_paged_attention(queries: Any, keys: Any, values: Any, kv_cache: Any, kv_lens: Any,
                                   page_indices: Any, cu_q_lens: Any, distribution: Any, **kw: Any) -> Any:
    """Upstream's `batched_ragged_paged_attention` (same arguments), after the SMEM check for its Mosaic kernel."""
    if kw.get("implementation") in _MOSAIC and kw.get("decode_block_sizes") is None:
        check(queries, keys, kv_cache, kv_lens, page_indices, kv_layout=kw.get("kv_layout"),
              decode_query_size=kw.get("decode_query_size", 1))
    return _module("api").batched_ragged_paged_attention(queries, keys, values, kv_cache, kv_lens, page_indices,
                                                         cu_q_lens, distribution, **kw)
