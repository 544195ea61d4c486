"""Causal conv1d + gated delta rule (`fused_conv1d_gdn`): one decode and one mixed sequence, GDN and KDA gates.

Upstream's Op runs on TPU v6e and newer (`generation >= 6`), so v6e and v7x. JAX's interpreter cannot run the
kernel (below); its numerics would be checked against upstream's pure-JAX reference (ragged conv1d, then the
token-by-token gated delta rule), which has the GDN gate only.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from . import Case, rng

WRAPPER = "_src.ops.causal_conv1d_gated_delta_rule.wrapper"
REFERENCE = "_src.ops.causal_conv1d_gated_delta_rule.reference"
CHIPS = ("v6e", "v7x")
N_KQ, N_V, D_K, D_V, KERNEL_SIZE = 2, 2, 128, 128, 4
DIM = 2 * N_KQ * D_K + N_V * D_V
SIZES = {"n_kq": N_KQ, "n_v": N_V, "d_k": D_K, "d_v": D_V, "kernel_size": KERNEL_SIZE}
INTERPRET_XFAIL = (
    "JAX's Pallas TPU interpreter cannot load through a reshaped ref: vmem_ldst.py reads the VMEM qkv and state "
    "buffers through flattening `ref.reshape(-1, lanes)` views and the interpreter's `get` callback reads the "
    "transform's indices, raising `AttributeError: 'ReshapeTransform' object has no attribute 'indices'` from "
    "interpret/utils.py `to_range`, surfacing as `jax.errors.JaxRuntimeError: INTERNAL: CpuCallback error calling"
    " callback`"
)
RAISES = (jax.errors.JaxRuntimeError, "'ReshapeTransform' object has no attribute 'indices'")


def _inputs(kda: bool) -> tuple[np.ndarray, ...]:
    """Sequence 0 decodes 1 token (9 cached), sequence 1 prefills 8 (4 cached); 16 rows, 9 live.

    State slot 0 is the null slot; the sequences use slots 1 and 2.
    """
    r = rng(DIM + kda)
    tokens = 16
    gate_dim = N_V * D_K if kda else N_V
    qkv = r.standard_normal((tokens, DIM), np.float32)
    b = r.standard_normal((tokens, N_V), np.float32)
    a = r.standard_normal((tokens, gate_dim), np.float32)
    conv_state = r.standard_normal((3, KERNEL_SIZE - 1, DIM), np.float32)
    recurrent_state = (0.1 * r.standard_normal((3, N_V, D_K, D_V))).astype(np.float32)
    conv_weight = (0.5 * r.standard_normal((DIM, 1, KERNEL_SIZE))).astype(np.float32)
    conv_bias = (0.1 * r.standard_normal(DIM)).astype(np.float32)
    a_log = (0.1 * r.standard_normal(N_V)).astype(np.float32)
    dt_bias = (0.1 * r.standard_normal((N_V, D_K) if kda else N_V)).astype(np.float32)
    query_start_loc = np.array([0, 1, 9], np.int32)
    state_indices = np.array([1, 2], np.int32)
    distribution = np.array([1, 1, 2], np.int32)  # cumulative: 1 decode, 0 prefill-only, 1 mixed
    seq_lens = np.array([10, 12], np.int32)
    return (qkv, b, a, conv_state, recurrent_state, conv_weight, conv_bias, a_log, dt_bias, query_start_loc,
            state_indices, distribution, seq_lens)


def _compare(out, expected) -> None:  # noqa: ANN001
    """States of both sequences' slots and the 9 live output rows, f32 at rounding tolerance."""
    (conv, rec), o = out
    (e_conv, e_rec), e_o = expected
    for got, want, what in ((conv[1:], e_conv[1:], "conv state"), (rec[1:], e_rec[1:], "recurrent state"),
                            (o[:9], e_o[:9], "output")):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4, err_msg=what)


def _no_kda_reference(out, expected) -> None:  # noqa: ANN001
    raise AssertionError("the interpreter ran the KDA-gate kernel: write a reference for it before relying on this")


CASES = [
    Case(
        id="causal_conv1d_gated_delta_rule/gdn-decode_and_mixed-f32",
        call=lambda get: functools.partial(get(WRAPPER).fused_conv1d_gdn, **SIZES),
        inputs=functools.partial(_inputs, False),
        reference=lambda get: functools.partial(get(REFERENCE).run_jax_gdn_attention_local_ref, **SIZES),
        compare=_compare,
        tolerance=(1e-4, 1e-4),
        tolerance_why="f32 throughout: chunked vs token-by-token delta rule, rounding only",
        chips=CHIPS,
        interpret_xfail=INTERPRET_XFAIL,
        interpret_raises=RAISES,
    ),
    Case(
        id="causal_conv1d_gated_delta_rule/kda_gate-decode_and_mixed-f32-bounded",
        call=lambda get: functools.partial(get(WRAPPER).fused_conv1d_gdn, **SIZES,
                                           attention_mode=get(WRAPPER).config.AttentionMode.KDA,
                                           gate_lower_bound=-5.0),
        inputs=functools.partial(_inputs, True),
        reference=None,  # upstream's reference has the GDN gate only
        compare=_no_kda_reference,
        tolerance_why="no reference for the KDA gate: lowering and Mosaic identity only (interpreter limit)",
        chips=CHIPS,
        interpret_xfail=INTERPRET_XFAIL,
        interpret_raises=RAISES,
    ),
]
