"""The pages' Torch snippets (`run=torch` blocks of README.md and docs/) run as written, on CPU tensors.

How a block written for a TPU VM runs here (docs/writing-docs.md says the same to contributors):
- `device="tpu"` and `.to("tpu")` read `"cpu"`: the ops run their kernels in Pallas TPU interpret mode;
- each Hub model id a block names is replaced by a tiny checkpoint of its architecture saved from a
  config (tests/torch/doc_models.py), with HF_HUB_OFFLINE=1;
- `get_kernel("kernels-community/tokamax", version=1)` resolves to build/torch-tpu (LOCAL_KERNELS, as
  tests/torch/conftest.py sets it); a page's `file=` blocks are written to a scratch directory, each
  kernel among them (a `build.toml`) is laid out as the bundle is, and LOCAL_KERNELS names it too.
Each block's `calls=` ops must run at least once (counted at this build's custom ops), so a snippet
that silently runs something else fails. The last test fails if any block did not run.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import time
import tomllib
from pathlib import Path

import jax
import pytest

from tests.docs import snippets
from tests.torch.doc_models import MODELS, save_checkpoint
from tests.torch.export_probe import ExportProbe

if tuple(int(p) for p in jax.__version__.split(".")[:3]) < (0, 11, 1):
    pytest.skip(f"the docs' snippets are written for the stack TPU users install (jax >= 0.11.1: the fused loss); "
                f"this tier has jax {jax.__version__}", allow_module_level=True)

CHAINS = snippets.chains("torch")
RAN: dict[str, tuple[float, float]] = {}  # block id -> (wall, CPU) seconds, filled as the blocks run
_DEVICE = re.compile(r'(device=|\.to\()"tpu"')
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def for_cpu(text: str) -> str:
    """The block as it runs on this host: `device="tpu"` and `.to("tpu")` read "cpu"."""
    return _DEVICE.sub(r'\1"cpu"', text)


def hub_ids(text: str) -> set[str]:
    """String constants of a block that name a Hub repository (`org/name`)."""
    return {n.value for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and _HUB_ID.match(n.value)}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Hub id -> the directory of its tiny stand-in, for every id the snippets name."""
    named = {i for chain in CHAINS for block in chain for i in hub_ids(block.text)} & MODELS.keys()
    root = tmp_path_factory.mktemp("doc-models")
    return {i: save_checkpoint(i, root / i.replace("/", "--")) for i in sorted(named)}


@pytest.fixture(scope="module")
def page_kernels(tmp_path_factory) -> dict[Path, dict[str, Path]]:
    """Page -> {repo id: laid-out variant} of the kernels its `file=` blocks make."""
    from tools.bundle.layout import lay_out

    out: dict[Path, dict[str, Path]] = {}
    for page in snippets.pages():
        files = snippets.files_of(page)
        if not files:
            continue
        root = tmp_path_factory.mktemp(page.stem)
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        out[page] = {}
        for rel in files:
            if Path(rel).name == "build.toml":
                source = (root / rel).parent
                repo_id = tomllib.loads((root / rel).read_text())["general"]["hub"]["repo-id"]
                out[page][repo_id] = lay_out(source, root / "build" / repo_id.replace("/", "--"))
    return out


def _namespace(tokamax) -> str:  # noqa: ANN001
    return importlib.import_module(f"{tokamax.__name__}._ops")._OPS_NAME


@pytest.mark.parametrize("chain", CHAINS, ids=[chain[0].id for chain in CHAINS])
def test_snippet_runs(chain, tokamax, checkpoints, page_kernels, tmp_path, monkeypatch):
    kernels_of_page = page_kernels.get(chain[0].page, {})
    overrides = [os.environ["LOCAL_KERNELS"], *(f"{r}={v}" for r, v in kernels_of_page.items())]
    monkeypatch.setenv("LOCAL_KERNELS", ":".join(overrides))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # a snippet that writes a file writes it here
    namespace: dict = {"__name__": "__main__"}
    for block in chain:
        text = for_cpu(block.text)
        for repo_id in hub_ids(text):
            if repo_id.startswith("kernels-community/tokamax") or repo_id in kernels_of_page:
                continue
            assert repo_id in MODELS, f"{block.id} loads {repo_id}: add a tiny stand-in to tests/torch/doc_models.py"
            text = text.replace(f'"{repo_id}"', repr(str(checkpoints[repo_id])))
        start, cpu = time.perf_counter(), time.process_time()
        with ExportProbe(_namespace(tokamax)) as probe:
            exec(compile("\n" * block.line + text, str(block.page), "exec"), namespace)
        missing = [op for op in block.calls if probe.count(op) == 0]
        assert not missing, f"{block.id} never called {missing}; it called {probe.exports()}"
        RAN[block.id] = (time.perf_counter() - start, time.process_time() - cpu)


def test_every_torch_snippet_ran(record_testsuite_property, capsys):
    """Runs last: every run=torch block of every page ran (none skipped or deselected)."""
    want = [block.id for chain in CHAINS for block in chain]
    assert want, "the pages hold no run=torch block"
    missing = [b for b in want if b not in RAN]
    assert not missing, f"these Torch snippets did not run: {missing}"
    record_testsuite_property("doc_snippets_torch", len(RAN))
    wall, cpu = (sum(t[i] for t in RAN.values()) for i in (0, 1))
    with capsys.disabled():  # shown in the tier's output, not only in its JUnit report
        print(f"\ndoc snippets (Torch): {len(RAN)} blocks ran in {wall:.1f} s ({cpu:.1f} s of CPU): "
              + ", ".join(f"{b} {w:.0f} s ({c:.0f} s)" for b, (w, c) in RAN.items()))
