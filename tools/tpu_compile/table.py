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


def grid(cases: list, outcomes: list[dict] | None = None) -> str:
    """docs/tpu-compile.md's table: one row per case id, the targets it runs on (with the compiler's
    temporaries per chip where `outcomes` has them) and what must happen: compiles, or the refusal."""
    temps = {o["name"]: (o.get("memory") or {}).get("temp") for o in outcomes or []}
    rows: dict[tuple, list[str]] = {}
    for c in cases:
        rows.setdefault((c.id, c.model, c.expect, c.tier), []).append(c.target)
    lines = ["| case | model | targets (temporaries per chip) | must | tier |", "|---|---|---|---|---|"]
    for (case_id, model, expect, tier), targets in rows.items():
        cells = [t if temps.get(f"{case_id}@{t}") is None else f"{t} ({_mib(temps[f'{case_id}@{t}'])} MiB)"
                 for t in targets]
        must = ("compile" if expect == "compiles" else f"fail in libtpu (a known gap): `{expect[8:]}`"
                if expect.startswith("libtpu: ") else f"be refused: `{expect}`")
        lines.append(f"| `{case_id}` | {model} | {', '.join(cells)} | {must} | {tier} |")
    return "\n".join(lines) + "\n"


def parse_grid(text: str) -> dict[tuple[str, str], tuple[str, frozenset[str], str]]:
    """The rows of a `grid` table in `text`: (case id, tier) -> (model, targets, must)."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].startswith("`"):
            continue
        targets = frozenset(t.split(" (")[0].strip() for t in cells[2].split(", "))
        out[cells[0].strip("`"), cells[4]] = (cells[1], targets, cells[3])
    return out


def main(argv: list[str]) -> int:
    """`python -m tools.tpu_compile.table [REPORT]`: the grid, with the temporaries of the tier's report
    (default build/test-reports/tpu-compile.json) where it has them."""
    import json
    from pathlib import Path

    from .cases import all_cases

    report = Path(argv[0] if argv else Path(__file__).resolve().parents[2] / "build/test-reports/tpu-compile.json")
    outcomes = json.loads(report.read_text()) if report.exists() else []
    print(grid(all_cases(), outcomes), end="")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
