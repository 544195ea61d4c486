"""What `tokamax.explain` returns: the choices the package makes for one call, each with where it came from and what
the package's cost model says of it, printable on one screen."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Choice:
    """One kernel's (or one scheme's) choice for the call.

    `kernel`: the kernel it is for ("gmm", "dlhs", "tgmm"; "forward", "backward"; "scheme"). `source`: where it
    came from (a config given, upstream's tuned table, the chip's measured tiles, the package's rule, upstream's
    heuristics, the cost model). `sizes`: the tiles, blocks or chunk by name. `vmem_limit`: the scoped VMEM limit
    the kernel is compiled with in bytes (None: libtpu's default). `vmem_bytes`: what the package's model says it
    holds. `seconds`: the roofline's estimate of the kernel on the chip (None where the package has no model).
    `note`: why, in a few words."""

    kernel: str
    source: str
    sizes: Mapping[str, int | bool | None]
    vmem_limit: int | None = None
    vmem_bytes: int | None = None
    seconds: float | None = None
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Alternative:
    """A scheme the cost model weighed (the LM head's and distillation's): its `label`, the estimate, the temporaries
    it holds in HBM and whether they fit the share of HBM the package allows (`Explanation.hbm_budget`)."""

    label: str
    seconds: float
    temp_bytes: int
    fits: bool


@dataclasses.dataclass(frozen=True)
class Explanation:
    """The package's choices for one call on one chip (`tokamax.explain`).

    `op`: the call explained. `chip`: the chip they are for ("v5e", ...; the device kind in `device_kind`). `path`:
    what runs ("mosaic_tpu": upstream's Pallas kernel, "xla", "kernels", "chunked", "stored", ...). `choices`: one
    per kernel (`Choice`). `alternatives`: the schemes the cost model weighed, fastest first (empty where there is
    no choice of scheme). `hbm_budget`: the bytes of HBM a scheme's temporaries may take (None where none is
    weighed)."""

    op: str
    chip: str
    device_kind: str
    path: str
    choices: tuple[Choice, ...]
    alternatives: tuple[Alternative, ...] = ()
    hbm_budget: int | None = None

    def __getitem__(self, kernel: str) -> Choice:
        """The choice for `kernel` ("gmm", "forward", "scheme", ...)."""
        for choice in self.choices:
            if choice.kernel == kernel:
                return choice
        raise KeyError(f"tokamax explain: {self.op} has no choice for {kernel!r}; it has "
                       f"{[c.kernel for c in self.choices]}")

    def __str__(self) -> str:
        lines = [f"tokamax {self.op} on {self.chip} ({self.device_kind}): {self.path}"]
        for c in self.choices:
            sizes = " ".join(f"{k}={v}" for k, v in c.sizes.items())
            extra = [f"VMEM {_mib(c.vmem_bytes)}" if c.vmem_bytes is not None else "",
                     f"limit {_mib(c.vmem_limit)}" if c.vmem_limit is not None else "",
                     f"~{_ms(c.seconds)}" if c.seconds is not None else ""]
            lines.append(f"  {c.kernel:<9} {sizes}  [{c.source}]  " + ", ".join(e for e in extra if e))
            if c.note:
                lines.append(f"            {c.note}")
        if self.alternatives:
            budget = f" (HBM share {_mib(self.hbm_budget)})" if self.hbm_budget is not None else ""
            lines.append(f"  weighed{budget}:")
            lines += [f"    {a.label:<56} ~{_ms(a.seconds):>10}  temporaries {_mib(a.temp_bytes):>10}"
                      f"{'' if a.fits else '  (past the share)'}" for a in self.alternatives[:12]]
            if len(self.alternatives) > 12:
                lines.append(f"    ... {len(self.alternatives) - 12} more")
        return "\n".join(lines)


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / (1 << 20):.1f} MiB"


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.3f} ms"
