"""What the Torch-mode scripts (`steps`, `trl`) share on their command line: the entry point's namespace turned into
their own argument list, and the commit a record names."""

from __future__ import annotations

import argparse
import subprocess


def argv(given: list[str] | argparse.Namespace | None) -> list[str] | None:
    """An argument list, or the `tools.torch_chip` entry point's namespace (--out, --commit, --tiny, and the script's
    own options after `--` in `rest`) turned into one."""
    if not isinstance(given, argparse.Namespace):
        return given
    out = ["--out", str(given.out)]
    if getattr(given, "commit", None) and given.commit != "unknown":
        out += ["--commit", given.commit]
    if getattr(given, "tiny", False):
        out.append("--tiny")
    return out + [a for a in getattr(given, "rest", None) or [] if a != "--"]


def commit(given: str | None) -> str:
    """`given`, else the checkout's HEAD, else "unknown" (a copy without .git, as the chip host's)."""
    if given is not None:
        return given
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"
