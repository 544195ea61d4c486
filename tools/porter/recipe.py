"""Reads the KDL recipe into checked steps, in kernel-port's vocabulary.

The recipe's first node is `recipe version=1`; every other node is one step whose name is an
op and whose `key="value"` properties are its arguments. Unknown ops, unknown or missing
properties and wrong value types fail here, before anything is fetched.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import ckdl

from .errors import PortError

# op -> (required properties, optional properties); all values are strings unless in _INTS.
_SCHEMA: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "source": (frozenset({"package", "version", "dist", "sha256", "root"}), frozenset({"license"})),
    "vendor": (
        frozenset({"package", "version", "dist", "sha256", "from", "to"}),
        frozenset({"license"}),
    ),
    "prune": (frozenset({"keep"}), frozenset()),
    "delete": (frozenset({"in"}), frozenset()),
    "move": (frozenset({"from", "to"}), frozenset()),
    "overlay": (frozenset({"from"}), frozenset()),
    "replace": (frozenset({"in", "find", "with", "count"}), frozenset()),
    "expect": (frozenset({"in", "count"}), frozenset({"find", "imports"})),
    "keep_definitions": (frozenset({"in", "names"}), frozenset()),
    "remap_module": (frozenset({"in", "from", "to"}), frozenset()),
    "relativize_imports": (frozenset({"in", "package_root"}), frozenset()),
    "ensure_init": (frozenset({"under"}), frozenset()),
    "strip_type_params": (frozenset({"in"}), frozenset()),
    "compact_autotuning": (frozenset({"in"}), frozenset()),
}
_INTS = frozenset({"count"})
ARTIFACT_OPS = frozenset({"source", "vendor"})
DISTS = frozenset({"sdist", "wheel"})


@dataclasses.dataclass(frozen=True)
class Step:
    """One recipe node: its position (1-based, after the header), op name and properties."""

    index: int
    op: str
    props: dict[str, Any]

    def where(self) -> str:
        """How error messages name this step."""
        shown = " ".join(f'{k}="{v}"' for k, v in self.props.items() if k in ("in", "package", "from", "to"))
        return f"step {self.index} `{self.op}` {shown}".rstrip()


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A parsed recipe: where it lives (overlays resolve against it), its bytes' hash, its steps."""

    path: Path
    sha256: str
    steps: tuple[Step, ...]

    def artifacts(self) -> list[Step]:
        """The `source` and `vendor` steps, which name the artifacts to fetch."""
        return [s for s in self.steps if s.op in ARTIFACT_OPS]


def _check_step(index: int, node: Any) -> Step:
    if node.args:
        raise PortError(f"step {index} `{node.name}`: takes properties only, got arguments {node.args}")
    if node.children:
        raise PortError(f"step {index} `{node.name}`: takes no child nodes")
    if node.name not in _SCHEMA:
        raise PortError(f"step {index}: unknown op `{node.name}` (known: {', '.join(sorted(_SCHEMA))})")
    required, optional = _SCHEMA[node.name]
    props = dict(node.properties)
    missing = sorted(required - props.keys())
    unknown = sorted(props.keys() - required - optional)
    if missing:
        raise PortError(f"step {index} `{node.name}`: missing properties {missing}")
    if unknown:
        raise PortError(f"step {index} `{node.name}`: unknown properties {unknown}")
    for key, value in props.items():
        want = int if key in _INTS else str
        if type(value) is not want:
            raise PortError(f"step {index} `{node.name}`: property {key} must be {want.__name__}, got {value!r}")
    if node.name == "expect" and ("find" in props) == ("imports" in props):
        raise PortError(f"step {index} `expect`: give exactly one of find= or imports=")
    if node.name in ARTIFACT_OPS and props["dist"] not in DISTS:
        raise PortError(f"step {index} `{node.name}`: dist must be one of {sorted(DISTS)}")
    return Step(index, node.name, props)


def load_recipe(path: Path) -> Recipe:
    """Parses and checks the recipe at `path`."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PortError(f"cannot read recipe {path}: {e}") from e
    try:
        doc = ckdl.parse(data.decode("utf-8"))
    except ckdl.ParseError as e:
        raise PortError(f"{path}: not valid KDL: {e}") from e
    nodes = list(doc.nodes)
    if not nodes or nodes[0].name != "recipe" or nodes[0].properties.get("version") != 1:
        raise PortError(f"{path}: the first node must be `recipe version=1`")
    steps = tuple(_check_step(i, n) for i, n in enumerate(nodes[1:], start=1))
    names = [s.props["package"] for s in steps if s.op in ARTIFACT_OPS]
    if len(set(names)) != len(names):
        raise PortError(f"{path}: an artifact package is named twice: {names}")
    if sum(s.op == "source" for s in steps) != 1:
        raise PortError(f"{path}: exactly one `source` step is required")
    return Recipe(path=path, sha256=hashlib.sha256(data).hexdigest(), steps=steps)
