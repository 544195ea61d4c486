"""The Torch linear softmax cross-entropy loss: (loss, lse) and the gradients in x and w against a float64 Torch
reference on CPU tensors (interpret mode), sizes off the lanes and ignored labels (the padded per-row op), the
shared checks (fakes against JAX shapes, symbolic tracing, one graph for two batch sizes, the public Op in the
lowering), autograd on meta tensors, and bad calls.

The kernels build `pltpu.TensorCoreMesh`, which jax 0.10.2 (the Torch tier's) lacks: there the op refuses CPU and
TPU tensors with the jax version it needs, and the tests that trace the kernel are skipped; meta tensors (fakes,
autograd wiring, torch.compile) work with any jax.
"""

from __future__ import annotations

import contextlib

import jax
import pytest
import torch
from jax.experimental.pallas import tpu as pltpu

from tests.jax.cases import rng

from . import checks

OP = "linear_softmax_cross_entropy_loss"
HAS_TC_MESH = hasattr(pltpu, "TensorCoreMesh")
needs_tc_mesh = pytest.mark.skipif(
    not HAS_TC_MESH, reason=f"the kernels build pltpu.TensorCoreMesh (jax >= 0.11.1); this is jax {jax.__version__}")
B, H, V = 256, 128, 512  # as tests/jax/public/test_public_linear_softmax_cross_entropy_loss_numerics.py


def _operands(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = checks.randn(B, H, seed=5, scale=H ** -0.5, dtype=dtype)
    w = checks.randn(H, V, seed=6, dtype=dtype)
    labels = torch.from_numpy(rng(7).integers(0, V, size=B).astype("int32"))
    return x, labels, w


def _reference(x: torch.Tensor, labels: torch.Tensor, w: torch.Tensor, reduction: str
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, lse) in float64: logits = x @ w, log-sum-exp per row, minus the labelled logit."""
    logits = x.double() @ w.double()
    lse = torch.logsumexp(logits, dim=-1)
    per_row = lse - logits.gather(1, labels.long()[:, None])[:, 0]
    return {"sum": per_row.sum(), "mean": per_row.mean(), "none": per_row}[reduction], lse


@contextlib.contextmanager
def _cross_compile(tokamax):  # noqa: ANN001, ANN202
    """Upstream's Op refuses CPU devices unless cross-compiling, as the CPU kernel and the lowering do."""
    with tokamax.ops.config.cross_compile(True):
        yield


@pytest.mark.kernels_ci
@pytest.mark.jax_floor
def test_says_which_jax_it_needs(ops):
    x, labels, w = _operands()
    if not HAS_TC_MESH:  # the Torch tier's jax 0.10.2: the newest that installs beside torch-tpu on 3.11
        with pytest.raises(RuntimeError, match=rf"{OP} needs jax >= 0.11.1 \(pltpu.TensorCoreMesh\)"):
            ops.linear_softmax_cross_entropy_loss(x, labels, w)
        with pytest.raises(RuntimeError, match=r"needs jax >= 0.11.1"):  # the op handle too, from its JAX side
            ops.linear_softmax_cross_entropy_loss_op(x, labels, w, "sum")
    else:
        loss, lse = ops.linear_softmax_cross_entropy_loss(x, labels, w)
        assert loss.shape == () and lse.shape == (B,)


@needs_tc_mesh
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
def test_loss_lse_and_gradients_match_torch(ops, reduction):
    x, labels, w = _operands()
    x.requires_grad_()
    w.requires_grad_()
    loss, lse = ops.linear_softmax_cross_entropy_loss(x, labels, w, reduction=reduction)
    cotangent = checks.randn(*loss.shape, seed=8) if reduction == "none" else torch.tensor(1.5)
    (loss * cotangent).sum().backward()

    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref_loss, ref_lse = _reference(x64, labels, w64, reduction)
    (ref_loss * cotangent.double()).sum().backward()
    # f32 operands, exact f32 matmuls in interpret mode: only the tiled summation order and the online softmax
    # differ from float64 (~1e-6 relative); the summed loss is ~1.6e3 (256 rows of ~6), hence atol 2e-3 there.
    tol = dict(rtol=2e-5, atol=2e-3 if reduction == "sum" else 2e-5)
    assert loss.dtype == lse.dtype == torch.float32 and lse.shape == (B,) and not lse.requires_grad
    torch.testing.assert_close(loss.double(), ref_loss.detach(), **tol)
    torch.testing.assert_close(lse.double(), ref_lse.detach(), rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=2e-5, atol=2e-5)


@needs_tc_mesh
def test_bf16_loss_and_gradients_match_torch(ops):
    x, labels, w = _operands(torch.bfloat16)
    x.requires_grad_()
    w.requires_grad_()
    loss, _ = ops.linear_softmax_cross_entropy_loss(x, labels, w, reduction="mean")
    loss.backward()
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref_loss, _ = _reference(x64, labels, w64, "mean")
    ref_loss.backward()
    # bf16 operands (the reference takes the same bf16 values); f32 accumulation, loss in f32; the gradients
    # come back f32 from the kernel and are rounded to bf16 (2^-8 relative) for the bf16 leaves.
    assert x.grad.dtype == w.grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss.double(), ref_loss.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=2e-2, atol=1e-4)
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=2e-2, atol=1e-4)


@needs_tc_mesh
@pytest.mark.kernels_ci
@pytest.mark.parametrize("reduction", ["sum", "none"])
def test_fakes_match_jax_shapes(ops, tokamax, reduction):
    f = checks.family(ops, "linear_softmax_cross_entropy").custom_ops
    x, labels, w = torch.zeros(256, 128, dtype=torch.bfloat16), torch.zeros(256, dtype=torch.int32), \
        torch.zeros(128, 512, dtype=torch.bfloat16)
    loss = torch.zeros(256) if reduction == "none" else torch.zeros(())
    with _cross_compile(tokamax):
        checks.fake_matches_jax(ops, ops.linear_softmax_cross_entropy_loss_op, f._lsce_jax, x, labels, w, reduction)
        checks.fake_matches_jax(ops, ops.linear_softmax_cross_entropy_loss_bwd_op, f._lsce_bwd_jax, x, labels, w,
                                torch.zeros(256), loss, loss, reduction)


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    def step(x: torch.Tensor, labels: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        loss, lse = ops.linear_softmax_cross_entropy_loss(x, labels, w, reduction="none")
        return loss + lse

    def args(batch: int) -> tuple[torch.Tensor, ...]:
        return (torch.zeros(batch, 128, device="meta"), torch.zeros(batch, dtype=torch.int32, device="meta"),
                torch.zeros(128, 512, device="meta"))

    checks.traces_symbolically(step, *args(256))
    checks.compiles_once_for_two_sizes(step, args(256), args(384))


@pytest.mark.kernels_ci
def test_autograd_wiring_on_meta(ops):
    """Gradients reach x and w (in their dtypes) and not labels; lse is not differentiable (as upstream's
    backward ignores it). Meta tensors run only the fakes, so this holds with any jax."""
    x = torch.zeros(256, 128, dtype=torch.bfloat16, device="meta", requires_grad=True)
    w = torch.zeros(128, 512, dtype=torch.bfloat16, device="meta", requires_grad=True)
    labels = torch.zeros(256, dtype=torch.int32, device="meta")
    loss, lse = ops.linear_softmax_cross_entropy_loss(x, labels, w, reduction="mean")
    assert loss.shape == () and loss.requires_grad and not lse.requires_grad
    loss.backward()
    assert (x.grad.shape, x.grad.dtype) == (x.shape, x.dtype) and (w.grad.shape, w.grad.dtype) == (w.shape, w.dtype)


@needs_tc_mesh
@pytest.mark.kernels_ci
def test_runs_upstreams_public_op(ops):
    f = checks.family(ops, "linear_softmax_cross_entropy").custom_ops
    args = (torch.zeros(512, 256, dtype=torch.bfloat16), torch.zeros(512, dtype=torch.int32),
            torch.zeros(256, 1024, dtype=torch.bfloat16))
    assert checks.public_op_classes(ops, f._lsce_jax, *args, "sum") == {"PallasMosaicTpuLinearSoftmaxCrossEntropyLoss"}
    # the backward is upstream's VJP Op on the saved residual (lse) and loss, without a second forward
    assert checks.public_op_classes(ops, f._lsce_bwd_jax, *args, torch.zeros(512), torch.zeros(()), torch.zeros(()),
                                    "sum") == {"PallasMosaicTpuLinearSoftmaxCrossEntropyLossVjp"}


@needs_tc_mesh
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
def test_odd_sizes_and_ignored_labels_match_torch(ops, reduction):
    """37 rows, hidden 200, vocabulary 130 (all off the lanes), a third of the labels ignored."""
    x = checks.randn(37, 200, seed=11, scale=200 ** -0.5).requires_grad_()
    w = checks.randn(200, 130, seed=12).requires_grad_()
    labels = torch.from_numpy(rng(13).integers(0, 130, size=37).astype("int32"))
    labels[::3] = -100
    loss, lse = ops.linear_softmax_cross_entropy_loss(x, labels, w, reduction=reduction, ignore_index=-100)
    cotangent = checks.randn(37, seed=14) if reduction == "none" else torch.tensor(1.5)
    (loss * cotangent).sum().backward()
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    logits = x64 @ w64
    ref_lse = torch.logsumexp(logits, -1)
    valid = labels != -100
    rows = torch.where(valid, ref_lse - logits.gather(1, labels.clamp(min=0).long()[:, None])[:, 0], 0.0)
    ref = {"sum": rows.sum(), "mean": rows.sum() / valid.sum(), "none": rows}[reduction]
    (ref * cotangent.double()).sum().backward()
    torch.testing.assert_close(loss.double(), ref.detach(), rtol=2e-5, atol=2e-4)
    torch.testing.assert_close(lse.double(), ref_lse.detach(), rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=2e-5, atol=2e-5)


@pytest.mark.kernels_ci
def test_odd_sizes_trace_with_symbolic_sizes_and_wire_autograd_on_meta(ops):
    """The padded per-row op's fakes take symbolic sizes, and gradients reach x and w (not labels)."""
    def step(x: torch.Tensor, labels: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return ops.linear_softmax_cross_entropy_loss(x, labels, w, reduction="mean", ignore_index=-100)[0]

    def args(batch: int) -> tuple[torch.Tensor, ...]:
        return (torch.zeros(batch, 200, device="meta"), torch.zeros(batch, dtype=torch.int32, device="meta"),
                torch.zeros(200, 130, device="meta"))

    checks.traces_symbolically(lambda x, labels, w: ops.linear_softmax_cross_entropy_loss(
        x, labels, w, reduction="none", ignore_index=-100)[0], *args(37))
    checks.compiles_once_for_two_sizes(step, args(37), args(301))
    x = torch.zeros(37, 200, dtype=torch.bfloat16, device="meta", requires_grad=True)
    w = torch.zeros(200, 130, dtype=torch.bfloat16, device="meta", requires_grad=True)
    loss, lse = ops.linear_softmax_cross_entropy_loss(x, torch.zeros(37, dtype=torch.int32, device="meta"), w,
                                                      reduction="sum", ignore_index=-100)
    assert loss.shape == () and lse.shape == (37,) and not lse.requires_grad
    loss.backward()
    assert (x.grad.shape, x.grad.dtype) == (x.shape, x.dtype) and (w.grad.shape, w.grad.dtype) == (w.shape, w.dtype)


@needs_tc_mesh
@pytest.mark.kernels_ci
def test_rows_fakes_match_jax_shapes(ops, tokamax):
    f = checks.family(ops, "linear_softmax_cross_entropy").custom_ops
    x, labels, w = torch.zeros(37, 200, dtype=torch.bfloat16), torch.zeros(37, dtype=torch.int32), \
        torch.zeros(200, 130, dtype=torch.bfloat16)
    rows = torch.zeros(128)
    with _cross_compile(tokamax):
        checks.fake_matches_jax(ops, ops.linear_softmax_cross_entropy_rows_op, f._rows_jax, x, labels, w)
        checks.fake_matches_jax(ops, ops.linear_softmax_cross_entropy_rows_bwd_op, f._rows_bwd_jax, x, labels, w,
                                rows, rows, rows)


@pytest.mark.kernels_ci
def test_in_build_namespace(ops, tokamax):
    checks.assert_in_build_namespace(tokamax, ops.linear_softmax_cross_entropy_loss_op,
                                     ops.linear_softmax_cross_entropy_loss_bwd_op,
                                     ops.linear_softmax_cross_entropy_rows_op,
                                     ops.linear_softmax_cross_entropy_rows_bwd_op)


def _call(x=None, labels=None, w=None, **kw):  # noqa: ANN001, ANN003, ANN202
    def call(o):  # noqa: ANN001, ANN202
        return o.linear_softmax_cross_entropy_loss(
            torch.zeros(256, 128) if x is None else x,
            torch.zeros(256, dtype=torch.int32) if labels is None else labels,
            torch.zeros(128, 512) if w is None else w, **kw)
    return call


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("call", "error", "message"), [
    (_call(x=[[1.0]]), TypeError, "x must be a torch.Tensor, got list"),
    (_call(w=torch.zeros(128, 512, device="meta")), ValueError, "all tensors must be on one device"),
    (_call(x=torch.zeros(256, 128, dtype=torch.float16)), TypeError, "x must be bfloat16 or float32"),
    (_call(w=torch.zeros(128, 512, dtype=torch.bfloat16)), TypeError, "x and w must share a dtype"),
    (_call(x=torch.zeros(2, 256, 128)), ValueError, "x must be [batch, hidden], got shape (2, 256, 128)"),
    (_call(w=torch.zeros(512)), ValueError, "w must be [hidden, vocab], got shape (512,)"),
    (_call(labels=torch.zeros(256, dtype=torch.int64)), TypeError, "labels must be int32, got torch.int64"),
    (_call(labels=torch.zeros(255, dtype=torch.int32)), ValueError, "labels must be [batch] = [256], got shape (255,)"),
    (_call(w=torch.zeros(64, 512)), ValueError, "the hidden sizes must agree: x has 128, w has 64"),
    (_call(reduction="max"), ValueError, "reduction must be one of ['sum', 'mean', 'none'], got 'max'"),
    (_call(ignore_index=-1.5), TypeError, "ignore_index must be an int or None, got float"),
])
def test_bad_calls_fail_with_the_ops_own_message(ops, call, error, message):
    with pytest.raises(error, match="tokamax linear_softmax_cross_entropy_loss") as info:
        call(ops)
    assert message in str(info.value)


@needs_tc_mesh
@pytest.mark.parametrize(("label", "ignore_index"), [(512, None), (-1, -100), (-100, None)])
def test_labels_outside_the_vocabulary_are_refused_on_cpu(ops, label, ignore_index):
    """A label in no column would give its row loss = lse silently; on CPU tensors (reading them is free) the
    op refuses it, naming the values (on a TPU those rows' losses are NaN instead: no host sync)."""
    x, labels, w = _operands()
    labels[7] = label
    allowed = r"\[0, 512\)" + ("" if ignore_index is None else rf" or equal to ignore_index \({ignore_index}\)")
    with pytest.raises(ValueError, match=rf"tokamax {OP}: labels must be in {allowed}; got 1 outside, "
                                         rf"e.g. \[{label}\]"):
        ops.linear_softmax_cross_entropy_loss(x, labels, w, ignore_index=ignore_index)
