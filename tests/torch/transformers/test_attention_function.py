"""The attention function transformers loads (`tokamax.attention`) against float64 attention, with
the inputs transformers hands it (flash-attention masks): prompts and training batches at lengths 1,
37, 129 and 200 padded on either side, with sliding windows, soft caps and sinks (values and
gradients); cache steps laid out as each cache lays them out (static: unwritten slots and a mask of
the slots written; dynamic: the tokens seen; a window layer's rolled cache; no mask: position ids,
or neither); cross-attention and encoders (no causal mask, any q_len and kv_len); torch.compile of
a static-cache step; and the calls it refuses, in its own words."""

from __future__ import annotations

import types

import pytest
import torch

from tests.torch import attention_reference as reference

from ..ops import checks

SCALE = 128**-0.5
TOL = dict(rtol=2e-4, atol=5e-5)  # f32 in, f32 online softmax: summation order and exp rounding only
MODULE = types.SimpleNamespace(is_causal=True)


def _qkv(batch: int, heads: int, kv_heads: int, q_len: int, kv_len: int, dim: int = 128, seed: int = 0):  # noqa: ANN202
    return (checks.randn(batch, heads, q_len, dim, seed=seed),
            checks.randn(batch, kv_heads, kv_len, dim, seed=seed + 1),
            checks.randn(batch, kv_heads, kv_len, dim, seed=seed + 2))


@pytest.mark.parametrize(("length", "window", "cap", "with_sinks"), [
    (1, None, None, False), (37, None, None, True), (129, 48, None, False), (200, 24, 20.0, True),
], ids=["1", "37-sinks", "129-window", "200-window-softcap-sinks"])
def test_prompt_and_training_batches(tokamax, length, window, cap, with_sinks):
    """A batch of 3: unpadded, left-padded, right-padded (length 1: unpadded). Values on the valid rows
    and the gradients of a loss over them equal float64 attention's."""
    q, k, v = _qkv(3, 4, 2, length, length, seed=length)
    sinks = checks.randn(4, seed=7) if with_sinks else None
    leaves = [x.requires_grad_() for x in (q, k, v, *([sinks] if with_sinks else []))]
    mask = torch.ones(3, length, dtype=torch.bool)
    if length > 1:
        mask[1, : length // 3] = False
        mask[2, length - length // 4:] = False
    out, weights = tokamax.attention(MODULE, q, k, v, mask, scaling=SCALE, sliding_window=window, softcap=cap,
                                     s_aux=sinks)
    assert weights is None and out.shape == (3, length, 4, 128)

    ids = mask.int()
    allowed = reference.allowed(torch.arange(length).expand(3, length), length,
                                kind="local" if window else "causal", window=(window - 1, 0) if window else None,
                                q_ids=ids, kv_ids=ids)
    leaves64 = [x.detach().double().requires_grad_() for x in leaves]
    ref = reference.attention(leaves64[0] * SCALE, *leaves64[1:3], allowed, cap, leaves64[3] if with_sinks else None)
    ref = ref.transpose(1, 2)
    cotangent = checks.randn(*out.shape, seed=9) * mask[:, :, None, None]
    (out * cotangent).sum().backward()
    (ref * cotangent.double()).sum().backward()
    torch.testing.assert_close(out.double()[mask], ref.detach()[mask], **TOL)
    for name, got, want in zip("q k v sinks".split(), leaves, leaves64, strict=False):
        torch.testing.assert_close(got.grad.double(), want.grad, **TOL, msg=lambda m, n=name: f"d{n}: {m}")


def _cache_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, first_slot: int, kv_valid: torch.Tensor,
                     window: int | None = None) -> torch.Tensor:
    """float64 [batch, q_len, heads, dim] for queries at slots first_slot + i seeing valid slots up to
    their own (and within `window` tokens back)."""
    q_len = q.shape[2]
    ids = kv_valid.int()
    q_ids = torch.ones(q.shape[0], q_len, dtype=torch.int32)
    allowed = reference.allowed((first_slot + torch.arange(q_len)).expand(q.shape[0], q_len), k.shape[2],
                                kind="local" if window else "causal", window=(window - 1, 0) if window else None,
                                q_ids=q_ids, kv_ids=ids)
    return reference.attention(q * SCALE, k, v, allowed).transpose(1, 2)


def _static_step(tokamax, q_len: int, slots: int, written: int, attended: int, mask_cols: int, seed: int,
                 left_padded_row: int, left_padding: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # noqa: ANN001
    """(out, float64 reference, the live query rows) of a step of `q_len` new tokens into a `slots`-slot static
    cache with `written` slots filled (the new tokens included; the unwritten ones hold garbage), the first
    `attended` columns attended to but for one row's left padding; the mask has `mask_cols` columns (the written
    ones as transformers cuts it, or all slots with the unwritten ones 0, as `cache_masks` pads a static cache's)."""
    q, k, v = _qkv(2, 4, 2, q_len, slots, seed=seed)
    k[:, :, written:], v[:, :, written:] = 1e4, -1e4  # unwritten slots: any value must be ignored
    mask = torch.zeros(2, mask_cols, dtype=torch.bool)
    mask[:, :attended] = True
    mask[left_padded_row, :left_padding] = False
    with torch.no_grad():
        out, _ = tokamax.attention(MODULE, q, k, v, mask, scaling=SCALE)
    kv_valid = torch.zeros(2, slots, dtype=torch.bool)
    kv_valid[:, :written] = mask[:, :written]
    live = kv_valid[:, written - q_len:written]  # padded queries' rows are unspecified
    return out.double(), _cache_reference(q, k, v, written - q_len, kv_valid), live


@pytest.mark.parametrize("mask_cols", [43, 100], ids=["cut", "padded"])
@pytest.mark.parametrize("q_len", [1, 3], ids=["decode", "chunk"])
def test_static_cache_step_with_a_padding_mask(tokamax, q_len, mask_cols):
    """A 100-slot static cache filled to 43 (the step's tokens included), row 1 left-padded by 6; the mask cut
    to the 43 slots written or padded to all 100 (the queries sit after the last column attended to either way)."""
    got, want, live = _static_step(tokamax, q_len, 100, 43, 43, mask_cols, 20, left_padded_row=1, left_padding=6)
    assert live.all()
    torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("mask_cols", [20, 64], ids=["cut", "padded"])
def test_a_static_caches_prompt_right_padded_in_every_row_starts_at_slot_0(tokamax, mask_cols):
    """A 20-token prompt into a 64-slot static cache, its last 3 tokens padding in both rows, row 0 left-padded by
    4 too (the queries sit by the last column attended to, but never fewer than the new tokens: slot 0)."""
    got, want, live = _static_step(tokamax, 20, 64, 20, 17, mask_cols, 25, left_padded_row=0, left_padding=4)
    torch.testing.assert_close(got[live], want[live], **TOL)


def test_static_cache_step_without_a_mask_reads_position_ids(tokamax):
    """No padding, so generate() drops the mask: the fill level comes from the position ids (the step's
    token at position 57 of a 128-slot cache)."""
    q, k, v = _qkv(2, 4, 2, 1, 128, seed=30)
    k[:, :, 58:], v[:, :, 58:] = 1e4, -1e4
    with torch.no_grad():
        out, _ = tokamax.attention(MODULE, q, k, v, None, scaling=SCALE, position_ids=torch.tensor([[57], [57]]))
    kv_valid = torch.arange(128).expand(2, 128) < 58
    torch.testing.assert_close(out.double(), _cache_reference(q, k, v, 57, kv_valid), **TOL)


def test_dynamic_cache_step_and_a_full_window_cache(tokamax):
    """A dynamic cache hands over exactly the tokens seen (75, the step's last); a full 24-slot window
    cache the last 24 tokens, rolled, while the position ids say 300: the step is its last slot."""
    q, k, v = _qkv(2, 4, 2, 1, 75, seed=40)
    with torch.no_grad():
        out, _ = tokamax.attention(MODULE, q, k, v, None, scaling=SCALE, position_ids=torch.tensor([[74], [74]]))
    torch.testing.assert_close(out.double(), _cache_reference(q, k, v, 74, torch.ones(2, 75, dtype=torch.bool)), **TOL)
    q, k, v = _qkv(2, 4, 2, 1, 24, seed=41)
    with torch.no_grad():
        out, _ = tokamax.attention(MODULE, q, k, v, None, scaling=SCALE, sliding_window=24,
                                   position_ids=torch.tensor([[300], [300]]))
    want = _cache_reference(q, k, v, 23, torch.ones(2, 24, dtype=torch.bool), window=24)
    torch.testing.assert_close(out.double(), want, **TOL)


def test_without_position_ids_the_queries_are_the_last_keys(tokamax):
    """Models that pass no position ids to attention (Bart's decoder, Llama 4), a dynamic cache: the
    step's queries are the last keys."""
    q, k, v = _qkv(2, 4, 2, 2, 75, seed=42)
    with torch.no_grad():
        out, _ = tokamax.attention(MODULE, q, k, v, None, scaling=SCALE)
    torch.testing.assert_close(out.double(), _cache_reference(q, k, v, 73, torch.ones(2, 75, dtype=torch.bool)), **TOL)


@pytest.mark.parametrize(("q_len", "kv_len"), [(5, 12), (12, 12), (20, 7)], ids=["shorter", "equal", "longer"])
def test_cross_attention_and_encoders_see_every_key_the_mask_keeps(tokamax, q_len, kv_len):
    """No causal mask (a decoder's queries against an encoder's keys, or an encoder): every query is a
    real token and sees every key its row's padding mask keeps, however long either side; values
    and gradients against float64 attention."""
    module = types.SimpleNamespace(is_causal=False)
    q, k, v = _qkv(2, 4, 2, q_len, kv_len, seed=60 + q_len)
    leaves = [x.requires_grad_() for x in (q, k, v)]
    mask = torch.ones(2, kv_len, dtype=torch.bool)
    mask[1, kv_len - 3:] = False  # row 1's encoder is padded
    out, _ = tokamax.attention(module, q, k, v, mask, scaling=SCALE)
    allowed = mask[:, None, :].expand(2, q_len, kv_len)
    leaves64 = [x.detach().double().requires_grad_() for x in leaves]
    ref = reference.attention(leaves64[0] * SCALE, leaves64[1], leaves64[2], allowed).transpose(1, 2)
    cotangent = checks.randn(*out.shape, seed=61)
    (out * cotangent).sum().backward()
    (ref * cotangent.double()).sum().backward()
    torch.testing.assert_close(out.double(), ref.detach(), **TOL)
    for name, got, want in zip("qkv", leaves, leaves64, strict=True):
        torch.testing.assert_close(got.grad.double(), want.grad, **TOL, msg=lambda m, n=name: f"d{n}: {m}")


def test_a_static_cache_step_compiles_without_graph_breaks(tokamax):
    """transformers compiles static-cache decode steps (fullgraph, static shapes): the function traces
    whole on fake tensors, and the graph runs the run-time-offset op."""
    from torch._dynamo.testing import CompileCounterWithBackend

    def step(q, k, v, mask):  # noqa: ANN001, ANN202
        return tokamax.attention(MODULE, q, k, v, mask, scaling=SCALE)[0]

    q, k, v = (x.to("meta") for x in _qkv(2, 4, 2, 1, 256, seed=50))
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("eager")
    try:
        out = torch.compile(step, backend=counter, fullgraph=True, dynamic=False)(
            q, k, v, torch.ones(2, 90, dtype=torch.bool, device="meta"))
    finally:
        torch._dynamo.reset()
    assert out.shape == (2, 1, 4, 128) and counter.frame_count == 1


_REFUSED = [
    (dict(dropout=0.1), NotImplementedError, "attention dropout is not supported"),
    (dict(output_attentions=True), NotImplementedError, "output_attentions needs the eager implementation"),
    (dict(attention_mask=torch.ones(2, 1, 8, 8, dtype=torch.bool)), ValueError,
     "expected a [batch, kv_len] padding mask"),
    (dict(attention_mask=torch.zeros(2, 8)), TypeError, "an additive float mask would be read inverted"),
    (dict(query=torch.zeros(2, 4, 9, 128)), ValueError, "9 causal queries against 8 keys"),
    (dict(module=types.SimpleNamespace(is_causal=True, layer_idx=1, config=types.SimpleNamespace(
        layer_types=["full_attention", "chunked_attention"], attention_chunk_size=8192))),
     NotImplementedError, "layer 1 is a chunked-attention layer"),
]


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("change", "error", "message"), _REFUSED, ids=[m for _, _, m in _REFUSED])
def test_refused_calls_say_why(tokamax, change, error, message):
    call = dict(module=MODULE, query=torch.zeros(2, 4, 8, 128), key=torch.zeros(2, 2, 8, 128),
                value=torch.zeros(2, 2, 8, 128), attention_mask=None)
    call.update(change)
    with pytest.raises(error, match="tokamax attention") as info:
        tokamax.attention(call.pop("module"), call.pop("query"), call.pop("key"), call.pop("value"),
                          call.pop("attention_mask"), **call)
    assert message in str(info.value)
