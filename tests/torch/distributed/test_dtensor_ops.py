"""DTensors given to the Torch ops directly.

- Values (2 gloo ranks, `op_values`): splash attention split over the batch and over the heads,
  gmm over the experts' outputs, over the contraction and over the experts, the cross-entropy over
  the vocabulary and over rows: outputs and gradients against float64 Torch on the whole tensors,
  and the placements DTensor gave them.
- Placements and refusals (this process, a fake process group and meta tensors: the ops' fake
  kernels, no kernel runs): what each op gives for each split, the sinks' gradient, `transpose_rhs`
  telling the grouped matmul's splits apart, and every refused placement's message.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

from . import launcher

CASES = {  # case: (outputs' placements, gradients' placements)
    "splash over the batch": ([Shard(0)], dict(q=Shard(0), k=Shard(0), v=Shard(0))),
    "splash over the heads": ([Shard(1)], dict(q=Shard(1), k=Shard(1), v=Shard(1))),
    "splash multi-query over the heads": ([Shard(1)], dict(q=Shard(1), k=Partial(), v=Partial())),
    "gmm over the experts' outputs": ([Shard(1)], dict(lhs=Partial(), rhs=Shard(1))),
    "gmm over the contraction": ([Partial()], dict(lhs=Shard(1), rhs=Shard(2))),
    "gmm over the experts": ([Partial()], dict(lhs=Partial(), rhs=Shard(0))),
    "cross-entropy over the vocabulary, mean": ([Replicate(), Replicate()], dict(x=Replicate(), w=Shard(1))),
    "cross-entropy over the vocabulary, sum": ([Replicate(), Replicate()], dict(x=Replicate(), w=Shard(1))),
    "cross-entropy over the vocabulary, none": ([Replicate(), Replicate()], dict(x=Replicate(), w=Shard(1))),
    "cross-entropy over a vocabulary of 127": ([Replicate(), Replicate()], dict(x=Replicate(), w=Shard(1))),
    "cross-entropy over a vocabulary of 1": ([Replicate(), Replicate()], dict(x=Replicate(), w=Shard(1))),
    "cross-entropy over the vocabulary, bf16": ([Replicate(), Replicate()], dict(x=Replicate(), w=Shard(1))),
    "cross-entropy over rows, mean": ([Replicate(), Shard(0)], dict(x=Shard(0), w=Partial())),
    "cross-entropy over rows, sum": ([Replicate(), Shard(0)], dict(x=Shard(0), w=Partial())),
    "cross-entropy over rows, none": ([Shard(0), Shard(0)], dict(x=Shard(0), w=Partial())),
}
# float32 kernels against float64: summation order and the kernels' float32 accumulators; bf16 inputs
# against float64 of the same bf16 values: the kernel's bf16 matmul inputs are exact, its gradients are
# rounded to bf16 (8 bits of mantissa)
TOL = dict(rtol=2e-4, atol=2e-5)
TOL_BF16 = dict(rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("scenario", ["op_values"])
def test_values_and_placements(job, scenario, case):  # noqa: ANN001
    got = launcher.result(job["records"], scenario)[0][case]
    outs, grads = CASES[case]
    assert [p[0] for p in got["out_placements"]] == outs
    assert {n: p[0] for n, p in got["grad_placements"].items()} == grads
    tol = TOL_BF16 if "bf16" in case else TOL
    for i, (out, want) in enumerate(zip(got["outs"], got["want_outs"], strict=True)):
        torch.testing.assert_close(out.double(), want, **tol, msg=lambda m, i=i: f"output {i}: {m}")
    for name, want in got["want_grads"].items():
        torch.testing.assert_close(got["grads"][name].double(), want, **tol, msg=lambda m, n=name: f"d{n}: {m}")


@pytest.mark.parametrize("scenario", ["op_values"])
def test_a_label_outside_a_split_vocabulary_is_refused(job, scenario):  # noqa: ANN001
    """On CPU tensors (where reading them is free) every rank refuses it, before any collective; on a TPU
    its row's loss is NaN (tests/torch/ops/test_linear_softmax_cross_entropy.py)."""
    got = launcher.result(job["records"], scenario)[0]["cross-entropy over the vocabulary, a label outside it"]
    assert got["raised"] is not None and got["raised"].startswith(
        "ValueError: tokamax linear_softmax_cross_entropy_loss: labels must be in [0, 128) or equal to ignore_index "
        "(-100); got 1 outside, e.g. [128]"), got


# ---- placements and refusals on a fake process group ---------------------------------------------
@pytest.fixture(scope="module")
def mesh():  # noqa: ANN201
    """A 1-D mesh of 2 fake ranks (this process is rank 0; collectives do nothing)."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        pytest.skip(reason="a process group is already initialised in this process")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        yield init_device_mesh("cpu", (2,))
    finally:
        dist.destroy_process_group()


def _meta(mesh, placement, *shape, dtype=torch.float32, grad=False):  # noqa: ANN001, ANN002, ANN202
    """A DTensor of global `shape` on meta (its local shard's shape from the placement)."""
    local = list(shape)
    if isinstance(placement, Shard):
        local[placement.dim] = -(-shape[placement.dim] // 2)
    t = DTensor.from_local(torch.empty(local, device="meta", dtype=dtype), mesh, [placement], run_check=False,
                           shape=torch.Size(shape), stride=torch.empty(shape, device="meta").stride())
    return t.requires_grad_() if grad else t


def _grads(out, *inputs):  # noqa: ANN001, ANN002, ANN202
    cotangent = DTensor.from_local(torch.empty(out.to_local().shape, device="meta"), out.device_mesh, out.placements,
                                   run_check=False, shape=out.shape, stride=out.stride())
    return torch.autograd.grad(out, inputs, cotangent)


@pytest.mark.parametrize(("split", "sinks_grad"), [(Shard(0), Partial()), (Shard(1), Shard(0))])
def test_splash_placements_with_sinks(ops, mesh, split, sinks_grad):  # noqa: ANN001
    """The sinks follow the heads: split with them, and a batch split's sinks gradient is each rank's
    partial sum."""
    q, k, v = (_meta(mesh, split, 2, h, 256, 128, grad=True) for h in (4, 2, 2))
    sinks = _meta(mesh, Shard(0) if split == Shard(1) else Replicate(), 4, grad=True)
    out = ops.splash_attention(q, k, v, sinks=sinks)
    assert out.placements == (split,) and out.shape == (2, 4, 256, 128)
    dq, dk, dv, dsinks = _grads(out, q, k, v, sinks)
    assert [g.placements[0] for g in (dq, dk, dv)] == [split] * 3 and dsinks.placements == (sinks_grad,)


@pytest.mark.parametrize("split", [Shard(0), Shard(1), Replicate()], ids=["batch", "heads", "replicated"])
def test_splash_without_residuals_keeps_its_placements(ops, mesh, split):  # noqa: ANN001
    """Under torch.no_grad() the op's logsumexp is an empty [batch, heads, 0]: the rules' splits over dims 0
    and 1 still hold for it."""
    q, k, v = (_meta(mesh, split, 2, h, 256, 128) for h in (4, 2, 2))
    flags = (True, -1, -1, 0, -1.0, False)
    with torch.no_grad():
        out = ops.splash_attention(q, k, v)
        stats = ops.splash_op(q, k, v, None, None, None, *flags)
    assert out.placements == (split,) and out.shape == (2, 4, 256, 128)
    assert [(t.placements, t.shape) for t in stats[1:]] == [((split,), (2, 4, 0))]


def test_multi_query_attention_split_over_heads_keeps_kv_whole(ops, mesh):  # noqa: ANN001
    """k and v stay replicated; their gradients are each rank's partial sum over its heads (the values:
    "splash multi-query over the heads" above)."""
    q = _meta(mesh, Shard(1), 2, 4, 256, 128, grad=True)
    k, v = (_meta(mesh, Replicate(), 2, 256, 128, grad=True) for _ in range(2))
    out = ops.splash_attention(q, k, v)
    assert out.placements == (Shard(1),)
    dq, dk, dv = _grads(out, q, k, v)
    assert (dq.placements, dk.placements, dv.placements) == ((Shard(1),), (Partial(),), (Partial(),))


@pytest.mark.kernels_ci
def test_gmm_splits_follow_transpose_rhs(ops, mesh):  # noqa: ANN001
    """The same rhs placement is the experts' outputs with [groups, k, n] and the contraction with [groups,
    n, k]: DTensor's cache keys on `transpose_rhs` too."""
    sizes = _meta(mesh, Replicate(), 4, dtype=torch.int32)
    rhs = _meta(mesh, Shard(2), 4, 256, 256)
    lhs = _meta(mesh, Replicate(), 96, 256)
    assert ops.gmm(lhs, rhs, sizes).placements == (Shard(1),)
    assert ops.gmm(lhs, rhs, sizes, transpose_rhs=True).placements == (Partial(),)
    assert ops.gmm(lhs, rhs, sizes).placements == (Shard(1),)


REFUSALS = {
    "splash over the sequence": (
        lambda ops, mesh: ops.splash_attention(*(_meta(mesh, Shard(2), 2, h, 256, 128) for h in (4, 2, 2))),
        r"tokamax splash_attention: q is split over its sequence \(Shard\(2\)\).*split over the batch \(Shard\(0\)\) "
        r"or the heads \(Shard\(1\)\)"),
    "splash over head_dim": (
        lambda ops, mesh: ops.splash_attention(*(_meta(mesh, Shard(3), 2, h, 256, 128) for h in (4, 2, 2))),
        r"tokamax splash_attention: q is split over head_dim \(Shard\(3\)\)"),
    "splash heads that do not divide": (
        lambda ops, mesh: ops.splash_attention(_meta(mesh, Shard(1), 2, 3, 256, 128),
                                               *(_meta(mesh, Shard(1), 2, 1, 256, 128) for _ in range(2))),
        r"tokamax splash_attention: .*q's 3 heads and k's 1 key/value heads do not divide by 2: split over the "
        r"batch"),
    "splash on a 2-D mesh": (
        lambda ops, mesh: ops.splash_attention(*(DTensor.from_local(
            torch.empty(2, h, 256, 128, device="meta"), init_device_mesh("cpu", (1, 2)), [Replicate(), Shard(0)],
            run_check=False) for h in (4, 2, 2))),
        r"tokamax splash_attention: q is a DTensor on a 2-D mesh \(\(Replicate\(\), Shard\(dim=0\)\)\).*1-D meshes"),
    "gmm's custom op over the experts": (
        lambda ops, mesh: ops.gmm_op(_meta(mesh, Replicate(), 96, 256), _meta(mesh, Shard(0), 4, 256, 256),
                                     _meta(mesh, Replicate(), 4, dtype=torch.int32), False, ""),
        r"tokamax gmm: rhs is split over its experts \(Shard\(0\)\).*call tokamax.torch_ops.gmm"),
    "gmm over rows": (
        lambda ops, mesh: ops.gmm(_meta(mesh, Shard(0), 96, 256), _meta(mesh, Replicate(), 4, 256, 256),
                                  _meta(mesh, Replicate(), 4, dtype=torch.int32)),
        r"tokamax gmm: lhs is split over its rows \(Shard\(0\)\); rows belong to experts by group_sizes"),
    "gmm over uneven experts": (
        lambda ops, mesh: ops.gmm(_meta(mesh, Replicate(), 96, 256), _meta(mesh, Shard(0), 3, 256, 256),
                                  _meta(mesh, Replicate(), 3, dtype=torch.int32)),
        r"tokamax gmm: rhs's 3 experts do not divide by 2 ranks"),
    "cross-entropy over the hidden size": (
        lambda ops, mesh: ops.linear_softmax_cross_entropy_loss(
            _meta(mesh, Shard(1), 48, 256), _meta(mesh, Replicate(), 48, dtype=torch.int32),
            _meta(mesh, Shard(0), 256, 128)),
        r"tokamax linear_softmax_cross_entropy_loss: got x Shard\(dim=1\), labels Replicate\(\), w Shard\(dim=0\); "
        r"it takes rows split"),
    # read as replicated, each rank's own x would give every rank's loss and keep dw unreduced
    "cross-entropy with a plain x and labels beside a replicated w": (
        lambda ops, mesh: ops.linear_softmax_cross_entropy_loss(
            torch.empty(48, 256, device="meta"), torch.empty(48, dtype=torch.int32, device="meta"),
            _meta(mesh, Replicate(), 256, 128)),
        r"tokamax linear_softmax_cross_entropy_loss: x and labels are plain tensors beside DTensors \(w "
        r"Replicate\(\)\); a plain tensor does not say whether every rank holds it whole or its own part.*"
        r"DTensor.from_local\(t, mesh, \[Replicate\(\)\]\)"),
    # read as replicated, w's gradient would be each rank's partial sum
    "cross-entropy over rows with a plain w": (
        lambda ops, mesh: ops.linear_softmax_cross_entropy_loss(
            _meta(mesh, Shard(0), 48, 256), _meta(mesh, Shard(0), 48, dtype=torch.int32),
            torch.empty(256, 128, device="meta")),
        r"tokamax linear_softmax_cross_entropy_loss: w is a plain tensor beside DTensors \(x Shard\(dim=0\), labels "
        r"Shard\(dim=0\)\)"),
    "the per-row custom op over rows": (
        lambda ops, mesh: ops.linear_softmax_cross_entropy_rows_op(
            _meta(mesh, Shard(0), 48, 256), _meta(mesh, Shard(0), 48, dtype=torch.int32),
            _meta(mesh, Replicate(), 256, 128)),
        r"tokamax linear_softmax_cross_entropy_rows: the custom op takes replicated DTensors only, got argument 0 "
        r"Shard\(dim=0\), argument 1 Shard\(dim=0\); call tokamax.torch_ops.linear_softmax_cross_entropy_loss"),
}


@pytest.mark.kernels_ci
@pytest.mark.parametrize("case", list(REFUSALS))
def test_refused_placements_say_what_to_do(ops, mesh, case):  # noqa: ANN001
    call, message = REFUSALS[case]
    with pytest.raises(NotImplementedError, match=message) as refused:
        call(ops, mesh)
    assert "does not have a sharding strategy registered" not in str(refused.value)
