"""Page tables from what transformers' continuous batching hands the attention function (full-attention layers;
`window` lays out the sliding-window ones).

Off CUDA transformers passes no block table, only each token's physical slot in its cache: `read_index` (every
cached and new token of every sequence, sequence after sequence, `cu_seq_lens_k` apart) when some sequence has
a cache to read, else only `write_index` (the new tokens, `cu_seq_lens_q` apart: every sequence is a fresh
prompt then). A slot is `block * block_stride + offset` in the layer's view (the stride spans a whole block,
every layer's pages), so a sequence's j-th page is block `index[start + j * page_size] // block_stride`: one
gather of those slots on the device, and only the block ids (one per page) read back to the host, where the
kernel's cache gives each block its page (`store.KernelCache.pages_of`). `page_table` packs any layout's rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def page_starts(starts: Sequence[int], pages: Sequence[int], page_size: int) -> list[int]:
    """Positions in the index tensor of each listed sequence's pages: sequence i starts at `starts[i]` and has
    `pages[i]` pages."""
    positions = []
    for start, count in zip(starts, pages, strict=True):
        positions += range(start, start + count * page_size, page_size)
    return positions


def blocks(index: torch.Tensor, positions: Sequence[int], block_stride: int) -> list[int]:
    """transformers' block ids of the slots at `positions` in the slot index."""
    if not positions:
        return []
    at = torch.tensor(positions, dtype=torch.int64, device=index.device)
    return torch.div(index.index_select(0, at), block_stride, rounding_mode="floor").tolist()


def page_table(rows: Sequence[Sequence[int]], per_seq: int, seqs: int, device: torch.device) -> torch.Tensor:
    """The kernel's flat int32 page table [seqs * per_seq]: row i (sequence i's pages, in order) from
    i * per_seq on, page 0 elsewhere (the kernel never reads past a sequence's length; page 0 is never given
    out)."""
    table = [0] * (seqs * per_seq)
    for i, row in enumerate(rows):
        table[i * per_seq:i * per_seq + len(row)] = row
    return torch.tensor(table, dtype=torch.int32, device=device)
