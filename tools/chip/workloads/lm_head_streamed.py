"""The labels path with each chunk in `lm_head.streamed`'s two kernels (G made in VMEM, never in HBM) at the heads of
`models.HEADS`, in chunks of 512 to 1024 rows with dW in the float32 accumulator, the 16-bit pair and the int8 pair,
the logits stored in float32 (what `fused.STREAMED`'s record holds); and with the logits stored compact (bf16, less
the running maximum) in chunks of 1024 and 2048 with the pairs; beside XLA's plain loss, the package's own choice
("tokamax") and its choice among the other ways ("tokamax (streamed=False)": what it took before `fused.STREAMED`).
At `models.UNLISTED`' heads and rows (a chunk's worth of rows left over) the package's two choices beside XLA's: a
choice must hold where nobody listed the shape. Run when named only."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import jax
import jax.numpy as jnp

from ..models import HEADS, UNLISTED
from . import Workload, with_grads
from .lm_head import _head_args, xla_loss

CHUNKS = (512, 768, 1024)  # 1280 at hidden 4096 fits no vocabulary block in the v5e's VMEM
COMPACT_CHUNKS = (1024, 2048)  # 2048 at hidden 2560 only


def workloads(tk: ModuleType) -> Iterator[Workload]:
    lm_head = tk.lm_head

    def labels(chunk: object, pair: bool | None = None, scaled: bool | None = None,  # noqa: ANN202
               streamed: bool | None = True, compact: bool | None = False):
        # pair and scaled None: as the package chooses
        def fn(x: jax.Array, w: jax.Array, t: jax.Array) -> tuple:
            weights = jnp.full(t.shape, 1.0 / t.shape[0], jnp.float32)
            kw = {"streamed": streamed, "compact": compact} if streamed else {"streamed": streamed}
            return lm_head.fused.loss_and_grads(x, w, None, t, weights, lm_head.IDENTITY, chunk=chunk,
                                                pair_accumulator=pair, scaled_low=scaled, **kw)[:3]
        return fn

    for h in HEADS:
        case = f"{h.model} head: {h.rows} rows, hidden {h.hidden}, vocabulary {h.vocab}"

        def make(h=h) -> tuple:  # noqa: ANN001
            return _head_args(h.rows, h.hidden, h.vocab)
        flops = 6 * h.rows * h.hidden * h.vocab
        yield Workload("lm_head_loss", case, "tokamax", "fwd+bwd", lambda m=make: (labels("auto", streamed=None), m()),
                       flops)
        yield Workload("lm_head_loss", case, "tokamax (streamed=False)", "fwd+bwd",
                       lambda m=make: (labels("auto", streamed=False), m()), flops)
        for c in CHUNKS:  # float32, the pair, its low half in int8
            for pair, scaled in ((False, False), (True, False), (True, True)):
                impl = f"tokamax (chunks of {c}, streamed{', pair accumulator' if pair else ''}" \
                       f"{', int8 low' if scaled else ''})"
                yield Workload("lm_head_loss", case, impl, "fwd+bwd", lambda m=make, c=c, p=pair, q=scaled: (
                    labels(c, pair=p, scaled=q), m()), flops)
        for c in COMPACT_CHUNKS:  # the pairs, with the logits stored compact
            for scaled in (False, True):
                if c * h.hidden > 2048 * 2560:  # no vocabulary block fits beside the chunk in the v5e's VMEM
                    continue
                impl = f"tokamax (chunks of {c}, streamed, compact, pair accumulator{', int8 low' if scaled else ''})"
                yield Workload("lm_head_loss", case, impl, "fwd+bwd", lambda m=make, c=c, q=scaled: (
                    labels(c, pair=True, scaled=q, compact=True), m()), flops)
        yield Workload("lm_head_loss", case, "xla", "fwd+bwd", lambda m=make: (with_grads(xla_loss, (0, 1)), m()),
                       flops)
    for h in UNLISTED:
        case = f"{h.model} head: {h.rows} rows, hidden {h.hidden}, vocabulary {h.vocab}"

        def make(h=h) -> tuple:  # noqa: ANN001
            return _head_args(h.rows, h.hidden, h.vocab)
        flops = 6 * h.rows * h.hidden * h.vocab
        for impl, streamed in (("tokamax", None), ("tokamax (streamed=False)", False)):
            yield Workload("lm_head_loss", case, impl, "fwd+bwd",
                           lambda m=make, s=streamed: (labels("auto", streamed=s), m()), flops)
        yield Workload("lm_head_loss", case, "tokamax (chunks of 1024, streamed, compact, pair accumulator)", "fwd+bwd",
                       lambda m=make: (labels(1024, pair=True, scaled=False, compact=True), m()), flops)
        yield Workload("lm_head_loss", case, "xla", "fwd+bwd", lambda m=make: (with_grads(xla_loss, (0, 1)), m()),
                       flops)
