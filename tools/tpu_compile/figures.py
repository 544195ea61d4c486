"""The compiler's figures for the benchmark table (run by tools/bench/probes/tpu_compile_figures.py in
the Torch tier's venv): per-chip HBM of one training step's LM head on this kernel, on TRL's tiles and
on transformers' logits (`baselines.py`), compiled for the same chip; named compile cases (attention
at 128k, the ring per chip); and compile time per op family from the tier's last report.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import jax
import jax.numpy as jnp

from . import baselines, compiler, distill_baselines, topology
from .case import spec
from .cases import all_cases

# (model, hidden, vocabulary, tokens): one training step's head, bf16
LM_HEAD_STEPS = (("Qwen3-8B", 4096, 151936, 16384), ("Llama-3.1-8B", 4096, 128256, 16384))
CHIP = "v6e"
# compile cases whose per-chip memory the table shows (ids from tools/tpu_compile/cases/)
NAMED_CASES: tuple[str, ...] = (
    "splash/attend/Llama-3.1-8B/causal/128k/fwd+bwd@v7x",  # attention at 128k on one chip
    "ring/Llama-3.1-8B/32k/plain/fwd+bwd@v6e:2x4",  # the ring per chip, 8 chips
    "ring/Llama-3.1-8B/32k/load-balanced/fwd+bwd@v6e:2x4",
    "ring/Llama-3.1-8B/128k/plain/fwd+bwd@v6e:2x4",
)


def lm_head_step(kernel: ModuleType, chip: str = CHIP) -> list[dict]:
    """Each head's one training step compiled for `chip`: memory per chip and compile seconds."""
    mesh = topology.mesh(chip)
    rows = []
    for model, hidden, vocab, tokens in LM_HEAD_STEPS:
        specs = [spec(mesh, (tokens, hidden), jnp.bfloat16), spec(mesh, (vocab, hidden), jnp.bfloat16),
                 spec(mesh, (tokens,), jnp.int32)]
        for name, make in baselines.HEADS.items():
            start = time.perf_counter()
            with compiler.tracing_for(kernel, topology.chip(chip)), jax.set_mesh(mesh):
                compiled = jax.jit(make(kernel)).trace(*specs).lower(lowering_platforms=("tpu",)).compile()
            rows.append({"model": model, "hidden": hidden, "vocab": vocab, "tokens": tokens, "chip": chip,
                         "head": name, "seconds": time.perf_counter() - start,
                         "memory": compiler._memory(compiled), "hlo": compiler.hlo_counts(compiled.as_text())})
    return rows


# (student hidden, teacher hidden, vocabulary, tokens): one DistillationTrainer step's divergence, bf16
DISTILL_STEP = (2048, 4096, 151936, 16384)


def distill_step(kernel: ModuleType, chip: str = CHIP) -> list[dict]:
    """The divergence's one training step, this kernel's and TRL's tiles, compiled for `chip`."""
    mesh = topology.mesh(chip)
    hs, ht, vocab, tokens = DISTILL_STEP
    specs = [spec(mesh, (tokens, hs), jnp.bfloat16), spec(mesh, (vocab, hs), jnp.bfloat16),
             spec(mesh, (tokens, ht), jnp.bfloat16), spec(mesh, (vocab, ht), jnp.bfloat16)]
    rows = []
    for name, make in distill_baselines.HEADS.items():
        start = time.perf_counter()
        with compiler.tracing_for(kernel, topology.chip(chip)), jax.set_mesh(mesh):
            compiled = jax.jit(make(kernel)).trace(*specs).lower(lowering_platforms=("tpu",)).compile()
        rows.append({"student_hidden": hs, "teacher_hidden": ht, "vocab": vocab, "tokens": tokens, "chip": chip,
                     "head": name, "seconds": time.perf_counter() - start,
                     "memory": compiler._memory(compiled), "hlo": compiler.hlo_counts(compiled.as_text())})
    return rows


def named_cases(kernel: ModuleType) -> list[dict]:
    cases = {c.id + "@" + c.target: c for c in all_cases()}
    return [{**compiler.compile_case(cases[name], kernel).row(), "model": cases[name].model} for name in NAMED_CASES]


def compile_time_per_family(report: Path) -> dict[str, dict]:
    """Cases, compiled and seconds per family in the compile tier's last report (./test.sh writes it)."""
    if not report.exists():
        return {}
    families: dict[str, dict] = defaultdict(lambda: {"cases": 0, "compiled": 0, "refused": 0, "seconds": 0.0})
    for o in json.loads(report.read_text()):
        f = families[o["family"]]
        f["cases"] += 1
        f["seconds"] += o["seconds"]
        f[o["status"]] = f.get(o["status"], 0) + 1
    return dict(families)
