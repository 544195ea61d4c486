"""Probe: a cold process that loads the kernel with `kernels` and touches ragged_dot.gmm."""

import sys
from pathlib import Path

import kernels

kernel = kernels.get_local_kernel(Path(sys.argv[1]))
assert callable(kernel.ragged_dot.gmm)
