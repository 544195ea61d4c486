"""Serving with transformers' continuous batching on upstream's batched ragged paged attention.

`flash_paged` is what `attn_implementation="kernels-community/tokamax:flash_paged"` loads (the name must hold
"flash" for continuous batching to take it). Full-attention and sliding-window layers both run the kernel (the
window natively). Modules: `attention` (the entry point), `checks` (what is refused), `handoff` (how transformers'
cache reaches the entry point, before and since transformers 5.24), `store` (the kernel-layout KV cache per layer,
bound to transformers' cache), `tables` (page tables from transformers' slot indices), `schedule` (one forward's
plan: order, distribution, buckets), `window` (sliding-window layers: pages per request by position instead of
transformers' ring, and their plan), `ring` (transformers' ring blocks over those pages, for forks and CPU
offloading)."""

from .attention import flash_paged

__all__ = ["flash_paged"]
