"""Lowering a sharded case for a TPU chip on this CPU host, on either side: the whole sharded program
under an abstract mesh of the case's shape of that chip, and what one chip runs (the op on one
shard's shapes) under a one-chip mesh, as tests/jax/public lowers the unsharded public calls (this kernel's
ragged dot as released: `as_released`, no lookahead on the weights, upstream's heuristic tiles). Each starts
from an empty splash mask cache on its side (`clear_mask_cache`), so no lowering depends on the ones
before it."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import jax

from ..public.lowering import as_released
from .cases import SPLASH, ShardedCase, program


def clear_mask_cache(api: Any) -> None:
    """Empties upstream's splash mask-processing cache (`_process_mask`, an lru_cache) on `api`'s side, so
    that a lowering does not depend on what was lowered before it: a cache hit hands out an earlier call's
    arrays, and JAX folds trace constants by object identity (tests/jax/splash/test_determinism.py)."""
    api.module(f"{SPLASH}.splash_attention_mask_info")._process_mask.cache_clear()


def abstract_mesh(case: ShardedCase, emulation: ModuleType, chip: str) -> jax.sharding.AbstractMesh:
    """The case's mesh of `chip`s (Auto axes, as a real device mesh has)."""
    device = jax.sharding.AbstractDevice(emulation.CHIPS[chip][0], 1, "tpu")
    return jax.sharding.AbstractMesh(case.mesh_shape, case.axes, axis_types=(jax.sharding.AxisType.Auto,) * len(
        case.axes), abstract_device=device)


def lower_sharded(case: ShardedCase, api: Any, emulation: ModuleType, chip: str) -> str:
    """StableHLO of the sharded program (forward, and backward where it has gradients) on the mesh."""
    clear_mask_cache(api)
    with api.config.cross_compile(True), emulation.emulated_chip(chip), as_released(api), \
            jax.sharding.use_abstract_mesh(abstract_mesh(case, emulation, chip)):
        fn = program(case.sharded(api, jax.sharding.get_abstract_mesh()), case.grads)
        return jax.jit(fn).trace(*case.shapes()).lower(lowering_platforms=("tpu",)).as_text()


def lower_per_chip(case: ShardedCase, api: Any, emulation: ModuleType, chip: str) -> str:
    """StableHLO of what one chip runs, alone on one chip, at its shard's shapes."""
    clear_mask_cache(api)
    with api.config.cross_compile(True), emulation.emulated_chip(chip), as_released(api), \
            jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip)):
        fn = program(case.shard(api), case.grads)
        return jax.jit(fn).trace(*case.local_shapes()).lower(lowering_platforms=("tpu",)).as_text()
