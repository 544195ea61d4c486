"""The Torch ops as torch-tpu runs them: each registered op's JAX function (`_bridge.register` keeps it
in `TunedOp._jax_fn`), called as torch-tpu's export calls it (tensors, then the static arguments,
then the autotuning token, "" with no result applied), at the shapes a transformers model of real
size hands it: the splash ops at the lengths `integrations/transformers` pads to (`splash.padded`
for a prompt, `bucket` / `query_bucket` for a cache step), the experts path's grouped matmuls in
transformers' weight layout (`experts.py`: [experts, out, in], `transpose_rhs=True`), the LM-head
statistics and cross-entropy ops, DeepSeek-V4's mHC and RoPE (the chip the op names: v7x).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from ..case import COMPILES, Case, on_chips, spec
from ._models import GPT_OSS_120B, LLAMA_3_8B, MIXTRAL_8X7B, QWEN3_8B, QWEN3_30B_A3B, Model

BF16, F32, I32 = jnp.bfloat16, jnp.float32, jnp.int32
NO_RESULT = ""  # the autotuning token with no result applied (`tuning.token()`)
TOKENS = 8192  # a step's tokens (rows of the head and of the experts' routing)
# DeepSeek-V4's shapes, as upstream's tpu7x autotuning tables hold them: 4 residual streams of 7168,
# 128 heads of 512 (qnorm_rope), a 64-dim rotary cache of 65536 positions
DSV4_HIDDEN, DSV4_STREAMS, DSV4_HEADS, DSV4_HEAD_DIM, DSV4_ROPE, DSV4_POSITIONS = 7168, 4, 128, 512, 64, 65536


def jax_fn(kernel: Any, family: str, op: str) -> Callable[..., Any]:
    """The JAX function torch-tpu exports for `torch_ops.<family>.<op>` (the token last)."""
    return getattr(kernel.torch_ops.families[family], op)._jax_fn


def _call(family: str, op: str, shapes: Callable[[Any], list[tuple[tuple[int, ...], Any] | None]],
          statics: tuple) -> Callable[..., Any]:
    """A build: the op's JAX function on `shapes(kernel)` (None: an optional tensor not passed), then
    `statics` and the token."""
    def build(kernel: Any, mesh: Any) -> Any:
        layout = shapes(kernel)
        specs = [spec(mesh, *s) for s in layout if s is not None]
        fn = jax_fn(kernel, family, op)

        def call(*arrays: Any) -> Any:
            it = iter(arrays)
            tensors = [None if s is None else next(it) for s in layout]
            return fn(*tensors, *statics, NO_RESULT)
        return call, specs
    return build


def _case(op: str, model: str, what: str, chip: str, build: Callable[..., Any], tier: str = "all") -> Case:
    return Case(f"torch_ops/{op}/{model}/{what}", "torch_ops", model, chip, build, tier=tier)


# ---- splash_attention: a prompt padded by prefill, its backward, a decode step ----------------
def _prefill(model: Model, batch: int, tokens: int, window: int = -1, sinks: bool = False, backward: bool = False
             ) -> Callable[..., Any]:
    """`prefill.self_attention`: `tokens` padded to `splash.padded(tokens)` with padding ids."""
    def shapes(kernel: Any) -> list:
        n = kernel.splash.padded(tokens)
        q, kv = ((batch, model.heads, n, model.head_dim), BF16), ((batch, model.kv_heads, n, model.head_dim), BF16)
        ids = ((batch, n), I32)
        head = [q, kv, kv, ids, ids, ((model.heads,), F32) if sinks else None]
        return head + [q, ((batch, model.heads, n), F32), q] if backward else head
    statics = (True, window - 1 if window > 0 else -1, 0 if window > 0 else -1, 0, 0.0)
    # the forward as prefill runs it (no gradient: `residuals` False); the backward takes no such flag
    return _call("splash_attention", "splash_bwd_op" if backward else "splash_op", shapes,
                 statics if backward else (*statics, False))


def _decode(model: Model, batch: int, new: int, cache: int, window: int = -1, sinks: bool = False
            ) -> Callable[..., Any]:
    """`decode.cache_step`: the cache op (its bookkeeping in its own program) on `new` tokens padded to
    `query_bucket(new)`, the cache and its padding mask to `bucket(cache)` slots."""
    def shapes(kernel: Any) -> list:
        rows, slots = kernel.splash.query_bucket(new), kernel.splash.bucket(cache)
        kv = ((batch, model.kv_heads, slots, model.head_dim), BF16)
        mask, first, lengths = ((batch, slots), I32), ((1,), I32), ((4,), I32)
        return [((batch, model.heads, rows, model.head_dim), BF16), kv, kv, mask, first, lengths,
                ((model.heads,), F32) if sinks else None]
    return _call("splash_attention", "splash_cache_op", shapes, (True, window - 1 if window > 0 else -1,
                                                                  0 if window > 0 else -1, 0.0, model.head_dim**-0.5))


def _at_offset(model: Model, batch: int, new: int, cache: int) -> Callable[..., Any]:
    """The public op's run-time offset (`splash_attention(q_offset=tensor)`): `new` tokens against `cache` slots."""
    def shapes(kernel: Any) -> list:
        kv = ((batch, model.kv_heads, cache, model.head_dim), BF16)
        return [((batch, model.heads, new, model.head_dim), BF16), kv, kv, ((batch, new), I32), ((batch, cache), I32),
                ((1,), I32), None]
    return _call("splash_attention", "splash_at_op", shapes, (True, -1, -1, 0.0))


def _splash() -> list[Case]:
    llama, oss = LLAMA_3_8B.name, GPT_OSS_120B.name
    out = on_chips(lambda chip: _case("splash_attention", llama, "prompt-3000-b2", chip, _prefill(LLAMA_3_8B, 2, 3000),
                                      tier="default" if chip == "v6e" else "all"))
    out += on_chips(lambda chip: _case("splash_attention_bwd", llama, "prompt-3000-b2", chip,
                                       _prefill(LLAMA_3_8B, 2, 3000, backward=True)))
    out += [_case("splash_attention", oss, "window-128+sinks/prompt-5000", "v7x",
                  _prefill(GPT_OSS_120B, 1, 5000, 128, True)),
            _case("splash_attention_bwd", oss, "window-128+sinks/prompt-5000", "v7x",
                  _prefill(GPT_OSS_120B, 1, 5000, 128, True, backward=True))]
    out += on_chips(lambda chip: _case("splash_attention_cache", llama, "decode-b8/cache-5000", chip,
                                       _decode(LLAMA_3_8B, 8, 1, 5000), tier="default" if chip == "v7x" else "all"))
    out += [_case("splash_attention_cache", oss, "window-128+sinks/decode-b8/cache-40000", "v6e",
                  _decode(GPT_OSS_120B, 8, 1, 40000, 128, True)),
            _case("splash_attention_cache", QWEN3_8B.name, "draft-5/cache-12000", "v5e",
                  _decode(QWEN3_8B, 1, 5, 12000)),
            _case("splash_attention_at", QWEN3_8B.name, "draft-5/cache-12032", "v5e",
                  _at_offset(QWEN3_8B, 1, 5, 12032))]
    return out


# ---- the experts path: gmm (forward), gmm_bwd (its autograd), tgmm --------------------------------
def _experts(model: Model, projection: str, op: str) -> Callable[..., Any]:
    """transformers' experts weights: gate_up_proj [E, 2 * inter, hidden], down_proj [E, hidden, inter];
    `TOKENS * experts_per_token` routed rows."""
    rows = TOKENS * model.experts_per_token
    k, n = (model.hidden, 2 * model.intermediate) if projection == "gate-up" else (model.intermediate, model.hidden)
    x, w, sizes = ((rows, k), BF16), ((model.experts, n, k), BF16), ((model.experts,), I32)
    if op == "gmm_op":
        return _call("ragged_dot", op, lambda _: [x, w, sizes], (True,))
    if op == "gmm_bwd_op":
        return _call("ragged_dot", op, lambda _: [x, w, sizes, ((rows, n), BF16)], (True,))
    return _call("ragged_dot", op, lambda _: [x, ((rows, n), BF16), sizes], ())  # tgmm: the weights' gradient


def _router(model: Model) -> Callable[..., Any]:
    """The router's top-k over its float32 scores [tokens, experts]."""
    scores = ((TOKENS, model.experts), F32)
    return _call("router_topk", "router_topk_op", lambda _: [scores], (model.experts_per_token,))


def _fused_moe(model: Model) -> Callable[..., Any]:
    """Upstream's fused MoE layer: w1 [E, hidden, 2 * inter], w2 [E, inter, hidden], the router's
    logits [tokens, E]; bf16 weights, no scales, no biases, SiLU."""
    e, h, i = model.experts, model.hidden, model.intermediate
    layout = [((TOKENS, h), BF16), ((e, h, 2 * i), BF16), ((e, i, h), BF16), ((TOKENS, e), F32), None, None, None, None]
    return _call("fused_moe", "fused_moe_op", lambda _: layout, (model.experts_per_token, True, "silu"))


def _grouped() -> list[Case]:
    out = []
    for model in (MIXTRAL_8X7B, QWEN3_30B_A3B):
        for projection in ("gate-up", "down"):
            for op, name in (("gmm_op", "gmm"), ("gmm_bwd_op", "gmm_bwd"), ("tgmm_op", "tgmm")):
                default = (model, projection, op) in ((MIXTRAL_8X7B, "gate-up", "gmm_op"),
                                                      (QWEN3_30B_A3B, "down", "gmm_bwd_op"))
                out += on_chips(lambda chip, model=model, projection=projection, op=op, name=name, default=default:
                                _case(name, model.name, f"{projection}/{TOKENS}-tokens", chip,
                                      _experts(model, projection, op), tier="default" if default and chip == "v6e"
                                      else "all"))
    for model in (MIXTRAL_8X7B, QWEN3_30B_A3B):
        out += on_chips(lambda chip, model=model: _case("router_topk", model.name, f"{TOKENS}-tokens", chip,
                                                        _router(model)))
    # Mixtral's 4096 x 14336 experts do not fit upstream's fused kernel's VMEM plan: refused by the op
    for model, expect in ((MIXTRAL_8X7B, "tokamax fused_moe"), (QWEN3_30B_A3B, COMPILES)):
        out.append(Case(f"torch_ops/fused_moe/{model.name}/{TOKENS}-tokens", "torch_ops", model.name, "v6e",
                        _fused_moe(model), expect=expect, tier="all" if expect == COMPILES else "default"))
    return out


# ---- the LM head: statistics (lm_head_stats), the cross-entropy (rows, and the public op's loss) ---
def _head(model: Model, op: str) -> Callable[..., Any]:
    x, targets = ((TOKENS, model.hidden), BF16), ((TOKENS,), I32)
    if op == "lm_head_stats_op":  # weight [vocab, hidden] (nn.Linear's); the transform: none
        w = ((model.vocab, model.hidden), BF16)
        return _call("lm_head", op, lambda _: [x, w, None, targets], (1.0, False, 1.0))
    if op == "lm_head_stats_bwd_op":
        row = ((TOKENS,), F32)
        return _call("lm_head", op, lambda _: [x, ((model.vocab, model.hidden), BF16), None, targets,
                                               row, row, row, row, row, row], (1.0, False, 1.0))
    w = ((model.hidden, model.vocab), BF16)  # the cross-entropy's [hidden, vocab]
    family = "linear_softmax_cross_entropy"
    if op == "linear_softmax_cross_entropy_rows_op":
        return _call(family, op, lambda _: [x, targets, w], ())
    if op == "linear_softmax_cross_entropy_rows_bwd_op":
        row = ((TOKENS,), F32)  # TOKENS is a multiple of the lanes: no padded rows
        return _call(family, op, lambda _: [x, targets, w, row, row, row], ())
    if op == "linear_softmax_cross_entropy_loss_op":
        return _call(family, op, lambda _: [x, targets, w], ("sum",))
    return _call(family, op, lambda _: [x, targets, w, ((TOKENS,), F32), ((), F32), ((), F32)], ("sum",))


def _heads() -> list[Case]:
    out = []
    for op, name, model, default in (
            ("lm_head_stats_op", "lm_head_stats", QWEN3_8B, True),
            ("lm_head_stats_bwd_op", "lm_head_stats_bwd", QWEN3_8B, False),
            ("linear_softmax_cross_entropy_rows_op", "linear_softmax_cross_entropy_rows", LLAMA_3_8B, True),
            ("linear_softmax_cross_entropy_rows_bwd_op", "linear_softmax_cross_entropy_rows_bwd", LLAMA_3_8B, False),
            ("linear_softmax_cross_entropy_loss_op", "linear_softmax_cross_entropy_loss", LLAMA_3_8B, False),
            ("linear_softmax_cross_entropy_loss_bwd_op", "linear_softmax_cross_entropy_loss_bwd", LLAMA_3_8B, False)):
        out += on_chips(lambda chip, op=op, name=name, model=model, default=default: _case(
            name, model.name, f"{TOKENS}-rows", chip, _head(model, op),
            tier="default" if default and chip == "v6e" else "all"))
    return out


# ---- DeepSeek-V4: mHC (v5e and newer), RoPE (v7x only, the chip the op names) ---------------------
GATES = (1e-6, 1e-6, 1e-6, 2.0, 20)  # rms_eps, hc_pre_eps, hc_sinkhorn_eps, post multiplier, iterations


def _mhc(op: str) -> Callable[..., Any]:
    m, h = DSV4_STREAMS, DSV4_HIDDEN
    residual, x = ((TOKENS, m * h), BF16), ((TOKENS, h), BF16)
    gates = [((m * (m + 2), m * h), F32), ((3,), F32), ((m * (m + 2),), F32)]
    mixes = [((TOKENS, m), F32), ((TOKENS, m, m), F32)]
    if op == "mhc_pre_op":
        return _call("mhc", op, lambda _: [residual, *gates], GATES)
    if op == "mhc_post_op":
        return _call("mhc", op, lambda _: [x, residual, *mixes], ())
    return _call("mhc", op, lambda _: [x, residual, *mixes, *gates], GATES)


def _rope(op: str) -> Callable[..., Any]:
    cache, positions = ((DSV4_POSITIONS, DSV4_ROPE), F32), ((TOKENS,), I32)
    if op == "deepseek_rope_op":
        x = ((TOKENS, DSV4_HEADS, DSV4_HEAD_DIM), BF16)
        return _call("deepseek_rope", op, lambda _: [x, positions, cache], ("qnorm_rope", False, 1e-6))
    x = ((TOKENS, 64, 128), BF16)  # upstream's rope_quant entry: 64 heads of 128, to fp8
    return _call("deepseek_rope", op, lambda _: [x, positions, cache], (False, "float8_e4m3fn"))


def _deepseek_v4() -> list[Case]:
    out = []
    for op, name, default in (("mhc_pre_op", "mhc_pre", True), ("mhc_post_op", "mhc_post", False),
                              ("mhc_fused_post_pre_op", "mhc_fused_post_pre", False)):
        out += on_chips(lambda chip, op=op, name=name, default=default: _case(
            name, "DeepSeek-V4", f"{TOKENS}-tokens", chip, _mhc(op), tier="default" if default and chip == "v7x"
            else "all"))
    out += [_case("deepseek_rope", "DeepSeek-V4", f"qnorm_rope/{TOKENS}-tokens", "v7x", _rope("deepseek_rope_op"),
                  tier="default"),
            _case("deepseek_rope_quant", "DeepSeek-V4", f"rope_quant/{TOKENS}-tokens", "v7x",
                  _rope("deepseek_rope_quant_op"))]
    return out


def cases() -> list[Case]:
    return _splash() + _grouped() + _heads() + _deepseek_v4()
