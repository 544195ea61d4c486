"""The pages' JAX snippets run as written, in the JAX tier (no torch, JAX on the CPU): nothing is wrapped
around a `run=jax` block, so it runs as a user who copies it onto a CPU machine runs it, and each block must say
which path it took there. `get_kernel("kernels-community/tokamax", version=1)` resolves to build/torch-tpu
through LOCAL_KERNELS. The last test fails if any block did not run.

What a block says (`tokamax.hosts`: an `EmulationWarning` per op, once per process; forgotten before each
chain so that each shows its own): an op of this package ran its kernels in interpret mode emulating the v6e,
or an upstream public op ran its XLA fallback. Each note must name an op the block calls; a block that opens
no emulation itself and is not a `continue` block must say at least one (a silent block would be a path nobody
was told of); one that opens the emulation itself (`interpret_on_cpu`, `interpret_unless_tpu`) chose the path,
and nothing inside it is said.
"""

from __future__ import annotations

import importlib
import re
import time
import warnings
from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.conftest import VARIANT
from tests.docs import snippets

CHAINS = snippets.chains("jax")
RAN: dict[str, tuple[float, float]] = {}  # block id -> (wall, CPU) seconds, filled as the blocks run
SAID: dict[str, list[str]] = {}  # block id -> the notes its run gave, "op: path"

_NOTE = re.compile(r"^tokamax (?P<op>[\w.]+): no TPU attached \(JAX's default backend is the CPU\), so "
                   r"(?P<path>its Pallas TPU kernels run in interpret mode on the CPU, emulating a (?P<chip>\w+)"
                   r"|upstream's XLA fallback ran \(jax\.lax\.\w+\), not the Mosaic TPU kernel)")
_OPENS_EMULATION = ("interpret_on_cpu(", "interpret_unless_tpu(")


@pytest.fixture(scope="module")
def tokamax() -> Iterator[ModuleType]:
    """The kernel as the snippets load it: `get_kernel` through LOCAL_KERNELS (the same module object)."""
    import kernels

    assert (VARIANT / "metadata.json").exists(), "build the bundle first (./build.sh; the test command does)"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LOCAL_KERNELS", f"kernels-community/tokamax={VARIANT}")
        yield kernels.get_kernel("kernels-community/tokamax", version=1)


def notes(block: snippets.Block, caught: list[warnings.WarningMessage], warning: type) -> list[str]:
    """The block's notes as "op: path", each checked: the known words, the default chip, an op the block calls."""
    found = []
    for w in caught:
        if not issubclass(w.category, warning):
            continue
        text = str(w.message)
        match = _NOTE.match(text)
        assert match, f"{block.id}: a note in no known form: {text!r}"
        op = match.group("op")
        assert op.split(" ")[0] in block.text, f"{block.id}: the note names {op}, which the block does not call"
        if match.group("chip"):
            assert match.group("chip") == "v6e", f"{block.id}: emulated {match.group('chip')}, not the default v6e"
            found.append(f"{op}: interpret mode, v6e")
        else:
            found.append(f"{op}: XLA fallback")
    return found


@pytest.mark.parametrize("chain", CHAINS, ids=[chain[0].id for chain in CHAINS])
def test_snippet_runs(chain, tokamax, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_KERNELS", f"kernels-community/tokamax={VARIANT}")
    monkeypatch.delenv("TOKAMAX_CPU_CHIP", raising=False)  # the default chip, as on a fresh machine
    monkeypatch.chdir(tmp_path)  # a snippet that writes a file writes it here
    importlib.import_module(f"{tokamax.__name__}.hosts").forget()  # each chain says what its own run took
    assert tokamax.emulation.current_chip() is None, "the test must open no emulation around the blocks"
    namespace: dict = {"__name__": "__main__"}
    for block in chain:
        start, cpu = time.perf_counter(), time.process_time()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", tokamax.emulation.EmulationWarning)
            exec(compile(block.source(), str(block.page), "exec"), namespace)
        RAN[block.id] = (time.perf_counter() - start, time.process_time() - cpu)
        said = SAID[block.id] = notes(block, caught, tokamax.emulation.EmulationWarning)
        opens = any(word in block.text for word in _OPENS_EMULATION)
        if opens:
            assert not said, f"{block.id}: opens the emulation itself, yet was told of a path: {said}"
        elif "continue" not in block.attrs:
            assert said, f"{block.id}: ran on a CPU host without saying which path it took"


def test_every_jax_snippet_ran(record_testsuite_property, capsys):
    """Runs last: every run=jax block of every page ran (none skipped or deselected)."""
    want = [block.id for chain in CHAINS for block in chain]
    assert want, "the pages hold no run=jax block"
    missing = [b for b in want if b not in RAN]
    assert not missing, f"these JAX snippets did not run: {missing}"
    record_testsuite_property("doc_snippets_jax", len(RAN))
    wall, cpu = (sum(t[i] for t in RAN.values()) for i in (0, 1))
    with capsys.disabled():  # shown in the tier's output, not only in its JUnit report
        print(f"\ndoc snippets (JAX): {len(RAN)} blocks ran in {wall:.1f} s ({cpu:.1f} s of CPU): "
              + ", ".join(f"{b} {w:.0f} s ({c:.0f} s)" for b, (w, c) in RAN.items()))
        print("what each said of its path: " + "; ".join(f"{b}: {', '.join(s) or 'nothing (it chose)'}"
                                                      for b, s in SAID.items()))
