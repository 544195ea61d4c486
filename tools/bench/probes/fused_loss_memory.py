"""Probe (Torch tier): peak activation bytes of a causal-LM loss step (the loss from the last hidden
states, then its gradients into the hidden states and the LM head's weight), with transformers'
`ForCausalLMLoss` on the logits and with tokamax's fused loss, counted from the traced graph.

    python fused_loss_memory.py VARIANT_DIR
At a Llama-3-8B-sized head (hidden 4096, vocabulary 128256, bf16) and 8 x 4096 tokens. Each step is
traced with make_fx on meta tensors (shapes only: no TPU, no memory; the fused loss runs its ops'
fake kernels). The count walks the graph in order: each tensor a node makes is live from that node
to its last use, views (reshape, transpose, slice, expand, ...) share their base's bytes; the peak is
the largest sum of live intermediates (the inputs, hidden states, weight and labels, not counted).
Prints JSON.
"""

import importlib
import json
import os
import sys

import torch
from torch.fx.experimental.proxy_tensor import make_fx

HIDDEN, VOCAB, BATCH, LENGTH, DTYPE = 4096, 128256, 8, 4096, torch.bfloat16
_VIEWS = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "slice", "select", "alias", "unsqueeze",
          "squeeze", "reshape", "as_strided", "detach", "_reshape_alias", "unflatten"}


def _bytes(value) -> int:  # noqa: ANN001
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0


def peak_bytes(graph: torch.fx.GraphModule) -> dict:
    """Peak live bytes of the intermediates, and the largest one."""
    nodes = list(graph.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    root = {}
    for n in nodes:
        op = getattr(n.target, "__name__", str(n.target)).split(".")[0]
        tensor_args = [a for a in n.args if isinstance(a, torch.fx.Node)]
        root[n] = root[tensor_args[0]] if op in _VIEWS and tensor_args else n
    last_use = {}
    for n in nodes:
        for user in n.users:
            r = root[n]
            last_use[r] = max(last_use.get(r, 0), order[user])
    live, peak, largest = 0, 0, (0, None)
    frees: dict[int, int] = {}
    for i, n in enumerate(nodes):
        if n.op not in ("placeholder", "output") and root[n] is n:
            size = _bytes(n.meta.get("val"))
            live += size
            frees[last_use.get(n, i)] = frees.get(last_use.get(n, i), 0) + size
            if size > largest[0]:
                largest = (size, list(n.meta["val"].shape))
        peak = max(peak, live)
        live -= frees.pop(i, 0)
    return {"peak_bytes": peak, "largest_bytes": largest[0], "largest_shape": largest[1]}


def main() -> int:
    os.environ["LOCAL_KERNELS"] = f"kernels-community/tokamax={sys.argv[1]}"
    import kernels
    from transformers.loss.loss_utils import ForCausalLMLoss

    tokamax = kernels.get_kernel("kernels-community/tokamax", version=1)
    from_kernel = importlib.import_module(f"{tokamax.__name__}.integrations.transformers").causal_lm_loss

    def transformers_step(hidden, weight, labels):  # noqa: ANN001, ANN202
        loss = ForCausalLMLoss(torch.nn.functional.linear(hidden, weight), labels, VOCAB)
        return loss, torch.autograd.grad(loss, (hidden, weight))

    def fused_step(hidden, weight, labels):  # noqa: ANN001, ANN202
        loss = from_kernel(hidden, weight, labels)
        return loss, torch.autograd.grad(loss, (hidden, weight))

    hidden = torch.empty(BATCH, LENGTH, HIDDEN, dtype=DTYPE, device="meta", requires_grad=True)
    weight = torch.empty(VOCAB, HIDDEN, dtype=DTYPE, device="meta", requires_grad=True)
    labels = torch.zeros(BATCH, LENGTH, dtype=torch.int64, device="meta")
    out = {"hidden": HIDDEN, "vocab": VOCAB, "tokens": BATCH * LENGTH, "dtype": str(DTYPE).removeprefix("torch."),
           "weight_bytes": _bytes(weight)}
    for name, step in (("transformers", transformers_step), ("tokamax", fused_step)):
        out[name] = peak_bytes(make_fx(step)(hidden, weight, labels))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
