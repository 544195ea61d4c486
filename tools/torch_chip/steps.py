"""Whole transformers training steps from Torch on the chip: forward, backward and an AdamW step of models built
from published configs (`configs`), with the kernel's attention, experts and fused loss ("tokamax") against the same
model on torch-tpu's own paths ("torch": eager attention, since sdpa fails to compile on the host's libtpu; the
eager experts loop; transformers' plain loss). Per model, impl and length: tokens per second, the median step, the
first step (tracing, exports, compiles), MFU against a bf16 matmul peak measured in the same process, and peak HBM.

    python3 -m tools.torch_chip steps --out DIR [--models llama3_8b,...] [--tokens 4096,8192] [--budget-s 420]

Every configuration runs in its own try/except: a failure (an out-of-memory, a refusal) is a record with its error
text, and the results file is rewritten after each record. Configurations past the time budget are recorded as not
run, with the reason. All models at the first length come before any at the next."""

from __future__ import annotations

import argparse
import gc
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import configs, kernel, memory
from .records import open_results, record
from .timing import timed

IMPLS = ("torch", "tokamax")
# also offered: the kernel's attention and experts with transformers' plain loss (the loss's share of the difference,
# and the kernel's layers where its fused loss is refused)
EXTRA_IMPLS = ("tokamax-plain-loss",)
MATMUL = 8192  # the peak: a bf16 [8192, 8192] @ [8192, 8192] on the device
TINY_MATMUL = 256
OP = "train_step"
PASS = "fwd+bwd+adamw"


def matmul_peak(device: str, n: int) -> dict[str, Any]:
    """FLOP/s of a bf16 n-cube matmul on `device` (median of 10): MFU's denominator."""
    import torch

    a = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    t = timed(lambda: a @ b, runs=10, warmup=2)
    return {"matmul": f"bf16 {n}^3", "median_s": t.median_s, "first_s": t.first_s,
            "flops_per_s": 2.0 * n**3 / t.median_s}


def _moe(config: Any) -> bool:
    return bool(getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None))


def build(m: configs.Model, impl: str, device: str, tokamax: Any) -> Any:
    """`m` with random bf16 weights on `device`, its attention, experts and loss those of `impl`."""
    import copy

    import torch
    import transformers

    torch.manual_seed(0)
    config = copy.deepcopy(m.config)
    net = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).to(device)
    if impl.startswith("tokamax"):
        net.set_attn_implementation(kernel.ATTENTION)
        if _moe(config):
            net.set_experts_implementation(tokamax.register_experts())
        if impl == "tokamax":
            tokamax.use_fused_loss(net)
    else:
        net.set_attn_implementation("eager")
        if _moe(config):
            net.set_experts_implementation("eager")
    return net.train()


def _train_step(net: Any, optimizer: Any, ids: Any) -> Callable[[], Any]:
    def step() -> Any:
        loss = net(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def measure(m: configs.Model, impl: str, tokens: int, device: str, tokamax: Any, peak_flops: float | None,
            runs: int, warmup: int) -> dict[str, Any]:
    """One configuration's record fields (raises on any failure: the caller records it)."""
    import torch

    memory.reset_peak()
    start = time.perf_counter()
    net = build(m, impl, device, tokamax)
    build_s = time.perf_counter() - start
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-5)
    ids = torch.randint(0, m.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(tokens)).to(device)
    step = _train_step(net, optimizer, ids)
    losses: list[float] = []
    t = timed(lambda: losses.append(step()), runs=runs, warmup=warmup)
    flops = configs.step_flops(m.config, tokens)
    out = {"median_s": t.median_s, "first_step_s": t.first_s, "min_s": t.min_s, "max_s": t.max_s, "runs": t.runs,
           "tokens_per_s": tokens / t.median_s, "model_flops": flops, "build_s": build_s,
           "mfu": flops / t.median_s / peak_flops if peak_flops else None,
           "loss_first": float(losses[0]), "loss_last": float(losses[-1]),
           "parameters": sum(p.numel() for p in net.parameters()),
           "attention": net.config._attn_implementation,
           "experts": getattr(net.config, "_experts_implementation", None) if _moe(m.config) else None,
           **memory.peak()}
    return out  # the model, its optimizer state and the step's closure go with this frame


def _free() -> None:
    gc.collect()


def run(out_path: Path, commit: str, tiny: bool, *, models: list[str] | None = None, tokens: list[int] | None = None,
        impls: list[str] | None = None, layers: dict[str, int] | None = None, budget_s: float = 420.0) -> Path:
    """The training steps into `out_path` (a Torch-mode results file); returns it."""
    start = time.perf_counter()
    device = kernel.device()
    results = open_results(out_path, "transformers training steps (torch-tpu)", commit)
    results.set("device", device)
    results.set("tiny", tiny)
    try:
        tokamax = kernel.bundle()
    except Exception as e:  # noqa: BLE001  (every tokamax record then says why)
        tokamax, load_error = None, f"{type(e).__name__}: {e}"
    else:
        load_error = None
    peak_flops = None
    try:
        peak = matmul_peak(device, TINY_MATMUL if tiny else MATMUL)
        peak_flops = peak["flops_per_s"]
        results.set("matmul_peak", peak)
    except Exception as e:  # noqa: BLE001
        results.set("matmul_peak", {"error": f"{type(e).__name__}: {e}"})
    models = models or list(configs.PUBLISHED)
    tokens = tokens or ([128] if tiny else [4096, 8192])
    runs, warmup = (2, 0) if tiny else (5, 1)
    for length in tokens:
        for name in models:
            try:
                m = configs.model(name, tiny=tiny, layers=(layers or {}).get(name), tokens=length)
            except Exception as e:  # noqa: BLE001
                results.add(record(OP, f"{name}/{length}", "config", PASS, None, error=f"{type(e).__name__}: {e}"))
                continue
            for impl in impls or IMPLS:
                case = f"{name}/{length}"
                base = dict(model=name, published=m.published, layers=m.layers, tokens=length, batch=1,
                            device=device, dtype="bfloat16", optimizer="torch.optim.AdamW(lr=1e-5)")
                elapsed = time.perf_counter() - start
                if elapsed > budget_s:
                    why = f"not run: the time budget ({budget_s:.0f} s) was spent ({elapsed:.0f} s)"
                    results.add(record(OP, case, impl, PASS, None, **base, error=why))
                    continue
                if impl.startswith("tokamax") and tokamax is None:
                    results.add(record(OP, case, impl, PASS, None, **base, error=f"bundle not loaded: {load_error}"))
                    continue
                try:
                    fields = measure(m, impl, length, device, tokamax, peak_flops, runs, warmup)
                    results.add(record(OP, case, impl, PASS, fields.pop("median_s"), **base, **fields))
                except Exception as e:  # noqa: BLE001  (an OOM or a refusal is a result)
                    results.add(record(OP, case, impl, PASS, None, **base, error=f"{type(e).__name__}: {e}",
                                       traceback=traceback.format_exc(limit=8)[-4000:], **memory.peak()))
                _free()
    results.set("wall_s", time.perf_counter() - start)
    return out_path


def _csv(text: str | None, cast: Callable[[str], Any] = str) -> list[Any] | None:
    return [cast(x) for x in text.split(",") if x] if text else None


def main_steps(argv: list[str] | argparse.Namespace | None = None) -> int:
    """`python3 -m tools.torch_chip steps --out DIR ...`: writes DIR/steps.json; 0 once the file is written (failed
    configurations are records in it, not an exit status)."""
    import subprocess

    parser = argparse.ArgumentParser(prog="tools.torch_chip steps")
    parser.add_argument("--out", type=Path, required=True, help="directory for steps.json")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (a CPU run of the plumbing)")
    parser.add_argument("--models", help=f"comma-separated, of {','.join(configs.PUBLISHED)}")
    parser.add_argument("--tokens", help="comma-separated lengths (default 4096,8192; --tiny 128)")
    parser.add_argument("--impls", help=f"comma-separated, of {','.join(IMPLS + EXTRA_IMPLS)} (default: "
                                        f"{','.join(IMPLS)})")
    parser.add_argument("--layers", help="model=layers,... (default: configs.PUBLISHED's)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="start no configuration after this many s")
    parser.add_argument("--commit", help="default: git rev-parse HEAD, else 'unknown'")
    args = parser.parse_args(_argv(argv))
    commit = args.commit
    if commit is None:
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                    check=True).stdout.strip()
        except Exception:  # noqa: BLE001  (a copy without .git)
            commit = "unknown"
    layers = {k: int(v) for k, v in (pair.split("=") for pair in _csv(args.layers) or [])}
    path = run(args.out / "steps.json", commit, args.tiny, models=_csv(args.models), tokens=_csv(args.tokens, int),
               impls=_csv(args.impls), layers=layers, budget_s=args.budget_s)
    print(path)
    return 0


def _argv(given: list[str] | argparse.Namespace | None) -> list[str] | None:
    """An argument list, or the `tools.torch_chip` entry point's namespace (--out, --commit, --tiny, and this
    script's own options after `--` in `rest`) turned into one."""
    if not isinstance(given, argparse.Namespace):
        return given
    out = ["--out", str(given.out)]
    if getattr(given, "commit", None) and given.commit != "unknown":
        out += ["--commit", given.commit]
    if getattr(given, "tiny", False):
        out.append("--tiny")
    return out + [a for a in getattr(given, "rest", None) or [] if a != "--"]
