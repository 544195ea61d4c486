"""transformers' continuous-batching forward arguments, made with its own cache and allocator (no model): what
`generate_batch` hands the attention function for a chosen mix of requests, for checking `flash_paged`'s pieces
against float64 references (test_continuous_batching.py).

`Batches(config, page_size, num_blocks)` owns a real `PagedAttentionCache`; `step([(request, new_tokens), ...])`
allocates the requests' blocks and builds the keyword arguments as `ContinuousBatchingIOs` does (packed in the
given order; `read_index` only when some request has cached tokens).
"""

from __future__ import annotations

from typing import Any

import torch
import transformers
from transformers.generation.continuous_batching.cache import PagedAttentionCache
from transformers.generation.continuous_batching.distributed import DistributedHelper
from transformers.generation.continuous_batching.requests import RequestState


def paged_cache(config: transformers.PreTrainedConfig, page_size: int, num_blocks: int,
                dtype: torch.dtype = torch.float32) -> PagedAttentionCache:
    cb = transformers.ContinuousBatchingConfig(page_size=page_size, num_blocks=num_blocks, max_batch_tokens=64,
                                               max_memory_percent=0.5)
    return PagedAttentionCache(config, cb, "cpu", DistributedHelper(None, None), dtype=dtype)


class Batches:
    """Requests against one paged cache, and the forward arguments of each step."""

    def __init__(self, config: transformers.PreTrainedConfig, page_size: int, num_blocks: int,
                 dtype: torch.dtype = torch.float32) -> None:
        self.cache = paged_cache(config, page_size, num_blocks, dtype)
        self.allocator = next(iter(self.cache.cache_allocators.values()))  # the one kind the tests' models have
        self.states: dict[str, RequestState] = {}

    def past(self, request: str) -> int:
        state = self.states.get(request)
        return 0 if state is None else state.position_offset

    def step(self, work: list[tuple[str, int]]) -> dict[str, Any]:
        """The kwargs of one forward over `work` ((request, new tokens), in transformers' packing order)."""
        cu_q, cu_k, read, write = [0], [0], [], []
        reads = any(self.past(r) > 0 for r, _ in work)
        for request, new in work:
            state = self.states.setdefault(request, RequestState(request_id=request, initial_tokens=[0] * new))
            past = state.position_offset
            assert self.cache.can_store_request_tokens(state, new), f"no room for {request}"
            self.cache.extend_read_and_write_indices(request, past, new, [read] if reads else None, [write])
            state.position_offset += new
            cu_q.append(cu_q[-1] + new)
            cu_k.append(cu_k[-1] + past + new)
        i32, kind = {"dtype": torch.int32}, self.allocator.layer_type
        return dict(cu_seq_lens_q=torch.tensor(cu_q, **i32), cu_seq_lens_k={kind: torch.tensor(cu_k, **i32)},
                    max_length_q=max(n for _, n in work),
                    max_length_k={kind: max(b - a for a, b in zip(cu_k[:-1], cu_k[1:], strict=True))},
                    read_index=[torch.tensor(read, dtype=torch.int64)],
                    write_index=[torch.tensor(write, dtype=torch.int64)], block_table=None, cache=self.cache,
                    is_causal=True)

    def blocks(self, request: str) -> list[int]:
        """transformers' own block table of `request` (the ground truth the page tables must match)."""
        return list(self.allocator.block_table[request])


class Layer(torch.nn.Module):
    """What the attention function reads of an attention module."""

    def __init__(self, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx, self.is_causal = layer_idx, True
