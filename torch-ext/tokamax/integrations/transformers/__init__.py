"""transformers on these kernels (transformers 5.22): attention and MoE experts.

- `attention` is what `attn_implementation="kernels-community/tokamax:attention"` loads
  (transformers' Hub-kernel attention); `flash_attn_forward` is the same function under the name
  transformers 5.22 looks for. Upstream's splash kernel through the Torch op, for training,
  prefill and every cache step.
- `register_experts()` registers `experts_forward` (grouped matmuls through the ragged-dot Torch
  op) as transformers' experts implementation "tokamax": `experts_implementation="tokamax"`.
- `use_fused_loss(model)`: the training loss from the hidden states and the LM head's weight,
  without [tokens, vocab] logits (`loss/`).
- `flash_paged` is what `attn_implementation="kernels-community/tokamax:flash_paged"` loads for
  transformers' continuous batching (`generate_batch`): upstream's batched ragged paged attention
  over the kernel's own paged KV cache (`paged/`).
- `flash_attention` (`...:flash_attention`): `flash_paged` under continuous batching, `attention`
  everywhere else, so one name serves a model that is trained and sampled from (TRL's GRPO).

Modules: `attention` (the entry point: arguments, which phase), `prefill` (causal queries and keys
the same tokens: training, prompts), `decode` (queries against a KV cache), `bidirectional`
(encoders, cross-attention), `masks` (segment ids from padding masks and packed position ids;
a cache step's are derived in the cache op's own program), `buckets` (padding lengths to the export
buckets), `experts`.
"""

from .attention import attention, flash_attn_forward
from .experts import experts_forward, register_experts
from .flash_attention import flash_attention
from .loss import causal_lm_loss, use_fused_loss
from .paged import flash_paged

__all__ = ["attention", "causal_lm_loss", "experts_forward", "flash_attention", "flash_attn_forward", "flash_paged",
           "register_experts", "use_fused_loss"]
