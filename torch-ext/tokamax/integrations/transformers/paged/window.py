"""Sliding-window layers: their cache in the kernel's layout, and the plan of a forward for them.

transformers keeps a sliding-window layer's cache as a ring per request, `ceil(window / page_size)` blocks:
position p at ring slot p % window. The kernel's page table cannot address a ring (its page j holds positions
j * page_size onwards, in order), so these layers get pages of their own here, per request and by position:
page j of a request holds its positions [j * page_size, (j + 1) * page_size). Each position has its own page,
so a chunk of new tokens never overwrites keys that its earlier queries still see: upstream's reference
scatters the new tokens into the cache before attending, its Mosaic kernel writes them back during the call
while query blocks read the cache, and in a ring of `window` tokens a chunk past the window would overwrite
keys in use (transformers reads before it writes for this reason). So no bound on the tokens per call follows
(the plan checks that no page appears twice in a call). Pages wholly before the last `window` positions are
given back, so a request holds at most `ceil(window / page_size) + 1` pages between forwards (and its chunk's
pages during one).

The kernel sees each sequence shifted by whole pages: its page 0 is the request's first page inside the first
query's window, `kv_lens` counts from there (upstream's window masks by relative position: keys k with
q - window < k <= q, as transformers' own mask), so the page table's width stays bounded by the window and
the chunk, not the sequence's length (bounded exports, and no table entries for pages before the window).

Which request each packed sequence is comes from transformers' own ring: the block its last new token is
written to (`write_index`), owned by one request (the sliding allocator shares no blocks). Where its tokens
sit comes from the full-attention layers' lengths (`cu_seq_lens_k["full_attention"]`) when the model has some,
else from `position_ids` (transformers' `range(past, past + new)` per request, passed to the attention function
by most models); `cu_seq_lens_k["sliding_attention"]` holds only windowed lengths (new + min(past, window - 1)),
which both are checked against. Forks and CPU offloading copy ring blocks (`ring.RingBytes`); a request whose
ring was copied in gets its pages at its next forward, when its position is known.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from . import schedule, tables
from .checks import NAME
from .store import FULL, Pages


@dataclasses.dataclass
class Request:
    """One request's pages of the sliding-window layers."""

    pages: dict[int, int] = dataclasses.field(default_factory=dict)  # page number j (positions j * page_size on)
    length: int = 0  # its tokens after its last forward
    ring: dict[int, torch.Tensor] | None = None  # ring blocks copied in, by ring index: [page, layers, 2, heads, dim]


class WindowCache(Pages):
    """The sliding-window layers' cache in the kernel's layout, pages given per request and position."""

    def __init__(self, cache: Any, allocator: Any, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        page = allocator.tokens_per_page
        # What positions instead of a ring can hold beyond transformers' blocks: a page per request (its window
        # need not start on a page; a request holds at least one block), and during a call each sequence's chunk
        # (a forward's tokens at most) and a page more.
        batch, blocks = cache.max_batch_tokens, cache.cache_tensor.numel() // allocator.bytes_per_block
        max_pages = 2 * blocks + 1 + -(-batch // page) + 2 * batch
        super().__init__(allocator, kv_heads, head_dim, dtype, device, max_pages)
        self.window: int = allocator.sliding_window
        self.ring_blocks = -(-self.window // page)
        self.requests: dict[str, Request] = {}
        self.owner: dict[int, tuple[str, int]] = {}  # block -> (request, ring index), as of the last forward

    def owners(self) -> dict[int, tuple[str, int]]:
        """transformers' block -> (request, index in its ring), from the allocator's block tables now."""
        return {b: (r, k) for r, blocks in self.allocator.block_table.items() for k, b in enumerate(blocks)}

    def keep_from(self, length: int) -> int:
        """The first page a request of `length` tokens keeps: the one of its last `window` positions (the ring's
        contents, for copies; the next query sees the last window - 1)."""
        return max(0, length - self.window) // self.page_size

    def _drop(self, request: Request, below: int | None = None) -> None:
        for j in [j for j in request.pages if below is None or j < below]:
            self.free.append(request.pages.pop(j))

    def _recycle(self, keep: set[str]) -> None:
        """Frees the pages of requests transformers no longer holds (finished, offloaded, reset), but not of
        `keep` (this forward's)."""
        held = set(self.allocator.block_table) | keep
        for name in [r for r in self.requests if r not in held]:
            self._drop(self.requests.pop(name))

    def start(self) -> None:
        """A forward starts: the previous one's calls are done, so every request gives back the pages before its
        last window, and the block owners are noted (an offload copies blocks after transformers freed them)."""
        for request in self.requests.values():
            if request.ring is None:
                self._drop(request, self.keep_from(request.length))
        self.owner = self.owners()

    def rows(self, name: str, past: int, length: int, keep: set[str]) -> tuple[int, list[int]]:
        """(first page in the kernel's view, the kernel's pages) of request `name` for a call adding the tokens
        past..length - 1: its pages from the first query's window on, new ones given out."""
        request = self.requests.setdefault(name, Request())
        if past == 0:
            request.ring = None  # a fresh prompt (or one reset): nothing it held counts
            self._drop(request)
        if request.ring is not None:
            self._restore(name, request, past, keep)
        self._drop(request, self.keep_from(past))
        first = max(0, past - self.window + 1) // self.page_size
        row = []
        for j in range(first, -(-length // self.page_size)):
            if j not in request.pages:
                request.pages[j] = self.take(keep)
            row.append(request.pages[j])
        request.length = length
        return first, row

    def _restore(self, name: str, request: Request, past: int, keep: set[str]) -> None:
        """Writes a copied-in ring (a fork's, an offloaded request's) into pages by position: the last `window`
        positions before `past`, position p from ring slot p % window."""
        ring, request.ring = request.ring, None
        self._drop(request)
        positions = range(max(0, past - self.window), past)
        if not positions:
            return
        ps, empty = self.page_size, torch.zeros_like(next(iter(ring.values())))
        slots = torch.cat([ring.get(k, empty) for k in range(self.ring_blocks)])  # [slots, layers, 2, heads, dim]
        for p in positions:
            if p // ps not in request.pages:
                request.pages[p // ps] = self.take(keep | {name})
        kv = slots.index_select(0, torch.tensor([p % self.window for p in positions], device=slots.device))
        pages = torch.tensor([request.pages[p // ps] for p in positions], device=self.device)
        offsets = torch.tensor([p % ps for p in positions], device=self.device)
        for i, index in enumerate(self.layer_indices):
            self.scatter(index, pages, offsets, kv[:, i].to(self.device))


def pasts(kwargs: dict, live: Sequence[int], cu_q: Sequence[int]) -> list[int]:
    """Each live sequence's cached tokens (its first new token's position): from the full-attention layers'
    lengths, else from `position_ids`."""
    cu_k = kwargs["cu_seq_lens_k"]
    full = cu_k.get(FULL) if isinstance(cu_k, dict) else None
    if full is not None:
        lengths = full.tolist()
        return [lengths[s + 1] - lengths[s] - (cu_q[s + 1] - cu_q[s]) for s in live]
    positions = kwargs.get("position_ids")
    if positions is None:
        raise NotImplementedError(
            f"{NAME}: the sliding-window layers of a model without full-attention layers need the tokens' "
            "positions, and this model passes no position_ids to its attention function; use "
            "attn_implementation='paged|eager' or 'sdpa'")
    positions = positions.reshape(-1)
    return positions.index_select(0, torch.tensor([cu_q[s] for s in live], device=positions.device)).tolist()


def plan(cache: WindowCache, kwargs: dict, tokens: int, device: torch.device) -> schedule.StepPlan:
    """The plan of a forward's sliding-window layers (see the module docstring)."""
    allocator, window, ps = cache.allocator, cache.window, cache.page_size
    cu_q = kwargs["cu_seq_lens_q"].tolist()
    cu_k = kwargs["cu_seq_lens_k"]
    cu_w = (cu_k[allocator.layer_type] if isinstance(cu_k, dict) else cu_k).tolist()
    q_lens = [b - a for a, b in zip(cu_q[:-1], cu_q[1:], strict=True)]
    live = [s for s, n in enumerate(q_lens) if n > 0]
    past = dict(zip(live, pasts(kwargs, live, cu_q), strict=True))
    for s in live:
        if cu_w[s + 1] - cu_w[s] != q_lens[s] + min(past[s], window - 1):
            raise RuntimeError(f"{NAME}: sequence {s} has {past[s]} cached tokens by its positions but a windowed "
                               f"key length of {cu_w[s + 1] - cu_w[s]} for {q_lens[s]} new tokens (window {window})")
    write_index = kwargs["write_index"][allocator.index]
    blocks = tables.blocks(write_index, [cu_q[s + 1] - 1 for s in live], cache.block_stride)  # last new tokens
    owners = cache.owners()
    names = []
    for s, block in zip(live, blocks, strict=True):
        name, k = owners.get(block, (None, -1))
        if name is None or k != ((past[s] + q_lens[s] - 1) % window) // ps:
            raise RuntimeError(f"{NAME}: sequence {s}'s last new token (position {past[s] + q_lens[s] - 1}) is "
                               f"written to block {block}, which is not at its ring slot in transformers' "
                               "sliding-window block tables")
        names.append(name)
    cache.start()
    keep, kv_lens, rows = set(names), [0] * len(q_lens), {}
    for s, name in zip(live, names, strict=True):
        first, rows[s] = cache.rows(name, past[s], past[s] + q_lens[s], keep)
        kv_lens[s] = past[s] + q_lens[s] - first * ps
    given = [page for row in rows.values() for page in row]
    if len(set(given)) != len(given):  # what makes the kernel's write-then-attend safe (module docstring)
        raise RuntimeError(f"{NAME}: a page of the sliding-window cache is in two places of one call's page table")
    return schedule.arrange(cu_q, kv_lens, tokens, device, lambda order: [rows[s] for s in order])
