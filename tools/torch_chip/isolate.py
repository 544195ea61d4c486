"""Each configuration in its own child process, so that one that aborts the process (an XLA check failure, a
SIGABRT), exhausts the chip's memory, or hangs becomes a record and the next one still runs on a fresh chip.

The parent only spawns children and writes the results file: it never imports torch (torch-tpu would take the chip,
and one program at a time holds it). A child gets its configuration on its command line and the path it writes its
answer to in `CHILD_OUT` ({"fields": ..., "context": ...}, or {"error": ..., "traceback": ...}); its stdout and
stderr go to a log beside the results, whose last lines a failed configuration's record carries."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHILD_OUT = "TORCH_CHIP_CHILD_OUT"
TAIL_LINES = 15
# what torch-tpu and XLA say when the chip's memory runs out (an asynchronous failure surfaces as a "failed state")
OUT_OF_HBM = re.compile(r"ran out of memory|RESOURCE_EXHAUSTED|out of memory|Allocation .* failed", re.IGNORECASE)
FAILED_STATE = re.compile(r"in a failed state")
KEY_LINE = re.compile(r"^F\d{4}|Check failed|RESOURCE_EXHAUSTED|ran out of memory|failed state|Error:|Signal \d+")
NOT_READ = "not read yet: the parent holds no chip; the first child that answers names it"


class Stopped(Exception):
    """The parent was asked to stop (SIGTERM, e.g. from `timeout`): the running child is ended and recorded."""


def _stop(signum: int, frame: Any) -> None:
    raise Stopped(f"signal {signum}")


def header(what: str, commit: str) -> dict[str, Any]:
    """A Torch-mode results header (`records.open_results`'s fields) written without torch: the chip is filled in
    from the first child's answer."""
    from .records import versions  # importlib.metadata only

    stack = versions()
    return {"what": what, "mode": "torch", "side": "torch", "chip": NOT_READ, "platform": "torch-tpu",
            "python": platform.python_version(), "stack": stack, "jax": stack["jax"], "commit": commit,
            "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "isolated": True}


@dataclasses.dataclass
class Outcome:
    """A child's end: its answer (None when it wrote none), exit status, log tail, and why it ended."""
    answer: dict[str, Any] | None
    returncode: int | None
    seconds: float
    log: Path
    timed_out: bool = False
    stopped: str | None = None

    def failure(self) -> dict[str, Any] | None:
        """None for a child that answered; else the record fields that say what ended it."""
        if self.answer is not None and "error" not in self.answer:
            return None
        tail, keys = log_tail(self.log)
        if self.stopped:
            why = f"the whole run was stopped ({self.stopped}) after this ran {self.seconds:.0f} s"
        elif self.timed_out:
            why = f"killed: past its time limit ({self.seconds:.0f} s)"
        elif self.answer is not None:
            why = self.answer["error"]
        elif self.returncode is not None and self.returncode < 0:
            why = f"the child process died of signal {-self.returncode} ({_signame(-self.returncode)})"
        else:
            why = f"the child process exited {self.returncode} without an answer"
        text = "\n".join([why, *keys, *tail])
        out: dict[str, Any] = {"error": why, "returncode": self.returncode, "child_s": self.seconds,
                               "log_tail": tail, "log": self.log.name}
        if keys:
            out["log_key_lines"] = keys
        if self.answer is not None and "traceback" in self.answer:
            out["traceback"] = self.answer["traceback"]
            text += self.answer["traceback"]
        if OUT_OF_HBM.search(text):
            out["error"] = f"out of HBM: {why}"
            out["out_of_hbm"] = True
        elif FAILED_STATE.search(text):  # what a step past the chip's memory gave on the v5e, nothing more said
            out["error"] = f"out of HBM (most likely: torch-tpu said only that an argument is in a failed state): {why}"
            out["out_of_hbm"] = True
        if self.answer is not None:
            out.update({k: v for k, v in self.answer.items() if k not in ("error", "traceback")})
        return out


def _signame(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown"


def log_tail(log: Path, lines: int = TAIL_LINES) -> tuple[list[str], list[str]]:
    """The log's last `lines` lines, and up to 5 earlier lines that name the failure (an XLA abort's "F..."/"Check
    failed" line, an out-of-memory) that a long stack dump would push out of the tail."""
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError as e:
        return [f"no log: {e}"], []
    tail = [line[-400:] for line in text[-lines:]]
    keys = [line[-400:] for line in text[:-lines] if KEY_LINE.search(line)][:5]
    return tail, keys


def run_child(argv: list[str], answer: Path, log: Path, timeout_s: float,
              env: dict[str, str] | None = None) -> Outcome:
    """`argv` run to its end or `timeout_s`, its output in `log`, its answer read from `answer` (where the child
    finds it through CHILD_OUT). A SIGTERM to this process ends the child, whose outcome says so, then re-raises."""
    answer.unlink(missing_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    environ = {**os.environ, **(env or {}), CHILD_OUT: str(answer), "JAX_PLATFORMS": "cpu",
               "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    previous = signal.signal(signal.SIGTERM, _stop)
    timed_out, stopped = False, None
    with log.open("w") as sink:
        child = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=environ, start_new_session=True)
        try:
            child.wait(timeout=max(timeout_s, 1.0))
        except subprocess.TimeoutExpired:
            timed_out = True
        except (Stopped, KeyboardInterrupt) as e:
            stopped = str(e) or type(e).__name__
        finally:
            signal.signal(signal.SIGTERM, previous)
            if child.poll() is None:
                _end(child)
    seconds = time.perf_counter() - start
    try:
        got = json.loads(answer.read_text())
        answer.unlink()
    except (OSError, ValueError):
        got = None
    return Outcome(got, child.returncode, seconds, log, timed_out, stopped)


def _end(child: subprocess.Popen) -> None:
    """The child's process group (it was started in a session of its own) killed, then waited for."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()


def answer(fields: dict[str, Any] | None = None, *, error: str | None = None, **extra: Any) -> None:
    """In a child: its answer written where the parent reads it (CHILD_OUT), or printed when run by hand."""
    data = {**(fields or {}), **extra}
    if error is not None:
        data["error"] = error
    target = os.environ.get(CHILD_OUT)
    text = json.dumps(data, indent=1, default=str)
    if target:
        Path(target).write_text(text + "\n")
    else:
        print(text)


def child_command(module: str, config: dict[str, Any]) -> list[str]:
    """The command line that runs `config` in a child: `python -m module --child JSON`."""
    return [sys.executable, "-m", module, "--child", json.dumps(config)]


@dataclasses.dataclass
class Clock:
    """The whole run's limits: no child starts after `budget_s`; none runs past `stop_s` (if given)."""
    budget_s: float
    stop_s: float | None = None
    start: float = dataclasses.field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def refusal(self) -> str | None:
        """Why no further child may start, or None."""
        elapsed = self.elapsed()
        if elapsed > self.budget_s:
            return f"not run: the time budget ({self.budget_s:.0f} s) was spent ({elapsed:.0f} s)"
        if self.stop_s is not None and elapsed > self.stop_s - 5:
            return f"not run: the run's stop ({self.stop_s:.0f} s) was reached ({elapsed:.0f} s)"
        return None

    def limit(self, per_config_s: float) -> float:
        """A child's time limit: its own, cut to what is left before the stop."""
        if self.stop_s is None:
            return per_config_s
        return max(1.0, min(per_config_s, self.stop_s - self.elapsed()))


def run_one(command: Callable[[dict[str, Any]], list[str]], config: dict[str, Any], logs: Path, name: str,
            timeout_s: float) -> Outcome:
    """One configuration in a child; its log under `logs` (`name`.log, kept), its answer file beside it."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    return run_child(command(config), logs / f"{safe}.answer.json", logs / f"{safe}.log", timeout_s)
