"""The compile tier: this kernel's calls compiled by the TPU compiler (libtpu) for TPU chips and pods
on a host with no TPU, as MaxText's AOT compile does.

- `libtpu.py`: the environment libtpu needs on a CPU host, and whether it is installed;
- `topology.py`: the chips and pods by name, their compile-only devices, meshes;
- `case.py`: a `Case` (one call at one model's shapes on one topology, and what must happen to it);
- `compiler.py`: traces a case for its chip, compiles it, and reads back the compiler's figures;
- `cases/`: the cases, one module per op family, with the models their shapes come from;
- `table.py`: the outcomes as the table in docs/tpu-compile.md.

Run by tests/tpu_compile in the Torch tier's venv (the one with libtpu), against the built kernel.
"""
