"""What libtpu needs to compile on a CPU host, and whether it is there (DESIGN §15)."""

from __future__ import annotations

import importlib.util
import os

# Set before JAX initialises its backends: several processes may load libtpu at once (a Torch test
# may hold it), no metadata server is asked which TPU this is, and its start-up warnings stay quiet.
ENVIRONMENT = {
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
    "TPU_SKIP_MDS_QUERY": "1",
    "TPU_ACCELERATOR_TYPE": "v6e-1",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "JAX_PLATFORMS": "cpu",
}


def configure() -> None:
    """Sets the environment above where the caller has not (call before JAX creates a backend)."""
    for name, value in ENVIRONMENT.items():
        os.environ.setdefault(name, value)


def missing() -> str | None:
    """Why this interpreter cannot compile for TPU, or None when libtpu is installed."""
    if importlib.util.find_spec("libtpu") is None:
        return ("libtpu is not installed in this interpreter (the Torch tier's venv has it: torch-tpu "
                "depends on it); the TPU compiler runs inside libtpu")
    return None
