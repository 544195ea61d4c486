"""`python -m tools.chip.zoo`: the plan's counts, its estimated time on the chip and the commands that run it."""

from __future__ import annotations

import argparse
import sys

from .models import MODELS
from .plan import JOBS, START_S, entries, groups, seconds, shards_needed, split
from .select import ENV_JOBS, ENV_SHARD
from .shapes import TOKENS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.chip.zoo")
    parser.add_argument("--jobs", type=int, default=1, choices=JOBS, help="compiles at a time the commands run "
                        f"({ENV_JOBS}; 1, the default, times first calls as a user's)")
    jobs = parser.parse_args(argv).jobs
    plan = entries()
    running = [e for e in plan if not e.skipped]
    n = shards_needed(running, jobs)
    print(f"{len(MODELS)} models, {len(TOKENS)} token counts: {len(running)} workloads run, "
          f"{len(plan) - len(running)} skipped, {len(groups(running))} (call, pass) groups; estimated "
          f"{seconds(running, jobs) / 3600:.1f} h on the chip compiling {jobs} at a time, in {n} commands of about "
          f"{seconds(running, jobs) / n:.0f} s (+{START_S:.0f} s each to start)")
    env = f"{ENV_JOBS}={jobs} " if jobs != 1 else ""
    for i, part in enumerate(split(running, n, jobs), 1):
        tokens = sorted({e.tokens for e in part})
        print(f"  {env}{ENV_SHARD}={i}/{n} python3 -m tools.chip bench --only zoo --out build/chip/zoo-{i}  "
              f"# {len(part)} workloads, {seconds(part, jobs):.0f} s, tokens {tokens[0]}-{tokens[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
