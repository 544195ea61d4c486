"""Probe (Torch tier's venv, which has libtpu): the TPU compiler's figures for the benchmark table
(tools/tpu_compile/figures.py): one training step's LM head on this kernel, on TRL's tiles and on
transformers' logits, compiled for v6e; DistillationTrainer's divergence on this kernel and on TRL's tiles,
for v6e; the named compile cases (attention at 128k, the ring per chip);
compile time per op family from the compile tier's last report. Prints JSON.

    python tpu_compile_figures.py VARIANT_DIR
"""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from tools.tpu_compile import libtpu  # noqa: E402

libtpu.configure()

import kernels  # noqa: E402

from tools.tpu_compile import figures  # noqa: E402

kernel = kernels.get_local_kernel(Path(sys.argv[1]))
print(json.dumps({"lm_head_step": figures.lm_head_step(kernel), "distill_step": figures.distill_step(kernel),
                  "cases": figures.named_cases(kernel),
                  "families": figures.compile_time_per_family(REPO / "build/test-reports/tpu-compile.json")}))
