"""One 2-process gloo job per test session (`launcher`), running the scenarios the collected tests
ask for (their `scenario` parameter), training steps first and the DTensor op cases last (their
shapes reuse the steps' kernel compilations); meanwhile this process computes the one-process
references from the same checkpoints (transformers' eager model: no kernel to compile here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import VARIANT

from . import launcher, steps, tiny

HERE = Path(__file__).parent
ORDER = ["ddp", "fsdp2", "fsdp2_head_unit", "trl_fsdp2", "trl_distill_fsdp2", "tensor_parallel", "expert_parallel",
         "expert_parallel_router", "dense_tensor_parallel", "tied_tensor_parallel", "accumulated_tensor_parallel",
         "op_values"]
SCENARIOS = {name: f"tests.torch.distributed.steps.{name}" for name in ORDER[:-1]}
SCENARIOS["op_values"] = "tests.torch.distributed.op_values.all_cases"
JOB_TIMEOUT = 1500.0  # seconds for the whole job: measured 86 s (2 cores, load ~3) to 5.4 min (load ~6)


def _wanted(session: pytest.Session) -> list[str]:
    wanted = set()
    for item in session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if Path(item.path).parent == HERE and params.get("scenario") in SCENARIOS:
            wanted.add(params["scenario"])
    return [name for name in ORDER if name in wanted]


@pytest.fixture(scope="session")
def job(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """{"records": the job's records by scenario name, "references": the one-process steps by family}."""
    assert (VARIANT / "metadata.json").exists(), "build the bundle first (./build.sh; the test command does)"
    names = _wanted(request.session)
    workdir = tmp_path_factory.mktemp("distributed")
    families = ("qwen3_moe", "llama", "llama_tied")
    for family in families:
        tiny.save_checkpoint(workdir, family)
    running = launcher.Job([SCENARIOS[n] for n in names], workdir, VARIANT)
    try:
        references = {f: steps.reference(workdir, f) for f in families if _needs(f, names)}
        if "trl_distill_fsdp2" in names:
            references["distillation"] = steps.distillation_reference(workdir)
        if "accumulated_tensor_parallel" in names:
            references["llama, labels ignored"] = steps.reference(workdir, "llama", ignored=True)
    finally:
        records = running.wait(JOB_TIMEOUT)
    return {"records": {n: records[SCENARIOS[n]] for n in names}, "references": references}


_USERS = {"llama": ["dense_tensor_parallel", "trl_distill_fsdp2"], "llama_tied": ["tied_tensor_parallel"],
          "qwen3_moe": ["ddp", "fsdp2", "fsdp2_head_unit", "trl_fsdp2", "tensor_parallel", "expert_parallel",
                        "expert_parallel_router"]}


def _needs(family: str, names: list[str]) -> bool:
    return any(n in names for n in _USERS[family])
