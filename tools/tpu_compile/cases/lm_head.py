"""Our LM-head kernels (`tokamax.lm_head.statistics`: one forward kernel, two backward) for one
training step at 8,192 tokens in bf16: `jax.grad` of a loss made of the log-sum-exp, the target's logit
and the entropy, at the vocabularies and hidden sizes of the models people train. And the hidden-size
boundary per chip: the largest hidden size `lm_head.blocks.choose` accepts compiles, the next one
(128 more) is refused by the kernel itself ("a hidden size of ... needs ... bytes of VMEM"). And the
step the LM-head issue measures (16,384 tokens, hidden 4096, bf16, Qwen's and Llama's vocabularies) on
each chip: each kernel at its own blocks (`lm_head.plan`), three kernels, no copy of the weight in the
temporaries, and `cost_analysis()` carrying the three kernels' declared cost (`lm_head.cost`). At every
model, no copy of x or the weight around the kernels: at a hidden size off the lanes (gpt-oss's 2880) the
TPU keeps x and w column-major and the kernels run on their transposes (2.3 GiB of temporaries before).
And the same boundary off the lanes, where the kernels run on x.T and w.T. And the default ("auto") at Gemma 3 27B's
head on the v6e, where it takes the stored scheme at a vocabulary off the lanes: temporaries within the eighth of HBM
its rule holds it to (5,186 MiB, past its 4,101, before `stored.temporaries` counted p's chunks there). And on each
chip at Llama 3 8B's head: the streamed kernels asked for with no chunk (`fused.streamed_scheme`'s chunk and block:
v7x's 512 / 128 and v6e's 1024 / 256 were chosen by the model, never compiled before), and the labels loss under
`jax.grad` with a cotangent of 3 (the gradients scaled in float32 before their one rounding, `fused.Pending`)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..case import Case, on_chips, spec
from . import _models as m
from ._pods import MiB, check_all

TOKENS = 8192
STEP_TOKENS, STEP_MODELS = 16384, (m.QWEN3_8B, m.LLAMA_3_8B)
MODELS = (m.LLAMA_2_7B, m.LLAMA_3_8B, m.LLAMA_3_70B, m.LLAMA_3_405B, m.QWEN3_8B, m.QWEN3_32B, m.GPT_OSS_120B,
          m.GEMMA_3_1B, m.GEMMA_3_12B, m.GEMMA_3_27B)
# The largest hidden size the kernels take in bf16 at the smallest blocks (128 x 128), per chip: what
# `blocks.choose` accepts within `blocks.vmem_limit` (0.9 of 128 MiB of VMEM on v5e and v6e, of 64 MiB on v7x).
# libtpu itself, the backward kernels alone at 128 x 128: v7x compiles 26368 and fails at 26624 ("Scoped
# allocation with size 58.54M and limit 57.60M"), v6e compiles 52608 and fails at 53248 (117.03M of 115.20M).
LARGEST_HIDDEN = {"v5e": 52224, "v6e": 52224, "v7x": 25984}
# Off the lanes (the kernels on x.T and w.T; `blocks.TRANSPOSED_TEMPORARIES`): the largest hidden size, a
# multiple of 64, `blocks.choose` accepts. libtpu needs ~13% less there than the estimate, so the next is
# refused by the kernel though libtpu would compile it.
LARGEST_TRANSPOSED_HIDDEN = {"v5e": 52128, "v6e": 52128, "v7x": 25888}
STORED = (m.QWEN3_8B, 8192)  # TRL's statistics in the stored scheme, p kept for the rows an eighth of HBM holds
AUTO = (m.GEMMA_3_27B, 8192, "v6e")  # TRL's statistics by the default's choice, at a vocabulary off the lanes
STREAMED = (m.LLAMA_3_8B, 8192)  # `streamed=True` with chunk="auto", and the loss's backward, on every chip
BOUNDARY_VOCAB = 32000
REFUSAL = "tokamax lm_head: a hidden size of"


def step(kernel: Any, mesh: Any, hidden: int, vocab: int, tokens: int = TOKENS, scheme: str = "kernels"
         ) -> tuple[Any, list[jax.ShapeDtypeStruct]]:
    """d/d(x, w) of sum(lse - target logit) - 0.1 sum(entropy) over `tokens` (a head without a bias), in
    `lm_head.statistics`' `scheme`."""
    specs = [spec(mesh, (tokens, hidden), jnp.bfloat16), spec(mesh, (vocab, hidden), jnp.bfloat16),
             spec(mesh, (tokens,), jnp.int32)]

    def loss(x: Any, w: Any, targets: Any) -> Any:
        stats = kernel.lm_head.statistics(x, w, jnp.zeros((vocab,), jnp.float32), targets, scheme=scheme)
        return jnp.sum(stats.lse - stats.target_logit) - 0.1 * jnp.sum(stats.entropy)

    return jax.grad(loss, argnums=(0, 1)), specs


def _build(hidden: int, vocab: int, tokens: int = TOKENS) -> Any:
    return lambda kernel, mesh: step(kernel, mesh, hidden, vocab, tokens)


_DECLARED: dict[tuple[str, int, int], int] = {}
"""The kernels' declared flops per (chip, hidden, vocab), noted when a step case is built (it has the kernel)."""


def _step_build(chip: str, hidden: int, vocab: int) -> Any:
    def build(kernel: Any, mesh: Any) -> tuple[Any, list[jax.ShapeDtypeStruct]]:
        _DECLARED[chip, hidden, vocab] = _declared_flops(kernel, chip, hidden, vocab)
        return step(kernel, mesh, hidden, vocab, STEP_TOKENS)
    return build


def _declared_flops(kernel: Any, chip: str, hidden: int, vocab: int) -> int:
    """The three kernels' flops as `lm_head.cost` counts them at the blocks `lm_head.plan` chooses on `chip`."""
    lm_head = kernel.lm_head
    with kernel.emulation.emulated_chip(chip):
        on = lm_head.cost.chip()
    plan = lm_head.plan.choose(STEP_TOKENS, hidden, vocab, 2, on)
    return sum(c.flops for c in plan.costs(hidden, vocab, 2).values())


def _step_check(chip: str, hidden: int, vocab: int) -> Any:
    def check(outcome: Any) -> None:
        # temporaries: per-row vectors and the padded bias, not a weight copy (vocab x hidden bf16: ~1.2 GB)
        check_all(outcome, kernels=3, temp_below=64 * MiB)
        declared = _DECLARED[chip, hidden, vocab]
        # XLA's own ops around the kernels (the loss's sums, the cotangents) add elementwise flops only
        assert declared <= outcome.cost["flops"] <= 1.001 * declared, \
            f"{outcome.name}: cost_analysis flops {outcome.cost['flops']:.4g}, the kernels declare {declared:.4g}"
    return check


def _no_copies(outcome: Any) -> None:
    """Three kernels, and temporaries of per-row vectors and the padded bias: no transposed copy of x, w, dx
    or dw (at gpt-oss's hidden 2880: 2.3 GiB before the kernels ran on x.T and w.T)."""
    check_all(outcome, kernels=3, temp_below=64 * MiB)


_STORED_BOUND: dict[tuple[str, str], tuple[Any, int, int]] = {}
"""Per (chip, scheme): the stored layout taken (None: the kernels), what `lm_head.stored.temporaries` counts there
and the share of HBM the rule holds the scheme to (noted when its case is built: it has the kernel)."""
SMALL = 64 * MiB
"""What the count leaves out: the per-row vectors, the backward's bias steps and the compiler's small buffers."""


def _stored_build(chip: str, hidden: int, vocab: int, tokens: int, scheme: str = "stored") -> Any:
    def build(kernel: Any, mesh: Any) -> tuple[Any, list[jax.ShapeDtypeStruct]]:
        lm_head = kernel.lm_head
        with kernel.emulation.emulated_chip(chip):
            on = lm_head.cost.chip()
        stats = lm_head.stats
        layout = (stats.stored_layout if scheme == "stored" else stats.choose_layout)(tokens, hidden, vocab, 2, on=on)
        counted = layout and lm_head.stored.temporaries(tokens, vocab, 2, layout, hidden, on.kind)
        _STORED_BOUND[chip, scheme] = (layout, counted, on.hbm // lm_head.cost.HBM_SHARE)
        return step(kernel, mesh, hidden, vocab, tokens, scheme=scheme)
    return build


def _streamed_build(hidden: int, vocab: int, tokens: int) -> Any:
    """`fused.loss_and_grads(..., streamed=True)` at the chunk it picks: the gradients made in the forward."""
    def build(kernel: Any, mesh: Any) -> tuple[Any, list[jax.ShapeDtypeStruct]]:
        lm_head = kernel.lm_head

        def grads(x: Any, w: Any, targets: Any) -> Any:
            weights = jnp.ones((tokens,), jnp.float32) / tokens
            return lm_head.fused.loss_and_grads(x, w, None, targets, weights, lm_head.IDENTITY, streamed=True)[:3]
        return grads, [spec(mesh, (tokens, hidden), jnp.bfloat16), spec(mesh, (vocab, hidden), jnp.bfloat16),
                       spec(mesh, (tokens,), jnp.int32)]
    return build


def _scaled_loss_build(hidden: int, vocab: int, tokens: int) -> Any:
    """d/d(x, w) of 3 x the labels loss (`lm_head.loss.loss`, its default scheme on the chip): the backward scales."""
    def build(kernel: Any, mesh: Any) -> tuple[Any, list[jax.ShapeDtypeStruct]]:
        def scaled(x: Any, w: Any, targets: Any) -> Any:
            weights = jnp.ones((tokens,), jnp.float32) / tokens
            return 3.0 * kernel.lm_head.loss.loss(x, w, targets, weights)
        return jax.grad(scaled, argnums=(0, 1)), [
            spec(mesh, (tokens, hidden), jnp.bfloat16), spec(mesh, (vocab, hidden), jnp.bfloat16),
            spec(mesh, (tokens,), jnp.int32)]
    return build


def _with_kernels(outcome: Any) -> None:
    assert outcome.hlo["tpu_custom_call"] > 0, f"{outcome.name}: no kernel in the program"


def _stored_check(chip: str, scheme: str = "stored") -> Any:
    """XLA's ops alone, and temporaries within what `lm_head.stored.temporaries` counts at the layout the scheme
    takes on `chip` (the kept rows' p and the larger of a forward chunk's arrays and the backward's accumulator and
    step) and within the eighth of the chip's HBM the rule holds it to."""
    def check(outcome: Any) -> None:
        layout, counted, share = _STORED_BOUND[chip, scheme]
        temp = outcome.memory["temp"]
        assert layout is not None, f"{outcome.name}: the kernels taken; this case is the stored scheme's"
        assert outcome.hlo["tpu_custom_call"] == 0, f"{outcome.name}: {outcome.hlo['tpu_custom_call']} kernels"
        assert temp <= counted + SMALL, \
            f"{outcome.name}: {temp / MiB:.0f} MiB temp at {layout}, the scheme counts {counted / MiB:.0f} MiB"
        assert temp <= share, f"{outcome.name}: {temp / MiB:.0f} MiB temp at {layout}, past the share of HBM the " \
                              f"rule holds it to ({share / MiB:.0f} MiB)"
    return check


def cases() -> list[Case]:
    out = []
    for model in MODELS:
        out += on_chips(lambda chip, model=model: Case(
            f"lm_head/{model.name}/h{model.hidden}-v{model.vocab}/fwd+bwd", "lm_head", model.name, chip,
            _build(model.hidden, model.vocab), check=_no_copies, tier="all"))
    for model in STEP_MODELS:
        out += on_chips(lambda chip, model=model: Case(
            f"lm_head/step-{STEP_TOKENS}/{model.name}/h{model.hidden}-v{model.vocab}/fwd+bwd", "lm_head", model.name,
            chip, _step_build(chip, model.hidden, model.vocab), check=_step_check(chip, model.hidden, model.vocab)))
    model, tokens = STORED
    out += on_chips(lambda chip: Case(
        f"lm_head/stored-{tokens}/{model.name}/h{model.hidden}-v{model.vocab}/fwd+bwd", "lm_head", model.name, chip,
        _stored_build(chip, model.hidden, model.vocab, tokens), check=_stored_check(chip), xla_only=True,
        tier="default" if chip == "v5e" else "all"))
    model, tokens, chip = AUTO
    out.append(Case(f"lm_head/auto-{tokens}/{model.name}/h{model.hidden}-v{model.vocab}/fwd+bwd", "lm_head",
                    model.name, chip, _stored_build(chip, model.hidden, model.vocab, tokens, "auto"),
                    check=_stored_check(chip, "auto"), xla_only=True))
    model, tokens = STREAMED
    out += on_chips(lambda chip: Case(
        f"lm_head/streamed-auto-{tokens}/{model.name}/h{model.hidden}-v{model.vocab}/fwd+bwd", "lm_head", model.name,
        chip, _streamed_build(model.hidden, model.vocab, tokens), check=_with_kernels))
    out += on_chips(lambda chip: Case(
        f"lm_head/loss-times-3-{tokens}/{model.name}/h{model.hidden}-v{model.vocab}/grad", "lm_head", model.name,
        chip, _scaled_loss_build(model.hidden, model.vocab, tokens), xla_only=True))
    largest = [(chip, hidden, 128) for chip, hidden in LARGEST_HIDDEN.items()]
    largest += [(chip, hidden, 64) for chip, hidden in LARGEST_TRANSPOSED_HIDDEN.items()]
    for chip, hidden, step_ in largest:
        for h, expect in ((hidden, "compiles"), (hidden + step_, REFUSAL)):
            out.append(Case(f"lm_head/largest-hidden/h{h}-v{BOUNDARY_VOCAB}/fwd+bwd", "lm_head",
                            "boundary", chip, _build(h, BOUNDARY_VOCAB), expect=expect))
    return out
