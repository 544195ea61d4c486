"""Op specs parsed back: every profiling payload of every public call on v6e (the JSON form upstream's
Op layer writes into the lowered module: the Op with its config, and the bound arguments) is read back
by upstream's `BOUND_ARGS_ADAPTER.validate_json` (the pydantic stand-in's `spec_parse`) into a
`BoundArguments`, and dumped again as the Op layer dumps it (`vjp` dropped) to the same bytes: arrays,
dtypes (float8 too), enums, dimension numbers, group sizes, QArray and AsQArray operands, masks,
meshes, configs of every op family. Also: upstream's own JSON (`tokamax.` paths) reads, and a value the
op's annotation does not read says where."""

from __future__ import annotations

import re

import pytest

from tests.jax.public.cases import all_public_cases

CASES = [c for c in all_public_cases() if c.chip == "v6e"]
_PAYLOAD = re.compile(r'xla_metadata_payload = "tokamax:(.*?)"[,}]')


def _payloads(text: str) -> list[str]:
    """The payload JSON texts of a module (MLIR escapes a string's bytes as \\XX)."""
    unescape = lambda p: re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), p)  # noqa: E731
    return sorted({unescape(p) for p in _PAYLOAD.findall(text)})


@pytest.fixture(scope="module")
def op_module(get):  # noqa: ANN001, ANN201
    return get("_src.ops.op")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_payloads_read_back_and_dump_to_the_same_bytes(case, our_public_lowering, op_module):
    try:
        text = our_public_lowering(case)
    except Exception:  # noqa: BLE001 - a call upstream refuses too (the identity test checks the refusal)
        pytest.skip("the call is refused on both sides (test_public_identity checks the error)")
    payloads = _payloads(text)
    assert payloads, "no profiling payload in the module"
    for payload in payloads:
        bound = op_module.BOUND_ARGS_ADAPTER.validate_json(payload)
        assert isinstance(bound, op_module.BoundArguments) and type(bound.op).__name__ in payload
        again = op_module.BOUND_ARGS_ADAPTER.dump_json(op_module.BoundArguments(bound.op.replace(vjp=None),
                                                                                 bound.arguments))
        assert again.decode() == payload


@pytest.mark.kernels_ci
def test_upstream_paths_and_bad_values(get, op_module):
    """`tokamax._src...` (what upstream writes) resolves to this kernel's tree; a wrong value names its path."""
    payload = ('{"op":{"__type":"tokamax._src.ops.experimental.tpu.splash_attention.base.SplashAttention",'
               '"config":null,"bypass_device_check":false,"vjp":null},"arguments":{"q":"f32[2,64,32]",'
               '"k":"f32[2,64,32]","v":"f32[2,64,32]","mask":{"bool_mask":null,"is_causal":true},'
               '"segment_ids":null,"sinks":null,"is_mqa":false,"mask_value":-2.381976426469702e+38,'
               '"attn_logits_soft_cap":null,"dropout_rate":0.0,"prng_key":null,"return_residuals":false}}')
    bound = op_module.BOUND_ARGS_ADAPTER.validate_json(payload)
    base = get("_src.ops.experimental.tpu.splash_attention.base")
    assert isinstance(bound.op, base.SplashAttention) and bound.arguments["q"].shape == (2, 64, 32)
    assert bound.arguments["mask"] == base.CAUSAL_MASK
    with pytest.raises(ValueError, match=r"arguments\.is_mqa: expected a bool, got 'yes'"):
        op_module.BOUND_ARGS_ADAPTER.validate_json(payload.replace('"is_mqa":false', '"is_mqa":"yes"'))
    with pytest.raises(ValueError, match="SplashAttention takes no argument 'window'"):
        op_module.BOUND_ARGS_ADAPTER.validate_json(payload.replace('"sinks":null', '"sinks":null,"window":3'))
