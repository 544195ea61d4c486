"""Port time: each run is a fresh `python -m tools.porter` process writing into a scratch dir.

Warm: the artifact cache is already filled (the usual case). Cold: an empty cache, so pip
fetches all four artifacts first (needs the network).
    python -m tools.bench.bench_port [--runs 7] [--cold-runs 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def time_port(cache: Path, out: Path) -> float:
    """Seconds for one port run in a new process."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tools.porter", "--cache", str(cache), "--out", str(out)],
                   cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - start


def summary(samples: list[float]) -> dict:
    """Median and spread of a list of seconds."""
    return {"runs": len(samples), "median_s": statistics.median(samples), "min_s": min(samples),
            "max_s": max(samples)}


def measure(runs: int, cold_runs: int) -> dict:
    """Warm and cold port times, measured in one go."""
    warm_cache = REPO / ".cache/artifacts"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        time_port(warm_cache, out)  # fills the cache if needed; not counted
        warm = [time_port(warm_cache, out) for _ in range(runs)]
        cold = []
        for i in range(cold_runs):
            cache = Path(tmp) / f"cold-{i}"
            cold.append(time_port(cache, out))
            shutil.rmtree(cache)
    return {"port_warm": summary(warm), **({"port_cold": summary(cold)} if cold else {})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--cold-runs", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = measure(args.runs, args.cold_runs)
    for name, s in results.items():
        print(f"{name:10s} median {s['median_s']:.2f} s  "
              f"(min {s['min_s']:.2f}, max {s['max_s']:.2f}, {s['runs']} runs)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
