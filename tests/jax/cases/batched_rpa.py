"""Batched ragged paged attention (`ragged_paged_attention`): a decode and a mixed sequence over a paged KV cache.

Upstream's Op runs on TPU v5e and newer (`generation >= 5`); the kernel picks thresholds per generation but
refuses none, so every chip. JAX's interpreter cannot run it (below); its numerics would be checked against
upstream's pure-JAX reference, which writes the new keys and values into the cache and attends token by token.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import Case, rng

WRAPPER = "_src.ops.batched_rpa.kernel.wrapper"
REFERENCE = "_src.ops.batched_rpa.reference"
CHIPS = ("v5e", "v6e", "v7x")
INTERPRET_XFAIL = (
    "JAX's Pallas TPU interpreter cannot store through a bitcast ref: the kernel views its VMEM KV and output "
    "buffers as uint32 (`ref.bitcast(jnp.uint32)` in kernel.py and bref_override.py) and the interpreter's `swap`"
    " callback reads the transform's indices, raising `AttributeError: 'BitcastTransform' object has no attribute"
    " 'indices'` from interpret/utils.py `to_range`, surfacing as `jax.errors.JaxRuntimeError: INTERNAL: "
    "CpuCallback error calling callback`"
)
HQ, HKV, D = 4, 2, 128  # GQA: two query heads per KV head
PAGE, PAGES_PER_SEQ, PAGES = 16, 4, 8


def _inputs() -> tuple[np.ndarray, ...]:
    """Sequence 0 decodes 1 token at kv length 20; sequence 1 is mixed: 8 new tokens at kv length 40.

    16 query rows, 9 live (the rest is padding); pages are scattered and shared by no sequence.
    """
    r = rng(16 + HQ + D)
    tokens = 16
    q = r.standard_normal((tokens, HQ, D), np.float32).astype(jnp.bfloat16)
    k = r.standard_normal((tokens, HKV, D), np.float32).astype(jnp.bfloat16)
    v = r.standard_normal((tokens, HKV, D), np.float32).astype(jnp.bfloat16)
    kv_cache = r.standard_normal((PAGES, PAGE, 2 * HKV, D), np.float32).astype(jnp.bfloat16)
    kv_lens = np.array([20, 40], np.int32)
    page_indices = np.array([3, 5, 0, 0, 1, 6, 2, 7], np.int32)  # PAGES_PER_SEQ pages per sequence
    cu_q_lens = np.array([0, 1, 9], np.int32)
    distribution = np.array([1, 1, 2], np.int32)  # cumulative: 1 decode, 0 prefill-only, 1 mixed
    return q, k, v, kv_cache, kv_lens, page_indices, cu_q_lens, distribution


def _compare(out, expected) -> None:  # noqa: ANN001
    """Live rows of the output at bf16 tolerance; the updated cache exactly (it only moves bf16 values)."""
    o, cache = (np.asarray(a, np.float32) for a in out)
    e, e_cache = (np.asarray(a, np.float32) for a in expected)
    np.testing.assert_allclose(o[:9], e[:9], rtol=2e-2, atol=2e-2, err_msg="attention output")
    np.testing.assert_array_equal(cache.reshape(e_cache.shape), e_cache, err_msg="updated kv cache")


CASES = [
    Case(
        id="batched_rpa/decode_and_mixed-gqa-bf16-d128-page16",
        call=lambda get: functools.partial(get(WRAPPER).ragged_paged_attention, sm_scale=D**-0.5),
        inputs=_inputs,
        reference=lambda get: functools.partial(get(REFERENCE).batched_ragged_paged_attention_reference,
                                                sm_scale=D**-0.5),
        compare=_compare,
        tolerance=(2e-2, 2e-2),
        tolerance_why="bf16 q/k/v, f32 softmax: outputs of O(1) at 1-2 bf16 ulp; the cache is copied exactly",
        chips=CHIPS,
        interpret_xfail=INTERPRET_XFAIL,
        interpret_raises=(jax.errors.JaxRuntimeError, "'BitcastTransform' object has no attribute"),
    ),
]
