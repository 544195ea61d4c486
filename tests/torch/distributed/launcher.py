"""Runs named scenarios on 2 CPU processes joined by `gloo` (torch.multiprocessing, spawn), the way
torch-tpu runs one process per chip: each process loads the built kernel as a user would
(`get_kernel` through LOCAL_KERNELS), runs every scenario in order, and saves what it returns.

One launch serves a whole test session (the processes' start, ~30 s of imports and kernel loading,
is paid once). A scenario that raises on one rank is recorded with its traceback; the ranks meet at
a barrier before the next one starts, and a rank stuck in a collective its peer never reached gives
up after the process group's timeout.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
COLLECTIVE_TIMEOUT = timedelta(seconds=120)


def _worker(rank: int, world: int, workdir: str, variant: str, scenarios: list[str]) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), HF_HUB_OFFLINE="1",
                      LOCAL_KERNELS=f"kernels-community/tokamax={variant}")
    dist.init_process_group("gloo", init_method=f"file://{workdir}/store", rank=rank, world_size=world,
                            timeout=COLLECTIVE_TIMEOUT)
    import kernels

    tokamax = kernels.get_kernel("kernels-community/tokamax", version=1)
    for name in scenarios:
        module, function = name.rsplit(".", 1)
        started = time.perf_counter()
        try:
            result: Any = getattr(importlib.import_module(module), function)(tokamax, Path(workdir))
            status = "ok"
        except Exception:  # reported to the test, which fails with it
            result, status = traceback.format_exc(), "failed"
            print(f"rank {rank}: {name} failed:\n{result}", file=sys.stderr, flush=True)
        torch.save({"status": status, "result": result, "seconds": time.perf_counter() - started},
                   Path(workdir) / f"{name}.rank{rank}.pt")
        dist.barrier()  # both ranks start the next scenario together
    dist.destroy_process_group()


class Job:
    """WORLD processes running `scenarios` ("module.function", each called as f(tokamax, workdir) on every
    rank); `wait()` gives, per scenario, each rank's record: status ("ok" / "failed"), result (what the
    function returned, or the traceback), seconds."""

    def __init__(self, scenarios: list[str], workdir: Path, variant: Path) -> None:
        self.scenarios, self.workdir = scenarios, workdir
        self.context = mp.start_processes(_worker, args=(WORLD, str(workdir), str(variant), scenarios),
                                          nprocs=WORLD, join=False, start_method="spawn")

    def wait(self, timeout: float) -> dict[str, list[dict]]:
        deadline = time.monotonic() + timeout
        try:
            while not self.context.join(timeout=5):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the {WORLD} processes did not finish {self.scenarios} in {timeout:.0f} s")
        finally:
            for process in self.context.processes:
                if process.is_alive():
                    process.kill()
        return {name: [torch.load(self.workdir / f"{name}.rank{r}.pt", weights_only=False) for r in range(WORLD)]
                for name in self.scenarios}


def result(records: dict[str, list[dict]], name: str) -> list[Any]:
    """Each rank's result of scenario `name`; fails with the rank's traceback if it raised."""
    ranks = records[name]
    for r, record in enumerate(ranks):
        if record["status"] != "ok":
            raise AssertionError(f"{name} failed on rank {r}:\n{record['result']}")
    return [record["result"] for record in ranks]
