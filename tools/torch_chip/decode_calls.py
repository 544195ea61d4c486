"""A decode step's attention from Torch on the chip, call by call: where GRPO's rollouts spend the time the kernel's
attention adds (2.97 s against eager attention's 1.75 s for 64 tokens, 6c78e5c). One step of a model's layers at
one fill level of a dynamic cache (the keys as transformers hands them over, one token of queries, the same mask
object for every layer), timed per layer call, medians of `runs`, each step waited for and issued back to back:

- `tokamax`: the attention function transformers loads from the kernel (`attention`, a cache step);
- `eager`, `sdpa`: transformers' own `eager_attention_forward` and `sdpa_attention_forward`, with the 4-D additive
  mask transformers builds for them (built once per step, as transformers does, not timed), and the transpose
  and copy transformers makes after each;
- `op alone`: the cache op on inputs already padded to the bucket (the kernel's launch and run, nothing else);
- `one eager op`: `x + 1` on a [batch, heads, 1, head_dim] tensor, a launch's cost on torch-tpu.

Numerics: the kernel's output against `eager`'s at every fill level (bf16: within 2^-6 of the largest |value|).

    python3 -m tools.torch_chip decode --out DIR [-- --fills 100,1000,4000 --layers 2 --batch 4]
"""

from __future__ import annotations

import argparse
import importlib
import types
from pathlib import Path
from typing import Any

from . import cli, kernel
from .records import open_results, record
from .timing import synchronize, timed

# Qwen3 0.6B's attention (GRPO's chip model, `trl_steps.CHIP_MODEL`)
HEADS, KV_HEADS, HEAD_DIM = 16, 8, 128
TINY = dict(fills=(37,), layers=2, batch=2)


def _inputs(torch: Any, device: str, batch: int, fill: int, dtype: Any) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(fill)

    def randn(*shape: int) -> Any:
        return torch.randn(*shape, generator=gen).to(dtype).to(device)

    mask = torch.ones(batch, fill, dtype=torch.int64)
    mask[1:, : fill // 5] = 0  # every row but the first left-padded
    additive = torch.zeros(batch, 1, 1, fill)
    additive[mask[:, None, None, :] == 0] = torch.finfo(torch.float32).min
    return dict(q=randn(batch, HEADS, 1, HEAD_DIM), k=randn(batch, KV_HEADS, fill, HEAD_DIM),
                v=randn(batch, KV_HEADS, fill, HEAD_DIM), mask=mask.to(device), additive=additive.to(dtype).to(device))


def _ways(tk: Any, torch: Any, x: dict[str, Any], layers: int) -> dict[str, Any]:
    """Each way's step: `layers` calls as a model's layers make them."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.models.qwen3.modeling_qwen3 import eager_attention_forward

    module = types.SimpleNamespace(is_causal=True, num_key_value_groups=HEADS // KV_HEADS, training=False)
    scale = HEAD_DIM**-0.5
    splash = tk.splash
    slots = splash.bucket(x["k"].shape[2])
    pad = torch.nn.functional.pad
    padded = dict(k=pad(x["k"], (0, 0, 0, slots - x["k"].shape[2])), v=pad(x["v"], (0, 0, 0, slots - x["k"].shape[2])),
                  mask=pad(x["mask"].to(torch.int32), (0, slots - x["k"].shape[2])))
    fill = x["k"].shape[2]
    lengths = torch.tensor([fill, 1, fill, 0], dtype=torch.int32).to(x["q"].device)  # cache_op.FROM_MASK
    first = torch.zeros(1, dtype=torch.int32).to(x["q"].device)
    op = importlib.import_module(f"{tk.__name__}.torch_ops.splash_attention.cache_op").splash_cache_op

    def ours() -> Any:
        return [tk.attention(module, x["q"], x["k"], x["v"], x["mask"], scaling=scale)[0] for _ in range(layers)]

    def transformers_way(fn: Any) -> Any:
        return lambda: [fn(module, x["q"], x["k"], x["v"], x["additive"], scaling=scale, dropout=0.0)[0]
                        .reshape(x["q"].shape[0], 1, -1).contiguous() for _ in range(layers)]

    def alone() -> Any:
        return [op(x["q"], padded["k"], padded["v"], padded["mask"], first, lengths, None, True, -1, -1, -1.0, scale)
                for _ in range(layers)]

    def one_op() -> Any:
        return [x["q"] + 1 for _ in range(layers)]

    return {"tokamax": ours, "eager": transformers_way(eager_attention_forward),
            "sdpa": transformers_way(sdpa_attention_forward), "op alone": alone, "one eager op": one_op}


def run(out_path: Path, commit: str, tiny: bool, device: str, *, fills: tuple[int, ...], layers: int, batch: int,
        runs: int) -> Path:
    import torch

    tk = kernel.bundle()
    results = open_results(out_path, "decode calls (torch-tpu)", commit)
    results.set("model", dict(heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM, layers=layers, batch=batch,
                              dtype="float32" if tiny else "bfloat16"))
    dtype = torch.float32 if tiny else torch.bfloat16
    for fill in fills:
        x = _inputs(torch, device, batch, fill, dtype)
        ways = _ways(tk, torch, x, layers)
        with torch.no_grad():
            got = ways["tokamax"]()[0].reshape(batch, 1, -1).float().cpu()
            want = ways["eager"]()[0].float().cpu()
            synchronize()
            error = float((got - want).abs().max())
            bound = 2**-6 * float(want.abs().max())
            for name, fn in ways.items():
                try:
                    t = timed(fn, runs=runs, warmup=3)
                except Exception as e:  # noqa: BLE001  (a way torch-tpu cannot run is a record, not a stop)
                    results.add(record("decode", f"fill {fill}", name, "step", None,
                                       error=f"{type(e).__name__}: {e}"[:2000]))
                    continue
                checked = {"max_abs_error": error, "bound": bound, "numerics": "passed" if error <= bound else "failed"}
                results.add(record("decode", f"fill {fill}", name, "step", t.median_s / layers, per="layer call",
                                   pipelined_s=t.pipelined_s / layers, first_s=t.first_s, fill=fill,
                                   slots=tk.splash.bucket(fill), **(checked if name == "tokamax" else {})))
    return out_path


def main_decode(given: list[str] | argparse.Namespace | None = None, device: str = "tpu") -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tools.torch_chip decode")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--commit")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--fills", default="100,1000,4000")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args(cli.argv(given))
    if isinstance(given, argparse.Namespace):
        device = given.device
    fills = TINY["fills"] if args.tiny else tuple(int(f) for f in args.fills.split(","))
    layers, batch = (TINY["layers"], TINY["batch"]) if args.tiny else (args.layers, args.batch)
    args.out.mkdir(parents=True, exist_ok=True)
    run(args.out / "decode.json", cli.commit(args.commit), args.tiny, device, fills=fills, layers=layers,
        batch=batch, runs=3 if args.tiny else args.runs)
    return 0
