"""Which part of the plan one command runs: the whole zoo outlasts a command on the chip host, so a command names a
part by environment variables (the bench's own `--case TEXT` filters within it as for any module):

    TOKAMAX_ZOO_MODELS="Llama 3.2 1B,Qwen3 8B"   the calls these models make (names as `models.MODELS` spells them)
    TOKAMAX_ZOO_TOKENS=128,256,512,1024          these token counts
    TOKAMAX_ZOO_OPS=attention,grouped_matmul     these ops (attention, grouped_matmul, lm_head_loss,
                                                 lm_head_statistics, distillation, distillation_loss)
    TOKAMAX_ZOO_SHARD=3/12                       the third of 12 shards of about equal estimated time (after the
                                                 filters above; `python -m tools.chip.zoo` lists the shards)
    TOKAMAX_ZOO_JOBS=6                           compiles at a time (`plan.JOBS`; default 1, a user's first call):
                                                 the shards are split by the estimate at that many, and the bench
                                                 compiles that many (`python -m tools.chip.zoo --jobs 6` lists them)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from .models import BY_NAME
from .plan import JOBS, Entry, split

ENV_MODELS, ENV_TOKENS, ENV_OPS, ENV_SHARD = "TOKAMAX_ZOO_MODELS", "TOKAMAX_ZOO_TOKENS", "TOKAMAX_ZOO_OPS", \
    "TOKAMAX_ZOO_SHARD"
ENV_JOBS = "TOKAMAX_ZOO_JOBS"
OPS = ("attention", "grouped_matmul", "lm_head_loss", "lm_head_statistics", "distillation", "distillation_loss")


class Selection(NamedTuple):
    models: frozenset[str] = frozenset()  # empty: every one
    tokens: frozenset[int] = frozenset()
    ops: frozenset[str] = frozenset()
    shard: tuple[int, int] | None = None  # (index from 1, count)
    jobs: int = 1  # compiles at a time: the shards' split, and the bench's

    def describe(self) -> dict[str, object]:
        """What the results file records of the selection."""
        return {"models": sorted(self.models), "tokens": sorted(self.tokens), "ops": sorted(self.ops),
                "shard": None if self.shard is None else f"{self.shard[0]}/{self.shard[1]}", "jobs": self.jobs}


def _items(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def from_env(env: Mapping[str, str] | None = None) -> Selection:
    """The selection the environment names, each name checked (a misspelt model would select nothing)."""
    env = os.environ if env is None else env
    models = frozenset(_items(env.get(ENV_MODELS, "")))
    unknown = sorted(models - set(BY_NAME))
    if unknown:
        raise ValueError(f"{ENV_MODELS}: no zoo model named {unknown} (tools/chip/zoo/models.py)")
    ops = frozenset(_items(env.get(ENV_OPS, "")))
    if ops - set(OPS):
        raise ValueError(f"{ENV_OPS}: {sorted(ops - set(OPS))} are not among {OPS}")
    tokens = frozenset(int(t) for t in _items(env.get(ENV_TOKENS, "")))
    shard = None
    if env.get(ENV_SHARD, "").strip():
        index, count = (int(p) for p in env[ENV_SHARD].split("/"))
        if not 1 <= index <= count:
            raise ValueError(f"{ENV_SHARD}: {env[ENV_SHARD]!r} is not INDEX/COUNT with 1 <= INDEX <= COUNT")
        shard = (index, count)
    jobs = int(env.get(ENV_JOBS, "").strip() or 1)
    if jobs not in JOBS:
        raise ValueError(f"{ENV_JOBS}: {jobs} compiles at a time; the estimates that split the shards know {JOBS}")
    return Selection(models, tokens, ops, shard, jobs)


def chosen(plan: Sequence[Entry], selection: Selection) -> list[Entry]:
    """The entries `selection` names, skipped ones included (their reasons go into the results file)."""
    out = [e for e in plan if (not selection.models or selection.models & set(e.models))
           and (not selection.tokens or e.tokens in selection.tokens)
           and (not selection.ops or e.op in selection.ops)]
    if selection.shard is not None:
        index, count = selection.shard
        out = split(out, count, selection.jobs)[index - 1]
    return out
