"""A Torch-mode results file: the chip as torch-tpu names it, the stack's versions, the commit, then one record
per measurement, written whole after each (`tools.chip.results.ResultsFile`: a run cut short keeps its records)."""

from __future__ import annotations

import datetime
import importlib.metadata
import platform
from pathlib import Path
from typing import Any

from tools.chip.results import ResultsFile

STACK = ("torch", "torch-tpu", "jax", "jaxlib", "libtpu", "transformers", "trl", "peft", "accelerate")


def versions() -> dict[str, str | None]:
    """Each distribution's version (None where it is not installed; libtpu's is the shim's where one is used)."""
    out: dict[str, str | None] = {}
    for name in STACK:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def device_name() -> str:
    """The chip torch-tpu runs on ("TPU v5 lite"), or why none answered."""
    import torch

    try:
        return str(torch.tpu.get_device_name())
    except Exception as e:  # noqa: BLE001  (recorded, not raised: a CPU run of the tool says so)
        return f"no TPU: {type(e).__name__}: {e}"


def open_results(path: Path, what: str, commit: str, side: str = "torch") -> ResultsFile:
    """A results file for `what`, its header written now. `side`: "torch" (the chip named by torch-tpu) or
    "jax" (by JAX)."""
    if side == "jax":
        import jax

        chip, platform_ = jax.devices()[0].device_kind, jax.default_backend()
    else:
        chip, platform_ = device_name(), "torch-tpu"
    head = {"what": what, "mode": "torch", "side": side, "chip": chip, "platform": platform_,
            "python": platform.python_version(), "stack": versions(), "jax": versions()["jax"], "commit": commit,
            "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    return ResultsFile(path, head)


def record(op: str, case: str, impl: str, pass_: str, median_s: float | None, **extra: Any) -> dict[str, Any]:
    """One record in the chip tier's schema (`tools.chip.results.REQUIRED`)."""
    return {"op": op, "case": case, "impl": impl, "pass": pass_, "median_s": median_s, **extra}
