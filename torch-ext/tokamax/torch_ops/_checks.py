"""Argument checks shared by the Torch ops: run before the kernel, so a bad call fails with a
message that names the op and the argument instead of a JAX traceback from inside the kernel."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..ops._jax_floor import MOSAIC_OPT_LEVEL, TENSORCORE_MESH, check  # noqa: F401 - the ops name them here

FLOATS = (torch.bfloat16, torch.float32)

# What some kernels need from jax that the Torch tier's jax (0.10.2, the newest on Python 3.11) lacks:
# (module, attribute, how the message names it): MOSAIC_OPT_LEVEL and TENSORCORE_MESH, from the JAX ops' check.
DEVICES = ("tpu", "cpu", "meta")


def tensors(op: str, optional: tuple[str, ...] = (), **named: torch.Tensor | None) -> None:
    """Each named argument is a tensor (None allowed for those named in `optional`), all on one
    TPU/CPU/meta device."""
    for name, t in named.items():
        if t is None and name not in optional:
            raise TypeError(f"tokamax {op}: {name} must be a torch.Tensor, got None")
    given = {n: t for n, t in named.items() if t is not None}
    for name, t in given.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tokamax {op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    devices = {t.device.type for t in given.values()}
    if not devices <= set(DEVICES):
        raise ValueError(f"tokamax {op}: tensors must be on a TPU (or CPU, interpret mode), got {sorted(devices)}")
    if len({t.device for t in given.values()}) > 1:
        where = ", ".join(f"{n} on {t.device}" for n, t in given.items())
        raise ValueError(f"tokamax {op}: all tensors must be on one device, got {where}")


def floats(op: str, **named: torch.Tensor) -> None:
    """The named tensors are bfloat16 or float32 and share one dtype."""
    for name, t in named.items():
        if t.dtype not in FLOATS:
            raise TypeError(f"tokamax {op}: {name} must be bfloat16 or float32, got {t.dtype}")
    if len({t.dtype for t in named.values()}) > 1:
        raise TypeError(f"tokamax {op}: {' and '.join(named)} must share a dtype, got "
                        + ", ".join(str(t.dtype) for t in named.values()))


def dtype(op: str, name: str, t: torch.Tensor, allowed: Sequence[torch.dtype]) -> None:
    """`t` has one of the `allowed` dtypes."""
    if t.dtype not in allowed:
        names = " or ".join(str(d).removeprefix("torch.") for d in allowed)
        raise TypeError(f"tokamax {op}: {name} must be {names}, got {t.dtype}")


def rank(op: str, name: str, t: torch.Tensor, ranks: tuple[int, ...], layout: str) -> None:
    """`t` has one of the ranks; the message shows the expected `layout`, e.g. "[m, k]"."""
    if t.dim() not in ranks:
        raise ValueError(f"tokamax {op}: {name} must be {layout}, got shape {tuple(t.shape)}")


def shape(op: str, name: str, t: torch.Tensor, expected: Sequence[int | None], layout: str) -> None:
    """`t` has the expected shape (None: any size on that axis); the message shows `layout`.

    Sizes are compared with `!=` only (no hashing), so symbolic sizes stay symbolic.
    """
    if t.dim() != len(expected) or any(e is not None and s != e for s, e in zip(t.shape, expected, strict=True)):
        want = ", ".join("*" if e is None else str(e) for e in expected)
        raise ValueError(f"tokamax {op}: {name} must be {layout} = [{want}], got shape {tuple(t.shape)}")


def same(op: str, what: str, **sizes: int) -> None:
    """The named sizes agree, e.g. same("gmm", "k", lhs=lhs.shape[1], rhs=rhs.shape[1]).

    Compared pairwise with `!=`, never hashed: a set of symbolic sizes would make torch.compile
    specialise them (one graph per size).
    """
    first, *rest = sizes.values()
    if any(size != first for size in rest):
        given = ", ".join(f"{n} has {v}" for n, v in sizes.items())
        raise ValueError(f"tokamax {op}: {what} must agree: {given}")


def choice(op: str, name: str, value: object, allowed: Sequence[object]) -> None:
    """`value` is one of `allowed`."""
    if value not in allowed:
        raise ValueError(f"tokamax {op}: {name} must be one of {list(allowed)}, got {value!r}")


def positive(op: str, name: str, value: int | float) -> None:
    if not value > 0:
        raise ValueError(f"tokamax {op}: {name} must be positive, got {value}")


def group_sizes(op: str, sizes: torch.Tensor, groups: int, rows: int | None = None) -> None:
    """int32 [groups]; on a plain CPU tensor (its values at hand: not a subclass such as DTensor, not fake, outside
    torch.compile's tracing), non-negative and summing to at most `rows`. Elsewhere the JAX function clips them
    (`ops._group_sizes`)."""
    if sizes.dtype != torch.int32:
        raise TypeError(f"tokamax {op}: group_sizes must be int32, got {sizes.dtype}")
    if sizes.dim() != 1 or sizes.shape[0] != groups:
        raise ValueError(f"tokamax {op}: group_sizes must have one entry per group ({groups}), "
                         f"got shape {tuple(sizes.shape)}")
    if (rows is None or type(sizes) is not torch.Tensor or sizes.device.type != "cpu" or torch.compiler.is_compiling()
            or _fake(sizes)):
        return
    values = sizes.tolist()
    if any(v < 0 for v in values):
        raise ValueError(f"tokamax {op}: group_sizes must be non-negative, got {_shown(values)}")
    if sum(values) > rows:
        raise ValueError(f"tokamax {op}: group_sizes sum to {sum(values)}, past lhs's {rows} rows, "
                         f"got {_shown(values)}")


def _fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import is_fake

    return is_fake(t)


def _shown(values: list[int]) -> str:
    return str(values) if len(values) <= 16 else f"{values[:15]}... ({len(values)} sizes)"


PAGED_LAYOUTS = {"page_indices": "[max_num_seqs * pages_per_seq]", "cu_q_lens": "[max_num_seqs + 1]",
                 "distribution": "[3]"}


def paged_metadata(op: str, lens_name: str, lens: torch.Tensor, page_indices: torch.Tensor,
                   cu_q_lens: torch.Tensor, distribution: torch.Tensor) -> None:
    """The ragged paged-attention metadata upstream's paged kernels share: int32 vectors `lens_name`
    [max_num_seqs], page_indices, cu_q_lens [max_num_seqs + 1] and distribution [3]."""
    named = {lens_name: lens, "page_indices": page_indices, "cu_q_lens": cu_q_lens, "distribution": distribution}
    layouts = {lens_name: "[max_num_seqs]", **PAGED_LAYOUTS}
    for name, t in named.items():
        dtype(op, name, t, (torch.int32,))
        rank(op, name, t, (1,), layouts[name])
    if cu_q_lens.shape[0] != lens.shape[0] + 1:
        raise ValueError(f"tokamax {op}: cu_q_lens must have one entry more than {lens_name} "
                         f"({lens.shape[0]} + 1), got shape {tuple(cu_q_lens.shape)}")
    shape(op, "distribution", distribution, (3,), layouts["distribution"])


def rope_tables(op: str, tokens: int, positions: torch.Tensor, cos_sin_cache: torch.Tensor, lane: int = 128
                ) -> None:
    """DeepSeek RoPE inputs: positions int32 [tokens]; cos_sin_cache float32 [max_pos, rotary_dim],
    rotary_dim even and at most one lane row."""
    dtype(op, "positions", positions, (torch.int32,))
    shape(op, "positions", positions, (tokens,), "[tokens]")
    dtype(op, "cos_sin_cache", cos_sin_cache, (torch.float32,))
    rank(op, "cos_sin_cache", cos_sin_cache, (2,), "[max_pos, rotary_dim]")
    rotary_dim = cos_sin_cache.shape[1]
    if rotary_dim % 2 != 0 or not 0 < rotary_dim <= lane:
        raise ValueError(f"tokamax {op}: cos_sin_cache's rotary_dim must be even and in (0, {lane}], got "
                         f"shape {tuple(cos_sin_cache.shape)}")


def jax_has(op: str, module: str, attribute: str, label: str) -> None:
    """The running jax has `module.attribute`, which the op's kernel needs; else a NotImplementedError (a
    RuntimeError) naming the jax it needs (e.g. `jax_has(op, *TENSORCORE_MESH)`): the JAX public ops' check."""
    check(op, module, attribute, label)
