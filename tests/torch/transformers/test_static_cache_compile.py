"""transformers compiles a static cache's decode step (on "tpu" devices by itself; here on the CPU by its
CompileConfig's `_compile_all_devices`, with dynamo's "eager" backend: what is compiled, not how fast). Its
input must have one shape every step: with a mask that grew a column a token, dynamo (static shapes, as
transformers asks) compiled a new graph each step until its limit of 8, and ran the later steps op by op (on
the v5e, GRPO's rollouts on a static cache took 2.6x eager attention's time, docs/torch-chip.md)."""

from __future__ import annotations

import torch

from .models import pair, tokens

PROMPT = 37


def _graphs_compiled(model: torch.nn.Module, new_tokens: int) -> int:
    """The graphs dynamo compiled for one greedy generate of `new_tokens` on a static cache, a left-padded
    batch of two (the attention mask is handed over every step)."""
    import transformers
    from torch._dynamo.utils import counters

    config = transformers.CompileConfig(backend="eager")
    config._compile_all_devices = True  # what a "tpu" device gets without it
    model.generation_config.compile_config = config
    ids, mask = tokens(2, PROMPT, seed=6), torch.ones(2, PROMPT, dtype=torch.int64)
    mask[1, :9] = 0
    torch._dynamo.reset()
    counters.clear()
    try:
        with torch.no_grad():
            out = model.generate(input_ids=ids.masked_fill(mask == 0, 0), attention_mask=mask,
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                                 cache_implementation="static", pad_token_id=0)
        assert out.shape == (2, PROMPT + new_tokens)
        return counters["stats"]["unique_graphs"]
    finally:
        torch._dynamo.reset()


def test_a_static_caches_decode_steps_compile_once(tokamax):
    """Qwen3-MoE on the kernel's attention: as many graphs for 3 new tokens as for 7 (the steps after the
    first reuse its graphs), and as many as eager attention compiles."""
    eager, ours = pair("qwen3_moe", tokamax, train=False)
    graphs = {n: _graphs_compiled(ours, n) for n in (3, 7)}
    assert graphs[3] == graphs[7], graphs
    assert graphs[7] == _graphs_compiled(eager, 7), graphs
