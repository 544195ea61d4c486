"""Page tables from what transformers' continuous batching hands the attention function.

Off CUDA transformers passes no block table, only each token's physical slot in its cache: `read_index` (every
cached and new token of every sequence, sequence after sequence, `cu_seq_lens_k` apart) when some sequence has
a cache to read, else only `write_index` (the new tokens, `cu_seq_lens_q` apart: every sequence is a fresh
prompt then). A slot is `block * block_stride + offset` in the layer's view (the stride spans a whole block,
every layer's pages), so a sequence's j-th page is block `index[start + j * page_size] // block_stride`: one
gather of those slots on the device, and only the block ids (one per page) read back to the host, where the
kernel's cache gives each block its page (`store.KernelCache.pages_of`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def page_starts(starts: Sequence[int], pages: Sequence[int], page_size: int, pages_per_seq: int
                ) -> tuple[list[int], list[int]]:
    """(positions in the index tensor, slots in the flat [seqs * pages_per_seq] page table) of each listed
    sequence's pages: sequence i (in the kernel's order) starts at `starts[i]` and has `pages[i]` pages."""
    positions, slots = [], []
    for i, (start, count) in enumerate(zip(starts, pages, strict=True)):
        positions += range(start, start + count * page_size, page_size)
        slots += range(i * pages_per_seq, i * pages_per_seq + count)
    return positions, slots


def blocks(index: torch.Tensor, positions: Sequence[int], block_stride: int) -> list[int]:
    """transformers' block ids of the pages starting at `positions` in the slot index."""
    if not positions:
        return []
    at = torch.tensor(positions, dtype=torch.int64, device=index.device)
    return torch.div(index.index_select(0, at), block_stride, rounding_mode="floor").tolist()


def page_table(pages: Sequence[int], slots: Sequence[int], size: int, device: torch.device) -> torch.Tensor:
    """The kernel's flat int32 page table [size]: `pages` at `slots`, page 0 elsewhere (the kernel never reads
    past a sequence's length; page 0 is never given to a block)."""
    table = [0] * size
    for slot, page in zip(slots, pages, strict=True):
        table[slot] = page
    return torch.tensor(table, dtype=torch.int32, device=device)
