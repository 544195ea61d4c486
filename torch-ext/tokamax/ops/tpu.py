"""Upstream's TPU Op classes and their configs (`tokamax.ops.tpu` upstream), loaded on first use."""

from __future__ import annotations

from ._lazy import namespace

# op folder -> (public class name, upstream class name, config name or None)
_OPS = {
    "attention": [("FlashAttention", "PallasMosaicTpuFlashAttention", "FlashAttentionConfig")],
    "batched_rpa": [("BatchedRpa", "PallasTpuBatchedRpa", "BatchedRpaConfig")],
    "causal_conv1d_gated_delta_rule": [("CausalConv1dGatedDeltaRule", "PallasMosaicTpuCausalConv1dGatedDeltaRule",
                                        "CausalConv1dGatedDeltaRuleConfig")],
    "csa_gather": [("CsaGather", "PallasTpuCsaGather", "CsaGatherConfig")],
    "deepseek_rope": [("DeepseekRope", "PallasTpuDeepseekRope", "DeepseekRopeConfig")],
    "dsv4_compressor": [("Dsv4Compressor", "PallasTpuDsv4Compressor", "Dsv4CompressorConfig")],
    "grouped_lowrank_proj": [("GroupedLowrankProj", "PallasTpuGroupedLowrankProj", "GroupedLowrankProjConfig")],
    "kda": [("KimiDeltaAttention", "PallasMosaicTpuKimiDeltaAttention", "KimiDeltaAttentionConfig")],
    "lightning_indexer": [("LightningIndexer", "PallasTpuLightningIndexer", "LightningIndexerConfig")],
    "linear_softmax_cross_entropy_loss": [("LinearSoftmaxCrossEntropyLoss",
                                           "PallasMosaicTpuLinearSoftmaxCrossEntropyLoss",
                                           "LinearSoftmaxCrossEntropyLossConfig")],
    "masked_dense_mla": [("MaskedDenseMla", "PallasTpuMaskedDenseMla", "MaskedDenseMlaConfig")],
    "mhc": [("MhcFusedPostPre", "PallasTpuMhcFusedPostPre", "MhcConfig"), ("MhcPost", "PallasTpuMhcPost", None),
            ("MhcPre", "PallasTpuMhcPre", None)],
    "proj_and_save_state": [("ProjAndSaveState", "PallasTpuProjAndSaveState", "ProjAndSaveStateConfig")],
    "ragged_dot": [("RaggedDot", "PallasMosaicTpuRaggedDot", "RaggedDotConfig")],
    "ragged_dot_v2": [("V2RaggedDot", "PallasMosaicTpuV2RaggedDot", "V2RaggedDotConfig")],
    "ragged_gather": [("RaggedGather", "PallasTpuRaggedGather", None)],
    "ragged_gather_reduce": [("RaggedGatherReduce", "PallasTpuRaggedGatherReduce", "RaggedGatherReduceConfig")],
    "router_topk": [("RouterTopK", "PallasTpuRouterTopK", "RouterTopKConfig")],
    "sparse_mla": [("SparseMla", "PallasTpuSparseMla", "SparseMlaConfig")],
    "topk": [("TopK", "PallasTpuTopK", "TopKConfig")],
}


def _names(ops: dict, root: str) -> dict:
    out = {}
    for folder, classes in ops.items():
        module = (f"{root}.ragged_dot.pallas_mosaic_tpu_v2" if folder == "ragged_dot_v2"
                  else f"{root}.{folder}.pallas_mosaic_tpu")
        for public, upstream, config in classes:
            out[public] = (module, upstream)
            if config:
                out[config] = (module, "Config")
    return out


_NAMES = _names(_OPS, "._ported._src.ops")
__all__ = sorted(_NAMES)
__getattr__, __dir__ = namespace(__name__, _NAMES)
