"""Peak device memory as torch-tpu 0.2.0 gives it: it has no `torch.tpu.max_memory_allocated`, but its allocator
implements the device-allocator interface (`TpuAllocator::getDeviceStats`, `resetPeakStats` in its glue library),
which `torch.accelerator.max_memory_allocated()` and `reset_peak_memory_stats()` read. Each reading says which
call answered, or why none did (a CPU run: no accelerator). A figure larger than the chip's HBM is not a peak (the
v5e gave 139 TB): it is recorded as null with the figure and the reason."""

from __future__ import annotations

from typing import Any

V5E_HBM = 16 * 1024**3  # the v5e's 16 GiB, where torch-tpu does not say


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
    errors: list[str] = []
    reported: dict[str, int] = {}
    limit = None
    for source, read in (("torch.accelerator.max_memory_allocated", torch.accelerator.max_memory_allocated),
                         ("torch.accelerator.memory_stats", _stats_peak)):
        try:
            value = read()
        except Exception as e:  # noqa: BLE001  (the next source is tried; every failure is recorded)
            errors.append(f"{source}: {type(e).__name__}: {e}")
            continue
        if not value:
            errors.append(f"{source}: {value!r}")
            continue
        limit = limit or hbm_bytes()
        answer = checked(int(value), source, *limit)
        if answer["peak_hbm_bytes"] is not None:
            return answer
        errors.append(answer["peak_hbm_error"])
        reported[source] = int(value)
    out: dict[str, Any] = {"peak_hbm_bytes": None, "peak_hbm_error": "; ".join(errors)}
    if reported:
        out["peak_hbm_reported"] = reported
    return out


def checked(value: int, source: str, limit: int, limit_source: str) -> dict[str, Any]:
    """{"peak_hbm_bytes": value} if the chip can hold it; else None and why (a figure past the chip's HBM is
    torch-tpu's accounting, not a peak)."""
    if 0 < value <= limit:
        return {"peak_hbm_bytes": value, "peak_hbm_source": source}
    why = f"more than the chip's HBM ({limit:,} bytes, {limit_source})" if value > limit else "not a size"
    return {"peak_hbm_bytes": None, "peak_hbm_error": f"torch-tpu's {source} gave {value:,} bytes, {why}"}


def hbm_bytes() -> tuple[int, str]:
    """The chip's HBM in bytes and where the figure came from: torch-tpu's device properties, else the v5e's."""
    import torch

    try:
        total = int(torch.tpu.get_device_properties(0).total_memory)
        if total > 0:
            return total, "torch.tpu.get_device_properties"
    except Exception as e:  # noqa: BLE001  (the v5e's figure stands in; the reason is kept)
        return V5E_HBM, f"16 GiB, the v5e's (torch.tpu.get_device_properties: {type(e).__name__}: {e})"[:300]
    return V5E_HBM, "16 GiB, the v5e's"


def _stats_peak() -> int | None:
    import torch

    stats = torch.accelerator.memory_stats()
    return stats.get("allocated_bytes.all.peak") or stats.get("peak_bytes_in_use")
