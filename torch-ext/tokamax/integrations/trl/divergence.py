"""TRL's `ChunkedDivergenceFunction.apply` (trl 1.16, `trl/kernels/chunked_divergence.py`) on the kernel:
the same twelve arguments and two outputs, computed by `torch_ops.distillation_divergence` instead of
TRL's Python loop of torch tiles (4096 tokens x 32768 vocabulary, recomputed in the backward).

Per token: the divergence (beta 0 KL(teacher || student), 1 KL(student || teacher), between the
generalized JSD with mixture (1 - beta) p_s + beta p_t), with its gradient to the student's hidden
states, weight and bias, and the student's entropy, without (as TRL marks it). As TRL, each model
computes in the autocast dtype where autocast is on, else in its hidden states' dtype (its weight cast
to it); unlike TRL the logits are never rounded to that dtype (the kernels keep them in float32). The
rows are padded to `tokamax.splash.bucket` sizes (zero rows, dropped after), so that torch-tpu exports
one program per bucket, not one per completion length.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ... import splash, torch_ops
from ...torch_ops.distill import api
from .head import DTYPES, compute_dtype


def _as_passed(tensor: torch.Tensor | None, dtype: torch.dtype | None = None) -> torch.Tensor | None:
    """A meta stand-in for `tensor` as `chunked_divergence` passes it to the op (in `dtype`): what the op's checks
    read (shape, dtype; the devices are checked before), without copying a weight to check it."""
    if tensor is None:
        return None
    return torch.empty(tensor.shape, dtype=dtype or tensor.dtype, device="meta")


def unsupported(student_hidden: torch.Tensor, student_weight: torch.Tensor, student_bias: torch.Tensor | None,
                teacher_hidden: torch.Tensor, teacher_weight: torch.Tensor, teacher_bias: torch.Tensor | None,
                beta: float, temperature: float = 1.0, student_logit_scale: float = 1.0,
                student_final_logit_softcapping: float | None = None, teacher_logit_scale: float = 1.0,
                teacher_final_logit_softcapping: float | None = None) -> str | None:
    """Why the kernel cannot serve this call of `ChunkedDivergenceFunction.apply`'s arguments (then TRL's own
    function runs), or None: the device and compute dtypes, then whatever the op itself refuses for the call
    `chunked_divergence` would make (its argument checks and VMEM fit, `torch_ops.distill.api`)."""
    device = student_hidden.device
    if device.type not in ("tpu", "cpu", "meta"):
        return f"the tensors are on {device.type}, where TRL has its own Triton kernel"
    s_dtype, t_dtype = compute_dtype(student_hidden), compute_dtype(teacher_hidden)
    for model, dtype in (("student", s_dtype), ("teacher", t_dtype)):
        if dtype not in DTYPES:
            return f"the {model} computes in {dtype}; the kernel takes bfloat16 and float32"
    tensors = (student_weight, student_bias, teacher_hidden, teacher_weight, teacher_bias)
    if any(t is not None and t.device != device for t in tensors):
        return "the student's and the teacher's tensors are not all on one device"
    xs, xt = _as_passed(student_hidden, s_dtype), _as_passed(teacher_hidden, t_dtype)
    try:
        api.check(xs, _as_passed(student_weight, s_dtype), _as_passed(student_bias), xt,
                  _as_passed(teacher_weight, t_dtype), _as_passed(teacher_bias), beta=beta, temperature=temperature,
                  student_logit_scale=student_logit_scale, student_soft_cap=_cap(student_final_logit_softcapping),
                  teacher_logit_scale=teacher_logit_scale, teacher_soft_cap=_cap(teacher_final_logit_softcapping))
        api.check_fits(xs, xt, student_weight.shape[0])
    except (TypeError, ValueError) as e:
        return f"the kernel refuses the call ({e})"
    return None


def _cap(softcap: float | None) -> float | None:
    # TRL reads a soft cap of 0 as a cap of 1 (`softcap or 1.0` beside `HAS_SOFTCAP = softcap is not None`)
    return None if softcap is None else (softcap or 1.0)


def chunked_divergence(student_hidden: torch.Tensor, student_weight: torch.Tensor, student_bias: torch.Tensor | None,
                       teacher_hidden: torch.Tensor, teacher_weight: torch.Tensor, teacher_bias: torch.Tensor | None,
                       beta: float, temperature: float = 1.0, student_logit_scale: float = 1.0,
                       student_final_logit_softcapping: float | None = None, teacher_logit_scale: float = 1.0,
                       teacher_final_logit_softcapping: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`ChunkedDivergenceFunction.apply`'s contract: [N, H_s] and [N, H_t] hidden states, [V, H_s] and
    [V, H_t] weights, biases [V] or None -> (divergence, entropy), float32 [N] each."""
    rows = student_hidden.shape[0]
    padded = splash.bucket(rows) if rows else 0
    s_dtype, t_dtype = compute_dtype(student_hidden), compute_dtype(teacher_hidden)

    def rows_padded(hidden: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return F.pad(hidden.to(dtype), (0, 0, 0, padded - rows))

    with torch.autocast(student_hidden.device.type, enabled=False):
        divergence, entropy = torch_ops.distillation_divergence(
            rows_padded(student_hidden, s_dtype), student_weight.to(s_dtype), student_bias,
            rows_padded(teacher_hidden, t_dtype), teacher_weight.to(t_dtype), teacher_bias, beta=beta,
            temperature=temperature, student_logit_scale=student_logit_scale,
            student_soft_cap=_cap(student_final_logit_softcapping), teacher_logit_scale=teacher_logit_scale,
            teacher_soft_cap=_cap(teacher_final_logit_softcapping))
    return divergence[:rows], entropy[:rows]
