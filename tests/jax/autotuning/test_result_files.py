"""`tokamax.tuning`: result files read whole or not at all, errors naming the file and the entry, and a
result tuned on another chip refused where the call runs."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from tests.jax.autotuning import calls
from tests.jax.public.normalise import normalise


def _write(tmp_path: Path, raw: object, name: str = "result.json") -> Path:
    path = tmp_path / name
    path.write_text(raw if isinstance(raw, str) else json.dumps(raw))
    return path


def _overlays(kernel) -> tuple:  # noqa: ANN001
    return importlib.import_module(f"{kernel.__name__}._ported._src.ops.op").AUTOTUNING_CACHE_OVERLAY_STACK.get()


def _bad(kernel, path: Path, pattern: str) -> None:  # noqa: ANN001
    with pytest.raises(kernel.tuning.AutotuningFileError, match=pattern):
        kernel.tuning.load(path)
    with pytest.raises(kernel.tuning.AutotuningFileError, match=pattern):
        with kernel.tuning.use(path):
            pytest.fail("a bad file was applied")
    assert _overlays(kernel) == () and kernel.tuning.current() is None  # nothing applied, nothing left


@pytest.mark.kernels_ci
def test_a_file_that_is_not_json(kernel, tmp_path):
    path = _write(tmp_path, '{"device_kind": "TPU v6 lite", "data": [')
    _bad(kernel, path, rf"tokamax autotuning result {re.escape(str(path))}: not JSON \(")


@pytest.mark.kernels_ci
def test_a_file_that_is_no_result(kernel, tmp_path):
    path = _write(tmp_path, {"tile_m": 128})
    _bad(kernel, path, r"expected the fields \['data', 'device_kind', 'tokamax_version'\] of an AutotuningResult")


@pytest.mark.kernels_ci
def test_a_missing_file(kernel, tmp_path):
    _bad(kernel, tmp_path / "nowhere.json", r"nowhere\.json: cannot read it \(No such file")


@pytest.mark.kernels_ci
def test_an_op_this_build_lacks_names_the_entry(kernel, tuned_file, tmp_path):
    raw = json.loads(tuned_file.read_text())
    gpu = json.loads(json.dumps(raw["data"][0]))
    gpu[0]["op"]["__type"] = "tokamax._src.ops.gated_linear_unit.pallas_triton.PallasTritonGatedLinearUnit"
    raw["data"].append(gpu)
    path = _write(tmp_path, raw)
    _bad(kernel, path, rf"{re.escape(str(path))}, entry 1 \(op PallasTritonGatedLinearUnit\): .*cannot import "
                       r"'tokamax\._src\.ops\.gated_linear_unit")


@pytest.mark.kernels_ci
def test_a_config_field_the_op_lacks_is_refused_not_dropped(kernel, tuned_file, tmp_path):
    """Upstream 0.0.17 loads such a config silently (pydantic drops the field); here it is an error,
    from `AutotuningResult.loads` too."""
    raw = json.loads(tuned_file.read_text())
    configs = raw["data"][0][1]
    key = next(iter(configs))
    configs[key.replace('"tile_m"', '"tile_q"')] = configs.pop(key)
    path = _write(tmp_path, raw)
    _bad(kernel, path, r"entry 0 \(op PallasMosaicTpuRaggedDot\): .*Config has no field 'tile_q'")
    with pytest.raises(ValueError, match=r"Config has no field 'tile_q'"):
        kernel.ops.AutotuningResult.loads(path.read_text())


@pytest.mark.kernels_ci
def test_an_argument_the_op_lacks_names_the_entry(kernel, tuned_file, tmp_path):
    raw = json.loads(tuned_file.read_text())
    raw["data"][0][0]["arguments"]["block_q"] = 128
    path = _write(tmp_path, raw)
    _bad(kernel, path, r"entry 0 \(op PallasMosaicTpuRaggedDot\): .*takes no argument 'block_q'")


@pytest.mark.kernels_ci
def test_a_file_from_another_version_is_refused_whole(kernel, tuned_file, tmp_path):
    """Even with every entry readable: another release's configs and keys are not this one's."""
    raw = json.loads(tuned_file.read_text())
    raw["tokamax_version"] = "0.0.99"
    _bad(kernel, _write(tmp_path, raw), r"the file was written by tokamax 0\.0\.99, this build holds 0\.0\.17; "
                                        r"tune again")


def test_a_result_for_another_chip_is_refused_where_the_call_runs(kernel, emulation, tuned_file):
    """Tuned for v6e (its device_kind), applied where calls lower for v5e: refused at the block, naming
    the file and both chips; on v6e it applies."""
    with calls.for_tpu(kernel.ops.config, emulation, "v5e"):
        with pytest.raises(kernel.tuning.AutotuningFileError,
                           match=rf"{re.escape(str(tuned_file))} was tuned on 'TPU v6 lite' .* runs on 'TPU v5 lite'"):
            with kernel.tuning.use(tuned_file):
                pytest.fail("applied on another chip")
    assert _overlays(kernel) == ()
    with calls.for_tpu(kernel.ops.config, emulation, "v6e"), kernel.tuning.use(tuned_file) as applied:
        assert len(_overlays(kernel)) == 1 and applied.token.startswith("autotuning:")


def test_use_steers_jax_calls_as_the_result_does(kernel, emulation, tuned, tuned_file, ragged_op_class):
    chosen = tuned["result"].data[0][1].fastest_config
    module = lambda fn: normalise(calls.lower(fn, kernel.ops.config, emulation))  # noqa: E731
    with kernel.tuning.use(tuned_file) as from_file:
        inside = module(calls.public_call(kernel.ops))
    assert inside == module(calls.explicit_call(kernel.ops, ragged_op_class, chosen))
    with kernel.tuning.use(tuned["result"]) as applied:  # an AutotuningResult itself, too
        assert module(calls.public_call(kernel.ops)) == inside
    assert applied.token == from_file.token  # the file holds what dumps(prune_errors=True) writes


@pytest.mark.kernels_ci
def test_the_same_bytes_give_the_same_token_and_other_bytes_another(kernel, tuned_file, tmp_path):
    copy = _write(tmp_path, tuned_file.read_text(), "copy.json")
    with kernel.tuning.use(tuned_file) as a, kernel.tuning.use(copy) as b:
        assert a.token == b.token and kernel.tuning.token() == a.token
    other = json.loads(tuned_file.read_text())
    other["data"][0][1] = dict(list(other["data"][0][1].items())[:1])
    with kernel.tuning.use(_write(tmp_path, other, "other.json")) as c:
        assert c.token != a.token
    assert kernel.tuning.token() == ""


@pytest.mark.kernels_ci
def test_entering_the_same_result_again_keeps_jits_cache_key(kernel, tuned_file):
    """A `use` block around a training step, entered every step: the same result must not make JAX
    retrace (the active results are part of its jit cache key)."""
    key = importlib.import_module(f"{kernel.__name__}._ported._src.ops.op").AUTOTUNING_CACHE_OVERLAY_JAX_CONFIG
    seen = []
    for _ in range(3):
        with kernel.tuning.use(tuned_file):
            seen.append(key.value)
    assert seen[0] == seen[1] == seen[2] and len(seen[0]) == 1
    with kernel.tuning.use(tuned_file), kernel.tuning.use(tuned_file):  # nested: two entries, both work
        assert len(key.value) == 2 and len(_overlays(kernel)) == 2
    assert key.value == ()
