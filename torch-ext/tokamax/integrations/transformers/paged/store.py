"""The KV cache in the kernel's layout, one tensor per layer, owned here and bound to transformers' cache.

transformers keeps one byte tensor for every layer, pages of K then pages of V per layer inside each block;
upstream's kernel wants each layer's cache as [pages, page_size, 2 * kv_heads, head_dim] with K and V
interleaved per head (K of head h at 2h, V at 2h + 1) and head_dim padded to the 128 lanes. The two cannot
share memory, so each layer's cache lives here, one `Pages` pool per transformers allocator (its layers share
page ids): `KernelCache` for full-attention layers, `window.WindowCache` for sliding-window ones (`binding` makes
them for a transformers cache). The op donates
the cache, so each layer's tensor is rebound to what the op returns.

Full-attention layers: transformers keeps deciding which blocks a request owns, shares and frees; each block it
hands out gets a page here (the same page in every layer's tensor) when the kernel first needs it, and the kernel
writes the new keys and values into the pages.

Pages are given out as they are used, not for every block transformers could hand out: transformers sizes its
cache from free memory (on a CPU or TPU host, from host RAM), far beyond what a run touches, and head_dim's
padding would multiply that. The tensors start at 64 pages and double when every page is in use (a page whose
block went back to transformers' pool is given out again first); a full-attention pool never outgrows
transformers' own count of blocks (+1: page 0 stays zeros, for the page table's unused entries).

transformers moves whole blocks in two places, both through its allocator's byte view `_copy_view`
(`[blocks, bytes_per_block]`; transformers 5.22 calls only `index_select`, `index_copy_` and `.device` on it):
forking a request (`num_return_sequences > 1`) and CPU offloading (`cpu_offload_space`). That view is pointed
at these tensors (`BlockBytes`, `ring.RingBytes`), so forks and offloads move the kernel's pages, in
transformers' own byte layout. transformers' own cache tensor is then released (nothing else reads it once
these caches serve the model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

LANES = 128  # the kernel pads head_dim to a multiple of the TPU's lanes
_PACKING = {torch.float32: 1, torch.bfloat16: 2}  # values per 32-bit word: the kernel's head packing
FIRST_PAGES = 64
FULL, SLIDING = "full_attention", "sliding_attention"  # transformers' allocator kinds


def align(n: int, to: int) -> int:
    return -(-n // to) * to


class Pages:
    """The kernel-layout tensors of one transformers allocator's layers and their free pages."""

    def __init__(self, allocator: Any, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device,
                 max_pages: int) -> None:
        self.allocator = allocator
        self.page_size: int = allocator.tokens_per_page
        self.block_stride: int = allocator.block_physical_stride  # read/write index // stride = block id
        self.layer_indices: list[int] = list(allocator.layer_indices)
        self.kv_heads, self.head_dim, self.dtype, self.device = kv_heads, head_dim, dtype, device
        self.max_pages = max_pages
        self.page_shape = (self.page_size, align(2 * kv_heads, _PACKING[dtype]), align(head_dim, LANES))
        self.pages = min(FIRST_PAGES, self.max_pages)
        self.layers: dict[int, torch.Tensor] = {}
        self.free: list[int] = list(range(self.pages - 1, 0, -1))  # page 0 is never given out
        self.plan: Any = None  # the step plan the layers of one forward share (attention.py)

    def layer(self, index: int) -> torch.Tensor:
        """Layer `index`'s cache, created (zeros) on first use."""
        if index not in self.layers:
            self.layers[index] = torch.zeros((self.pages, *self.page_shape), dtype=self.dtype, device=self.device)
        return self.layers[index]

    def rebind(self, index: int, tensor: torch.Tensor) -> None:
        """The cache the op returned (the one passed was donated)."""
        self.layers[index] = tensor

    def take(self, keep: Any) -> int:
        """A free page, after freeing the unused ones (`_recycle`, sparing `keep`) or growing when none is left."""
        if not self.free:
            self._recycle(keep)
        if not self.free:
            self._grow()
        return self.free.pop()

    def _recycle(self, keep: Any) -> None:
        """Frees the pages nothing uses any more (each pool knows what is in use)."""

    def _grow(self) -> None:
        """Doubles the pages (up to `max_pages`), keeping every layer's pages."""
        if self.pages >= self.max_pages:
            raise RuntimeError(f"tokamax flash_paged: all {self.pages} pages of the kernel's cache hold blocks "
                               "transformers still uses, more than its allocator has")
        grown = min(2 * self.pages, self.max_pages)
        for index, old in self.layers.items():
            new = torch.zeros((grown, *self.page_shape), dtype=self.dtype, device=self.device)
            new[:self.pages] = old
            self.layers[index] = new
        self.free = list(range(grown - 1, self.pages - 1, -1))
        self.pages = grown

    def gather(self, index: int, pages: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Layer `index`'s keys and values at (page, offset) pairs: [n, 2 (k, v), kv_heads, head_dim]."""
        rows = self.layer(index)[pages, offsets, :2 * self.kv_heads, :self.head_dim]
        return rows.unflatten(1, (self.kv_heads, 2)).transpose(1, 2)

    def scatter(self, index: int, pages: torch.Tensor, offsets: torch.Tensor, kv: torch.Tensor) -> None:
        """Writes kv [n, 2 (k, v), kv_heads, head_dim] into layer `index` at (page, offset) pairs."""
        self.layer(index)[pages, offsets, :2 * self.kv_heads, :self.head_dim] = kv.transpose(1, 2).flatten(1, 2)

    def bytes(self) -> int:
        """Bytes of every layer's cache."""
        return len(self.layer_indices) * self.pages * self.page_shape[0] * self.page_shape[1] * \
            self.page_shape[2] * self.dtype.itemsize


class KernelCache(Pages):
    """Each full-attention layer's cache in the kernel's layout: one page per transformers block."""

    def __init__(self, cache: Any, allocator: Any, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        max_pages = cache.cache_tensor.numel() // allocator.bytes_per_block + 1  # every block id, + page 0
        super().__init__(allocator, kv_heads, head_dim, dtype, device, max_pages)
        self.page_of: dict[int, int] = {}  # transformers' block id -> page

    def pages_of(self, blocks: Sequence[int]) -> list[int]:
        """The pages of transformers' `blocks`, new blocks given free pages."""
        out = []
        for block in blocks:
            page = self.page_of.get(block)
            if page is None:
                page = self.page_of[block] = self.take(set(blocks))
            out.append(page)
        return out

    def _recycle(self, keep: set[int]) -> None:
        """Frees the pages of blocks transformers no longer uses (neither a request's nor kept for sharing), but
        not those of `keep` (the blocks being given pages)."""
        used = {b for blocks in self.allocator.block_table.values() for b in blocks}
        used |= set(self.allocator.ledger.cached_blocks) | keep
        for block in [b for b in self.page_of if b not in used]:
            self.free.append(self.page_of.pop(block))


class BlockBytes:
    """transformers' byte view of the allocator's blocks (`_copy_view`, [blocks, bytes_per_block]), over the
    kernel's layer tensors: a block is, for each layer in allocator order, its page's keys [page, kv_heads,
    head_dim] then its values, as transformers lays a block out. Blocks without a page read as zeros."""

    def __init__(self, store: KernelCache, bytes_per_block: int) -> None:
        self.store = store
        self.shape = (store.max_pages - 1, bytes_per_block)

    @property
    def device(self) -> torch.device:
        return self.store.device

    def index_select(self, dim: int, ids: torch.Tensor) -> torch.Tensor:
        assert dim == 0
        s = self.store
        pages = torch.tensor([s.page_of.get(b, 0) for b in ids.tolist()], dtype=torch.int64, device=s.device)
        rows = [s.layer(i).index_select(0, pages)[:, :, :2 * s.kv_heads, :s.head_dim] for i in s.layer_indices]
        kv = torch.stack(rows, 1).unflatten(3, (s.kv_heads, 2))  # [n, layers, page, heads, k|v, dim]
        return kv.permute(0, 1, 4, 2, 3, 5).contiguous().view(torch.uint8).reshape(ids.shape[0], -1)

    def index_copy_(self, dim: int, ids: torch.Tensor, source: torch.Tensor) -> BlockBytes:
        assert dim == 0
        s, n = self.store, ids.shape[0]
        pages = torch.tensor(s.pages_of(ids.tolist()), dtype=torch.int64, device=s.device)
        blocks = source.reshape(-1).view(s.dtype).reshape(n, len(s.layer_indices), 2, s.page_size, s.kv_heads,
                                                          s.head_dim)
        for k, index in enumerate(s.layer_indices):
            rows = blocks[:, k].permute(0, 2, 3, 1, 4).flatten(2, 3)  # [n, page, 2 * heads (k, v), dim]
            full = torch.zeros((n, *s.page_shape), dtype=s.dtype, device=s.device)
            full[:, :, :2 * s.kv_heads, :s.head_dim] = rows.to(s.device)
            s.layer(index).index_copy_(0, pages, full)
        return self
