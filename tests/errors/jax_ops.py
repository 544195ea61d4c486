"""Bad calls of the JAX entry points (lm_head, lm_loss, distill, splash, ring) and the errors they get. Tiny shapes;
jax is imported inside the calls, so that this list loads without it (the page is rendered from it anywhere)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from tests.errors import BadInput

LOSS = "tokamax.lm_head.loss.loss"
STATS = "tokamax.lm_head.statistics"
DIV = "tokamax.distill.divergence"
DLOSS = "tokamax.distill.loss"
ATTEND = "tokamax.splash.attend"
RING = "tokamax.ring.attention"


def _emulated(call: Callable[[ModuleType], Any]) -> Callable[[ModuleType], Any]:
    """The call inside the package's v6e emulation (the checks come first; a call that passed them would run)."""
    def run(tk: ModuleType) -> Any:
        with tk.emulation.interpret_on_cpu("v6e"):
            return call(tk)
    return run


def _head(rows: int = 8, hidden: int = 128, vocab: int = 256, dtype: str = "float32") -> tuple:
    """x [rows, hidden], w [vocab, hidden], int32 targets and float32 weights [rows]."""
    import jax.numpy as jnp

    return (jnp.ones((rows, hidden), dtype), jnp.ones((vocab, hidden), dtype), jnp.zeros((rows,), jnp.int32),
            jnp.ones((rows,), jnp.float32))


def _loss(tk: ModuleType, **changes: Any) -> Any:
    x, w, t, m = _head()
    args = {"x": x, "w": w, "targets": t, "weights": m}
    options = {k: v for k, v in changes.items() if k not in args}
    args.update({k: v for k, v in changes.items() if k in args})
    return tk.lm_head.loss.loss(args["x"], args["w"], args["targets"], args["weights"], **options)


def _jnp() -> Any:
    import jax.numpy as jnp

    return jnp


def _div(tk: ModuleType, entry: str = "divergence", **changes: Any) -> Any:
    x, w, _, m = _head()
    args = {"student_hidden": x, "student_weight": w, "student_bias": None, "teacher_hidden": x,
            "teacher_weight": w, "teacher_bias": None}
    options = {"beta": 0.5}
    for k, v in changes.items():
        (args if k in args else options)[k] = v
    if entry == "loss":
        return tk.distill.loss(*args.values(), options.pop("weights", m), **options)
    return tk.distill.divergence(*args.values(), **options)


def _qkv(dtype: str = "bfloat16", heads: int = 2, kv_heads: int = 2, length: int = 128, head_dim: int = 64) -> tuple:
    jnp = _jnp()
    q = jnp.ones((1, heads, length, head_dim), dtype)
    k = jnp.ones((1, kv_heads, length, head_dim), dtype)
    return q, k, k


def _attend(tk: ModuleType, q: Any = None, k: Any = None, v: Any = None, q_ids: Any = None, kv_ids: Any = None,
            sinks: Any = None, **options: Any) -> Any:
    q0, k0, v0 = _qkv()
    options.setdefault("spec", tk.splash.MaskSpec.of(True, None))
    with tk.emulation.interpret_on_cpu("v6e"):
        return tk.splash.attend(q0 if q is None else q, k0 if k is None else k, v0 if v is None else v, q_ids,
                                kv_ids, sinks, **options)


def _ring(tk: ModuleType, q: Any = None, k: Any = None, segment_ids: Any = None, mqa: bool = False) -> Any:
    import jax

    q0, k0, _ = _qkv(length=128)
    mesh = jax.make_mesh((1,), ("sp",), devices=jax.devices()[:1])
    layout = tk.ring.Layout(mesh, axis="sp", batch_axis=None, head_axis=None, mqa=mqa, causal=True)
    k = k0 if k is None else k
    with tk.emulation.interpret_on_cpu("v6e"):
        return tk.ring.attention(layout)(q0 if q is None else q, k, k, segment_ids)


def _f(tk: ModuleType, shape: tuple, dtype: str = "float32") -> Any:
    return _jnp().ones(shape, dtype)


CASES: list[BadInput] = [
    # the LM head's loss
    BadInput(LOSS, "chunk", '"fast"', "ValueError",
             'tokamax lm_head loss: chunk must be "auto", None or a positive number of rows, got \'fast\'',
             _emulated(lambda tk: _loss(tk, chunk="fast"))),
    BadInput(LOSS, "chunk", "0", "ValueError", "tokamax lm_head loss: chunk must be \"auto\", None or a positive",
             _emulated(lambda tk: _loss(tk, chunk=0))),
    BadInput(LOSS, "smoothing", "1.5", "ValueError", "tokamax lm_head loss: smoothing must be a number in [0, 1), "
             "got 1.5", _emulated(lambda tk: _loss(tk, smoothing=1.5))),
    BadInput(LOSS, "smoothing", "-0.2", "ValueError", "smoothing must be a number in [0, 1), got -0.2",
             _emulated(lambda tk: _loss(tk, smoothing=-0.2))),
    BadInput(LOSS, "z_loss", "-0.1", "ValueError", "tokamax lm_head loss: z_loss must be a number in [0, inf), got "
             "-0.1", _emulated(lambda tk: _loss(tk, z_loss=-0.1))),
    BadInput(LOSS, "targets", "float32 [8]", "TypeError", "tokamax lm_head: targets must have an integer dtype, got "
             "float32", _emulated(lambda tk: _loss(tk, targets=_f(tk, (8,))))),
    BadInput(LOSS, "targets", "[4] for 8 rows", "ValueError", "tokamax lm_head: targets must be [rows] (8), got (4,)",
             _emulated(lambda tk: _loss(tk, targets=_jnp().zeros((4,), "int32")))),
    BadInput(LOSS, "weights", "[4] for 8 rows", "ValueError", "tokamax lm_head loss: weights must be [rows] (8), got "
             "(4,)", _emulated(lambda tk: _loss(tk, weights=_f(tk, (4,))))),
    BadInput(LOSS, "x, w", "hidden 128 and 64", "ValueError", "tokamax lm_head: x must be [rows, hidden] and w "
             "[vocab, hidden], got (8, 128) and (256, 64)", _emulated(lambda tk: _loss(tk, w=_f(tk, (256, 64))))),
    BadInput(LOSS, "x", "1-D [128]", "ValueError", "tokamax lm_head: x must be [rows, hidden], got shape (128,)",
             _emulated(lambda tk: _loss(tk, x=_f(tk, (128,))))),
    BadInput(LOSS, "x", "int32", "TypeError", "tokamax lm_head: x and w must share a dtype, bfloat16 or float32; got "
             "int32 and float32", _emulated(lambda tk: _loss(tk, x=_f(tk, (8, 128), "int32")))),
    BadInput(LOSS, "x, w", "bfloat16 and float32", "TypeError", "tokamax lm_head: x and w must share a dtype",
             _emulated(lambda tk: _loss(tk, x=_f(tk, (8, 128), "bfloat16")))),
    BadInput(LOSS, "b", "[7] for a vocabulary of 256", "ValueError", "tokamax lm_head loss: b must be [vocab] (256), "
             "got (7,)", _emulated(lambda tk: _loss(tk, b=_f(tk, (7,))))),
    BadInput(LOSS, "transform", "a float", "TypeError", "tokamax lm_head loss: transform must be a "
             "lm_head.LogitTransform", _emulated(lambda tk: _loss(tk, transform=0.5))),
    BadInput("tokamax.lm_head.LogitTransform.of", "temperature", "0", "ValueError",
             "tokamax lm_head: temperature must be > 0", lambda tk: tk.lm_head.LogitTransform.of(temperature=0.0)),
    BadInput("tokamax.lm_head.LogitTransform.of", "soft_cap", "-1", "ValueError",
             "tokamax lm_head: soft_cap must be > 0 or None", lambda tk: tk.lm_head.LogitTransform.of(soft_cap=-1.0)),
    # the LM head's statistics
    BadInput(STATS, "scheme", '"fast"', "ValueError", "tokamax lm_head: scheme must be one of ('auto', 'kernels', "
             "'stored'), got 'fast'",
             _emulated(lambda tk: tk.lm_head.statistics(*_head()[:2], None, _head()[2], scheme="fast"))),
    BadInput(STATS, "targets", "float32 [8]", "TypeError", "tokamax lm_head: targets must have an integer dtype",
             _emulated(lambda tk: tk.lm_head.statistics(*_head()[:2], None, _f(tk, (8,))))),
    BadInput(STATS, "targets", "a list", "TypeError", "tokamax lm_head: targets must be an array, got list",
             _emulated(lambda tk: tk.lm_head.statistics(*_head()[:2], None, [0] * 8))),
    BadInput(STATS, "b", "[7] for a vocabulary of 256", "ValueError",
             "tokamax lm_head: the bias must be [vocab] (256), got (7,)",
             _emulated(lambda tk: tk.lm_head.statistics(*_head()[:2], _f(tk, (7,)), _head()[2]))),
    # upstream's loss at any size
    BadInput("tokamax.lm_loss.row_losses", "w", "[vocab, hidden] (nn.Linear's layout)", "ValueError",
             "tokamax lm_loss.row_losses: the hidden size must agree: x has 128, w has 256",
             _emulated(lambda tk: tk.lm_loss.row_losses(_head()[0], _head()[2], _head()[1]))),
    BadInput("tokamax.lm_loss.row_losses", "labels", "float32 [8]", "TypeError",
             "tokamax lm_loss.row_losses: labels must have an integer dtype, got float32",
             _emulated(lambda tk: tk.lm_loss.row_losses(_head()[0], _f(tk, (8,)), _head()[1].T))),
    # distillation
    BadInput(DIV, "beta", "1.5", "ValueError", "tokamax distill: beta must be a number in [0, 1], got 1.5",
             _emulated(lambda tk: _div(tk, beta=1.5))),
    BadInput(DIV, "temperature", "0", "ValueError", "tokamax distill: temperature must be > 0, got 0",
             _emulated(lambda tk: _div(tk, temperature=0))),
    BadInput(DIV, "teacher_soft_cap", "-1", "ValueError", "tokamax distill: teacher_soft_cap must be > 0 or None",
             _emulated(lambda tk: _div(tk, teacher_soft_cap=-1.0))),
    BadInput(DIV, "scheme", '"fast"', "ValueError", "tokamax distill: scheme must be one of 'auto', 'kernels', "
             "'stored', 'recompute', got 'fast'", _emulated(lambda tk: _div(tk, scheme="fast"))),
    BadInput(DIV, "student_weight", "hidden 64 against 128", "ValueError", "tokamax distill: the student's hidden "
             "size is 128 in its hidden states but 64 in its weight",
             _emulated(lambda tk: _div(tk, student_weight=_f(tk, (256, 64))))),
    BadInput(DIV, "teacher_weight", "a vocabulary of 200 against 256", "ValueError", "tokamax distill: the "
             "student's vocabulary (256) and the teacher's (200) must be the same",
             _emulated(lambda tk: _div(tk, teacher_weight=_f(tk, (200, 128))))),
    BadInput(DIV, "teacher_hidden", "4 rows against 8", "ValueError", "tokamax distill: the student's rows (8) and "
             "the teacher's (4) must be the same tokens",
             _emulated(lambda tk: _div(tk, teacher_hidden=_f(tk, (4, 128))))),
    BadInput(DIV, "teacher_hidden", "float16", "TypeError", "tokamax distill: the teacher's hidden states and weight "
             "must share a dtype, bfloat16 or float32; got float16",
             _emulated(lambda tk: _div(tk, teacher_hidden=_f(tk, (8, 128), "float16")))),
    BadInput(DIV, "student_hidden", "1-D [128]", "ValueError", "tokamax distill: the student's hidden states must be "
             "[rows, hidden]", _emulated(lambda tk: _div(tk, student_hidden=_f(tk, (128,))))),
    BadInput(DIV, "teacher_bias", "[7]", "ValueError", "tokamax distill: the teacher's bias must be [vocab] (256), "
             "got (7,)", _emulated(lambda tk: _div(tk, teacher_bias=_f(tk, (7,))))),
    BadInput(DLOSS, "weights", "[4] for 8 rows", "ValueError", "tokamax distill: weights must be [rows] (8), got (4,)",
             _emulated(lambda tk: _div(tk, "loss", weights=_f(tk, (4,))))),
    BadInput(DLOSS, "chunk", '"fast"', "ValueError", "tokamax distill: chunk must be \"auto\", a number of rows or "
             "None, got 'fast'", _emulated(lambda tk: _div(tk, "loss", chunk="fast"))),
    # splash attention
    BadInput(ATTEND, "q", "3-D [heads, q_len, head_dim]", "ValueError", "tokamax splash.attend: q must be [batch, "
             "heads, q_len, head_dim], got shape (2, 128, 64)", lambda tk: _attend(tk, q=_qkv()[0][0])),
    BadInput(ATTEND, "k", "bfloat16 q, float32 k", "TypeError", "tokamax splash.attend: q and k and v must share a "
             "dtype, got bfloat16, float32, bfloat16", lambda tk: _attend(tk, k=_qkv("float32")[1])),
    BadInput(ATTEND, "q", "float16", "TypeError", "tokamax splash.attend: q must be bfloat16 or float32, got float16",
             lambda tk: _attend(tk, *_qkv("float16"))),
    BadInput(ATTEND, "q", "int32", "TypeError", "tokamax splash.attend: q must be bfloat16 or float32, got int32",
             lambda tk: _attend(tk, *_qkv("int32"))),
    BadInput(ATTEND, "k", "head_dim 128 against q's 64", "ValueError", "tokamax splash.attend: the head dim must "
             "agree: q has 64, k has 128", lambda tk: _attend(tk, k=_qkv(head_dim=128)[1])),
    BadInput(ATTEND, "v", "128 keys against k's 256", "ValueError", "tokamax splash.attend: the KV length must "
             "agree: k has 128, v has 256", lambda tk: _attend(tk, v=_qkv(length=256)[2])),
    BadInput(ATTEND, "k", "3 heads for q's 2", "ValueError", "tokamax splash.attend: q's heads (2) must be a multiple "
             "of k's (3)", lambda tk: _attend(tk, k=_qkv(kv_heads=3)[1], v=_qkv(kv_heads=3)[2])),
    BadInput(ATTEND, "k, v", "kv_len 0", "ValueError", "tokamax splash.attend: k and v must hold at least one key",
             lambda tk: _attend(tk, k=_qkv(length=0)[1], v=_qkv(length=0)[2])),
    BadInput(ATTEND, "q_ids", "without kv_ids", "ValueError", "tokamax splash.attend: q_ids and kv_ids go together "
             "(both or neither), got q_ids alone", lambda tk: _attend(tk, q_ids=_f(tk, (1, 128), "int32"))),
    BadInput(ATTEND, "kv_ids", "float32", "TypeError", "tokamax splash.attend: kv_ids must be int32, got float32",
             lambda tk: _attend(tk, q_ids=_f(tk, (1, 128), "int32"), kv_ids=_f(tk, (1, 128)))),
    BadInput(ATTEND, "q_ids", "[128] (no batch)", "ValueError", "tokamax splash.attend: q_ids must be [batch, len] = "
             "[1, 128], got shape (128,)",
             lambda tk: _attend(tk, q_ids=_f(tk, (128,), "int32"), kv_ids=_f(tk, (1, 128), "int32"))),
    BadInput(ATTEND, "sinks", "[3] for 2 heads", "ValueError", "tokamax splash.attend: sinks must be [heads] = [2], "
             "got shape (3,)", lambda tk: _attend(tk, sinks=_f(tk, (3,)))),
    BadInput(ATTEND, "soft_cap", "0", "ValueError", "tokamax splash.attend: soft_cap must be a number > 0 or None, "
             "got 0", lambda tk: _attend(tk, soft_cap=0)),
    BadInput(ATTEND, "spec", '"causal"', "TypeError", "tokamax splash.attend: spec must be a splash.MaskSpec",
             lambda tk: _attend(tk, spec="causal")),
    BadInput(ATTEND, "offset", "an array", "TypeError", "tokamax splash.attend: offset must be an int",
             lambda tk: _attend(tk, offset=_f(tk, (), "int32"))),
    BadInput("tokamax.splash.MaskSpec.of", "window", "(-1, 0)", "ValueError", "window sizes must be >= 0",
             lambda tk: tk.splash.MaskSpec.of(True, (-1, 0))),
    BadInput("tokamax.splash.attend_at", "q", "3-D", "ValueError", "tokamax splash.attend_at: q must be [batch, "
             "heads, q_len, head_dim]",
             _emulated(lambda tk: tk.splash.attend_at(_qkv()[0][0], *_qkv()[1:], None, None, _f(tk, (), "int32"), None,
                                            spec=tk.splash.MaskSpec.of(True, None)))),
    BadInput("tokamax.splash.attend_at", "offset", "[2]", "ValueError", "tokamax splash.attend_at: offset must be "
             "one value (an int32 scalar), got shape (2,)",
             _emulated(lambda tk: tk.splash.attend_at(*_qkv(), None, None, _f(tk, (2,), "int32"), None,
                                            spec=tk.splash.MaskSpec.of(True, None)))),
    # ring attention
    BadInput(RING, "q", "3-D", "ValueError", "tokamax ring.attention: q must be [batch, heads, q_len, head_dim], got "
             "shape (2, 128, 64)", lambda tk: _ring(tk, q=_qkv()[0][0])),
    BadInput(RING, "k", "4-D with Layout(mqa=True)", "ValueError", "tokamax ring.attention: k must be [batch, len, "
             "head_dim] (Layout(mqa=True)), got shape (1, 2, 128, 64)", lambda tk: _ring(tk, mqa=True)),
    BadInput(RING, "q", "float16", "TypeError", "tokamax ring.attention: q must be bfloat16 or float32, got float16",
             lambda tk: _ring(tk, q=_qkv("float16")[0])),
    BadInput(RING, "segment_ids", "float32", "TypeError", "tokamax ring.attention: segment_ids must be int32, got "
             "float32", lambda tk: _ring(tk, segment_ids=_f(tk, (1, 128)))),
]
