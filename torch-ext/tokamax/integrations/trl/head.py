"""TRL's fused LM head (`trl.kernels.ChunkedLogProbFunction.apply`) on the kernel: the same nine
arguments and five outputs, computed by `torch_ops.lm_head_statistics` instead of TRL's Python loop
of torch tiles.

Per token, of z = transform(hidden @ weight.T + bias) (TRL's order: times `logit_scale`, then the
soft cap, then / temperature): `log_probs` z[target] - lse and `entropy` lse - E_p[z], both with
gradients; `log_sum_sq_probs` log sum p^2, `mean_logits` sum z / vocab and `is_top1` (the target is
the first maximum), without (as TRL marks them). An output not in `outputs` is None, `log_probs` is
always given. TRL's tile size (`chunk_size`) means nothing here: the kernels tile themselves.

As TRL, the tiles are computed in the autocast dtype where autocast is on, else in the hidden
states' dtype (the weight cast to it if it differs); unlike TRL the logits are not rounded to that
dtype before the float32 statistics (the kernels keep them in float32 accumulators). The rows are
padded to `tokamax.splash.bucket` sizes (zero rows, target 0, dropped after), so that torch-tpu
exports one program per bucket, not one per batch shape.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ... import splash, torch_ops

OUTPUTS = ("entropy", "log_sum_sq_probs", "mean_logits", "is_top1")
DTYPES = (torch.bfloat16, torch.float32)


def compute_dtype(hidden: torch.Tensor) -> torch.dtype:
    """The dtype TRL computes its tiles in: autocast's where it is on, else the hidden states'."""
    device = hidden.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype


def unsupported(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> str | None:
    """Why the kernel cannot serve this call (then TRL's own function runs), or None."""
    if hidden.device.type not in ("tpu", "cpu", "meta"):
        return f"the tensors are on {hidden.device.type}, where TRL has its own Triton kernel"
    dtype = compute_dtype(hidden)
    if dtype not in DTYPES:
        return f"it computes in {dtype}; the kernel takes bfloat16 and float32"
    if weight.device != hidden.device or (bias is not None and bias.device != hidden.device):
        return "the weight is on another device than the hidden states"
    return None


def chunked_log_probs(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
                      temperature: float, chunk_size: int, final_logit_softcapping: float | None = None,
                      logit_scale: float = 1.0, outputs: tuple[str, ...] = OUTPUTS) -> tuple:
    """`ChunkedLogProbFunction.apply`'s contract: hidden [N, H], weight [V, H], bias [V] or None,
    targets int [N] in [0, V) -> (log_probs, entropy, log_sum_sq_probs, mean_logits, is_top1), [N] each."""
    dtype = compute_dtype(hidden)
    rows = hidden.shape[0]
    padded = splash.bucket(rows) if rows else 0
    x = F.pad(hidden.to(dtype), (0, 0, 0, padded - rows))
    t = F.pad(targets.to(torch.int32), (0, padded - rows))
    # TRL reads a soft cap of 0 as a cap of 1 (`softcap or 1.0` beside `HAS_SOFTCAP = softcap is not None`)
    cap = None if final_logit_softcapping is None else (final_logit_softcapping or 1.0)
    with torch.autocast(hidden.device.type, enabled=False):
        stats = torch_ops.lm_head_statistics(x, weight.to(dtype), bias, t, logit_scale=logit_scale, soft_cap=cap,
                                             temperature=temperature)
    stats = type(stats)(*(s[:rows] for s in stats))
    wanted = set(outputs)
    return (stats.log_probs,
            stats.entropy if "entropy" in wanted else None,
            stats.log_sum_sq_probs if "log_sum_sq_probs" in wanted else None,
            (stats.sum_logits / weight.shape[0]).detach() if "mean_logits" in wanted else None,
            stats.top1.bool() if "is_top1" in wanted else None)
