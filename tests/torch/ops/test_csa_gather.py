"""The Torch DeepSeek-V4 CSA cache gather (SparseCore, TPU only): the clear refusal on CPU, the shared checks
(fakes against JAX shapes, symbolic tracing and one graph for two index counts on meta tensors, the public Op in
the lowering) and bad calls. Shapes as tests/jax/public/csa_gather_cases.py."""

from __future__ import annotations

import pytest
import torch

from . import checks


def _caches(pages: int = 4, page_size: int = 64, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.zeros(pages, page_size, 128, dtype=torch.int32, device=device),
            torch.zeros(pages, page_size // 4, 128, dtype=torch.int32, device=device))


def _indices(n: int = 512, device: str = "cpu") -> torch.Tensor:
    return torch.zeros(n, dtype=torch.int32, device=device)


@pytest.mark.kernels_ci
def test_refuses_on_cpu(ops):
    checks.refuses_on_cpu(lambda: ops.csa_gather(*_caches(), _indices(), top_k=256), "csa_gather")
    checks.refuses_on_cpu(lambda: ops.csa_gather(*_caches(2, 256), _indices(1024), 512, top_k=512), "csa_gather")


@pytest.mark.kernels_ci
@pytest.mark.parametrize("num_valid", [False, True])
def test_fakes_match_jax_shapes(ops, tokamax, num_valid):
    f = checks.family(ops, "csa_gather")
    valid = torch.zeros(1, dtype=torch.int32) if num_valid else None
    with tokamax.ops.config.cross_compile(True):  # upstream's Op refuses a CPU device unless cross-compiling
        checks.fake_matches_jax(ops, ops.csa_gather_op, f._csa_gather_jax, *_caches(2, 256), _indices(1024), valid, 512)


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    def step(nope: torch.Tensor, rope: torch.Tensor, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return ops.csa_gather(nope, rope, indices, 256, top_k=256)

    caches = _caches(device="meta")
    checks.traces_symbolically(step, *caches, _indices(512, "meta"))
    checks.compiles_once_for_two_sizes(step, (*caches, _indices(512, "meta")), (*caches, _indices(1024, "meta")))


@pytest.mark.kernels_ci
def test_takes_num_valid_indices_as_an_int(ops):
    nope, rope = ops.csa_gather(*_caches(device="meta"), _indices(512, "meta"), 256, top_k=256)
    assert (nope.shape, rope.shape, nope.dtype) == ((512, 128), (128, 128), torch.int32)


@pytest.mark.kernels_ci
def test_runs_upstreams_public_op(ops):
    f = checks.family(ops, "csa_gather")
    assert checks.public_op_classes(ops, f._csa_gather_jax, *_caches(), _indices(), None, 256) == {"PallasTpuCsaGather"}


@pytest.mark.kernels_ci
def test_in_build_namespace(ops, tokamax):
    checks.assert_in_build_namespace(tokamax, ops.csa_gather_op)


def _call(nope=None, rope=None, indices=None, num_valid=None, top_k=256):  # noqa: ANN001, ANN202
    def call(o):  # noqa: ANN001, ANN202
        default_nope, default_rope = _caches()
        return o.csa_gather(default_nope if nope is None else nope, default_rope if rope is None else rope,
                            _indices() if indices is None else indices, num_valid, top_k=top_k)
    return call


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("call", "error", "message"), [
    (_call(nope="cache"), TypeError, "nope_cache must be a torch.Tensor, got str"),
    (_call(indices=_indices(device="meta")), ValueError, "all tensors must be on one device"),
    (_call(num_valid=torch.zeros(1, dtype=torch.int32, device="meta")), ValueError,
     "all tensors must be on one device"),
    (_call(nope=torch.zeros(4, 64, 128)), TypeError, "nope_cache must be int32, got torch.float32"),
    (_call(rope=torch.zeros(4, 16, 128, dtype=torch.int64)), TypeError, "rope_cache must be int32, got torch.int64"),
    (_call(nope=torch.zeros(256, 128, dtype=torch.int32)), ValueError,
     "nope_cache must be [pages, page_size, 128], got shape (256, 128)"),
    (_call(nope=torch.zeros(4, 64, 64, dtype=torch.int32)), ValueError,
     "nope_cache must be [pages, page_size, 128] = [*, *, 128], got shape (4, 64, 64)"),
    (_call(rope=torch.zeros(4, 64, 128, dtype=torch.int32)), ValueError,
     "rope_cache must be [pages, page_size // 4, 128] = [4, 16, 128], got shape (4, 64, 128)"),
    (_call(indices=torch.zeros(2, 256, dtype=torch.int32)), ValueError, "indices must be [N], got shape (2, 256)"),
    (_call(top_k=100), ValueError, "top_k must be a positive multiple of 128, got 100"),
    (_call(indices=_indices(384)), ValueError, "the number of indices (384) must be a multiple of top_k=256"),
    (_call(num_valid=torch.zeros(1, dtype=torch.int64)), TypeError, "num_valid_indices must be int32"),
    (_call(num_valid=torch.zeros(2, dtype=torch.int32)), ValueError, "num_valid_indices must be [1] = [1]"),
])
def test_bad_calls_fail_with_the_ops_own_message(ops, call, error, message):
    with pytest.raises(error, match="tokamax csa_gather") as info:
        call(ops)
    assert message in str(info.value)
