"""transformers' byte view of a sliding-window allocator's blocks (`_copy_view`) over `window.WindowCache`, for
forks (`num_return_sequences > 1`) and CPU offloading, which copy whole blocks through it.

A request's k-th sliding block holds its ring slots [k * page_size, (k + 1) * page_size) (slot p % window holds
the latest position p before the request's length), and, as every transformers block, for each layer in
allocator order its keys [page, kv_heads, head_dim] then its values. Reading a block gathers those positions
from the request's pages; copying blocks in keeps them as the destination request's ring, written into pages by
position at its next forward (`WindowCache.rows`), when its position is known.
"""

from __future__ import annotations

import torch

from .checks import NAME
from .window import Request, WindowCache


class RingBytes:
    """`_copy_view` of a sliding-window allocator ([blocks, bytes_per_block]); blocks nobody holds read as zeros."""

    def __init__(self, store: WindowCache, bytes_per_block: int) -> None:
        self.store = store
        self.shape = (store.max_pages - 1, bytes_per_block)

    @property
    def device(self) -> torch.device:
        return self.store.device

    def _slots(self, request: Request, k: int) -> list[tuple[int, int, int]]:
        """(slot in block k, page, offset) of each ring slot of block k that holds a position."""
        s, out = self.store, []
        last = request.length - 1
        for slot in range(k * s.page_size, min((k + 1) * s.page_size, s.window)):
            p = last - (last - slot) % s.window  # the latest position < length at this slot
            page = request.pages.get(p // s.page_size) if p >= 0 else None
            if page is not None:
                out.append((slot - k * s.page_size, page, p % s.page_size))
        return out

    def index_select(self, dim: int, ids: torch.Tensor) -> torch.Tensor:
        assert dim == 0
        s, n = self.store, ids.shape[0]
        out = torch.zeros((n, s.page_size, len(s.layer_indices), 2, s.kv_heads, s.head_dim), dtype=s.dtype,
                          device=s.device)
        owners, at = s.owners(), []
        for i, block in enumerate(ids.tolist()):
            name, k = owners.get(block) or s.owner.get(block) or (None, 0)  # offloads read blocks already freed
            request = s.requests.get(name)
            if request is None:
                continue
            if request.ring is not None:  # copied in, not yet written to pages
                if k in request.ring:
                    out[i] = request.ring[k]
                continue
            at += [(i, *slot) for slot in self._slots(request, k)]
        if at:
            rows, slots, pages, offsets = (torch.tensor(c, device=s.device) for c in zip(*at, strict=True))
            out[rows, slots] = torch.stack([s.gather(index, pages, offsets) for index in s.layer_indices], 1)
        return out.permute(0, 2, 3, 1, 4, 5).contiguous().view(torch.uint8).reshape(n, -1)

    def index_copy_(self, dim: int, ids: torch.Tensor, source: torch.Tensor) -> RingBytes:
        assert dim == 0
        s, n = self.store, ids.shape[0]
        blocks = source.reshape(-1).view(s.dtype).reshape(n, len(s.layer_indices), 2, s.page_size, s.kv_heads,
                                                          s.head_dim)
        owners = s.owners()
        for i, block in enumerate(ids.tolist()):
            if block not in owners:
                raise RuntimeError(f"{NAME}: transformers copies into sliding-window block {block}, which no request "
                                   "holds")
            name, k = owners[block]
            request = s.requests.setdefault(name, Request())
            if request.ring is None:
                request.ring = {}
            request.ring[k] = blocks[i].permute(2, 0, 1, 3, 4).to(s.device, copy=True)  # [page, layers, 2, h, d]
        return self
