"""The shipped tables of the TPU ops whose keys are flat (arrays, scalars, enum and dtype names):
each read by its upstream Op class, keys parsed through the Op's own annotations (keys.py)."""

from __future__ import annotations

from typing import Any

from .cases import PublicCase, Table
from .keys import generic_arguments

# table stem -> (module below _src/ops, Op class)
_FLAT = {
    "pallas_mosaic_tpu_causal_conv1d_gated_delta_rule": ("causal_conv1d_gated_delta_rule.pallas_mosaic_tpu",
                                                         "PallasMosaicTpuCausalConv1dGatedDeltaRule"),
    "pallas_mosaic_tpu_linear_softmax_cross_entropy_loss": ("linear_softmax_cross_entropy_loss.pallas_mosaic_tpu",
                                                            "PallasMosaicTpuLinearSoftmaxCrossEntropyLoss"),
    "pallas_tpu_batched_rpa": ("batched_rpa.pallas_mosaic_tpu", "PallasTpuBatchedRpa"),
    "pallas_tpu_csa_gather": ("csa_gather.pallas_mosaic_tpu", "PallasTpuCsaGather"),
    "pallas_tpu_deepseek_rope": ("deepseek_rope.pallas_mosaic_tpu", "PallasTpuDeepseekRope"),
    "pallas_tpu_dsv4_compressor": ("dsv4_compressor.pallas_mosaic_tpu", "PallasTpuDsv4Compressor"),
    "pallas_tpu_grouped_lowrank_proj": ("grouped_lowrank_proj.pallas_mosaic_tpu", "PallasTpuGroupedLowrankProj"),
    "pallas_tpu_mhc_fused_post_pre": ("mhc.pallas_mosaic_tpu", "PallasTpuMhcFusedPostPre"),
    "pallas_tpu_mhc_post": ("mhc.pallas_mosaic_tpu", "PallasTpuMhcPost"),
    "pallas_tpu_mhc_pre": ("mhc.pallas_mosaic_tpu", "PallasTpuMhcPre"),
    "pallas_tpu_proj_and_save_state": ("proj_and_save_state.pallas_mosaic_tpu", "PallasTpuProjAndSaveState"),
    "pallas_tpu_ragged_gather_reduce": ("ragged_gather_reduce.pallas_mosaic_tpu", "PallasTpuRaggedGatherReduce"),
    "pallas_tpu_router_top_k": ("router_topk.pallas_mosaic_tpu", "PallasTpuRouterTopK"),
}


def _op(module: str, cls: str):  # noqa: ANN202
    return lambda api: getattr(api.module(f"_src.ops.{module}"), cls)()


def _vjp_op(module: str, cls: str):  # noqa: ANN202
    """The VJP Op a forward Op runs under jax.grad (its `vjp` field)."""
    return lambda api: getattr(api.module(f"_src.ops.{module}"), cls)().vjp


def _arguments(key: dict, api: Any, table: Table) -> dict:
    return generic_arguments(key, table.op(api))


def _table(stem: str, op: Any) -> Table:
    table = Table(stem.removeprefix("pallas_tpu_").removeprefix("pallas_mosaic_tpu_"), stem, op, None)  # type: ignore[arg-type]
    object.__setattr__(table, "arguments", lambda key, api: _arguments(key, api, table))
    return table


TABLES = [_table(stem, _op(*where)) for stem, where in _FLAT.items()] + [
    _table("pallas_mosaic_tpu_linear_softmax_cross_entropy_loss_vjp",
           _vjp_op(*_FLAT["pallas_mosaic_tpu_linear_softmax_cross_entropy_loss"])),
]


def cases() -> list[PublicCase]:
    return []
