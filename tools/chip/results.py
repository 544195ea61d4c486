"""A chip run's results file: the chip, the JAX version, the commit and the time, then one record per
measurement (`op`, `case`, `impl`, `pass`, `median_s`, ...), written whole after each record (a temporary
file renamed over it), so that a run cut short leaves every record it made."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
from pathlib import Path
from typing import Any

import jax

REQUIRED = ("op", "case", "impl", "pass", "median_s")


def torch_stack() -> dict[str, str | None]:
    """The Torch stack the host has (each distribution's version, None where it is not installed): the Torch side
    of a step runs only where torch and torch-tpu do, and the record says when they did not."""
    out: dict[str, str | None] = {}
    for name in ("torch", "torch-tpu", "transformers"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def header(commit: str, what: str) -> dict[str, Any]:
    device = jax.devices()[0]
    return {"what": what, "chip": device.device_kind, "platform": device.platform, "devices": jax.device_count(),
            "jax": jax.__version__, "python": platform.python_version(), "torch_stack": torch_stack(),
            "commit": commit, "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}


class ResultsFile:
    def __init__(self, path: Path, head: dict[str, Any]) -> None:
        self.path, self.data = Path(path), {**head, "records": []}
        self.write()

    def add(self, record: dict[str, Any]) -> None:
        self.data["records"].append(record)
        self.write()

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1) + "\n")
        os.replace(tmp, self.path)


def load(path: Path) -> dict[str, Any]:
    """A results file, checked: its header and every record's required fields."""
    data = json.loads(Path(path).read_text())
    for key in ("chip", "jax", "commit", "records"):
        if key not in data:
            raise ValueError(f"{path}: no {key!r}")
    for i, r in enumerate(data["records"]):
        missing = [k for k in REQUIRED if k not in r]
        if missing:
            raise ValueError(f"{path}: record {i} lacks {missing}")
    return data


def check_outcomes(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """Each chip check's latest record across the runs in `paths` (a run cut at a time limit, or of some families
    only, leaves the rest to the others; a later run of a check supersedes an earlier one)."""
    runs = sorted((json.loads(Path(p).read_text()) for p in paths), key=lambda d: d["started"])
    return {r["name"]: r for run in runs for r in run["records"]}
