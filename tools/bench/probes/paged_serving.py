"""Probe (Torch tier): transformers' continuous batching on tokamax's `flash_paged` (upstream's batched ragged paged
attention), counted, not timed.

    python paged_serving.py VARIANT_DIR
1. K/V bytes one decode step reads, per layer, for a batch of 8 sequences at fill levels 37, 1000, 2048 and 4096
   tokens (and a batch of mixed fills), bfloat16, transformers' default page size 256. batched_rpa: the bytes
   upstream's kernel DMAs in, summed from the schedule its metadata kernel computes for the arguments
   `flash_paged` builds (run in Pallas interpret mode: `total_wait_kv_in`, what the kernel waits for), head_dim
   padded to 128 included. transformers' `paged|eager` and `sdpa` (continuous batching off CUDA): `cache.update`
   gathers every sequence's whole K and V out of the page cache (`index_select`), then the attention reads them
   repeated per query head (`repeat_kv`: with the 4-D mask continuous batching passes, sdpa takes no GQA path).
2. torch-tpu exports of one `generate_batch` run (tiny Llama with GQA, 2 layers, prompts of 3 to 60 tokens, 12 new
   tokens, page size 16, 4 requests a batch), counted with torch-tpu's own invocation keys
   (tests/torch/export_probe.py) for 8, 16 and 32 requests, against the distinct (tokens, sequences, pages)
   shapes the steps have (one export each without buckets). Prints JSON.
"""

import importlib
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

FILLS, BATCH, PAGE = (37, 1000, 2048, 4096), 8, 256
LAYERS = {"qwen3-30b-a3b": (32, 4, 128), "llama-3-8b": (32, 8, 128)}  # name: (heads, kv_heads, head_dim)


def _plan(tokamax, paged, fills: list[int], heads: int, kv_heads: int, dim: int):  # noqa: ANN001, ANN202
    """The arguments flash_paged hands the op for a decode step of sequences at `fills` tokens (the new one
    included), over transformers' own paged cache."""
    import transformers

    from tests.torch.transformers.cb_batches import Batches

    config = transformers.LlamaConfig(num_hidden_layers=1, num_attention_heads=heads, num_key_value_heads=kv_heads,
                                      head_dim=dim, hidden_size=heads * dim)
    batches = Batches(config, PAGE, num_blocks=sum(-(-f // PAGE) for f in fills) + 4, dtype=torch.bfloat16)
    batches.step([(f"r{i}", f - 1) for i, f in enumerate(fills)])
    kw = batches.step([(f"r{i}", 1) for i in range(len(fills))])
    return paged.schedule.plan(kw["cu_seq_lens_q"].tolist(), kw["cu_seq_lens_k"]["full_attention"].tolist(),
                               len(fills), kw["read_index"][0], kw["write_index"][0], PAGE,
                               batches.allocator.block_physical_stride, torch.device("cpu"))


def rpa_bytes(tokamax, paged, fills: list[int], heads: int, kv_heads: int, dim: int) -> dict:  # noqa: ANN001
    """KV bytes the kernel's decode pass DMAs in, from upstream's schedule, as the wrapper builds it."""
    import jax.numpy as jnp
    import numpy as np

    root = f"{tokamax.__name__}._ported._src.ops.batched_rpa"
    configs = importlib.import_module(f"{root}.kernel.configs")
    schedule = importlib.import_module(f"{root}.kernel.schedule")
    op = importlib.import_module(f"{root}.pallas_mosaic_tpu").PallasTpuBatchedRpa()
    plan = _plan(tokamax, paged, fills, heads, kv_heads, dim)
    cu_q, kv_lens, distribution = (jnp.asarray(t.numpy()) for t in (plan.cu_q_lens, plan.kv_lens, plan.distribution))
    q_lens = cu_q[1:] - cu_q[:-1]
    bf16 = jnp.dtype(jnp.bfloat16)
    with tokamax.emulation.emulated_chip("v6e"):
        from jax.experimental.pallas import tpu as pltpu

        config = op._get_heuristics_config(None)  # upstream's choice (no table entry for these shapes)
        cfgs = configs.RpaConfigs(
            block=configs.BlockSizes(bq_sz=1, bq_c_sz=1, bkv_sz=config.bkv_sz, batch_size=config.decode_batch_size,
                                     n_buffer=config.n_buffer),
            model=configs.ModelConfigs(num_q_heads=heads, num_kv_heads=kv_heads, head_dim=dim, sliding_window=None,
                                       sm_scale=dim**-0.5, soft_cap=None, mask_value=float(jnp.finfo(bf16).min)),
            serve=configs.ServingConfigs(num_seqs=plan.kv_lens.shape[0], num_page_indices=plan.page_indices.shape[0],
                                         total_q_tokens=plan.padded_tokens, dtype_q=bf16, dtype_kv=bf16,
                                         dtype_out=bf16, page_size=PAGE),
            vmem_limit_bytes=pltpu.get_tpu_info().vmem_capacity_bytes, mode=configs.RpaCase.DECODE)
        cached = kv_lens - q_lens
        sched = schedule.generate_rpa_metadata(cu_q, cached, cached, q_lens, distribution, cfgs=cfgs, interpret=True)
        steps = int(np.asarray(getattr(sched.actual_steps, "data", sched.actual_steps))[0])
        waits = np.asarray(getattr(sched.total_wait_kv_in, "data", sched.total_wait_kv_in))[:steps].astype(np.int64)
        per_token = cfgs.kv_bytes_per_token
    return {"bytes": int(waits.sum()) * 512, "steps": steps, "bytes_per_token": per_token,
            "distribution": plan.distribution.tolist()}


def transformers_bytes(fills: list[int], heads: int, kv_heads: int, dim: int) -> dict:
    """paged|eager / sdpa off CUDA: the gather of every sequence's whole K and V, then K and V repeated per query
    head for the attention (bf16)."""
    gathered = sum(fills) * 2 * kv_heads * dim * 2
    repeated = gathered * (heads // kv_heads)
    return {"gather": gathered, "attention": repeated, "total": gathered + repeated}


def reads(tokamax, paged) -> dict:  # noqa: ANN001
    out = {}
    batches = {f"{BATCH} x {fill}": [fill] * BATCH for fill in FILLS}
    batches["mixed 37..4096"] = [37, 300, 1000, 1500, 2048, 2600, 3500, 4096]
    for name, (heads, kv_heads, dim) in LAYERS.items():
        out[name] = {label: {"batched_rpa": rpa_bytes(tokamax, paged, fills, heads, kv_heads, dim),
                             "paged_eager_or_sdpa": transformers_bytes(fills, heads, kv_heads, dim),
                             "ideal": sum(fills) * 2 * kv_heads * dim * 2}
                     for label, fills in batches.items()}
    return out


def exports(tokamax, paged) -> dict:  # noqa: ANN001
    """batched_rpa exports per generate_batch run, for more and more requests."""
    import transformers

    from tests.torch.export_probe import ExportProbe
    from tests.torch.transformers import cb_models

    namespace = importlib.import_module(f"{tokamax.__name__}._ops")._OPS_NAME
    _, model = cb_models.pair("llama-gqa")
    plan, seen = paged.schedule.plan, set()

    def watched(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the unbucketed shape of each step
        cu_q = args[0]
        pages = [-(-(b - a) // args[5]) for a, b in zip(args[1][:-1], args[1][1:], strict=True)]
        seen.add((args[2], sum(1 for a, b in zip(cu_q[:-1], cu_q[1:], strict=True) if b > a), max(pages)))
        return plan(*args, **kwargs)

    paged.schedule.plan = watched
    out = {}
    try:
        for requests in (8, 16, 32):
            out[requests] = _run(model, namespace, requests, seen, ExportProbe, cb_models, transformers)
    finally:
        paged.schedule.plan = plan
    # The bound the buckets set, from the run's limits: <= 64 tokens and 4 requests a step, <= 72 tokens a sequence.
    sched = paged.schedule
    sizes = [{sched.bucket(n, floor) for n in range(1, top + 1)} for top, floor in
             ((64, sched.MIN_TOKENS), (4, sched.MIN_SEQS), (-(-72 // 16), sched.MIN_PAGES))]
    out["bound"] = len(sizes[0]) * len(sizes[1]) * len(sizes[2])
    return out


def _run(model, namespace: str, requests: int, seen: set, probe_cls, cb_models, transformers) -> dict:  # noqa: ANN001
    """One generate_batch run of `requests` requests, its forwards probed (they run on the manager's thread)."""
    probe, forwards, forward = probe_cls(namespace), [0], model.forward

    def probed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        forwards[0] += 1
        with probe:
            return forward(*args, **kwargs)

    model.forward = probed
    seen.clear()
    lengths = [3 + (17 * i) % 58 for i in range(requests)]
    gen = transformers.GenerationConfig(max_new_tokens=12, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = transformers.ContinuousBatchingConfig(page_size=16, num_blocks=24, max_batch_tokens=64,
                                               max_requests_per_batch=4)
    try:
        model.generate_batch(cb_models.prompts(lengths, seed=requests), generation_config=gen,
                             continuous_batching_config=cb)
    finally:
        del model.forward
    return {"exports": probe.exports().get("batched_rpa", 0), "forwards": forwards[0],
            "kernel_calls": probe.count("batched_rpa"), "shapes_without_buckets": len(seen)}


def main() -> int:
    os.environ["LOCAL_KERNELS"] = f"kernels-community/tokamax={sys.argv[1]}"
    import kernels

    tokamax = kernels.get_kernel("kernels-community/tokamax", version=1)
    paged = importlib.import_module(f"{tokamax.__name__}.integrations.transformers.paged")
    print(json.dumps({"page_size": PAGE, "batch": BATCH, "reads": reads(tokamax, paged),
                      "exports": exports(tokamax, paged)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
