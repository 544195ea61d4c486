"""The package's cost models against what the chip measured: for each benchmark record of a kernel that has
a model (the grouped matmul's tiles, the LM head's kernels and chunked scheme, TRL's statistics on the kernels and
the stored scheme, distillation's kernels and stored scheme), the seconds `tokamax.roofline` predicts on the
measured chip with its calibrated figures, the way the package itself chooses (the tiles and blocks it would pick
at that shape). Splash attention ("tokamax": upstream's kernel at upstream's blocks) by `splash.cost`."""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

from .models import ATTENTION, DISTILL, EXPERTS, STATISTICS, Head

BEFORE_TILES = (128, 128, 128)  # upstream's default tiles, what the grouped matmul ran before the rule
TILES = {"a9c94e4": "before", "9410969": "rule"}
"""The grouped matmul's tiles in the runs before the v5e's measured tiles shipped (`moe.measured`), by the run's
commit: upstream's defaults, then the rule alone; every later run takes the measured tiles where they exist."""
RULE_TILES = {  # what the rule chose in the run at 9410969 (before its model counted held weights): (gmm, dlhs, tgmm)
    "Mixtral 8x7B": ((512, 1024, 1024), (512, 1024, 1024), (256, 1024, 1024)),
    "OLMoE": ((512, 1024, 1024), (512, 1024, 1024), (256, 1024, 1024)),
    "Qwen3-30B-A3B": ((512, 2048, 768), (512, 1024, 768), (256, 1024, 768)),
    "gpt-oss-20b": ((256, 1024, 2048), (256, 1024, 2048), (256, 1024, 1024)),
    "DeepSeek-V3, one chip's 8 experts": ((512, 1024, 1024), (512, 1024, 1024), (256, 1024, 1024)),
}
RUN_READ = {
    "8b33815": ("v5e.json",),
    "989b156": ("v5e.json", "v5e-gpt-oss-20b.json"),
    "9357b96": ("v5e.json", "v5e-gpt-oss-20b.json"),
}
"""The shipped tile files (torch-ext/tokamax/moe/measured/) the runs before the last file shipped read, by commit;
every later run reads them all (v5e-olmoe.json from 910b3f1)."""
ONE_STEP_AHEAD = ("a9c94e4", "8b33815", "9410969", "989b156")
"""Runs before gmm fetched its weights with lookahead (port.kdl): their grouped matmul fetched a group's weights one
grid step ahead, as the impl "tokamax (weights one step ahead)" still does (tools/chip/workloads/moe.py)."""
RAN_OTHERWISE = {
    ("bf5a22b", "lm_head_loss", "tokamax"): "the kernels' bodies looped over 256 columns (now 1024)",
    ("bf5a22b", "lm_head_loss", "tokamax (kernels)"): "the kernels' bodies looped over 256 columns (now 1024)",
    ("bf5a22b", "distillation", "tokamax"): "the kernels' bodies looped over 256 columns (now 1024)",
    ("bf5a22b", "lm_head_statistics", "tokamax"): "the kernels' bodies looped over 256 columns (now 1024)",
    ("8b33815", "lm_head_loss", "tokamax (columns of 256)"): "a narrower loop than the package's",
    ("8b33815", "lm_head_loss", "tokamax (columns of 512)"): "a narrower loop than the package's",
    ("f98634e", "lm_head_loss", "tokamax"): "the default took `lm_head.streamed` at Qwen3 8B's and Gemma 3's heads "
                                            "with float32 logits (slower; compact in chunks of 1024 since 0a076fb)",
}
"""Records of code the package no longer runs, by (commit, op, impl), and why: not predicted (the cost models
describe what the package runs; the loop over 256 columns cost 40% in the forward, which no model holds)."""
AUTO_KERNELS = ("a9c94e4", "bf5a22b", "e962c99", "9aff1ec")
"""Runs whose package defaults took the kernels: the LM head's (`chunk="auto"`) at every head (`fused.choose` counted
the chunked scheme's temporaries as the compile-only topology lays them out, past an eighth of the v5e's HBM at both
heads), and distillation's (before its stored scheme)."""
AUTO_SCHEMES = {
    **{run: {"Llama 3 8B": (2048, False, False), "Qwen3 8B": (None, False, False)}
       for run in ("077895a", "1032390", "d7df2f0", "2cd2df2")},
    "1b5b766": {"Llama 3 8B": (1024, True, True), "Qwen3 8B": (512, True, True)},
    "edf44f8": {"Llama 3 8B": (1024, True, True, True), "Qwen3 8B": (1024, True, True, True)},
    "141654c": {"Llama 3 8B": (1280, True, True), "Qwen3 8B": (1536, True, True, True),
                "Gemma 3 4B": (768, True, True, True)},
    "0a076fb": {**{model: (1024, False, True, False, True) for model in
                   ("Llama 3 8B", "Qwen3 8B", "Gemma 3 4B", "Gemma 2 2B", "Llama 3.2 1B")},
                "Qwen3 1.7B": (2048, True)},
    "235962c": {"Qwen3 0.6B": (2048, True), "Qwen3 1.7B": (2048, True), "Qwen3 4B": (1536, True)},
}
"""The LM-head default's scheme (`chunk="auto"`: chunk, accumulator kernel, pair) in runs that chose otherwise than
`fused.choose_scheme` does now: XLA's float32 accumulator in chunks of 2048 at Llama 3 8B's head and the kernels at
Qwen3 8B's (the accumulator kernel's temporaries counted as `memory_analysis()` gave them, past the share); then the
pair with a 16-bit low half, which fit at Qwen's head in chunks of 512 only; then the int8 low half at both heads
(`SCALED_RUNS`); at 141654c chunks of 1536 at Qwen's head, before the temporaries counted the whole chunks' dx
joined to the rows left (2.01 GiB assigned, past the share: 1280 since); at 0a076fb the costs did not count the rows
left's chunk (`fused.ChunkedCost.tail_seconds`) nor the kernels' zeroed accumulator: the streamed kernels at Llama 3.2
1B's 1,500 rows, chunks of 2048 with a 4-row chunk at Qwen3 1.7B's 4,100; at 235962c (`fused.ROWS_RECORD`) the
accumulator kernel at 4,096 rows of the small heads, before its cost counted the pass making G
(`fused.KERNEL_G_SECONDS`)."""
BEFORE_STREAMED = ("077895a", "1032390", "141654c", "1b5b766", "286717f", "2cd2df2", "9aff1ec", "a9c94e4", "bf5a22b",
                   "d7df2f0", "d7e53b6", "dcc176a", "e8cc889", "e962c99", "edf44f8", "f98634e")
"""Runs whose LM-head default chose among the chunked scheme's other ways: `fused.choose_scheme` did not offer the
streamed one (`fused.STREAMED`) yet."""
SCALED_RUNS = ("edf44f8",)
"""Runs whose accumulator kernel kept the pair's low half in int8 (`lm_head.accumulate.SCALED`) where the impl names
the pair alone ("pair accumulator, accumulator kernel"): the first run of it, before the names said "int8 low"."""
STATISTICS_ON_KERNELS = ("a9c94e4", "077895a", "1032390", "9aff1ec", "bf5a22b", "d7df2f0", "2cd2df2")
"""Runs whose `lm_head.statistics` default ("tokamax") was the kernels; later runs take `stats.choose_scheme`'s."""
WHOLE_P_RUNS = {"2cd2df2": (), "1b5b766": ("Qwen3 8B",), "edf44f8": ("Qwen3 8B",)}
"""Runs whose stored scheme kept every row's p and made its backward's G whole (one step over the vocabulary), by
commit, with the heads their default took it at (where p and G fit an eighth of HBM); later runs keep p for the
rows that fit and step over the vocabulary (`lm_head.stored.Layout`)."""
WHOLE_P_CHUNKS = {"Qwen3 8B": 1024, "Gemma 3 4B": 256}
STORED_BEFORE_RULE = {
    "a65632f": "G made in both matmuls' operands (before the optimization barrier), its columns chosen by the model",
    "e8cc889": "its columns chosen by the model (8,192 at 8,192 rows) before `stored.STEP_ENTRIES`' rule",
}
"""Runs of the partly kept stored scheme before its backward took its present form: their stored records are not
predicted (the model describes what the package runs)."""
"""That scheme's forward chunk at the benchmark's heads (the largest whose p, G and logits fit, else the smallest)."""
KERNELS = ("tokamax", "tokamax (kernels)", "tokamax (whole-block bodies)", "tokamax (whole-block bodies, kernels)",
           "tokamax (columns of 1024)", "tokamax (columns of 1024, kernels)", "tokamax (columns of 2048)",
           "tokamax (columns of 2048, kernels)")
"""The LM head's kernels as the package runs them at the benchmark's heads (blocks of 512 and 1024 columns, so a
loop of 1024 or 2048 columns is the whole block)."""

DISTILL_IMPLS = ("tokamax", "tokamax (stored)", "tokamax (kernels)", "tokamax (whole-block bodies)")
RAGGED_VOCABULARY_COPY = ("286717f",)
"""Runs whose chunked scheme made a vocabulary off the lanes (Gemma 3's 262,208) row-major, which XLA laid out
vocabulary-major and copied back each chunk (a float32 [chunk, vocab] copy: 0.5 GiB and 37 ms at chunks of 1024):
their records at such a head are not predicted (the package now makes those arrays as their transposes)."""


SMALL_ACCUMULATOR = 2 * 10**9
"""XLA adding dW into a float32 accumulator smaller than this is not predicted: `fused.ACCUMULATOR_PASSES` was fitted
at 2.1-2.5 GB, and XLA hid more of the 0.6-1.6 GB ones of `fused.ROWS_RECORD` (1.20-1.32x faster than the model;
tests/jax/lm_head/test_cost.py holds how far, and that another way was faster there)."""
XLA_FORWARD_RUNS = ("0817c36", "c08f1e4")
"""Runs whose labels-path forward past 1,024 rows ran XLA's formulation in chunks (`stats.xla_forward`); the runs
before ran the forward kernel there."""


def tiles_of(commit: str) -> str:
    """The grouped matmul's tiles in the run at `commit`: "before", "rule" or "measured"."""
    return TILES.get(commit[:7], "measured")


def v5e(tk: ModuleType) -> Any:
    """The measured v5e as the package weighs it (libtpu's figures for the rest)."""
    peak, bandwidth = tk.roofline.MEASURED["TPU v5 lite"]
    return tk.roofline.Chip("v5e", peak, bandwidth, mxu=128, vmem=128 << 20, hbm=16 << 30, generation=5,
                            kind="TPU v5 lite")


def _shape(case: str, shapes: tuple, *, by_rows: bool = False) -> Any:
    """The shape of `shapes` a record's case names: its model (and its rows, `by_rows`: one model at several)."""
    return next((s for s in shapes if case.startswith(s.model) and (not by_rows or f" {s.rows} rows" in case)), None)


def _measured(tk: ModuleType, commit: str) -> dict:
    """The measured tiles the run at `commit` read (`RUN_READ`): where two files hold a call, the faster entry."""
    measured = tk.moe.measured
    if commit[:7] not in RUN_READ:
        return measured.table("TPU v5 lite")
    out: dict = {}
    for name in RUN_READ[commit[:7]]:
        for key, m in measured.read(measured.FILES / name)[1].items():
            if key not in out or m.seconds < out[key].seconds:
                out[key] = m
    return out


def _grouped(tk: ModuleType, r: dict, chip: Any, which: str, lookahead: bool, commit: str) -> float | None:
    """None at uneven routing (`models.IMBALANCED`): the model's visits hold there too (row tiles + groups - 1,
    within one of the benchmark's routing), but its weights terms, fitted at even routing
    (`tiles.GROUP_WEIGHTS_UNHIDDEN`), put those forward records 1.14-1.22 over the chip (bench-moe_uneven-a55de25):
    not held to the 20% check. None too where rows are padded past the groups (bench-moe_padded: `tiles.seconds`
    counts every row as routed, 1.22-1.25 over the chip at 10% padded)."""
    s = _shape(r["case"], EXPERTS)
    if s is None or "rows padded" in r["case"]:
        return None
    table = _measured(tk, commit)
    tiles = tk.moe.tiles
    kernels = ("gmm",) if r["pass"] == "fwd" else ("gmm", "dlhs", "tgmm")
    total = 0.0
    for i, k in enumerate(kernels):
        found = table.get(tk.moe.measured.Key(k, s.rows, s.hidden, s.out, s.experts, 2))
        if which == "before":
            t = tiles.Tiles(*BEFORE_TILES)
        elif which == "rule":
            t = tiles.Tiles(*RULE_TILES[s.model][i])
        elif found is not None:
            t = tiles.Tiles(*found.tiles)
        else:
            t = tiles.choose(k, s.rows, s.hidden, s.out, s.experts, chip)
        total += tiles.seconds(k, s.rows, s.hidden, s.out, s.experts, t, chip, lookahead=lookahead)
    return total


def _head(tk: ModuleType, r: dict, chip: Any, commit: str) -> float | None:
    sizes = re.search(r"^(.*?) head: (\d+) rows, hidden (\d+), vocabulary (\d+)$", r["case"])
    if sizes is None:
        return None
    h = Head(sizes[1], *map(int, sizes.groups()[1:]))  # the case's own sizes (lm_head_vocab's heads beside HEADS')
    lm = tk.lm_head
    if commit[:7] in RAGGED_VOCABULARY_COPY and h.vocab % 128:
        return None
    pattern = r"tokamax \(chunks of (\d+)(, pair accumulator)?(, int8 low)?(, accumulator kernel)?\)"
    if chunked := re.fullmatch(pattern, r["impl"]):
        if not (chunked[2] or chunked[4]) and int(chunked[1]) < h.rows and h.hidden * h.vocab * 4 < SMALL_ACCUMULATOR:
            return None
        if chunked[2] and not chunked[4] and h.vocab % 128:
            return None  # XLA's pair (retired, `lm_head.fused`) off the lanes: its transposed layout not modelled
        scaled = bool(chunked[3]) or (commit[:7] in SCALED_RUNS and bool(chunked[2]) and bool(chunked[4]))
        return lm.fused.cost(h.rows, h.hidden, h.vocab, 2, int(chunked[1]), pair=bool(chunked[2]),
                             kernel=bool(chunked[4]), scaled=scaled).seconds(chip)
    if r["impl"] == "tokamax" and r["pass"] == "fwd" and commit[:7] in XLA_FORWARD_RUNS \
            and lm.stats.xla_forward(h.rows, h.hidden, h.vocab, 2, chip):
        return lm.stats.xla_forward_seconds(h.rows, h.hidden, h.vocab, 2, chip)
    if r["impl"] in KERNELS:
        if r["impl"] == "tokamax" and r["pass"] == "fwd+bwd" and commit[:7] not in AUTO_KERNELS:
            scheme = (lm.fused.Scheme(*AUTO_SCHEMES[commit[:7]][h.model]) if commit[:7] in AUTO_SCHEMES
                      else lm.fused.choose_scheme(h.rows, h.hidden, h.vocab, 2, chip,
                                                  streamed=commit[:7] not in BEFORE_STREAMED))
            if scheme.streamed:
                block = lm.streamed.block_for(scheme.chunk, h.hidden, h.vocab, 2, chip.vmem,
                                              lm.streamed.accumulator_bytes(2, True, scheme.scaled), compact=True)
                return lm.fused.streamed_cost(h.rows, h.hidden, h.vocab, 2, scheme.chunk, block,
                                              scheme.scaled).seconds(chip)
            if scheme.chunk:
                return lm.fused.cost(h.rows, h.hidden, h.vocab, 2, scheme.chunk, pair=scheme.pair,
                                     kernel=scheme.kernel, scaled=scheme.scaled).seconds(chip)
        costs = lm.plan.choose(h.rows, h.hidden, h.vocab, 2, chip).costs(h.hidden, h.vocab, 2)
        names = ("forward",) if r["pass"] == "fwd" else tuple(costs)
        return sum(costs[n].seconds(chip) for n in names)
    return None


def _stored_layout(tk: ModuleType, r: dict, h: Any, chip: Any, commit: str) -> Any:
    """The stored scheme's layout a record ran: named in its impl, the whole-p scheme's in `WHOLE_P_RUNS`, else what
    `stats.stored_layout` takes."""
    named = re.search(r"stored: chunk (\d+), (\d+) kept, columns (\d+)", r["impl"])
    if named:
        return tk.lm_head.stored.Layout(*map(int, named.groups()))
    if commit[:7] in WHOLE_P_RUNS:
        chunk = WHOLE_P_CHUNKS[h.model]
        return tk.lm_head.stored.Layout(chunk, -(-h.rows // chunk) * chunk, h.vocab)
    return tk.lm_head.stats.stored_layout(h.rows, h.hidden, h.vocab, 2, on=chip)


def _statistics(tk: ModuleType, r: dict, chip: Any, commit: str) -> float | None:
    """TRL's statistics: the kernels' roofline ("tokamax (kernels)"), the stored scheme's (`lm_head.stored.cost`) at
    the layout the record ran (`_stored_layout`), or for "tokamax", the package's default, the one
    `stats.choose_scheme` takes (the kernels in `STATISTICS_ON_KERNELS`' runs, `WHOLE_P_RUNS`' own choice)."""
    h = _shape(r["case"], STATISTICS, by_rows=True)
    if h is None:  # a head only `zoo.rows` lists: its stored layouts are not named in the record
        return None
    lm = tk.lm_head
    if r["impl"] == "tokamax":
        run = commit[:7]
        if run in STATISTICS_ON_KERNELS:
            stored = False
        elif run in WHOLE_P_RUNS:
            stored = h.model in WHOLE_P_RUNS[run]
        else:
            stored = lm.stats.choose_scheme(h.rows, h.hidden, h.vocab, 2, on=chip) == "stored"
    else:
        stored = r["impl"].startswith("tokamax (stored")
    if stored:
        layout = _stored_layout(tk, r, h, chip, commit)
        off_rule = commit[:7] not in WHOLE_P_RUNS and layout.columns != lm.stored.step_columns(h.rows, h.vocab)
        if r["pass"] != "fwd" and (commit[:7] in STORED_BEFORE_RULE or off_rule):
            return None  # the model does not rank column widths: `stored.STEP_ENTRIES`, measured, does
        return lm.stored.cost(h.rows, h.hidden, h.vocab, 2, layout, backward=r["pass"] != "fwd").seconds(chip)
    if r["impl"] not in ("tokamax", "tokamax (kernels)"):
        return None
    costs = lm.plan.choose(h.rows, h.hidden, h.vocab, 2, chip).costs(h.hidden, h.vocab, 2)
    names = ("forward",) if r["pass"] == "fwd" else tuple(costs)
    return sum(costs[n].seconds(chip) for n in names)


def _distill(tk: ModuleType, r: dict, chip: Any, commit: str) -> float | None:
    """The kernels' roofline, or the stored scheme's (`distill.cost.stored`) where the record ran it: "tokamax
    (stored)", and "tokamax" where `distill.stored.choose` takes it, in runs after `AUTO_KERNELS`."""
    d = _shape(r["case"], DISTILL)
    if d is None:  # a pair only `zoo.rows` lists (soft caps the kernels' cost does not take)
        return None
    blocks, stored = tk.distill.blocks, tk.distill.stored
    sizes = blocks.Sizes(d.rows, d.student_hidden, d.teacher_hidden, d.vocab)
    chunk = stored.choose(sizes, chip) if r["impl"] == "tokamax" and commit[:7] not in AUTO_KERNELS else None
    if r["impl"] == "tokamax (stored)":
        chunk = stored.choose(sizes, chip) or stored.chunk_for(d.rows, stored.CHUNKS[-1])
    if chunk is not None:
        return tk.distill.cost.stored(sizes, chunk, backward=r["pass"] != "fwd").seconds(chip)
    by = {k: blocks.choose(sizes, chip.vmem, k) for k in ("forward", "backward_x", "backward_w")}
    costs = tk.distill.cost.costs(sizes, by, beta=0.5)
    names = ("forward",) if r["pass"] == "fwd" else tuple(costs)
    return sum(costs[n].seconds(chip) for n in names)


def _attention(tk: ModuleType, r: dict, chip: Any) -> float | None:
    """`splash.cost` of a causal self-attention record (one sequence, the case's heads and tokens) at the blocks it
    ran: the package's (`splash.blocks.choose`) or the backward's named in the impl. Sliding-window records are not
    predicted: `splash.cost.ROW_SECONDS` was fitted to causal records, and a window's rows are short (the model put
    Gemma 3's window of 1024 at 1.5x the chip's forward)."""
    a = _shape(r["case"], tuple(ATTENTION.values()))
    tokens = re.search(r"(\d+) tokens, causal$", r["case"])
    named = re.fullmatch(r"tokamax \(backward blocks (\d+)/(\d+)/(\d+)\)", r["impl"])
    if a is None or tokens is None or (r["impl"] != "tokamax" and named is None):
        return None
    length, blocks = int(tokens[1]), tk.splash.blocks
    return blocks.seconds(a.heads, a.kv_heads, length, a.head_dim, chip, backward_pass=r["pass"] != "fwd",
                          backward=None if named is None else blocks.Blocks(*map(int, named.groups())))


def predicted(tk: ModuleType, r: dict, *, commit: str) -> float | None:
    """The cost model's seconds for record `r` (a tokamax record of a modelled kernel, from the run at `commit`),
    else None (and for the records of `RAN_OTHERWISE`)."""
    if not r["impl"].startswith("tokamax") or not r.get("median_s"):
        return None
    if (commit[:7], r["op"], r["impl"]) in RAN_OTHERWISE:
        return None
    chip = v5e(tk)
    if r["op"] == "grouped_matmul":
        lookahead = commit[:7] not in ONE_STEP_AHEAD and r["impl"] == "tokamax"
        return _grouped(tk, r, chip, tiles_of(commit), lookahead, commit)
    if r["op"] == "lm_head_loss":
        return _head(tk, r, chip, commit)
    if r["op"] == "lm_head_statistics":
        return _statistics(tk, r, chip, commit)
    if r["op"] == "distillation" and r["impl"] in DISTILL_IMPLS:
        return _distill(tk, r, chip, commit)
    if r["op"] == "attention":
        return _attention(tk, r, chip)
    return None
