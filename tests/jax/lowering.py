"""Lowering a case for a TPU chip on this CPU host, and reading the Mosaic bodies out of it."""

from __future__ import annotations

import contextlib
import re
from types import ModuleType

import jax

from tests.jax.cases import Case, Resolver

# The serialized Mosaic module sits in each tpu_custom_call's backend config as base64 bytecode.
_BODY = re.compile(r'\\22body\\22: \\22([A-Za-z0-9+/=]+)\\22')


def lower(case: Case, get: Resolver, emulation: ModuleType, chip: str) -> str:
    """StableHLO text of `case` lowered for `chip`.

    The kernel is built with `chip` emulated (some builders ask for chip info eagerly), then
    traced and lowered under an abstract mesh of that chip.
    """
    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in case.inputs()]
    with emulation.emulated_chip(chip), _as_released(get):
        fn = case.call(get)
        axis, devices = case.mesh
        with jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip, axis, devices)):
            return jax.jit(fn).trace(*specs).lower(lowering_platforms=("tpu",)).as_text()


def _as_released(get: Resolver) -> contextlib.AbstractContextManager[None]:
    """The port's fixes over upstream that change a lowered module, as released (splash's dq sum: `dq_sum`, its
    own test in tests/jax/splash/test_dq_sum.py); nothing on upstream's side, which has no such hook."""
    try:
        return get("_src.ops.experimental.tpu.splash_attention.dq_sum").as_released()
    except ImportError:
        return contextlib.nullcontext()


def mosaic_bodies(stablehlo: str) -> list[str]:
    """The base64 Mosaic bodies of every TPU custom call, in program order."""
    return _BODY.findall(stablehlo)
