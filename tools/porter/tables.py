"""Upstream's autotuning tables, cut down to what choosing a config needs.

An upstream table maps the JSON text of an op's arguments to every config it timed, with
lowering, compile and run times. Upstream's Op takes the config with the smallest median run
time (the first one on a tie) and treats an empty entry as no result. The compact form keeps,
per key and in file order, that one config and its timings as upstream recorded them (what
`cached_autotuning_data` returns), or `null` for both: `{"entries": [[key, config|null,
timings|null], ...]}`.
"""

from __future__ import annotations

import json
import statistics

FORMAT = "tokamax-compact-autotuning/2"


def fastest(timings: dict[str, dict]) -> tuple[dict | None, dict | None]:
    """The config (parsed) with the smallest median evaluation time and its timings; `None`s for an
    empty entry."""
    best, best_time = None, None
    for config, data in timings.items():
        median = statistics.median(float(t) for t in data["evaluation_times_ms"])
        if best_time is None or median < best_time:
            best, best_time = config, median
    return (None, None) if best is None else (json.loads(best), timings[best])


def compact(data: bytes) -> bytes:
    """The compact table of an upstream table file's bytes."""
    table = json.loads(data)
    if not isinstance(table, dict):
        raise ValueError("the top level is not an object")
    entries = [[json.loads(key), *fastest(timings)] for key, timings in table.items()]
    return (json.dumps({"format": FORMAT, "entries": entries}, separators=(",", ":")) + "\n").encode()
