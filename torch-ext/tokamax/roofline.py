"""The one roofline every block and tile choice in this package is weighed by: a chip's figures (libtpu's
`get_tpu_info()`: peak bf16 flops, HBM bandwidth, MXU width, VMEM, HBM) and what the chip measured of them.

`Chip` holds the figures a choice is made with; `chip()` gives the chip being traced for, its peak and
bandwidth calibrated by `MEASURED` where that chip was measured (benchmarks/measured/, by tools/chip: a
bf16 8192-cube matmul and a 2 GiB copy in the same process as the kernels), the data sheet's elsewhere,
scaled by the measured chip's ratio (the rule the measured chip bears out). `STEP_SECONDS` is a Pallas
TPU grid step's fixed cost.
"""

from __future__ import annotations

from typing import NamedTuple

STEP_SECONDS = 0.28e-6
"""A Pallas TPU grid step's fixed cost (pipeline bookkeeping and DMA issue), as the v5e measured it: the
grouped matmul at upstream's 128-cube tiles (65,000 to 490,000 steps at five model shapes,
benchmarks/measured/v5e-2026-12-04-bench-a9c94e4.json) within 7% of its roofline at 0.28 us, where the
Pallas guide's 0.35 put two shapes 22-25% over. It makes many small blocks cost what they do."""

MEASURED = {
    # chip version: (bf16 matmul flops/s, HBM bytes/s) measured on the chip (benchmarks/measured/v5e-*.json)
    "TPU v5 lite": (165.7e12, 590e9),
}
"""What the chip measured, by JAX's device kind."""

DATA_SHEET = {"TPU v5 lite": (197e12, 820e9)}
"""The data sheet's figures for the measured chips, for the ratio unmeasured chips are scaled by."""


class Chip(NamedTuple):
    """What a block choice is weighed by on one chip (per TensorCore)."""

    name: str
    peak_flops: float  # bf16 matmul flops per second
    hbm_bandwidth: float  # bytes per second
    mxu: int  # the MXU's width: 128 on v5e, 256 on v6e and v7x
    vmem: int  # bytes
    hbm: int = 0  # bytes
    generation: int = 0
    kind: str = ""  # JAX's device kind ("TPU v5 lite"): what result files tuned on the chip are keyed by

    @property
    def ridge(self) -> float:
        """Flops per HBM byte above which a kernel can be MXU-bound."""
        return self.peak_flops / self.hbm_bandwidth

    @property
    def scoped_vmem(self) -> int:
        """The VMEM a Pallas call may use without raising its limit (libtpu's default scoped limit: 16 MiB on
        v5e and v5p, 32 MiB on v6e and v7x; the same rule upstream's ragged dot fits its tiles by)."""
        scoped = self.vmem // 2
        return scoped // 4 if self.generation == 5 else scoped // 2 if self.generation == 6 else scoped

    @property
    def raised_vmem(self) -> int:
        """The scoped VMEM limit the grouped matmul raises its own to where the package's tiles need more than
        `scoped_vmem`: half the chip's VMEM (64 MiB on v5e and v6e, 32 MiB on v7x: its default)."""
        return self.vmem // 2


def seconds(flops: float, bytes_accessed: float, steps: int, on: Chip, mxu_fill: float = 1.0,
            serial: float = 0.0) -> float:
    """The roofline time of a kernel: the larger of its MXU time (flops at the MXU's fill) and its HBM time,
    plus a fixed cost per grid step and `serial` seconds of work neither hides (measured, per kernel: the LM
    head's online statistics, XLA's accumulator in the chunked scheme). Every cost model in this package (the
    LM head's kernels and chunked scheme, distillation's kernels, the grouped matmul's tiles) is timed by this
    one function."""
    return max(flops / (mxu_fill * on.peak_flops), bytes_accessed / on.hbm_bandwidth) + steps * STEP_SECONDS + serial


def scaled(v5e_seconds: float, on: Chip) -> float:
    """Seconds of vector work measured on the v5e, on `on`: scaled by the ratio of matmul peaks (the vector
    units assumed to keep pace with the MXU from one chip to the next; only the v5e has been measured)."""
    return v5e_seconds * MEASURED["TPU v5 lite"][0] / on.peak_flops


def _kind(version: str) -> str:
    return {"TPU_V5E": "TPU v5 lite", "TPU_V5P": "TPU v5", "TPU_V6E": "TPU v6 lite", "TPU_7X": "TPU7x"}.get(
        version.rsplit(".", 1)[-1].upper(), version)


def calibrated(kind: str, peak: float, bandwidth: float) -> tuple[float, float]:
    """(peak, bandwidth) as the chip runs them: measured where `kind` was, else the data sheet's scaled by
    the measured chips' ratio of measured to data sheet."""
    if kind in MEASURED:
        return MEASURED[kind]
    flops_ratio = sum(MEASURED[k][0] / DATA_SHEET[k][0] for k in MEASURED) / len(MEASURED)
    bandwidth_ratio = sum(MEASURED[k][1] / DATA_SHEET[k][1] for k in MEASURED) / len(MEASURED)
    return peak * flops_ratio, bandwidth * bandwidth_ratio


def chip() -> Chip:
    """The chip being traced for (libtpu's figures, calibrated)."""
    from jax.experimental.pallas import tpu as pltpu

    info = pltpu.get_tpu_info()
    version = str(getattr(info.chip_version, "name", info.chip_version))
    peak, bandwidth = calibrated(_kind(version), float(info.bf16_ops_per_second), float(info.mem_bw_bytes_per_second))
    return Chip(str(info.chip_version.value), peak, bandwidth, int(info.mxu_column_size), int(info.vmem_capacity_bytes),
                int(info.hbm_capacity_bytes), int(info.generation), _kind(version))
