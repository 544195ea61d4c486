"""TRL's distillation divergence in float64 JAX from its definitions (`tokamax.distill`'s docstring), its
gradients by autodiff, and the tolerances the kernels are held to: a few times float32's own error at the
same sizes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

U = 2.0 ** -24  # float32's unit roundoff


def logits(x, w, b, scale, soft_cap, temperature):  # noqa: ANN001, ANN201
    raw = x @ w.T + (0.0 if b is None else b)
    z = raw * scale
    if soft_cap is not None:
        z = soft_cap * jnp.tanh(z / soft_cap)
    return z / temperature


def divergence_of(log_ps, log_pt, beta):  # noqa: ANN001, ANN201
    """Per row: KL(p_t || p_s) at beta 0, KL(p_s || p_t) at 1, else the generalized JSD with m = (1 - beta) p_s
    + beta p_t."""
    ps, pt = jnp.exp(log_ps), jnp.exp(log_pt)
    if beta == 0.0:
        return (pt * (log_pt - log_ps)).sum(1)
    if beta == 1.0:
        return (ps * (log_ps - log_pt)).sum(1)
    log_m = jnp.logaddexp(log_ps + np.log1p(-beta), log_pt + np.log(beta))  # no log 0 where both underflow
    return beta * (pt * (log_pt - log_m)).sum(1) + (1 - beta) * (ps * (log_ps - log_m)).sum(1)


def log_probs(operands, options):  # noqa: ANN001, ANN201
    xs, ws, bs, xt, wt, bt = operands
    t = options.get("temperature", 1.0)
    zs = logits(xs, ws, bs, options.get("student_scale", 1.0), options.get("student_soft_cap"), t)
    zt = logits(xt, wt, bt, options.get("teacher_scale", 1.0), options.get("teacher_soft_cap"), t)
    return jax.nn.log_softmax(zs, axis=1), jax.nn.log_softmax(zt, axis=1)


def reference(operands, options, g_div, g_ent):  # noqa: ANN001, ANN201
    """(divergence, entropy, (dx_s, dw_s, db_s) of sum(g_div * divergence + g_ent * entropy)), float64 numpy;
    the float32 operands taken exactly."""
    with jax.enable_x64(True):
        ops64 = [None if a is None else jnp.asarray(np.asarray(a, np.float64)) for a in operands]
        beta = options["beta"]

        def outputs(xs, ws, bs):  # noqa: ANN001, ANN202
            log_ps, log_pt = log_probs((xs, ws, bs, *ops64[3:]), options)
            return divergence_of(log_ps, log_pt, beta), -(jnp.exp(log_ps) * log_ps).sum(1)

        def loss(xs, ws, bs):  # noqa: ANN001, ANN202
            div, ent = outputs(xs, ws, bs)
            return (jnp.asarray(g_div, jnp.float64) * div + jnp.asarray(g_ent, jnp.float64) * ent).sum()

        bs = ops64[2] if ops64[2] is not None else jnp.zeros(ops64[1].shape[0], jnp.float64)
        div, ent = outputs(ops64[0], ops64[1], bs)
        grads = jax.grad(loss, argnums=(0, 1, 2))(ops64[0], ops64[1], bs)
        return np.asarray(div), np.asarray(ent), tuple(np.asarray(g) for g in grads)


def tolerances(operands, options, g_div, g_ent, factor: float = 4.0):  # noqa: ANN001, ANN201
    """Absolute tolerances of (divergence, entropy, dx, dw, db): `factor` times the largest error the same
    definitions make evaluated plainly in float32 (full logits, XLA's CPU matmuls and reductions: what
    TRL's own function computes in float32 tiles) at these sizes and values, against float64; at least u
    times the output's largest magnitude. The kernels sum in another order (blocks, an online maximum), so
    their errors are of the same size, not the same values."""
    want = reference(operands, options, g_div, g_ent)
    plain = _float32(operands, options, g_div, g_ent)
    out = []
    for w, p in zip((want[0], want[1], *want[2]), (plain[0], plain[1], *plain[2]), strict=True):
        out.append(factor * max(np.abs(np.asarray(p, np.float64) - w).max(), U * np.abs(w).max()))
    return tuple(out)


def _float32(operands, options, g_div, g_ent):  # noqa: ANN001, ANN202
    """`reference`'s outputs evaluated in float32."""
    ops = [None if a is None else jnp.asarray(a, jnp.float32) for a in operands]
    beta = options["beta"]
    bs = ops[2] if ops[2] is not None else jnp.zeros(ops[1].shape[0], jnp.float32)

    def outputs(xs, ws, bs, teacher):  # noqa: ANN001, ANN202
        log_ps, log_pt = log_probs((xs, ws, bs, *teacher), options)
        return divergence_of(log_ps, log_pt, beta), -(jnp.exp(log_ps) * log_ps).sum(1)

    def loss(xs, ws, bs, teacher, g_div, g_ent):  # noqa: ANN001, ANN202
        div, ent = outputs(xs, ws, bs, teacher)
        return (g_div * div + g_ent * ent).sum()

    teacher = tuple(ops[3:])  # arguments, not constants XLA would fold
    div, ent = jax.jit(outputs)(ops[0], ops[1], bs, teacher)
    return div, ent, jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(ops[0], ops[1], bs, teacher, jnp.asarray(g_div),
                                                                 jnp.asarray(g_ent))
