"""TRL's trainers from Torch on the chip: SFTTrainer (and with a LoRA adapter), DPOTrainer and GRPOTrainer a few steps
each with the kernel's attention and fused head ("tokamax": `use_fused_loss`, TRL's fused head on the kernel)
against the same trainer on TRL's and torch-tpu's own paths ("trl": eager attention, TRL's fused head as a loop of
torch tiles), and GRPO's rollouts through `generate` alone. Per case: each step's time (first, median of the rest),
the fused-head calls the kernel served, the device the model trained on. A Qwen3 from a config (random weights; a
byte-level tokenizer built here; in-memory datasets), bf16 on the chip.

    python3 -m tools.torch_chip trl --out DIR [--cases sft,sft-lora,dpo,grpo,generate,generate-static] [--steps 4]
        [--budget-s 420] [--config-timeout-s 240] [--stop-s S]

Every case and impl runs in a child process of its own (`isolate`), the kernel's side of a case first, and is a
record (its error text and the last lines of its log, DIR/trl-logs/, where it failed, aborted or ran past its time
limit); the results file is rewritten after each."""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import cli, isolate, kernel, line_times, memory, missing_ops
from .records import ResultsFile, record
from .step_timer import finished, step_timer
from .timing import synchronize, timed
from .tokenizer import byte_tokenizer

IMPLS = ("trl", "tokamax")
CASES = ("sft", "sft-lora", "dpo", "grpo", "grpo-cb", "generate", "generate-static")
TEXTS = ["Splash attention reads only the blocks a mask keeps.", "Short.", "tpu kernels from torch",
         "the fused head never forms the logits", "grouped matmuls for the experts", "one more line of text",
         "abc def ghi", "hello world, said the kernel"]
# a Qwen3 0.6B-like model at 2 layers on the chip (its 151,936-entry head is where the fused head matters)
CHIP_MODEL = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=2,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128)
# Batches padded to a multiple of 128 tokens on the chip, as TRL's "auto" does for Neuron: torch-tpu compiles each op
# per shape, and unpadded batches (each as long as its longest row) gave every step a new shape to compile (348a9b6's
# run: SFT's step times fell step by step, 2.23 to 1.82 s, and DPO ran past 141 s in its third step). The CPU's tiny
# runs stay unpadded.
PAD_TO = {False: 128, True: None}
TRACE = "TORCH_CHIP_TRACE"
"""A folder: `generate` runs once more under torch-tpu's profiler, its trace written there (`traces`' reader)."""
TINY_MODEL = dict(vocab_size=260, hidden_size=128, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=128)


def make_model(impl: str, device: str, tiny: bool, attention: str | None = None) -> Any:
    """A fresh Qwen3 (seed 0) with `impl`'s attention (`attention` overrides it), saved to a temporary directory
    and loaded back (TRL loads reference models from `config._name_or_path`), on `device`."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen3Config(**(TINY_MODEL if tiny else CHIP_MODEL), max_position_embeddings=2048,
                                      pad_token_id=1, eos_token_id=0, bos_token_id=None, tie_word_embeddings=False,
                                      attention_dropout=0.0)
    dtype = torch.float32 if tiny else torch.bfloat16
    directory = tempfile.mkdtemp(prefix="trl-steps-")
    transformers.Qwen3ForCausalLM(config).to(dtype).save_pretrained(directory)
    name = attention or (kernel.ATTENTION if impl == "tokamax" else "eager")
    return transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=dtype, attn_implementation=name).to(
        device)


def arguments(device: str, tiny: bool, steps: int) -> dict[str, Any]:
    return dict(output_dir=tempfile.mkdtemp(prefix="trl-out-"), max_steps=steps, per_device_train_batch_size=2,
                report_to="none", save_strategy="no", logging_steps=1, use_cpu=device == "cpu", bf16=False,
                gradient_checkpointing=False, disable_tqdm=True, learning_rate=1e-5, seed=0,
                dataloader_pin_memory=False)


def dataset(columns: dict[str, list[Any]]) -> Any:
    """An in-memory `datasets.Dataset` with its fingerprint given: `Dataset.from_dict` hashes the table by pickling
    it, which fails on CPython 3.11 with datasets 5.2.0 (`PicklingError: Can't pickle <class 'MonthDayNano'>`,
    seen with pyarrow 21 and 26, dill 0.3.8 to 0.4.1); the trainers' own maps hash their functions, not the table."""
    import pyarrow as pa
    from datasets import Dataset

    return Dataset(pa.table(columns), fingerprint=f"trl-steps-{abs(hash(repr(columns)))}")


def _sft(lora: bool) -> Callable[..., Any]:
    def make(net: Any, tok: Any, args: dict[str, Any], tiny: bool) -> Any:
        from trl import SFTConfig, SFTTrainer

        peft = None
        if lora:
            from peft import LoraConfig

            peft = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                              lora_dropout=0.0)
        return SFTTrainer(model=net, args=SFTConfig(max_length=64 if tiny else 512, pad_to_multiple_of=PAD_TO[tiny],
                                                    **args), peft_config=peft,
                          train_dataset=dataset({"text": TEXTS}), processing_class=tok)
    return make


def _dpo(net: Any, tok: Any, args: dict[str, Any], tiny: bool) -> Any:
    from trl import DPOConfig, DPOTrainer

    data = dataset({"prompt": TEXTS[:4], "chosen": [" yes, surely", " ok", " fine", " right"],
                              "rejected": [" no", " bad idea", " wrong", " never"]})
    return DPOTrainer(model=net, ref_model=copy.deepcopy(net), train_dataset=data, processing_class=tok,
                      args=DPOConfig(max_length=64 if tiny else 512, pad_to_multiple_of=PAD_TO[tiny], **args))


def _reward(completions: Any, completion_ids: Any, **kwargs: Any) -> list[float]:
    """A reward that differs between a prompt's samples (a constant one gives no gradient)."""
    return [float(sum(ids) % 7) for ids in completion_ids]


def _grpo(continuous: bool) -> Callable[..., Any]:
    def make(net: Any, tok: Any, args: dict[str, Any], tiny: bool) -> Any:
        from trl import GRPOConfig, GRPOTrainer

        return GRPOTrainer(model=net, reward_funcs=_reward, processing_class=tok,
                           train_dataset=dataset({"prompt": TEXTS[:4]}),
                           args=GRPOConfig(num_generations=2, max_completion_length=8 if tiny else 64,
                                           temperature=0.9, use_transformers_continuous_batching=continuous,
                                           pad_to_multiple_of=PAD_TO[tiny], **args))
    return make


TRAINERS: dict[str, Callable[..., Any]] = {"sft": _sft(False), "sft-lora": _sft(True), "dpo": _dpo,
                                           "grpo": _grpo(False), "grpo-cb": _grpo(True)}


def train(case: str, impl: str, device: str, tiny: bool, steps: int, tokamax: Any) -> dict[str, Any]:
    """`case`'s trainer for `steps` steps under `impl`; the record's fields (raises on failure)."""
    import trl  # noqa: F401  (before use_fused_loss, as docs/trl.md says)

    attention = kernel.FLASH if case == "grpo-cb" and impl == "tokamax" else None
    net = make_model(impl, device, tiny, attention)
    counted = {}
    if impl == "tokamax":
        tokamax.use_fused_loss(net)
        dispatch = importlib.import_module(f"{tokamax.__name__}.integrations.trl.dispatch")
        counted = dict(dispatch.calls)
    trainer = TRAINERS[case](net, byte_tokenizer(), arguments(device, tiny, steps), tiny)
    timer = step_timer(trainer)
    memory.reset_peak()
    start = time.perf_counter()
    with line_times.traced(os.environ.get(line_times.VARIABLE)) as lines:  # where a function's own lines go
        trainer.train()
        synchronize()
    wall = time.perf_counter() - start
    times = timer.times
    logs = [e for e in trainer.state.log_history if "loss" in e]
    served = {k: v - counted.get(k, 0) for k, v in dispatch.calls.items()} if impl == "tokamax" else None
    out = {"median_s": statistics.median(times[1:]) if len(times) > 1 else (times[0] if times else None),
           "first_step_s": times[0] if times else None, "step_times_s": times, "step_phases_s": timer.phases,
           "train_s": wall, "steps": len(times),
           "loss_first": logs[0]["loss"] if logs else None, "loss_last": logs[-1]["loss"] if logs else None,
           "trained_on": str(next(trainer.model.parameters()).device), "attention": net.config._attn_implementation,
           "fused_head_calls": served, **memory.peak()}
    if lines is not None:
        out["line_times"] = {"function": os.environ[line_times.VARIABLE], "slowest": lines.slowest()}
    del trainer, net
    return out


def rollouts(impl: str, device: str, tiny: bool, cache: str = "dynamic") -> dict[str, Any]:
    """GRPO's rollouts alone: `generate` of 2 prompts x 2 samples, `new` tokens each (sampling), timed. `cache`:
    transformers' dynamic cache (GRPO's; its keys grow a token a step, so each step's eager ops on them have a new
    shape), or a static one (`generate-static`: every step the same shapes, the kernel's cache unpadded)."""
    import torch

    net = make_model(impl, device, tiny).eval()
    tok = byte_tokenizer()
    batch = tok(TEXTS[:2], padding=True, padding_side="left", return_tensors="pt").to(device)
    new = 8 if tiny else 64

    def generate() -> Any:
        return net.generate(**batch, max_new_tokens=new, do_sample=True, temperature=0.9, num_return_sequences=2,
                            pad_token_id=1, **({"cache_implementation": "static"} if cache == "static" else {}))

    from torch._dynamo.utils import counters

    counters.clear()
    with torch.no_grad():
        t = timed(generate, runs=2 if tiny else 3, warmup=0)
        traced = os.environ.get(TRACE)
        if traced:  # one more generate under torch-tpu's profiler: the chip's own account of a step
            from .traces import torch_profiler

            where = Path(traced) / f"generate-{cache}-{impl}"
            with torch_profiler(where):
                generate()
                synchronize()
            for i, found in enumerate(sorted(where.rglob("*.xplane.pb"))):  # up from the profiler's nested folders,
                found.rename(where / f"{i}.xplane.pb")  # which a chip host's transfer back leaves out
    compiled = {"graph_breaks": sum(counters["graph_break"].values()),
                "unique_graphs": counters["stats"].get("unique_graphs", 0),
                "break_reasons": sorted(counters["graph_break"])[:8]}
    return {"median_s": t.median_s, "first_step_s": t.first_s, "new_tokens": new, "sequences": 4,
            "tokens_per_s": 4 * new / t.median_s, "attention": net.config._attn_implementation, "cache": cache,
            "dynamo": compiled, **({"trace": str(where)} if traced else {})}


def child_main(argv: list[str]) -> int:
    """`python -m tools.torch_chip.trl_steps --child JSON`: one (case, impl), its answer to `isolate.CHILD_OUT`
    (exit 0 once answered, a failure included)."""
    from .records import device_name

    config = json.loads(argv[argv.index("--child") + 1])
    case, impl, tiny = config["case"], config["impl"], config["tiny"]
    try:
        device = kernel.device()
        context = {"chip": device_name(), "device": device}
        if device == "tpu":
            os.environ.setdefault("ACCELERATE_TORCH_DEVICE", "tpu")  # accelerate knows no torch-tpu device otherwise
            context["substituted_ops"] = missing_ops.register()
        tokamax = kernel.bundle() if impl == "tokamax" else None
        if case.startswith("generate"):
            fields = rollouts(impl, device, tiny, "static" if case == "generate-static" else "dynamic")
        else:
            fields = train(case, impl, device, tiny, config["steps"], tokamax)
    except Exception as e:  # noqa: BLE001  (a refusal or a missing package is the answer)
        isolate.answer(memory.peak(), error=f"{type(e).__name__}: {e}"[:4000],
                       traceback=traceback.format_exc(limit=8)[-4000:])
        return 0
    isolate.answer(fields, context=context)
    return 0


def plan(cases: list[str], impls: list[str]) -> list[tuple[str, str]]:
    """(case, impl) in running order: per case, the kernel's side first (a run cut short keeps its figure)."""
    ordered = sorted(impls, key=lambda impl: impl != "tokamax")
    return [(case, impl) for case in cases for impl in ordered]


def run(out_path: Path, commit: str, tiny: bool, *, cases: list[str] | None = None, impls: list[str] | None = None,
        steps: int | None = None, budget_s: float = 420.0, config_timeout_s: float = 240.0,
        stop_s: float | None = None, command: Callable[[dict[str, Any]], list[str]] | None = None) -> Path:
    """The TRL cases into `out_path` (a Torch-mode results file), each (case, impl) in its own child (`isolate`);
    returns the path. `command`: the child's command line for a configuration (tests give a fake)."""
    clock = isolate.Clock(budget_s, stop_s)
    command = command or (lambda config: isolate.child_command("tools.torch_chip.trl_steps", config))
    results = ResultsFile(out_path, isolate.header("TRL trainers (torch-tpu)", commit))
    results.set("tiny", tiny)
    results.set("model", {"config": "Qwen3Config", **(TINY_MODEL if tiny else CHIP_MODEL),
                          "dtype": "float32" if tiny else "bfloat16"})
    logs = out_path.parent / f"{out_path.stem}-logs"
    steps = steps or (2 if tiny else 4)
    for case, impl in plan(cases or list(CASES), impls or list(IMPLS)):
        base = dict(steps_asked=steps)
        pass_ = "generate" if case.startswith("generate") else "step"
        refusal = clock.refusal()
        if refusal:
            results.add(record("trl", case, impl, pass_, None, **base, error=refusal))
            continue
        outcome = isolate.run_one(command, dict(case=case, impl=impl, tiny=tiny, steps=steps), logs,
                                  f"{case}-{impl}", clock.limit(config_timeout_s))
        got = (outcome.answer or {}).pop("context", None)
        if got and got.get("substituted_ops"):
            base["substituted_ops"] = got["substituted_ops"]  # ops torch-tpu lacks, stood in for (missing_ops)
        if got and results.data["chip"] == isolate.NOT_READ:
            results.set("chip", got["chip"])
            results.set("device", got["device"])
        failed = outcome.failure()
        if failed is not None:
            done = finished(outcome.log)
            if done:  # killed or failed after some steps: what they took (the first compiles)
                failed = {**failed, "step_times_s": [s for s, _ in done], "step_phases_s": [p for _, p in done],
                          "steps": len(done)}
            results.add(record("trl", case, impl, pass_, None, **base, **failed))
            if outcome.stopped:
                break
            continue
        fields = dict(outcome.answer)
        results.add(record("trl", case, impl, pass_, fields.pop("median_s"), **base, **fields,
                           child_s=outcome.seconds))
    results.set("wall_s", clock.elapsed())
    return out_path


def main_trl(argv: list[str] | argparse.Namespace | None = None) -> int:
    """`python3 -m tools.torch_chip trl --out DIR ...`: writes DIR/trl.json; 0 once written."""

    parser = argparse.ArgumentParser(prog="tools.torch_chip trl")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true", help="tiny sizes, float32 (a CPU run of the plumbing)")
    parser.add_argument("--cases", help=f"comma-separated, of {','.join(CASES)}")
    parser.add_argument("--impls", help=f"comma-separated, of {','.join(IMPLS)}")
    parser.add_argument("--steps", type=int, help="optimizer steps per trainer (default 4; --tiny 2)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="start no configuration after this many s")
    parser.add_argument("--config-timeout-s", type=float, default=240.0, help="a (case, impl)'s child is killed "
                        "after this many s (and recorded)")
    parser.add_argument("--stop-s", type=float, help="no child runs past this many s from the start (default: none)")
    parser.add_argument("--commit")
    args = parser.parse_args(cli.argv(argv))
    commit = cli.commit(args.commit)

    def csv(text: str | None) -> list[str] | None:
        return [x for x in text.split(",") if x] if text else None

    print(run(args.out / "trl.json", commit, args.tiny, cases=csv(args.cases), impls=csv(args.impls),
              steps=args.steps, budget_s=args.budget_s, config_timeout_s=args.config_timeout_s, stop_s=args.stop_s))
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]) if "--child" in sys.argv else main_trl(sys.argv[1:]))
