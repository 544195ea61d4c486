"""Path globs for recipe properties (`*` inside one path segment, `**/` across segments).

`fnmatch` lets `*` cross `/`, which would make `keep=` patterns match far more than written,
and `PurePath.full_match` only exists from Python 3.13.
"""

import functools
import re


@functools.cache
def compile_glob(pattern: str) -> re.Pattern[str]:
    """Compiles a tree-relative glob such as `_src/ops/**/*.py` into a regex."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]+/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def matches(pattern: str, path: str) -> bool:
    """True if the tree path `path` matches `pattern`."""
    return compile_glob(pattern).match(path) is not None


def split_patterns(value: str) -> list[str]:
    """Splits a whitespace-separated list of globs (one per line in the recipe)."""
    return value.split()
