"""The LM head: the labels path's loss (`lm_head.fused.loss_and_grads`: gradients made in the forward) against
XLA's plain formulation with float32 [rows, vocab] logits materialized (what transformers' loss computes; TRL's
statistics are `lm_head_statistics`'); and distillation's divergence (`tokamax.distill.divergence`, the generalized JSD:
the package's choice "tokamax", the stored scheme and the kernels forced) against the same loss written plainly
in XLA."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import jax
import jax.numpy as jnp

from ..models import DISTILL, HEADS
from . import Workload, normal, with_grads

CHUNKS = (512, 1024, 2048)  # the chunked scheme at fixed chunks, beside the package's own choice
KERNEL_CHUNKS = (512, 768, 1024, 1280, 2048)  # with `lm_head.accumulate` adding dW, float32 and pair
WHOLE = "tokamax (whole-block bodies)"  # the kernels without their inner loop over columns (`whole_blocks`)
BETA = 0.5


def _logits(x: jax.Array, w: jax.Array) -> jax.Array:
    return jax.lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)


def xla_loss(x: jax.Array, w: jax.Array, t: jax.Array) -> jax.Array:
    z = _logits(x, w)
    lse = jax.nn.logsumexp(z, axis=1)
    return jnp.mean(lse - jnp.take_along_axis(z, t[:, None], axis=1)[:, 0])


def xla_jsd(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> jax.Array:
    log_ps, log_pt = jax.nn.log_softmax(_logits(xs, ws), axis=1), jax.nn.log_softmax(_logits(xt, wt), axis=1)
    log_m = jnp.logaddexp(log_ps + jnp.log1p(-BETA), log_pt + jnp.log(BETA))
    div = BETA * (jnp.exp(log_pt) * (log_pt - log_m)).sum(1) + (1 - BETA) * (jnp.exp(log_ps) * (log_ps - log_m)).sum(1)
    return div.sum()


def xla_kl(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array, beta: float) -> jax.Array:
    """TRL's KLs written plainly: beta 0 the forward KL(p_t || p_s), 1 the reverse KL(p_s || p_t)."""
    log_ps, log_pt = jax.nn.log_softmax(_logits(xs, ws), axis=1), jax.nn.log_softmax(_logits(xt, wt), axis=1)
    first, second = (log_pt, log_ps) if beta == 0 else (log_ps, log_pt)
    return (jnp.exp(first) * (first - second)).sum()


def distill_args(d: object) -> tuple:
    """A distillation shape's operands: the student's hidden states and weight, the teacher's."""
    hs, ht = d.student_hidden, d.teacher_hidden
    return (normal(1, (d.rows, hs)), normal(2, (d.vocab, hs), scale=hs ** -0.5),
            normal(3, (d.rows, ht)), normal(4, (d.vocab, ht), scale=ht ** -0.5))


def _head_args(rows: int, hidden: int, vocab: int) -> tuple:
    t = jax.random.randint(jax.random.key(3), (rows,), 0, vocab, jnp.int32)
    return normal(1, (rows, hidden)), normal(2, (vocab, hidden), scale=hidden ** -0.5), t


def with_columns(lm_head: ModuleType, x: jax.Array, w: jax.Array, columns: int | None) -> object:
    """The package's plan for x and w with each kernel's body looping over `columns` vocabulary columns at a time
    (None: over its whole block at once, no inner loop), for the side-by-side."""
    plan = lm_head.stats.plan_for(x, w)
    blocks = {k: lm_head.Blocks(plan[k].rows, plan[k].vocab, compute=min(columns or plan[k].vocab, plan[k].vocab))
              for k in lm_head.blocks.KERNELS}
    return lm_head.Plan(plan.rows, blocks["forward"], blocks["backward_x"], blocks["backward_w"], plan.transposed)


def whole_blocks(lm_head: ModuleType, x: jax.Array, w: jax.Array) -> object:
    """The package's plan for x and w with each kernel's body over its whole block at once (no inner loop over
    `kernels.COMPUTE` columns): the kernels as they were before that loop, for the side-by-side."""
    return with_columns(lm_head, x, w, None)


def workloads(tk: ModuleType) -> Iterator[Workload]:
    lm_head = tk.lm_head

    def labels(chunk: object, whole: bool = False, pair: bool | None = None, kernel: bool | None = None,  # noqa: ANN202
               scaled: bool | None = None, streamed: bool | None = None):
        # pair, kernel and scaled None: as the package chooses (`fused.choose_scheme`, `fused.accumulation`)
        def fn(x: jax.Array, w: jax.Array, t: jax.Array) -> tuple:
            weights = jnp.full(t.shape, 1.0 / t.shape[0], jnp.float32)
            plan = whole_blocks(lm_head, x, w) if whole else None
            return lm_head.fused.loss_and_grads(x, w, None, t, weights, lm_head.IDENTITY, chunk=chunk, plan=plan,
                                                pair_accumulator=pair, accumulator_kernel=kernel,
                                                scaled_low=scaled, streamed=streamed)[:3]
        return fn

    def forward_loss(x: jax.Array, w: jax.Array, t: jax.Array, whole: bool = False) -> jax.Array:
        s = lm_head.row_stats(x, w, None, t, plan=whole_blocks(lm_head, x, w) if whole else None)
        return jnp.mean(s.lse - s.target_logit)

    def forward_whole(x: jax.Array, w: jax.Array, t: jax.Array) -> jax.Array:
        return forward_loss(x, w, t, whole=True)

    for h in HEADS:
        case = f"{h.model} head: {h.rows} rows, hidden {h.hidden}, vocabulary {h.vocab}"
        def make(h=h) -> tuple:  # noqa: ANN001
            return _head_args(h.rows, h.hidden, h.vocab)
        flops = 2 * h.rows * h.hidden * h.vocab
        yield Workload("lm_head_loss", case, "tokamax", "fwd", lambda m=make: (forward_loss, m()), flops)
        yield Workload("lm_head_loss", case, WHOLE, "fwd", lambda m=make: (forward_whole, m()), flops)
        yield Workload("lm_head_loss", case, "xla", "fwd", lambda m=make: (xla_loss, m()), flops)
        variants = {"tokamax": "auto", "tokamax (kernels)": None,
                    **{f"tokamax (chunks of {c})": c for c in CHUNKS}}
        for impl, chunk in variants.items():  # the fixed chunks with XLA's float32 accumulator
            plain = {} if chunk in ("auto", None) else {"pair": False, "kernel": False, "scaled": False,
                                                        "streamed": False}
            yield Workload("lm_head_loss", case, impl, "fwd+bwd",
                           lambda m=make, c=chunk, k=plain: (labels(c, **k), m()), 3 * flops)
        yield Workload("lm_head_loss", case, f"{WHOLE[:-1]}, kernels)", "fwd+bwd",
                       lambda m=make: (labels(None, whole=True), m()), 3 * flops)
        # XLA adding dW into the pair ("pair accumulator" without the kernel) is retired (`lm_head.fused`'s docstring)
        for c in KERNEL_CHUNKS:  # dW added by `lm_head.accumulate`'s kernel: float32, the pair, its low half in int8
            for pair, scaled in ((False, False), (True, False), (True, True)):
                impl = (f"tokamax (chunks of {c}{', pair accumulator' if pair else ''}{', int8 low' if scaled else ''}"
                        ", accumulator kernel)")
                yield Workload("lm_head_loss", case, impl, "fwd+bwd", lambda m=make, c=c, p=pair, q=scaled: (
                    labels(c, pair=p, kernel=True, scaled=q, streamed=False), m()), 3 * flops)
        yield Workload("lm_head_loss", case, "xla", "fwd+bwd",
                       lambda m=make: (with_grads(xla_loss, (0, 1)), m()), 3 * flops)

    def jsd(scheme: str):  # noqa: ANN202
        def loss(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> jax.Array:
            return tk.distill.divergence(xs, ws, None, xt, wt, None, beta=BETA, scheme=scheme)[0].sum()
        return loss

    def whole(fn):  # noqa: ANN001, ANN202 - fn traced, backward too, with the whole-block bodies
        def traced(*args: jax.Array) -> object:
            with tk.distill.kernels.whole_blocks():
                return fn(*args)
        return traced

    def divergence(beta: float):  # noqa: ANN202
        def loss(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> jax.Array:
            return tk.distill.divergence(xs, ws, None, xt, wt, None, beta=beta)[0].sum()
        return loss

    def kl(beta: float):  # noqa: ANN202
        def loss(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> jax.Array:
            return xla_kl(xs, ws, xt, wt, beta)
        return loss

    for d in DISTILL:
        case = (f"{d.model} (JSD, beta {BETA}): {d.rows} rows, student {d.student_hidden}, teacher {d.teacher_hidden}, "
                f"vocabulary {d.vocab}")

        def make(d=d) -> tuple:  # noqa: ANN001
            return distill_args(d)

        fwd = 2 * d.rows * d.vocab * (d.student_hidden + d.teacher_hidden)
        bwd = 4 * d.rows * d.vocab * d.student_hidden  # dx and dw of the student (the logits counted once)
        for impl, fn in (("tokamax", jsd("auto")), ("tokamax (stored)", jsd("stored")),
                         ("tokamax (kernels)", jsd("kernels")), (WHOLE, jsd("kernels")), ("xla", xla_jsd)):
            wrap = whole if impl == WHOLE else (lambda f: f)
            forward, both = wrap(fn), wrap(with_grads(fn, (0, 1)))
            yield Workload("distillation", case, impl, "fwd", lambda m=make, f=forward: (f, m()), fwd)
            yield Workload("distillation", case, impl, "fwd+bwd", lambda m=make, f=both: (f, m()), fwd + bwd)
        # a frozen (LoRA) student head: dx alone; and TRL's KLs (beta 0 and 1), each by the package's choice and XLA
        frozen = fwd + 2 * d.rows * d.vocab * d.student_hidden
        for impl, fn in (("tokamax (frozen head)", jsd("auto")), ("xla (frozen head)", xla_jsd)):
            yield Workload("distillation", case, impl, "fwd+bwd",
                           lambda m=make, fn=fn: (with_grads(fn, (0,)), m()), frozen)
        for beta, name in ((0.0, "forward KL"), (1.0, "reverse KL")):
            kl_case = case.replace(f"JSD, beta {BETA}", name)
            for impl, fn in (("tokamax", divergence(beta)), ("xla", kl(beta))):
                yield Workload("distillation", kl_case, impl, "fwd+bwd",
                               lambda m=make, fn=fn: (with_grads(fn, (0, 1)), m()), fwd + bwd)
