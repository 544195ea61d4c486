"""`python -m tools.chip.zoo`: the plan's counts, its estimated time on the chip and the commands that run it."""

from __future__ import annotations

import sys

from .models import MODELS
from .plan import START_S, entries, groups, seconds, shards_needed, split
from .select import ENV_SHARD
from .shapes import TOKENS


def main() -> int:
    plan = entries()
    running = [e for e in plan if not e.skipped]
    n = shards_needed(running)
    print(f"{len(MODELS)} models, {len(TOKENS)} token counts: {len(running)} workloads run, "
          f"{len(plan) - len(running)} skipped, {len(groups(running))} (call, pass) groups; estimated "
          f"{seconds(running) / 3600:.1f} h on the chip in {n} commands of about {seconds(running) / n:.0f} s "
          f"(+{START_S:.0f} s each to start)")
    for i, part in enumerate(split(running, n), 1):
        tokens = sorted({e.tokens for e in part})
        print(f"  {ENV_SHARD}={i}/{n} python3 -m tools.chip bench --only zoo --out build/chip/zoo-{i}  "
              f"# {len(part)} workloads, {seconds(part):.0f} s, tokens {tokens[0]}-{tokens[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
