"""Splash attention through our entry points (`tokamax.splash`) and upstream's public op, at the
shapes of real models: training steps and prompts (`attend`, differentiated with `jax.grad`, whose
backward is `attend_vjp`), a chunk at a fixed offset, the cache steps of transformers' decode path
(`attend_at`, a run-time offset, at the buckets `decode.cache_step` pads to), and the SMEM bound
of the block schedule, each side of it (the last length our check accepts compiles; the next is
refused by our check, before libtpu sees it).

Upstream's public `splash_attention` is called with `implementation="mosaic_tpu"`: its default list
reaches the Pallas kernel here only because `cross_compile` skips the Op's device check (without it,
JAX's backend a CPU, the call takes its XLA path: DESIGN §15); naming the implementation makes a
change there fail (the test asserts a tpu_custom_call) rather than compile XLA's attention.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ..case import Case, on_chips, spec
from ._models import GEMMA_3_27B, GPT_OSS_120B, LLAMA_3_8B, QWEN3_8B, Model

K, BF16 = 1024, jnp.bfloat16
# Sliding windows (config.json "sliding_window"); transformers' attention makes a window of w tokens
# the causal local window (w - 1, 0) (integrations/transformers/attention.py).
WINDOWS = {GEMMA_3_27B.name: 1024, GPT_OSS_120B.name: 128}
SINKS = {GPT_OSS_120B.name}  # gpt-oss's per-head attention sinks (`s_aux`)
DECODE_BATCH = 8
# Training lengths and the chips each is compiled for: 128k on v7x (upstream's table holds it) and
# on v5e (the least HBM).
LENGTHS = ((8 * K, "8k", ("v5e", "v6e", "v7x")), (32 * K, "32k", ("v6e",)), (128 * K, "128k", ("v5e", "v7x")))


def _mask(kernel: Any, model: Model) -> Any:
    window = WINDOWS.get(model.name)
    return kernel.splash.MaskSpec.of(True, None if window is None else (window - 1, 0))


def _heads(model: Model, tp: int) -> tuple[int, int]:
    """(query heads, KV heads) on one chip of `tp`-way tensor parallelism."""
    return model.heads // tp, max(model.kv_heads // tp, 1)


def _loss(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A scalar of `fn`'s first output, for `jax.grad`."""
    return lambda *a: jnp.sum(jnp.square(fn(*a)[0].astype(jnp.float32)))


def _attend(model: Model, length: int, *, grad: bool = True, tokens: int | None = None, q_len: int | None = None,
            offset: int = 0, tp: int = 1, segments: bool = False) -> Callable[..., Any]:
    """`splash.attend` (forward, or with `jax.grad` forward and `attend_vjp`) on one sequence of
    `length` keys; `tokens` real tokens padded to `length` by segment ids as `prefill` pads them;
    `q_len` queries at `offset` (a chunk); `tp` the tensor-parallel degree the heads are split by."""
    def build(kernel: Any, mesh: Any) -> Any:
        heads, kv_heads = _heads(model, tp)
        q_rows = q_len or length
        specs = [spec(mesh, (1, heads, q_rows, model.head_dim), BF16),
                 spec(mesh, (1, kv_heads, length, model.head_dim), BF16),
                 spec(mesh, (1, kv_heads, length, model.head_dim), BF16)]
        with_sinks, mask = model.name in SINKS, _mask(kernel, model)
        if with_sinks:
            specs.append(spec(mesh, (heads,), jnp.float32))
        if segments:
            specs.append(spec(mesh, (1, length), jnp.int32))

        def forward(q: Any, k: Any, v: Any, *rest: Any) -> Any:
            sinks = rest[0] if with_sinks else None
            ids = rest[-1] if segments else None
            return kernel.splash.attend(q, k, v, ids, ids, sinks, spec=mask, offset=offset)

        argnums = tuple(range(4 if with_sinks else 3))
        return (jax.grad(_loss(forward), argnums=argnums) if grad else forward), specs
    return build


def _attend_vjp(model: Model, length: int) -> Callable[..., Any]:
    """`splash.attend_vjp` alone, on the forward's residuals (what the Torch backward op runs)."""
    def build(kernel: Any, mesh: Any) -> Any:
        heads, kv_heads = _heads(model, 1)
        q = spec(mesh, (1, heads, length, model.head_dim), BF16)
        kv = spec(mesh, (1, kv_heads, length, model.head_dim), BF16)
        rows = spec(mesh, (1, heads, length), jnp.float32)
        mask = _mask(kernel, model)

        def backward(q: Any, k: Any, v: Any, out: Any, max_logits: Any, lse: Any, dout: Any) -> Any:
            return kernel.splash.attend_vjp(q, k, v, None, None, None, out, max_logits, lse, dout, spec=mask)[:3]
        return backward, [q, kv, kv, q, rows, rows, q]
    return build


def _attend_at(model: Model, new_tokens: int, cache_tokens: int, *, batch: int = DECODE_BATCH,
               slots: int | None = None) -> Callable[..., Any]:
    """`splash.attend_at` as `decode.cache_step` calls it: `new_tokens` padded to `query_bucket`,
    a cache of `cache_tokens` padded to `bucket` slots (or `slots` as given), segment ids for the
    slots written, the offset an int32 [1] tensor."""
    def build(kernel: Any, mesh: Any) -> Any:
        rows = kernel.splash.query_bucket(new_tokens)
        kv_len = slots or kernel.splash.bucket(cache_tokens)
        with_sinks, mask = model.name in SINKS, _mask(kernel, model)
        specs = [spec(mesh, (batch, model.heads, rows, model.head_dim), BF16),
                 spec(mesh, (batch, model.kv_heads, kv_len, model.head_dim), BF16),
                 spec(mesh, (batch, model.kv_heads, kv_len, model.head_dim), BF16),
                 spec(mesh, (batch, rows), jnp.int32), spec(mesh, (batch, kv_len), jnp.int32),
                 spec(mesh, (1,), jnp.int32)]
        if with_sinks:
            specs.append(spec(mesh, (model.heads,), jnp.float32))

        def step(q: Any, k: Any, v: Any, q_ids: Any, kv_ids: Any, offset: Any, *sinks: Any) -> Any:
            return kernel.splash.attend_at(q, k, v, q_ids, kv_ids, offset, sinks[0] if sinks else None, spec=mask)
        return step, specs
    return build


def _public(model: Model, length: int, grad: bool) -> Callable[..., Any]:
    """Upstream's public `splash_attention` (unbatched, causal), its Mosaic implementation."""
    def build(kernel: Any, mesh: Any) -> Any:
        specs = [spec(mesh, (model.heads, length, model.head_dim), BF16),
                 spec(mesh, (model.kv_heads, length, model.head_dim), BF16),
                 spec(mesh, (model.kv_heads, length, model.head_dim), BF16)]
        causal = kernel.splash._upstream.base().CAUSAL_MASK

        def forward(q: Any, k: Any, v: Any) -> Any:
            return (kernel.ops.experimental.splash_attention(q, k, v, mask=causal, implementation="mosaic_tpu"),)
        return (jax.grad(_loss(forward), argnums=(0, 1, 2)) if grad else lambda *a: forward(*a)[0]), specs
    return build


def _tp(model: Model, chip: str, length: int) -> int:
    """gpt-oss-120b's 64 heads at 128k tokens, forward and backward, take 20 GiB of temporaries (v7x);
    on v5e libtpu refuses them (CompileTimeHbmOom: "HLO temporaries (15.75G) exceeds available HBM"),
    and a 120B model never runs on one v5e anyway: there its layer is one chip's share under 8-way
    tensor parallelism (8 query heads, 1 KV head)."""
    return 8 if (model, chip, length) == (GPT_OSS_120B, "v5e", 128 * K) else 1


def _tp_label(model: Model, chip: str, length: int) -> str:
    tp = _tp(model, chip, length)
    return f"-tp{tp}" if tp > 1 else ""


def _case(what: str, model: Model, chip: str, build: Callable[..., Any], tier: str = "all",
          expect: str | None = None) -> Case:
    extra = {} if expect is None else {"expect": expect}
    return Case(f"splash/{what}", "splash", model.name, chip, build, tier=tier, **extra)


SMEM_REFUSAL = "tokamax splash attention"


def _training() -> list[Case]:
    out = []
    for model in (LLAMA_3_8B, GEMMA_3_27B, GPT_OSS_120B):
        kind = f"window-{WINDOWS[model.name]}" if model.name in WINDOWS else "causal"
        kind += "+sinks" if model.name in SINKS else ""
        default_chip = {LLAMA_3_8B.name: "v6e", GEMMA_3_27B.name: "v5e", GPT_OSS_120B.name: "v7x"}[model.name]
        for length, label, chips in LENGTHS:
            out += on_chips(lambda chip, model=model, length=length, label=label, kind=kind, d=default_chip: _case(
                f"attend/{model.name}{_tp_label(model, chip, length)}/{kind}/{label}/fwd+bwd", model, chip,
                _attend(model, length, tp=_tp(model, chip, length)),
                tier="default" if (label, chip) == ("8k", d) else "all"), chips)
    # upstream's v7x table holds Llama-3.1-8B's shapes at 4096 tokens with the diagonal skips
    out.append(_case(f"attend/{LLAMA_3_8B.name}/causal/4k-tuned/fwd+bwd", LLAMA_3_8B, "v7x",
                     _attend(LLAMA_3_8B, 4 * K), tier="default"))
    # a prompt of 30,000 tokens: prefill pads it to splash.padded(30000) = 30720, the rest masked by ids
    out += on_chips(lambda chip: _case(f"attend/{QWEN3_8B.name}/causal/30000-padded/fwd+bwd", QWEN3_8B, chip,
                                       _attend(QWEN3_8B, 30 * K, segments=True)))
    # a chunk of 2048 queries at the fixed offset 6144 against 8192 keys
    out += on_chips(lambda chip: _case(f"attend/{LLAMA_3_8B.name}/causal/2k-at-6k/fwd+bwd", LLAMA_3_8B, chip,
                                       _attend(LLAMA_3_8B, 8 * K, q_len=2 * K, offset=6 * K)))
    out += on_chips(lambda chip: _case(f"attend_vjp/{LLAMA_3_8B.name}/causal/8k", LLAMA_3_8B, chip,
                                       _attend_vjp(LLAMA_3_8B, 8 * K)))
    return out


def _cache_steps() -> list[Case]:
    out = []
    for model in (LLAMA_3_8B, GEMMA_3_27B, GPT_OSS_120B):
        for cache, label in ((8000, "8k"), (32000, "32k"), (128000, "128k")):
            chips = ("v5e", "v6e", "v7x") if model is LLAMA_3_8B else ("v6e",)
            out += on_chips(lambda chip, model=model, cache=cache, label=label: _case(
                f"attend_at/{model.name}/decode-b{DECODE_BATCH}/cache-{label}", model, chip,
                _attend_at(model, 1, cache),
                tier="default" if (model, label, chip) == (LLAMA_3_8B, "32k", "v6e") else "all"), chips)
    # chunked prefill: 500 new tokens (query_bucket: 512) against a cache of 20,000 (bucket: 20480)
    out += on_chips(lambda chip: _case(f"attend_at/{QWEN3_8B.name}/chunk-500/cache-20000", QWEN3_8B, chip,
                                       _attend_at(QWEN3_8B, 500, 20000, batch=1),
                                       tier="default" if chip == "v7x" else "all"))
    return out


def _public_op() -> list[Case]:
    out = on_chips(lambda chip: _case(f"public/{LLAMA_3_8B.name}/causal/8k/fwd+bwd", LLAMA_3_8B, chip,
                                      _public(LLAMA_3_8B, 8 * K, grad=True),
                                      tier="default" if chip == "v6e" else "all"))
    out += [_case(f"public/{LLAMA_3_8B.name}/causal/32k/fwd", LLAMA_3_8B, "v6e", _public(LLAMA_3_8B, 32 * K, False))]
    return out


def _smem_bound() -> list[Case]:
    """Each side of the schedule's SMEM bound (docs/jax.md): causal at 1024-token blocks fits 388
    blocks (397,312 tokens), a full mask with segment ids 240 x 240 blocks, a cache step 57,826
    (row block, KV block) pairs. One chip's heads of Llama-3.1-8B under 8-way tensor parallelism
    (4 query heads, 1 KV head), so that the arrays fit every chip's HBM."""
    model, tp = LLAMA_3_8B, 8
    out = []
    for blocks, expect in ((388, None), (389, SMEM_REFUSAL)):
        out += on_chips(lambda chip, blocks=blocks, expect=expect: _case(
            f"smem/{model.name}-tp{tp}/causal/{blocks}-blocks/fwd+bwd", model, chip,
            _attend(model, blocks * K, tp=tp), expect=expect,
            tier="default" if expect or chip == "v6e" else "all"))
    full = Model(f"{model.name}-tp{tp}-bidirectional", model.hidden, model.vocab, *_heads(model, tp), model.head_dim)
    out += [_case(f"smem/{full.name}/full+ids/{blocks}-blocks/fwd+bwd", full, "v6e", _full(full, blocks * K),
                  expect=expect, tier="default" if expect else "all")
            for blocks, expect in ((240, None), (241, SMEM_REFUSAL))]
    # a chunk of 16,384 new tokens (4 query heads per KV head: 64 row blocks) against 903 / 904 KV blocks
    out += [_case(f"smem/{model.name}/chunk-16384/cache-{blocks}-blocks", model, "v6e",
                  _attend_at(model, 16 * K, 0, batch=1, slots=blocks * K), expect=expect,
                  tier="default" if expect else "all")
            for blocks, expect in ((903, None), (904, SMEM_REFUSAL))]
    return out


def _full(model: Model, length: int) -> Callable[..., Any]:
    """A bidirectional call with padding ids (`bidirectional.full_attention`): a full mask whose
    grid the ids refine over every block, forward and backward."""
    def build(kernel: Any, mesh: Any) -> Any:
        specs = [spec(mesh, (1, model.heads, length, model.head_dim), BF16),
                 spec(mesh, (1, model.kv_heads, length, model.head_dim), BF16),
                 spec(mesh, (1, model.kv_heads, length, model.head_dim), BF16), spec(mesh, (1, length), jnp.int32)]
        mask = kernel.splash.MaskSpec("full")

        def forward(q: Any, k: Any, v: Any, ids: Any) -> Any:
            return kernel.splash.attend(q, k, v, ids, ids, None, spec=mask)
        return jax.grad(_loss(forward), argnums=(0, 1, 2)), specs
    return build


HEAD_DIMS = {  # head dim -> (the shapes' source, query heads, KV heads, value head dim)
    64: ("gpt-oss-120b, one chip of 8", 8, 1, 64),
    128: ("Llama-3.1-8B", 32, 8, 128),
    192: ("DeepSeek-V3 MLA, one chip of 8", 16, 16, 128),  # queries and keys of 192 (128 + RoPE 64), values of 128
    256: ("Gemma-3-4B", 8, 4, 256),
}
HEAD_DIM_MASKS = {"causal": (None, None), "window-1024": ((1023, 0), None), "soft-cap-50": (None, 50.0)}
"""Gemma 3's sliding window; Gemma 2's attention logit soft cap."""


def _at_head_dim(head_dim: int, window: tuple[int, int] | None, soft_cap: float | None,
                 backward: tuple[int, int, int] | None = None) -> Callable[..., Any]:
    """`splash.attend` and its backward at 8,192 tokens (one sequence) with `HEAD_DIMS`' heads: the blocks
    `splash.blocks` fits to the chip's scoped VMEM (upstream's 1024-token blocks ask 19.0 MiB of the v5e's 16 for
    the backward at head dims 192 and 256)."""
    _, heads, kv_heads, dim_v = HEAD_DIMS[head_dim]

    def build(kernel: Any, mesh: Any) -> Any:
        specs = [spec(mesh, (1, heads, 8 * K, head_dim), BF16), spec(mesh, (1, kv_heads, 8 * K, head_dim), BF16),
                 spec(mesh, (1, kv_heads, 8 * K, dim_v), BF16)]
        mask = kernel.splash.MaskSpec.of(True, window)

        asked = None if backward is None else kernel.splash.Blocks(*backward)

        def forward(q: Any, k: Any, v: Any) -> Any:
            return kernel.splash.attend(q, k, v, None, None, None, spec=mask, soft_cap=soft_cap, backward_blocks=asked)
        return jax.grad(_loss(forward), argnums=(0, 1, 2)), specs
    return build


def _head_dims() -> list[Case]:
    """Every head dim of `HEAD_DIMS` with every mask of `HEAD_DIM_MASKS`, forward and backward, on each chip."""
    out = []
    for head_dim, (model, *_) in HEAD_DIMS.items():
        for kind, (window, cap) in HEAD_DIM_MASKS.items():
            out += on_chips(lambda chip, d=head_dim, m=model, k=kind, w=window, c=cap: Case(
                f"splash/attend/head-dim-{d}/{k}/8k/fwd+bwd", "splash", m, chip, _at_head_dim(d, w, c)))
    # upstream's backward blocks asked for at head dim 256 on the v5e: refused by the kernel, before libtpu
    out.append(Case("splash/attend/head-dim-256/causal/8k/upstream-backward-blocks", "splash", HEAD_DIMS[256][0],
                    "v5e", _at_head_dim(256, None, None, (1024, 1024, 512)),
                    expect="tokamax splash attention: backward blocks (1024, 1024, 512) at head dim 256 need"))
    return out


def cases() -> list[Case]:
    return _training() + _cache_steps() + _public_op() + _smem_bound() + _head_dims()
