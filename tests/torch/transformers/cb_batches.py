"""transformers' continuous-batching forward arguments, made with its own cache and allocator (no model): what
`generate_batch` hands the attention function for a chosen mix of requests, for checking `flash_paged`'s pieces
against float64 references (test_continuous_batching.py).

`Batches(config, page_size, num_blocks)` owns a real `PagedAttentionCache` (one allocator per layer kind of the
config: full-attention, sliding-window); `step([(request, new_tokens), ...])` allocates the requests' blocks and
builds the keyword arguments as `ContinuousBatchingIOs` does (packed in the given order; `read_index` only when
some request has cached tokens; `position_ids` as the model passes them); `fork(parent, child)` forks as
transformers does.
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
        self.allocators = self.cache.cache_allocators  # by kind: "full_attention", "sliding_attention"
        self.allocator = next(iter(self.allocators.values()))  # the first kind (the only one of most models)
        self.states: dict[str, RequestState] = {}

    def past(self, request: str) -> int:
        state = self.states.get(request)
        return 0 if state is None else state.position_offset

    def step(self, work: list[tuple[str, int]]) -> dict[str, Any]:
        """The kwargs of one forward over `work` ((request, new tokens), in transformers' packing order)."""
        kinds = list(self.allocators)
        cu_q, positions = [0], []
        cu_k = {kind: [0] for kind in kinds}
        read, write = [[] for _ in kinds], [[] for _ in kinds]
        reads = any(self.past(r) > 0 for r, _ in work)
        for request, new in work:
            state = self.states.setdefault(request, RequestState(request_id=request, initial_tokens=[0] * new))
            past = state.position_offset
            assert self.cache.can_store_request_tokens(state, new), f"no room for {request}"
            self.cache.extend_read_and_write_indices(request, past, new, read if reads else None, write)
            state.position_offset += new
            cu_q.append(cu_q[-1] + new)
            positions += range(past, past + new)
            for kind, allocator in self.allocators.items():
                cu_k[kind].append(cu_k[kind][-1] + allocator.get_seqlen_k(past, new))
        i32 = {"dtype": torch.int32}
        return dict(cu_seq_lens_q=torch.tensor(cu_q, **i32),
                    cu_seq_lens_k={kind: torch.tensor(c, **i32) for kind, c in cu_k.items()},
                    max_length_q=max(n for _, n in work),
                    max_length_k={kind: max(b - a for a, b in zip(c[:-1], c[1:], strict=True))
                                  for kind, c in cu_k.items()},
                    read_index=[torch.tensor(r, dtype=torch.int64) for r in read],
                    write_index=[torch.tensor(w, dtype=torch.int64) for w in write],
                    position_ids=torch.tensor([positions], **i32), block_table=None, cache=self.cache,
                    is_causal=True)

    def blocks(self, request: str, kind: str | None = None) -> list[int]:
        """transformers' own block table of `request` (the ground truth the page tables must match), of the first
        allocator or of `kind`'s."""
        allocator = self.allocator if kind is None else self.allocators[kind]
        return list(allocator.block_table[request])

    def fork(self, parent: str, child: str) -> None:
        """transformers' fork of `parent` into `child` (blocks shared or copied through each allocator's view)."""
        copies = {kind: ([], []) for kind in self.allocators}
        assert self.cache.prepare_fork_request(self.states[parent], [child], copies) == [child]
        self.cache.perform_cache_copy(copies)
        self.states[child] = self.states[parent].fork(child)


class Layer(torch.nn.Module):
    """What the attention function reads of an attention module."""

    def __init__(self, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx, self.is_causal = layer_idx, True
