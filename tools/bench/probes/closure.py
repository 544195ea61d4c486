"""Probe: the distributions ROOT needs beyond what EXCLUDED roots need, with their installed size.

    python closure.py ROOT [EXCLUDED ...]     (in the venv where ROOT is installed)
Walks Requires-Dist (markers evaluated, extras off) through installed metadata; prints JSON.
"""

import json
import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def closure(root: str) -> set[str]:
    """Names of `root` and everything it pulls in, requested extras included."""
    seen: set[tuple[str, str]] = set()
    names: set[str] = set()
    stack = [(canonicalize_name(root), "")]
    while stack:
        name, extra = stack.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        names.add(name)
        for spec in metadata.distribution(name).requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                child = canonicalize_name(req.name)
                stack.append((child, ""))
                stack.extend((child, e) for e in req.extras)
    return names


def size(name: str) -> int:
    files = metadata.distribution(name).files or []
    return sum((f.size or 0) for f in files)


root, excluded = sys.argv[1], sys.argv[2:]
base = set().union(*(closure(e) for e in excluded)) if excluded else set()
extra = sorted(closure(root) - base - {canonicalize_name(root)})
print(json.dumps({"distributions": len(extra), "mib": sum(size(n) for n in extra) / 2**20, "names": extra,
                  "root_mib": size(root) / 2**20}))
