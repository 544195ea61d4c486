"""Config choice: for every key of upstream's shipped ragged-dot tables (v1 and v2) on every chip,
this kernel's Op chooses the config upstream's Op chooses.

Upstream parses its own table files with its own cache code (pydantic); here each key is turned
back into call arguments (`keys.py`) and bound as a call would be, so the whole path is checked:
arguments -> bound key -> JSON form -> compact table -> fastest config, or the heuristics.
"""

from __future__ import annotations

import dataclasses
import importlib

import jax
import pytest

from tests.jax.public.cases import CHIPS, IMPLEMENTATIONS
from tests.jax.public.keys import ragged_dot_arguments

TABLES = [f"{impl}@{chip}" for chip in CHIPS for impl in IMPLEMENTATIONS]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("table", TABLES)
def test_every_table_key_chooses_upstreams_config(table: str, kernel, public_api, emulation, upstream_public):
    impl, chip = table.split("@")
    rows = upstream_public["selection"][table]
    assert rows, f"upstream has no {table} table"
    op = (public_api.RaggedDot if impl == "mosaic" else public_api.V2RaggedDot)()
    group_sizes_cls = importlib.import_module(f"{kernel.__name__}._ported._src.ops.ragged_dot.base").GroupSizes
    wrong = []
    with public_api.config.cross_compile(True), emulation.emulated_chip(chip), \
            jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip)):
        for i, (key, theirs) in enumerate(rows):
            assert isinstance(theirs, dict), f"upstream could not choose for key {i} of {table}: {theirs}"
            ours = dataclasses.asdict(op.bind(**ragged_dot_arguments(key, group_sizes_cls, public_api)).default_config)
            if ours != theirs:
                wrong.append(f"key {i} {key['lhs']} x {key['rhs']}: ours {ours}, upstream {theirs}")
    assert not wrong, f"{len(wrong)} of {len(rows)} keys of {table} choose another config:\n" + "\n".join(wrong[:10])


@pytest.mark.kernels_ci
def test_tables_are_hit_not_only_heuristics(public_api, emulation):
    """The tuned entry wins where it exists: Mixtral-sized forward on v6e and v5e (DESIGN §5)."""
    import jax.numpy as jnp

    specs = dict(lhs=jax.ShapeDtypeStruct((8192, 4096), jnp.bfloat16),
                 rhs=jax.ShapeDtypeStruct((8, 4096, 14336), jnp.bfloat16),
                 group_sizes=jax.ShapeDtypeStruct((8,), jnp.int32))
    want = {"v6e": (512, 4096, 1024), "v5e": (256, 4096, 512)}
    for chip, tiles in want.items():
        with public_api.config.cross_compile(True), emulation.emulated_chip(chip), \
                jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip)):
            config = public_api.RaggedDot().bind(**specs).default_config
        assert (config.tile_m, config.tile_k, config.tile_n) == tiles, chip
