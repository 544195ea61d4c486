"""The fused causal-LM loss for transformers training: the loss from the last hidden states and the
LM head's weight through upstream's linear softmax cross-entropy, without [tokens, vocab] logits.

- `model`: `use_fused_loss(model)`, one call for any causal LM built as `model` + `lm_head`.
- `causal_lm`: `causal_lm_loss`, transformers' `ForCausalLMLoss` (label shift, ignored labels,
  `shift_labels`, `num_items_in_batch`) on hidden states instead of logits.
"""

from .causal_lm import causal_lm_loss
from .model import use_fused_loss

__all__ = ["causal_lm_loss", "use_fused_loss"]
