"""The code blocks of the user-facing pages (README.md, CARD.md, docs/*.md), read as the tests run them.

A fenced block's info string says what it is (docs/writing-docs.md, for contributors):

    ```python run=torch calls=gmm,gmm_bwd   runs in the Torch tier; each named custom op must run
    ```python run=jax                       runs in the JAX tier as written (a CPU host: tokamax.hosts)
    ```python run=torch continue            runs after the page's previous block, in its namespace
    ```python illustrative                  not run (it needs a TPU, a file or a launcher); must parse
    ```toml file=my-kernel/build.toml       a file the page's runnable blocks use (written, then built)
    ```sh                                   commands: this repo's scripts, modules and flags must exist

Only the standard library here: both tiers import it (the JAX tier has no torch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LANGUAGES = ("python", "sh", "toml", "text", "json")
RUN_KINDS = ("torch", "jax")
_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")


def pages() -> list[Path]:
    """Every page whose blocks are checked: the front page, the Hub card and docs/."""
    return [REPO / "README.md", REPO / "CARD.md", *sorted((REPO / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    attrs: dict[str, str] = field(hash=False)  # `key=value` words; bare words map to ""
    text: str = field(hash=False)
    end: int = 0  # 1-based line of the closing fence

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def run(self) -> str | None:
        """The tier kind that runs it (torch, jax), or None."""
        return self.attrs.get("run")

    @property
    def calls(self) -> tuple[str, ...]:
        """Custom ops (this build's namespace) that must run at least once in a run=torch block."""
        return tuple(c for c in self.attrs.get("calls", "").split(",") if c)

    def source(self) -> str:
        """The text padded so that a traceback's line numbers are the page's."""
        return "\n" * self.line + self.text


def parse_info(info: str) -> tuple[str, dict[str, str]]:
    """`python run=torch calls=a,b` -> ("python", {"run": "torch", "calls": "a,b"})."""
    words = info.split()
    if not words:
        return "", {}
    attrs = {}
    for word in words[1:]:
        key, _, value = word.partition("=")
        attrs[key] = value
    return words[0], attrs


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of `page` in order (CommonMark fences: ``` or ~~~, up to 3 spaces indent)."""
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, info = len(opening.group(1)), opening.group(2), opening.group(3).strip()
        body, j = [], i + 1
        while j < len(lines):
            closing = _FENCE.match(lines[j])
            if closing and closing.group(2)[0] == fence[0] and len(closing.group(2)) >= len(fence) \
                    and not closing.group(3).strip():
                break
            body.append(lines[j][indent:] if lines[j][:indent].isspace() else lines[j])
            j += 1
        lang, attrs = parse_info(info)
        found.append(Block(page, i + 1, lang, attrs, "\n".join(body) + "\n", j + 1))
        i = j + 1
    return found


def all_blocks() -> list[Block]:
    return [b for page in pages() for b in blocks(page)]


def chains(kind: str) -> list[list[Block]]:
    """The runnable blocks of one kind, grouped: a block and the `continue` blocks after it on its page."""
    grouped: list[list[Block]] = []
    for page in pages():
        if page.name == "CARD.md":
            continue  # the card's blocks are the README's, word for word (tests/docs/test_pages.py)
        for block in blocks(page):
            if block.run != kind:
                continue
            if "continue" in block.attrs and grouped and grouped[-1][0].page == page:
                grouped[-1].append(block)
            else:
                grouped.append([block])
    return grouped


def files_of(page: Path) -> dict[str, str]:
    """The `file=` blocks of a page: relative path -> text."""
    return {b.attrs["file"]: b.text for b in blocks(page) if b.attrs.get("file")}


def prose(page: Path) -> str:
    """The page without its fenced blocks (each block's lines blanked, so line counts stay)."""
    lines = page.read_text().splitlines()
    for block in blocks(page):
        for k in range(block.line - 1, min(block.end, len(lines))):
            lines[k] = ""
    return "\n".join(lines)
