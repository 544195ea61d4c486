"""Probe: the floor any JAX TPU kernel pays, `kernels`, `jax` and Pallas TPU imported, nothing else."""

import jax  # noqa: F401
import jax.experimental.pallas.tpu  # noqa: F401
import kernels  # noqa: F401
