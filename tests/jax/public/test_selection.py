"""Config choice: for every key of every upstream table this kernel ships (ragged dot v1 and v2,
splash forward and VJP), on every chip that has one, this kernel's Op chooses upstream's config.

Upstream parses its own table files with its own cache code (pydantic); here each key is turned
back into call arguments (`*_keys.py`, `splash_cases.py`) and bound as a call would be, so the
whole path is checked: arguments -> bound key -> JSON form -> compact table -> fastest config, or
the heuristics when the entry is empty.
"""

from __future__ import annotations

import jax
import pytest

from tests.jax.public.cases import all_tables, config_fields
from tests.jax.public.lowering import as_released

TABLES = [(table, chip) for table in all_tables() for chip in table.chips()]


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("table", "chip"), TABLES, ids=[f"{t.id}@{c}" for t, c in TABLES])
def test_every_table_key_chooses_upstreams_config(table, chip, public_api, emulation, upstream_public):
    rows = upstream_public["selection"][f"{table.id}@{chip}"]
    assert len(rows) == len(table.entries(chip)), "upstream's table and the ported one hold different keys"
    op = table.op(public_api)
    wrong = []
    with public_api.config.cross_compile(True), emulation.emulated_chip(chip), as_released(public_api), \
            jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip)):
        for i, (key, theirs) in enumerate(rows):
            assert isinstance(theirs, dict), f"upstream could not choose for key {i} of {table.id}@{chip}: {theirs}"
            ours = config_fields(op.bind(**table.arguments(key, public_api)).default_config)
            if ours != theirs:
                wrong.append(f"key {i} {key}: ours {ours}, upstream {theirs}")
    assert not wrong, f"{len(wrong)} of {len(rows)} keys of {table.id}@{chip} choose another config:\n" + \
        "\n".join(w[:600] for w in wrong[:8])


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
            config = public_api.ops.tpu.RaggedDot().bind(**specs).default_config
        assert (config.tile_m, config.tile_k, config.tile_n) == tiles, chip


@pytest.mark.kernels_ci
def test_every_shipped_table_is_checked():
    from tests.jax.public.cases import CHIPS, PORTED_TABLES

    shipped = {(p.parent.name, p.stem) for p in PORTED_TABLES.glob("*/*.json")}
    checked = {(CHIPS[chip], table.stem) for table, chip in TABLES}
    assert shipped, "the port shipped no tables"
    assert shipped == checked, f"tables shipped but not checked: {sorted(shipped - checked)}"
