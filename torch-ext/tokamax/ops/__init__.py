"""Upstream's public TPU ops (`tokamax.ops` upstream): the call a tokamax user makes.

`tokamax.ops.ragged_dot(lhs, rhs, group_sizes, ...)` is upstream's `tokamax.ragged_dot`, run by
upstream's own Op layer (ported at build time, without pydantic, jaxtyping or absl): the
config comes from the caller, else upstream's autotuning table for this chip and these
arguments, else upstream's heuristics, else defaults; `jax.grad` runs upstream's VJP.
The Op classes and their configs are in `ops.tpu` (`ops.tpu.RaggedDot`, ...), experimental
ops in `ops.experimental` (`ops.experimental.splash_attention`, `ops.experimental.tpu`), and
the options (`cross_compile`, ...) in `ops.config`. Autotuning is upstream's: `ops.autotune(f, *args)`
returns an `ops.AutotuningResult` (`with result:` steers the calls inside, `dumps` / `loads` keep it),
`ops.autotuning` has `get_bound_args` and the bound-argument JSON helpers, `ops.benchmark` times a
function (wall-clock; XProf and CUPTI timing need what this kernel does not ship). Names load on first
use. Upstream's
GPU- and XLA-only ops (`gated_linear_unit`, `layer_norm`, `triangle_multiplication`, `ops.gpu`)
are not part of this TPU kernel.
"""

from __future__ import annotations

from ._lazy import namespace

_OPS = "._ported._src.ops"
# Upstream's public ops, except those that need a newer jax than the running one (`_jax_floor`: refused by name,
# and the ragged dot's v2 kernels left out of an implementation list there).
_NAMES = {
    "dot_product_attention": (f"{_OPS}.attention.api", "dot_product_attention"),
    "DotProductAttentionImplementation": (f"{_OPS}.attention.api", "Implementation"),
    # our SMEM check first (ops/_rpa_smem.py), then upstream's op
    "batched_ragged_paged_attention": (".ops._rpa_smem", "batched_ragged_paged_attention"),
    "ragged_paged_attention": (f"{_OPS}.batched_rpa.api", "ragged_paged_attention"),
    "csa_gather": (f"{_OPS}.csa_gather.api", "csa_gather"),
    "deepseek_rope": (f"{_OPS}.deepseek_rope.api", "deepseek_rope"),
    "dsv4_compressor": (f"{_OPS}.dsv4_compressor.api", "dsv4_compressor"),
    "grouped_lowrank_proj": (f"{_OPS}.grouped_lowrank_proj.api", "grouped_lowrank_proj"),
    "kimi_delta_attention": (f"{_OPS}.kda.api", "kimi_delta_attention"),
    "lightning_indexer": (".ops._jax_floor", "lightning_indexer"),
    "linear_softmax_cross_entropy_loss": (".ops._jax_floor", "linear_softmax_cross_entropy_loss"),
    "masked_dense_mla": (f"{_OPS}.masked_dense_mla.api", "masked_dense_mla"),
    "mhc_fused_post_pre": (f"{_OPS}.mhc.api", "mhc_fused_post_pre"),
    "mhc_post": (f"{_OPS}.mhc.api", "mhc_post"),
    "mhc_pre": (f"{_OPS}.mhc.api", "mhc_pre"),
    "proj_and_save_state": (f"{_OPS}.proj_and_save_state.api", "proj_and_save_state"),
    "ragged_dot": (".ops._jax_floor", "ragged_dot"),
    "ragged_dot_general": (".ops._jax_floor", "ragged_dot_general"),
    "ragged_gather": (".ops._sparsecore", "ragged_gather"),
    "ragged_gather_reduce": (".ops._sparsecore", "ragged_gather_reduce"),
    "router_topk": (f"{_OPS}.router_topk.api", "router_topk"),
    "sparse_mla": (f"{_OPS}.sparse_mla.api", "sparse_mla"),
    "top_k": (".ops._jax_floor", "top_k"),
    # upstream has these at its top level (tokamax.RaggedDotGroupSizes, tokamax.config, ...)
    "RaggedDotGroupSizes": (f"{_OPS}.ragged_dot.base", "GroupSizes"),
    "generate_ragged_dot_group_sizes": (f"{_OPS}.ragged_dot.base", "generate_group_sizes"),
    "config": ("._ported._src.config", ""),
    # autotuning and benchmarking (upstream's modules; loaded on first use of these names)
    "autotune": ("._ported._src.autotuning.api", "autotune"),
    "AutotuningResult": ("._ported._src.autotuning.api", "AutotuningResult"),
    "benchmark": ("._ported._src.benchmarking", "benchmark"),
    "BenchmarkData": ("._ported._src.benchmarking", "BenchmarkData"),
    "standardize_function": ("._ported._src.benchmarking", "standardize_function"),
    "BoundArguments": ("._ported._src.ops.op", "BoundArguments"),
    "Op": ("._ported._src.ops.op", "Op"),
    "autotuning": ("._ported.autotuning", ""),
    "benchmarking": ("._ported.benchmarking", ""),
    "tpu": (".ops.tpu", ""),
    "experimental": (".ops.experimental", ""),
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = namespace(__name__, _NAMES)
