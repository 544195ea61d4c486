"""transformers' continuous batching on tokamax's `flash_paged` (upstream's batched ragged paged attention; on CPU
tensors its pure-JAX reference): greedy `generate_batch` of tiny Llama (grouped-query attention) and Qwen2 models
equal to `paged|eager`'s for many requests of different prompt lengths, more than the batch holds at once (pages
freed and reused, a prompt longer than the token budget prefilled in chunks), and torch-tpu's exports bounded by
the buckets; Mistral requests with their own max_new_tokens through the manager; forked requests
(num_return_sequences) whose cache transformers copies; sliding-window models on the kernel's own window: Mistral
with a 20-token window on every layer (prompts past it, one chunked across it, requests finishing at different
steps, forks) and with MistralConfig()'s 4096-token window, Qwen3 and Gemma 2 mixing window and full layers
(Gemma 2's soft cap against transformers' own eager generate(): `paged|eager` drops soft caps); the pieces
against independent references (page tables against transformers' own block tables, order and distribution,
prefill, chunk and decode values against float64 attention, with and without a window, the block and ring views
against transformers' own cache bytes, forks and offload round trips of window layers); the refusals' messages;
the hand-off across sessions of a kept cache with the attention switched, and an unknown structure served where
the cache reaches the kernel; transformers' Hub loading.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from types import ModuleType

import pytest
import torch
import transformers
from transformers import ContinuousBatchingConfig, GenerationConfig
from transformers.generation.continuous_batching.cache import PagedAttentionCache, group_layers_by_attn_type

from tests.torch.export_probe import ExportProbe

from . import cb_models
from .cb_batches import Batches, Layer


@pytest.fixture(scope="session")
def paged(tokamax) -> ModuleType:  # noqa: ANN001
    return importlib.import_module(f"{tokamax.__name__}.integrations.transformers.paged")


def _namespace(tokamax: ModuleType) -> str:
    return importlib.import_module(f"{tokamax.__name__}._ops")._OPS_NAME


@contextlib.contextmanager
def _probed(model: torch.nn.Module, namespace: str) -> Iterator[tuple[ExportProbe, list[int]]]:
    """Counts the kernel's calls and exports inside `model`'s forwards (continuous batching runs them on its own
    thread, and a dispatch mode is per thread): (probe, [forwards])."""
    probe, forwards = ExportProbe(namespace), [0]
    forward = model.forward

    def probed_forward(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        forwards[0] += 1
        with probe:
            return forward(*args, **kwargs)

    model.forward = probed_forward
    try:
        yield probe, forwards
    finally:
        del model.forward


def _generated(results: dict) -> dict[str, list[int]]:
    assert all(r.error is None for r in results.values()), [r.error for r in results.values()]
    return {rid: r.generated_tokens for rid, r in results.items()}


# ---- the pieces -------------------------------------------------------------------------------------------------
def _config() -> transformers.PreTrainedConfig:
    return cb_models.FAMILIES["llama-gqa"][0]()


def test_page_tables_order_and_distribution_follow_transformers(paged):
    """A fresh step (only write_index) then a mixed one packed as a scheduler might (a chunk continuation, decodes,
    a new prompt): page tables equal transformers' own block tables row by row in the kernel's order (decode,
    prefill-only, mixed), lengths and distribution as the op defines them, the buckets padded."""
    batches = Batches(_config(), page_size=4, num_blocks=32)
    plan = paged.schedule.plan
    args = lambda kw: (kw["cu_seq_lens_q"].tolist(), kw["cu_seq_lens_k"]["full_attention"].tolist(),  # noqa: E731
                       int(kw["cu_seq_lens_q"][-1]), kw["read_index"][0], kw["write_index"][0], 4,
                       batches.allocator.block_physical_stride, torch.device("cpu"))
    first = plan(*args(batches.step([("a", 5), ("b", 1), ("c", 7)])))  # c: the first 7 of an 11-token prompt
    assert first.distribution.tolist() == [1, 3, 3] and first.kv_lens.tolist()[:3] == [1, 5, 7]  # b first
    kw = batches.step([("c", 4), ("a", 1), ("d", 6), ("b", 1)])
    step = plan(*args(kw))
    order = ["a", "b", "d", "c"]  # decodes, then the fresh prompt, then the continuation over its cache
    assert step.distribution.tolist() == [2, 3, 4]
    assert step.kv_lens.tolist() == [6, 2, 6, 11, 0, 0, 0, 0]  # 8 sequences: the floor bucket
    assert step.cu_q_lens.tolist() == [0, 1, 2, 8, 12, 12, 12, 12, 12]
    per_seq = step.page_indices.shape[0] // 8
    for row, request in enumerate(order):
        blocks = batches.blocks(request)
        assert step.page_indices[row * per_seq:row * per_seq + len(blocks)].tolist() == blocks, request
    assert per_seq == 4 and step.padded_tokens == 16
    # the tokens travel to the kernel's order and back
    tokens = torch.arange(12.0)[:, None, None]
    rows = step.rows(tokens)
    assert rows[:12, 0, 0].tolist() == [4, 11, 5, 6, 7, 8, 9, 10, 0, 1, 2, 3] and rows.shape[0] == 16
    assert torch.equal(step.back(rows), tokens)


def _causal_f64(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float, window: int | None = None,
                softcap: float | None = None) -> torch.Tensor:
    """q [n, heads, dim] the last n of keys/values [kv, kv_heads, dim]'s positions, causal (each query sees the
    last `window` positions up to its own, if given), logits soft-capped if given, grouped heads, float64."""
    n, heads, kv = q.shape[0], q.shape[1], keys.shape[0]
    group = heads // keys.shape[1]
    k, v = (x.double().repeat_interleave(group, 1) for x in (keys, values))
    out = torch.empty(q.shape, dtype=torch.float64)
    for i in range(n):
        end = kv - n + i + 1
        start = 0 if window is None else max(0, end - window)
        logits = torch.einsum("hd,khd->hk", q[i].double(), k[start:end]) * scale
        if softcap is not None:
            logits = softcap * torch.tanh(logits / softcap)
        out[i] = torch.einsum("hk,khd->hd", logits.softmax(-1), v[start:end])
    return out


def test_prefill_and_decode_match_float64_attention(tokamax, paged, monkeypatch):
    """Forwards of two layers over page-size-4 blocks: fresh prompts of odd lengths (one of a single token, one cut
    in a chunk), a mix packed out of the kernel's order (a chunk continuation, decodes, a new prompt), decodes, then
    two requests freed and a longer one arriving; every output against float64 causal attention over each
    request's whole history. The kernel's cache starts at 4 pages here (64 in use): it grows while every page
    holds a live block, then gives the freed requests' pages to the new one instead of growing."""
    monkeypatch.setattr(paged.store, "FIRST_PAGES", 4)
    config = _config()
    heads, kv_heads, dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    batches, layers = Batches(config, page_size=4, num_blocks=32), [Layer(0), Layer(1)]
    history: dict[tuple[int, str], list[torch.Tensor]] = {}
    g = torch.Generator().manual_seed(3)
    steps = ([("a", 5), ("b", 1), ("c", 7)], [("c", 4), ("a", 1), ("d", 6), ("b", 1)],
             [("d", 1), ("c", 1), ("b", 1), ("a", 1)], "free a, b", [("e", 30), ("c", 1)])
    for work in steps:
        if isinstance(work, str):
            store = paged.binding.stores(batches.cache)["full_attention"]
            grown, held = store.pages, set(store.pages_of(batches.blocks("a") + batches.blocks("b")))
            for request in ("a", "b"):
                batches.cache.free_blocks(request)
            continue
        kwargs = batches.step(work)
        total = sum(n for _, n in work)
        for layer in layers:
            q = torch.randn(1, heads, total, dim, generator=g)
            k, v = torch.randn(1, kv_heads, total, dim, generator=g), torch.randn(1, kv_heads, total, dim, generator=g)
            out, weights = tokamax.flash_paged(layer, q, k, v, None, scaling=dim**-0.5, **kwargs)
            assert weights is None and out.shape == (1, total, heads, dim)
            start = 0
            for request, n in work:
                keys, values = history.setdefault((layer.layer_idx, request), [torch.empty(0, kv_heads, dim)] * 2)
                keys = torch.cat([keys, k[0, :, start:start + n].transpose(0, 1)])
                values = torch.cat([values, v[0, :, start:start + n].transpose(0, 1)])
                history[(layer.layer_idx, request)] = [keys, values]
                want = _causal_f64(q[0, :, start:start + n].transpose(0, 1), keys, values, dim**-0.5)
                torch.testing.assert_close(out[0, start:start + n].double(), want, rtol=1e-5, atol=1e-5,
                                           msg=lambda m, r=request, i=layer.layer_idx: f"{r}, layer {i}: {m}")
                start += n
    # 4 -> 8 -> 16 pages for 8 live blocks; transformers hands e a's and b's blocks again, which keep their pages
    assert grown == 16 and store.pages == 16
    assert held <= set(store.pages_of(batches.blocks("e") + batches.blocks("c")))
    # Blocks transformers never handed out before, once the free pages are gone, take the pages of freed blocks.
    e_pages = set(store.pages_of(batches.blocks("e")))
    batches.cache.free_blocks("e")
    fresh = store.pages_of([10_000 + i for i in range(8)])  # 1 free page, then 7 of e's
    assert store.pages == 16 and len(set(fresh) & e_pages) == 7


def test_block_view_is_transformers_own_layout(tokamax):
    """Forks and CPU offloading move whole blocks through the allocator's byte view: over the kernel's cache it
    gives the bytes transformers' own cache holds for the same writes (cache.update), and copying blocks through
    it moves the pages the kernel reads."""
    config = _config()
    ours, theirs = Batches(config, 4, 32), Batches(config, 4, 32)
    work = [("a", 6), ("b", 3)]
    kwargs, kwargs_theirs = ours.step(work), theirs.step(work)
    g = torch.Generator().manual_seed(4)
    for layer in range(config.num_hidden_layers):
        q = torch.randn(1, config.num_attention_heads, 9, config.head_dim, generator=g)
        k, v = (torch.randn(1, config.num_key_value_heads, 9, config.head_dim, generator=g) for _ in range(2))
        tokamax.flash_paged(Layer(layer), q, k, v, None, **kwargs)
        theirs.cache.update(k, v, layer, dict(kwargs_theirs))
    blocks = torch.tensor(ours.blocks("a") + ours.blocks("b"))
    assert ours.blocks("a") + ours.blocks("b") == theirs.blocks("a") + theirs.blocks("b")
    view = ours.allocator._copy_view
    assert type(view).__name__ == "BlockBytes" and view.device == torch.device("cpu")
    got, want = view.index_select(0, blocks), theirs.allocator._copy_view.index_select(0, blocks)
    assert got.dtype == torch.uint8 and torch.equal(got, want)
    assert ours.cache.cache_tensor.numel() == 0  # transformers' own tensor was released
    free = torch.tensor([b for b in range(8, 14) if b not in blocks.tolist()][:2])
    view.index_copy_(0, free, view.index_select(0, blocks[:2]))
    assert torch.equal(view.index_select(0, free), want[:2])


# ---- sliding-window layers: the pieces ---------------------------------------------------------------------------
WINDOW = 6  # with page size 4: transformers' ring is 2 blocks (8 slots, 6 used), a window not on a page boundary


def _window_config(family: str) -> transformers.PreTrainedConfig:
    """Every layer sliding (Mistral: position_ids place the tokens) or sliding and full layers (Qwen3: the full
    layers' lengths do), with a 6-token window."""
    if family == "mistral":
        return cb_models._mistral(sliding_window=WINDOW)
    config = cb_models._qwen3_mixed()
    config.sliding_window = WINDOW
    return config


class _History:
    """Each (layer, request)'s keys and values so far, and float64 attention over them."""

    def __init__(self) -> None:
        self.kv: dict[tuple[int, str], list[torch.Tensor]] = {}

    def add(self, layer: int, request: str, k: torch.Tensor, v: torch.Tensor) -> list[torch.Tensor]:
        keys, values = self.kv.get((layer, request), (k[:0], v[:0]))
        self.kv[(layer, request)] = [torch.cat([keys, k]), torch.cat([values, v])]
        return self.kv[(layer, request)]

    def copy(self, parent: str, child: str) -> None:
        for (layer, request), kv in list(self.kv.items()):
            if request == parent:
                self.kv[(layer, child)] = list(kv)


def _forward(tokamax: ModuleType, batches: Batches, history: _History, work: list[tuple[str, int]],
             g: torch.Generator, softcap: float | None = None) -> None:
    """One forward over `work` through every layer of `batches`' model; each request's output against float64
    attention over its whole history (windowed on sliding-window layers)."""
    config, kwargs = batches.cache.config, batches.step(work)
    heads, kv_heads, dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    total = sum(n for _, n in work)
    for index in range(config.num_hidden_layers):
        sliding = batches.cache.layer_to_allocator[index].layer_type == "sliding_attention"
        window = WINDOW if sliding else None
        q = torch.randn(1, heads, total, dim, generator=g)
        k, v = torch.randn(1, kv_heads, total, dim, generator=g), torch.randn(1, kv_heads, total, dim, generator=g)
        out, _ = tokamax.flash_paged(Layer(index), q, k, v, None, scaling=dim**-0.5, sliding_window=window,
                                     softcap=softcap, **kwargs)
        start = 0
        for request, n in work:
            keys, values = history.add(index, request, *(x[0, :, start:start + n].transpose(0, 1) for x in (k, v)))
            want = _causal_f64(q[0, :, start:start + n].transpose(0, 1), keys, values, dim**-0.5, window, softcap)
            torch.testing.assert_close(out[0, start:start + n].double(), want, rtol=1e-5, atol=1e-5,
                                       msg=lambda m, r=request, i=index: f"{r}, layer {i}: {m}")
            start += n


@pytest.mark.parametrize(("family", "softcap"), [("mistral", None), ("qwen3-mixed", 30.0)])
def test_sliding_window_values_match_float64(tokamax, paged, monkeypatch, family, softcap):
    """Window layers over page-size-4 blocks, a 6-token window: a prompt of 11 tokens in one call, one cut in a
    chunk whose second chunk (9 tokens) crosses the window (its first queries see keys its last tokens would
    overwrite in a ring of 6), decodes going round transformers' ring, two requests freed and a 13-token prompt
    arriving; every output against float64 attention over the request's whole history, windowed on the window
    layers (Qwen3's full layers: all of it; its kernel calls soft-capped). A request's pages stay within its
    window and chunk, the page table's width within the window's pages, however long it runs; the cache grows
    from 4 pages and never gives a page to two requests."""
    monkeypatch.setattr(paged.store, "FIRST_PAGES", 4)
    batches, history, g = Batches(_window_config(family), page_size=4, num_blocks=48), _History(), \
        torch.Generator().manual_seed(5)
    decodes = [("d", 1), ("c", 1), ("b", 1), ("a", 1)]
    steps = [[("a", 5), ("b", 11), ("c", 7)], [("c", 9), ("a", 1), ("d", 3), ("b", 1)], *[decodes] * 5,
             "free a, b", [("e", 13), ("c", 2)], [("e", 1), ("c", 1), ("d", 5)]]
    for work in steps:
        if isinstance(work, str):
            for request in ("a", "b"):
                batches.cache.free_blocks(request)
            continue
        _forward(tokamax, batches, history, work, g, softcap)
        store = paged.binding.stores(batches.cache)["sliding_attention"]
        for request, n in work:
            assert len(store.requests[request].pages) <= -(-(WINDOW + n) // 4) + 1, (request, n)
        # 4 sequences of at most 13 new tokens after at most WINDOW - 1 visible ones, a page's shift: 8 pages
        assert store.plan[2].page_indices.shape[0] <= 8 * 8
    held = [page for request in store.requests.values() for page in request.pages.values()]
    assert store.pages > 4 and len(held) == len(set(held)) and 0 not in held  # grown; no page given twice


def test_window_ring_view_is_transformers_own_layout_forks_and_offloads(tokamax, paged):
    """Window layers' blocks through the allocator's byte view (forks and CPU offloading copy them): the bytes
    equal transformers' own ring after the same writes (cache.update: position p at slot p % window); a fork
    through transformers' own prepare_fork_request / perform_cache_copy, and an offload (read the blocks, free
    the request, its pages given away, new blocks, copy back) continue exactly: their next tokens' outputs
    against float64 windowed attention over the parent's (the request's) history."""
    config = _window_config("mistral")
    ours, theirs, history, g = Batches(config, 4, 48), Batches(config, 4, 48), _History(), \
        torch.Generator().manual_seed(6)
    for work in ([("a", 9), ("b", 3)], [("b", 4), ("a", 1)]):  # b's chunk crosses the window
        kwargs = theirs.step(work)
        _forward(tokamax, ours, history, work, torch.Generator().manual_seed(len(work)))
        g_theirs = torch.Generator().manual_seed(len(work))
        for layer in range(config.num_hidden_layers):
            total = sum(n for _, n in work)
            torch.randn(1, config.num_attention_heads, total, config.head_dim, generator=g_theirs)
            k, v = (torch.randn(1, config.num_key_value_heads, total, config.head_dim, generator=g_theirs)
                    for _ in range(2))
            theirs.cache.update(k, v, layer, dict(kwargs))
    view, blocks = ours.allocator._copy_view, torch.tensor(ours.blocks("a") + ours.blocks("b"))
    assert type(view).__name__ == "RingBytes" and ours.blocks("b") == theirs.blocks("b")
    got, want = view.index_select(0, blocks), theirs.allocator._copy_view.index_select(0, blocks)
    assert got.dtype == torch.uint8 and torch.equal(got, want)

    ours.fork("a", "a2")
    history.copy("a", "a2")
    _forward(tokamax, ours, history, [("a2", 1), ("a", 2)], g)  # the child's first forward writes its ring in

    # CPU offloading: transformers frees the request's blocks, then reads them (through the view); its pages go
    store, b_blocks = paged.binding.stores(ours.cache)["sliding_attention"], torch.tensor(ours.blocks("b"))
    ours.cache.free_blocks("b", no_cache=True)
    saved = view.index_select(0, b_blocks)
    store._recycle(set())
    assert "b" not in store.requests
    _forward(tokamax, ours, history, [("a", 1), ("a2", 1)], g)
    assert ours.cache.can_store_request_tokens(ours.states["b"], 1)  # restored: new blocks at its position
    restored = torch.tensor(ours.blocks("b"))
    view.index_copy_(0, restored, saved)
    assert torch.equal(view.index_select(0, restored), saved)
    _forward(tokamax, ours, history, [("b", 1), ("a2", 3)], g)


# ---- generate_batch -----------------------------------------------------------------------------------------------
LENGTHS = [5, 17, 3, 30, 9, 12, 1, 22, 40, 7]  # 40 > the token budget: prefilled in two chunks
NEW_TOKENS = 8
CB = dict(page_size=16, num_blocks=12, max_batch_tokens=32, max_requests_per_batch=4)


@pytest.mark.parametrize("family", ["llama-gqa", "qwen2"])
def test_generate_batch_matches_paged_eager(tokamax, family, monkeypatch):
    """Ten prompts of 1 to 40 tokens and two sharing whole blocks with others (transformers' prefix sharing gives
    them those blocks), at most 4 requests and 32 tokens a step, 12 blocks of 16 tokens for 20 blocks' worth."""
    matched = []
    search = PagedAttentionCache.search_prefix_match
    monkeypatch.setattr(PagedAttentionCache, "search_prefix_match",
                        lambda self, *a: matched.append(search(self, *a)) or matched[-1])
    eager, ours = cb_models.pair(family)
    inputs = cb_models.prompts(LENGTHS, seed=len(family))
    inputs += [inputs[8][:33] + inputs[1][:4], list(inputs[3])]  # 2 and 1 full blocks shared
    lengths = [len(p) for p in inputs]
    assert cb_models.blocks_needed(lengths, [NEW_TOKENS] * len(lengths), CB["page_size"]) > CB["num_blocks"]
    gen = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=-1, pad_token_id=0)
    want = _generated(eager.generate_batch(inputs, generation_config=gen,
                                           continuous_batching_config=ContinuousBatchingConfig(**CB)))
    matched.clear()
    with _probed(ours, _namespace(tokamax)) as (probe, forwards):
        got = _generated(ours.generate_batch(inputs, generation_config=gen,
                                             continuous_batching_config=ContinuousBatchingConfig(**CB)))
    assert len(got) == len(inputs) and all(len(t) == NEW_TOKENS for t in got.values())
    assert got == want
    assert any(n > 0 for n in matched), "no prefix was shared in our run"
    assert probe.count("batched_rpa") == ours.config.num_hidden_layers * forwards[0], probe.calls
    # At most 4 requests of at most 32 tokens, sequences <= 48 tokens: the buckets give tokens 8, 16 or 32, 8
    # sequences, 4 pages per sequence, so at most three exports, however many requests and steps.
    assert 1 <= probe.exports()["batched_rpa"] <= 3 < forwards[0], (probe.exports(), forwards)


def _sessions(model: torch.nn.Module, first: str, second: str, inputs: list[list[int]], gen: GenerationConfig,
              cb: ContinuousBatchingConfig) -> list[dict]:
    """The results of two generate_batch sessions of one kept manager (`persistent_manager`: transformers keeps its
    PagedAttentionCache for the next session), the model on `first`, then switched to `second`."""
    model.set_attn_implementation(first)
    out = [model.generate_batch(inputs, generation_config=gen, continuous_batching_config=cb, persistent_manager=True)]
    cache = model._cached_continuous_batching_manager.batch_processor.cache
    model.set_attn_implementation(second)
    try:
        out.append(model.generate_batch(inputs, generation_config=gen, continuous_batching_config=cb,
                                        persistent_manager=True))
        assert model._cached_continuous_batching_manager.batch_processor.cache is cache, "not the same cache"
    finally:
        model.destroy_cached_continuous_batching_manager()
    return out


@pytest.mark.parametrize(("first", "second", "what"), [
    (cb_models.FLASH_PAGED, "sdpa", "served tokamax's kernel"),
    (cb_models.FLASH_PAGED, "paged|eager", "served tokamax's kernel"),
    ("sdpa", cb_models.FLASH_PAGED, "was written by transformers' own attention ('sdpa')"),
    ("paged|eager", cb_models.FLASH_PAGED, "was written by transformers' own attention ('paged|eager')"),
])
def test_a_kept_cache_switched_between_the_kernel_and_transformers_attention_is_refused(tokamax, first, second,
                                                                                         what):
    """transformers keeps the PagedAttentionCache across generate_batch sessions and the model may switch its
    attention between them. The keys and values cannot follow: the kernel holds them in a cache of its own
    (transformers' cache tensor released) and transformers' attention in that tensor, where blocks shared by prefix
    with the next session stay. So the first session equals paged|eager's and every request of the second is
    refused, naming the way out. Before, from the kernel the update was still skipped (transformers' attention got
    only the new tokens' K/V; on 5.22 its update failed with a KeyError), and to the kernel it was refused for a
    missing cache or as non-causal, neither saying why."""
    eager, ours = cb_models.pair("llama-gqa")
    inputs = cb_models.prompts([5, 17, 3, 30], seed=3)
    gen = GenerationConfig(max_new_tokens=6, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = ContinuousBatchingConfig(page_size=16, num_blocks=16, max_batch_tokens=32, max_requests_per_batch=4)
    want = _generated(eager.generate_batch(inputs, generation_config=gen, continuous_batching_config=cb))
    first_results, second_results = _sessions(ours, first, second, inputs, gen, cb)
    assert _generated(first_results) == want
    errors = [r.error for r in second_results.values()]
    assert len(errors) == len(inputs) and all(
        e is not None and e.startswith("tokamax flash_paged: this PagedAttentionCache, kept from an earlier "
                                       "continuous-batching session (persistent_manager), ") and what in e
        and f"so {second!r} cannot run on it; call model.destroy_cached_continuous_batching_manager() before "
            "switching the attention implementation" in e for e in errors), errors


def _manager_run(model: torch.nn.Module, inputs: list[list[int]], new_tokens: list[int], gen: GenerationConfig,
                 cb: ContinuousBatchingConfig) -> dict[str, list[int]]:
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
    manager.start()
    try:
        ids = [manager.add_request(p, max_new_tokens=n) for p, n in zip(inputs, new_tokens, strict=True)]
        results = {}
        while len(results) < len(ids):
            result = manager.get_result(timeout=120)
            assert result is not None, "continuous batching stalled"
            if result.is_finished():
                results[result.request_id] = result
    finally:
        manager.stop(block=True, timeout=30)
        manager.destroy()
    return _generated({rid: results[rid] for rid in ids})


def test_requests_with_their_own_lengths_match_paged_eager(tokamax):
    """Mistral (one KV head, no sliding window), six requests each with its own max_new_tokens through the
    manager: they finish at different steps, their pages go back to the pool while others decode."""
    eager, ours = cb_models.pair("mistral")
    lengths, new_tokens = [9, 2, 25, 14, 6, 31], [3, 10, 1, 7, 9, 2]
    inputs = cb_models.prompts(lengths, seed=11)
    gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = dict(page_size=8, num_blocks=10, max_batch_tokens=24, max_requests_per_batch=3)
    assert cb_models.blocks_needed(lengths, new_tokens, cb["page_size"]) > cb["num_blocks"]
    want = _manager_run(eager, inputs, new_tokens, gen, ContinuousBatchingConfig(**cb))
    got = _manager_run(ours, inputs, new_tokens, gen, ContinuousBatchingConfig(**cb))
    assert [len(t) for t in got.values()] == new_tokens
    assert got == want


def _forked(eager: torch.nn.Module, ours: torch.nn.Module, inputs: list[list[int]],
            max_new_tokens: int) -> tuple[dict, dict]:
    """generate_batch with num_return_sequences=2 (top_k=1 sampling: deterministic) on both models, 8 requests a
    batch in 24 blocks of 8: (ours, theirs), each of our children checked equal to its parent."""
    gen = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=True, top_k=1, num_return_sequences=2,
                           eos_token_id=-1, pad_token_id=0)
    cb = dict(page_size=8, num_blocks=24, max_batch_tokens=64, max_requests_per_batch=8)
    want = _generated(eager.generate_batch(inputs, generation_config=gen,
                                           continuous_batching_config=ContinuousBatchingConfig(**cb)))
    got = _generated(ours.generate_batch(inputs, generation_config=gen,
                                         continuous_batching_config=ContinuousBatchingConfig(**cb)))
    for rid, tokens in got.items():
        if "__child#" in rid:
            assert tokens == got[rid.split("__child#")[0]], f"{rid} differs from its parent"
    return got, want


def test_forked_requests_match_paged_eager(tokamax, paged, monkeypatch):
    """num_return_sequences=2: transformers forks each request after its prompt, sharing its full blocks and copying
    the last one through the block view; top_k=1 sampling is deterministic, so parent and child match paged|eager."""
    copied = []
    block_copy = paged.store.BlockBytes.index_copy_
    monkeypatch.setattr(paged.store.BlockBytes, "index_copy_",
                        lambda self, dim, ids, source: copied.append(len(ids)) or block_copy(self, dim, ids, source))
    eager, ours = cb_models.pair("llama-gqa")
    lengths = [6, 13, 21]
    inputs = cb_models.prompts(lengths, seed=7)
    got, want = _forked(eager, ours, inputs, max_new_tokens=5)
    assert len(got) == 2 * len(lengths) and any("__child#" in rid for rid in got)
    assert sum(copied) >= len(lengths), copied  # every request's partial last block was copied for its child
    assert got == want


# ---- generate_batch: sliding-window models ------------------------------------------------------------------------
def test_sliding_window_requests_match_paged_eager(tokamax):
    """Mistral with a 20-token window on every layer (transformers keeps every layer's cache as a ring of 3
    blocks of 8), eight requests with their own max_new_tokens through the manager, at most 4 and 32 tokens a
    step: prompts past the window (a 45-token one prefilled in chunks across it), decodes past it, requests
    finishing at different steps. One kernel call per layer and forward, the window passed to the kernel; the
    exports bounded by the window's pages, not the sequences' lengths."""
    eager, ours = cb_models.pair("mistral-window")
    lengths, new_tokens = [9, 30, 3, 45, 21, 14, 2, 26], [12, 3, 25, 8, 1, 16, 30, 5]
    inputs = cb_models.prompts(lengths, seed=13)
    gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = dict(page_size=8, num_blocks=10, max_batch_tokens=32, max_requests_per_batch=4)
    want = _manager_run(eager, inputs, new_tokens, gen, ContinuousBatchingConfig(**cb))
    with _probed(ours, _namespace(tokamax)) as (probe, forwards):
        got = _manager_run(ours, inputs, new_tokens, gen, ContinuousBatchingConfig(**cb))
    assert [len(t) for t in got.values()] == new_tokens
    assert got == want
    assert probe.count("batched_rpa") == ours.config.num_hidden_layers * forwards[0], probe.calls
    # tokens 8, 16 or 32; 8 sequences; pages per sequence: 19 visible + 7 (the shift) + 32 new < 8 pages
    assert probe.exports()["batched_rpa"] <= 3 * 2 < forwards[0], (probe.exports(), forwards)


@pytest.mark.parametrize(("family", "reference"), [("qwen3-mixed", "paged|eager"), ("gemma2", "eager")])
def test_mixed_window_and_full_layers_match(tokamax, family, reference):
    """Sliding and full layers in one model (transformers: one allocator each, both served by the kernel): Qwen3
    with layer_types (a 10-token window) against paged|eager; Gemma 2 (a 12-token window on every other layer,
    soft-capped attention logits, query_pre_attn_scalar, head_dim 32) against transformers' own eager generate()
    one prompt at a time (paged|eager drops the soft cap). Prompts past the window, one chunked."""
    theirs, ours = cb_models.pair(family, "paged|eager" if reference == "paged|eager" else "eager")
    inputs = cb_models.prompts([7, 25, 40, 16, 3], seed=17)
    gen = GenerationConfig(max_new_tokens=12, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = dict(page_size=8, num_blocks=24, max_batch_tokens=32, max_requests_per_batch=4)
    got = list(_generated(ours.generate_batch(inputs, generation_config=gen,
                                              continuous_batching_config=ContinuousBatchingConfig(**cb))).values())
    if reference == "paged|eager":
        want = list(_generated(theirs.generate_batch(
            inputs, generation_config=gen, continuous_batching_config=ContinuousBatchingConfig(**cb))).values())
    else:
        want = [theirs.generate(torch.tensor([p]), generation_config=gen)[0, len(p):].tolist() for p in inputs]
    assert got == want


def test_default_mistral_window_matches_paged_eager(tokamax):
    """MistralConfig()'s own window (4096 tokens): transformers treats every layer as a window layer, so a plain
    Mistral config runs this path; short prompts, the kernel given the window."""
    assert cb_models._mistral_default_window().sliding_window == transformers.MistralConfig().sliding_window
    eager, ours = cb_models.pair("mistral-default-window")
    inputs = cb_models.prompts([5, 17, 3, 30], seed=19)
    gen = GenerationConfig(max_new_tokens=6, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = dict(page_size=16, num_blocks=16, max_batch_tokens=32, max_requests_per_batch=4)
    want = _generated(eager.generate_batch(inputs, generation_config=gen,
                                           continuous_batching_config=ContinuousBatchingConfig(**cb)))
    got = _generated(ours.generate_batch(inputs, generation_config=gen,
                                         continuous_batching_config=ContinuousBatchingConfig(**cb)))
    assert group_layers_by_attn_type(ours.config) == {"sliding_attention": [0, 1]}
    assert got == want


def test_forked_window_requests_match_paged_eager(tokamax, paged, monkeypatch):
    """num_return_sequences=2 on the 20-token-window Mistral with prompts past the window: transformers copies
    every ring block of each request (no block sharing for window layers) through the ring view; parent and
    child match paged|eager and each other."""
    copied = []
    ring_copy = paged.ring.RingBytes.index_copy_
    monkeypatch.setattr(paged.ring.RingBytes, "index_copy_",
                        lambda self, dim, ids, source: copied.append(len(ids)) or ring_copy(self, dim, ids, source))
    eager, ours = cb_models.pair("mistral-window")
    inputs = cb_models.prompts([26, 13, 43], seed=23)
    got, want = _forked(eager, ours, inputs, max_new_tokens=6)
    assert len(got) == 6 and sum(copied) >= 3 + 2 + 3, copied  # every ring block (of 8 tokens) of each request
    assert got == want


# ---- refusals and loading -----------------------------------------------------------------------------------------
def _refused(tokamax: ModuleType, config: transformers.PreTrainedConfig, *, layer: torch.nn.Module | None = None,
             dtype: torch.dtype = torch.float32, drop: tuple[str, ...] = (), **options) -> str:  # noqa: ANN003
    batches = Batches(config, 4, 16, dtype)
    kwargs = {k: v for k, v in {**batches.step([("a", 3)]), **options}.items() if k not in drop}
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    q, k = torch.zeros(1, heads, 3, dim, dtype=dtype), torch.zeros(1, kv_heads, 3, dim, dtype=dtype)
    with pytest.raises((NotImplementedError, ValueError)) as info:
        tokamax.flash_paged(layer or Layer(0), q, k, k, None, **kwargs)
    return str(info.value)


def _with_sinks() -> torch.nn.Module:
    layer = Layer(0)
    layer.sinks = torch.nn.Parameter(torch.zeros(4))
    return layer


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("case", "message"), [
    ("window-mismatch", "layer 0 attends over a window of 8 tokens but transformers keeps a window of 16"),
    ("no-positions", "passes no position_ids to its attention function"),
    ("no-cache", "called the attention function from continuous batching without its PagedAttentionCache"),
    ("no-cache-outside-batching", "serves transformers' continuous batching only"),
    ("sinks", "attention sinks (GPT-OSS's s_aux) are not supported"),
    ("dropout", "attention dropout is not supported"),
    ("float16", "must share a dtype among float32 and bfloat16"),
    ("block-table", "got a block table"),
])
def test_refusals_say_why_and_what_to_use(tokamax, case, message):
    config = _config()
    if case == "window-mismatch":
        text = _refused(tokamax, cb_models._mistral(sliding_window=16), sliding_window=8)
        assert "attn_implementation='paged|eager' or 'sdpa'" in text
    elif case == "no-positions":  # every layer sliding, and the model does not pass position_ids (Cohere2's way)
        text = _refused(tokamax, cb_models._mistral(sliding_window=16), position_ids=None)
        assert "attn_implementation='paged|eager' or 'sdpa'" in text
    elif case == "no-cache":  # transformers >= 5.24's way when the cache is not handed on (handoff)
        text = _refused(tokamax, config, cache=None)
        assert f"transformers {transformers.__version__} " in text
        assert "attn_implementation='paged|eager' or 'sdpa'" in text
    elif case == "no-cache-outside-batching":  # no slot indices: not a continuous-batching call
        text = _refused(tokamax, config, cache=None, drop=("read_index", "write_index"))
        assert "kernels-community/tokamax:attention" in text
    elif case == "sinks":
        text = _refused(tokamax, config, layer=_with_sinks())
    elif case == "dropout":
        text = _refused(tokamax, config, dropout=0.1)
    elif case == "float16":
        text = _refused(tokamax, config, dtype=torch.float16)
    else:
        text = _refused(tokamax, config, block_table=torch.zeros(1, 1, 4, dtype=torch.int32))
    assert text.startswith("tokamax flash_paged: ") and message in text, text


def _handoff(tokamax: ModuleType) -> ModuleType:
    return importlib.import_module(f"{tokamax.__name__}.integrations.transformers.paged.handoff")


@pytest.mark.kernels_ci
@pytest.mark.parametrize("attention", [cb_models.FLASH_PAGED, "paged|eager"])
def test_cache_update_hands_the_cache_to_the_kernel(tokamax, attention):
    """transformers >= 5.24 calls `cache.update` in the model and passes no cache to the attention function: for a
    cache whose model runs the kernel, the wrapped update hands the cache on in the kwargs and leaves the new tokens,
    the per-kind lengths and transformers' own cache tensor as they were; any other cache gets transformers' own
    update (the same outputs as the unwrapped function's)."""
    from transformers.integrations.hub_kernels import load_and_register_attn_kernel

    load_and_register_attn_kernel(cb_models.FLASH_PAGED)
    config = _config()
    config._attn_implementation = attention
    ours, theirs = Batches(config, 4, 16), Batches(config, 4, 16)
    work = [("a", 3), ("b", 2)]
    kwargs, kwargs_theirs = ours.step(work), theirs.step(work)
    del kwargs["cache"], kwargs_theirs["cache"]
    g = torch.Generator().manual_seed(7)
    k, v = (torch.randn(1, config.num_key_value_heads, 5, config.head_dim, generator=g) for _ in range(2))
    before = ours.cache.cache_tensor.clone()
    got = ours.cache.update(k, v, 0, kwargs)
    want = PagedAttentionCache.update.__wrapped__(theirs.cache, k, v, 0, kwargs_theirs)
    if attention == cb_models.FLASH_PAGED:
        assert kwargs["cache"] is ours.cache and got[0] is k and got[1] is v
        assert isinstance(kwargs["cu_seq_lens_k"], dict) and isinstance(kwargs["max_length_k"], dict)
        assert torch.equal(ours.cache.cache_tensor, before)
    else:
        assert "cache" not in kwargs and not isinstance(kwargs["cu_seq_lens_k"], dict)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        assert torch.equal(ours.cache.cache_tensor, theirs.cache.cache_tensor)
        assert not torch.equal(ours.cache.cache_tensor, before)


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("first", "second"), [(cb_models.FLASH_PAGED, "sdpa"), (cb_models.FLASH_PAGED, "paged|eager"),
                                               ("sdpa", cb_models.FLASH_PAGED)])
def test_the_hand_off_follows_the_attention_across_sessions_of_one_cache(tokamax, first, second):
    """The hand-off is decided per cache and attention implementation: one real PagedAttentionCache, a session on
    `first` (its requests freed after, as transformers' reset does between generate_batch sessions), then one on
    `second`. Each session's update is the hand-off on the kernel, transformers' own update (the same outputs as
    the unwrapped function's on a twin cache, written into its cache tensor) otherwise. Before, the first
    session's decision stood: the kernel's cache was never updated after a switch to transformers' attention,
    and transformers' update ran after a switch to the kernel."""
    from transformers.integrations.hub_kernels import load_and_register_attn_kernel

    load_and_register_attn_kernel(cb_models.FLASH_PAGED)
    config = _config()
    ours, theirs = Batches(config, 4, 16), Batches(config, 4, 16)
    g = torch.Generator().manual_seed(7)
    for session, attention in enumerate((first, second)):
        ours.cache.config._attn_implementation = attention
        work = [(f"a{session}", 3), (f"b{session}", 2)]
        kwargs, kwargs_theirs = ours.step(work), theirs.step(work)
        del kwargs["cache"], kwargs_theirs["cache"]
        k, v = (torch.randn(1, config.num_key_value_heads, 5, config.head_dim, generator=g) for _ in range(2))
        before = ours.cache.cache_tensor.clone()
        got = ours.cache.update(k, v, 0, kwargs)
        if attention == cb_models.FLASH_PAGED:
            assert kwargs["cache"] is ours.cache and got[0] is k and got[1] is v, session
            assert torch.equal(ours.cache.cache_tensor, before), session
        else:
            want = PagedAttentionCache.update.__wrapped__(theirs.cache, k, v, 0, kwargs_theirs)
            assert "cache" not in kwargs, session
            assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True)), session
            assert torch.equal(ours.cache.cache_tensor, theirs.cache.cache_tensor), session
        for batches in (ours, theirs):  # the session ends: transformers frees every request
            batches.cache.free_all_requests()
            batches.states.clear()


@pytest.mark.kernels_ci
@pytest.mark.parametrize("change", ["allocator", "signature"])
def test_an_unknown_cache_structure_refuses_only_calls_that_need_the_hand_off(tokamax, monkeypatch, change):
    """If transformers' PagedAttentionCache.update or its allocator classes are not what the handoff was written
    for, nothing is wrapped and a continuous-batching call that comes without its cache (transformers >= 5.24's,
    which needed the hand-off) is refused, naming the transformers version, what differs and what to use: with a
    "flash" name continuous batching builds no mask, so transformers' own attention would attend across the packed
    sequences. A call carrying the cache (transformers < 5.24's) needs no hand-off: it runs, its values float64's
    (before, it was refused too)."""
    from transformers.generation.continuous_batching import cache_allocators

    handoff = _handoff(tokamax)
    monkeypatch.setattr(handoff, "state", {"installed": False, "why": None})
    update = PagedAttentionCache.update
    with monkeypatch.context() as structure:
        if change == "allocator":
            renamed = type("SlidingAttentionCacheAllocator", (), {"layer_type": "sliding_window"})
            structure.setattr(cache_allocators, "SlidingAttentionCacheAllocator", renamed)
            why = "cache_allocators.SlidingAttentionCacheAllocator is missing or its layer_type is not"
        else:
            structure.setattr(PagedAttentionCache, "update", lambda self, key_states, value_states, layer_idx,
                              **kwargs: None)
            why = "does not take (self, key_states, value_states, layer_idx, kwargs)"
        handoff.install(lambda function: True)
        assert not handoff.state["installed"]
    assert PagedAttentionCache.update is update
    text = _refused(tokamax, _config(), cache=None)
    assert text.startswith(f"tokamax flash_paged: transformers {transformers.__version__}: ") and why in text, text
    assert "attn_implementation='paged|eager' or 'sdpa'" in text
    batches = Batches(_config(), 4, 16)
    q = torch.zeros(1, 4, 3, 32)
    with pytest.raises(NotImplementedError, match=r"paged\|eager"):
        tokamax.flash_attention(Layer(0), q, q[:, :2], q[:, :2], None, **{**batches.step([("a", 3)]), "cache": None})
    batches, g, history = Batches(_config(), 4, 16), torch.Generator().manual_seed(5), _History()
    for work in ([("a", 3), ("b", 5)], [("a", 1), ("b", 1)]):  # a prefill, then a decode step on the cache
        _forward(tokamax, batches, history, work, g)


def test_generate_batch_with_an_unknown_cache_structure_runs_where_the_cache_reaches_the_kernel(tokamax,
                                                                                                 monkeypatch):
    """transformers' update of another signature, so nothing wrapped: before transformers 5.24 the cache still
    reaches the attention function and generate_batch equals paged|eager's (before, every call was refused);
    from 5.24 on, where the hand-off was needed, every request is refused naming what differs."""
    from packaging.version import Version

    handoff = _handoff(tokamax)
    monkeypatch.setattr(handoff, "state", {"installed": False, "why": None})
    with monkeypatch.context() as structure:
        structure.setattr(PagedAttentionCache, "update", lambda self, key_states, value_states, layer_idx,
                          **kwargs: None)
        handoff.install(lambda function: True)
    assert handoff.state["why"] is not None
    monkeypatch.setattr(PagedAttentionCache, "update", PagedAttentionCache.update.__wrapped__)  # nothing wrapped
    eager, ours = cb_models.pair("llama-gqa")
    inputs = cb_models.prompts([5, 17, 3, 30], seed=4)
    gen = GenerationConfig(max_new_tokens=4, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = dict(page_size=16, num_blocks=16, max_batch_tokens=32, max_requests_per_batch=4)
    want = _generated(eager.generate_batch(inputs, generation_config=gen,
                                           continuous_batching_config=ContinuousBatchingConfig(**cb)))
    got = ours.generate_batch(inputs, generation_config=gen, continuous_batching_config=ContinuousBatchingConfig(**cb))
    if Version(transformers.__version__) < Version("5.24"):
        assert _generated(got) == want
    else:
        errors = [r.error for r in got.values()]
        assert all(e is not None and "does not take (self, key_states, value_states, layer_idx, kwargs)" in e
                   for e in errors), errors


@pytest.mark.kernels_ci
def test_an_untested_transformers_is_warned_of_once(tokamax, monkeypatch, caplog):
    handoff = _handoff(tokamax)
    monkeypatch.setattr(handoff, "state", {"installed": False, "why": None})
    monkeypatch.setattr(handoff, "TESTED", ("0.0.0",))
    monkeypatch.setattr(PagedAttentionCache, "update", PagedAttentionCache.update)  # restored afterwards
    with caplog.at_level("WARNING"):
        handoff.install(lambda function: False)
        handoff.install(lambda function: False)
    said = [r.getMessage() for r in caplog.records if "is untested" in r.getMessage()]
    assert said == [f"tokamax flash_paged: transformers {transformers.__version__} is untested (tested: 0.0.0); "
                    "continuous batching's cache is taken from PagedAttentionCache.update"]


@pytest.mark.kernels_ci
def test_transformers_loads_it_for_continuous_batching(tokamax):
    """The Hub name passes continuous batching's check ("flash" in it, no FA2/FA3 version, so no CUDA block-table
    path), transformers' kernel loading registers the function after the colon, and `flash_attn_forward` (which
    transformers 5.22 requires) is still the generate() attention."""
    from transformers.generation.continuous_batching.utils import attn_mask_is_needed
    from transformers.integrations.hub_kernels import load_and_register_attn_kernel
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.utils.generic import is_flash_attention_requested

    name = cb_models.FLASH_PAGED
    assert is_flash_attention_requested(requested_attention_implementation=name)
    assert not is_flash_attention_requested(requested_attention_implementation=name, version=[2, 3])
    kernel = load_and_register_attn_kernel(name)
    assert ALL_ATTENTION_FUNCTIONS[name] is kernel.flash_paged is tokamax.flash_paged
    assert kernel.flash_attn_forward is kernel.attention and not hasattr(kernel, "flash_attn_varlen_func")
    config = _config()
    config._attn_implementation = name
    assert attn_mask_is_needed(config) is False

