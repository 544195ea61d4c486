"""The user-facing pages (README.md, CARD.md, docs/*.md) hold together: every code block is marked as
runnable or illustrative and parses; links and anchors resolve (GitHub's slug rules); the commands,
flags, paths and environment variables they name exist in this repository; the front page stays a
front page and indexes every page; CARD.md's code is the README's. The blocks themselves run in
tests/docs/test_jax_snippets.py (JAX tier) and tests/torch/test_doc_snippets.py (Torch tier)."""

from __future__ import annotations

import ast
import os
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from tests.docs import snippets
from tests.docs.snippets import REPO

pytestmark = pytest.mark.kernels_ci

PAGES = snippets.pages()
DOCS = sorted((REPO / "docs").glob("*.md"))
ATTRS = {"run", "calls", "continue", "illustrative", "file"}
FRONT_PAGE_LINES = 210  # "about 200": the front page is one screen per kind of user, not the manual
_LINK = re.compile(r"(?<!\!)\[([^\]]*)\]\(([^)\s]+)\)")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ENV = re.compile(r"\bTOKAMAX_[A-Z0-9_]*[A-Z0-9]\b")
_REPO_PATH = re.compile(r"^(?:tests|tools|scripts|torch-ext|tokamax|requirements|benchmarks|nix|docs|\.ci)/[\w./-]*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _rel(page: Path) -> str:
    return str(page.relative_to(REPO))


# ---- blocks -------------------------------------------------------------------------------------

def test_every_code_block_is_marked():
    problems = []
    for block in snippets.all_blocks():
        where = f"{block.id} (```{block.lang} ...)"
        if block.lang not in snippets.LANGUAGES:
            problems.append(f"{where}: fence language must be one of {snippets.LANGUAGES}")
        unknown = set(block.attrs) - ATTRS
        if unknown:
            problems.append(f"{where}: unknown info-string words {sorted(unknown)}")
        if block.lang == "python":
            kinds = [k for k in ("run", "illustrative", "file") if k in block.attrs]
            if len(kinds) != 1:
                problems.append(f"{where}: a python block says exactly one of run=..., illustrative, file=...")
        if "run" in block.attrs and block.run not in snippets.RUN_KINDS:
            problems.append(f"{where}: run={block.run} is none of {snippets.RUN_KINDS}")
        if block.calls and block.run != "torch":
            problems.append(f"{where}: calls= counts Torch custom ops, so only with run=torch")
    assert not problems, "\n".join(problems)


def test_a_continued_block_follows_a_block_of_its_kind():
    for page in PAGES:
        previous = None
        for block in snippets.blocks(page):
            if "continue" in block.attrs:
                assert previous is not None and block.run is not None and previous.run == block.run, \
                    f"{block.id}: `continue` needs an earlier run={block.run} block on the page"
            if block.run:
                previous = block


def test_python_blocks_parse():
    for block in snippets.all_blocks():
        if block.lang == "python":
            try:
                ast.parse(block.text)
            except SyntaxError as e:
                pytest.fail(f"{block.id}: {e.msg} at the block's line {e.lineno}")


def test_toml_blocks_parse_and_file_blocks_name_relative_paths():
    for block in snippets.all_blocks():
        if block.lang == "toml":
            data = tomllib.loads(block.text)
            if block.attrs.get("file", "").endswith("build.toml"):
                assert data["general"]["name"] and data["general"]["hub"]["repo-id"], \
                    f"{block.id}: a build.toml the tests build needs [general] name and [general.hub] repo-id"
        if "file" in block.attrs:
            path = Path(block.attrs["file"])
            assert block.attrs["file"] and not path.is_absolute() and ".." not in path.parts, \
                f"{block.id}: file= takes a relative path inside the page's scratch directory"


def test_every_runnable_kind_has_blocks():
    """Each tier's snippet test has something to run (a marker typo would otherwise empty it)."""
    for kind in ("torch", "jax"):
        assert snippets.chains(kind), f"no run={kind} block on any page"


def test_the_card_shows_the_readmes_code():
    """CARD.md (the Hub page) shows the README's quick starts, so they run once, from the README."""
    readme = {(b.lang, tuple(sorted(b.attrs.items())), b.text) for b in snippets.blocks(REPO / "README.md")}
    for block in snippets.blocks(REPO / "CARD.md"):
        key = (block.lang, tuple(sorted(block.attrs.items())), block.text)
        assert key in readme, f"{block.id}: every code block of CARD.md is one of the README's, word for word"


def test_the_extractor_reads_the_fences_markdown_it_reads():
    markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py (a kernels dependency) cross-checks "
                                                            "the extractor")
    parser = markdown_it.MarkdownIt("commonmark")
    for page in PAGES:
        theirs = [(t.info.strip(), t.content, t.map[0] + 1) for t in parser.parse(page.read_text())
                  if t.type == "fence"]
        ours = [(f"{b.lang} {' '.join(f'{k}={v}' if v else k for k, v in b.attrs.items())}".strip(), b.text, b.line)
                for b in snippets.blocks(page)]
        assert [(i.split(), c, n) for i, c, n in theirs] == [(i.split(), c, n) for i, c, n in ours], _rel(page)


# ---- links and anchors --------------------------------------------------------------------------

def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (inline code, links and emphasis marks dropped),
    lower case, punctuation removed but hyphens and underscores, spaces as hyphens."""
    text = _CODE_SPAN.sub(lambda m: m.group(1), heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"(\*\*|__|\*)", "", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in snippets.prose(page).splitlines():
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slugs_follow_githubs_rules():
    assert slug("Python 3.13 (kernel-builder's TPU stack)") == "python-313-kernel-builders-tpu-stack"
    assert slug("Upstream's public ops: `tokamax.ops`") == "upstreams-public-ops-tokamaxops"
    assert slug("`build/torch-tpu` against kernel-builder's noarch variant") == \
        "buildtorch-tpu-against-kernel-builders-noarch-variant"
    assert slug("What `ci-test` runs") == "what-ci-test-runs"


def _links(page: Path) -> list[tuple[int, str]]:
    out = []
    for number, line in enumerate(snippets.prose(page).splitlines(), 1):
        for match in _LINK.finditer(_CODE_SPAN.sub("", line)):
            out.append((number, match.group(2)))
    return out


def test_links_between_the_pages_resolve():
    problems = []
    for page in PAGES:
        for number, target in _links(page):
            if re.match(r"^[a-z]+:", target):
                continue  # an external address: not checked offline
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                problems.append(f"{_rel(page)}:{number}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{_rel(page)}:{number}: {target}: {dest.name} has no heading #{anchor}")
    assert not problems, "\n".join(problems)


def test_the_front_page_indexes_every_page_and_every_page_is_reached():
    linked = {(REPO / target.partition("#")[0]).resolve() for _, target in _links(REPO / "README.md")
              if not re.match(r"^[a-z]+:", target)}
    missing = [_rel(p) for p in DOCS if p.resolve() not in linked]
    assert not missing, f"the README's index does not link {missing}"


def test_the_front_page_is_short():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= FRONT_PAGE_LINES, f"README.md has {lines} lines; move detail into docs/ (about 200 at most)"


def test_every_page_says_what_it_is_for_first():
    for page in DOCS:
        lines = page.read_text().splitlines()
        assert lines[0].startswith("# "), f"{_rel(page)} starts with its title"
        first = next(line for line in lines[1:] if line.strip())
        assert not first.startswith(("#", "```", "|", "-", ">", "<")), \
            f"{_rel(page)}: the paragraph after the title says what the page is for and who needs it"
        assert re.search(r"\b[Ff]or\b", " ".join(lines[1:6])), f"{_rel(page)}: say who the page is for"


# ---- what the pages name ------------------------------------------------------------------------

def _code_spans(page: Path) -> list[str]:
    return [m.group(1) for m in _CODE_SPAN.finditer(snippets.prose(page))]


def test_repository_paths_named_in_code_exist():
    problems = []
    for page in PAGES:
        for span in _code_spans(page):
            placeholder = "..." in span or "_ported" in span  # `tests/...`; generated at build time
            if _REPO_PATH.match(span) and not placeholder and not (REPO / span).exists():
                problems.append(f"{_rel(page)}: `{span}` does not exist")
    assert not problems, "\n".join(problems)


def _module_sources(module: str) -> list[Path]:
    """The .py files of `tools.x.y` (a package: all of them), or [] if there is no such module."""
    path = REPO / Path(*module.split("."))
    if (path / "__main__.py").exists() or (path / "__init__.py").exists():
        return sorted(path.rglob("*.py"))
    return [path.with_suffix(".py")] if path.with_suffix(".py").exists() else []


def _check_flags(flags: list[str], sources: list[Path], what: str) -> list[str]:
    text = "\n".join(p.read_text() for p in sources)
    return [f"{what}: no argument handling for {flag}" for flag in flags if flag not in text]


def _check_python(words: list[str], what: str) -> list[str]:
    """`python [-I] -m tools.x [--flags]` or `python path/script.py [--flags]`."""
    rest = [w for w in words if w not in ("-I", "-u", "-B")]
    if rest[:1] == ["-m"] and len(rest) > 1:
        module, args = rest[1], rest[2:]
        if not module.startswith(("tools", "scripts", "tests")):
            return []  # pytest, pip, ...: not this repo's
        sources = _module_sources(module)
        if not sources:
            return [f"{what}: no module {module}"]
        return _check_flags([a.split("=")[0] for a in args if a.startswith("--")], sources, what)
    if rest and rest[0].endswith(".py"):
        script = REPO / rest[0]
        if not script.exists():
            return [f"{what}: no script {rest[0]}"]
        return _check_flags([a.split("=")[0] for a in rest[1:] if a.startswith("--")], [script], what)
    return []


def check_command(line: str, what: str) -> list[str]:
    """What is wrong with one shell command line naming this repo's scripts, modules or flags."""
    problems = []
    for command in re.split(r"&&|\|\||;|\|", line):
        try:
            words = shlex.split(command)
        except ValueError:
            return [f"{what}: cannot split {command!r}"]
        while words and _ASSIGNMENT.match(words[0]):
            words = words[1:]
        if not words:
            continue
        head, args = words[0], words[1:]
        if head in ("source", ".") and args:
            if not (REPO / args[0]).exists():
                problems.append(f"{what}: no file {args[0]}")
        elif head in ("python", "python3"):
            problems += _check_python(args, what)
        elif head.startswith(".venv/"):
            tier = head.split("/")[1]
            if not (REPO / f"requirements/{tier}.txt").exists():
                problems.append(f"{what}: no tier {tier} (requirements/{tier}.txt)")
            problems += _check_python(args, what)
        elif head.startswith(("./", "scripts/", "tools/", ".ci/")):
            script = REPO / head
            if not script.is_file():
                problems.append(f"{what}: no script {head}")
                continue
            if not os.access(script, os.X_OK):
                problems.append(f"{what}: {head} is not executable")
            text = script.read_text()
            sources = [script, *(p for m in re.findall(r"-m (tools\.[\w.]+)", text) for p in _module_sources(m))]
            problems += _check_flags([a.split("=")[0] for a in args if a.startswith("--")], sources, what)
    return problems


def _shell_lines(text: str) -> list[str]:
    joined = re.sub(r"\\\n", " ", text)
    return [re.sub(r"(^|\s)#.*$", "", line).strip() for line in joined.splitlines()]


def test_commands_and_flags_named_exist():
    problems = []
    for page in PAGES:
        for block in snippets.blocks(page):
            if block.lang == "sh":
                for offset, line in enumerate(_shell_lines(block.text), 1):
                    if line:
                        problems += check_command(line, f"{block.id}+{offset}")
        for span in _code_spans(page):
            command = re.match(r"^(\./\S|(\.venv|scripts|tools)/\S+ |python -m tools\.|source )", span)
            if command and "<" not in span:  # `<tier>`: a placeholder, not a command
                problems += check_command(span, f"{_rel(page)}: `{span}`")
    assert not problems, "\n".join(problems)


def test_the_command_check_catches_what_is_not_there():
    assert check_command("./test.sh --fast", "x") == []
    assert check_command("./test.sh --no-such-flag", "x") == ["x: no argument handling for --no-such-flag"]
    assert check_command(".venv/jax-tier/bin/python -m tools.upstream_suite --all", "x") == []
    assert check_command(".venv/jax-tier/bin/python -m tools.no_such_tool", "x") == ["x: no module tools.no_such_tool"]
    assert check_command("./no-such.sh", "x") == ["x: no script ./no-such.sh"]
    assert check_command(".venv/no-such-tier/bin/python -m pytest", "x") == \
        ["x: no tier no-such-tier (requirements/no-such-tier.txt)"]


def _read_by_code() -> str:
    roots = [REPO / d for d in ("scripts", "tools", "torch-ext/tokamax", "tokamax", "tests", "benchmarks", ".ci")]
    files = [*REPO.glob("*.sh"), *(p for r in roots for p in r.rglob("*") if p.is_file()
                                   and "_ported" not in p.parts and p.suffix in ("", ".py", ".sh", ".kdl", ".toml"))]
    return "\n".join(p.read_text("utf-8", "replace") for p in files if p != Path(__file__))


def test_environment_variables_named_are_read_by_the_code():
    code = _read_by_code()
    problems = [f"{_rel(page)}: {name} appears nowhere in the code"
                for page in PAGES for name in sorted(set(_ENV.findall(page.read_text()))) if name not in code]
    assert not problems, "\n".join(problems)
