"""The fused causal-LM loss (`tokamax.use_fused_loss(model)`) against transformers' own loss path.

- With the real op (upstream's cross-entropy kernels in interpret mode; jax >= 0.11.1, so the Python
  3.12 tier, skipped with that reason on 3.11): tiny models of four families train one step to
  transformers' loss and every gradient, mean- and `num_items_in_batch`-style, at sizes off the
  lanes, and with tokamax's attention and experts too (against transformers' eager model);
- the glue (label shift, ignored labels, `shift_labels`, `num_items_in_batch` and the mean, the
  gradients into the hidden states and the weight, padding to the kernel's lanes) runs with the
  kernel call, the per-row custom op, replaced by a float64 Torch reference of exactly that op's
  contract (`reference_rows`), against transformers' `ForCausalLMLoss` on the same tiny models of
  four families: loss and every parameter's gradient;
- the junction: a training step traced on fake tensors through the real op's fake kernels, whose
  graph holds no [tokens, vocab] tensor (the same step without the fused loss holds one);
- evaluation and generation are untouched, a training output holds no logits, and what is refused
  says why;
- a PEFT model (LoRA) given to use_fused_loss trains to the same PEFT model's loss and adapter gradients,
  and an adapter on lm_head is refused (PEFT is pinned in the main Torch tier only: not kernels_ci);
- use_fused_loss after accelerate's prepare keeps its bf16 autocast (the same step as before prepare).
"""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from jax.experimental.pallas import tpu as pltpu
from torch.fx.experimental.proxy_tensor import make_fx

from tests.float32_bounds import assert_float32_close, model_terms
from tests.torch.export_probe import ExportProbe

from .models import ATTENTION, FAMILIES, namespace, tokens

needs_the_kernel = pytest.mark.skipif(
    not hasattr(pltpu, "TensorCoreMesh"),
    reason="upstream's cross-entropy kernels build pltpu.TensorCoreMesh (jax >= 0.11.1, Python >= 3.12); "
           "the glue runs against the float64 stand-in below")

VOCAB = 384  # no other size of these models, so a [tokens, vocab] tensor can be told apart in a graph
SEQ = 37  # tokens per row of `_batch`


def reference_rows(x: torch.Tensor, labels: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-row op's contract in float64 Torch: x [rows, hidden] and w [hidden, vocab] of one float
    dtype, labels int32 [rows] in [0, vocab); returns float32 (losses, lse) for the rows padded to a
    multiple of 128, the padded rows NaN (the caller must drop them)."""
    rows, vocab = x.shape[0], w.shape[1]
    assert x.dtype == w.dtype and x.dtype in (torch.float32, torch.bfloat16), (x.dtype, w.dtype)
    assert labels.dtype == torch.int32 and labels.shape == (rows,) and w.shape[0] == x.shape[1]
    assert int(labels.min()) >= 0 and int(labels.max()) < vocab, "a label outside [0, vocab) reached the kernel"
    logits = x.double() @ w.double()
    lse = torch.logsumexp(logits, dim=-1)
    losses = lse - logits.gather(1, labels.long()[:, None])[:, 0]
    padding = torch.full((-rows % 128,), float("nan"), dtype=torch.float64)
    return torch.cat([losses, padding]).float(), torch.cat([lse, padding]).float()


@pytest.fixture
def reference_kernel(ops, monkeypatch):  # noqa: ANN001, ANN201
    """The per-row op replaced by `reference_rows` for the test (upstream's path goes through it: it passes
    ignore_index). Upstream's path pinned: these batches' 128 rows are a prefill's, where the package's own
    choice is one chunk of XLA's formulation (`lm_head.fused.ONE_CHUNK`; its test below)."""
    api = ops.families["linear_softmax_cross_entropy"].api
    calls = []
    monkeypatch.setattr(ops, "loss_chunk", lambda *args, **kwargs: 0)

    def recorded(*args):  # noqa: ANN002, ANN202
        calls.append(tuple(a.shape for a in args))
        return reference_rows(*args)

    monkeypatch.setattr(api, "linear_softmax_cross_entropy_rows_op", recorded)
    return calls


def _llama() -> transformers.PreTrainedConfig:
    return transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=128, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)


def _config(family: str) -> transformers.PreTrainedConfig:
    config = _llama() if family == "llama" else FAMILIES[family][0]()
    config.vocab_size = VOCAB
    return config


TERMS = max(model_terms(_config(family), SEQ) for family in ("llama", *FAMILIES))


def _models(family: str, tokamax, **config_changes) -> tuple[torch.nn.Module, torch.nn.Module]:  # noqa: ANN001
    """(transformers' loss, the fused loss): equal float32 weights, eager attention and experts on both."""
    model_cls = transformers.LlamaForCausalLM if family == "llama" else FAMILIES[family][1]
    config = _config(family)
    for key, value in config_changes.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    plain, fused = model_cls(copy.deepcopy(config)).float(), model_cls(copy.deepcopy(config)).float()
    fused.load_state_dict(plain.state_dict())
    for model in (plain, fused):
        model.set_attn_implementation("eager")
    assert tokamax.use_fused_loss(fused) is fused
    return plain.train(), fused.train()


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """2 x 37 tokens, the second row left-padded by 8; labels ignore the padding and a few tokens."""
    ids, mask = tokens(2, SEQ, seed=11), torch.ones(2, SEQ, dtype=torch.int64)
    ids = ids % VOCAB
    mask[1, :8] = 0
    labels = ids.masked_fill(mask == 0, -100)
    labels[0, 5:9] = -100
    return ids, mask, labels


def _loss_and_grads(model: torch.nn.Module, **inputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:  # noqa: ANN003
    out = model(**inputs)
    out.loss.backward()
    return out, {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_same(got: tuple, want: tuple) -> None:
    """Loss and every gradient of two float32 models, within float32 rounding along the longest
    gradient chain of the largest model here (`float32_bounds`)."""
    assert_float32_close(got[0].loss, want[0].loss, terms=TERMS, msg="loss")
    assert got[1].keys() == want[1].keys() and got[1]
    for name in want[1]:
        assert_float32_close(got[1][name], want[1][name], terms=TERMS, msg=name)


@pytest.mark.parametrize("reduction", ["mean", "num_items_in_batch"])
@pytest.mark.parametrize("family", ["llama", "mixtral", "qwen3_moe", "gpt_oss"])
def test_loss_and_gradients_equal_transformers(tokamax, reference_kernel, family, reduction):
    plain, fused = _models(family, tokamax)
    ids, mask, labels = _batch()
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels)
    if reduction == "num_items_in_batch":  # what Trainer passes: the labels kept over the whole step
        inputs["num_items_in_batch"] = torch.tensor(123)
    want, got = _loss_and_grads(plain, **inputs), _loss_and_grads(fused, **inputs)
    _assert_same(got, want)
    assert got[0].logits is None and want[0].logits.shape == (2, 37, VOCAB)
    # the kernel got every position (2 x 37 rows, padded to the bucket of 128), hidden states and the transposed weight
    assert reference_kernel == [((128, 256), (128,), (256, VOCAB))]


def test_a_prefills_rows_take_one_chunk_of_xlas_formulation_with_transformers_loss_and_gradients(tokamax, ops,
                                                                                                      monkeypatch):
    """Unpinned, the package's choice at these 128 rows (74 padded to the bucket) is the chunked scheme in one chunk
    of all the rows (`lm_head.fused.ONE_CHUNK`: XLA's formulation, which the v5e ran at XLA's speed where the kernels
    ran at 0.71-0.78x); its loss and gradients are transformers' own."""
    real, chunks = ops.lm_head_cross_entropy, []

    def recorded(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        chunks.append(kwargs["chunk"])
        return real(*args, **kwargs)

    monkeypatch.setattr(ops, "lm_head_cross_entropy", recorded)
    plain, fused = _models("llama", tokamax)
    ids, mask, labels = _batch()
    want, got = (_loss_and_grads(m, input_ids=ids, attention_mask=mask, labels=labels) for m in (plain, fused))
    _assert_same(got, want)
    assert chunks == [128], chunks


@needs_the_kernel
@pytest.mark.parametrize(("family", "reduction"), [
    ("llama", "mean"), ("llama", "num_items_in_batch"), ("mixtral", "mean"), ("qwen3_moe", "num_items_in_batch"),
    ("gpt_oss", "mean")])
def test_the_real_op_trains_to_transformers_loss_and_gradients(tokamax, family, reduction):
    """No stand-in: the op runs upstream's kernels (Pallas TPU interpret mode, float32)."""
    plain, fused = _models(family, tokamax)
    ids, mask, labels = _batch()
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels)
    if reduction == "num_items_in_batch":
        inputs["num_items_in_batch"] = torch.tensor(61)
    got, want = _loss_and_grads(fused, **inputs), _loss_and_grads(plain, **inputs)
    _assert_same(got, want)
    assert got[0].logits is None


@pytest.mark.jax_floor
def test_a_training_step_names_the_jax_it_needs(tokamax, ops, monkeypatch):
    """At these 128 rows (a prefill's) the step takes the package's one chunk of XLA's formulation and trains on any
    jax. Where it takes upstream's kernel (pinned here), on a jax without pltpu.TensorCoreMesh (0.10.2, Python 3.11)
    it stops with the jax it needs; on a newer one it trains (its values: the tests above)."""
    _, fused = _models("llama", tokamax)
    ids, mask, labels = _batch()
    assert torch.isfinite(fused(input_ids=ids, attention_mask=mask, labels=labels).loss)
    monkeypatch.setattr(ops, "loss_chunk", lambda *args, **kwargs: 0)
    if hasattr(pltpu, "TensorCoreMesh"):
        assert torch.isfinite(fused(input_ids=ids, attention_mask=mask, labels=labels).loss)
    else:
        with pytest.raises(RuntimeError, match=r"needs jax >= 0.11.1 \(pltpu.TensorCoreMesh\)"):
            fused(input_ids=ids, attention_mask=mask, labels=labels)


@needs_the_kernel
def test_the_real_op_at_sizes_off_the_lanes(tokamax):
    """Hidden 200 and a vocabulary of 300 reach upstream's kernels padded to 256 and 384."""
    plain, fused = _models("llama", tokamax, hidden_size=200, num_attention_heads=4, head_dim=50, vocab_size=300)
    ids, mask, labels = _batch()
    ids, labels = ids % 300, labels.where(labels < 300, 7)
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels)
    _assert_same(_loss_and_grads(fused, **inputs), _loss_and_grads(plain, **inputs))


@needs_the_kernel
def test_attention_experts_and_the_fused_loss_together_train_as_eager(tokamax):
    """Qwen3-MoE on tokamax's attention, experts and fused loss against transformers' eager model and
    loss: one step's loss and every gradient (the attention kernel's float32 tolerance, 1e-3 / 1e-4)."""
    plain, fused = _models("qwen3_moe", tokamax)
    fused.set_attn_implementation(ATTENTION)
    fused.set_experts_implementation(tokamax.register_experts())
    plain.set_experts_implementation("eager")
    ids, mask, labels = _batch()
    # With left padding the label shift has the last pad position predict the first real token, and a pad
    # position's output is each implementation's own (docs/transformers.md, limits): mask that label.
    labels[1, 8] = -100
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels)
    got, want = _loss_and_grads(fused, **inputs), _loss_and_grads(plain, **inputs)
    torch.testing.assert_close(got[0].loss, want[0].loss, rtol=1e-3, atol=1e-4)
    assert got[1].keys() == want[1].keys()
    for name in want[1]:
        torch.testing.assert_close(got[1][name], want[1][name], rtol=1e-3, atol=1e-4,
                                   msg=lambda m, n=name: f"{n}: {m}")


def test_moe_auxiliary_loss_tied_embeddings_and_shift_labels(tokamax, reference_kernel):
    """Qwen3-MoE with its router's load-balancing loss added and its embeddings tied to the LM head;
    labels given already shifted."""
    plain, fused = _models("qwen3_moe", tokamax, output_router_logits=True, tie_word_embeddings=True)
    assert fused.lm_head.weight is fused.model.embed_tokens.weight
    ids, mask, labels = _batch()
    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:].contiguous()
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels, shift_labels=shifted)
    want, got = _loss_and_grads(plain, **inputs), _loss_and_grads(fused, **inputs)
    assert want[0].aux_loss is not None
    torch.testing.assert_close(got[0].aux_loss, want[0].aux_loss)
    _assert_same(got, want)


def test_logits_to_keep_with_shift_labels(tokamax, reference_kernel):
    """The last 10 positions only (`logits_to_keep`), their labels given shifted."""
    plain, fused = _models("llama", tokamax)
    ids, mask, labels = _batch()
    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:][:, -10:].contiguous()
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels, shift_labels=shifted, logits_to_keep=10)
    _assert_same(_loss_and_grads(fused, **inputs), _loss_and_grads(plain, **inputs))
    assert reference_kernel == [((128, 256), (128,), (256, VOCAB))]  # 20 rows, bucket 128


def test_sizes_off_the_lanes(tokamax, reference_kernel):
    """Hidden 200 and a vocabulary of 300: the glue hands the op what it takes."""
    plain, fused = _models("llama", tokamax, hidden_size=200, num_attention_heads=4, head_dim=50, vocab_size=300)
    ids, mask, labels = _batch()
    ids, labels = ids % 300, labels.where(labels < 300, 7)
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels)
    _assert_same(_loss_and_grads(fused, **inputs), _loss_and_grads(plain, **inputs))


def test_evaluation_and_generation_are_untouched(tokamax):
    plain, fused = _models("llama", tokamax)
    ids, mask, labels = _batch()
    plain.eval()
    fused.eval()
    with torch.no_grad():
        want, got = (m(input_ids=ids, attention_mask=mask, labels=labels) for m in (plain, fused))
    torch.testing.assert_close(got.logits, want.logits)
    torch.testing.assert_close(got.loss, want.loss)
    assert torch.equal(fused.generate(input_ids=ids[:1], max_new_tokens=5, do_sample=False),
                       plain.generate(input_ids=ids[:1], max_new_tokens=5, do_sample=False))
    fused.train()  # a training step without labels computes logits as before
    assert fused(input_ids=ids).logits.shape == (2, 37, VOCAB)


def test_the_forward_keeps_its_signature_and_copies_keep_their_own(tokamax):
    """Trainer reads `inspect.signature(model.forward)` (to keep dataset columns, and to pass
    `num_items_in_batch` to forwards taking **kwargs); a deep copy's forward runs the copy."""
    import inspect

    plain, fused = _models("llama", tokamax)
    assert inspect.signature(fused.forward) == inspect.signature(plain.forward)
    twin = copy.deepcopy(fused)
    assert twin.forward.__self__ is twin and tokamax.use_fused_loss(twin) is twin


@pytest.fixture
def bf16_accelerator():  # noqa: ANN201
    """accelerate's Accelerator with bf16 mixed precision on CPU (its state reset after: Trainer makes its own)."""
    accelerate = pytest.importorskip("accelerate", reason="accelerate is pinned in the main Torch tier only")
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield accelerate.Accelerator(mixed_precision="bf16", cpu=True)
    AcceleratorState._reset_state(reset_partial_state=True)


def test_use_fused_loss_after_accelerates_prepare_keeps_its_autocast(tokamax, reference_kernel, bf16_accelerator):
    """accelerate's prepare sets a forward on the instance that runs the model under autocast: use_fused_loss
    after it wraps that forward (before: the class's, so the step ran in float32, silently). The step's
    computation (an MLP's output dtype), loss and gradients are those of use_fused_loss before prepare."""
    then, first = _models("llama", tokamax)  # equal weights; use_fused_loss already on `first`
    then = bf16_accelerator.prepare_model(then)
    assert "forward" in then.__dict__  # accelerate's autocast wrapper
    assert tokamax.use_fused_loss(then) is then
    first = bf16_accelerator.prepare_model(first)
    ids, mask, labels = _batch()
    results = []
    for model in (first, then):
        dtypes = []
        hook = model.model.layers[0].mlp.register_forward_hook(lambda m, a, out, seen=dtypes: seen.append(out.dtype))
        out, grads = _loss_and_grads(model, input_ids=ids, attention_mask=mask, labels=labels)
        hook.remove()
        results.append((dtypes, out, grads))
    (want_dtypes, want, want_grads), (got_dtypes, got, got_grads) = results
    assert want_dtypes == [torch.bfloat16] and got_dtypes == want_dtypes, (got_dtypes, want_dtypes)
    assert got.logits is None and got.loss.dtype == torch.float32
    torch.testing.assert_close(got.loss, want.loss, rtol=0, atol=0)
    assert got_grads.keys() == want_grads.keys()
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=0, atol=0, msg=lambda m, n=name: f"{n}: {m}")


def _graph_shapes(step, *args) -> list[tuple[int, ...]]:  # noqa: ANN001
    graph = make_fx(step, tracing_mode="fake")(*args)  # every input, parameters too, becomes a fake
    return [tuple(n.meta["val"].shape) for n in graph.graph.nodes
            if isinstance(n.meta.get("val"), torch.Tensor)]


def test_a_traced_training_step_holds_no_tokens_by_vocab_tensor(tokamax):
    """make_fx (fake tensors) of loss and gradients: the real op's fakes stand in for the kernels,
    with the arguments the glue hands them. 74 tokens (128 padded rows) and a vocabulary of 384: no
    tensor has both a token-count and the vocabulary dimension; transformers' path has its logits."""
    from torch.func import functional_call

    plain, fused = _models("llama", tokamax)
    ids, mask, labels = _batch()

    def step_of(model):  # noqa: ANN001, ANN202
        def step(params, buffers, ids, mask, labels):  # noqa: ANN001, ANN202
            loss = functional_call(model, {**params, **buffers}, (),
                                   dict(input_ids=ids, attention_mask=mask, labels=labels)).loss
            return loss, torch.autograd.grad(loss, list(params.values()))
        return step

    token_counts = {37, 74, 128}

    def logits_like(shape: tuple[int, ...]) -> bool:
        return VOCAB in shape and bool(token_counts & set(shape))

    args = (ids, mask, labels)
    fused_shapes = _graph_shapes(step_of(fused), dict(fused.named_parameters()), dict(fused.named_buffers()), *args)
    assert not [s for s in fused_shapes if logits_like(s)], [s for s in fused_shapes if logits_like(s)]
    assert (128,) in fused_shapes  # the per-row losses of the padded rows: the op ran in the trace
    plain_shapes = _graph_shapes(step_of(plain), dict(plain.named_parameters()), dict(plain.named_buffers()), *args)
    assert [s for s in plain_shapes if logits_like(s)]  # the check can fail: transformers' path has its logits


@pytest.mark.kernels_ci
def test_a_model_without_a_linear_head_is_refused(tokamax):
    """(Soft caps, scales and biases are served: test_fused_loss_options.py.)"""
    model = transformers.LlamaForCausalLM(_llama())
    model.lm_head = torch.nn.Identity()
    with pytest.raises(TypeError, match="tokamax use_fused_loss: LlamaForCausalLM has no nn.Linear LM head"):
        tokamax.use_fused_loss(model)


def test_a_head_resized_after_use_fused_loss_is_the_one_the_loss_reads(tokamax, reference_kernel):
    """resize_token_embeddings puts a new lm_head on the model: each step reads the head the model has."""
    plain, fused = _models("llama", tokamax)
    for model in (plain, fused):
        model.resize_token_embeddings(VOCAB + 13, mean_resizing=False)
    fused.load_state_dict(plain.state_dict())
    ids, mask, labels = _batch()
    want = _loss_and_grads(plain, input_ids=ids, attention_mask=mask, labels=labels)
    got = _loss_and_grads(fused, input_ids=ids, attention_mask=mask, labels=labels)
    _assert_same(got, want)
    assert reference_kernel == [((128, 256), (128,), (256, VOCAB + 13))]


def _lora(model: torch.nn.Module, **config) -> torch.nn.Module:  # noqa: ANN003
    from peft import LoraConfig, get_peft_model

    # random B as well as A (PEFT's default B is 0): the adapters change the loss and get gradients into A
    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, init_lora_weights=False, **config))


def test_a_peft_model_trains_to_its_own_loss_and_adapter_gradients(tokamax, reference_kernel):
    """A LoRA model given to use_fused_loss (returned as given): its base model gets the fused loss; loss and
    every adapter's gradient equal the same PEFT model on transformers' loss, and the output holds no logits."""
    torch.manual_seed(1)
    plain, fused = (_lora(transformers.LlamaForCausalLM(_llama()).float(), target_modules=["q_proj", "v_proj",
                                                                                        "up_proj"]) for _ in "ab")
    fused.load_state_dict(plain.state_dict())
    for model in (plain, fused):
        model.get_base_model().set_attn_implementation("eager")
        model.train()
    assert tokamax.use_fused_loss(fused) is fused
    ids, mask, labels = _batch()
    want = _loss_and_grads(plain, input_ids=ids, attention_mask=mask, labels=labels)
    with ExportProbe(namespace(tokamax)) as probe:
        got = _loss_and_grads(fused, input_ids=ids, attention_mask=mask, labels=labels)
    _assert_same(got, want)
    assert got[1].keys() == {n for n, p in fused.named_parameters() if p.requires_grad}
    assert all("lora_" in n for n in got[1]) and len(got[1]) == 2 * 2 * 3  # A and B, 2 layers, 3 modules
    # the head is frozen: its loss and dx alone, no weight gradient (not upstream's kernel, which would compute one):
    # from the forward in the chunked scheme, by the dx kernel in the backward with our kernels (chosen here)
    ran = {op for op, _ in probe.calls}
    assert got[0].logits is None and reference_kernel == [] and {"lm_head_loss_grad_x", "lm_head_loss_rows_bwd_x"} & ran
    assert not {"lm_head_loss_grads", "lm_head_loss_rows_bwd"} & ran, ran


@pytest.mark.parametrize("adapter", ["target_modules", "modules_to_save"])
@pytest.mark.parametrize("when", ["before use_fused_loss", "after"])
def test_an_adapter_on_the_lm_head_is_refused(tokamax, adapter, when):
    """The fused loss reads lm_head.weight as it is: an adapter on lm_head would be left out of the loss."""
    model = transformers.LlamaForCausalLM(_llama()).train()
    config = {"target_modules": ["q_proj", "lm_head"]} if adapter == "target_modules" else {
        "target_modules": ["q_proj"], "modules_to_save": ["lm_head"]}
    if when == "after":
        tokamax.use_fused_loss(model)
    peft_model = _lora(model, **config)
    message = (r"tokamax use_fused_loss: LlamaForCausalLM's lm_head is PEFT's peft\.\S+ \(an adapter or "
               r"modules_to_save on lm_head\).*keep adapters off lm_head")
    ids = torch.randint(0, VOCAB, (1, 5))
    with pytest.raises(NotImplementedError, match=message):
        if when == "after":
            peft_model(input_ids=ids, labels=ids)
        else:
            tokamax.use_fused_loss(peft_model)


def _custom_loss(logits, labels, vocab_size, **kwargs):  # noqa: ANN001, ANN003, ANN202
    return logits.float().mean()


@pytest.mark.kernels_ci
@pytest.mark.parametrize("how", ["loss_function set", "another loss_type", "loss_function set after"])
def test_a_loss_other_than_the_causal_lm_cross_entropy_is_refused(tokamax, how):
    """The fused loss computes transformers' ForCausalLMLoss only; a model meant to train on another loss is
    refused, not silently given the shifted cross-entropy (also when the loss function is set afterwards)."""
    model = transformers.LlamaForCausalLM(_llama()).train()
    if how == "loss_function set":
        model.loss_function = _custom_loss
    elif how == "another loss_type":
        model.loss_type = "ForMaskedLM"
    if how != "loss_function set after":
        with pytest.raises(NotImplementedError, match="tokamax use_fused_loss: LlamaForCausalLM's loss_function is "
                                                      r"\w+.*not transformers' ForCausalLMLoss"):
            tokamax.use_fused_loss(model)
        return
    tokamax.use_fused_loss(model)
    model.loss_function = _custom_loss
    ids, mask, labels = _batch()
    with pytest.raises(NotImplementedError, match="loss_function is _custom_loss"):
        model(input_ids=ids, attention_mask=mask, labels=labels)


class _CenteringLlama(transformers.LlamaForCausalLM):
    """A family whose forward changes its logits before the loss other than by a scale or a soft cap (here:
    centres them)."""

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):  # noqa: ANN001, ANN003, ANN201
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = self.lm_head(hidden)
        logits = logits - logits.mean(-1, keepdim=True)
        loss = self.loss_function(logits, labels, self.config.vocab_size, **kwargs)
        return transformers.modeling_outputs.CausalLMOutputWithPast(loss=loss, logits=logits)


class _OwnLossLlama(transformers.LlamaForCausalLM):
    """A family whose forward computes its loss without `loss_function`."""

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):  # noqa: ANN001, ANN003, ANN201
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = self.lm_head(hidden)
        return transformers.modeling_outputs.CausalLMOutputWithPast(loss=hidden.pow(2).mean(), logits=logits)


@pytest.mark.parametrize(("model_cls", "message"), [
    (_CenteringLlama, "applies `.mean` to the logits between its lm_head and its loss function"),
    (_OwnLossLlama, "computed its loss without its loss_function"),
])
def test_forwards_the_fused_loss_cannot_serve_are_stopped(tokamax, reference_kernel, model_cls, message):
    model = tokamax.use_fused_loss(model_cls(_llama()).train())
    ids, mask, labels = _batch()
    with pytest.raises(RuntimeError, match="tokamax use_fused_loss") as info:
        model(input_ids=ids, attention_mask=mask, labels=labels)
    assert message in str(info.value)
