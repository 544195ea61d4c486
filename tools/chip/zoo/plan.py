"""The zoo's plan: every (call, pass, way) the models make at every token count, once per distinct call (the models
that make it listed with it), the package's way beside each alternative, and each way that would not fit the chip
skipped with its reason (`memory`); with each entry's estimated seconds on the chip, and the split of the whole into
commands that each end within the chip host's per-command limit (`split`). No JAX: CI renders the plan in docs/zoo.md.

The alternatives, the best a JAX user has at each call (in one run with the package's way, so that the table takes
the faster that ran): splash beside JAX's bundled splash kernel (blocks of 512, or the tokens where fewer; its fused
backward, or where that backward's per-block dq does not fit, its separate dq and dkv kernels) and XLA's attention
where its logits fit; the grouped matmul beside `jax.lax.ragged_dot`; the heads and distillation beside XLA's plain
formulation where its float32 logits fit, and the same over checkpointed chunks of rows where they come near the
chip's HBM or past it (`memory.CHUNKED_FROM`).

`python -m tools.chip.zoo` prints the counts and the commands.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

from ..measure import PIPELINED_BELOW_S
from . import memory
from .models import MODELS, Model
from .shapes import TOKENS, Attention, Call, Distill, Experts, calls

PEAK = 165e12  # the v5e's measured bf16 matmul rate (an 8192-cube dot, docs/benchmarks.md)
HBM_RATE = 590e9  # its measured HBM copy rate
CALLS = 12  # 2 warm-up calls and 10 timed, each waited for (tools.chip bench's default)
PIPELINED_CALLS = 10  # then 10 issued back to back, for calls under tools.chip.measure.PIPELINED_BELOW_S
CONTENTION = 3  # COMPILE_S's records compiled six at a time on the host's 13 cores, each about 3x a lone compile; the
# zoo compiles one at a time (tools.chip's ZOO_JOBS: a user's first call), so a lone one is estimated at COMPILE_S / 3
JOBS = (1, 6)
"""Compiles at a time the estimates know (`select.ENV_JOBS`): one, a user's first call, and six, as the benchmark's
own runs compile (each of the six `SIX_AT_ONCE` times a lone compile, six sharing the host's time)."""
SIX_AT_ONCE = 2.0
"""A compile among six at once over the same compile alone: the same XLA programs took 1.26-1.70x in shard 6
(6c78e5c, six at once) what they took in 44d0773's run (one at a time), on the chip host; the grouped matmul's Mosaic
programs 2-2.5x (`tools.chip.__main__.ZOO_JOBS`, alone on another host). Six at once cuts the plan's compiling about
threefold (4.7 h to about 3.0 h on the whole zoo, whose calls at training's token counts take 2.2 h) and overstates
each first call by as much: the table says which runs compiled so; a first call past 10 s there is measured again
alone (`--case`)."""
MAKE_S = 0.3  # the inputs made on the chip, per workload
FLOOR_S = 2e-4  # a call's dispatch and launch where the work is nothing
START_S = 90.0  # a command's own: JAX's start, the bundle, the peaks measured before any workload
COMMAND_S = 540.0  # the chip host's 600 s per command, less a margin
SHARD_S = 300.0  # a shard's estimated workload seconds: the estimate's error is the rest of `COMMAND_S`
COMPILE_S = {  # first-call compile seconds by way, from the benchmark's records (upper ends of each family)
    "tokamax": {"attention": 6.0, "grouped_matmul": 6.0, "lm_head_loss": 9.0, "lm_head_statistics": 9.0,
                "distillation": 7.0, "distillation_loss": 7.0},
    "jax splash fused": 5.0, "jax splash": 5.0, "xla": 2.5, "xla chunked": 3.5,
}
EFFICIENCY = {  # the share of `PEAK` each way reached in the benchmark's records (model flops); XLA's by op
    "tokamax": 0.7, "jax splash fused": 0.55, "jax splash": 0.5, "xla chunked": 0.5,
}
XLA_EFFICIENCY = {"attention": 0.1, "grouped_matmul": 0.5, "lm_head_loss": 0.9, "lm_head_statistics": 0.8,
                  "distillation": 0.8, "distillation_loss": 0.8}


def impl_name(way: str, call: Call) -> str:
    """The impl a record names for `way`."""
    if way.startswith("jax splash"):
        block = min(512, call.tokens)
        return f"jax splash ({block} blocks, {'fused bwd' if way.endswith('fused') else 'separate dq and dkv'})"
    return {"xla chunked": f"xla (chunked by {memory.XLA_CHUNK} rows, checkpointed)"}.get(way, way)


@dataclasses.dataclass(frozen=True)
class Entry:
    call: Call
    pass_: str
    way: str  # "tokamax", "xla", "xla chunked", "jax splash fused", "jax splash"
    models: tuple[str, ...]
    skipped: str = ""  # why it does not run ("": it runs)

    @property
    def op(self) -> str:
        return self.call.op

    @property
    def family(self) -> str:
        return self.call.family

    @property
    def case(self) -> str:
        return self.call.case

    @property
    def tokens(self) -> int:
        return self.call.tokens

    @property
    def impl(self) -> str:
        return impl_name(self.way, self.call)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return self.op, self.case, self.pass_, self.impl

    @property
    def flops(self) -> float:
        return self.call.flops(self.pass_)

    @property
    def seconds(self) -> float:
        """`seconds_at` one compile at a time."""
        return self.seconds_at(1)

    def seconds_at(self, jobs: int) -> float:
        """Estimated seconds on the chip, compiling `jobs` (of `JOBS`) at a time: its share of the compiles, the
        calls, the inputs (0 where skipped)."""
        if jobs not in JOBS:
            raise ValueError(f"tools.chip.zoo: the estimates know {JOBS} compiles at a time, not {jobs}")
        if self.skipped:
            return 0.0
        compile_s = COMPILE_S[self.way]
        compile_s = compile_s[self.op] if isinstance(compile_s, dict) else compile_s
        compile_s = compile_s / CONTENTION * (1 if jobs == 1 else SIX_AT_ONCE / jobs)
        rate = PEAK * (XLA_EFFICIENCY[self.op] if self.way == "xla" else EFFICIENCY[self.way])
        call_s = max(FLOOR_S, self.flops / rate, memory.need(self.call, self.way, self.pass_) / HBM_RATE)
        calls = CALLS + (PIPELINED_CALLS if call_s < PIPELINED_BELOW_S else 0)
        return compile_s + calls * call_s + MAKE_S


def _gib(b: float) -> str:
    return f"{b / memory.GiB:.1f} GiB"


def _ways(c: Call, pass_: str) -> list[tuple[str, str]]:
    """(way, why it is skipped or "") for the package's way and each alternative of `c`'s `pass_`."""
    own = memory.need(c, "tokamax", pass_)
    if own > memory.BUDGET:
        why = f"its operands and gradients alone hold {_gib(own)}, past the chip's {_gib(memory.BUDGET)} budget"
        alternatives = ["jax splash fused", "xla"] if isinstance(c, Attention) else ["xla"]
        return [("tokamax", why)] + [(a, why) for a in alternatives]
    out = [("tokamax", "")]
    if isinstance(c, Attention):
        fused = memory.need(c, "jax splash fused", pass_)
        if pass_ == "fwd" or fused <= memory.BUDGET:
            out.append(("jax splash fused", ""))
        else:
            out += [("jax splash fused", f"its fused backward keeps dq per KV block: {_gib(fused)}, past the "
                                         f"{_gib(memory.BUDGET)} budget (its separate dq and dkv kernels run)"),
                    ("jax splash", "")]
        held = memory.need(c, "xla", pass_)
        out.append(("xla", "" if held <= memory.BUDGET else
                    f"its float32 logits [heads, tokens, tokens] with the operands hold {_gib(held)}, past the "
                    f"{_gib(memory.BUDGET)} budget"))
    elif isinstance(c, Experts):
        out.append(("xla", ""))
    else:
        plain = memory.need(c, "xla", pass_)
        if plain <= memory.BUDGET:
            out.append(("xla", ""))
        else:
            what = "both models' float32 logits" if isinstance(c, Distill) else (
                "its float32 logits and log-probabilities" if c.op == "lm_head_statistics" else "its float32 logits")
            out.append(("xla", f"{what} with the operands hold {_gib(plain)}, past the {_gib(memory.BUDGET)} budget "
                               f"(XLA over checkpointed chunks of {memory.XLA_CHUNK} rows runs)"))
        if plain > memory.CHUNKED_FROM:
            out.append(("xla chunked", ""))
    return out


def entries(models: Sequence[Model] = MODELS, tokens: Sequence[int] = TOKENS) -> list[Entry]:
    """The plan, token count by token count, model by model: each distinct (call, pass, way) once, in the order of
    the first model that makes it, with every model that does."""
    found: dict[tuple[str, str, str, str], Entry] = {}
    for t in tokens:
        for m in models:
            for c in calls(m, t):
                for pass_ in c.passes:
                    for way, why in _ways(c, pass_):
                        e = Entry(c, pass_, way, (m.name,), why)
                        if e.key in found:
                            held = found[e.key]
                            if m.name not in held.models:
                                found[e.key] = dataclasses.replace(held, models=(*held.models, m.name))
                        else:
                            found[e.key] = e
    return list(found.values())


def groups(plan: Iterable[Entry]) -> list[list[Entry]]:
    """The entries by (op, case, pass): the package's way and its alternatives, which one command runs together."""
    out: dict[tuple[str, str, str], list[Entry]] = {}
    for e in plan:
        out.setdefault((e.op, e.case, e.pass_), []).append(e)
    return list(out.values())


def seconds(plan: Iterable[Entry], jobs: int = 1) -> float:
    return sum(e.seconds_at(jobs) for e in plan)


def shards_needed(plan: Sequence[Entry], jobs: int = 1) -> int:
    return max(1, math.ceil(seconds(plan, jobs) / SHARD_S))


def split(plan: Sequence[Entry], n: int, jobs: int = 1) -> list[list[Entry]]:
    """The plan in `n` shards of about equal estimated seconds at `jobs` compiles at a time, whole groups each, in
    the plan's order."""
    parts: list[list[Entry]] = [[] for _ in range(n)]
    total, done = seconds(plan, jobs), 0.0
    for g in groups(plan):
        index = min(n - 1, int(done / total * n)) if total else 0
        parts[index] += g
        done += seconds(g, jobs)
    return parts
