"""`distillation_divergence`, what users call: TRL's `ChunkedDivergenceFunction` contract on Torch
tensors (argument checks, each model's logit map from its numbers). `check` and `check_fits` say what the op
refuses without running it (TRL's fallback asks them: `integrations.trl.divergence.unsupported`)."""

from __future__ import annotations

import torch

from ... import distill
from .. import _checks
from .._bridge import chip_for_tracing
from .custom_ops import OP, distill_divergence_op
from .recompute_ops import distill_divergence_recompute_op, divergence_scheme
from .stored_ops import distill_divergence_stored_op


def _renamed(e: Exception) -> Exception:
    return type(e)(str(e).replace("tokamax distill", f"tokamax {OP}"))


def check(student_hidden: torch.Tensor, student_weight: torch.Tensor, student_bias: torch.Tensor | None,
          teacher_hidden: torch.Tensor, teacher_weight: torch.Tensor, teacher_bias: torch.Tensor | None, *,
          beta: float, temperature: float = 1.0, student_logit_scale: float = 1.0,
          student_soft_cap: float | None = None, teacher_logit_scale: float = 1.0,
          teacher_soft_cap: float | None = None) -> distill.Setting:
    """Raises the TypeError or ValueError (naming the op and the argument) that `distillation_divergence` raises
    for these arguments before it runs; else the kernels' setting. Reads only the tensors' shapes, dtypes and
    devices."""
    tensors = dict(student_hidden=student_hidden, student_weight=student_weight, student_bias=student_bias,
                   teacher_hidden=teacher_hidden, teacher_weight=teacher_weight, teacher_bias=teacher_bias)
    _checks.tensors(OP, ("student_bias", "teacher_bias"), **tensors)
    for name in ("student_bias", "teacher_bias"):
        if tensors[name] is not None and not tensors[name].is_floating_point():
            raise TypeError(f"tokamax {OP}: {name} must be a floating-point tensor, got {tensors[name].dtype}")
    try:
        setting = distill.setting(beta, temperature, student_logit_scale, student_soft_cap, teacher_logit_scale,
                                  teacher_soft_cap)
        distill.check(student_hidden, student_weight, student_bias, teacher_hidden, teacher_weight, teacher_bias)
    except (TypeError, ValueError) as e:
        raise _renamed(e) from None
    return setting


@chip_for_tracing()
def _fits(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, vocab: int) -> None:
    distill.check_vmem(student_hidden, teacher_hidden, vocab)


def check_fits(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, vocab: int) -> None:
    """Raises the ValueError (naming the op) that tracing the op raises where both models' hidden sizes fit no
    blocks in the VMEM of the chip it is traced for (`tokamax.distill.check_vmem`); checked operands only
    (`check`). Host code: not for a compiled graph."""
    try:
        _fits(student_hidden, teacher_hidden, vocab)
    except ValueError as e:
        raise _renamed(e) from None


def distillation_divergence(student_hidden: torch.Tensor, student_weight: torch.Tensor,
                            student_bias: torch.Tensor | None, teacher_hidden: torch.Tensor,
                            teacher_weight: torch.Tensor, teacher_bias: torch.Tensor | None, *, beta: float,
                            temperature: float = 1.0, student_logit_scale: float = 1.0,
                            student_soft_cap: float | None = None, teacher_logit_scale: float = 1.0,
                            teacher_soft_cap: float | None = None, chunk: int | None = None,
                            scheme: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """Per token (divergence, the student's entropy), float32 [rows] each, from both models' hidden states
    and heads without forming either model's logits (`tokamax.distill`: beta 0 KL(teacher || student),
    1 KL(student || teacher), between the generalized JSD with mixture (1 - beta) p_s + beta p_t).
    Differentiable in the student's hidden states, weight and bias; the entropy and the teacher pass no
    gradient. Each model's hidden states and weight share a dtype (bf16 or f32; the two models may
    differ), the hidden sizes may differ, the vocabulary and rows may not. `scheme`: as the JAX call's
    (`tokamax.distill.SCHEMES`): "auto" (the default) runs `distill.scheme_of`'s choice on the chip (the stored
    scheme where its [rows, vocab] residual fits its share of HBM, else the recompute scheme where its roofline is
    under the kernels', else our kernels; in a graph torch.compile traces, and for symbolic sizes, the kernels);
    "stored", "recompute" and "kernels" name one. `chunk`: the stored scheme's chunk rows (0: the kernels), with
    "auto" or "stored" only."""
    tensors = (student_hidden, student_weight, student_bias, teacher_hidden, teacher_weight, teacher_bias)
    setting = check(*tensors, beta=beta, temperature=temperature, student_logit_scale=student_logit_scale,
                    student_soft_cap=student_soft_cap, teacher_logit_scale=teacher_logit_scale,
                    teacher_soft_cap=teacher_soft_cap)
    if not isinstance(scheme, str) or scheme not in distill.SCHEMES:
        raise ValueError(f"tokamax {OP}: scheme must be one of {distill.SCHEMES}, got {scheme!r}")
    if chunk is not None:
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
            raise ValueError(f"tokamax {OP}: chunk must be an int >= 0 (0: the kernels) or None, got {chunk!r}")
        if scheme not in ("auto", "stored") or (scheme == "stored" and chunk == 0):
            raise ValueError(f"tokamax {OP}: chunk ({chunk}) is the stored scheme's rows per chunk; scheme "
                             f"{scheme!r} takes none")
        chosen = distill.Chosen("stored", chunk) if chunk else distill.Chosen("kernels")
    elif scheme == "auto" and torch.compiler.is_compiling():  # torch.compile traces no host choice: the kernels
        chosen = distill.Chosen("kernels")
    else:
        chosen = divergence_scheme(student_hidden, teacher_hidden, student_weight.shape[0], setting, scheme)
    s, t = setting.student, setting.teacher
    args = (*(None if v is None else v.contiguous() for v in tensors), setting.beta, s.pre, s.tanh, s.post, t.pre,
            t.tanh, t.post)
    if chosen.scheme == "recompute":
        out = distill_divergence_recompute_op(*args, chosen.chunk, chosen.vchunk)
    elif chosen.scheme == "stored":
        out = distill_divergence_stored_op(*args, chosen.chunk)
    else:
        out = distill_divergence_op(*args)
    return out[0], out[1]
