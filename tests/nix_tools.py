"""Nix's command-line tools for the tests that evaluate Nix code (Debian's nix-bin provides them).

Where TOKAMAX_REQUIRE_NIX is set (.ci/run sets it after installing nix-bin) a missing tool fails
the test; elsewhere the test is skipped and says which tool is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

FLAKES = ["--extra-experimental-features", "nix-command flakes"]


def nix_tool(name: str) -> str:
    """The path of Nix tool `name` (`nix`, `nix-instantiate`), or a skip / failure saying it is missing."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("TOKAMAX_REQUIRE_NIX"):
            pytest.fail(f"{name} is required here (TOKAMAX_REQUIRE_NIX is set) but not installed")
        pytest.skip(f"{name} is not installed (Debian's nix-bin provides it; CI installs it)")
    return path


def nix_eval(expression: str, *options: str) -> subprocess.CompletedProcess:
    """`nix-instantiate --eval --strict --json` of an expression, offline and without writing the store."""
    command = [nix_tool("nix-instantiate"), "--eval", "--strict", "--json", "--readonly-mode",
               "--option", "substituters", "", *options, "-E", expression]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def nix_string(text: str) -> str:
    """`text` as a Nix string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("${", "\\${") + '"'
