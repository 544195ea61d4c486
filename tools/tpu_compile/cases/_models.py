"""The models the compile cases take their shapes from (each from its published config.json)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    hidden: int
    vocab: int
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    intermediate: int = 0  # dense MLP, or each expert's
    experts: int = 0
    experts_per_token: int = 0


LLAMA_3_8B = Model("Llama-3.1-8B", 4096, 128256, 32, 8, 128, 14336)
LLAMA_3_70B = Model("Llama-3.1-70B", 8192, 128256, 64, 8, 128, 28672)
LLAMA_3_405B = Model("Llama-3.1-405B", 16384, 128256, 128, 8, 128, 53248)
LLAMA_2_7B = Model("Llama-2-7B", 4096, 32000, 32, 32, 128, 11008)
QWEN3_8B = Model("Qwen3-8B", 4096, 151936, 32, 8, 128, 12288)
QWEN3_30B_A3B = Model("Qwen3-30B-A3B", 2048, 151936, 32, 4, 128, 768, 128, 8)
MIXTRAL_8X7B = Model("Mixtral-8x7B", 4096, 32000, 32, 8, 128, 14336, 8, 2)
DEEPSEEK_V3 = Model("DeepSeek-V3", 7168, 129280, 128, 128, 128, 2048, 256, 8)
GEMMA_3_27B = Model("Gemma-3-27B", 5376, 262208, 32, 16, 128, 21504)
GPT_OSS_120B = Model("gpt-oss-120b", 2880, 201088, 64, 8, 64, 2880, 128, 4)

# LM heads (tools/tpu_compile/cases/lm_head.py, lm_loss.py): the vocabularies people train with.
QWEN3_32B = Model("Qwen3-32B", 5120, 151936, 64, 8, 128, 25600)
GEMMA_3_1B = Model("Gemma-3-1B", 1152, 262144, 4, 1, 256, 6912)
GEMMA_3_12B = Model("Gemma-3-12B", 3840, 262208, 16, 8, 256, 15360)

# ---- ops-attn (issue 43): the attention and linear-attention ops' models, from their published configs ----
# DeepSeek-V3 MLA: kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128, 128 heads (DEEPSEEK_V3 above).
# DeepSeek-V3.2 lightning indexer: index_n_heads 64, index_head_dim 128, index_topk 2048.
DEEPSEEK_V3_2 = Model("DeepSeek-V3.2", 7168, 129280, 128, 128, 128, 2048, 256, 8)
# DeepSeek-V4-Flash: 64 heads of 512 (one shared KV head, RoPE 64), hidden 4096, sliding window 128, CSA layers
# (compress ratio 4, lightning indexer of 64 heads of 128, index_topk 512) and HCA layers (compress ratio 128).
DEEPSEEK_V4_FLASH = Model("DeepSeek-V4-Flash", 4096, 129280, 64, 1, 512)
# Kimi Linear (48B-A3B): KDA layers of 32 heads of 128.
KIMI_LINEAR = Model("Kimi-Linear-48B-A3B", 2304, 163840, 32, 32, 128)
# Qwen3-Next-80B-A3B: Gated DeltaNet layers of 16 key/query heads and 32 value heads of 128, conv kernel 4.
QWEN3_NEXT_80B = Model("Qwen3-Next-80B-A3B", 2048, 151936, 16, 32, 128)

# --- Added for the MoE and DeepSeek-V4 op families (ops-moe). DeepSeek-V4's numbers are the shapes of
# upstream's own tuned tables for its DeepSeek-V4 kernels (data/autotuning/tpu7x: pallas_tpu_mhc_*,
# pallas_tpu_deepseek_rope, pallas_tpu_grouped_lowrank_proj): hidden 7168, 4 hyper-connection streams,
# 128 heads of 512 (the trailing 64 rotated), positions up to 65,536, `wo_a` in 16 groups of 8 heads
# to rank 1024 each.
DEEPSEEK_V4 = Model("DeepSeek-V4", 7168, 129280, 128, 1, 512)
DSV4_HC_MULT = 4
DSV4_ROTARY_DIM = 64
DSV4_MAX_POSITION = 65536
DSV4_O_GROUPS = 16
DSV4_O_RANK = 1024
