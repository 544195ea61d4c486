"""Upstream's config field constraints (`Field(gt=, ge=, le=, multiple_of=)`, `PositiveInt`) are
enforced by the pydantic stand-in as pydantic enforces them: a ValueError naming the class, the
field and what it needs, before any field is set; good values pass; None passes an optional field."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.kernels_ci


def test_a_block_off_the_lanes_is_refused_naming_the_field(get):
    module = get("_src.ops.experimental.fused_fp8_matmul.pallas_mosaic_tpu")
    with pytest.raises(ValueError) as info:
        module.Config(block_m=100, block_k=256, block_n=256)
    message = str(info.value)
    assert message.splitlines()[:3] == ["1 validation error for Config", "block_m",
                                        "  Input should be a multiple of 128 [type=multiple_of, input_value=100, "
                                        "input_type=int]"]
    assert type(info.value).__name__ == "ValidationError" and info.value.errors()[0]["loc"] == ("block_m",)
    assert module.Config(block_m=256, block_k=256, block_n=128).block_m == 256


def test_every_violation_is_listed(get):
    module = get("_src.ops.experimental.fused_fp8_matmul.pallas_mosaic_tpu")
    with pytest.raises(ValueError, match="2 validation errors for Config") as info:
        module.Config(block_m=100, block_k=0, block_n=256)
    # one error per field, its first failing constraint in pydantic's order (multiple_of, le, lt, ge, gt)
    assert [(e["loc"][0], e["type"]) for e in info.value.errors()] == [("block_m", "multiple_of"),
                                                                        ("block_k", "greater_than_equal")]


def test_optional_fields_take_none_and_positive_ints_refuse_zero(get):
    module = get("_src.ops.experimental.fused_moe_decode.pallas_mosaic_tpu")
    cfg = module.Config()
    assert cfg.i_block is None
    with pytest.raises(ValueError, match="i_block"):
        module.Config(i_block=64)
    ragged = get("_src.ops.ragged_dot.pallas_mosaic_tpu")
    with pytest.raises(ValueError, match="Input should be greater than 0"):
        ragged.Config(tile_m=0)
