"""Emulation picks what the chip picks (issue 70): inside `emulation.interpret_on_cpu(chip)` alone, the choices a
call makes (upstream's tuned-table entry and the ragged dot's tiles, splash's blocks, the LM head's scheme,
distillation's chunk) equal the compile tier's for that chip: what the package picks when tracing as
`tools.tpu_compile.compiler.lower` traces a case (`tracing_for(kernel, chip)` under `jax.set_mesh` over the chip's
topology, whose devices JAX reports with the chip's device kind). Nothing is compiled: the choices are read when
tracing. Needs libtpu for the topology's devices (this tier).

Before `interpret_on_cpu` set the chip's abstract mesh, upstream's table lookup saw the CPU's device kind: at
8192 x 4096 -> 14336 over 8 experts on v6e the emulation took tiles 256/4096/2048 (its heuristics), the compile
tier the table's 512/4096/1024.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from tools.tpu_compile import compiler, topology

CHIPS = tuple(topology.CHIPS)  # v5e, v6e, v7x
# (tokens, hidden, out, experts): the issue's, Mixtral's, Qwen3-30B-A3B's, a small one
RAGGED = [(8192, 4096, 14336, 8), (4096, 4096, 14336, 8), (2048, 2048, 768, 128), (256, 128, 256, 4)]
# (batch, heads, kv_heads, length, head_dim)
SPLASH = [(1, 8, 2, 4096, 128), (1, 8, 4, 8192, 256), (2, 4, 2, 1000, 64)]
# (rows, hidden, vocab, itemsize)
LM_HEAD = [(8192, 4096, 151936, 2), (4096, 2048, 128256, 2), (300, 128, 1000, 4)]
# (rows, student hidden, teacher hidden, vocab)
DISTILL = [(8192, 2048, 4096, 151936), (100, 256, 512, 1000)]


@contextlib.contextmanager
def compile_tier(kernel: ModuleType, chip: str) -> Iterator[None]:
    """How `compiler.lower` traces a case for `chip`."""
    with compiler.tracing_for(kernel, topology.chip(chip)), jax.set_mesh(topology.mesh(chip)):
        yield


def emulated(kernel: ModuleType, chip: str) -> contextlib.AbstractContextManager:
    return kernel.emulation.interpret_on_cpu(chip)


def _module(kernel: ModuleType, name: str) -> ModuleType:
    return importlib.import_module(f"{kernel.__name__}.{name}")


def ragged_choice(kernel: ModuleType, shape: tuple[int, int, int, int]) -> Any:
    tokens, hidden, out, experts = shape
    lhs = jax.ShapeDtypeStruct((tokens, hidden), jnp.bfloat16)
    rhs = jax.ShapeDtypeStruct((experts, hidden, out), jnp.bfloat16)
    sizes = jax.ShapeDtypeStruct((experts,), jnp.int32)
    return kernel.ops.tpu.RaggedDot().bind(lhs, rhs, group_sizes=sizes).default_config


def splash_choice(kernel: ModuleType, shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The blocks `attend` and its backward run with, recorded as they are chosen while tracing."""
    batch, heads, kv_heads, length, head_dim = shape
    blocks = _module(kernel, "splash.blocks")
    chosen: list[Any] = []

    def recording(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            chosen.append(out := fn(*args, **kwargs))
            return out
        return wrapped

    splash = kernel.splash
    q = jax.ShapeDtypeStruct((batch, heads, length, head_dim), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((batch, kv_heads, length, head_dim), jnp.bfloat16)
    spec = splash.MaskSpec.of(True, None)

    def loss(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        return splash.attend(q, k, v, None, None, None, spec=spec)[0].astype(jnp.float32).sum()

    with monkeypatch.context() as patch:
        patch.setattr(blocks, "fitted_forward", recording(blocks.fitted_forward))
        patch.setattr(blocks, "fitted_backward", recording(blocks.fitted_backward))
        jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(q, kv, kv)
    assert chosen, "no splash blocks were chosen while tracing"
    return chosen


def lm_head_choice(kernel: ModuleType, shape: tuple[int, int, int, int]) -> Any:
    rows, hidden, vocab, itemsize = shape
    return kernel.lm_head.fused.choose_scheme(rows, hidden, vocab, itemsize, kernel.roofline.chip())


def distill_choice(kernel: ModuleType, shape: tuple[int, int, int, int]) -> Any:
    rows, hidden_s, hidden_t, vocab = shape
    xs = jax.ShapeDtypeStruct((rows, hidden_s), jnp.bfloat16)
    xt = jax.ShapeDtypeStruct((rows, hidden_t), jnp.bfloat16)
    return kernel.distill.scheme_of("auto", xs, xt, vocab)


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("shape", RAGGED, ids=[f"{t}x{h}-{o}x{e}" for t, h, o, e in RAGGED])
def test_ragged_dot_config(kernel, chip, shape):
    with compile_tier(kernel, chip):
        want = ragged_choice(kernel, shape)
    with emulated(kernel, chip):
        got = ragged_choice(kernel, shape)
    assert got == want, f"{chip} {shape}: emulation picks {got}, the compile tier {want}"


def test_ragged_dot_table_entry_reached(kernel):
    """The issue's case is a table entry on v6e (not the heuristics): what the equality above must reach."""
    with emulated(kernel, "v6e"):
        got = ragged_choice(kernel, RAGGED[0])
    assert (got.tile_m, got.tile_k, got.tile_n) == (512, 4096, 1024)


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("shape", SPLASH, ids=[f"b{b}h{h}kv{k}n{n}d{d}" for b, h, k, n, d in SPLASH])
def test_splash_blocks(kernel, chip, shape, monkeypatch):
    with compile_tier(kernel, chip):
        want = splash_choice(kernel, shape, monkeypatch)
    with emulated(kernel, chip):
        got = splash_choice(kernel, shape, monkeypatch)
    assert got == want, f"{chip} {shape}: emulation's splash blocks {got}, the compile tier's {want}"


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("shape", LM_HEAD, ids=[f"{r}x{h}-{v}b{i}" for r, h, v, i in LM_HEAD])
def test_lm_head_scheme(kernel, chip, shape):
    with compile_tier(kernel, chip):
        want = lm_head_choice(kernel, shape)
    with emulated(kernel, chip):
        got = lm_head_choice(kernel, shape)
    assert got == want, f"{chip} {shape}: emulation's scheme {got}, the compile tier's {want}"


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("shape", DISTILL, ids=[f"{r}x{s}-{t}-{v}" for r, s, t, v in DISTILL])
def test_distill_chunk(kernel, chip, shape):
    with compile_tier(kernel, chip):
        want = distill_choice(kernel, shape)
    with emulated(kernel, chip):
        got = distill_choice(kernel, shape)
    assert got == want, f"{chip} {shape}: emulation's chunk {got}, the compile tier's {want}"
