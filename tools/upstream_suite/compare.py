"""Holds the port's outcomes to upstream's, case by case, with the listed deviations."""

from __future__ import annotations

import collections
import fnmatch
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .run import SideRun

DEVIATIONS = Path(__file__).resolve().parent / "deviations.toml"


@dataclass(frozen=True)
class Deviation:
    """Cases (glob patterns over test ids) the port deliberately does not pass, and why."""

    patterns: tuple[str, ...]
    reason: str

    def matches(self, test_id: str) -> bool:
        return any(fnmatch.fnmatchcase(test_id, p) for p in self.patterns)


def load_deviations(path: Path = DEVIATIONS) -> list[Deviation]:
    """deviations.toml's entries; each needs tests and a reason."""
    entries = tomllib.loads(path.read_text()).get("deviation", [])
    out = []
    for i, entry in enumerate(entries):
        if not entry.get("tests") or not entry.get("reason", "").strip():
            raise ValueError(f"{path.name}: deviation {i + 1} needs `tests` and a `reason`")
        out.append(Deviation(tuple(entry["tests"]), entry["reason"].strip()))
    return out


@dataclass
class Comparison:
    """Every upstream case sorted by what the port did with it."""

    upstream: collections.Counter = field(default_factory=collections.Counter)
    port: collections.Counter = field(default_factory=collections.Counter)
    both_pass: int = 0
    deviations: dict[str, list[str]] = field(default_factory=dict)   # reason -> ids
    unexplained: list[tuple[str, str, str]] = field(default_factory=list)  # id, port outcome, reason
    upstream_fails: list[tuple[str, str]] = field(default_factory=list)   # id, upstream's reason
    port_only_passes: list[str] = field(default_factory=list)
    skip_reasons: collections.Counter = field(default_factory=collections.Counter)
    stale: list[str] = field(default_factory=list)  # deviations that matched nothing failing

    @property
    def ok(self) -> bool:
        return not self.unexplained and self.both_pass > 0


def _file_of(test_id: str) -> str:
    return test_id.split("::", 1)[0]


def _short_reason(reason: str) -> str:
    return re.sub(r"0x[0-9a-f]+|\d+(\.\d+)?", "N", reason)[:100]


def compare(upstream: SideRun, port: SideRun, deviations: list[Deviation]) -> Comparison:
    result = Comparison()
    failed_files = {_file_of(i): why for i, (o, why) in port.outcomes.items() if o == "collection error"}
    matched: set[int] = set()
    for test_id, (outcome, reason) in sorted(upstream.outcomes.items()):
        result.upstream[outcome] += 1
        mine, my_reason = port.outcomes.get(test_id, (None, ""))
        if mine is None and _file_of(test_id) in failed_files:
            mine, my_reason = "collection error", failed_files[_file_of(test_id)]
        result.port[mine or "not run"] += 1
        if outcome == "skipped":
            result.skip_reasons[_short_reason(reason)] += 1
            continue
        if outcome != "passed":
            result.upstream_fails.append((test_id, reason))
            if mine == "passed":
                result.port_only_passes.append(test_id)
            continue
        if mine == "passed":
            result.both_pass += 1
            continue
        hit = next((i for i, d in enumerate(deviations) if d.matches(test_id)), None)
        if hit is None:
            result.unexplained.append((test_id, mine or "not run", my_reason))
        else:
            matched.add(hit)
            result.deviations.setdefault(deviations[hit].reason, []).append(test_id)
    ran_files = {_file_of(i) for i in upstream.outcomes}
    for i, d in enumerate(deviations):
        covers_run = any(fnmatch.fnmatchcase(f, p.split("::", 1)[0]) for f in ran_files for p in d.patterns)
        if covers_run and i not in matched:
            result.stale.append(d.reason.splitlines()[0])
    return result


def evidence(upstream: SideRun, port: SideRun, groups: dict[str, tuple[str, ...]]) -> list[str]:
    """Per named fix: of its cases upstream passes here, how many the port passes (and how many more
    of its cases upstream itself skips or fails on this host)."""
    lines = []
    for name, patterns in groups.items():
        ids = [i for i in upstream.outcomes if any(fnmatch.fnmatchcase(i, p) for p in patterns)]
        passing = [i for i in ids if upstream.outcomes[i][0] == "passed"]
        both = [i for i in passing if port.outcomes.get(i, ("",))[0] == "passed"]
        lines.append(f"  fix, {name}: the port passes {len(both)} of the {len(passing)} cases upstream passes "
                     f"here ({len(ids) - len(passing)} more skip or fail on upstream)")
    return lines


def render(result: Comparison, upstream: SideRun, port: SideRun) -> list[str]:
    """The report: totals, each deviation with its count, upstream's own failures, skips, and
    every unexplained case."""
    total = sum(result.upstream.values())
    lines = [
        f"upstream suite: {total} upstream cases run on both sides "
        f"({upstream.seconds:.0f} s upstream, {port.seconds:.0f} s port)",
        "  upstream: " + ", ".join(f"{n} {o}" for o, n in result.upstream.most_common()),
        "  port:     " + ", ".join(f"{n} {o}" for o, n in result.port.most_common()),
        f"  passed on both: {result.both_pass}; listed deviations: "
        f"{sum(map(len, result.deviations.values()))} cases; unexplained: {len(result.unexplained)}",
    ]
    for reason, ids in result.deviations.items():
        lines.append(f"  deviation ({len(ids)} cases): {reason.splitlines()[0]}")
    by_file = collections.Counter(_file_of(i) for i, _ in result.upstream_fails)
    if by_file:
        lines.append(f"  failing on upstream here too ({len(result.upstream_fails)} cases, not held against the "
                     "port): " + ", ".join(f"{f} ({n})" for f, n in by_file.most_common()))
    if result.port_only_passes:
        lines.append(f"  passing on the port only: {len(result.port_only_passes)} cases")
    for reason, n in result.skip_reasons.most_common(6):
        lines.append(f"  skipped on upstream ({n}): {reason}")
    for reason in result.stale:
        lines.append(f"  note: a listed deviation matched no failing case here: {reason}")
    for test_id, outcome, reason in result.unexplained:
        lines.append(f"  UNEXPLAINED: {test_id}: port {outcome}: {reason}")
    return lines
