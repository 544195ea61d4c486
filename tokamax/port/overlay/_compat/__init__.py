"""Small stand-ins for what upstream's Op layer imports beyond JAX (pydantic, jaxtyping, absl).

The recipe points upstream's imports of those packages here (`remap_module`), so the ported Op
layer runs with nothing but JAX and numpy. Each stand-in offers only the names the ported files
use, with the run-time behaviour they rely on; validation and static typing are dropped.
"""
