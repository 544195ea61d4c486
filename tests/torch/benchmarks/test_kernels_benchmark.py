"""The `kernels benchmark` files the bundle ships, run on this CPU host by kernels' own runner
(`kernels.cli.benchmark.run_benchmark_script`, what `kernels benchmark <path>` calls per file) on
build/benchmarks against build/torch-tpu, in Pallas TPU interpret mode at their small CPU sizes.

What is checked is that every workload runs and every `verify_*` holds (the runner raises when
`allclose` fails); the times mean nothing here. Workloads this host cannot run are absent from
their file and listed with the reason in its SKIPPED; the summary goes to
build/test-reports/kernels-benchmark.txt, which ./test.sh prints.
"""

from __future__ import annotations

import sys

import pytest

from tests.conftest import REPO, VARIANT

BENCHMARKS = REPO / "build/benchmarks"
REPORT = REPO / "build/test-reports/kernels-benchmark.txt"
SCRIPTS = sorted(BENCHMARKS.glob("benchmark*.py"))


@pytest.fixture(scope="module", autouse=True)
def report():
    lines: list[str] = []
    yield lines
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines) + "\n")


def test_the_bundle_ships_the_benchmark_files():
    assert [p.name for p in SCRIPTS] == ["benchmark_attention.py", "benchmark_grouped_matmul.py",
                                         "benchmark_lm_loss.py"], "build the bundle first (./build.sh)"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_every_workload_runs_and_verifies_on_cpu(script, report, monkeypatch):
    from kernels.cli.benchmark import run_benchmark_script

    monkeypatch.delenv("LOCAL_KERNELS", raising=False)
    results, _ = run_benchmark_script(script, iterations=2, warmup=1, cwd=BENCHMARKS.parent, repo_id=str(VARIANT),
                                      is_local=True, revision="local")
    skipped = sys.modules["benchmark_module"].SKIPPED
    verified = sorted(name for name, t in results.items() if t.verified)
    assert all(t.verified is not False for t in results.values())
    assert results or skipped, f"{script.name} ran no workload and names no reason"
    report.append(f"kernels benchmark {script.name} (CPU, interpret mode): {len(results)} workloads run, "
                  f"{len(verified)} verified against their alternative: {', '.join(verified) or '-'}")
    report.extend(f"  skipped {pattern}: {why}" for pattern, why in skipped.items())
    if not results:
        pytest.skip(f"{script.name}: every workload needs what this host lacks: {skipped}")


def test_a_wrong_kernel_result_fails_verification(monkeypatch):
    """The check is not vacuous: `out` is the kernel's result, so an off result fails the runner."""
    from kernels.cli.benchmark import discover_benchmark_classes, run_benchmark_class

    monkeypatch.delenv("LOCAL_KERNELS", raising=False)
    classes = {c.__name__: c for c in discover_benchmark_classes(BENCHMARKS / "benchmark_attention.py",
                                                                 BENCHMARKS.parent)}

    class Off(classes["CausalMHA"]):
        def tokamax(self, q, k, v):  # noqa: ANN001, ANN202
            return super().tokamax(q, k, v) + 0.05

        def benchmark_backward(self) -> None:  # only the forward is under test here
            pass

        verify_backward = None

    with pytest.raises(RuntimeError, match="Verification failed for forward"):
        run_benchmark_class(Off, iterations=1, warmup=0, repo_id=str(VARIANT), is_local=True, revision="local")


def test_workloads_run_on_cpu_tensors_where_kernels_detects_no_tpu():
    """Without torch-tpu's backend, kernels' runner names the device of the torch build ("cuda" for the
    CUDA-linked build on Python >= 3.12, also with no GPU): the workloads take CPU tensors instead, the
    only other place this kernel's ops run; "tpu" and "cpu" are kept."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import workload
    finally:
        sys.path.remove(str(BENCHMARKS))
    seen = {}
    for name in ("cuda", "xpu", "cpu", "tpu"):
        instance = workload.Workload()
        instance.device = name
        seen[name] = instance.device
    assert seen == {"cuda": "cpu", "xpu": "cpu", "cpu": "cpu", "tpu": "tpu"}
