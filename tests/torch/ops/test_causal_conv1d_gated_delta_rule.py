"""The Torch causal conv1d + gated delta rule op (TPU only: JAX's interpreter cannot run the kernel on
CPU, tests/jax/cases/causal_conv1d_gated_delta_rule.py): fakes against JAX shapes, symbolic tracing,
one graph for two token counts on meta tensors, upstream's Op in the TPU lowering (v6e and v7x, the
chips upstream runs it on), the CPU refusal, the namespace and argument errors.
"""

from __future__ import annotations

import pytest
import torch

from tests.jax.cases import causal_conv1d_gated_delta_rule as cases

from . import checks

OP = "causal_conv1d_gated_delta_rule"
UPSTREAM_OP = "PallasMosaicTpuCausalConv1dGatedDeltaRule"


def _args(tokens: int, seqs: int, *, n_kq: int = 2, n_v: int = 2, d: int = 128, kernel_size: int = 4,
          dtype: torch.dtype = torch.float32, bias: bool = True, spec_tokens: int = 0, device: str = "cpu") -> dict:
    """Zero tensors shaped as the public JAX cases (tests/jax/public/causal_conv1d_gated_delta_rule_cases.py):
    states and weights in `dtype` but the recurrent state, a_log and dt_bias in f32."""
    dim = 2 * n_kq * d + n_v * d
    slots = seqs * (spec_tokens + 1) + 1

    def z(*shape: int, dt: torch.dtype = dtype) -> torch.Tensor:
        return torch.zeros(shape, dtype=dt, device=device)

    i32 = torch.int32
    return dict(
        qkv=z(tokens, dim), b=z(tokens, n_v), a=z(tokens, n_v), conv_state=z(slots, kernel_size - 1, dim),
        recurrent_state=z(slots, n_v, d, d, dt=torch.float32), conv_weight=z(dim, 1, kernel_size),
        conv_bias=z(dim) if bias else None, a_log=z(n_v, dt=torch.float32), dt_bias=z(n_v, dt=torch.float32),
        query_start_loc=z(seqs + 1, dt=i32), state_indices=z(seqs, dt=i32), distribution=z(3, dt=i32),
        seq_lens=z(seqs, dt=i32), read_state_indices=z(seqs, dt=i32) if spec_tokens else None,
        read_offsets=z(seqs, dt=i32) if spec_tokens else None,
        n_kq=n_kq, n_v=n_v, d_k=d, d_v=d, kernel_size=kernel_size, num_spec_tokens=spec_tokens,
    )


def _op_args(kw: dict) -> tuple:
    """The custom op's positional arguments (the user function's, in order)."""
    return tuple(kw.values())


# f32 with a bias (the JAX case), bf16 without one, and speculative decoding (read indices and offsets)
MODES = {
    "f32-t16-kq2v2-seqs2": dict(tokens=16, seqs=2),
    "bf16-t64-kq2v4-seqs4-no_bias": dict(tokens=64, seqs=4, n_v=4, dtype=torch.bfloat16, bias=False),
    "f32-t8-spec2-seqs2": dict(tokens=8, seqs=2, spec_tokens=2),
}


@pytest.mark.kernels_ci
@pytest.mark.parametrize("mode", list(MODES))
def test_fake_matches_jax_shapes(ops, tokamax, mode):
    f = checks.family(ops, OP)
    kw = _args(**MODES[mode])
    with tokamax.ops.config.cross_compile(True):  # upstream's Op refuses a CPU device otherwise
        conv, rec, out = checks.fake_matches_jax(ops, ops.causal_conv1d_gated_delta_rule_op, f._gdn_jax, *_op_args(kw))
    assert (conv.shape, rec.shape) == (kw["conv_state"].shape, kw["recurrent_state"].shape)
    assert out.shape == (kw["qkv"].shape[0], kw["n_v"] * kw["d_v"]) and out.dtype == kw["qkv"].dtype


@pytest.mark.kernels_ci
def test_returns_states_then_output_like_upstream(ops):
    kw = _args(16, 2, device="meta")
    (conv, rec), out = ops.causal_conv1d_gated_delta_rule(**kw)
    assert conv.shape == kw["conv_state"].shape and rec.shape == kw["recurrent_state"].shape
    assert out.shape == (16, 2 * 128) and out.device.type == "meta"
    assert conv is not kw["conv_state"] and rec is not kw["recurrent_state"]  # new tensors, nothing donated


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    sizes = {k: v for k, v in _args(1, 2).items() if not isinstance(v, torch.Tensor) and v is not None}

    def step(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        (conv, rec), out = ops.causal_conv1d_gated_delta_rule(*tensors, **sizes)
        return out, conv, rec

    def tensors(tokens: int) -> tuple[torch.Tensor, ...]:
        return tuple(v for v in _args(tokens, 2, device="meta").values() if isinstance(v, torch.Tensor))

    graph = checks.traces_symbolically(step, *tensors(16))
    assert "causal_conv1d_gated_delta_rule" in graph.code
    checks.compiles_once_for_two_sizes(step, tensors(16), tensors(40))  # the token count varies; seqs and slots do not


@pytest.mark.kernels_ci
@pytest.mark.parametrize("chip", cases.CHIPS)
@pytest.mark.parametrize("mode", list(MODES))
def test_runs_upstreams_op(ops, chip, mode):
    f = checks.family(ops, OP)
    assert checks.public_op_classes(ops, f._gdn_jax, *_op_args(_args(**MODES[mode])), chip=chip) == {UPSTREAM_OP}


@pytest.mark.kernels_ci
def test_refuses_cpu_tensors_naming_the_interpreter_limit(ops):
    inputs = [torch.from_numpy(x) for x in cases._inputs(False)]
    checks.refuses_on_cpu(lambda: ops.causal_conv1d_gated_delta_rule(*inputs, **cases.SIZES), OP)


@pytest.mark.kernels_ci
def test_in_build_namespace(ops, tokamax):
    checks.assert_in_build_namespace(tokamax, ops.causal_conv1d_gated_delta_rule_op)


def _bad(**change: object) -> dict:
    kw = _args(16, 2, device="meta")
    kw.update(change)
    return kw


_I32 = torch.int32
BAD_CALLS = {
    "qkv width": (_bad(qkv=torch.zeros(16, 512, device="meta")), ValueError, r"qkv must be \[tokens, 2 \* n_kq"),
    "qkv rank": (_bad(qkv=torch.zeros(16, 768, 1, device="meta")), ValueError, "qkv must be"),
    "b tokens": (_bad(b=torch.zeros(15, 2, device="meta")), ValueError, r"b must be \[tokens, n_v\]"),
    "a dtype": (_bad(a=torch.zeros(16, 2, dtype=torch.bfloat16, device="meta")), TypeError,
                "qkv and b and a must share a dtype"),
    "int qkv": (_bad(qkv=torch.zeros(16, 768, dtype=_I32, device="meta")), TypeError,
                "qkv must be bfloat16 or float32"),
    "conv_state slots": (_bad(conv_state=torch.zeros(4, 3, 768, device="meta")), ValueError,
                         r"recurrent_state must be \[slots, n_v, d_k, d_v\]"),
    "conv_state taps": (_bad(conv_state=torch.zeros(3, 4, 768, device="meta")), ValueError,
                        r"conv_state must be \[slots, kernel_size - 1, dim\]"),
    "conv_weight layout": (_bad(conv_weight=torch.zeros(768, 4, device="meta")), ValueError,
                           r"conv_weight must be \[dim, 1, kernel_size\]"),
    "conv_bias size": (_bad(conv_bias=torch.zeros(512, device="meta")), ValueError, r"conv_bias must be \[dim\]"),
    "dt_bias size": (_bad(dt_bias=torch.zeros(3, device="meta")), ValueError, r"dt_bias must be \[n_v\]"),
    "int64 state_indices": (_bad(state_indices=torch.zeros(2, dtype=torch.int64, device="meta")), TypeError,
                            "state_indices must be int32"),
    "query_start_loc length": (_bad(query_start_loc=torch.zeros(2, dtype=_I32, device="meta")), ValueError,
                               r"query_start_loc must be \[seqs \+ 1\]"),
    "distribution length": (_bad(distribution=torch.zeros(2, dtype=_I32, device="meta")), ValueError,
                            r"distribution must be \[3\]"),
    "seq_lens length": (_bad(seq_lens=torch.zeros(3, dtype=_I32, device="meta")), ValueError,
                        r"seq_lens must be \[seqs\]"),
    "read_offsets length": (_bad(read_offsets=torch.zeros(3, dtype=_I32, device="meta")), ValueError,
                            r"read_offsets must be \[seqs\]"),
    "spec without offsets": (_bad(num_spec_tokens=1), ValueError, "read_offsets is required"),
    "zero heads": (_bad(n_v=0), ValueError, "n_v must be positive"),
    "devices": (_bad(qkv=torch.zeros(16, 768)), ValueError, "all tensors must be on one device"),
    "not a tensor": (_bad(a_log=[0.0, 0.0]), TypeError, "a_log must be a torch.Tensor"),
}


@pytest.mark.kernels_ci
@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_arguments_are_named(ops, case):
    kw, error, message = BAD_CALLS[case]
    with pytest.raises(error, match=f"tokamax causal_conv1d_gated_delta_rule: .*{message}"):
        ops.causal_conv1d_gated_delta_rule(**kw)
