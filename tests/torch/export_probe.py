"""Counts this build's custom-op calls and the exports torch-tpu would make for them.

torch-tpu's `jax_op` exports, lowers and registers a kernel once per distinct invocation key
(`_get_kernel_invocation_key`: the op, each tensor's shape and dtype, each static argument's
value) and reuses it for every later call with that key. `ExportProbe`, a TorchDispatchMode, sees
every call of the kernel's custom ops (forward, and backward ops during `backward()`) and computes
that key with torch-tpu's own function and the op's own static arguments, so the number of distinct
keys is the number of exports a TPU host would make.
"""

from __future__ import annotations

import collections

from torch._library.custom_ops import OPDEFS
from torch.utils._python_dispatch import TorchDispatchMode
from torch_tpu._internal.pallas import pallas


class ExportProbe(TorchDispatchMode):
    """Within the block, `calls` lists (op name, torch-tpu invocation key) of the custom ops in
    `namespace` (this build's `_ops._OPS_NAME`)."""

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace
        self.calls: list[tuple[str, str]] = []
        self.query_shapes: list[tuple[str, tuple[int, ...]]] = []  # (op, its first tensor's shape)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func.namespace == self.namespace:
            jax_callable = OPDEFS[func.name()]._init_fn
            norm_args, norm_kwargs = jax_callable._normalize_invocation_args(args, kwargs)
            key = pallas._get_kernel_invocation_key(jax_callable.trace_key, norm_args, norm_kwargs,
                                                    jax_callable.static_argnums)
            self.calls.append((func.name().split("::")[1], key))
            self.query_shapes.append((self.calls[-1][0], tuple(args[0].shape)))
        return func(*args, **kwargs)

    def attention_calls(self) -> int:
        """Calls of the attention ops (fixed offset, run-time offset, a transformers cache step)."""
        return sum(self.count(op) for op in ("splash_attention", "splash_attention_at", "splash_attention_cache"))

    def count(self, op: str) -> int:
        """How many times `op` ran."""
        return sum(name == op for name, _ in self.calls)

    def exports(self) -> dict[str, int]:
        """Distinct invocation keys per op: the exports torch-tpu would make."""
        keys: dict[str, set[str]] = collections.defaultdict(set)
        for name, key in self.calls:
            keys[name].add(key)
        return {name: len(k) for name, k in sorted(keys.items())}
