"""TRL's fused LM head on the kernel (`integrations.trl`), call by call, on CPU tensors in interpret
mode: `head.chunked_log_probs` against TRL 1.16's own `ChunkedLogProbFunction` and against float64
Torch on the same arguments (every output, the gradients TRL's function has: hidden, weight and bias
through log_probs and entropy; none through the others), with a bias, a logit scale, a soft cap and
a temperature, and TRL's quirks (a soft cap of 0 is a cap of 1; targets of ignored positions are 0);
which function serves which model (`dispatch`): a marked model the kernel, any other model and any
call the kernel cannot serve TRL's own, with the reason said once; a TRL of another signature left
alone; the entropy of confident rows (logits ~40) against TRL's function and float64; ignored labels
(-100) through TRL's fused forward; loss options refused under TRL's head; `use_fused_loss` after TRL's
head keeps it; a reference model out of reach (TRL imported after `use_fused_loss`) said once."""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch
import transformers

pytest.importorskip("trl", reason="TRL is pinned in the main Torch tier only (requirements/torch-tier.in)")
import trl.trainer.utils as trl_utils  # noqa: E402
from trl.kernels import ChunkedLogProbFunction  # noqa: E402

from tests.jax.cases import rng  # noqa: E402
from tests.jax.lm_head.numerics import U, confident_logits, entropy_bound  # noqa: E402
from tests.torch.ops import checks  # noqa: E402

ROWS, HIDDEN, VOCAB = 45, 64, 260
OUTPUTS = ("entropy", "log_sum_sq_probs", "mean_logits", "is_top1")


def _args(seed: int = 0, bias: bool = True) -> list:
    hidden = checks.randn(ROWS, HIDDEN, seed=seed, scale=HIDDEN ** -0.5).requires_grad_()
    weight = checks.randn(VOCAB, HIDDEN, seed=seed + 1).requires_grad_()
    b = checks.randn(VOCAB, seed=seed + 2, scale=0.25).requires_grad_() if bias else None
    targets = torch.from_numpy(rng(seed + 3).integers(0, VOCAB, size=ROWS))
    return [hidden, weight, b, targets]


def _run(fn, args: list, options: tuple) -> tuple[tuple, list]:  # noqa: ANN001
    """fn's outputs, and the gradients of a fixed weighting of log_probs and entropy."""
    leaves = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
              for a in args]  # float32 leaves; the float64 reference upcasts inside, so its gradients are float32
    out = fn(*leaves, *options)
    g = [checks.randn(ROWS, seed=40 + i) for i in range(2)]
    (g[0] * out[0] + g[1] * out[1]).sum().backward()
    return out, [a.grad for a in leaves[:3] if isinstance(a, torch.Tensor)]


def _float64(hidden, weight, bias, targets, temperature, chunk, cap, scale, outputs):  # noqa: ANN001, ANN202
    """TRL's definitions in float64: z = cap tanh(scale l / cap) / T."""
    raw = hidden.double() @ weight.double().T + (0 if bias is None else bias.double())
    y = raw * scale
    if cap is not None:
        cap = cap or 1.0
        y = cap * torch.tanh(y / cap)
    logp = torch.log_softmax(y / temperature, -1)
    z = y / temperature
    rows = torch.arange(hidden.shape[0])
    return (logp[rows, targets], -(logp.exp() * logp).sum(-1), torch.logsumexp(2 * logp, -1),
            z.mean(-1).detach(), z.argmax(-1) == targets)


@pytest.fixture(scope="module")
def head(tokamax):  # noqa: ANN001, ANN201
    return importlib.import_module(f"{tokamax.__name__}.integrations.trl.head")


@pytest.mark.parametrize("options", [(1.0, 32768, None, 1.0, OUTPUTS), (0.7, 32768, 3.0, 1.5, OUTPUTS),
                                     (0.9, 4096, 0.0, 0.25, ("entropy",))],
                         ids=["plain", "cap-scale-temperature", "cap-zero-two-outputs"])
def test_outputs_and_gradients_equal_trls_function_and_float64(head, options):
    args = _args(bias=options[2] is not None)
    got, got_grads = _run(head.chunked_log_probs, args, options)
    theirs, their_grads = _run(ChunkedLogProbFunction.apply, args, options)
    want, want_grads = _run(_float64, args, options)
    for i, name in enumerate(("log_probs", *OUTPUTS)):
        if name != "log_probs" and name not in options[4]:
            assert got[i] is None and theirs[i] is None, name
            continue
        assert got[i].shape == theirs[i].shape == (ROWS,) and got[i].dtype == theirs[i].dtype, name
        if name == "is_top1":
            assert torch.equal(got[i], theirs[i]) and torch.equal(got[i], want[i])
            continue
        assert got[i].requires_grad == theirs[i].requires_grad, name
        torch.testing.assert_close(got[i], theirs[i], rtol=1e-5, atol=2e-5, msg=lambda m, n=name: f"{n}: {m}")
        torch.testing.assert_close(got[i].double(), want[i].detach(), rtol=1e-5, atol=2e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")
    names = ("hidden", "weight", "bias")[:len(got_grads)]
    for name, g, t, w in zip(names, got_grads, their_grads, want_grads, strict=True):
        torch.testing.assert_close(g, t, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"d{n}: {m}")
        torch.testing.assert_close(g.double(), w.double(), rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"d{n}: {m}")


def test_entropy_of_confident_rows_against_trls_function_and_float64(head):
    """Near-one-hot rows with logits ~ +-40 (the hidden states one-hot, so the logits are the weight's columns
    exactly, as float64 sees them): ours >= 0 and within float32's bound of its own rounding (the kernel
    accumulates the entropy shifted by the row's maximum); TRL's own function, which takes lse - E_p[z] of two
    numbers of ~40, within its bound of ~ulp(40) times the sizes (so the two agree to TRL's precision)."""
    rows, vocab = 128, 8
    z = confident_logits(rows, vocab, seed=5)
    hidden, weight = torch.eye(rows), torch.from_numpy(z.T.copy())
    targets = torch.from_numpy(z.argmax(1))
    options = (1.0, 32768, None, 1.0, ("entropy",))
    ours = head.chunked_log_probs(hidden, weight, None, targets, *options)[1].double()
    theirs = ChunkedLogProbFunction.apply(hidden, weight, None, targets, *options)[1].double()
    want, bound = (torch.from_numpy(a) for a in entropy_bound(z))
    assert (ours >= 0).all(), ours[ours < 0]
    assert ((ours - want).abs() < bound).all(), ((ours - want).abs() / bound).max()
    # TRL: xs = sum e^(z-m) z to u (2 vocab + max|z - m| + 3) max|z| once divided by s, lse to u |lse| more
    z64 = torch.from_numpy(z).double()
    depth = (z64.max(1, keepdim=True).values - z64).max(1).values
    trl_bound = U * ((2 * vocab + depth + 5) * z64.abs().max(1).values + vocab + 1)
    assert ((theirs - want).abs() < trl_bound).all(), ((theirs - want).abs() / trl_bound).max()


def _model(tokamax, marked: bool):  # noqa: ANN001, ANN202
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64)).train()
    model.set_attn_implementation("sdpa")
    return tokamax.use_fused_loss(model) if marked else model


@pytest.fixture
def calls(tokamax):  # noqa: ANN001, ANN201
    dispatch = importlib.import_module(f"{tokamax.__name__}.integrations.trl.dispatch")
    before = dict(dispatch.calls)
    yield lambda: {k: v - before[k] for k, v in dispatch.calls.items()}


@pytest.mark.kernels_ci
def test_each_model_gets_the_function_it_asked_for(tokamax, calls):
    """TRL's patched forward on a marked model runs the kernel; on an unmarked one (the same process, TRL's
    name already bound to the dispatcher) TRL's own; a deepcopy of a marked model (TRL's reference model)
    is marked too."""
    import copy

    ids = torch.randint(2, VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))
    for marked, want in ((True, {"kernel": 1, "trl": 0}), (False, {"kernel": 1, "trl": 1})):
        model = _model(tokamax, marked)
        trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy"))
        out = model(input_ids=ids, labels=ids, fused_lm_head=True)
        assert out.log_probs.shape == (2, 8) and out.entropy is not None
        assert calls() == want
    reference = copy.deepcopy(_model(tokamax, True))
    trl_utils.add_fused_lm_head(reference, outputs=("log_probs",))
    with torch.no_grad():
        reference(input_ids=ids, labels=ids, fused_lm_head=True)
    assert calls() == {"kernel": 2, "trl": 1}
    assert isinstance(trl_utils._ChunkedLogProbFunction, importlib.import_module(
        f"{tokamax.__name__}.integrations.trl.dispatch").Dispatcher)


@pytest.mark.kernels_ci
def test_ignored_labels_reach_the_kernel_clamped(tokamax, calls):
    """TRL's fused forward off CUDA scores every position with the targets clamped to >= 0 and zeroes the
    ignored ones after: a -100 label never reaches lm_head_statistics (which refuses targets outside the
    vocabulary); the outputs equal TRL's own function's on the same model, 0 where ignored."""
    ids = torch.randint(2, VOCAB, (2, 9), generator=torch.Generator().manual_seed(4))
    labels = ids.clone()
    labels[0, :5] = labels[1, 7:] = -100
    outs = []
    for marked in (True, False):
        model = _model(tokamax, marked)
        trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy"))
        outs.append(model(input_ids=ids, labels=labels, fused_lm_head=True))
    assert calls() == {"kernel": 1, "trl": 1}
    ours, theirs = outs
    ignored = labels[:, 1:] == -100
    assert (ours.log_probs[ignored] == 0).all() and (ours.log_probs[~ignored] < 0).all()
    for name in ("log_probs", "entropy"):
        torch.testing.assert_close(getattr(ours, name), getattr(theirs, name), rtol=1e-5, atol=2e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")
    torch.testing.assert_close(ours.loss, theirs.loss, rtol=1e-5, atol=2e-5)


@pytest.mark.kernels_ci
def test_a_peft_model_given_to_use_fused_loss_runs_the_kernel(tokamax, calls):
    """A PEFT model wrapped by the user, then given to use_fused_loss (returned as given): TRL puts its head on
    get_base_model() and the trainer calls the PEFT model, as TRL's trainers do with a PeftModel."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_model(tokamax, False), LoraConfig(r=2, target_modules=["q_proj"], lora_dropout=0.0))
    assert tokamax.use_fused_loss(model) is model
    trl_utils.add_fused_lm_head(model.get_base_model(), outputs=("log_probs", "entropy"))
    ids = torch.randint(2, VOCAB, (2, 9), generator=torch.Generator().manual_seed(3))
    out = model(input_ids=ids, labels=ids, fused_lm_head=True)
    assert out.log_probs.shape == (2, 8) and out.entropy is not None
    assert calls() == {"kernel": 1, "trl": 0}


@pytest.mark.kernels_ci
def test_a_call_the_kernel_cannot_serve_runs_trls_own_and_says_why_once(tokamax, calls):
    """float16 (no TPU kernel takes it): TRL's function, one warning naming the reason, the same result."""
    model = _model(tokamax, True).half()
    trl_utils.add_fused_lm_head(model, outputs=("log_probs",))
    ids = torch.randint(2, VOCAB, (2, 9), generator=torch.Generator().manual_seed(2))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(2):
            model(input_ids=ids, labels=ids, fused_lm_head=True)
    said = [str(w.message) for w in seen if "tokamax use_fused_loss" in str(w.message)]
    assert said == ["tokamax use_fused_loss: TRL's fused LM head runs TRL's own function for LlamaForCausalLM: it "
                    "computes in torch.float16; the kernel takes bfloat16 and float32"], said
    assert calls() == {"kernel": 0, "trl": 2}


@pytest.mark.kernels_ci
def test_a_trl_of_another_signature_is_left_alone(tokamax, monkeypatch):
    dispatch = importlib.import_module(f"{tokamax.__name__}.integrations.trl.dispatch")

    class Other(torch.autograd.Function):
        @staticmethod
        def forward(ctx, hidden, weight, targets):  # noqa: ANN001, ANN205
            return hidden

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Other)
    with pytest.warns(UserWarning, match=r"_ChunkedLogProbFunction.forward takes \('ctx', 'hidden', 'weight', "
                                         r"'targets'\), not TRL 1.16's"):
        assert dispatch.install() is False
    assert trl_utils._ChunkedLogProbFunction is Other


def test_loss_options_are_refused_under_trls_head(tokamax, calls):
    """z_loss, label_smoothing and reduction act on the labels path only; TRL computes its own loss from the
    head's log-probs, so a fused-head call of a model given them is refused, naming them (before: TRL's loss
    trained without them, silently). Given use_fused_loss(model) again without them, the head runs."""
    model = tokamax.use_fused_loss(_model(tokamax, False), z_loss=1e-4, label_smoothing=0.1)
    trl_utils.add_fused_lm_head(model, outputs=("log_probs",))
    ids = torch.randint(2, VOCAB, (2, 9), generator=torch.Generator().manual_seed(4))
    for grad in (True, False):  # the training step, and a metrics-only call (SFT's label_smoothing_factor)
        with torch.set_grad_enabled(grad), pytest.raises(ValueError, match=(
                r"tokamax use_fused_loss: LlamaForCausalLM was given z_loss=0.0001, label_smoothing=0.1, which act on "
                r"transformers' loss \(a forward with labels\) only; TRL's trainers compute their own loss from the "
                r"fused LM head's log-probs")):
            model(input_ids=ids, labels=ids, fused_lm_head=True)
    assert calls() == {"kernel": 0, "trl": 0}
    tokamax.use_fused_loss(model)
    assert model(input_ids=ids, labels=ids, fused_lm_head=True).log_probs.shape == (2, 8)
    assert calls() == {"kernel": 1, "trl": 0}


def test_use_fused_loss_after_trls_head_keeps_it(tokamax, calls, monkeypatch):
    """TRL patched the model first (a trainer built before use_fused_loss): use_fused_loss wraps the forward the
    model has, so TRL's fused head stays and runs the kernel (before: replaced by the class's forward, the trainer
    got a plain output), and a step with labels still gets the fused loss, equal to transformers' own."""
    dispatch = importlib.import_module(f"{tokamax.__name__}.integrations.trl.dispatch")
    monkeypatch.setattr(dispatch, "missed", None, raising=False)  # what use_fused_loss notes here stays in this test
    plain, model = _model(tokamax, False), _model(tokamax, False)
    for m in (plain, model):
        trl_utils.add_fused_lm_head(m, outputs=("log_probs", "entropy"))
    assert tokamax.use_fused_loss(model) is model
    ids = torch.randint(2, VOCAB, (2, 9), generator=torch.Generator().manual_seed(5))
    got, want = (m(input_ids=ids, labels=ids, fused_lm_head=True) for m in (model, plain))
    assert calls() == {"kernel": 1, "trl": 1}
    for name in ("log_probs", "entropy"):
        torch.testing.assert_close(getattr(got, name), getattr(want, name), rtol=1e-5, atol=2e-5)
    got, want = (m(input_ids=ids, labels=ids) for m in (model, plain))
    assert got.logits is None and want.logits is not None
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-5, atol=1e-6)


def test_trl_imported_after_use_fused_loss_is_said_at_an_unserved_models_call(tokamax, calls, monkeypatch):
    """With TRL not imported when use_fused_loss ran, its trainers bind TRL's own add_fused_lm_head, so a reference
    model TRL loads itself cannot be followed: its first fused-head call (TRL's function) says so, once."""
    import sys

    dispatch = importlib.import_module(f"{tokamax.__name__}.integrations.trl.dispatch")
    monkeypatch.setattr(dispatch, "missed", None, raising=False)
    monkeypatch.setattr(dispatch, "_warned", set())
    policy = _model(tokamax, False)
    policy.config._name_or_path = "org/policy"  # a checkpoint TRL could load a reference model from
    with monkeypatch.context() as hidden:
        hidden.delitem(sys.modules, "trl")
        tokamax.use_fused_loss(policy)
    reference = _model(tokamax, False)
    reference.config._name_or_path = "org/policy"
    trl_utils.add_fused_lm_head(policy, outputs=("log_probs",))
    # what a trainer module imported after use_fused_loss holds: TRL's own function, not the one that follows
    own = getattr(trl_utils.add_fused_lm_head, "_tokamax_original", trl_utils.add_fused_lm_head)
    own(reference, outputs=("log_probs",))
    ids = torch.randint(2, VOCAB, (2, 9), generator=torch.Generator().manual_seed(6))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for model in (policy, reference, reference):
            with torch.no_grad():
                model(input_ids=ids, labels=ids, fused_lm_head=True)
    said = [str(w.message) for w in seen if "tokamax use_fused_loss" in str(w.message)]
    assert said == ["tokamax use_fused_loss: TRL's fused LM head runs TRL's own function for a model use_fused_loss "
                    "was not called on: TRL was not imported when use_fused_loss(LlamaForCausalLM) ran, so a reference "
                    "model the trainer loaded itself (DPO and KTO without ref_model, GRPO and RLOO with beta > 0) is "
                    "not served; call use_fused_loss before building the trainer, with trl imported, or pass "
                    "ref_model=copy.deepcopy(model) after it"], said
    assert calls() == {"kernel": 1, "trl": 2}
