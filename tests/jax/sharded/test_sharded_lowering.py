"""Upstream's public ops inside `jax.shard_map` on 8-chip v6e meshes (one or two mesh axes), lowered
on this CPU host: this kernel's whole module equals upstream 0.0.17's (tests/jax/public/normalise.py
says what is normalised; Mosaic bodies compared by hash; each chip's unsharded calls are compared in
tests/jax/public), and where upstream refuses the call (the v2 ragged dot's backward with a group
offset) this kernel refuses it alike. And each chip runs upstream's call on its shard: inside the
shard_map the Ops choose the configs and kernel calls they choose for one chip alone at a shard's
shapes."""

from __future__ import annotations

import difflib
import re

import jax
import jax.numpy as jnp
import pytest

from tests.jax.public.normalise import mosaic_count, normalise
from tests.jax.sharded.cases import BY_ID, CASES, CHIPS, SPLASH, ShardedCase
from tests.jax.sharded.lowering import clear_mask_cache, lower_per_chip, lower_sharded


def _diff(ours: str, theirs: str) -> str:
    lines = difflib.unified_diff(theirs.splitlines(), ours.splitlines(), "upstream", "ours", n=1, lineterm="")
    return "\n".join(line[:400] for line in list(lines)[:40])


def _mesh_line(case: ShardedCase) -> str:
    axes = ", ".join(f'"{a}"={n}' for a, n in zip(case.axes, case.mesh_shape, strict=True))
    return f"sdy.mesh @mesh = <[{axes}]>"


@pytest.mark.parametrize(("case", "chip"), [(c, chip) for c in CASES for chip in CHIPS],
                         ids=[f"{c.id}@{chip}" for c in CASES for chip in CHIPS])
def test_sharded_call_lowers_to_upstreams_module(case, chip, our_sharded_lowering, upstream_sharded):
    key = f"{case.id}@{chip}"
    if key in upstream_sharded["errors"]:
        expected = upstream_sharded["errors"][key].strip().splitlines()
        message = next(line for line in reversed(expected) if ":" in line and not line.startswith((" ", "-", "For ")))
        with pytest.raises(Exception) as raised:
            our_sharded_lowering(case, chip)
        assert f"{type(raised.value).__name__}: {raised.value}" == message, "upstream refused this call differently"
        return
    ours, theirs = normalise(our_sharded_lowering(case, chip)), upstream_sharded["modules"][key]
    assert ours == theirs, f"{key}: the module differs from upstream's:\n{_diff(ours, theirs)}"
    assert _mesh_line(case) in ours and "sdy.manual_computation" in ours, f"{key}: not sharded over the mesh"
    assert mosaic_count(ours) >= 1, f"{key}: no Mosaic kernel in the module"


def test_upstream_refuses_only_the_v2_backward_with_a_group_offset(upstream_sharded):
    """The refusals recorded are the expected ones (anything else upstream raised would turn a case into
    a comparison of errors): its v2 ragged dot has no backward pass with a group offset."""
    refused = {f"ragged_dot/mosaic_tpu_v2/expert-parallel-group-offset/grad@{chip}" for chip in CHIPS}
    assert set(upstream_sharded["errors"]) == refused, sorted(upstream_sharded["errors"])
    for key in refused:
        assert "group_offset, zero_initialize, fuse_gateup_activation are not supported on the ragged_dot backward" \
            in upstream_sharded["errors"][key]


_PAYLOAD = re.compile(r'xla_metadata_payload = "([^"]*)"')
_CUSTOM_CALL = re.compile(r'@tpu_custom_call\(.*?backend_config = "(.*?)"')
_BODY = re.compile(r"\\22body\\22: \\22[A-Za-z0-9+/=]+\\22")
_LOCATIONS = re.compile(r"\\22debug_locations\\22: \\22[A-Za-z0-9+/=]*\\22")


def _decisions(stablehlo: str) -> tuple[list[str], list[str]]:
    """What upstream's Ops decided for each kernel: the profiling payloads (Op class, config, abstract
    arguments) and each custom call's backend config but for its Mosaic body and source locations
    (cost estimate, VMEM limit, flags), in program order."""
    calls = [_LOCATIONS.sub("(locations)", _BODY.sub("(body)", c)) for c in _CUSTOM_CALL.findall(stablehlo)]
    return sorted(set(_PAYLOAD.findall(stablehlo))), calls


@pytest.mark.parametrize("case", [c for c in CASES if c.shard is not None], ids=lambda c: c.id)
def test_each_chip_runs_upstreams_call_on_its_shard(case, our_sharded_lowering, sharded_api, emulation):
    """The Ops choose inside the shard_map what they choose for one chip alone at a shard's shapes:
    the same Op configs and kernel calls. (Not the Mosaic bodies' bytes: JAX serializes some kernels
    lowered inside a manual computation differently from the same kernel alone, upstream's as ours,
    e.g. splash's backward, whose kernel jaxpr is the same; the bodies are compared with upstream's.)"""
    sharded = _decisions(our_sharded_lowering(case, "v6e"))
    alone = _decisions(lower_per_chip(case, sharded_api, emulation, "v6e"))
    assert sharded[0] and sharded[1], f"{case.id}: no Op payload or no kernel in the sharded module"
    assert len(sharded[1]) == len(alone[1]), f"{case.id}: {len(sharded[1])} kernels sharded, {len(alone[1])} alone"
    assert sharded == alone, f"{case.id}: the Ops decided differently inside the shard_map"


@pytest.mark.kernels_ci
def test_splash_lowers_alike_after_a_vjp_only_lowering(sharded_api, emulation):
    """splash/batch-heads once equalled upstream's module only in the JAX tier's test order: a VJP-only
    lowering of the same mask before it (upstream's `_process_mask` cache then hands both of the step's
    kernels one mask object's `q_sequence`, one constant fewer) changed it. Every lowering now starts
    from an empty cache on its side (`lowering.clear_mask_cache`, upstream's reference too)."""
    case = BY_ID["splash/batch-heads"]
    alone = lower_sharded(case, sharded_api, emulation, "v6e")
    clear_mask_cache(sharded_api)
    base, vjp = sharded_api.module(f"{SPLASH}.base"), sharded_api.module(f"{SPLASH}.pallas_mosaic_tpu_vjp")
    q, kv, rows = (jax.ShapeDtypeStruct(s, jnp.float32) for s in ((2, 256, 128), (1, 256, 128), (2, 256)))
    with sharded_api.config.cross_compile(True), emulation.emulated_chip("v6e"), \
            jax.sharding.use_abstract_mesh(emulation.tpu_mesh("v6e")):
        jax.jit(lambda q, k, v, o, d, m, lse: vjp.PallasMosaicTpuSplashAttentionVjp()(
            (m, lse), o, d, q, k, v, mask=base.CAUSAL_MASK)).trace(q, kv, kv, q, q, rows, rows).lower(
            lowering_platforms=("tpu",))
    assert lower_sharded(case, sharded_api, emulation, "v6e") == alone
