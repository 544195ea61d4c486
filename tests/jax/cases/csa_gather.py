"""DeepSeek-V4 CSA cache gather (`csa_gather`, a SparseCore kernel): cases against the upstream reference."""

from __future__ import annotations

import functools

import jax
import numpy as np

from . import Case, rng

KERNEL = "_src.ops.csa_gather.pallas_mosaic_tpu_kernel"
REFERENCE = "_src.ops.csa_gather.reference"

# A SparseCore kernel: upstream's op runs wherever `get_tpu_info().sparse_core` is set (v6e and v7x,
# not v5e); upstream only tests it on TPU7x, whose SparseCore has 16 lanes (v6e: 8).
CHIPS = ("v6e", "v7x")


def _inputs(num_pages: int, page_size: int, num_indices: int, *, seed: int) -> tuple[np.ndarray, ...]:
    """`(nope_cache, rope_cache, indices)`: random 32-bit words, indices in `[0, num_pages * page_size)`."""
    r = rng(seed)
    nope = r.integers(0, 2**32, size=(num_pages, page_size, 128), dtype=np.uint32).view(np.int32)
    rope = r.integers(0, 2**32, size=(num_pages, page_size // 4, 128), dtype=np.uint32).view(np.int32)
    indices = r.integers(0, num_pages * page_size, size=(num_indices,)).astype(np.int32)
    return nope, rope, indices


_WHY = "a pure gather and bit shuffle of int32 words: bit-exact, as upstream asserts"
# Pallas TPU interpret mode (jax 0.12) cannot run the kernel: its `pl.Indirect` blocks are gather DMAs
# whose source indexer is a vector of row indices, and the interpreter's `dma_start` casts every DMA
# transform to a Python int. Seen with top_k 128/256, num_streams 1/2/4, interpret_chip v6e and v7x.
_XFAIL = ("interpret mode cannot run SparseCore indirect (gather) DMAs: interpret_pallas_call.dma_start does "
          "`jax.tree.map(int, src_transforms)` on an NDIndexer with int_indexer_shape=(16,) and fails with "
          "'TypeError: Only scalar arrays can be converted to Python scalars; got arr.ndim=1'")

NUM_VALID = 512


def _with_num_valid(num_pages: int, page_size: int, num_indices: int, *, seed: int) -> tuple[np.ndarray, ...]:
    return (*_inputs(num_pages, page_size, num_indices, seed=seed), np.array([NUM_VALID], np.int32))


def _compare_valid_prefix(out, expected) -> None:  # noqa: ANN001
    """Rows past `num_valid_indices` are left unwritten by the kernel; compare the valid prefix only."""
    (nope, rope), (nope_ref, rope_ref) = out, expected
    np.testing.assert_array_equal(np.asarray(nope)[:NUM_VALID], np.asarray(nope_ref)[:NUM_VALID])
    np.testing.assert_array_equal(np.asarray(rope)[:NUM_VALID // 4], np.asarray(rope_ref)[:NUM_VALID // 4])

CASES = [
    Case(
        id="csa_gather/topk256-n512-streams2",
        call=lambda get: functools.partial(get(KERNEL).csa_gather, top_k=256, num_streams=2),
        inputs=lambda: _inputs(4, 64, 512, seed=1),
        reference=lambda get: functools.partial(get(REFERENCE).csa_gather, top_k=256),
        tolerance=(0.0, 0.0),
        tolerance_why=_WHY,
        chips=CHIPS,
        interpret_chip="v7x",
        interpret_xfail=_XFAIL,
        interpret_raises=(jax.errors.JaxRuntimeError, "Only scalar arrays can be converted to Python scalars"),
    ),
    Case(
        id="csa_gather/topk512-n1024-streams4-num_valid512",
        call=lambda get: functools.partial(get(KERNEL).csa_gather, top_k=512, num_streams=4),
        inputs=lambda: _with_num_valid(2, 256, 1024, seed=2),
        reference=lambda get: functools.partial(get(REFERENCE).csa_gather, top_k=512),
        tolerance_why=_WHY + "; only the first num_valid_indices rows are specified",
        compare=_compare_valid_prefix,
        chips=CHIPS,
        interpret_chip="v7x",
        interpret_xfail=_XFAIL,
        interpret_raises=(jax.errors.JaxRuntimeError, "Only scalar arrays can be converted to Python scalars"),
    ),
]
