"""An autotuning result applied to the Torch ops (`tokamax.tuning`): it reaches upstream's config
choice in torch-tpu's export, each result is an export of its own, and a wrong one is refused."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
import torch

from tests.torch.export_probe import ExportProbe
from tests.torch.ops import checks

TILES = re.compile(r"tile_m\\22:(\d+),\\22tile_k\\22:(\d+),\\22tile_n\\22:(\d+)")
TABLE_TILES = {"TPU v6e": {("512", "4096", "1024")}, "TPU v5e": {("256", "4096", "512")}}  # DESIGN §5
TUNED = {"tile_m": 256, "tile_k": 2048, "tile_n": 512}  # a config no table names for this key
SHAPES = ((8192, 4096), (8, 4096, 14336), (8,))  # the Mixtral-sized forward key of test_bridge


@pytest.fixture
def attached(ops, monkeypatch):  # noqa: ANN001, ANN201
    """Simulates torch-tpu on a TPU of the given name (as test_bridge does); restores the host after."""
    bridge = importlib.import_module(f"{ops.__name__}._bridge")

    def attach(name: str) -> None:
        monkeypatch.setattr(torch.tpu, "get_device_name", lambda device=None: name)
        bridge.attached_chip.cache_clear()

    yield attach
    monkeypatch.undo()
    bridge.attached_chip.cache_clear()


def _export(ops, token: str) -> str:  # noqa: ANN001
    """The module torch-tpu's `jax_op` exports for `gmm` at the Mixtral key (as test_bridge exports it)."""
    import jax
    import jax.numpy as jnp

    specs = [jax.ShapeDtypeStruct(s, jnp.int32 if len(s) == 1 else jnp.bfloat16) for s in SHAPES]
    fn = jax.jit(lambda a, b, g: ops.families["ragged_dot"]._gmm_jax(a, b, g, False, token))
    with jax._src.config.export_ignore_forward_compatibility(True):
        return jax.export.export(fn, platforms=["tpu"], disabled_checks=[
            jax.export.DisabledSafetyCheck.custom_call("ALL")])(*specs).mlir_module()


@pytest.fixture(scope="module")
def v6e_result(tokamax, tmp_path_factory) -> Path:  # noqa: ANN001
    """A result for the Mixtral key on v6e naming `TUNED`, made with this kernel's JAX API (bound
    arguments read back from the Torch op's own TPU lowering, as a JAX user on the TPU VM would)."""
    import jax
    import jax.numpy as jnp

    root = f"{tokamax.__name__}._ported._src"
    bench = importlib.import_module(f"{root}.benchmarking")
    data_cls = importlib.import_module(f"{root}.autotuning.autotuner").AutotuningData
    specs = [jax.ShapeDtypeStruct(s, jnp.int32 if len(s) == 1 else jnp.bfloat16) for s in SHAPES]
    emulation = tokamax.emulation
    with tokamax.ops.config.cross_compile(True), emulation.emulated_chip("v6e"), \
            jax.sharding.use_abstract_mesh(emulation.tpu_mesh("v6e")):
        fn = jax.jit(lambda a, b, g: tokamax.torch_ops.families["ragged_dot"]._gmm_jax(a, b, g, False, ""))
        (bound,) = tokamax.ops.autotuning.get_bound_args(fn.trace(*specs).lower(lowering_platforms=("tpu",)))
    timings = bench.BenchmarkData(compile_time_ms=1.0, lower_time_ms=1.0, evaluation_times_ms=(1.0,), metadata={})
    result = tokamax.ops.AutotuningResult("TPU v6 lite", ((bound, data_cls({bound.op.config_cls(**TUNED): timings}),),))
    path = tmp_path_factory.mktemp("tuning") / "v6e.json"
    path.write_text(result.dumps())
    return path


@pytest.mark.kernels_ci
def test_a_result_changes_the_tiles_torch_tpu_exports(tokamax, ops, attached, v6e_result, monkeypatch):
    attached("TPU v6e")
    assert set(TILES.findall(_export(ops, tokamax.tuning.token()))) == TABLE_TILES["TPU v6e"]
    with tokamax.tuning.use(v6e_result):
        token = tokamax.tuning.token()
        assert set(TILES.findall(_export(ops, token))) == {tuple(str(TUNED[k]) for k in TUNED)}
    assert tokamax.tuning.token() == ""
    assert set(TILES.findall(_export(ops, ""))) == TABLE_TILES["TPU v6e"]
    monkeypatch.setenv(tokamax.tuning.ENVIRONMENT_VARIABLE, str(v6e_result))
    assert tokamax.tuning.token() == token  # the same file by the environment: the same result
    assert set(TILES.findall(_export(ops, tokamax.tuning.token()))) == {tuple(str(TUNED[k]) for k in TUNED)}


@pytest.mark.kernels_ci
def test_each_result_is_an_export_of_its_own_forward_and_backward(tokamax, ops, v6e_result, tmp_path):
    """torch-tpu exports once per invocation key; the result's token is part of it, so calls under a
    result export again (and their backward with them), and calls under the same result do not."""
    other = json.loads(v6e_result.read_text())
    other["data"][0][1] = {json.dumps({**TUNED, "tile_m": 128, "input_buffer_count": 2, "combine_scopes": False},
                                      separators=(",", ":")): next(iter(other["data"][0][1].values()))}
    other_path = tmp_path / "other.json"
    other_path.write_text(json.dumps(other))
    lhs = torch.empty(256, 128, device="meta", dtype=torch.bfloat16, requires_grad=True)
    rhs = torch.empty(4, 128, 256, device="meta", dtype=torch.bfloat16, requires_grad=True)
    sizes = torch.empty(4, dtype=torch.int32, device="meta")
    namespace = importlib.import_module(f"{tokamax.__name__}._ops")._OPS_NAME
    with ExportProbe(namespace) as probe:
        for applied in (None, v6e_result, v6e_result, other_path, None):
            if applied is None:
                ops.gmm(lhs, rhs, sizes).sum().backward()
            else:
                with tokamax.tuning.use(applied):
                    ops.gmm(lhs, rhs, sizes).sum().backward()
    assert probe.count("gmm") == 5 and probe.count("gmm_bwd") == 5
    assert probe.exports() == {"gmm": 3, "gmm_bwd": 3}


@pytest.mark.kernels_ci
def test_a_result_for_another_chip_is_refused_at_the_export(tokamax, ops, attached, v6e_result):
    attached("TPU v5e")
    with tokamax.tuning.use(v6e_result):  # no chip known here (JAX sees its CPU): the block opens
        with pytest.raises(tokamax.tuning.AutotuningFileError,
                           match=rf"tokamax gmm: autotuning result {re.escape(str(v6e_result))} was tuned on "
                                 r"'TPU v6 lite' \(its device_kind\), but this call runs on 'TPU v5 lite'"):
            _export(ops, tokamax.tuning.token())


@pytest.mark.kernels_ci
def test_a_bad_file_in_the_environment_names_the_variable_and_the_file(tokamax, ops, tmp_path, monkeypatch):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    monkeypatch.setenv(tokamax.tuning.ENVIRONMENT_VARIABLE, str(bad))
    lhs, rhs = torch.zeros(256, 128), torch.zeros(2, 128, 128)
    with pytest.raises(tokamax.tuning.AutotuningFileError,
                       match=rf"TOKAMAX_AUTOTUNING_RESULT: tokamax autotuning result {re.escape(str(bad))}: not JSON"):
        ops.gmm(lhs, rhs, torch.tensor([128, 128], dtype=torch.int32))


def test_cpu_tensors_run_under_a_result_and_stay_right(tokamax, ops, v6e_result):
    """On CPU tensors (interpret mode, the emulated v6e) a v6e result is accepted and the product is
    still the product (the result names a key of another size; this call keeps its own choice)."""
    lhs, rhs = checks.randn(256, 128, seed=1), checks.randn(2, 128, 128, seed=2)
    sizes = torch.tensor([100, 156], dtype=torch.int32)
    with tokamax.tuning.use(v6e_result):
        out = ops.gmm(lhs, rhs, sizes)
    want = torch.cat([lhs[:100].double() @ rhs[0].double(), lhs[100:].double() @ rhs[1].double()])
    torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)
