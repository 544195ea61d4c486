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
