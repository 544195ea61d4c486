"""Checks that need several host CPU devices, run in a process of their own with a time limit.

JAX takes its CPU device count (`--xla_force_host_platform_device_count`) once, when it starts, so
such checks run in a child process: `start(devices)` there before jax is imported, `report(id, ...)`
after each check (one JSON line). The parent's `run` starts the child with the checks to do and
watches its reports: on this 2-core host JAX's TPU interpreter can deadlock across host devices (one
device's kernel waits at the interpreter's cross-device barrier while another's never gets a worker;
tests/jax/test_ring_attention.py describes it), so a child that reports nothing for `stall_s` is
killed and started again for the checks it has not reported, with a warning. A wrong result is
never retried; a child that fails fails the test.

Imports nothing heavy, so both tiers' children can load it before jax.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path

MARK = "@@host-devices "
# Collective timeouts long enough for interpret mode on two cores, where one device's kernel can run
# a minute behind the others (XLA's default kills the process at 40 s).
COLLECTIVE_TIMEOUTS = ("--xla_cpu_collective_call_warn_stuck_timeout_seconds=300",
                       "--xla_cpu_collective_call_terminate_timeout_seconds=1200")


# ---- In the child -------------------------------------------------------------------------------
def start(devices: int) -> list[str]:
    """Gives this process `devices` host CPU devices (before jax starts); returns the checks asked for."""
    if "jax" in sys.modules:
        raise RuntimeError("host_devices.start must run before jax is imported")
    flags = [os.environ.get("XLA_FLAGS", ""), f"--xla_force_host_platform_device_count={devices}",
             *COLLECTIVE_TIMEOUTS]
    os.environ["XLA_FLAGS"] = " ".join(f for f in flags if f)
    return sys.argv[1:]


def report(check: str, **result: object) -> None:
    """One finished check's result, for the parent."""
    print(MARK + json.dumps({"check": check, **result}), flush=True)


# ---- In the parent ------------------------------------------------------------------------------
def _reader(stream, lines: queue.Queue) -> None:  # noqa: ANN001
    for line in stream:
        lines.put(line)
    lines.put(None)


def _attempt(command: list[str], env: dict[str, str], stall_s: float, results: dict[str, dict]) -> str | None:
    """Runs the child once, collecting its reports into `results`; returns None when it finished
    cleanly, "stalled" when it was killed for silence, else the failure's stderr."""
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(child.stdout, lines), daemon=True).start()
    errors: list[str] = []
    stderr = threading.Thread(target=lambda: errors.extend(child.stderr), daemon=True)
    stderr.start()
    while True:
        try:
            line = lines.get(timeout=stall_s)
        except queue.Empty:
            child.kill()
            child.wait()
            return "stalled"
        if line is None:
            break
        if line.startswith(MARK):
            result = json.loads(line[len(MARK):])
            results[result.pop("check")] = result
    code = child.wait()
    stderr.join(timeout=10)
    return None if code == 0 else f"exit {code}:\n" + "".join(errors)[-4000:]


def run(python: str, script: Path, checks: Sequence[str], *, stall_s: float, attempts: int = 4,
        env: dict[str, str] | None = None) -> dict[str, dict]:
    """Each check's report from `python script CHECK...`, the child restarted (for the checks still
    to do) when it stalls for `stall_s`, at most `attempts` times."""
    results: dict[str, dict] = {}
    environment = {**os.environ, **(env or {})}
    for attempt in range(1, attempts + 1):
        todo = [c for c in checks if c not in results]
        if not todo:
            break
        failure = _attempt([python, str(script), *todo], environment, stall_s, results)
        if failure == "stalled":
            warnings.warn(f"{script.name}: no report for {stall_s:.0f} s (interpreter stall?), attempt {attempt}; "
                          f"restarting for {[c for c in checks if c not in results]}", stacklevel=2)
            continue
        if failure is not None:
            raise AssertionError(f"{script.name} failed ({failure})")
        unreported = [c for c in todo if c not in results]
        assert not unreported, f"{script.name} finished without reporting {unreported}"
    missing = [c for c in checks if c not in results]
    if missing:
        raise AssertionError(f"{script.name}: {missing} stalled {attempts} times ({stall_s:.0f} s each)")
    return results
