"""DeepSeek-V4 compress-and-store on Torch tensors: `dsv4_compressor` through upstream's public op
(`ops.dsv4_compressor`, Pallas implementation, upstream's config choice), forward only, as
upstream's Torch op. Three modes, chosen by `overlap` and the head dim (rms_weight's length):
CSA (overlap, head_dim != 128: int32 cache plus an int32 RoPE cache, op `dsv4_compressor_csa`),
the CSA indexer (overlap, head_dim 128: uint8 [pages, rows, 4, 256] cache) and HCA (no overlap:
uint8 [pages, rows, 4, 128] cache, state in `state_cache`), the last two through op `dsv4_compressor`.

TPU7x only (upstream's Op runs on generation 7): JAX's Pallas TPU interpreter cannot run the
kernel, so CPU tensors get a clear refusal; meta / fake tensors trace through fake kernels.
"""

from __future__ import annotations

import jax
import torch

from .. import ops
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["dsv4_compressor", "dsv4_compressor_csa_op", "dsv4_compressor_op"]

_OP = "dsv4_compressor"
_CHIP = "v7x"
_NO_CPU = ("the kernel DMAs from and stores into `ref.bitcast(jnp.uint8)` views, and the interpreter resolves refs "
           "only through integer/slice indexers: AttributeError: 'BitcastTransform' object has no attribute "
           "'indices'")
_INDEXER_HEAD_DIM, _ROPE_DIM, _CSA_QUANT_BLOCK = 128, 64, 64


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
def _public(cache: jax.Array, positions: jax.Array, block_table: jax.Array, token_to_req_indices: jax.Array,
            kv_slot_mapping: jax.Array, rms_weight: jax.Array, cos_sin_cache: jax.Array,
            state_cache: jax.Array | None, rope_cache: jax.Array | None, block_table_stride: int,
            state_block_size: int, compress_ratio: int, overlap: bool, quant_block: int,
            rms_eps: float) -> tuple[jax.Array, jax.Array | None]:
    return ops.dsv4_compressor(cache, positions, block_table, token_to_req_indices, kv_slot_mapping, rms_weight,
                               cos_sin_cache=cos_sin_cache, block_table_stride=block_table_stride,
                               state_block_size=state_block_size, compress_ratio=compress_ratio, overlap=overlap,
                               state_cache=state_cache, rope_cache=rope_cache, quant_block=quant_block,
                               rms_eps=rms_eps, implementation="mosaic_tpu")


@chip_for_tracing(_CHIP)
def _dsv4_jax(cache: jax.Array, positions: jax.Array, block_table: jax.Array, token_to_req_indices: jax.Array,
              kv_slot_mapping: jax.Array, rms_weight: jax.Array, cos_sin_cache: jax.Array,
              state_cache: jax.Array | None, block_table_stride: int, state_block_size: int, compress_ratio: int,
              overlap: bool, quant_block: int, rms_eps: float) -> jax.Array:
    """HCA and the CSA indexer: the updated cache (no RoPE cache in these modes)."""
    new_cache, _ = _public(cache, positions, block_table, token_to_req_indices, kv_slot_mapping, rms_weight,
                           cos_sin_cache, state_cache, None, block_table_stride, state_block_size, compress_ratio,
                           overlap, quant_block, rms_eps)
    return new_cache


@chip_for_tracing(_CHIP)
def _dsv4_csa_jax(cache: jax.Array, positions: jax.Array, block_table: jax.Array, token_to_req_indices: jax.Array,
                  kv_slot_mapping: jax.Array, rms_weight: jax.Array, cos_sin_cache: jax.Array,
                  state_cache: jax.Array | None, rope_cache: jax.Array, block_table_stride: int,
                  state_block_size: int, compress_ratio: int, quant_block: int, rms_eps: float
                  ) -> tuple[jax.Array, jax.Array]:
    """CSA: the updated cache and RoPE cache."""
    return _public(cache, positions, block_table, token_to_req_indices, kv_slot_mapping, rms_weight, cos_sin_cache,
                   state_cache, rope_cache, block_table_stride, state_block_size, compress_ratio, True, quant_block,
                   rms_eps)


dsv4_compressor_op = register(_OP, _dsv4_jax, no_cpu=_NO_CPU)
dsv4_compressor_csa_op = register("dsv4_compressor_csa", _dsv4_csa_jax, no_cpu=_NO_CPU)


# ---- Fake kernels that take symbolic sizes: the caches keep their shapes and dtypes -----------
@dsv4_compressor_op.register_fake
def _dsv4_fake(cache: torch.Tensor, positions: torch.Tensor, block_table: torch.Tensor,
               token_to_req_indices: torch.Tensor, kv_slot_mapping: torch.Tensor, rms_weight: torch.Tensor,
               cos_sin_cache: torch.Tensor, state_cache: torch.Tensor | None, block_table_stride: int,
               state_block_size: int, compress_ratio: int, overlap: bool, quant_block: int,
               rms_eps: float) -> torch.Tensor:
    return torch.empty_like(cache)


@dsv4_compressor_csa_op.register_fake
def _dsv4_csa_fake(cache: torch.Tensor, positions: torch.Tensor, block_table: torch.Tensor,
                   token_to_req_indices: torch.Tensor, kv_slot_mapping: torch.Tensor, rms_weight: torch.Tensor,
                   cos_sin_cache: torch.Tensor, state_cache: torch.Tensor | None, rope_cache: torch.Tensor,
                   block_table_stride: int, state_block_size: int, compress_ratio: int, quant_block: int,
                   rms_eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(cache), torch.empty_like(rope_cache)


# ---- What users call ---------------------------------------------------------------------------
def _cache(name: str, t: torch.Tensor, dtype: torch.dtype, tail: tuple[int, ...], layout: str, mode: str) -> None:
    """The cache of `mode`: `dtype`, [pages, rows, *tail]."""
    if t.dtype != dtype or t.dim() != 2 + len(tail) or any(s != e for s, e in zip(t.shape[2:], tail, strict=True)):
        raise ValueError(f"tokamax {_OP}: {name} must be {str(dtype).removeprefix('torch.')} {layout} for {mode}, "
                         f"got {t.dtype} {tuple(t.shape)}")


def _check(cache: torch.Tensor, positions: torch.Tensor, block_table: torch.Tensor,
           token_to_req_indices: torch.Tensor, kv_slot_mapping: torch.Tensor, rms_weight: torch.Tensor,
           cos_sin_cache: torch.Tensor, block_table_stride: int, state_block_size: int, compress_ratio: int,
           overlap: bool, state_cache: torch.Tensor | None, rope_cache: torch.Tensor | None, quant_block: int,
           rms_eps: float) -> str:
    """Checks the arguments; returns the mode ("csa", "indexer" or "hca")."""
    op = _OP
    _checks.tensors(op, cache=cache, positions=positions, block_table=block_table,
                    token_to_req_indices=token_to_req_indices, kv_slot_mapping=kv_slot_mapping, rms_weight=rms_weight,
                    cos_sin_cache=cos_sin_cache, state_cache=state_cache, rope_cache=rope_cache,
                    optional=("state_cache", "rope_cache"))
    _checks.positive(op, "block_table_stride", block_table_stride)
    _checks.positive(op, "state_block_size", state_block_size)
    _checks.positive(op, "compress_ratio", compress_ratio)
    _checks.positive(op, "rms_eps", rms_eps)
    for name, t in (("positions", positions), ("token_to_req_indices", token_to_req_indices),
                    ("kv_slot_mapping", kv_slot_mapping), ("block_table", block_table)):
        _checks.dtype(op, name, t, (torch.int32,))
        _checks.rank(op, name, t, (1,), "[num_reqs * block_table_stride]" if name == "block_table" else "[tokens]")
    _checks.same(op, "the token counts", positions=positions.shape[0],
                 token_to_req_indices=token_to_req_indices.shape[0], kv_slot_mapping=kv_slot_mapping.shape[0])
    if block_table.shape[0] % block_table_stride != 0:
        raise ValueError(f"tokamax {op}: block_table's length {block_table.shape[0]} must be a multiple of "
                         f"block_table_stride ({block_table_stride})")
    _checks.dtype(op, "rms_weight", rms_weight, (torch.float32,))
    _checks.rank(op, "rms_weight", rms_weight, (1,), "[head_dim]")
    if rms_weight.shape[0] % 128 != 0:
        raise ValueError(f"tokamax {op}: head_dim (rms_weight's length) must be a multiple of 128, "
                         f"got {rms_weight.shape[0]}")
    _checks.dtype(op, "cos_sin_cache", cos_sin_cache, (torch.float32,))
    _checks.shape(op, "cos_sin_cache", cos_sin_cache, (None, _ROPE_DIM), "[max_pos, 64] ([cos | sin])")
    if state_cache is not None:
        _cache("state_cache", state_cache, torch.uint8, (4, 128), "[pages, rows, 4, 128]", "a separate state")
    if not overlap:
        _cache("cache", cache, torch.uint8, (4, 128), "[pages, rows, 4, 128]", "HCA (overlap=False)")
        return "hca"
    if rms_weight.shape[0] == _INDEXER_HEAD_DIM:
        _cache("cache", cache, torch.uint8, (4, 256), "[pages, rows, 4, 256]", "the CSA indexer (head_dim 128)")
        if quant_block <= 0 or 128 % quant_block != 0:
            raise ValueError(f"tokamax {op}: quant_block must divide 128 for the CSA indexer, got {quant_block}")
        return "indexer"
    _cache("cache", cache, torch.int32, (128,), "[pages, rows, 128]", "CSA (overlap=True, head_dim != 128)")
    if rope_cache is None:
        raise ValueError(f"tokamax {op}: CSA (overlap=True, head_dim != 128) needs rope_cache")
    _checks.dtype(op, "rope_cache", rope_cache, (torch.int32,))
    _checks.shape(op, "rope_cache", rope_cache, (cache.shape[0], cache.shape[1] // 4, 128), "[pages, rows // 4, 128]")
    if quant_block != _CSA_QUANT_BLOCK:
        raise ValueError(f"tokamax {op}: quant_block must be {_CSA_QUANT_BLOCK} for CSA, got {quant_block}")
    return "csa"


def dsv4_compressor(cache: torch.Tensor, positions: torch.Tensor, block_table: torch.Tensor,
                    token_to_req_indices: torch.Tensor, kv_slot_mapping: torch.Tensor, rms_weight: torch.Tensor,
                    cos_sin_cache: torch.Tensor, *, block_table_stride: int, state_block_size: int,
                    compress_ratio: int, overlap: bool, state_cache: torch.Tensor | None = None,
                    rope_cache: torch.Tensor | None = None, quant_block: int = _CSA_QUANT_BLOCK,
                    rms_eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Compresses DeepSeek-V4 boundary tokens' state windows (softmax pool, RMSNorm, interleaved
    RoPE, fp8 / bf16 packing) into the compressed KV cache (upstream's public op, forward only):
    returns `(cache, rope_cache)`, rope_cache None outside CSA.

    cache: int32 [pages, rows, 128] (CSA, which also hosts the f32 state), uint8
    [pages, rows, 4, 256] (CSA indexer, head_dim 128, also hosts the state) or uint8
    [pages, rows, 4, 128] (HCA, state in `state_cache`, uint8 [pages, rows, 4, 128]). int32:
    positions, token_to_req_indices, kv_slot_mapping [tokens] (-1: no record for the token),
    block_table [num_reqs * block_table_stride]. rms_weight f32 [head_dim]; cos_sin_cache f32
    [max_pos, 64]; rope_cache int32 [pages, rows // 4, 128] (CSA only; ignored otherwise).
    quant_block: 64 for CSA, a divisor of 128 for the indexer, unused for HCA.

    Upstream's kernel writes the caches through input/output aliases (and donates them under
    JAX); this op donates nothing: it returns NEW cache tensors and leaves the arguments
    unchanged, so assign the returned caches back. TPU7x only; CPU tensors are refused, meta
    tensors trace.
    """
    mode = _check(cache, positions, block_table, token_to_req_indices, kv_slot_mapping, rms_weight, cos_sin_cache,
                  block_table_stride, state_block_size, compress_ratio, overlap, state_cache, rope_cache, quant_block,
                  rms_eps)
    args = (cache.contiguous(), positions.contiguous(), block_table.contiguous(), token_to_req_indices.contiguous(),
            kv_slot_mapping.contiguous(), rms_weight.contiguous(), cos_sin_cache.contiguous(),
            None if state_cache is None else state_cache.contiguous())
    if mode == "csa":
        new_cache, new_rope_cache = dsv4_compressor_csa_op(*args, rope_cache.contiguous(), block_table_stride,
                                                           state_block_size, compress_ratio, quant_block,
                                                           float(rms_eps))
        return new_cache, new_rope_cache
    return dsv4_compressor_op(*args, block_table_stride, state_block_size, compress_ratio, overlap, quant_block,
                              float(rms_eps)), None
