"""Each optimizer step's wall time, split where a trainer's step has seams, for a trainer whose steps are slow on
the chip without a reason in sight (DPO ran 40 s a step on both sides with one shape): the loss (`compute_loss`:
the forward, the reference model's forward included), the backward (to `on_pre_optimizer_step`), the optimizer
(to `on_optimizer_step`) and the rest (the trainer's logging, its `.item()` reads), the device waited for at each
seam. Each finished step prints a line, so a child killed past its time keeps the steps it finished."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .timing import synchronize

STEP_LINE = "trl-steps: step done"
"""The line a child's log gets at each optimizer step's end: its number, `phase=seconds` tokens, then its seconds."""

PHASES = ("loss", "backward", "optimizer", "rest")


def finished_steps(log: Path) -> list[float]:
    """The seconds of each step a child's log says it finished, in order."""
    return [s for s, _ in finished(log)]


def finished(log: Path) -> list[tuple[float, dict[str, float]]]:
    """Each finished step's seconds and phases, as its log line says."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        if line.startswith(STEP_LINE):
            words = line.removeprefix(STEP_LINE).split()
            phases = {k: float(v) for k, _, v in (w.partition("=") for w in words[1:-1])}
            out.append((float(words[-1]), phases))
    return out


def step_timer(trainer: Any) -> Any:
    """A TrainerCallback timing each optimizer step and its phases; it wraps `trainer.compute_loss` to see the loss.
    Add it with `trainer.add_callback`."""
    from transformers import TrainerCallback

    class StepTimes(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self.phases: list[dict[str, float]] = []
            self._start = self._mark = 0.0
            self._current: dict[str, float] = {}

        def lap(self, phase: str) -> None:
            synchronize()
            now = time.perf_counter()
            self._current[phase] = self._current.get(phase, 0.0) + now - self._mark
            self._mark = now

        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            synchronize()
            self._start = self._mark = time.perf_counter()
            self._current = {}

        def on_pre_optimizer_step(self, *args: Any, **kwargs: Any) -> None:
            self.lap("backward")  # from the loss's end (or the step's start): the backward

        def on_optimizer_step(self, *args: Any, **kwargs: Any) -> None:
            self.lap("optimizer")

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            self.lap("rest")
            self.times.append(self._mark - self._start)
            self.phases.append({k: round(v, 6) for k, v in self._current.items()})
            words = " ".join(f"{k}={v:.6f}" for k, v in self._current.items())
            print(f"{STEP_LINE} {len(self.times)} {words} {self.times[-1]:.6f}", flush=True)  # read back if killed

    timer = StepTimes()
    compute_loss = trainer.compute_loss

    def timed_loss(*args: Any, **kwargs: Any) -> Any:
        timer.lap("rest")  # what ran before the loss in this step (data to the device)
        out = compute_loss(*args, **kwargs)
        timer.lap("loss")
        return out

    trainer.compute_loss = timed_loss
    trainer.add_callback(timer)
    return timer
