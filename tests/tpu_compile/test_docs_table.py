"""docs/tpu-compile.md's table says what the compile tier checks: the same cases, models, targets,
expectations and tiers as tools/tpu_compile/cases (the tier itself checks them against the compiler)."""

from __future__ import annotations

from tests.conftest import REPO
from tools.tpu_compile import table
from tools.tpu_compile.cases import all_cases

PAGE = REPO / "docs/tpu-compile.md"


def test_the_page_lists_every_case_as_the_tier_runs_it():
    documented = table.parse_grid(PAGE.read_text())
    expected = table.parse_grid(table.grid(all_cases()))
    assert expected, "no compile cases"
    missing, extra = sorted(set(expected) - set(documented)), sorted(set(documented) - set(expected))
    assert not missing and not extra, f"docs/tpu-compile.md lacks {missing} and lists unknown {extra}; " \
                                      "regenerate its table (python -m tools.tpu_compile.table)"
    differ = {k: (documented[k], expected[k]) for k in expected if documented[k] != expected[k]}
    assert not differ, f"docs/tpu-compile.md differs from the cases: {differ}"


def test_the_benchmarks_named_cases_exist():
    from tools.tpu_compile import figures

    names = {c.name for c in all_cases()}
    assert figures.NAMED_CASES and set(figures.NAMED_CASES) <= names, set(figures.NAMED_CASES) - names
