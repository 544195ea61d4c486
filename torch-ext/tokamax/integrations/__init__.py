"""transformers on these kernels: an attention function and an experts implementation.

- `attention` is what `attn_implementation="kernels-community/tokamax:attention"` loads
  (transformers' Hub-kernel attention): upstream's splash attention through the Torch op.
- `register_experts()` registers `experts_forward` (grouped matmuls through the ragged-dot Torch
  op) as transformers' experts implementation "tokamax": `experts_implementation="tokamax"`.
"""
