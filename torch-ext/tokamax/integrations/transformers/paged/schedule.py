"""One forward's plan for the kernel, shared by its layers of one kind: which sequences, in which order, padded to
which sizes, with which page table (`arrange`; `plan` builds the full-attention layers' rows, `window.plan` the
sliding-window layers').

- Order and `distribution`: upstream's kernel runs three passes over the sequences, decode (one new token),
  prefill-only (new tokens, nothing cached) and mixed (new tokens after cached ones), each over its range of
  sequences: `distribution` is the cumulative count [decode, decode + prefill, all]. transformers packs
  sequences in its scheduler's order, so they are sorted (stably) into those three groups and the tokens
  gathered to match; the output is gathered back. Sequences with no token (transformers' padding) are dropped.
- Buckets: torch-tpu exports the op once per distinct shape, so the token count, the sequence count and the
  pages per sequence are each padded to a power of two; everything that changes per step (lengths, page ids,
  distribution) travels in tensors; small counts share the floors below (a decode batch of 3 sequences pads to
  8: no attention runs for padding, and one export serves every batch up to 8). Padding tokens sit past the last
  sequence's tokens (the kernel neither attends for them nor writes them), padding sequences past
  `distribution[2]`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from . import tables

DECODE, PREFILL, MIXED = 0, 1, 2
MIN_TOKENS, MIN_SEQS, MIN_PAGES = 8, 8, 4  # bucket floors (the kernel's decode pass takes 8 sequences a step)


def bucket(n: int, floor: int = 1) -> int:
    """The power of two at or above n, at least `floor`."""
    return max(1 << max(n - 1, 0).bit_length(), floor)


def kind(q_len: int, kv_len: int) -> int:
    """Which of the kernel's passes a sequence belongs to."""
    if q_len == 1:
        return DECODE
    return PREFILL if kv_len == q_len else MIXED


@dataclasses.dataclass
class StepPlan:
    """The kernel's metadata for one forward and the token gathers to and from its order."""

    tokens: int  # new tokens transformers passed (padding included)
    padded_tokens: int
    kv_lens: torch.Tensor  # int32 [seqs bucket]
    page_indices: torch.Tensor  # int32 [seqs bucket * pages bucket]
    cu_q_lens: torch.Tensor  # int32 [seqs bucket + 1]
    distribution: torch.Tensor  # int32 [3]
    to_kernel: torch.Tensor | None  # int64 [padded_tokens]: source token of each kernel row (None: same order)
    from_kernel: torch.Tensor | None  # int64 [tokens]: kernel row of each of transformers' tokens

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """[tokens, heads, dim] in the kernel's order, padded to the bucket."""
        if self.to_kernel is not None:
            return x.index_select(0, self.to_kernel)
        return F.pad(x, (0, 0, 0, 0, 0, self.padded_tokens - x.shape[0]))

    def back(self, out: torch.Tensor) -> torch.Tensor:
        """The kernel's output rows in transformers' token order, [tokens, heads, dim]."""
        if self.from_kernel is not None:
            return out.index_select(0, self.from_kernel)
        return out[:self.tokens]


def arrange(cu_q: Sequence[int], kv_lens: Sequence[int], tokens: int, device: torch.device,
            rows: Callable[[list[int]], list[list[int]]]) -> StepPlan:
    """The plan for a forward of `tokens` new tokens from transformers' cumulative query lengths (a host list),
    each sequence's length in the kernel's view and `rows`, which gives the kernel's pages of each sequence
    listed (in the kernel's order)."""
    q_lens = [b - a for a, b in zip(cu_q[:-1], cu_q[1:], strict=True)]
    live = [s for s, n in enumerate(q_lens) if n > 0]
    order = sorted(live, key=lambda s: kind(q_lens[s], kv_lens[s]))
    counts = [sum(kind(q_lens[s], kv_lens[s]) == k for s in order) for k in (DECODE, PREFILL, MIXED)]
    page_rows = rows(order)
    seqs, per_seq = bucket(len(order), MIN_SEQS), bucket(max(map(len, page_rows), default=1), MIN_PAGES)
    live_tokens = sum(q_lens[s] for s in order)
    padded = bucket(max(live_tokens, tokens), MIN_TOKENS)

    cu = [0]
    for s in order:
        cu.append(cu[-1] + q_lens[s])
    source = [t for s in order for t in range(cu_q[s], cu_q[s + 1])]
    same_order = source == list(range(live_tokens))
    to_kernel = from_kernel = None
    if not same_order:
        back = [0] * tokens  # transformers' padding tokens read any row: their outputs are never used
        for row, t in enumerate(source):
            back[t] = row
        to_kernel = torch.tensor(source + [0] * (padded - live_tokens), dtype=torch.int64, device=device)
        from_kernel = torch.tensor(back, dtype=torch.int64, device=device)
    i32 = {"dtype": torch.int32, "device": device}
    return StepPlan(
        tokens=tokens, padded_tokens=padded,
        kv_lens=torch.tensor([kv_lens[s] for s in order] + [0] * (seqs - len(order)), **i32),
        page_indices=tables.page_table(page_rows, per_seq, seqs, device),
        cu_q_lens=torch.tensor(cu + [cu[-1]] * (seqs - len(order)), **i32),
        distribution=torch.tensor([counts[0], counts[0] + counts[1], len(order)], **i32),
        to_kernel=to_kernel, from_kernel=from_kernel)


def plan(cu_q: Sequence[int], cu_k: Sequence[int], tokens: int, read_index: torch.Tensor,
         write_index: torch.Tensor, page_size: int, block_stride: int, device: torch.device,
         pages_of: Callable[[list[int]], list[int]] = list) -> StepPlan:
    """The plan of a forward's full-attention layers, from transformers' cumulative lengths (host lists) and
    its slot indices (device tensors) of the full-attention allocator; `pages_of` maps transformers' block ids
    to the kernel cache's pages (the identity by default)."""
    q_lens = [b - a for a, b in zip(cu_q[:-1], cu_q[1:], strict=True)]
    kv_lens = [b - a for a, b in zip(cu_k[:-1], cu_k[1:], strict=True)]
    if read_index.numel() > 0:
        index, starts = read_index, cu_k  # every token of every sequence, cache first
    else:
        if any(kv_lens[s] != n for s, n in enumerate(q_lens) if n > 0):
            raise RuntimeError("tokamax flash_paged: transformers passed no read_index although a sequence has "
                               f"cached tokens (q lengths {q_lens}, kv lengths {kv_lens})")
        index, starts = write_index, cu_q  # only fresh prompts: their new tokens are all their tokens

    def rows(order: list[int]) -> list[list[int]]:
        pages = [-(-kv_lens[s] // page_size) for s in order]
        flat = iter(pages_of(tables.blocks(index, tables.page_starts([starts[s] for s in order], pages, page_size),
                                           block_stride)))
        return [[next(flat) for _ in range(n)] for n in pages]

    return arrange(cu_q, kv_lens, tokens, device, rows)
