"""The whole training step the chip benchmark times (`tools.chip.step`): a model's decoder layers and its LM head,
forward and backward over every weight, with the package's ops (`ops.tokamax`: splash, the grouped matmul, the
fused head's loss), at 4,096 tokens on one v5e, v6e and v7x. The kernels compiling one by one does not say the
step does: here they meet XLA's ops around them (the layers' matmuls, RoPE, the router's sort and scatter), and
the step's memory (its weights, their gradients and the activations the backward keeps) must fit the chip's HBM,
which is what the chip benchmark needs of it before it can time anything.

The step is built by the chip benchmark's own functions (`decoder.init`, `decoder.inputs` traced to shapes,
`decoder.train_step`), so that what compiles here is what the chip runs. The default tier compiles the dense
Llama 3 8B layer and head (splash's forward and backward, the fused head, XLA's matmuls) on each chip; the MoE
layer and Gemma 3's six layers only under `--all`."""

from __future__ import annotations

from typing import Any

import jax

from tools.chip.step import decoder, ops
from tools.chip.step.models import GEMMA_3_4B, LLAMA_3_8B, QWEN3_30B_A3B, STEPS, Model, Step

from ..case import Case, on_chips, spec
from ._pods import MiB

TOKENS = 4096
"""The chip benchmark's shortest step: the one every model runs without rematerialized layers."""
DEFAULT_MODEL = LLAMA_3_8B
"""The default tier's model: one dense layer and its 128,256 head exercise splash, the fused head and the backward
at the least compile time of the three. A case's trace and compile on the 2-core CPU host (libtpu 0.0.52), the
least and most of three pytest runs: v5e 17-34 s, v6e 24-28 s, v7x 20-24 s; in one run of the `--all` tier the MoE
layer took 26-43 s a chip and Gemma 3's six layers 38-75 s (the v6e the slowest), hence `--all` for those two. With
the host busy each took up to twice that."""
MODELS = (LLAMA_3_8B, QWEN3_30B_A3B, GEMMA_3_4B)

_HBM: dict[str, int] = {}
"""The chip's HBM in bytes (per TensorCore on v7x, as the one-chip mesh compiles for one), from `roofline.chip()`
(libtpu's figures) when a case is built (it has the kernel): v5e 16 GiB, v6e 32 GiB, v7x 96 GiB."""


def step_of(model: Model) -> Step:
    """The chip benchmark's step of `model` at `TOKENS`."""
    return next(s for s in STEPS if s.model == model and s.tokens == TOKENS)


def _build(step: Step, chip: str) -> Any:
    def build(kernel: Any, mesh: Any) -> tuple[Any, list[jax.ShapeDtypeStruct]]:
        with kernel.emulation.emulated_chip(chip):
            _HBM[chip] = kernel.roofline.chip().hbm
        shapes = jax.eval_shape(lambda: (decoder.init(step), *decoder.inputs(step)))
        specs = jax.tree.map(lambda a: spec(mesh, a.shape, a.dtype), shapes)
        return decoder.train_step(step, ops.tokamax(kernel)), list(specs)
    return build


def least_kernels(step: Step) -> int:
    """The Pallas calls the step makes whatever head the chip takes: splash's forward and its fused backward per layer,
    and per MoE layer the grouped matmul's forward, dlhs and drhs for gate-and-up and for down. The head adds its own
    where `lm_head.fused` picks kernels (at 4,096 tokens the v6e and v7x take XLA's chunks for Llama's head: 2 calls in
    all; the v5e 4, its chunks' dW by the accumulator kernel)."""
    return step.layers * (2 + (6 if step.model.experts else 0))


def _check(step: Step, chip: str) -> Any:
    """The package's kernels in the step (not an XLA fallback), and the step's HBM: its arguments (weights, x,
    targets), its outputs (the loss and every weight's gradient, as large as the weights: no buffer is donated) and
    the compiler's temporaries, within the chip's. As libtpu laid them out (GiB, arguments + temporaries, then with
    the outputs): Llama v5e 3.88 / 5.26, v6e 4.83 / 6.21, v7x 4.91 / 6.30; the MoE 5.45 / 7.19, 5.99 / 7.73,
    6.00 / 7.75; Gemma 3 6.61 / 8.92, 5.04 / 7.34, 9.38 / 11.69."""
    def check(outcome: Any) -> None:
        kernels, least = outcome.hlo["tpu_custom_call"], least_kernels(step)
        assert kernels >= least, f"{outcome.name}: {kernels} Pallas calls, its attention and experts make {least}"
        memory, hbm = outcome.memory, _HBM[chip]
        peak = memory["argument"] + memory["output"] + memory["temp"]
        assert peak <= hbm, f"{outcome.name}: {peak / MiB:,.0f} MiB (arguments {memory['argument'] / MiB:,.0f}, " \
                            f"outputs {memory['output'] / MiB:,.0f}, temporaries {memory['temp'] / MiB:,.0f}) " \
                            f"past the chip's {hbm / MiB:,.0f} MiB of HBM"
    return check


def case_id(step: Step) -> str:
    m = step.model
    return f"step/{m.name.replace(' ', '-')}/l{step.layers}-t{step.tokens}/fwd+bwd"


def cases() -> list[Case]:
    out = []
    for model in MODELS:
        step = step_of(model)
        out += on_chips(lambda chip, step=step: Case(
            case_id(step), "step", step.model.name, chip, _build(step, chip), check=_check(step, chip),
            tier="default" if step.model == DEFAULT_MODEL else "all"))
    return out
