"""transformers MoE experts on the ragged-dot Torch op (`gmm`), registered as "tokamax".

transformers' experts modules hold `gate_up_proj` [experts, 2 * inter, hidden] and `down_proj`
[experts, hidden, inter] (or transposed, `is_transposed`), optional biases, `act_fn` and
`_apply_gate`. Tokens are sorted by expert, both projections run as grouped matmuls (one group
per expert), and the results are weighted by the routing weights and summed back per token:
what transformers' grouped_mm implementation computes, on upstream's ragged dot.
"""

from __future__ import annotations

import torch

from ... import torch_ops

NAME = "tokamax"


def _grouped(x: torch.Tensor, weight: torch.Tensor, sizes: torch.Tensor, transposed: bool,
             bias: torch.Tensor | None, expert_of_row: torch.Tensor) -> torch.Tensor:
    out = torch_ops.gmm(x, weight.to(x.dtype), sizes, transpose_rhs=not transposed)
    return out if bias is None else out + bias[expert_of_row].to(out.dtype)


def experts_forward(self: torch.nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor) -> torch.Tensor:
    """An experts module's forward: hidden_states [tokens, hidden] -> [tokens, hidden]."""
    num_top_k, (num_tokens, hidden) = top_k_index.size(-1), hidden_states.shape
    expert_ids, perm = torch.sort(top_k_index.reshape(-1), stable=True)
    x = hidden_states[perm // num_top_k]
    # expert parallelism by router masking: another rank's experts come as the sentinel num_experts
    # (weight 0), sorted last, past the group sizes' sum, where the kernel leaves rows undefined
    # forward and backward: masked on the way in and out
    routed = (expert_ids < self.num_experts)[:, None] if getattr(self, "_is_expert_parallel", False) else None
    sizes = torch.bincount(expert_ids, minlength=self.num_experts)[:self.num_experts].to(torch.int32)
    if routed is not None:
        x, expert_ids = torch.where(routed, x, 0), expert_ids.clamp(max=self.num_experts - 1)  # (bias rows)
    has_gate, has_bias = getattr(self, "has_gate", True), getattr(self, "has_bias", False)
    transposed = getattr(self, "is_transposed", False)
    weight = self.gate_up_proj if has_gate else self.up_proj
    bias = (self.gate_up_proj_bias if has_gate else self.up_proj_bias) if has_bias else None
    proj = _grouped(x, weight, sizes, transposed, bias, expert_ids)
    proj = self._apply_gate(proj) if has_gate else self.act_fn(proj)
    out = _grouped(proj, self.down_proj, sizes, transposed, self.down_proj_bias if has_bias else None, expert_ids)
    if routed is not None:
        out = torch.where(routed, out, 0)
    if getattr(self, "has_post_expert_norm", False):
        out = self.post_expert_norm(out)
    out = out * top_k_weights.reshape(-1)[perm].unsqueeze(-1).to(out.dtype)
    unsorted = torch.empty_like(out).index_copy(0, perm, out)
    return unsorted.view(num_tokens, num_top_k, hidden).sum(dim=1).to(hidden_states.dtype)


def register_experts() -> str:
    """Registers `experts_forward` with transformers; returns the name to pass as `experts_implementation`."""
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    ALL_EXPERTS_FUNCTIONS.register(NAME, experts_forward)
    return NAME
