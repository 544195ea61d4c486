"""The chip tests read what a chip measured; the cost models they check are the built kernel's."""

from tests.jax.conftest import emulation, kernel  # noqa: F401 - the kernel as users load it, its chip emulation
