"""Names of the bridge's ways that both its Torch side (torch_ways, which imports torch) and the tables (which run
where torch is absent) use."""

from __future__ import annotations

GIVEN = "tokamax (torch, cotangent given)"
"""The Torch op's forward, then `out.backward(cotangent)` with the cotangent an array made once (ones: the sum's),
as JAX's two programs take theirs (`bridge.TWO_PROGRAMS`): over those, the bridge's own cost, without the
benchmark's float32 sum and the broadcast cotangent its backward makes contiguous each pass."""
