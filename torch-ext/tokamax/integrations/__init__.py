"""Integrations with other libraries; one folder each.

- `transformers`: the attention function `attn_implementation="kernels-community/tokamax:attention"`
  loads, and the experts implementation "tokamax" (`register_experts()`).
"""
