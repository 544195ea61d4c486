"""The calls a model makes to each op family the package speeds up, at a number of tokens (one sequence of them):
pure functions of `models.Model`'s fields, no JAX. Each call names its case by its shape alone (no model), so that
models whose calls coincide (Llama 3.1 8B's and Qwen3 8B's attention) share one measurement (`plan` joins them).

- splash: one sequence (batch 1) of the shard's heads and KV heads, causal, for the global layers and, where the
  config windows some layers and the window is shorter than the tokens, for the windowed ones (a window as long as
  the sequence is the causal call); the model's attention soft cap and sinks.
- grouped matmul: the experts' two projections as transformers 5 stores them (the fused gate-up, hidden -> 2 x
  expert intermediate, and the down projection back), tokens x top-k routed rows over the shard's experts, spread
  as an uneven router spreads them (`ROUTING_SKEW`, tools.chip.models' log-normal load).
- the LM head's labels path and TRL's statistics: tokens rows, hidden -> vocabulary, the model's logit transform
  (Gemma 2's final soft cap, Granite's 1 / logits_scaling).
- distillation (`PAIRS`, a student and a teacher of one family): per token, the generalized JSD at GKD's default
  beta 0.5; the loss (TRL's DistillationTrainer's weighted sum) at the forward KL (beta 0), as the benchmark's.

Token counts: `TRAINING` (4k to 32k: one sequence a step) and `PREFILL` (128 to 1,024: a prompt), every family at
each; a call whose operands or the package's own temporaries would not fit the chip is left to `plan`, which skips
it with the reason (none does at these counts: the largest, gpt-oss-120b's gate-up at 32k tokens, needs ~13 GiB).
"""

from __future__ import annotations

from typing import NamedTuple

from ..models import ROUTING_SKEW
from .models import BY_NAME, Model, shard

TRAINING = (4096, 8192, 16384, 32768)
PREFILL = (128, 256, 512, 1024)
TOKENS = PREFILL + TRAINING
PASSES = ("fwd", "fwd+bwd")

PAIRS = (  # (student, teacher): one tokenizer; the vocabulary is the student's (a larger one only pads it)
    ("Qwen2.5 0.5B", "Qwen2.5 7B"),  # 151,936 of the teacher's 152,064 rows hold the same tokens
    ("Qwen3 0.6B", "Qwen3 8B"),
    ("Qwen3 1.7B", "Qwen3 8B"),
    ("Llama 3.2 1B", "Llama 3.1 8B"),
    ("Gemma 2 2B", "Gemma 2 9B"),  # both soft-capped at 30
    ("Gemma 3 1B", "Gemma 3 4B"),  # 262,144 of the teacher's 262,208 rows
    ("SmolLM2 135M", "SmolLM2 1.7B"),
    ("Granite 3.1 2B", "Granite 3.1 8B"),  # logits / 8 and / 16
)
JSD_BETA = 0.5
LOSS_BETA = 0.0


def _transform(scale: float, cap: float | None) -> str:
    parts = ([f"logits x {scale:g}"] if scale != 1.0 else []) + ([f"soft cap {cap:g}"] if cap else [])
    return ", ".join(parts) or "plain logits"


class Attention(NamedTuple):
    heads: int
    kv_heads: int
    head_dim: int  # q's and k's
    v_head_dim: int
    tokens: int
    window: int | None
    soft_cap: float | None
    sinks: bool
    q_scale: float  # q is scaled before the kernels (they take logits as q k^T): 1 / sqrt(head dim or Gemma's scalar)

    op = "attention"
    family = "splash"
    passes = PASSES

    @property
    def case(self) -> str:
        dims = f"{self.head_dim}" if self.v_head_dim == self.head_dim else f"{self.head_dim} (v {self.v_head_dim})"
        extra = "".join([f", window {self.window}" if self.window else "",
                         f", soft cap {self.soft_cap:g}" if self.soft_cap else "", ", sinks" if self.sinks else ""])
        return f"{self.heads}/{self.kv_heads} heads of {dims}, {self.tokens} tokens, causal{extra}"

    @property
    def pairs(self) -> float:
        """(query, key) pairs attended: causal, within the window where there is one."""
        t, w = self.tokens, self.window
        return t * (t + 1) / 2 if w is None else t * w - w * (w - 1) / 2

    def flops(self, pass_: str) -> float:
        fwd = 2 * self.heads * self.pairs * (self.head_dim + self.v_head_dim)
        return fwd if pass_ == "fwd" else 3 * fwd


class Experts(NamedTuple):
    projection: str  # "gate-up" or "down"
    tokens: int
    top_k: int
    hidden: int  # the contraction: the model's hidden size (gate-up) or the expert intermediate (down)
    out: int
    experts: int
    skew: float

    op = "grouped_matmul"
    family = "grouped matmul"
    passes = PASSES

    @property
    def rows(self) -> int:
        return self.tokens * self.top_k

    @property
    def case(self) -> str:
        return (f"{self.projection}: {self.tokens} tokens x top-{self.top_k} = {self.rows} rows, {self.hidden} -> "
                f"{self.out}, {self.experts} experts, routing skew {self.skew:g}")

    def flops(self, pass_: str) -> float:
        fwd = 2 * self.rows * self.hidden * self.out
        return fwd if pass_ == "fwd" else 3 * fwd


class Head(NamedTuple):
    op: str  # "lm_head_loss" (the labels path) or "lm_head_statistics" (TRL's)
    tokens: int
    hidden: int
    vocab: int
    scale: float  # the raw logits times it (Granite: 1 / logits_scaling)
    soft_cap: float | None  # Gemma 2's final_logit_softcapping
    tied: bool  # the head is the embedding (the same op; its gradient adds to the embedding's)

    passes = PASSES

    @property
    def family(self) -> str:
        return "LM head labels" if self.op == "lm_head_loss" else "TRL statistics"

    @property
    def rows(self) -> int:
        return self.tokens

    @property
    def case(self) -> str:
        transform = _transform(self.scale, self.soft_cap)
        return f"{self.tokens} tokens, hidden {self.hidden}, vocabulary {self.vocab}, {transform}"

    def flops(self, pass_: str) -> float:
        fwd = 2 * self.tokens * self.hidden * self.vocab
        return fwd if pass_ == "fwd" else 3 * fwd


class Distill(NamedTuple):
    op: str  # "distillation" (per token) or "distillation_loss"
    tokens: int
    student_hidden: int
    teacher_hidden: int
    vocab: int
    student_scale: float
    student_cap: float | None
    teacher_scale: float
    teacher_cap: float | None
    beta: float

    @property
    def family(self) -> str:
        return "distillation per-token" if self.op == "distillation" else "distillation loss"

    @property
    def passes(self) -> tuple[str, ...]:
        return PASSES if self.op == "distillation" else ("fwd+bwd",)  # a loss is a step's: its gradients made with it

    @property
    def rows(self) -> int:
        return self.tokens

    @property
    def kind(self) -> str:
        return {0.0: "forward KL", 1.0: "reverse KL"}.get(self.beta, f"JSD, beta {self.beta:g}")

    @property
    def case(self) -> str:
        transforms = {_transform(self.student_scale, self.student_cap), _transform(self.teacher_scale,
                                                                                   self.teacher_cap)}
        said = _transform(self.student_scale, self.student_cap) if len(transforms) == 1 else \
            f"student {_transform(self.student_scale, self.student_cap)}, teacher " \
            f"{_transform(self.teacher_scale, self.teacher_cap)}"
        return (f"{self.kind}: {self.tokens} tokens, student {self.student_hidden}, teacher {self.teacher_hidden}, "
                f"vocabulary {self.vocab}, {said}")

    def flops(self, pass_: str) -> float:
        fwd = 2 * self.tokens * self.vocab * (self.student_hidden + self.teacher_hidden)
        return fwd if pass_ == "fwd" else fwd + 4 * self.tokens * self.vocab * self.student_hidden


Call = Attention | Experts | Head | Distill


def attention(m: Model, tokens: int) -> list[Attention]:
    """The global layers' call and the windowed layers' (where any layer has a window shorter than the tokens)."""
    s = shard(m)
    if m.mla is not None:  # the latent expanded per head: multi-head attention of nope + rope, v apart
        dims = (s.heads, m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim, m.mla.v_head_dim)
    else:
        dims = (s.kv_heads, m.head_dim, m.head_dim)
    kv, d, dv = dims
    scale = (m.query_pre_attn_scalar or d) ** -0.5
    windows = []
    if m.sliding_window is None or m.sliding_window >= tokens:
        windows.append(None)
    else:
        windows += ([None] if m.global_every else []) + [m.sliding_window]
    return [Attention(s.heads, kv, d, dv, tokens, w, m.attn_logit_softcapping, m.sinks, scale) for w in windows]


def experts(m: Model, tokens: int) -> list[Experts]:
    """A MoE layer's two expert projections (none for a dense model)."""
    if not m.moe:
        return []
    s, k, inter = shard(m), m.num_experts_per_tok, m.moe_intermediate_size
    return [Experts("gate-up", tokens, k, m.hidden_size, 2 * inter, s.experts, ROUTING_SKEW),
            Experts("down", tokens, k, inter, m.hidden_size, s.experts, ROUTING_SKEW)]


def heads(m: Model, tokens: int) -> list[Head]:
    scale = 1.0 / m.logits_scaling if m.logits_scaling else 1.0
    return [Head(op, tokens, m.hidden_size, m.vocab_size, scale, m.final_logit_softcapping, m.tie_word_embeddings)
            for op in ("lm_head_loss", "lm_head_statistics")]


def distillation(student: Model, tokens: int) -> list[Distill]:
    """The per-token call and the loss for every pair whose student is `student`."""
    out = []
    for s_name, t_name in PAIRS:
        if s_name != student.name:
            continue
        t = BY_NAME[t_name]
        vocab = min(student.vocab_size, t.vocab_size)
        args = (tokens, student.hidden_size, t.hidden_size, vocab,
                1.0 / student.logits_scaling if student.logits_scaling else 1.0, student.final_logit_softcapping,
                1.0 / t.logits_scaling if t.logits_scaling else 1.0, t.final_logit_softcapping)
        out += [Distill("distillation", *args, JSD_BETA), Distill("distillation_loss", *args, LOSS_BETA)]
    return out


def calls(m: Model, tokens: int) -> list[Call]:
    """Every call `m` makes at `tokens`, family by family."""
    return [*attention(m, tokens), *experts(m, tokens), *heads(m, tokens), *distillation(m, tokens)]


FAMILIES = ("splash", "grouped matmul", "LM head labels", "TRL statistics", "distillation per-token",
            "distillation loss")
