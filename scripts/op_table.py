"""Prints the README's per-op table from the test registries: what is checked for every op.

    .venv/jax-tier/bin/python scripts/op_table.py

Reads the kernel-level cases (tests/jax/cases), the public calls and the tables they check
(tests/jax/public); needs the ported tree (./build.sh). Nothing here is measured: it lists
what the test suite checks, so the README cannot claim more than the tests hold.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.jax.cases import all_cases  # noqa: E402
from tests.jax.public.cases import all_tables  # noqa: E402
from tests.jax.public.test_public_identity import CASES as PUBLIC_IDENTITY_CASES  # noqa: E402

# public-case families named after the op they call, where that differs from the kernel module
_SAME_OP = {"splash": "splash_attention", "ragged_dot_general": "ragged_dot", "attention": "flash_attention"}


def _family(case_id: str) -> str:
    family = case_id.split("/", 1)[0]
    return _SAME_OP.get(family, family)


def main() -> int:
    kernel = collections.defaultdict(lambda: {"cases": 0, "chips": set(), "numerics": 0, "xfail": set()})
    for case in all_cases():
        row = kernel[_family(case.id)]
        row["cases"] += 1
        row["chips"] |= set(case.chips)
        if case.interpret_xfail:
            row["xfail"].add(case.interpret_raises[0].__name__ if case.interpret_raises else "?")
        else:
            row["numerics"] += 1
    public = collections.defaultdict(lambda: {"fwd": 0, "grad": 0, "chips": set()})
    for case in PUBLIC_IDENTITY_CASES:  # each call on the one chip the identity test lowers it for
        row = public[_family(case.id)]
        name = case.id.rsplit("/", 1)[-1]
        row["grad" if name == "grad" or name.startswith("grad-") else "fwd"] += 1
        row["chips"].add(case.chip)
    tables = collections.Counter()
    for table in all_tables():
        tables[table.id] += sum(len(table.entries(chip)) for chip in table.chips())
    print("| op | kernel cases (chips) | interpret numerics | identity with upstream, kernel level | "
          "public calls, whole module = upstream's: fwd / grad (chips they rotate over) |")
    print("|---|---|---|---|---|")
    for name in sorted(set(kernel) | set(public)):
        k, p = kernel.get(name), public.get(name)
        kcol = f"{k['cases']} ({', '.join(sorted(k['chips']))})" if k else "-"
        xfail = f"; strict xfail: {', '.join(sorted(k['xfail']))}" if k and k["xfail"] else ""
        ncol = f"{k['numerics']} run{xfail}" if k else "-"
        icol = "bodies + whole module" if k else "-"
        pcol = f"{p['fwd']} / {p['grad']} ({', '.join(sorted(p['chips']))})" if p else "-"
        print(f"| {name} | {kcol} | {ncol} | {icol} | {pcol} |")
    print()
    print("Tables checked key by key: " + ", ".join(f"{name} {n}" for name, n in sorted(tables.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
