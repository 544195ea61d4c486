"""Another tier's venv from Python: scripts/env.sh's `ensure_venv`, which sets it up on first use."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class VenvError(RuntimeError):
    """scripts/env.sh could not find an interpreter for the tier or install its pins."""


def tier_python(tier: str) -> str:
    """The python of `tier`'s venv for its frozen pins (set up on first use in the venv cache; .venv/TIER
    links to it)."""
    result = subprocess.run(["bash", "-c", f'source "{REPO}/scripts/env.sh" && ensure_venv {tier}'],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise VenvError(f"could not set up the {tier} venv:\n{result.stderr.strip()}")
    return result.stdout.strip().splitlines()[-1]
