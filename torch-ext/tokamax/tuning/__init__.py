"""Autotuning results applied by file, for JAX and Torch users alike (`tokamax.tuning`).

Upstream's autotuning is in `tokamax.ops` (`ops.autotune`, `ops.AutotuningResult`); this package
is how a result file reaches the calls that should use it, read whole or not at all:

- `tuning.load(path)`: the file as an `AutotuningResult`; a file that does not parse, or whose
  entry names an op, argument or config field this build lacks, raises `AutotuningFileError`
  naming the file and the entry;
- `with tuning.use(path_or_result): ...`: JAX calls inside use it (as `with result:` does), and so
  do the Torch ops (`torch_ops.gmm`, `tgmm`, `ragged_dot`, the attention, ...), whose exports are keyed
  by the result applied, so a different result is a different export; the ops take it in every thread
  while the block is open, and each backward takes its forward's (`active`);
- the environment variable `TOKAMAX_AUTOTUNING_RESULT=/path/result.json` applies a file to every
  Torch op call that no `use` block covers.

A result tuned on one chip is refused where a call runs on another, naming both; a file of another
tokamax release is refused whole.

- `tuning.tune(step, out=path)`: runs `step()` once, records every tokamax op call, autotunes each with
  upstream's machinery on this chip and writes one result file (`tune`; `record` and `tune_recording`
  for a TPU VM, where torch-tpu holds the chip while the step runs);
- `tuning.tune_functions([(name, fn, args), ...], out=path)`: the same for JAX functions (a training step's
  loss and gradients, say), traced rather than run. Where `max_configs` is below the number of upstream's
  candidates, the grouped matmul's are timed fastest-first by the package's roofline.
"""

from __future__ import annotations

from .active import ENVIRONMENT_VARIABLE, Applied, applied, current, token, use
from .files import AutotuningFileError, load
from .tune import FunctionCall, Recording, Tuned, record, tune, tune_functions, tune_recording

__all__ = ["ENVIRONMENT_VARIABLE", "Applied", "AutotuningFileError", "FunctionCall", "Recording", "Tuned", "applied",
           "current", "load", "record", "token", "tune", "tune_functions", "tune_recording", "use"]
