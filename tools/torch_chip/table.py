"""`python -m tools.torch_chip.table`: docs/torch-chip.md's tables, rendered from the Torch-mode records
(benchmarks/measured/torch): the bridge beside the JAX path and torch-tpu's own way, the op families mirrored onto
the chip, and TRL's trainers. The page holds the rendering between its markers; a test holds the two equal."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MEASURED = REPO / "benchmarks/measured/torch"
PAGE = REPO / "docs/torch-chip.md"
BEGIN = "<!-- BEGIN torch-chip tables: python -m tools.torch_chip.table -->"
END = "<!-- end of torch-chip tables -->"


def runs(what: str) -> list[dict[str, Any]]:
    """The committed runs of one kind ("bridge", "mirror", "trl", "steps"), oldest first."""
    files = sorted(MEASURED.glob(f"*-torch-{what}-*.json"))
    return sorted((json.loads(f.read_text()) | {"file": f.name} for f in files), key=lambda d: d["started"])


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.2f}"


def bridge(data: dict[str, Any]) -> list[str]:
    lines = [f"Bridge (`{data['file']}`, commit {data['commit']}; medians of 10, ms; x: over the JAX path):", "",
             "| op | shape | pass | JAX path | tokamax from Torch | x | custom op alone | torch.compile | "
             "torch-tpu's own | numerics |", "|---|---|---|---|---|---|---|---|---|---|"]
    rows: dict[tuple[str, str, str], dict[str, dict]] = defaultdict(dict)
    for r in data["jax_side"]:
        rows[(r["op"], r["case"], r["pass"])]["jax"] = r
    for r in data["records"]:
        rows[(r["op"], r["case"], r["pass"])][r["impl"]] = r
    for (op, case, pass_), by in rows.items():
        ours = by.get("tokamax (torch)", {})
        own = next((r | {"name": impl.split("(", 1)[1].rstrip(")")} for impl, r in by.items()
                    if impl.startswith("torch-tpu")), None)
        own_text = "-" if own is None else (f"{_ms(own['median_s'])} ({own['name']})" if own["median_s"] else
                                            f"fails ({own['name']}: {_reason(own.get('error', ''))})")
        ratio = ours.get("ratio_to_jax")
        lines.append(f"| {op} | {case} | {pass_} | {_ms(by.get('jax', {}).get('median_s'))} | "
                     f"{_ms(ours.get('median_s'))} | {'-' if ratio is None else f'{ratio:.3f}'} | "
                     f"{_ms(by.get('tokamax (torch, custom op alone)', {}).get('median_s'))} | "
                     f"{_ms(by.get('tokamax (torch.compile)', {}).get('median_s'))} | {own_text} | "
                     f"{ours.get('numerics', '-')} |")
    return lines


def _reason(error: str) -> str:
    if "out of memory" in error or "RESOURCE_EXHAUSTED" in error:
        return "out of HBM"
    return error.split("|")[0].strip()[:80]


def mirror(data: dict[str, Any]) -> list[str]:
    by_op: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    notes: dict[str, str] = {}
    for r in data["records"]:
        by_op[r["op"]][r["status"]] += 1
        if r["status"] in ("failed", "error"):
            notes.setdefault(r["op"], (r.get("detail") or _reason(r.get("error", "")))[:110])
    lines = [f"Op families mirrored onto the chip (`{data['file']}`, commit {data['commit']}; each call of the Torch "
             "tier's op tests made again on torch-tpu tensors; pytest exit {}):".format(
                 data.get("summary", {}).get("pytest_exit", "cut at the command's limit")), "",
             "| op | passed | failed | ran (no CPU answer) | refused or failed to run | first failure or refusal |",
             "|---|---|---|---|---|---|"]
    for op in sorted(by_op):
        c = by_op[op]
        lines.append(f"| {op} | {c['passed']} | {c['failed']} | {c['ran (no CPU answer)']} | {c['error']} | "
                     f"{notes.get(op, '')} |")
    return lines


def trl(data: dict[str, Any]) -> list[str]:
    lines = [f"TRL's trainers (`{data['file']}`, commit {data['commit']}; {data.get('model', {}).get('config', '')} "
             f"with {data.get('model', {}).get('num_hidden_layers', '?')} layers, vocabulary "
             f"{data.get('model', {}).get('vocab_size', '?')}; seconds per step, median after the first):", "",
             "| trainer | TRL alone | with tokamax | x | first step (alone / tokamax) |", "|---|---|---|---|---|"]
    cases: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in data["records"]:
        cases[r["case"]][r["impl"]] = r
    for case, by in cases.items():
        a, b = by.get("trl", {}), by.get("tokamax", {})
        x = a["median_s"] / b["median_s"] if a.get("median_s") and b.get("median_s") else None
        lines.append(f"| {case} | {_s(a)} | {_s(b)} | {'-' if x is None else f'{x:.2f}'} | "
                     f"{a.get('first_step_s') and round(a['first_step_s'], 2)} / "
                     f"{b.get('first_step_s') and round(b['first_step_s'], 2)} |")
    return lines


def _s(r: dict) -> str:
    if r.get("median_s") is not None:
        return f"{r['median_s']:.3f}"
    return f"not run ({_reason(r.get('error', 'no record'))})" if r else "no record"


def render() -> str:
    lines = [BEGIN, ""]
    for what, fn in (("bridge", bridge), ("mirror", mirror), ("trl", trl)):
        for data in runs(what):
            lines += fn(data) + [""]
    return "\n".join(lines + [END])


def section(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def main() -> int:
    text = PAGE.read_text()
    PAGE.write_text(text.replace(section(text), render()))
    print(f"{PAGE.relative_to(REPO)}: tables rendered from {MEASURED.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
