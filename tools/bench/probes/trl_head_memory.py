"""Probe (Torch tier): one training step's LM head as TRL 1.16's SFT trainer runs it (per-token
log-probabilities, entropy and top-1 of hidden @ weight.T; the loss the mean negative log-probability,
its gradients into the hidden states and the weight), with TRL's own `ChunkedLogProbFunction` on a
device without Triton (its Python loop of torch tiles, as on a TPU) and with this kernel's
(`integrations.trl.head`, the LM-head kernels): the peak activation bytes and the ops dispatched.

    python trl_head_memory.py VARIANT_DIR
At hidden 4096, Qwen's vocabulary of 151,936, 16,384 tokens, bf16. Each step is traced with make_fx on
fake tensors (shapes only; the kernel's side runs its ops' fake kernels); peak bytes counted as in
`fused_loss_memory.py`, ops as the traced graph's calls (aten ops, or this kernel's custom ops). Prints JSON.
"""

import importlib
import json
import os
import sys
from collections import Counter

import torch
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, os.path.dirname(__file__))
from fused_loss_memory import _bytes, peak_bytes  # noqa: E402

HIDDEN, VOCAB, TOKENS, DTYPE = 4096, 151936, 16384, torch.bfloat16
OUTPUTS = ("log_probs", "entropy", "is_top1")  # what SFTTrainer asks for


def _name(target: object) -> str:
    """aten.mm.default -> "mm"; this kernel's ops by their own name; Python's getitem as is."""
    parts = str(target).split(".")
    return parts[1] if len(parts) > 1 else getattr(target, "__name__", parts[0])


def _ops(graph: torch.fx.GraphModule) -> dict:
    """Calls in the traced step (getitem, which only unpacks an op's tuple, not counted)."""
    calls = Counter(_name(n.target) for n in graph.graph.nodes if n.op == "call_function")
    calls.pop("getitem", None)
    return {"ops": sum(calls.values()), "most": dict(calls.most_common(4))}


def main() -> int:
    os.environ["LOCAL_KERNELS"] = f"kernels-community/tokamax={sys.argv[1]}"
    import kernels
    from trl.kernels import ChunkedLogProbFunction

    tokamax = kernels.get_kernel("kernels-community/tokamax", version=1)
    head = importlib.import_module(f"{tokamax.__name__}.integrations.trl.head")

    def step(fn):  # noqa: ANN001, ANN202
        def run(hidden, weight, targets):  # noqa: ANN001, ANN202
            log_probs, entropy, _, _, top1 = fn(hidden, weight, None, targets, 1.0, 32768, None, 1.0, OUTPUTS)
            loss = -log_probs.mean()
            return loss, entropy.detach(), top1, torch.autograd.grad(loss, (hidden, weight))
        return run

    # CPU tensors traced as fake ones (TRL reads the device's autocast state, which meta tensors lack): the
    # inputs are allocated once, nothing else is
    hidden = torch.empty(TOKENS, HIDDEN, dtype=DTYPE, requires_grad=True)
    weight = torch.empty(VOCAB, HIDDEN, dtype=DTYPE, requires_grad=True)
    targets = torch.zeros(TOKENS, dtype=torch.int64)
    out = {"hidden": HIDDEN, "vocab": VOCAB, "tokens": TOKENS, "dtype": "bfloat16", "weight_bytes": _bytes(weight),
           "logits_bytes_bf16": TOKENS * VOCAB * 2}
    for name, fn in (("trl", ChunkedLogProbFunction.apply), ("tokamax", head.chunked_log_probs)):
        graph = make_fx(step(fn), tracing_mode="fake")(hidden, weight, targets)
        out[name] = {**peak_bytes(graph), **_ops(graph)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
