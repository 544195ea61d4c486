"""Upstream's array annotations (`Float[Array, "T N R"]`) are checked at call time, as upstream's
jaxtyping + pydantic check them: dtype families, named, fixed, broadcastable and variadic
dimensions, consistent across a call's arguments; the error names the function, the argument,
the dimension and where it was bound; `disable_jaxtyping` turns the checks off; correct calls pass.

(No `from __future__ import annotations` here: the annotations of the function defined in a test
must evaluate where it is defined.)"""

import jax.numpy as jnp
import pytest

pytestmark = pytest.mark.kernels_ci


def _mla_arguments(q_heads: int) -> dict:
    return dict(ql_nope=jnp.zeros((10, 5, 128)), q_pe=jnp.zeros((10, q_heads, 64)), new_kv_c=jnp.zeros((10, 128)),
                new_k_pe=jnp.zeros((10, 64)), cache_kv=jnp.zeros((2, 16, 4, 128)),
                kv_lens=jnp.zeros((2,), jnp.int32), page_indices=jnp.zeros((2,), jnp.int32),
                cu_q_lens=jnp.zeros((3,), jnp.int32), distribution=jnp.zeros((3,), jnp.int32))


def test_a_shape_mismatch_names_the_argument_and_the_dimension(get):
    op = get("_src.ops.experimental.mla.base").MultiHeadLatentAttention()
    with pytest.raises(TypeError) as info:
        op.bind(**_mla_arguments(q_heads=6))
    assert str(info.value) == (
        "MultiHeadLatentAttention.bind: argument 'q_pe' is a float32 array of shape (10, 6, 64); its annotation "
        "needs shape 'max_num_tokens actual_num_q_heads actual_r_dim', where actual_num_q_heads = 5 (from "
        "argument 'ql_nope')")
    assert isinstance(info.value, ValueError)  # as upstream's tests accept (ValueError, TypeCheckError)
    op.bind(**_mla_arguments(q_heads=5))


def test_dtype_families_and_dimension_forms(get):
    checker = get("_compat.jaxtyping")
    Array, Float, Int = checker.Array, checker.Float, checker.Int  # noqa: N806

    @checker.jaxtyped
    def f(x: Float[Array, "*batch 4 N"], y: Int[Array, "#N"] | None = None,  # noqa: F722 - jaxtyping dims
          z: Float[Array, "*batch H*2"] | None = None) -> Float[Array, "... N"]:  # noqa: F722
        return x

    f(jnp.zeros((2, 3, 4, 5)), jnp.zeros((1,), jnp.int32), jnp.zeros((2, 3, 10)))
    f(jnp.zeros((4, 5)), jnp.zeros((5,), jnp.int32))
    for call, fragment in (
        (lambda: f(jnp.zeros((2, 3, 5, 5))), "shape '*batch 4 N', where 4"),
        (lambda: f(jnp.zeros((4, 5), jnp.int32)), "a dtype in Float"),
        (lambda: f(jnp.zeros((4, 5)), jnp.zeros((3,), jnp.int32)), "N = 5 (from argument 'x')"),
        (lambda: f(jnp.zeros((2, 4, 5)), None, jnp.zeros((3, 10))), "*batch = (2,) (from argument 'x')"),
    ):
        with pytest.raises(TypeError, match="f: argument") as info:
            call()
        assert fragment in str(info.value), str(info.value)


def test_a_broadcast_variadic_run_takes_any_broadcast_compatible_shape(get):
    """`*#B` as upstream's attention annotates its mask (`*#B #H #T #t` beside `q: *B T H D`):
    jaxtyping takes a run numpy can broadcast with the bound one, of any length."""
    checker = get("_compat.jaxtyping")
    Array, Bool, Float = checker.Array, checker.Bool, checker.Float  # noqa: N806

    @checker.jaxtyped
    def attend(q: Float[Array, "*B T H D"], mask: Bool[Array, "*#B #H #T #t"]) -> None:  # noqa: F722
        return None

    q = jnp.zeros((2, 16, 4, 8))
    for mask_shape in ((1, 16, 16), (1, 1, 1, 16), (2, 4, 16, 16), (1, 4, 1, 16)):
        attend(q, jnp.zeros(mask_shape, bool))
    for mask_shape, fragment in (((3, 1, 16, 16), "*B = (2,)"), ((2, 4, 8, 16), "T = 16")):
        with pytest.raises(TypeError, match="attend: argument 'mask'") as info:
            attend(q, jnp.zeros(mask_shape, bool))
        assert fragment in str(info.value), str(info.value)


def test_disable_jaxtyping_turns_the_checks_off(get):
    op = get("_src.ops.experimental.mla.base").MultiHeadLatentAttention()
    with get("_src.jaxtyping").disable_jaxtyping():
        op.bind(**_mla_arguments(q_heads=6))
    with pytest.raises(TypeError):
        op.bind(**_mla_arguments(q_heads=6))
