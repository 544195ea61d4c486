"""The zoo's models: published checkpoints, each with its Hub name and the config.json fields that set the kernels'
shapes, written from the published config.json (the chip host reaches no Hub; tests/chip/test_zoo.py checks the
fields against each model's published parameter count).

Field names are config.json's, normalized where families differ: `num_experts` is `num_local_experts` (Mixtral,
gpt-oss, Granite MoE, Phi-3.5-MoE), `num_experts` (Qwen MoE, OLMoE) or `n_routed_experts` (DeepSeek);
`moe_intermediate_size` is each expert's MLP width: the config's own field, or `intermediate_size` where every MLP
is the experts (Mixtral, OLMoE, gpt-oss, Granite MoE, Phi-3.5-MoE); `head_dim` is the config's, or hidden_size /
num_attention_heads where it has none.

A chip's shard: a model whose layers one chip would not hold in training runs here as one chip's shard of each
layer, by `shard` alone: tensor parallelism over `tensor_parallel` chips (attention heads / TP, KV heads max(1,
kv / TP), the dense MLP's intermediate / TP) and expert parallelism over `expert_parallel` chips (experts / EP per
chip, each chip receiving tokens x top-k routed rows on average: every chip of the group holds the same tokens and
routes them evenly over the chips). The LM head and the tokens stay a chip's whole (rows are per chip under data or
sequence parallelism; a vocabulary-parallel head would need a log-sum-exp across chips that a one-chip op does not
make).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple


class MLA(NamedTuple):
    """DeepSeek's multi-head latent attention (config.json's q_lora_rank, kv_lora_rank, qk_nope_head_dim,
    qk_rope_head_dim, v_head_dim). In training and prefill the latent is expanded to every head's keys and values:
    splash runs it as multi-head attention with q and k of nope + rope = 192 per head and v of 128 (the kernel takes
    v's head dim apart from q's and k's); the absorbed form (queries against the 512 + 64 latent) is decode's."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    hub: str
    family: str  # the tokenizer family: distillation pairs a student and a teacher of one family
    hidden_size: int
    intermediate_size: int  # the dense MLP's (DeepSeek: its first dense layers'); 0 where every MLP is experts
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    num_hidden_layers: int
    tie_word_embeddings: bool
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0  # Qwen MoE's shared expert; DeepSeek's n_shared_experts x moe_inter.
    dense_layers: int = 0  # DeepSeek's first_k_dense_replace: layers whose MLP is dense
    sliding_window: int | None = None
    global_every: int = 0  # with a window: 0 every layer windowed; n each n-th layer global, the others windowed
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    query_pre_attn_scalar: float | None = None  # Gemma: q scaled by its -1/2 power (the kernels take q scaled)
    logits_scaling: float | None = None  # Granite: the LM head's logits divided by it
    sinks: bool = False  # gpt-oss: a learned sink logit per head in each softmax
    mla: MLA | None = None
    tensor_parallel: int = 1
    expert_parallel: int = 1
    note: str = ""

    @property
    def moe(self) -> bool:
        return self.num_experts > 0

    @property
    def windowed_layers(self) -> str:
        """Which layers attend within `sliding_window` (config.json's layer_types / sliding_window_pattern)."""
        if self.sliding_window is None:
            return "none"
        return "all" if not self.global_every else f"{self.global_every - 1} of every {self.global_every}"


def _dense(name: str, hub: str, family: str, hidden: int, inter: int, heads: int, kv: int, head_dim: int, vocab: int,
           layers: int, tied: bool, **kw: object) -> Model:
    return Model(name, hub, family, hidden, inter, heads, kv, head_dim, vocab, layers, tied, **kw)


def _moe(name: str, hub: str, family: str, hidden: int, heads: int, kv: int, head_dim: int, vocab: int, layers: int,
         tied: bool, experts: int, top_k: int, expert_inter: int, **kw: object) -> Model:
    inter = kw.pop("intermediate_size", 0)
    return Model(name, hub, family, hidden, inter, heads, kv, head_dim, vocab, layers, tied, num_experts=experts,
                 num_experts_per_tok=top_k, moe_intermediate_size=expert_inter, **kw)


GEMMA2 = {"sliding_window": 4096, "global_every": 2, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}
GEMMA3 = {"sliding_window": 1024, "global_every": 6}
GPT_OSS = {"sliding_window": 128, "global_every": 2, "sinks": True}
DEEPSEEK_MLA = {"kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
QWEN_WINDOW_OFF = "config.json's sliding_window is set but use_sliding_window is false: no layer is windowed"

MODELS: tuple[Model, ...] = (
    # Llama 3.x
    _dense("Llama 3.2 1B", "meta-llama/Llama-3.2-1B", "llama3", 2048, 8192, 32, 8, 64, 128256, 16, True),
    _dense("Llama 3.2 3B", "meta-llama/Llama-3.2-3B", "llama3", 3072, 8192, 24, 8, 128, 128256, 28, True),
    _dense("Llama 3.1 8B", "meta-llama/Llama-3.1-8B", "llama3", 4096, 14336, 32, 8, 128, 128256, 32, False),
    _dense("Llama 3.1 70B", "meta-llama/Llama-3.1-70B", "llama3", 8192, 28672, 64, 8, 128, 128256, 80, False,
           tensor_parallel=8),
    # Qwen2.5 (0.5B to 3B tie their embeddings and pad the vocabulary to 151,936; 7B and up to 152,064)
    _dense("Qwen2.5 0.5B", "Qwen/Qwen2.5-0.5B", "qwen", 896, 4864, 14, 2, 64, 151936, 24, True, note=QWEN_WINDOW_OFF),
    _dense("Qwen2.5 1.5B", "Qwen/Qwen2.5-1.5B", "qwen", 1536, 8960, 12, 2, 128, 151936, 28, True,
           note=QWEN_WINDOW_OFF),
    _dense("Qwen2.5 3B", "Qwen/Qwen2.5-3B", "qwen", 2048, 11008, 16, 2, 128, 151936, 36, True, note=QWEN_WINDOW_OFF),
    _dense("Qwen2.5 7B", "Qwen/Qwen2.5-7B", "qwen", 3584, 18944, 28, 4, 128, 152064, 28, False, note=QWEN_WINDOW_OFF),
    _dense("Qwen2.5 14B", "Qwen/Qwen2.5-14B", "qwen", 5120, 13824, 40, 8, 128, 152064, 48, False,
           note=QWEN_WINDOW_OFF),
    _dense("Qwen2.5 32B", "Qwen/Qwen2.5-32B", "qwen", 5120, 27648, 40, 8, 128, 152064, 64, False,
           note=QWEN_WINDOW_OFF),
    _dense("Qwen2.5 72B", "Qwen/Qwen2.5-72B", "qwen", 8192, 29568, 64, 8, 128, 152064, 80, False, tensor_parallel=8,
           note=QWEN_WINDOW_OFF),
    # Qwen3 dense
    _dense("Qwen3 0.6B", "Qwen/Qwen3-0.6B", "qwen", 1024, 3072, 16, 8, 128, 151936, 28, True),
    _dense("Qwen3 1.7B", "Qwen/Qwen3-1.7B", "qwen", 2048, 6144, 16, 8, 128, 151936, 28, True),
    _dense("Qwen3 4B", "Qwen/Qwen3-4B", "qwen", 2560, 9728, 32, 8, 128, 151936, 36, True),
    _dense("Qwen3 8B", "Qwen/Qwen3-8B", "qwen", 4096, 12288, 32, 8, 128, 151936, 36, False),
    _dense("Qwen3 14B", "Qwen/Qwen3-14B", "qwen", 5120, 17408, 40, 8, 128, 151936, 40, False),
    _dense("Qwen3 32B", "Qwen/Qwen3-32B", "qwen", 5120, 25600, 64, 8, 128, 151936, 64, False),
    # Qwen MoEs
    _moe("Qwen1.5-MoE-A2.7B", "Qwen/Qwen1.5-MoE-A2.7B", "qwen", 2048, 16, 16, 128, 151936, 24, False, 60, 4, 1408,
         shared_expert_intermediate_size=5632),
    _moe("Qwen2-57B-A14B", "Qwen/Qwen2-57B-A14B", "qwen", 3584, 28, 4, 128, 151936, 28, False, 64, 8, 2560,
         shared_expert_intermediate_size=20480),
    _moe("Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B", "qwen", 2048, 32, 4, 128, 151936, 48, False, 128, 8, 768),
    _moe("Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B", "qwen", 4096, 64, 4, 128, 151936, 94, False, 128, 8, 1536,
         tensor_parallel=8, expert_parallel=8),
    # Gemma 2 (every other layer windowed, soft caps) and Gemma 3 (5 of every 6 windowed); all tie their embeddings
    _dense("Gemma 2 2B", "google/gemma-2-2b", "gemma2", 2304, 9216, 8, 4, 256, 256000, 26, True,
           query_pre_attn_scalar=256.0, **GEMMA2),
    _dense("Gemma 2 9B", "google/gemma-2-9b", "gemma2", 3584, 14336, 16, 8, 256, 256000, 42, True,
           query_pre_attn_scalar=256.0, **GEMMA2),
    _dense("Gemma 2 27B", "google/gemma-2-27b", "gemma2", 4608, 36864, 32, 16, 128, 256000, 46, True,
           query_pre_attn_scalar=144.0, **GEMMA2),
    _dense("Gemma 3 1B", "google/gemma-3-1b-pt", "gemma3", 1152, 6912, 4, 1, 256, 262144, 26, True,
           query_pre_attn_scalar=256.0, sliding_window=512, global_every=6),
    _dense("Gemma 3 4B", "google/gemma-3-4b-pt", "gemma3", 2560, 10240, 8, 4, 256, 262208, 34, True,
           query_pre_attn_scalar=256.0, **GEMMA3, note="the text model of Gemma3ForConditionalGeneration"),
    _dense("Gemma 3 12B", "google/gemma-3-12b-pt", "gemma3", 3840, 15360, 16, 8, 256, 262208, 48, True,
           query_pre_attn_scalar=256.0, **GEMMA3, note="the text model"),
    _dense("Gemma 3 27B", "google/gemma-3-27b-pt", "gemma3", 5376, 21504, 32, 16, 128, 262208, 62, True,
           query_pre_attn_scalar=168.0, **GEMMA3, note="the text model"),
    # Phi
    _dense("Phi-3-mini", "microsoft/Phi-3-mini-4k-instruct", "phi3", 3072, 8192, 32, 32, 96, 32064, 32, False,
           sliding_window=2047),
    _dense("Phi-4-mini", "microsoft/Phi-4-mini-instruct", "phi4mini", 3072, 8192, 24, 8, 128, 200064, 32, True),
    _dense("Phi-4", "microsoft/phi-4", "phi4", 5120, 17920, 40, 10, 128, 100352, 40, False),
    _moe("Phi-3.5-MoE", "microsoft/Phi-3.5-MoE-instruct", "phi3", 4096, 32, 8, 128, 32064, 32, False, 16, 2, 6400,
         sliding_window=131072, note="its window (131,072) passes every token count here"),
    # Mistral
    _dense("Mistral 7B", "mistralai/Mistral-7B-v0.1", "mistral", 4096, 14336, 32, 8, 128, 32000, 32, False,
           sliding_window=4096),
    _dense("Mistral Nemo 12B", "mistralai/Mistral-Nemo-Base-2407", "mistral-tekken", 5120, 14336, 32, 8, 128, 131072,
           40, False),
    _dense("Mistral Small 24B", "mistralai/Mistral-Small-24B-Base-2501", "mistral-tekken", 5120, 32768, 32, 8, 128,
           131072, 40, False),
    _moe("Mixtral 8x7B", "mistralai/Mixtral-8x7B-v0.1", "mistral", 4096, 32, 8, 128, 32000, 32, False, 8, 2, 14336),
    # SmolLM2
    _dense("SmolLM2 135M", "HuggingFaceTB/SmolLM2-135M", "smollm", 576, 1536, 9, 3, 64, 49152, 30, True),
    _dense("SmolLM2 360M", "HuggingFaceTB/SmolLM2-360M", "smollm", 960, 2560, 15, 5, 64, 49152, 32, True),
    _dense("SmolLM2 1.7B", "HuggingFaceTB/SmolLM2-1.7B", "smollm", 2048, 8192, 32, 32, 64, 49152, 24, True),
    # Granite (its logits divided by logits_scaling)
    _dense("Granite 3.1 2B", "ibm-granite/granite-3.1-2b-base", "granite", 2048, 8192, 32, 8, 64, 49155, 40, True,
           logits_scaling=8.0),
    _dense("Granite 3.1 8B", "ibm-granite/granite-3.1-8b-base", "granite", 4096, 12800, 32, 8, 128, 49155, 40, True,
           logits_scaling=16.0),
    _moe("Granite 3.0 1B-A400M", "ibm-granite/granite-3.0-1b-a400m-base", "granite", 1024, 16, 8, 64, 49155, 24, True,
         32, 8, 512, logits_scaling=6.0),
    _moe("Granite 3.0 3B-A800M", "ibm-granite/granite-3.0-3b-a800m-base", "granite", 1536, 24, 8, 64, 49155, 32, True,
         40, 8, 512, logits_scaling=6.0),
    # other MoEs
    _moe("OLMoE 1B-7B", "allenai/OLMoE-1B-7B-0924", "olmo", 2048, 16, 16, 128, 50304, 16, False, 64, 8, 1024),
    _moe("DeepSeek-V2-Lite", "deepseek-ai/DeepSeek-V2-Lite", "deepseek", 2048, 16, 16, 128, 102400, 27, False, 64, 6,
         1408, intermediate_size=10944, shared_expert_intermediate_size=2 * 1408, dense_layers=1,
         mla=MLA(None, **DEEPSEEK_MLA)),
    _moe("DeepSeek-V3", "deepseek-ai/DeepSeek-V3", "deepseek", 7168, 128, 128, 128, 129280, 61, False, 256, 8, 2048,
         intermediate_size=18432, shared_expert_intermediate_size=2048, dense_layers=3, mla=MLA(1536, **DEEPSEEK_MLA),
         tensor_parallel=8, expert_parallel=32, note="the 61 layers without the multi-token-prediction module"),
    _moe("gpt-oss-20b", "openai/gpt-oss-20b", "gpt-oss", 2880, 64, 8, 64, 201088, 24, False, 32, 4, 2880, **GPT_OSS),
    _moe("gpt-oss-120b", "openai/gpt-oss-120b", "gpt-oss", 2880, 64, 8, 64, 201088, 36, False, 128, 4, 2880,
         **GPT_OSS, note="its 128 experts (4.2 GB in bf16 per projection) fit one chip: run whole"),
)

BY_NAME = {m.name: m for m in MODELS}


class Shard(NamedTuple):
    """One chip's part of a model's layers (`shard`)."""

    heads: int
    kv_heads: int
    intermediate: int
    experts: int


def shard(m: Model) -> Shard:
    """The one place a chip's shard is defined (the module docstring): heads / TP, KV heads max(1, kv / TP),
    the dense MLP / TP, experts / EP."""
    tp, ep = m.tensor_parallel, m.expert_parallel
    return Shard(m.num_attention_heads // tp, max(1, m.num_key_value_heads // tp), m.intermediate_size // tp,
                 m.num_experts // ep)
