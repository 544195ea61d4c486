"""The pages' JAX snippets run as written, in the JAX tier (no torch): `run=jax` blocks inside
`tokamax.emulation.interpret_on_cpu("v6e")` and `tokamax.ops.config.cross_compile(True)`, so the
Mosaic kernels a TPU would run execute in Pallas TPU interpret mode; `run=jax-cpu` blocks as they are
(they say themselves how they run on a CPU host). `get_kernel("kernels-community/tokamax", version=1)`
resolves to build/torch-tpu through LOCAL_KERNELS. The last test fails if any block did not run."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.conftest import VARIANT
from tests.docs import snippets

CHAINS = snippets.chains("jax") + snippets.chains("jax-cpu")
RAN: dict[str, tuple[float, float]] = {}  # block id -> (wall, CPU) seconds, filled as the blocks run


@pytest.fixture(scope="module")
def tokamax() -> Iterator[ModuleType]:
    """The kernel as the snippets load it: `get_kernel` through LOCAL_KERNELS (the same module object)."""
    import kernels

    assert (VARIANT / "metadata.json").exists(), "build the bundle first (./build.sh; the test command does)"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LOCAL_KERNELS", f"kernels-community/tokamax={VARIANT}")
        yield kernels.get_kernel("kernels-community/tokamax", version=1)


@pytest.mark.parametrize("chain", CHAINS, ids=[chain[0].id for chain in CHAINS])
def test_snippet_runs(chain, tokamax, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_KERNELS", f"kernels-community/tokamax={VARIANT}")
    monkeypatch.chdir(tmp_path)  # a snippet that writes a file writes it here
    namespace: dict = {"__name__": "__main__"}
    for block in chain:
        with contextlib.ExitStack() as stack:
            if block.run == "jax":
                stack.enter_context(tokamax.emulation.interpret_on_cpu("v6e"))
                stack.enter_context(tokamax.ops.config.cross_compile(True))
            start, cpu = time.perf_counter(), time.process_time()
            exec(compile(block.source(), str(block.page), "exec"), namespace)
        RAN[block.id] = (time.perf_counter() - start, time.process_time() - cpu)


def test_every_jax_snippet_ran(record_testsuite_property, capsys):
    """Runs last: every run=jax / run=jax-cpu block of every page ran (none skipped or deselected)."""
    want = [block.id for chain in CHAINS for block in chain]
    assert want, "the pages hold no run=jax block"
    missing = [b for b in want if b not in RAN]
    assert not missing, f"these JAX snippets did not run: {missing}"
    record_testsuite_property("doc_snippets_jax", len(RAN))
    wall, cpu = (sum(t[i] for t in RAN.values()) for i in (0, 1))
    with capsys.disabled():  # shown in the tier's output, not only in its JUnit report
        print(f"\ndoc snippets (JAX): {len(RAN)} blocks ran in {wall:.1f} s ({cpu:.1f} s of CPU): "
              + ", ".join(f"{b} {w:.0f} s ({c:.0f} s)" for b, (w, c) in RAN.items()))
