"""docs/errors.md's table is the rendering of the bad calls the tests make (tests/errors), so the page says what the
tests hold; the jax and Torch pages link it."""

from __future__ import annotations

import pytest

from tests.docs.snippets import REPO
from tests.errors import BadInput, cases, render
from tests.errors.__main__ import PAGE, page_with_table, table_span

pytestmark = pytest.mark.kernels_ci


def test_the_page_shows_every_case():
    lines = PAGE.read_text().splitlines(keepends=True)
    start, end = table_span(lines)
    assert "".join(lines[start:end]) == render(cases()), (
        "docs/errors.md's table differs from the cases: .venv/jax-tier/bin/python -m tests.errors --write")


def test_the_rendering_escapes_and_rewrites_only_the_table():
    case = BadInput("tokamax.x", "a", "a | b", "ValueError", "got `a|b`", lambda tk: None)
    table = render([case])
    assert table.splitlines()[2] == "| `tokamax.x` | `a` | a \\| b | `ValueError` | got `a\\|b` |"
    page = "# T\n\nFor x.\n\n| old |\n|---|\n\nafter\n"
    assert page_with_table(page, table) == "# T\n\nFor x.\n\n" + table + "\nafter\n"


def test_both_tiers_and_every_room_have_cases():
    tiers = {c.tier for c in cases()}
    assert tiers == {"jax", "torch"}, tiers
    entries = {c.entry for c in cases()}
    for name in ("lm_head.loss.loss", "distill.divergence", "splash.attend", "ring.attention",
                 "torch_ops.lm_head_cross_entropy", "torch_ops.splash_attention"):
        assert f"tokamax.{name}" in entries, name


@pytest.mark.parametrize("page", ["docs/jax.md", "docs/torch-ops.md"])
def test_the_jax_and_torch_pages_link_it(page):
    assert "(errors.md)" in (REPO / page).read_text(), f"{page} links docs/errors.md"
