"""The Torch ops on CPU tensors (interpret mode), against Torch references: forward and gradients.

Also: op names carry this build's namespace, meta and fake tensors give shapes and dtypes,
DLPack does not copy, and bad calls fail in the op's own words.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.jax.cases import rng

SIZES = [64, 0, 100, 92]  # an empty group; sizes off the 128 tile


def _randn(*shape: int, seed: int, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:  # noqa: ANN001
    return torch.from_numpy(rng(seed).standard_normal(shape).astype("float32") * scale).to(dtype)


def _ragged_reference(lhs: torch.Tensor, rhs: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Row block g of lhs times rhs[g], in float64; rows past the groups are zero."""
    out, start = torch.zeros(lhs.shape[0], rhs.shape[2], dtype=torch.float64), 0
    for g, size in enumerate(sizes):
        out[start:start + size] = lhs[start:start + size].double() @ rhs[g].double()
        start += size
    return out


@pytest.mark.kernels_ci
def test_ops_live_in_this_builds_namespace(tokamax, ops):
    # As kernel-builder's noarch _ops.py: _tokamax_<backend torch runs on>_<this build's id>. The kernel's
    # module name (its metadata id) always says tpu; on this CPU host the namespace says cpu.
    names = importlib.import_module(f"{tokamax.__name__}._ops")
    build_id = tokamax.__name__.removeprefix("_tokamax_tpu_")
    assert names._OPS_NAME == f"_tokamax_{names.get_backend()}_{build_id}" and build_id != tokamax.__name__
    for op in (ops.gmm_op, ops.tgmm_op, ops.splash_op, ops.gmm_v2_op):
        assert op._qualname.split("::")[0] == names._OPS_NAME


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("transpose_rhs", [False, True])
def test_gmm_forward_and_gradients_match_torch(ops, dtype, transpose_rhs):
    lhs = _randn(256, 128, seed=1, dtype=dtype).requires_grad_()
    rhs_kn = _randn(4, 128, 256, seed=2, dtype=dtype)
    rhs = (rhs_kn.transpose(1, 2).contiguous() if transpose_rhs else rhs_kn).requires_grad_()
    sizes = torch.tensor(SIZES, dtype=torch.int32)
    out = ops.gmm(lhs, rhs, sizes, transpose_rhs=transpose_rhs)
    cotangent = _randn(256, 256, seed=3, dtype=dtype)
    (out.float() * cotangent.float()).sum().backward()

    lhs64 = lhs.detach().double().requires_grad_()
    rhs64 = rhs.detach().double().requires_grad_()
    ref = _ragged_reference(lhs64, rhs64.transpose(1, 2) if transpose_rhs else rhs64, SIZES)
    (ref * cotangent.double()).sum().backward()
    # f32: only summation order differs. bf16: inputs are bf16 either way; the kernel rounds its
    # output (and the gradients) to bf16, a relative step of 2^-8.
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=1e-1)
    assert out.dtype == dtype and out.shape == (256, 256)
    torch.testing.assert_close(out.double(), ref.detach(), **tol)
    torch.testing.assert_close(lhs.grad.double(), lhs64.grad, **tol)
    torch.testing.assert_close(rhs.grad.double(), rhs64.grad, **tol)


def _attention_reference(q, k, v, mask):  # noqa: ANN001, ANN202
    if k.dim() == 2:
        k, v = k.expand(q.shape[0], *k.shape), v.expand(q.shape[0], *v.shape)
    scores = torch.einsum("hqd,hkd->hqk", q, k).masked_fill(~mask, float("-inf"))
    return torch.einsum("hqk,hkd->hqd", scores.softmax(-1), v)


@pytest.mark.parametrize(("mqa", "window"), [(False, None), (True, None), (False, (64, 0))],
                         ids=["mha-causal", "mqa-causal", "mha-local"])
def test_splash_attention_forward_and_gradients_match_torch(ops, mqa, window):
    q = _randn(2, 256, 128, seed=4, scale=128**-0.5).requires_grad_()
    kv_shape = (256, 128) if mqa else (2, 256, 128)
    k = _randn(*kv_shape, seed=5, scale=128**-0.5).requires_grad_()
    v = _randn(*kv_shape, seed=6).requires_grad_()
    out = ops.splash_attention(q, k, v, window=window)
    cotangent = _randn(2, 256, 128, seed=7)
    (out * cotangent).sum().backward()

    i, j = torch.arange(256)[:, None], torch.arange(256)[None, :]
    mask = (j <= i) if window is None else (j >= i - window[0]) & (j <= i + window[1])
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = _attention_reference(q64, k64, v64, mask)
    (ref * cotangent.double()).sum().backward()
    # f32 inputs; the online softmax reorders f32 arithmetic (differences of a few 1e-7).
    tol = dict(rtol=1e-4, atol=2e-5)
    torch.testing.assert_close(out.double(), ref.detach(), **tol)
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        torch.testing.assert_close(got.double(), want, **tol)


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
@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda o: o.gmm(torch.zeros(256, 128), torch.zeros(4, 128, 256), torch.zeros(3, dtype=torch.int32)),
     ValueError, "group_sizes must have one entry per group (4), got shape (3,)"),
    (lambda o: o.gmm(torch.zeros(256, 128), torch.zeros(4, 128, 256), torch.zeros(4, dtype=torch.int64)),
     TypeError, "group_sizes must be int32, got torch.int64"),
    (lambda o: o.gmm(torch.zeros(256, 128, dtype=torch.float16), torch.zeros(4, 128, 256, dtype=torch.float16),
                     torch.zeros(4, dtype=torch.int32)), TypeError, "lhs must be bfloat16 or float32"),
    (lambda o: o.gmm(torch.zeros(256, 128), torch.zeros(4, 128, 256, dtype=torch.bfloat16),
                     torch.zeros(4, dtype=torch.int32)), TypeError, "must share a dtype"),
    (lambda o: o.gmm(torch.zeros(256, 128, 1), torch.zeros(4, 128, 256), torch.zeros(4, dtype=torch.int32)),
     ValueError, "lhs must be [m, k], got shape (256, 128, 1)"),
    (lambda o: o.gmm(torch.zeros(256, 64), torch.zeros(4, 128, 256), torch.zeros(4, dtype=torch.int32)),
     ValueError, "lhs has k=64 columns but rhs has k=128"),
    (lambda o: o.gmm(torch.zeros(256, 128), torch.zeros(4, 128, 256, device="meta"),
                     torch.zeros(4, dtype=torch.int32)), ValueError, "all tensors must be on one device"),
    (lambda o: o.gmm([[1.0]], torch.zeros(4, 128, 256), torch.zeros(4, dtype=torch.int32)),
     TypeError, "lhs must be a torch.Tensor, got list"),
    (lambda o: o.splash_attention(torch.zeros(2, 256, 128), torch.zeros(3, 256, 128), torch.zeros(3, 256, 128)),
     ValueError, "q's 2 heads must be a multiple of k's 3"),
    (lambda o: o.splash_attention(torch.zeros(2, 256, 128), torch.zeros(256, 64), torch.zeros(256, 64)),
     ValueError, "head_dim differs: q 128, k 64"),
])
def test_bad_calls_fail_with_the_ops_own_message(ops, call, error, message):
    with pytest.raises(error, match="tokamax") as info:
        call(ops)
    assert message in str(info.value)


def test_gmm_takes_sizes_the_kernel_refuses_through_upstreams_fallback(ops):
    """m=200, k=136, n=264: the Mosaic kernel refuses (on v6e); upstream's public op, and so this
    op, falls back to XLA's ragged dot. Values and gradients against the float64 reference."""
    sizes = [50, 0, 150]
    lhs = _randn(200, 136, seed=11).requires_grad_()
    rhs = _randn(3, 136, 264, seed=12).requires_grad_()
    out = ops.gmm(lhs, rhs, torch.tensor(sizes, dtype=torch.int32))
    cotangent = _randn(200, 264, seed=13)
    (out * cotangent).sum().backward()
    lhs64, rhs64 = (x.detach().double().requires_grad_() for x in (lhs, rhs))
    ref = _ragged_reference(lhs64, rhs64, sizes)
    (ref * cotangent.double()).sum().backward()
    tol = dict(rtol=1e-5, atol=1e-4)  # f32; summation order only
    torch.testing.assert_close(out.double(), ref.detach(), **tol)
    torch.testing.assert_close(lhs.grad.double(), lhs64.grad, **tol)
    torch.testing.assert_close(rhs.grad.double(), rhs64.grad, **tol)


def test_splash_attention_with_fewer_kv_heads_matches_torch(ops):
    """Grouped-query attention: 4 q heads over 2 kv heads, causal; forward and gradients."""
    q = _randn(4, 256, 128, seed=21, scale=128**-0.5).requires_grad_()
    k = _randn(2, 256, 128, seed=22, scale=128**-0.5).requires_grad_()
    v = _randn(2, 256, 128, seed=23).requires_grad_()
    out = ops.splash_attention(q, k, v)
    cotangent = _randn(4, 256, 128, seed=24)
    (out * cotangent).sum().backward()
    i, j = torch.arange(256)[:, None], torch.arange(256)[None, :]
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = _attention_reference(q64, k64.repeat_interleave(2, 0), v64.repeat_interleave(2, 0), j <= i)
    (ref * cotangent.double()).sum().backward()
    tol = dict(rtol=1e-4, atol=2e-5)  # as the MHA test: f32, online-softmax reordering
    torch.testing.assert_close(out.double(), ref.detach(), **tol)
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        torch.testing.assert_close(got.double(), want, **tol)


@pytest.mark.kernels_ci
def test_the_torch_op_runs_upstreams_tuned_config(ops, tokamax):
    """Torch gmm at a Mixtral-sized key on v6e lowers to the Mosaic kernel with upstream's table entry
    (tiles 512, 4096, 1024), not the raw kernel's 128-tiles: it goes through the public op's choice."""
    import functools

    import jax
    import jax.numpy as jnp

    specs = (jax.ShapeDtypeStruct((8192, 4096), jnp.bfloat16), jax.ShapeDtypeStruct((8, 4096, 14336), jnp.bfloat16),
             jax.ShapeDtypeStruct((8,), jnp.int32))
    emulation = tokamax.emulation
    with tokamax.ops.config.cross_compile(True), emulation.emulated_chip("v6e"), \
            jax.sharding.use_abstract_mesh(emulation.tpu_mesh("v6e")):
        text = jax.jit(functools.partial(ops.families["ragged_dot"]._gmm_jax, transpose_rhs=False)).trace(*specs).lower(
            lowering_platforms=("tpu",)).as_text()
    assert text.count("tpu_custom_call") == 1
    assert r"\22tile_m\22:512,\22tile_k\22:4096,\22tile_n\22:1024" in text


@pytest.mark.kernels_ci
def test_gmm_v2_says_why_it_cannot_run_here(ops):
    import jax

    args = (torch.zeros(256, 128), torch.zeros(4, 128, 256), torch.zeros(4, dtype=torch.int32))
    if jax.__version__ < "0.11":  # the Torch tier's jax: the newest that installs beside torch-tpu on 3.11
        with pytest.raises(RuntimeError, match=r"gmm_v2 needs jax >= 0.11.1 \(pltpu.TensorCoreMesh\)"):
            ops.gmm_v2(*args)
    else:
        with pytest.raises(NotImplementedError, match="runs on TPU only"):
            ops.gmm_v2(*args)
