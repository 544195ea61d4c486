"""The mask of a splash call: causal, full, or a local window, with the query offset on the KV axis.

At an offset known when tracing, the mask is one of upstream's lazy mask objects (`CausalMask`,
`LocalMask`, `FullMask`), exactly what `make_splash_mha` takes: `schedule` builds the block-sparse
schedule upstream's mask processing would make of it (from the blocks' positions), and the kernel
computes partial blocks from its mask function, so nothing of size q_len x kv_len is ever built. At
an offset known only at run time (a KV cache filled to a level the export cannot see),
`runtime_schedule` classifies the blocks (empty, partial, full) in JAX from the queries' positions,
and the kernel computes partial blocks with the same upstream mask function from those positions
(upstream's `q_sequence`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from . import _upstream


@dataclasses.dataclass(frozen=True)
class MaskSpec:
    """Which keys a query at position p on the KV axis sees: causal (keys <= p), full (all), or a
    local window (keys in [p - left, p + right]; None is unbounded on that side)."""

    kind: str  # "causal", "full" or "local"
    left: int | None = None
    right: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("causal", "full", "local"):
            raise ValueError(f"mask kind must be causal, full or local, got {self.kind!r}")
        if self.kind == "local" and self.left is None and self.right is None:
            raise ValueError("a local window needs a left or a right size")
        for side in (self.left, self.right):
            if side is not None and side < 0:
                raise ValueError(f"window sizes must be >= 0, got ({self.left}, {self.right})")

    @classmethod
    def of(cls, causal: bool, window: tuple[int | None, int | None] | None) -> MaskSpec:
        """The mask a call names, `causal` and `window` both holding: causal (keys <= p) or full, and
        within a window (left, right) if given. A causal window clips its right side to 0 (keys in
        [p - left, p]; a two-sided window needs causal=False), and one with no left side is causal."""
        if window is None:
            return cls("causal") if causal else cls("full")
        local = cls("local", window[0], window[1])  # checks the sides
        if not causal:
            return local
        return cls("causal") if local.left is None else cls("local", local.left, 0)

    @property
    def bounds(self) -> tuple[int | None, int | None]:
        """(left, right) reach of a query: causal is (None, 0), full (None, None)."""
        if self.kind == "causal":
            return None, 0
        return (self.left, self.right) if self.kind == "local" else (None, None)

    def lazy(self, shape: tuple[int, int], offset: int) -> Any:
        """Upstream's lazy mask of this kind for a [q_len, kv_len] call, query i at KV position
        offset + i."""
        mask_lib = _upstream.mask_lib()
        if self.kind == "full":
            return mask_lib.FullMask(shape)
        if self.kind == "causal":
            return mask_lib.CausalMask(shape, offset=offset)
        return mask_lib.LocalMask(shape, window_size=(self.left, self.right), offset=offset)

    def stand_in(self, shape: tuple[int, int], offset: int | None) -> Any:
        """The mask argument upstream's public call would bind for this mask (its config choice reads
        the bound arguments): causal at offset 0 and full as upstream's flags, any other mask (an
        offset None is one known only at run time) as the dense boolean array upstream turns it into,
        here only its shape (the array itself is never built). Upstream's autotuning key holds that
        shape only, so every window, causal offset but 0 and run-time offset of one shape share one
        entry of a result; `tuning.tune` lists such calls as not timed on their own mask."""
        base = _upstream.base()
        if self.kind == "full":
            return base.FULL_MASK
        if self.kind == "causal" and offset == 0:
            return base.CAUSAL_MASK
        return base.Mask(jax.ShapeDtypeStruct(shape, jnp.bool_))

    def function(self, offset: int = 0) -> Callable[[jax.Array, jax.Array], jax.Array] | None:
        """Upstream's mask function (q positions, kv positions) -> allowed, the offset added to the q
        positions; None for a full mask."""
        if self.kind == "full":
            return None
        return self.lazy((1, 1), offset).mask_function


def runtime_schedule(spec: MaskSpec, q_positions: jax.Array, kv_len: int, block_q: int, block_kv: int) -> Any:
    """Upstream's `MaskInfo` for queries at run-time KV positions `q_positions` [rows] (rows and kv_len
    multiples of the blocks): every (q block, kv block) pair classified in JAX as empty (0), partial (1,
    the kernel applies the mask function) or full (2), from the block's lowest and highest query
    position; no partial-mask blocks, the positions as upstream's `q_sequence`. The kernel's segment
    ids then prune the pairs they rule out, and only the blocks left are scheduled (read)."""
    rows = q_positions.shape[0]
    lo = q_positions.reshape(rows // block_q, block_q).min(axis=1)[:, None]
    hi = q_positions.reshape(rows // block_q, block_q).max(axis=1)[:, None]
    kv_lo = (jnp.arange(kv_len // block_kv, dtype=jnp.int32) * block_kv)[None, :]
    kv_hi = kv_lo + block_kv - 1
    left, right = spec.bounds
    empty = jnp.zeros(lo.shape[:1] + kv_lo.shape[1:], jnp.bool_)
    full = jnp.ones_like(empty)
    if right is not None:  # keys <= q + right
        empty |= kv_lo > hi + right
        full &= kv_hi <= lo + right
    if left is not None:  # keys >= q - left
        empty |= kv_hi < lo - left
        full &= kv_lo >= hi - left
    block_mask = jnp.where(empty, 0, jnp.where(full, 2, 1)).astype(jnp.int8).reshape(-1)
    return _upstream.mask_info().MaskInfo(mask_next=None, active_rows=None, active_cols=None, block_mask=block_mask,
                                          num_active_blocks=None, partial_mask_blocks=None,
                                          q_sequence=q_positions.astype(jnp.int32))
