"""Probe (Torch tier): one DistillationTrainer loss step's divergence as TRL 1.16 runs it (per-token
generalized JSD and the student's entropy from both models' hidden states and heads; the loss the mean
divergence, its gradients into the student's hidden states and head), with TRL's own
`ChunkedDivergenceFunction` on a device without Triton (its Python loop of torch tiles of both models,
as on a TPU) and with this kernel's (`integrations.trl.divergence`, the distillation kernels): the peak
activation bytes and the ops dispatched.

    python distill_memory.py VARIANT_DIR

At the issue's size: student hidden 2048, teacher hidden 4096, Qwen's vocabulary of 151,936, 16,384
tokens, bf16, beta 0.5 at temperature 1. Traced with make_fx on fake tensors (shapes only; the kernel's
side runs its ops' fake kernels); peak bytes counted as in `fused_loss_memory.py`, ops as the traced
graph's calls (aten ops, or this kernel's custom ops). Prints JSON.
"""

import importlib
import json
import os
import sys

import torch
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, os.path.dirname(__file__))
from fused_loss_memory import _bytes, peak_bytes  # noqa: E402
from trl_head_memory import _ops  # noqa: E402

STUDENT, TEACHER, VOCAB, TOKENS, DTYPE, BETA = 2048, 4096, 151936, 16384, torch.bfloat16, 0.5


def main() -> int:
    os.environ["LOCAL_KERNELS"] = f"kernels-community/tokamax={sys.argv[1]}"
    import kernels
    from trl.kernels.chunked_divergence import ChunkedDivergenceFunction

    tokamax = kernels.get_kernel("kernels-community/tokamax", version=1)
    divergence = importlib.import_module(f"{tokamax.__name__}.integrations.trl.divergence")

    def step(fn):  # noqa: ANN001, ANN202
        def run(hs, ws, ht, wt):  # noqa: ANN001, ANN202
            div, entropy = fn(hs, ws, None, ht, wt, None, BETA, 1.0, 1.0, None, 1.0, None)
            loss = div.mean()
            return loss, entropy.detach(), torch.autograd.grad(loss, (hs, ws))
        return run

    # CPU tensors traced as fake ones (TRL reads the device's autocast state, which meta tensors lack)
    hs = torch.empty(TOKENS, STUDENT, dtype=DTYPE, requires_grad=True)
    ws = torch.empty(VOCAB, STUDENT, dtype=DTYPE, requires_grad=True)
    ht, wt = torch.empty(TOKENS, TEACHER, dtype=DTYPE), torch.empty(VOCAB, TEACHER, dtype=DTYPE)
    out = {"student_hidden": STUDENT, "teacher_hidden": TEACHER, "vocab": VOCAB, "tokens": TOKENS,
           "dtype": "bfloat16", "beta": BETA, "weights_bytes": _bytes(ws) + _bytes(wt),
           "logits_bytes_bf16": 2 * TOKENS * VOCAB * 2}
    for name, fn in (("trl", ChunkedDivergenceFunction.apply), ("tokamax", divergence.chunked_divergence)):
        graph = make_fx(step(fn), tracing_mode="fake")(hs, ws, ht, wt)
        out[name] = {**peak_bytes(graph), **_ops(graph)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
