"""The LM head's loss (`lm_head.loss.loss`): the scheme `lm_head.fused.loss_and_grads` takes (the kernels, or the
chunked scheme at a chunk: dW added by XLA or by `accumulate`'s kernel, into float32 or the pair, or each chunk in
`streamed`'s kernels), every way the cost model weighed with its time and temporaries against the share of HBM
(`lm_head.cost.HBM_SHARE`), and where the kernels run, each kernel's blocks (`lm_head.plan`)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..lm_head import fused, plan
from ..lm_head.cost import HBM_SHARE, chip
from ..lm_head.transform import IDENTITY, LogitTransform
from .report import Alternative, Choice, Explanation
from .target import device_kind, spec


def label(s: fused.Scheme | fused.ChunkedCost) -> str:
    """A scheme in words."""
    if s.chunk is None:
        return "kernels"
    if s.streamed:
        how = "streamed kernels, dW in the pair" + (" (int8 low half)" if s.scaled else "")
    elif s.kernel:
        how = "dW by the accumulator kernel into " + (("the pair" + (" (int8 low half)" if s.scaled else ""))
                                                       if s.pair else "float32")
    else:
        how = "dW by XLA into float32"
    return f"chunked {s.chunk}: {how}"


def _kernel_choices(rows: int, hidden: int, vocab: int, itemsize: int, on: Any, soft_cap: bool,
                    weight_grad: bool, source: str) -> tuple[list[Choice], float]:
    chosen = plan.choose(rows, hidden, vocab, itemsize, on)
    costs = chosen.costs(hidden, vocab, itemsize, soft_cap=soft_cap)
    names = [k for k in costs if weight_grad or k != "backward_w"]
    choices = [Choice(k, source, {"rows": chosen[k].rows, "vocab": chosen[k].vocab, "transposed": chosen.transposed},
                      vmem_bytes=costs[k].vmem_bytes, seconds=costs[k].seconds(on),
                      note="the blocks of least roofline time within half the chip's VMEM (lm_head.plan)")
               for k in names]
    return choices, sum(costs[k].seconds(on) for k in names)


def explain(chip_name: str, x: Any, w: Any, targets: Any = None, weights: Any = None, *, b: Any = None,
            transform: LogitTransform = IDENTITY, z_loss: float = 0.0, smoothing: float = 0.0,
            chunk: int | None | str = "auto", weight_grad: bool = True) -> Explanation:
    """`lm_head.loss.loss(x, w, targets, weights, ...)` on the chip; `weight_grad`: w (or b) is trained (False: a
    frozen head, or the loss called without `jax.grad`, which make dx alone)."""
    del targets, weights, z_loss, smoothing  # the choice reads the shapes of x and w, and whether there is a bias
    bias = b is not None
    x, w = spec(x), spec(w)
    if getattr(x, "ndim", None) != 2 or getattr(w, "ndim", None) != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"tokamax explain lm_head: x must be [rows, hidden] and w [vocab, hidden], got "
                         f"{getattr(x, 'shape', x)} and {getattr(w, 'shape', w)}")
    rows, hidden, vocab, itemsize = x.shape[0], x.shape[1], w.shape[0], jnp.dtype(x.dtype).itemsize
    on = chip()
    shape = (rows, hidden, vocab, itemsize, on, weight_grad)
    if chunk == "auto":
        chosen = fused.choose_scheme(*shape, soft_cap=transform.tanh, bias=bias)
        source = "the cost model (choose_scheme)"
    elif chunk is None:
        chosen, source = fused.Scheme(None), "given (chunk=None)"
    elif isinstance(chunk, int) and not isinstance(chunk, bool) and chunk > 0:
        chosen, source = fused.accumulation(chunk, *shape, soft_cap=transform.tanh, bias=bias), f"given (chunk={chunk})"
    else:
        raise ValueError(f"tokamax explain lm_head: chunk must be \"auto\", None or a number of rows, got {chunk!r}")
    kernels, kernel_seconds = _kernel_choices(rows, hidden, vocab, itemsize, on, transform.tanh, weight_grad,
                                              source if chosen.chunk is None else "not run")
    ways = [c for size in fused.offered_chunks(rows)
            for c in fused._ways(size, rows, hidden, vocab, itemsize, on, weight_grad, transform.tanh, bias=bias)]
    budget = on.hbm // HBM_SHARE
    weighed = [Alternative("kernels", kernel_seconds, 0, True)] + [
        Alternative(label(c), c.seconds(on), c.temp_bytes, c.temp_bytes + fused.SMALL_BUFFERS <= budget)
        for c in ways]
    taken = next((c for c in ways if fused._scheme(c) == chosen), None)
    scheme = Choice("scheme", source, dict(chosen._asdict()),
                    seconds=kernel_seconds if chosen.chunk is None else taken.seconds(on) if taken else None,
                    note=f"{label(chosen)}; temporaries within 1/{HBM_SHARE} of HBM less "
                         f"{fused.SMALL_BUFFERS >> 20} MiB of the compiler's buffers")
    return Explanation("lm_head.loss.loss", chip_name, device_kind(chip_name), label(chosen),
                       (scheme, *(kernels if chosen.chunk is None else ())),
                       tuple(sorted(weighed, key=lambda a: (not a.fits, a.seconds))), budget - fused.SMALL_BUFFERS)
