"""Whole transformers training steps from Torch on the chip: forward, backward and an AdamW step of models built
from published configs (`configs`), with the kernel's attention, experts and fused loss ("tokamax") against the same
model on torch-tpu's own paths ("torch": eager attention, since sdpa failed to compile on the host's libtpu 0.0.42
("torch-sdpa" tries it); the eager experts loop; transformers' plain loss). Per model, impl and length: tokens per
second, the median step, the first step (tracing, exports, compiles), MFU against a bf16 matmul peak measured on the
same chip (a child of its own, first), and peak HBM.

    python3 -m tools.torch_chip steps --out DIR [--models llama3_8b,...] [--tokens 4096,8192] [--budget-s 420]
        [--config-timeout-s 300] [--stop-s S] [--no-fit]

Every configuration runs in a child process of its own (`isolate`): one that fails, aborts the process (an XLA
check failure), runs out of HBM or past its time limit is a record with its error and the last lines of its log
(DIR/steps-logs/), and the next one starts on a fresh chip; the results file is rewritten after each record. A
configuration out of HBM runs again a layer shorter (down to 1), then at half the tokens (down to 1,024), and the
other impls then run at the size that fit.
Configurations past the time budget are recorded as not run, with the reason. All models at the first length come
before any at the next; within a model, the kernel's side before torch's."""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import cli, configs, isolate, kernel, memory
from .records import ResultsFile, record
from .timing import timed

IMPLS = ("torch", "tokamax")
# also offered: the kernel's attention and experts with transformers' plain loss (the loss's share of the difference,
# and the kernel's layers where its fused loss is refused), and torch-tpu's own paths with transformers' sdpa
# attention (torch-tpu's flash kernel: it failed to compile on the host's libtpu 0.0.42, untried on 0.0.52)
EXTRA_IMPLS = ("tokamax-plain-loss", "torch-sdpa")
MIN_FIT_TOKENS = 1024  # the fewest tokens the fitting halves down to
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
        net.set_attn_implementation("sdpa" if impl == "torch-sdpa" else "eager")
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


def plan(models: list[str], tokens: list[int], impls: list[str], layers: dict[str, int], tiny: bool
         ) -> list[tuple[str, int, str, int]]:
    """(model, length, impl, layers) in running order: all models at the first length before the next; within a
    model, the kernel's side ("tokamax...") before torch's, so that a run cut short keeps the kernel's figure."""
    ordered = sorted(impls, key=lambda impl: not impl.startswith("tokamax"))
    out = []
    for length in tokens:
        for name in models:
            count = layers.get(name) or (configs.TINY_LAYERS if tiny else configs.PUBLISHED[name][3])
            out += [(name, length, impl, count) for impl in ordered]
    return out


def child_step(config: dict[str, Any]) -> dict[str, Any]:
    """In a child: one configuration's fields (raises on failure), with the chip's name and device."""
    from .records import device_name

    device = kernel.device()
    tokamax = kernel.bundle() if config["impl"].startswith("tokamax") else None
    m = configs.model(config["model"], tiny=config["tiny"], layers=config["layers"], tokens=config["tokens"])
    fields = measure(m, config["impl"], config["tokens"], device, tokamax, None, config["runs"], config["warmup"])
    fields.pop("mfu")
    return {**fields, "published": m.published, "context": {"chip": device_name(), "device": device}}


def child_peak(config: dict[str, Any]) -> dict[str, Any]:
    """In a child: the matmul peak on the device."""
    from .records import device_name

    device = kernel.device()
    return {**matmul_peak(device, config["n"]), "context": {"chip": device_name(), "device": device}}


def child_main(argv: list[str]) -> int:
    """`python -m tools.torch_chip.steps --child JSON`: one configuration, its answer to `isolate.CHILD_OUT`
    (exit 0 once answered, a failure included: the answer says it)."""
    config = json.loads(argv[argv.index("--child") + 1])
    try:
        fields = (child_peak if config["kind"] == "peak" else child_step)(config)
    except Exception as e:  # noqa: BLE001  (an OOM or a refusal is the answer)
        peak = memory.peak() if config["kind"] == "step" else {}
        isolate.answer(peak, error=f"{type(e).__name__}: {e}"[:4000], traceback=traceback.format_exc(limit=8)[-4000:])
        return 0
    isolate.answer(fields)
    return 0


def run(out_path: Path, commit: str, tiny: bool, *, models: list[str] | None = None, tokens: list[int] | None = None,
        impls: list[str] | None = None, layers: dict[str, int] | None = None, budget_s: float = 420.0,
        config_timeout_s: float = 300.0, stop_s: float | None = None, fit: bool = True,
        command: Callable[[dict[str, Any]], list[str]] | None = None) -> Path:
    """The training steps into `out_path` (a Torch-mode results file), each configuration in its own child
    (`isolate`); returns the path. `fit`: a configuration out of HBM is run again a layer shorter (down to 1), then
    at half the tokens (`_smaller`), and once one fits smaller the other impls run at that size too (the pair
    compares at one size).
    `command`: the child's command line for a configuration (tests give a fake)."""
    clock = isolate.Clock(budget_s, stop_s)
    command = command or (lambda config: isolate.child_command("tools.torch_chip.steps", config))
    results = ResultsFile(out_path, isolate.header("transformers training steps (torch-tpu)", commit))
    results.set("tiny", tiny)
    logs = out_path.parent / f"{out_path.stem}-logs"
    impls = impls or list(IMPLS)
    runs, warmup = (2, 0) if tiny else (5, 1)

    def context(answer: dict[str, Any] | None) -> None:
        got = (answer or {}).pop("context", None)
        if got and results.data["chip"] == isolate.NOT_READ:
            results.set("chip", got["chip"])
            results.set("device", got["device"])

    peak_flops = None
    outcome = isolate.run_one(command, {"kind": "peak", "n": TINY_MATMUL if tiny else MATMUL}, logs, "matmul-peak",
                              clock.limit(config_timeout_s))
    context(outcome.answer)
    failed = outcome.failure()
    if failed is None:
        peak_flops = outcome.answer["flops_per_s"]
        results.set("matmul_peak", outcome.answer)
    else:
        results.set("matmul_peak", failed)
    if outcome.stopped:
        return out_path
    queue = collections.deque(plan(models or list(configs.PUBLISHED), tokens or ([128] if tiny else [4096, 8192]),
                                   impls, layers or {}, tiny))
    tried: set[tuple[str, int, str, int]] = set(queue)
    full = {(name, length): count for name, length, _, count in queue}
    cut_tokens: dict[tuple[str, int], int] = {}  # a (model, length) the fitting made: the length asked for
    while queue:
        name, length, impl, count = queue.popleft()
        case = f"{name}/{length}"
        base = dict(model=name, layers=count, tokens=length, batch=1, dtype="bfloat16",
                    optimizer="torch.optim.AdamW(lr=1e-5)")
        if count < full[(name, length)]:
            base["layers_cut_from"] = full[(name, length)]
        if (name, length) in cut_tokens:
            base["tokens_cut_from"] = cut_tokens[(name, length)]
        refusal = clock.refusal()
        if refusal:
            results.add(record(OP, case, impl, PASS, None, **base, error=refusal))
            continue
        config = dict(kind="step", model=name, tokens=length, impl=impl, layers=count, tiny=tiny, runs=runs,
                      warmup=warmup)
        outcome = isolate.run_one(command, config, logs, f"{name}-{length}-{impl}-{count}l",
                                  clock.limit(config_timeout_s))
        context(outcome.answer)
        failed = outcome.failure()
        if failed is not None:
            results.add(record(OP, case, impl, PASS, None, **base, **failed))
            if outcome.stopped:
                break
            retry = _smaller(name, length, impl, count) if fit and failed.get("out_of_hbm") else None
            if retry is not None:
                if retry[1] != length:
                    full.setdefault(retry[:2], full[(name, length)])
                    cut_tokens.setdefault(retry[:2], cut_tokens.get((name, length), length))
                tried.add(retry)
                queue.appendleft(retry)
            continue
        fields = dict(outcome.answer)
        median = fields.pop("median_s")
        fields["mfu"] = fields["model_flops"] / median / peak_flops if peak_flops else None
        results.add(record(OP, case, impl, PASS, median, **base, **fields, child_s=outcome.seconds))
        if count < full[(name, length)] or (name, length) in cut_tokens:  # the others at the size that fits, for
            # a comparison at one size; the kernel's side at the front (the chip's run of 2026-12-06 spent its
            # budget on torch's smaller sizes before the kernel's pair at the size torch-sdpa fit)
            for other in reversed(sorted(impls, key=lambda impl: not impl.startswith("tokamax"))):
                pair = (name, length, other, count)
                if pair not in tried:
                    tried.add(pair)
                    queue.appendleft(pair)
    results.set("wall_s", clock.elapsed())
    return out_path


def _smaller(name: str, length: int, impl: str, count: int) -> tuple[str, int, str, int] | None:
    """The next size to try after `count` layers at `length` tokens ran out of HBM: a layer fewer, and at 1 layer half
    the tokens (down to MIN_FIT_TOKENS); None past both. torch-tpu's own paths ran out of HBM at 1 layer of Llama 3
    8B at 4,096 tokens, so a comparison at one size needs fewer tokens too."""
    if count > 1:
        return name, length, impl, count - 1
    if length // 2 >= MIN_FIT_TOKENS:
        return name, length // 2, impl, 1
    return None


def _csv(text: str | None, cast: Callable[[str], Any] = str) -> list[Any] | None:
    return [cast(x) for x in text.split(",") if x] if text else None


def main_steps(argv: list[str] | argparse.Namespace | None = None) -> int:
    """`python3 -m tools.torch_chip steps --out DIR ...`: writes DIR/steps.json; 0 once the file is written (failed
    configurations are records in it, not an exit status)."""

    parser = argparse.ArgumentParser(prog="tools.torch_chip steps")
    parser.add_argument("--out", type=Path, required=True, help="directory for steps.json")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (a CPU run of the plumbing)")
    parser.add_argument("--models", help=f"comma-separated, of {','.join(configs.PUBLISHED)}")
    parser.add_argument("--tokens", help="comma-separated lengths (default 4096,8192; --tiny 128)")
    parser.add_argument("--impls", help=f"comma-separated, of {','.join(IMPLS + EXTRA_IMPLS)} (default: "
                                        f"{','.join(IMPLS)})")
    parser.add_argument("--layers", help="model=layers,... (default: configs.PUBLISHED's)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="start no configuration after this many s")
    parser.add_argument("--config-timeout-s", type=float, default=300.0, help="a configuration's child is killed "
                        "after this many s (and recorded)")
    parser.add_argument("--stop-s", type=float, help="no child runs past this many s from the start (default: none)")
    parser.add_argument("--no-fit", action="store_true", help="do not run an out-of-HBM configuration again with "
                        "fewer layers")
    parser.add_argument("--commit", help="default: git rev-parse HEAD, else 'unknown'")
    args = parser.parse_args(cli.argv(argv))
    commit = cli.commit(args.commit)
    layers = {k: int(v) for k, v in (pair.split("=") for pair in _csv(args.layers) or [])}
    path = run(args.out / "steps.json", commit, args.tiny, models=_csv(args.models), tokens=_csv(args.tokens, int),
               impls=_csv(args.impls), layers=layers, budget_s=args.budget_s, config_timeout_s=args.config_timeout_s,
               stop_s=args.stop_s, fit=not args.no_fit)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]) if "--child" in sys.argv else main_steps(sys.argv[1:]))
