"""Where upstream's ragged-dot heuristics give chips before TPU7x the default 128-cube tiles, this package's
tile rule answers instead (ours; port.kdl routes `_get_heuristics_config` here): `tokamax.moe.tiles`, loaded
on first use from the package that holds this tree. Upstream's tuned tables still come first (the Op asks
its heuristics only on a table miss), quantized calls keep upstream's defaults, and TPU7x keeps upstream's
own heuristic, but for a tgmm whose tiles would not fit the scoped VMEM (`fitted`).

`upstream_heuristics()` restores upstream's choice within a block: what the identity checks against
upstream 0.0.17 compare under.

`rhs_lookahead(...)`: whether gmm fetches the next group's weights block as soon as a buffer is free (port.kdl
adds the switch to upstream's kernel), rather than one grid step ahead as released; off within
`upstream_heuristics()` and `weights_one_step_ahead()` (what the chip benchmark compares against), and for weights
tiles off the lanes.

`zero_padded_rows()`: whether gmm (forward and the backward's dlhs) writes zeros to the rows past the last group
(port.kdl adds the step, `padded_rows.zeroed`; upstream leaves them unwritten): on, but within
`upstream_heuristics()` and `padded_rows_unwritten()` (what the chip benchmark compares against).

`vmem_limit(...)`: the scoped VMEM limit gmm and tgmm are compiled with (port.kdl adds the argument): libtpu's
default (None) within `upstream_heuristics()` and wherever the tiles fit it, else the package's raised limit for
tiles its rule took past the default (`tokamax.moe.tiles.vmem_limit`).
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import warnings
from collections.abc import Iterator
from typing import Any

_UPSTREAM = contextvars.ContextVar("tokamax_upstream_ragged_dot_heuristics", default=False)
_KERNEL = {"default": "gmm", "dlhs": "dlhs", "drhs": "tgmm"}


@contextlib.contextmanager
def upstream_heuristics() -> Iterator[None]:
    """Within the block, upstream's heuristics as released (the default tiles before TPU7x)."""
    reset = _UPSTREAM.set(True)
    try:
        yield
    finally:
        _UPSTREAM.reset(reset)


def released() -> bool:
    """Whether the call being traced is within `upstream_heuristics()` (the package's guards in front of the op,
    `tokamax.ops._group_sizes`, stand aside there too)."""
    return _UPSTREAM.get()


_ONE_STEP = contextvars.ContextVar("tokamax_gmm_weights_one_step_ahead", default=False)


@contextlib.contextmanager
def weights_one_step_ahead() -> Iterator[None]:
    """Within the block, gmm fetches a group's weights one grid step ahead, as upstream releases it."""
    reset = _ONE_STEP.set(True)
    try:
        yield
    finally:
        _ONE_STEP.reset(reset)


_UNWRITTEN = contextvars.ContextVar("tokamax_gmm_padded_rows_unwritten", default=False)


@contextlib.contextmanager
def padded_rows_unwritten() -> Iterator[None]:
    """Within the block, gmm leaves the rows past the last group as upstream releases it: unwritten."""
    reset = _UNWRITTEN.set(True)
    try:
        yield
    finally:
        _UNWRITTEN.reset(reset)


def zero_padded_rows() -> bool:
    """Whether the gmm being traced zeroes the rows past the last group (read by the Op and `tokamax.ragged_dot.gmm`
    at each call, passed to the kernel as a static argument, so a jitted caller's cache keeps the two apart): not
    within `upstream_heuristics()` or `padded_rows_unwritten()`."""
    return not (_UPSTREAM.get() or _UNWRITTEN.get())


LANES, SUBLANES = 128, 16
"""The weights block's tiles lookahead needs: its fetch addresses the next block at a run-time offset, and Mosaic
refuses one it cannot prove aligned to the lanes ("Offsets along tiled dimensions must be aligned to tiles": on the
v5e's chip check, gpt-oss-like experts of 2880 -> 1440 at tiles 256 x 1024 x 1440), so the weights' column tile must
be a multiple of 128 and their row tile of 16 (a 16-bit dtype's sublane tile)."""


def rhs_lookahead(tile_n: int | None = None, tile_k: int | None = None) -> bool:
    """Whether the gmm being traced fetches its weights with lookahead (read by the Op at each call, passed to
    the kernel as a static argument, so a jitted caller's cache keeps the two apart): not within
    `upstream_heuristics()` or `weights_one_step_ahead()`, and only for weights blocks of `tile_k` rows by `tile_n`
    columns that `LANES` and `SUBLANES` divide."""
    aligned = (tile_n is None or tile_n % LANES == 0) and (tile_k is None or tile_k % SUBLANES == 0)
    return aligned and not (_UPSTREAM.get() or _ONE_STEP.get())


_WARNED: list[str] = []


def _rule() -> Any:
    """The package's tile rule, or None where this tree runs without the package that holds it (the ported
    tree imported on its own, as upstream's suite runs it): there upstream's heuristics answer, said once."""
    package, found, _ = __name__.partition("._ported.")
    if found:
        try:
            return importlib.import_module(f"{package}.moe.tiles")
        except ImportError as e:
            reason = str(e)
    else:
        reason = f"{__name__} is not inside the kernel package"
    if not _WARNED:
        _WARNED.append(reason)
        warnings.warn(f"tokamax ragged dot: the grouped matmul's tile rule (tokamax.moe.tiles) is not reachable "
                      f"({reason}); upstream's heuristics choose the tiles", stacklevel=3)
    return None


def _groups(group_sizes: Any) -> int:
    value = getattr(group_sizes, "value", group_sizes)  # upstream's GroupSizes holds the array as `value`
    return int(value.shape[0])


def _itemsize(x: Any) -> int:
    dtype = getattr(x, "dtype", None)
    return int(getattr(dtype, "itemsize", 2) or 2)


def _call(ba: Any, default_dims: Any, dlhs_dims: Any, drhs_dims: Any) -> tuple[str, int, int, int, int, int] | None:
    """(kernel, m, k, n, groups, itemsize) of upstream's bound arguments, or None for dimension numbers upstream's
    kernel refuses, operands of other ranks and calls without rows (upstream's own checks answer those)."""
    lhs, rhs = ba.args
    dims = ba.arguments.get("ragged_dot_dimension_numbers", default_dims)
    if len(lhs.shape) != 2 or len(rhs.shape) != (2 if dims == drhs_dims else 3) or lhs.shape[0] == 0:
        return None
    if dims == default_dims:
        (m, k), (_, _, n), kernel = lhs.shape, rhs.shape, "gmm"
    elif dims == dlhs_dims:
        (m, n), (_, k, _), kernel = lhs.shape, rhs.shape, "dlhs"
    elif dims == drhs_dims:
        (m, k), (_, n), kernel = lhs.shape, rhs.shape, "tgmm"
    else:
        return None
    return kernel, m, k, n, _groups(ba.arguments["group_sizes"]), max(_itemsize(lhs), _itemsize(rhs))


def fitted(ba: Any, chosen: Any, config_cls: type, default_dims: Any, dlhs_dims: Any, drhs_dims: Any) -> Any:
    """Upstream's TPU7x tgmm Config where it fits the scoped VMEM, else this package's tiles: upstream's tgmm
    heuristic checks its tiles against a VMEM model that leaves out the float32 accumulator, and at OLMoE's
    backward (1024 x 2048 x 1024) libtpu refuses it (35.37M of the 32M scoped VMEM)."""
    call = _call(ba, default_dims, dlhs_dims, drhs_dims)
    if _UPSTREAM.get() or call is None or (rule := _rule()) is None:
        return chosen
    kernel, m, k, n, groups, itemsize = call
    on = rule.roofline.chip()
    if rule.fits(kernel, rule.Tiles(chosen.tile_m, chosen.tile_k, chosen.tile_n), on, itemsize):
        return chosen
    tm, tk, tn = rule.choose(kernel, m, k, n, groups, on, itemsize)
    return config_cls(tile_m=tm, tile_k=tk, tile_n=tn, input_buffer_count=chosen.input_buffer_count,
                      combine_scopes=chosen.combine_scopes)


def vmem_limit(kernel: str, config: Any, lhs: Any, rhs: Any) -> int | None:
    """`vmem_limit_bytes` for `kernel` ("gmm", "dlhs" or "tgmm") at upstream's Config `config` (its names: for dlhs
    tile_k tiles the output): None (libtpu's default) within `upstream_heuristics()`, without the package, or where
    the tiles fit the default scoped VMEM; else the rule's raised limit."""
    if _UPSTREAM.get() or (rule := _rule()) is None:
        return None
    tiles = rule.Tiles(config.tile_m, config.tile_k, config.tile_n)
    return rule.vmem_limit(kernel, tiles, rule.roofline.chip(), max(_itemsize(lhs), _itemsize(rhs)),
                           config.input_buffer_count)


def config(ba: Any, config_cls: type, default_dims: Any, dlhs_dims: Any, drhs_dims: Any) -> Any:
    """The Config for upstream's bound arguments `ba` (its three dimension numbers passed in by the caller,
    the Op module): this package's tiles and input buffering, or upstream's default Config within
    `upstream_heuristics()` and for dimension numbers upstream's kernel refuses (its own error then follows)."""
    call = _call(ba, default_dims, dlhs_dims, drhs_dims)
    if _UPSTREAM.get() or call is None or (rule := _rule()) is None:
        return config_cls()
    tm, tk, tn = rule.for_call(*call)
    return config_cls(tile_m=tm, tile_k=tk, tile_n=tn, input_buffer_count=rule.buffers_for_call(*call))
