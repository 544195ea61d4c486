"""The Torch ragged-dot family (gmm, tgmm, ragged_dot, gmm_v2, tgmm_v2) on CPU tensors (interpret mode):
values and gradients against float64 Torch references, upstream's XLA fallback, upstream's tuned config,
the shared checks (fakes against JAX shapes, symbolic tracing, one graph for two sizes, the public Op)
and bad calls failing in the op's own words."""

from __future__ import annotations

import pytest
import torch

from . import checks


@pytest.mark.kernels_ci
def test_ragged_dot_is_gmm_without_transposition(ops, tokamax):
    lhs, rhs = checks.randn(256, 128, seed=1), checks.randn(2, 128, 128, seed=2)
    sizes = torch.tensor([100, 156], dtype=torch.int32)
    torch.testing.assert_close(ops.ragged_dot(lhs, rhs, sizes), ops.gmm(lhs, rhs, sizes), rtol=0, atol=0)
    want = torch.cat([lhs[:100].double() @ rhs[0].double(), lhs[100:].double() @ rhs[1].double()])
    torch.testing.assert_close(ops.ragged_dot(lhs, rhs, sizes).double(), want, rtol=1e-5, atol=1e-4)
    checks.assert_in_build_namespace(tokamax, ops.gmm_op, ops.gmm_bwd_op, ops.tgmm_op, ops.tgmm_v2_op)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("transpose_rhs", [False, True])
def test_fakes_match_jax_shapes(ops, transpose_rhs):
    f = checks.family(ops, "ragged_dot")
    lhs, rhs = torch.zeros(200, 128), torch.zeros(3, 256, 128) if transpose_rhs else torch.zeros(3, 128, 256)
    sizes = torch.zeros(3, dtype=torch.int32)
    checks.fake_matches_jax(ops, ops.gmm_op, f._gmm_jax, lhs, rhs, sizes, transpose_rhs, "")
    checks.fake_matches_jax(ops, ops.gmm_bwd_op, f._gmm_bwd_jax, lhs, rhs, sizes, torch.zeros(200, 256), transpose_rhs,
                            "")
    checks.fake_matches_jax(ops, ops.tgmm_op, f._tgmm_jax, lhs, torch.zeros(200, 64), sizes, "")


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    def step(lhs: torch.Tensor, rhs: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        return ops.ragged_dot(lhs, rhs, sizes)

    rhs, sizes = torch.zeros(2, 128, 64, device="meta"), torch.zeros(2, dtype=torch.int32, device="meta")
    checks.traces_symbolically(step, torch.zeros(320, 128, device="meta"), rhs, sizes)
    checks.compiles_once_for_two_sizes(step, (torch.zeros(320, 128, device="meta"), rhs, sizes),
                                       (torch.zeros(448, 128, device="meta"), rhs, sizes))


@pytest.mark.kernels_ci
def test_runs_upstreams_public_op(ops):
    f = checks.family(ops, "ragged_dot")
    args = (torch.zeros(256, 128, dtype=torch.bfloat16), torch.zeros(2, 128, 256, dtype=torch.bfloat16),
            torch.zeros(2, dtype=torch.int32), False, "")
    assert checks.public_op_classes(ops, f._gmm_jax, *args) == {"PallasMosaicTpuRaggedDot"}


SIZES = [64, 0, 100, 92]  # an empty group; sizes off the 128 tile


def _ragged_reference(lhs: torch.Tensor, rhs: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Row block g of lhs times rhs[g], in float64; rows past the groups are zero."""
    out, start = torch.zeros(lhs.shape[0], rhs.shape[2], dtype=torch.float64), 0
    for g, size in enumerate(sizes):
        out[start:start + size] = lhs[start:start + size].double() @ rhs[g].double()
        start += size
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("transpose_rhs", [False, True])
def test_gmm_forward_and_gradients_match_torch(ops, dtype, transpose_rhs):
    lhs = checks.randn(256, 128, seed=1, dtype=dtype).requires_grad_()
    rhs_kn = checks.randn(4, 128, 256, seed=2, dtype=dtype)
    rhs = (rhs_kn.transpose(1, 2).contiguous() if transpose_rhs else rhs_kn).requires_grad_()
    sizes = torch.tensor(SIZES, dtype=torch.int32)
    out = ops.gmm(lhs, rhs, sizes, transpose_rhs=transpose_rhs)
    cotangent = checks.randn(256, 256, seed=3, dtype=dtype)
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


def test_gmm_takes_sizes_the_kernel_refuses_through_upstreams_fallback(ops):
    """m=200, k=136, n=264: the Mosaic kernel refuses (on v6e); upstream's public op, and so this
    op, falls back to XLA's ragged dot. Values and gradients against the float64 reference."""
    sizes = [50, 0, 150]
    lhs = checks.randn(200, 136, seed=11).requires_grad_()
    rhs = checks.randn(3, 136, 264, seed=12).requires_grad_()
    out = ops.gmm(lhs, rhs, torch.tensor(sizes, dtype=torch.int32))
    cotangent = checks.randn(200, 264, seed=13)
    (out * cotangent).sum().backward()
    lhs64, rhs64 = (x.detach().double().requires_grad_() for x in (lhs, rhs))
    ref = _ragged_reference(lhs64, rhs64, sizes)
    (ref * cotangent.double()).sum().backward()
    tol = dict(rtol=1e-5, atol=1e-4)  # f32; summation order only
    torch.testing.assert_close(out.double(), ref.detach(), **tol)
    torch.testing.assert_close(lhs.grad.double(), lhs64.grad, **tol)
    torch.testing.assert_close(rhs.grad.double(), rhs64.grad, **tol)


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
        gmm = functools.partial(ops.families["ragged_dot"]._gmm_jax, transpose_rhs=False, autotuning="")
        text = jax.jit(gmm).trace(*specs).lower(
            lowering_platforms=("tpu",)).as_text()
    assert text.count("tpu_custom_call") == 2  # the grouped matmul, then the zeros past the groups (padded_rows)
    assert text.count("tokamax_padded_rows_zeroed") == 1
    assert r"\22tile_m\22:512,\22tile_k\22:4096,\22tile_n\22:1024" in text


@pytest.mark.kernels_ci
@pytest.mark.jax_floor
def test_gmm_v2_says_why_it_cannot_run_here(ops):
    import jax

    args = (torch.zeros(256, 128), torch.zeros(4, 128, 256), torch.zeros(4, dtype=torch.int32))
    if jax.__version__ < "0.11":  # the Torch tier's jax: the newest that installs beside torch-tpu on 3.11
        with pytest.raises(RuntimeError, match=r"gmm_v2 needs jax >= 0.11.1 \(pltpu.TensorCoreMesh\)"):
            ops.gmm_v2(*args)
    else:
        with pytest.raises(NotImplementedError, match="runs on TPU only"):
            ops.gmm_v2(*args)


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
])
def test_bad_calls_fail_with_the_ops_own_message(ops, call, error, message):
    with pytest.raises(error, match="tokamax") as info:
        call(ops)
    assert message in str(info.value)




@pytest.mark.kernels_ci
@pytest.mark.jax_floor
def test_the_jax_public_ops_say_which_jax_they_need(tokamax):
    """`tokamax.ops` (JAX users' calls): where the running jax lacks what upstream's kernel needs, a
    NotImplementedError naming the op and the jax; a fallback list runs without the v2 kernels there."""
    import jax
    import jax.numpy as jnp

    lhs, rhs, sizes = jnp.ones((256, 128), jnp.float32), jnp.ones((4, 128, 256), jnp.float32), \
        jnp.array([64, 0, 100, 92], jnp.int32)
    x, w, labels = jnp.ones((256, 128), jnp.float32), jnp.ones((128, 512), jnp.float32), jnp.zeros(256, jnp.int32)
    if jax.__version__ < "0.11":
        with pytest.raises(NotImplementedError, match=r"ops.ragged_dot\(implementation='mosaic_tpu_v2'\) needs jax >= "
                                                      r"0.11.1 \(pltpu.TensorCoreMesh\), this is jax 0.10"):
            tokamax.ops.ragged_dot(lhs, rhs, sizes, implementation="mosaic_tpu_v2")
        with pytest.raises(NotImplementedError, match=r"ops.linear_softmax_cross_entropy_loss needs jax >= 0.11.1"):
            tokamax.ops.linear_softmax_cross_entropy_loss(x, labels, w)
        with pytest.raises(NotImplementedError, match=r"ops.top_k needs jax >= 0.11.1 \(jax.experimental.mosaic"):
            tokamax.ops.top_k(x, k=8)
        # a list falls back past what cannot run: upstream's XLA implementation, equal to JAX's own
        out = tokamax.ops.ragged_dot(lhs, rhs, sizes, implementation=("mosaic_tpu_v2", "xla"))
        assert jnp.array_equal(out, jax.lax.ragged_dot(lhs, rhs, sizes))
    else:
        assert tokamax.ops._jax_floor.lacks(*tokamax.ops._jax_floor.TENSORCORE_MESH) is None
        assert tokamax.ops._jax_floor.lacks(*tokamax.ops._jax_floor.MOSAIC_OPT_LEVEL) is None
