"""The grouped matmul's choices (`ops.ragged_dot`): which implementation runs, and for upstream's Mosaic kernel the
tiles of each of its calls (the forward's gmm, the backward's dlhs and tgmm), where they came from, the VMEM limit
each is compiled with and the roofline's time (`tokamax.moe.tiles.seconds`).

The Op's own config choice is asked (`BoundArguments.get_config`: a config given, upstream's tuned table or an
autotuning result for the chip, else its heuristics, which port.kdl routes to `tokamax.moe.tiles` before TPU7x),
bound with the arguments the op and its VJP bind, so that the answer is what tracing the call takes."""

from __future__ import annotations

import importlib
from typing import Any

import jax
import jax.numpy as jnp

from .. import moe, ops, roofline
from .report import Choice, Explanation
from .target import device_kind, spec

_HOOK = ".._ported._src.ops.ragged_dot.tiles_hook"
_CONFIG = ".._ported._src.config"
IMPLEMENTATIONS = (None, "mosaic", "mosaic_tpu", "xla")


def _hook() -> Any:
    return importlib.import_module(_HOOK, __package__)


def _heuristic_source(ba: Any, config: Any, kernel: str) -> tuple[str, str]:
    """(source, note) of a config the Op's heuristics gave."""
    op = ba.op
    if op.qdtype is not None:
        return "upstream's default", "a quantized call keeps upstream's default Config"
    from jax.experimental.pallas import tpu as pltpu

    hook = _hook()
    if hook._UPSTREAM.get():
        return "upstream's heuristics", "within tiles_hook.upstream_heuristics()"
    if pltpu.get_tpu_info().generation >= 7:
        if kernel == "tgmm" and getattr(op, "_tgmm_heuristics_config", None) is not None:
            with hook.upstream_heuristics():
                released = ba.heuristics_config
            if released != config:
                return "the package's tile rule", "upstream's TPU7x tgmm tiles did not fit the scoped VMEM"
        return "upstream's heuristics", "TPU7x keeps upstream's own heuristic"
    key = moe.measured.key_of(ba)
    if key is not None and moe.measured.lookup(roofline.chip().kind, key) is not None:
        return "measured on the chip", "the fastest the chip timed at this exact call (tokamax.moe.measured)"
    return "the package's tile rule", "no table entry: tokamax.moe.tiles.choose, the fastest fitting by the roofline"


def refusal(lhs: Any, rhs: Any, tile_m: int) -> str | None:
    """Why upstream's Mosaic kernel refuses a call at row tile `tile_m` (its NotImplementedErrors: a dimension under
    128, rows the row tile does not divide), or None."""
    if any(size < 128 for size in (*lhs.shape[-2:], *rhs.shape[-2:])):
        return f"upstream's Mosaic kernel takes no dimension under 128 (lhs {lhs.shape}, rhs {rhs.shape})"
    if lhs.shape[0] % tile_m:
        return f"upstream's Mosaic kernel needs the row tile ({tile_m}) to divide the rows ({lhs.shape[0]})"
    return None


def _choice(op: Any, kernel: str, lhs: Any, rhs: Any, **kwargs: Any) -> Choice:
    ba = op.bind(lhs, rhs, **kwargs)
    if op.config is not None:
        config, source, note = op.config, "given", "the Op's config"
    elif (data := ba.cached_autotuning_data) is not None and data.items():
        config, source, note = data.fastest_config, "upstream's tuned table", "an entry for this call and chip"
    else:
        config = ba.heuristics_config
        source, note = _heuristic_source(ba, config, kernel)
        fallback = importlib.import_module(_CONFIG, __package__).autotuning_cache_miss_fallback.value
        if fallback != "heuristics":
            note += f" (tokamax_autotuning_cache_miss_fallback={fallback!r}: the call would {fallback} instead)"
    call = _hook()._call(ba, *_dims())
    sizes = {"tile_m": config.tile_m, "tile_k": config.tile_k, "tile_n": config.tile_n,
             "input_buffer_count": config.input_buffer_count}
    if (why := refusal(lhs, rhs, config.tile_m)) is not None:
        note = f"{note}; refused: {why}"
    if call is None:
        return Choice(kernel, source, sizes, note=note)
    _, m, k, n, groups, itemsize = call
    tiles = moe.tiles.Tiles(config.tile_m, config.tile_k, config.tile_n)
    on = roofline.chip()
    limit = _hook().vmem_limit(kernel, config, *ba.args)
    return Choice(kernel, source, sizes, vmem_limit=limit,
                  vmem_bytes=moe.tiles.vmem_bytes(kernel, tiles, itemsize, config.input_buffer_count),
                  seconds=moe.tiles.seconds(kernel, m, k, n, groups, tiles, on, itemsize), note=note)


def _module() -> Any:
    return importlib.import_module(ops.tpu.RaggedDot.__module__)


def _dims() -> tuple[Any, Any, Any]:
    m = _module()
    return m.DEFAULT_RAGGED_DOT_DIM_NUMS, m.DLHS_RAGGED_DOT_DIM_NUMS, m.DRHS_RAGGED_DOT_DIM_NUMS


def _check(lhs: Any, rhs: Any, group_sizes: Any) -> None:
    for name, x, rank in (("lhs", lhs, 2), ("rhs", rhs, 3), ("group_sizes", group_sizes, 1)):
        if getattr(x, "ndim", None) != rank:
            raise ValueError(f"tokamax explain ragged_dot: {name} must be a {rank}-D array, got "
                             f"{getattr(x, 'shape', type(x).__name__)}")


def explain(chip: str, lhs: Any, rhs: Any, group_sizes: Any, precision: Any = None,
            preferred_element_type: Any = None, *, implementation: Any = None, grad: bool = True,
            activation: Any = None) -> Explanation:
    """`ops.ragged_dot(lhs, rhs, group_sizes, ...)` on `chip` (traced for it: `target.tracing_for`); `grad`: a
    training step's (the forward with its residuals, then dlhs and tgmm), else the forward alone."""
    gs = getattr(group_sizes, "value", group_sizes)  # upstream's GroupSizes holds the array as `value`
    lhs, rhs, gs_spec = spec(lhs), spec(rhs), spec(gs)
    _check(lhs, rhs, gs_spec)
    group_sizes = gs_spec if gs is group_sizes else group_sizes
    if isinstance(implementation, str) or implementation is None:
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"tokamax explain ragged_dot: implementation must be one of {IMPLEMENTATIONS[1:]}, None "
                             f"or a RaggedDot Op, got {implementation!r}")
        if implementation == "xla":
            return Explanation("ops.ragged_dot", chip, device_kind(chip), "xla (jax.lax.ragged_dot)", ())
        op = ops.tpu.RaggedDot()
    elif isinstance(implementation, ops.tpu.RaggedDot):
        op = implementation
    else:
        raise ValueError(f"tokamax explain ragged_dot: implementation must be one of {IMPLEMENTATIONS[1:]}, None or "
                         f"a RaggedDot Op, got {implementation!r}")
    default, dlhs_dims, drhs_dims = _dims()
    common = dict(group_sizes=group_sizes, precision=precision)  # the VJP's calls take no activation
    choices = [_choice(op, "gmm", lhs, rhs, ragged_dot_dimension_numbers=default, activation=activation,
                       preferred_element_type=preferred_element_type, return_residuals=grad, **common)]
    why = refusal(lhs, rhs, choices[0].sizes["tile_m"])
    if why is not None and implementation is None:  # upstream's list ("mosaic", "xla"): the next one runs
        return Explanation("ops.ragged_dot", chip, device_kind(chip), f"xla (jax.lax.ragged_dot): {why}", ())
    if grad:
        out = jax.ShapeDtypeStruct((lhs.shape[0], rhs.shape[2]),
                                   jnp.dtype(preferred_element_type or jnp.result_type(lhs.dtype, rhs.dtype)))
        choices.append(_choice(op, "dlhs", out, rhs, ragged_dot_dimension_numbers=dlhs_dims,
                               preferred_element_type=lhs.dtype, **common))
        choices.append(_choice(op, "tgmm", lhs, out, ragged_dot_dimension_numbers=drhs_dims,
                               preferred_element_type=rhs.dtype, **common))
    return Explanation("ops.ragged_dot", chip, device_kind(chip), "mosaic_tpu (upstream's Pallas kernel)",
                       tuple(choices))
