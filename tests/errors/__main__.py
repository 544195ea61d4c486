"""Prints docs/errors.md's table from the cases, or with --write puts it in the page in place of the table there
(`tests/docs/test_errors_page.py` fails while they differ). Standard library only: either tier runs it.

    .venv/jax-tier/bin/python -m tests.errors --write
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tests.errors import cases, render

PAGE = Path(__file__).resolve().parents[2] / "docs/errors.md"


def table_span(lines: list[str]) -> tuple[int, int]:
    """[start, end) of the page's one table: its first run of lines starting with "|"."""
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return start, end


def page_with_table(page: str, table: str) -> str:
    lines = page.splitlines(keepends=True)
    start, end = table_span(lines)
    return "".join(lines[:start]) + table + "".join(lines[end:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the table in docs/errors.md")
    args = parser.parse_args()
    table = render(cases())
    if args.write:
        PAGE.write_text(page_with_table(PAGE.read_text(), table))
        print(f"wrote {PAGE}")
    else:
        print(table, end="")


if __name__ == "__main__":
    main()
