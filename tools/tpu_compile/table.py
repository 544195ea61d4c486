"""The compile tier's outcomes as a table: what compiled on which chip at which model's shapes, per-chip
memory from the compiler, and what was refused with which message."""

from __future__ import annotations

MiB = 2**20


def _mib(n: int | None) -> str:
    return "" if n is None else f"{n / MiB:,.1f}"


def render(outcomes: list[dict]) -> str:
    """A Markdown table, one row per case, in the order run."""
    lines = ["| case | target | outcome | seconds | temp MiB | argument MiB | output MiB | kernels | collectives |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for o in outcomes:
        case, _, target = o["name"].rpartition("@")
        memory, hlo = o.get("memory") or {}, o.get("hlo") or {}
        collectives = sum(v for k, v in hlo.items() if k != "tpu_custom_call")
        outcome = o["status"] if o["status"] == "compiled" else f"{o['status']}: {o['message'][:160]}"
        lines.append(f"| {case} | {target} | {outcome} | {o['seconds']:.1f} | {_mib(memory.get('temp'))} | "
                     f"{_mib(memory.get('argument'))} | {_mib(memory.get('output'))} | "
                     f"{hlo.get('tpu_custom_call', '')} | {collectives if hlo else ''} |")
    return "\n".join(lines) + "\n"
