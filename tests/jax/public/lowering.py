"""Lowering a public case for its TPU chip on this CPU host, as upstream's cross-compile does."""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

import jax

from .cases import PublicCase
from .normalise import normalise


def as_released(api: Any) -> contextlib.AbstractContextManager[None]:
    """On this kernel's side, upstream's ragged-dot heuristics as released (before TPU7x this kernel gives a
    call without a table entry its own tiles: `tokamax.moe.tiles`, checked in tests/jax/moe) and splash's dq sum
    as released (`dq_sum`, checked in tests/jax/splash); upstream's side as it is. The identity and selection
    checks compare the port with upstream under it."""
    stack = contextlib.ExitStack()
    for name, released in (("_src.ops.ragged_dot.tiles_hook", "upstream_heuristics"),
                           ("_src.ops.experimental.tpu.splash_attention.dq_sum", "as_released")):
        try:
            hook = api.module(name)
        except ImportError:  # upstream's own tree: nothing to restore
            continue
        stack.enter_context(getattr(hook, released)())
    return stack


def lower_public_raw(case: PublicCase, api: Any, emulation: ModuleType) -> str:
    """StableHLO of `case` on its chip (upstream's `cross_compile` on, chip emulated), from an empty
    splash mask cache on `api`'s side: upstream's `_process_mask` is an lru_cache whose hits hand out an
    earlier call's arrays, and JAX folds trace constants by identity (tests/jax/splash/test_determinism.py)."""
    api.module("_src.ops.experimental.tpu.splash_attention.splash_attention_mask_info")._process_mask.cache_clear()
    with api.config.cross_compile(True), emulation.emulated_chip(case.chip), as_released(api):
        with jax.sharding.use_abstract_mesh(emulation.tpu_mesh(case.chip)):
            fn = case.build(api)
            return jax.jit(fn).trace(*case.shape_dtypes()).lower(lowering_platforms=("tpu",)).as_text()


def lower_public(case: PublicCase, api: Any, emulation: ModuleType) -> str:
    """Normalised StableHLO of `case` on its chip."""
    return normalise(lower_public_raw(case, api, emulation))
