"""The bridge every Torch op shares: this build's namespace, meta and fake tensors, DLPack without copies."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode


@contextlib.contextmanager
def attached(ops: Any, monkeypatch: pytest.MonkeyPatch, device_name: str) -> Iterator[Any]:
    """A torch-tpu host simulated: torch-tpu names `device_name` (as it reads the PCI bus); yields the bridge. Undone
    on exit, the attached chip forgotten (the autouse fixture forgets its process-wide answer)."""
    bridge = importlib.import_module(f"{ops.__name__}._bridge")
    monkeypatch.setattr(torch.tpu, "get_device_name", lambda device=None: device_name)
    bridge.attached_chip.cache_clear()
    try:
        yield bridge
    finally:
        monkeypatch.undo()
        bridge.attached_chip.cache_clear()


@pytest.mark.kernels_ci
def test_ops_live_in_this_builds_namespace(tokamax, ops):
    # As kernel-builder's noarch _ops.py: _tokamax_<backend torch runs on>_<this build's id>. The kernel's
    # module name (its metadata id) always says tpu; on this CPU host the namespace says cpu.
    names = importlib.import_module(f"{tokamax.__name__}._ops")
    build_id = tokamax.__name__.removeprefix("_tokamax_tpu_")
    assert names._OPS_NAME == f"_tokamax_{names.get_backend()}_{build_id}" and build_id != tokamax.__name__
    for op in (ops.gmm_op, ops.tgmm_op, ops.splash_op, ops.gmm_v2_op):
        assert op._qualname.split("::")[0] == names._OPS_NAME


@pytest.mark.kernels_ci
def test_meta_and_fake_tensors_give_shapes_and_dtypes(ops):
    sizes = torch.empty(4, dtype=torch.int32, device="meta")
    out = ops.gmm(torch.empty(256, 128, device="meta", dtype=torch.bfloat16),
                  torch.empty(4, 128, 384, device="meta", dtype=torch.bfloat16), sizes)
    assert (out.shape, out.dtype, out.device.type) == ((256, 384), torch.bfloat16, "meta")
    with FakeTensorMode():
        q = torch.empty(2, 256, 128, dtype=torch.bfloat16)
        att = ops.splash_attention(q, torch.empty(256, 128, dtype=torch.bfloat16),
                                   torch.empty(256, 128, dtype=torch.bfloat16))
        grouped = ops.tgmm(torch.empty(256, 128), torch.empty(256, 256), torch.empty(3, dtype=torch.int32))
    assert (att.shape, att.dtype) == ((2, 256, 128), torch.bfloat16)
    assert (grouped.shape, grouped.dtype) == ((3, 128, 256), torch.float32)


@pytest.mark.kernels_ci
def test_dlpack_conversion_shares_memory(ops):
    tensor = torch.arange(4096, dtype=torch.float32).reshape(64, 64)
    array = ops.to_jax(tensor)
    assert array.unsafe_buffer_pointer() == tensor.data_ptr()
    back = ops.to_torch(array)
    assert back.data_ptr() == tensor.data_ptr()
    bf16 = tensor.to(torch.bfloat16)
    assert ops.to_jax(bf16).unsafe_buffer_pointer() == bf16.data_ptr()




@pytest.mark.kernels_ci
@pytest.mark.parametrize(("device_name", "tiles"), [("TPU v5e", (256, 4096, 512)), ("TPU v6e", (512, 4096, 1024))])
def test_on_a_torch_tpu_host_the_ops_take_the_attached_chips_table(ops, monkeypatch, device_name, tiles):
    """torch-tpu owns the TPU and exports the op's JAX function for it while JAX itself sees only its CPU.
    With TPU detection simulated (torch.tpu.get_device_name, as torch-tpu reads the PCI bus), the export
    torch-tpu makes (jax.export for "tpu", no chip or mesh set by the caller) must run upstream's tuned
    tiles for that chip at a Mixtral-sized key (DESIGN §5), not the 128-tiles JAX's CPU device would get."""
    import re

    import jax
    import jax.numpy as jnp

    bridge = importlib.import_module(f"{ops.__name__}._bridge")
    monkeypatch.setattr(torch.tpu, "get_device_name", lambda device=None: device_name)
    bridge.attached_chip.cache_clear()
    try:
        assert bridge.attached_chip() == {"TPU v5e": "v5e", "TPU v6e": "v6e"}[device_name]
        specs = (jax.ShapeDtypeStruct((8192, 4096), jnp.bfloat16),
                 jax.ShapeDtypeStruct((8, 4096, 14336), jnp.bfloat16), jax.ShapeDtypeStruct((8,), jnp.int32))
        fn = jax.jit(lambda a, b, g: ops.families["ragged_dot"]._gmm_jax(a, b, g, False, ""))
        with jax._src.config.export_ignore_forward_compatibility(True):  # as torch-tpu's jax_op exports
            text = jax.export.export(fn, platforms=["tpu"], disabled_checks=[
                jax.export.DisabledSafetyCheck.custom_call("ALL")])(*specs).mlir_module()
    finally:
        bridge.attached_chip.cache_clear()
    tile = re.compile(r"tile_m\\22:(\d+),\\22tile_k\\22:(\d+),\\22tile_n\\22:(\d+)")
    found = {tuple(map(int, t)) for t in tile.findall(text)}
    assert found == {tiles}


@pytest.mark.kernels_ci
def test_on_a_torch_tpu_host_fused_moe_exports_for_the_attached_chip(ops, tokamax, monkeypatch):
    """Upstream's fused MoE shards over a concrete mesh, which in a Torch process is JAX's CPU device, and Mosaic
    lowers its kernel after the trace has left `chip_for_tracing`'s block: on the v5e (2026-12-06) torch-tpu's
    export failed there ("Unsupported TPU device kind: cpu"). The export torch-tpu makes (jax.export for "tpu", no
    block open) lowers on a simulated v5e host, with the v5e's answers, and no block is left open after it."""
    import jax
    import jax.numpy as jnp

    emulation = importlib.import_module(f"{tokamax.__name__}.emulation")
    bridge = importlib.import_module(f"{ops.__name__}._bridge")
    monkeypatch.setattr(torch.tpu, "get_device_name", lambda device=None: "TPU v5e")
    bridge.attached_chip.cache_clear()
    tokens, hidden, inter, experts = 32, 256, 256, 4
    specs = (jax.ShapeDtypeStruct((tokens, hidden), jnp.bfloat16),
             jax.ShapeDtypeStruct((experts, hidden, 2 * inter), jnp.bfloat16),
             jax.ShapeDtypeStruct((experts, inter, hidden), jnp.bfloat16),
             jax.ShapeDtypeStruct((tokens, experts), jnp.float32))
    fn = ops.fused_moe_op._jax_fn
    seen = []
    real = emulation._attached_info_factory  # noqa: SLF001 - which chip the lowering asked after the trace

    def spy(chip):  # noqa: ANN001, ANN202
        seen.append(chip)
        return real(chip)

    try:
        monkeypatch.setattr(emulation, "_attached_info_factory", spy)
        with jax._src.config.export_ignore_forward_compatibility(True):  # as torch-tpu's jax_op exports
            exported = jax.export.export(
                jax.jit(lambda *a: fn(*a, None, None, None, None, 2, True, "silu", "")), platforms=["tpu"],
                disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("ALL")])(*specs)
        assert "tpu_custom_call" in exported.mlir_module()
        assert seen and set(seen) == {"v5e"}
        assert emulation.current_chip() is None
    finally:
        monkeypatch.undo()
        bridge.attached_chip.cache_clear()


@pytest.mark.kernels_ci
def test_the_answer_for_the_attached_chip_yields_to_blocks_and_is_undone(tokamax):
    """Outside any block, JAX's CPU device answers as the attached chip; an emulation block answers for its own
    chip and gives the attached one back; `current_chip()` names only a block's chip."""
    import jax.experimental.pallas.tpu as pltpu

    emulation = importlib.import_module(f"{tokamax.__name__}.emulation")
    with pytest.raises(ValueError, match="Unsupported TPU device kind: cpu"):
        pltpu.get_tpu_info()
    emulation.answer_for_attached("v5e")
    try:
        assert pltpu.get_tpu_info().chip_version.name == "TPU_V5E" and emulation.current_chip() is None
        with emulation.emulated_chip("v6e"):
            assert pltpu.get_tpu_info().chip_version.name == "TPU_V6E" and emulation.current_chip() == "v6e"
        assert pltpu.get_tpu_info().chip_version.name == "TPU_V5E"
    finally:
        emulation.forget_attached()
    with pytest.raises(ValueError, match="Unsupported TPU device kind: cpu"):
        pltpu.get_tpu_info()


@pytest.mark.kernels_ci
def test_an_unknown_attached_tpu_is_an_error_not_a_guess(ops, monkeypatch):
    with attached(ops, monkeypatch, "TPU v4") as bridge, pytest.raises(
            RuntimeError, match=r"torch-tpu reports 'TPU v4', which none of tokamax's chips"):
        bridge.attached_chip()
    assert bridge.attached_chip() is None  # this host: no TPU on the PCI bus


@pytest.mark.kernels_ci
def test_on_a_torch_tpu_host_an_op_for_another_chip_is_refused(ops, monkeypatch):
    """DeepSeek RoPE runs on TPU7x only (upstream's `supported_on`); cross-compiling skips upstream's check, so
    the bridge keeps it: on a simulated v6e torch-tpu host the export stops with a message naming both chips."""
    import jax
    import jax.numpy as jnp

    with attached(ops, monkeypatch, "TPU v6e"):
        specs = (jax.ShapeDtypeStruct((16, 256), jnp.bfloat16), jax.ShapeDtypeStruct((16,), jnp.int32),
                 jax.ShapeDtypeStruct((64, 64), jnp.float32))
        rope = ops.families["deepseek_rope"]._rope_jax
        with pytest.raises(NotImplementedError, match=r"upstream runs this kernel on v7x only; torch-tpu's TPU is v6e"):
            jax.export.export(jax.jit(lambda *a: rope(*a, "rope", False, 1e-6)), platforms=["tpu"])(*specs)
        # as the op exports it (with its autotuning token): the message names the op (on the v5e it said "body")
        exported = ops.deepseek_rope_op._jax_fn
        with pytest.raises(NotImplementedError, match=r"^tokamax deepseek_rope: upstream runs this kernel on v7x only"):
            jax.export.export(jax.jit(lambda *a: exported(*a, "rope", False, 1e-6, "")), platforms=["tpu"])(*specs)


@pytest.mark.kernels_ci
def test_upstreams_own_supported_on_names_the_chips_each_partial_op_runs_on(ops):
    """Read from upstream's classes, not written down here: the SparseCore's gather needs a SparseCore (v5p and
    newer), the others TPU generation 6 and newer."""
    bridge = importlib.import_module(f"{ops.__name__}._bridge")
    assert bridge.upstream_chips("ProjAndSaveState") == ("v6e", "v7x")
    assert bridge.upstream_chips("RouterTopK") == ("v6e", "v7x")
    assert bridge.upstream_chips("CausalConv1dGatedDeltaRule") == ("v6e", "v7x")
    assert bridge.upstream_chips("CsaGather") == ("v5p", "v6e", "v7x")
    assert bridge.upstream_chips("RaggedDot") == ("v5e", "v5p", "v6e", "v7x")


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("family", "fn", "op", "runs_on"), [
    ("proj_and_save_state", "_proj_jax", "proj_and_save_state", "v6e, v7x"),
    ("router_topk", "_router_topk_jax", "router_topk", "v6e, v7x"),
    ("causal_conv1d_gated_delta_rule", "_gdn_jax", "causal_conv1d_gated_delta_rule", "v6e, v7x"),
    ("csa_gather", "_csa_gather_jax", "csa_gather", "v5p, v6e, v7x"),
])
def test_on_a_v5e_torch_tpu_host_an_op_upstream_does_not_run_there_is_refused_before_the_compiler(
        ops, monkeypatch, family, fn, op, runs_on):
    """Cross-compiling skips upstream's device check; on the v5e's torch-tpu, proj_and_save_state reached Mosaic and
    failed there ("Regular semaphores in EnqueueDMA are not supported on this target", 6c78e5c's mirror) and
    csa_gather stopped in an assertion. The bridge asks upstream's `supported_on` for the attached chip first."""
    with attached(ops, monkeypatch, "TPU v5e"), pytest.raises(
            NotImplementedError, match=rf"^tokamax {op}: upstream runs this kernel on {runs_on} only "
                                       r"\(its `supported_on`\); torch-tpu's TPU is v5e"):
        getattr(ops.families[family], fn)(*([None] * 8))  # refused before any argument is looked at


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("family", "op", "runs_on"), [
    ("proj_and_save_state", "proj_and_save_state", "v6e, v7x"),
    ("router_topk", "router_topk", "v6e, v7x"),
    ("causal_conv1d_gated_delta_rule", "causal_conv1d_gated_delta_rule", "v6e, v7x"),
    ("csa_gather", "csa_gather", "v5p, v6e, v7x"),
])
def test_on_a_v5e_torch_tpu_host_the_registered_op_refuses_too(ops, monkeypatch, family, op, runs_on):
    """As torch-tpu calls it: the function the op registered, behind its autotuning token. The token's block opened
    first and emulated the attached chip, so the check above saw an enclosing block and let bd81221's mirror take
    proj_and_save_state to the v5e, where the core halted (RuntimeUnexpectedCoreHalt) and router top-k's later
    calls failed with it; this is the check as the chip meets it."""
    module = ops.families[family]
    (registered,) = [v for k, v in vars(module).items() if k.endswith("_op") and hasattr(v, "_jax_fn")]
    with attached(ops, monkeypatch, "TPU v5e"), pytest.raises(
            NotImplementedError, match=rf"^tokamax {op}: upstream runs this kernel on {runs_on} only "
                                       r"\(its `supported_on`\); torch-tpu's TPU is v5e"):
        registered._jax_fn(*([None] * 9))  # refused before any argument is looked at


@pytest.mark.kernels_ci
def test_on_a_v6e_torch_tpu_host_router_topk_still_exports(ops, monkeypatch):
    """The check refuses only where upstream does: on a simulated v6e host the op exports for the TPU."""
    import jax
    import jax.numpy as jnp

    with attached(ops, monkeypatch, "TPU v6e"):
        fn = ops.families["router_topk"]._router_topk_jax
        exported = jax.export.export(jax.jit(lambda s: fn(s, 2)), platforms=["tpu"])(
            jax.ShapeDtypeStruct((64, 8), jnp.float32))
    assert "tpu_custom_call" in exported.mlir_module()
