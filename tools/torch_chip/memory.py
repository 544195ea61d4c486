"""Peak device memory as torch-tpu 0.2.0 gives it: it has no `torch.tpu.max_memory_allocated`, but its allocator
implements the device-allocator interface (`TpuAllocator::getDeviceStats`, `resetPeakStats` in its glue library),
which `torch.accelerator.max_memory_allocated()` and `reset_peak_memory_stats()` read. Each reading says which
call answered, or why none did (a CPU run: no accelerator)."""

from __future__ import annotations

from typing import Any


def reset_peak() -> str | None:
    """Resets the peak; None, or why it could not be."""
    import torch

    if not torch.accelerator.is_available():
        return "no accelerator (a CPU run)"
    try:
        torch.accelerator.reset_peak_memory_stats()
        return None
    except Exception as e:  # noqa: BLE001  (recorded beside the peak)
        return f"torch.accelerator.reset_peak_memory_stats: {type(e).__name__}: {e}"


def peak() -> dict[str, Any]:
    """{"peak_hbm_bytes": int or None, "peak_hbm_source" or "peak_hbm_error": how it was read, or why not}."""
    import torch

    if not torch.accelerator.is_available():
        return {"peak_hbm_bytes": None, "peak_hbm_error": "no accelerator (a CPU run)"}
    errors = []
    for source, read in (("torch.accelerator.max_memory_allocated", torch.accelerator.max_memory_allocated),
                         ("torch.accelerator.memory_stats", _stats_peak)):
        try:
            value = read()
        except Exception as e:  # noqa: BLE001  (the next source is tried; every failure is recorded)
            errors.append(f"{source}: {type(e).__name__}: {e}")
            continue
        if value:
            return {"peak_hbm_bytes": int(value), "peak_hbm_source": source}
        errors.append(f"{source}: {value!r}")
    return {"peak_hbm_bytes": None, "peak_hbm_error": "; ".join(errors)}


def _stats_peak() -> int | None:
    import torch

    stats = torch.accelerator.memory_stats()
    return stats.get("allocated_bytes.all.peak") or stats.get("peak_bytes_in_use")
