"""The labels path at Gemma 3's head beside heads that differ from it in one size: its vocabulary (262,208, which no
block of 128 divides) against 262,144 (2^18), its hidden size (2,560) against 4,096, and dW added by
`lm_head.accumulate`'s kernel into the pair in chunks of 1,024 to 2,048, each beside XLA's plain loss: what tells where
the chunked scheme's time goes past XLA's at that head (XLA adding into the pair, once beside them, is retired:
`lm_head.fused`'s docstring). Run when named only."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

from ..models import Head
from . import Workload, with_grads
from .lm_head import _head_args, xla_loss

HEADS = (Head("Gemma 3 4B", 8192, 2560, 262208), Head("Gemma 3 4B, vocabulary 2^18", 8192, 2560, 262144),
         Head("Gemma 3 4B, hidden 4096", 8192, 4096, 262208))
VARIANTS = {  # impl -> (chunk, pair, kernel, int8 low)
    "tokamax (chunks of 1024, pair accumulator, accumulator kernel)": (1024, True, True, False),
    "tokamax (chunks of 1536, pair accumulator, int8 low, accumulator kernel)": (1536, True, True, True),
    "tokamax (chunks of 2048, pair accumulator, int8 low, accumulator kernel)": (2048, True, True, True),
}


def workloads(tk: ModuleType) -> Iterator[Workload]:
    import jax.numpy as jnp

    lm_head = tk.lm_head

    def labels(chunk: int, pair: bool, kernel: bool, scaled: bool):  # noqa: ANN202
        def fn(x, w, t):  # noqa: ANN001, ANN202
            weights = jnp.full(t.shape, 1.0 / t.shape[0], jnp.float32)
            return lm_head.fused.loss_and_grads(x, w, None, t, weights, lm_head.IDENTITY, chunk=chunk,
                                                pair_accumulator=pair, accumulator_kernel=kernel,
                                                scaled_low=scaled)[:3]
        return fn

    for h in HEADS:
        case = f"{h.model} head: {h.rows} rows, hidden {h.hidden}, vocabulary {h.vocab}"
        flops = 6 * h.rows * h.hidden * h.vocab

        def make(h=h) -> tuple:  # noqa: ANN001
            return _head_args(h.rows, h.hidden, h.vocab)
        variants = VARIANTS if h.vocab == 262208 and h.hidden == 2560 else dict(list(VARIANTS.items())[:1])
        for impl, (chunk, pair, kernel, scaled) in variants.items():
            yield Workload("lm_head_loss", case, impl, "fwd+bwd",
                           lambda m=make, a=(chunk, pair, kernel, scaled): (labels(*a), m()), flops)
        yield Workload("lm_head_loss", case, "xla", "fwd+bwd", lambda m=make: (with_grads(xla_loss, (0, 1)), m()),
                       flops)
