"""The chip's runs behind the loss's rule (`distill.fused.loss_chunk`, `fused.PAIR_SLOWER`): the zoo's distillation at
a prefill's rows on the v5e (128 to 1,024 tokens, eight student <- teacher pairs), where the loss's fused scheme, the
per-token call and XLA ran in one run. CI has no chip: these read what it measured and hold the rule to it: where the
fused scheme added dw by `accumulate`'s pair the per-token call (its stored scheme) was faster, and the rule now
takes it; where the fused scheme's one chunk left dw to XLA it was the faster, and the rule keeps it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tools.chip.zoo.table import seconds

MEASURED = Path(__file__).resolve().parents[3] / "benchmarks/measured"
SHAPE = re.compile(r"(\d+) tokens, student (\d+), teacher (\d+), vocabulary (\d+)")


def _times(name: str) -> dict[tuple[int, int, int, int], dict[tuple[str, str], float]]:
    """(rows, student, teacher, vocab) -> (op, impl) -> seconds forward and backward (issued back to back where the
    run has them, `tools.chip.zoo.table.seconds`)."""
    out: dict = {}
    for r in json.loads((MEASURED / name).read_text())["records"]:
        if r["op"].startswith("distillation") and r["pass"] == "fwd+bwd" and r.get("median_s"):
            shape = tuple(int(g) for g in SHAPE.search(r["case"]).groups())
            out.setdefault(shape, {})[(r["op"], r["impl"])] = seconds(r)
    return out


def _runs(*names: str) -> dict[tuple[int, int, int, int], dict[tuple[str, str], float]]:
    return {shape: t for name in names for shape, t in _times(name).items()}


def _before(fused) -> dict:  # noqa: ANN001
    """The runs before the rule: `PAIR_SLOWER` and its 128 and 512 rows twin."""
    return _runs(fused.PAIR_SLOWER, fused.PAIR_SLOWER.replace("256-1024", "128-512"))


@pytest.mark.kernels_ci
def test_the_loss_takes_what_ran_faster_at_every_prefill_shape(kernel, emulation):
    fused, stored = kernel.distill.fused, kernel.distill.stored
    with emulation.emulated_chip("v5e"):
        on = kernel.roofline.chip()
    runs = _before(fused)
    assert len(runs) == 32, sorted(runs)  # 8 pairs at 4 token counts
    took_pair = 0
    for shape, t in runs.items():
        sizes = kernel.distill.blocks.Sizes(*shape, 2, 2)
        loss, per_token = t[("distillation_loss", "tokamax")], t[("distillation", "tokamax")]
        old = fused.choose(sizes, on)  # the rule the runs took: the fused chunk, always
        if fused.held_pair(sizes, old, on):
            took_pair += 1
            assert per_token < loss, shape  # the pair's 1.17-1.62x
            assert stored.choose(sizes, on) is not None and fused.loss_chunk(sizes, on) is None, shape
        else:
            assert loss < per_token, shape
            assert fused.loss_chunk(sizes, on) == old, shape
    assert took_pair == 13


@pytest.mark.kernels_ci
def test_past_the_stored_schemes_share_the_fused_scheme_stays(kernel, emulation):
    """At 4,096 rows of Qwen3 1.7B <- 8B the stored scheme fits (the per-token call: 94.09 ms on the v5e against the
    fused chunks' 99.94-101.27); at 8,192 rows of Qwen2.5 0.5B <- 7B its Q does not (2.5 GB), and the fused scheme's
    chunks of 768 with the pair run (127.3 ms against the kernels' 217.9 and XLA's 121.1); a frozen head has no
    pair to add into, and keeps the fused scheme at a prefill's rows and at training's."""
    fused, stored, sizes = kernel.distill.fused, kernel.distill.stored, kernel.distill.blocks.Sizes
    with emulation.emulated_chip("v5e"):
        on = kernel.roofline.chip()
    qwen3 = sizes(4096, 2048, 4096, 151936)
    assert fused.held_pair(qwen3, fused.choose(qwen3, on), on) and fused.loss_chunk(qwen3, on) is None
    qwen25 = sizes(8192, 896, 3584, 151936)
    assert stored.choose(qwen25, on) is None and fused.loss_chunk(qwen25, on) == 768
    for s in (qwen3, sizes(1024, 2048, 4096, 151936)):
        assert fused.loss_chunk(s, on, weight_grad=False) == fused.choose(s, on, weight_grad=False)


@pytest.mark.kernels_ci
def test_run_again_the_loss_is_faster_where_the_rule_changed(kernel, emulation):
    """The v5e ran the loss again after the rule (c003b28: 128, 512 and 1,024 tokens): every shape where it now takes
    the per-token call is faster than where it took the pair (1.18-1.65x XLA's time before, 0.91-1.06x after), and
    every other shape within the run-to-run noise of its time before (5%)."""
    fused = kernel.distill.fused
    with emulation.emulated_chip("v5e"):
        on = kernel.roofline.chip()
    before = _before(fused)
    after = _runs("v5e-2026-12-07-zoo-prefill-loss-stats-128-c003b28.json",
                  "v5e-2026-12-07-zoo-prefill-loss-512-1024-c003b28.json")
    assert len(after) == 24
    changed = 0
    for shape, t in after.items():
        new, old = t[("distillation_loss", "tokamax")], before[shape][("distillation_loss", "tokamax")]
        if fused.loss_chunk(kernel.distill.blocks.Sizes(*shape, 2, 2), on) is None:
            changed += 1
            assert new < 0.9 * old and new < 1.06 * t[("distillation_loss", "xla")], shape
        else:
            assert new < 1.05 * old, shape
    assert changed == 11
