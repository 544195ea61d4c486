"""Torch ring attention (sequence parallel over torch-tpu's pallas mesh) on a CPU host.

No TPU and no torch-tpu collectives here, so the op is checked where each part can be:
- CPU tensors over a ring of one chip (a one-device mesh): values and gradients through the Torch
  op and its autograd against float64 Torch attention;
- torch-tpu's own TPU export of the ops for 4- and 8-chip meshes of torch-tpu's compile-only devices
  (what `get_pallas_mesh` builds): one Mosaic kernel per ring step, `mhlo.num_partitions` = the mesh,
  and the local output sizes torch-tpu derives from the export equal to the fake kernels';
- the JAX functions those ops export, on 8 host CPU devices in interpret mode (ring_devices.py, in
  a process of its own), against float64 attention over the whole sequence;
- fakes with symbolic sizes, one compiled graph for two lengths, the refusal to make an op inside
  torch.compile, and bad calls failing in the op's own words.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch_tpu._internal.pallas import pallas
from torch_tpu._internal.pallas._mock_device import _PallasDevice

from tests.conftest import REPO, VARIANT
from tests.jax.sharded import host_devices
from tests.torch import attention_reference as reference

from . import checks

OP = "ring_attention"
TOL = dict(rtol=1e-4, atol=5e-5)  # f32 inputs; the kernel's online softmax reorders f32 sums (as splash's)


def _cpu_mesh(axis: str = "sp") -> jax.sharding.Mesh:
    return jax.sharding.Mesh(np.array(jax.devices("cpu")[:1]), (axis,))


def _tpu_mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> jax.sharding.Mesh:
    """A mesh of torch-tpu's compile-only TPU devices, rank i at position i, as `get_pallas_mesh` builds
    it on a TPU host (where JAX itself sees no TPU either)."""
    devices = [_PallasDevice(id=i, process_index=i, device_kind="TPU v6 lite") for i in range(int(np.prod(shape)))]
    return jax.sharding.Mesh(np.array(devices).reshape(shape), names)


def _assert_values_and_gradients(out, ref, leaves, leaves64, seed: int) -> None:  # noqa: ANN001
    """out as the float64 reference, and the gradients of both in q, k, v for one random cotangent."""
    torch.testing.assert_close(out.double(), ref.detach(), **TOL)
    cotangent = checks.randn(*out.shape, seed=seed)
    (out * cotangent).sum().backward()
    (ref * cotangent.double()).sum().backward()
    for name, got, want in zip("qkv", leaves, leaves64, strict=True):
        torch.testing.assert_close(got.grad.double(), want.grad, **TOL, msg=lambda m, n=name: f"d{n}: {m}")

@pytest.mark.parametrize(("causal", "batch", "heads", "kv_heads", "length", "segmented"),
                         [(True, 2, 2, 1, 256, True), (False, 1, 2, 0, 128, False)],
                         ids=["causal-gqa-segments", "full-mqa"])
def test_ring_of_one_chip_on_cpu_tensors_matches_float64(ops, causal, batch, heads, kv_heads, length, segmented):
    """The op and its autograd (upstream's ring backward) as float64 attention: a batch of 2 with GQA,
    two documents per row, two blocks of keys (one masked out); or multi-query."""
    q = checks.randn(batch, heads, length, 128, seed=1, scale=128**-0.5)
    kv_shape = (batch, length, 128) if kv_heads == 0 else (batch, kv_heads, length, 128)
    k, v = checks.randn(*kv_shape, seed=2, scale=128**-0.5), checks.randn(*kv_shape, seed=3)
    ids = None
    if segmented:
        ids = torch.ones(batch, length, dtype=torch.int32)
        ids[0, 90:] = 2
        ids[1, 200:] = 3
    leaves = [x.requires_grad_() for x in (q, k, v)]
    out = ops.ring_attention(q, k, v, mesh=_cpu_mesh(), causal=causal, segment_ids=ids)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in leaves)
    kk, vv = (k64[:, None], v64[:, None]) if kv_heads == 0 else (k64, v64)
    allowed = reference.allowed(torch.arange(length).expand(batch, length), length,
                                kind="causal" if causal else "full", q_ids=ids, kv_ids=ids)
    ref = reference.attention(q64, kk, vv, allowed)
    _assert_values_and_gradients(out, ref, leaves, (q64, k64, v64), seed=4)


def test_a_window_on_the_causal_ring_sees_no_key_ahead(ops):
    """causal=True (the default) with a window (64, 64): both hold, keys in [p - 64, p] (before, the window
    replaced causal and each query saw 64 keys ahead); values and gradients as float64 attention."""
    q = checks.randn(1, 2, 256, 128, seed=5, scale=128**-0.5)
    k, v = checks.randn(1, 1, 256, 128, seed=6, scale=128**-0.5), checks.randn(1, 1, 256, 128, seed=7)
    leaves = [x.requires_grad_() for x in (q, k, v)]
    out = ops.ring_attention(q, k, v, mesh=_cpu_mesh(), window=(64, 64))
    positions = torch.arange(256)[None]
    allowed = reference.allowed(positions, 256, kind="causal") & reference.allowed(positions, 256, kind="local",
                                                                                   window=(64, 64))
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in leaves)
    ref = reference.attention(q64, k64, v64, allowed)
    _assert_values_and_gradients(out, ref, leaves, (q64, k64, v64), seed=8)


# (mesh shape, axis names, options, batch, heads, kv heads (0: multi-query), segment ids)
_EXPORTS = {
    "4-chips-causal": ((4,), ("sp",), dict(causal=True), 2, 4, 4, False),
    "8-chips-causal-gqa-segments": ((8,), ("sp",), dict(causal=True), 1, 4, 2, True),
    "8-chips-dp2-sp4-full-mqa": ((2, 4), ("dp", "sp"), dict(causal=False, batch_axis="dp", mqa=True), 1, 2, 0, False),
    "8-chips-tp2-sp4-causal": ((2, 4), ("tp", "sp"), dict(causal=True, head_axis="tp"), 1, 2, 2, False),
    "8-chips-causal-load-balanced": ((8,), ("sp",), dict(causal=True, load_balanced=True), 1, 4, 2, True),
}


def _local_args(batch: int, heads: int, kv_heads: int, segmented: bool) -> list:
    """One rank's shards (meta tensors, bf16): q, k, v, segment ids."""
    kv_shape = (batch, 256, 128) if kv_heads == 0 else (batch, kv_heads, 256, 128)
    ids = torch.zeros(batch, 256, dtype=torch.int32, device="meta") if segmented else None
    return [checks.meta(batch, heads, 256, 128, dtype=torch.bfloat16), checks.meta(*kv_shape, dtype=torch.bfloat16),
            checks.meta(*kv_shape, dtype=torch.bfloat16), ids]


_FUNC = re.compile(r"^  func\.func (?:public |private )?@([\w$.-]+)\(", re.M)
_CALL = re.compile(r"\bcall @([\w$.-]+)\(")


def _kernel_launches(stablehlo: str) -> int:
    """Mosaic kernel calls a run of @main makes, through the private functions it calls (jax 0.10
    outlines the ring's unrolled steps into one function called once per step; jax 0.12 inlines them)."""
    starts = list(_FUNC.finditer(stablehlo))
    bodies = {m.group(1): stablehlo[m.end():(starts[i + 1].start() if i + 1 < len(starts) else None)]
              for i, m in enumerate(starts)}

    def launches(name: str) -> int:
        body = bodies[name]
        return body.count("@tpu_custom_call(") + sum(launches(callee) for callee in _CALL.findall(body))

    return launches("main")


def _torch_tpu_export(op, args: list) -> tuple[str, list[tuple]]:  # noqa: ANN001
    """What torch-tpu does on a TPU host at the op's first call: the StableHLO it exports for these
    shards and the local output sizes it derives from the export and the output specs."""
    jax_callable = op._init_fn
    params = inspect.signature(jax_callable.jit_fn).parameters
    assert len(jax_callable.input_partition_specs) == len(params), "one partition spec per argument"
    norm_args, norm_kwargs = jax_callable._normalize_invocation_args(args, {})
    placeholders, _ = jax_callable._get_jax_placeholders(norm_args, norm_kwargs)
    with jax._src.config.export_ignore_forward_compatibility(True):
        exported = jax_callable.exported(*placeholders)
    specs = jax_callable.output_partition_specs
    local = [tuple(pallas.torch_placeholder(aval, mesh=jax_callable.mesh, partition_spec=spec, device="meta").shape)
             for aval, spec in zip(exported.out_avals, specs, strict=True)]
    return exported.mlir_module(), local


@pytest.mark.kernels_ci
@pytest.mark.parametrize("case", list(_EXPORTS))
def test_torch_tpu_export_for_a_mesh_and_local_fakes(ops, tokamax, case):
    """Forward and backward: one Mosaic kernel per ring step and contiguous KV run (the K/V shard it
    holds; two runs a shard in the head-tail layout), the module partitioned over the whole mesh, and
    this rank's output sizes from the export equal to the fakes'."""
    shape, names, options, batch, heads, kv_heads, segmented = _EXPORTS[case]
    mesh = _tpu_mesh(shape, names)
    ring = ops.ring_attention_ops(mesh, **options)
    checks.assert_in_build_namespace(tokamax, ring.forward, ring.backward)
    q, k, v, ids = _local_args(batch, heads, kv_heads, segmented)
    rows = checks.meta(*q.shape[:-1])
    for op, args in ((ring.forward, [q, k, v, ids]), (ring.backward, [q, k, v, ids, q, rows, q])):
        text, local = _torch_tpu_export(op, args)
        runs = 2 if options.get("load_balanced") else 1
        assert _kernel_launches(text) == runs * mesh.shape["sp"], f"{op}: one kernel per ring step and KV run"
        assert f"mhlo.num_partitions = {mesh.size} : i32" in text
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fakes = op(*[a if a is None else mode.from_tensor(a) for a in args])
        assert [tuple(f.shape) for f in fakes] == local, f"{op}: fakes {[f.shape for f in fakes]}, export {local}"
    assert local == [tuple(q.shape), tuple(k.shape), tuple(v.shape)]


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    mesh = _cpu_mesh()
    ops.ring_attention_ops(mesh)  # made before compiling, as users must

    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return ops.ring_attention(q, k, v, mesh=mesh, segment_ids=ids)

    def meta(length: int) -> tuple:
        return (*(checks.meta(2, 2, length, 128) for _ in range(3)), torch.zeros(2, length, dtype=torch.int32,
                                                                                device="meta"))

    checks.traces_symbolically(step, *meta(256))
    checks.compiles_once_for_two_sizes(step, meta(256), meta(512))


@pytest.mark.kernels_ci
def test_an_op_first_made_inside_torch_compile_is_refused(ops):
    mesh = _cpu_mesh("fresh")  # an axis name no other test uses: this layout has no op yet
    compiled = torch.compile(lambda q: ops.ring_attention(q, q, q, mesh=mesh, axis_name="fresh"), fullgraph=True,
                             backend="eager")
    torch._dynamo.reset()
    try:
        with pytest.raises(Exception, match="cannot happen inside torch.compile") as info:
            compiled(checks.meta(1, 2, 128, 128))
    finally:
        torch._dynamo.reset()
    assert f"tokamax {OP}: the op for this mesh and these options is made on first use" in str(info.value)


def _q(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.zeros(*shape, dtype=dtype, device="meta")


_ONE = _cpu_mesh()
_BAD_CALLS = [
    (lambda o: o.ring_attention(_q(1, 2, 128, 128), _q(1, 2, 128, 128), _q(1, 2, 128, 128),
                                mesh=_tpu_mesh((8,), ("sp",))),
     ValueError, "the mesh holds 8 chips but the job's world size is 1"),
    (lambda o: o.ring_attention(torch.zeros(1, 2, 128, 128), torch.zeros(1, 2, 128, 128), torch.zeros(1, 2, 128, 128),
                                mesh=_ONE, axis_name="ring"),
     ValueError, "axis_name 'ring' is not an axis of the mesh ('sp',)"),
    (lambda o: o.ring_attention(_q(1, 2, 128, 128), _q(1, 2, 128, 128), _q(1, 2, 128, 128),
                                mesh=_tpu_mesh((2, 4), ("dp", "sp"))),
     ValueError, "the mesh's axes ['dp'] shard nothing"),
    (lambda o: o.ring_attention(_q(1, 2, 128, 128), _q(1, 2, 128, 128), _q(1, 2, 128, 128), mesh="sp"),
     TypeError, "mesh must be a jax.sharding.Mesh"),
    (lambda o: o.ring_attention(_q(1, 2, 100, 128), _q(1, 2, 100, 128), _q(1, 2, 100, 128), mesh=_ONE),
     ValueError, "this rank's sequence shard (q's local_len 100) must be a multiple of 128"),
    (lambda o: o.ring_attention(_q(2, 128, 128), _q(2, 128, 128), _q(2, 128, 128), mesh=_ONE),
     ValueError, "q must be [batch, heads, local_len, head_dim] (this rank's sequence shard)"),
    (lambda o: o.ring_attention(_q(1, 2, 128, 128), _q(1, 2, 256, 128), _q(1, 2, 256, 128), mesh=_ONE),
     ValueError, "k's local_len 256 differs from q's 128"),
    (lambda o: o.ring_attention(_q(1, 2, 128, 128), _q(1, 3, 128, 128), _q(1, 3, 128, 128), mesh=_ONE),
     ValueError, "q's 2 heads must be a multiple of k's 3"),
    (lambda o: o.ring_attention(_q(1, 2, 128, 128), _q(1, 2, 128, 64), _q(1, 2, 128, 64), mesh=_ONE),
     ValueError, "head_dim differs: q 128, k 64"),
    (lambda o: o.ring_attention(_q(1, 2, 128, 128), _q(1, 2, 128, 128), _q(1, 2, 128, 128), mesh=_ONE,
                                segment_ids=torch.zeros(1, 256, dtype=torch.int32, device="meta")),
     ValueError, "segment_ids must be [batch, local_len] = [1, 128]"),
    (lambda o: o.ring_attention(_q(1, 2, 128, 128), _q(1, 2, 128, 128), _q(1, 2, 128, 128, dtype=torch.int32),
                                mesh=_ONE),
     TypeError, "v must be bfloat16 or float32"),
    (lambda o: o.ring_attention(*(torch.zeros(1, 2, 128, 128) for _ in range(3)), mesh=_tpu_mesh((2, 4), ("dp", "sp")),
                                batch_axis="sp"),
     ValueError, "axis_name, batch_axis and head_axis must be different axes"),
    (lambda o: o.ring_attention(_q(1, 2, 128, 128), _q(1, 2, 128, 128), _q(1, 2, 128, 128), mesh=_ONE,
                                load_balanced=True),
     ValueError, "this rank's sequence shard (q's local_len 128) must be its two head-tail chunks each a multiple "
                 "of 128"),
    (lambda o: o.ring_attention(_q(1, 2, 256, 128), _q(1, 2, 256, 128), _q(1, 2, 256, 128), mesh=_ONE,
                                causal=False, load_balanced=True),
     ValueError, "load_balanced reorders a causal (or windowed) ring; a full mask is balanced as it is"),
    (lambda o: o.ring_attention(_q(1, 2, 128, 128), _q(1, 2, 128, 128), _q(1, 2, 128, 128), mesh=_ONE,
                                window=(None, None)),
     ValueError, "window must be (left, right), each an int >= 0 or None and not both None, got (None, None)"),
]


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("call", "error", "message"), _BAD_CALLS, ids=[m for _, _, m in _BAD_CALLS])
def test_bad_calls_fail_with_the_ops_own_message(ops, call, error, message):
    with pytest.raises(error, match=f"tokamax {OP}") as info:
        call(ops)
    assert message in str(info.value)


@pytest.mark.kernels_ci
def test_cpu_tensors_refuse_a_ring_of_several_chips(ops):
    """Over gloo a rank of several holds CPU tensors, but the K/V shards travel through torch-tpu's
    collectives, which CPU tensors lack: the op says so (mesh size = world size checked first)."""
    ring = ops.ring_attention_ops(_tpu_mesh((4,), ("sp",)))
    q = torch.zeros(1, 2, 128, 128)
    with pytest.raises(NotImplementedError, match=f"tokamax {OP}: CPU tensors run a ring of one chip only"):
        ring.forward(q, q, q, None)


# Per-check silence after which the child counts as stalled: a healthy check takes 30-70 s here
# (more when other jobs share the two cores).
STALL_S = 300
# ring_devices.CASES -> what each reports (the dp x sp case forward only, to keep the run short)
_ALL = {"out", "lse", "dq", "dk", "dv"}
DEVICE_CHECKS = {"ring8-causal-gqa-segments": _ALL, "dp2-ring4-full-mqa": {"out", "lse"},
                 "tp2-ring4-causal-mqa": _ALL, "ring8-balanced-causal-gqa-segments": _ALL,
                 "ring4-balanced-window-mqa": _ALL, "ring4-window": _ALL,
                 "sp4-dp2-balanced-rank-shards": {"out", "lse"}}


def test_exported_functions_on_8_host_devices_match_float64_attention(tokamax):
    """Over a ring of 8 (causal, GQA, documents cut across shards: out, logsumexp, dq, dk, dv), the same
    load-balanced (head-tail: the sequence laid out by `to_ring_layout`, the outputs put back), a ring of 4
    with a window (plain and load-balanced, MQA), a dp=2 x sp=4 mesh (full, MQA, the batch sharded: out,
    logsumexp), a tp=2 x sp=4 mesh (causal, MQA, the heads sharded: dK and dV summed over the head
    shards) and an sp=4 x dp=2 mesh, load-balanced, where each rank passes the shards `mesh_coordinate`
    names on the mesh `get_pallas_mesh` builds (rank r at position r; its sequence shard r // 2, not r)
    and gets its own output: out and logsumexp as float64 attention on the whole sequence."""
    results = host_devices.run(sys.executable, REPO / "tests/torch/ops/ring_devices.py", list(DEVICE_CHECKS),
                               stall_s=STALL_S, env={"LOCAL_KERNELS": f"kernels-community/tokamax={VARIANT}"})
    for check, result in results.items():
        assert result["devices"] == 8, check
        assert set(result["errors"]) == DEVICE_CHECKS[check], check
        for name, err in result["errors"].items():
            assert err["excess"] <= 0, (f"{check} {name}: max |diff| {err['max_abs']:.3g} over the tolerance "
                                        f"(reference max {err['max_ref']:.3g})")


# (mesh shape, axis names, ring_attention_ops options): layouts that differ in one thing each
_NAMED = [
    ((8,), ("sp",), dict(causal=True)), ((8,), ("sp",), dict(causal=False)),
    ((8,), ("sp",), dict(causal=True, load_balanced=True)), ((8,), ("sp",), dict(causal=True, mqa=True)),
    ((8,), ("sp",), dict(causal=True, window=(64, 0))), ((8,), ("sp",), dict(causal=True, window=(64, None))),
    ((8,), ("sp",), dict(causal=False, window=(64, 64))), ((8,), ("sp",), dict(causal=False, window=(None, 64))),
    ((4,), ("sp",), dict(causal=True)), ((8,), ("ring",), dict(axis_name="ring")),
    ((2, 4), ("dp", "sp"), dict(batch_axis="dp")), ((4, 2), ("sp", "dp"), dict(batch_axis="dp")),
    ((2, 4), ("tp", "sp"), dict(head_axis="tp")), ((2, 4), ("tp", "sp"), dict(head_axis="tp", mqa=True)),
]

# What a fresh process names the layouts, made in the reverse order.
_NAMES_ELSEWHERE = """
import json, sys
import jax, kernels, numpy as np
from torch_tpu._internal.pallas._mock_device import _PallasDevice
ops = kernels.get_kernel("kernels-community/tokamax", version=1).torch_ops
names = {}
for i, (shape, axes, options) in reversed(list(enumerate(json.loads(sys.argv[1])))):
    devices = [_PallasDevice(id=d, process_index=d, device_kind="TPU v6 lite") for d in range(int(np.prod(shape)))]
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    ring = ops.ring_attention_ops(jax.sharding.Mesh(np.array(devices).reshape(shape), tuple(axes)), **options)
    names[i] = [ring.forward._qualname.split("::")[1], ring.backward._qualname.split("::")[1]]
print(json.dumps(names))
"""


def _op_names(ops) -> list[list[str]]:  # noqa: ANN001
    rings = [ops.ring_attention_ops(_tpu_mesh(shape, axes), **options) for shape, axes, options in _NAMED]
    return [[op._qualname.split("::")[1] for op in (ring.forward, ring.backward)] for ring in rings]


@pytest.mark.kernels_ci
def test_op_names_say_the_options_and_differ_with_them(ops):
    """Each layout's ops have names of their own (valid Torch op names, from the options), and a mesh made
    again of the same devices gets the same ops."""
    names = _op_names(ops)
    flat = [n for pair in names for n in pair]
    assert len(set(flat)) == len(flat), flat
    assert all(re.fullmatch(r"ring_attention_(bwd_)?[A-Za-z0-9_]+", n) for n in flat), flat
    assert names[0][0].startswith("ring_attention_sp8_ring_sp_mha_causal_contiguous_"), names[0]
    assert names[10][0].startswith("ring_attention_dp2_sp4_ring_sp_batch_dp_mha_causal_contiguous_"), names[10]
    assert _op_names(ops) == names  # new Mesh objects of the same devices: the same ops


def test_op_names_do_not_depend_on_what_was_made_before(ops):
    """A saved export names its op: another process making the same layouts in the reverse order (after
    none of this one's) names each layout's ops as this one does."""
    names = _op_names(ops)
    env = {**os.environ, "LOCAL_KERNELS": f"kernels-community/tokamax={VARIANT}"}
    child = subprocess.run([sys.executable, "-c", _NAMES_ELSEWHERE, json.dumps(_NAMED)], capture_output=True,
                           text=True, env=env, timeout=300, cwd=REPO)
    assert child.returncode == 0, child.stderr[-3000:]
    elsewhere = json.loads(child.stdout.strip().splitlines()[-1])
    assert [elsewhere[str(i)] for i in range(len(_NAMED))] == names


@pytest.mark.kernels_ci
def test_a_ranks_shard_is_its_coordinate_on_the_rings_axis(ops):
    """torch-tpu runs rank r on the mesh's device of process_index r (`get_pallas_mesh`: position r,
    row-major); the shard a rank passes along an axis is that device's coordinate there, its rank only on
    a mesh of one axis."""
    minor = _tpu_mesh((2, 4), ("dp", "sp"))
    assert [ops.mesh_coordinate(minor, "sp", r) for r in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [ops.mesh_coordinate(minor, "dp", r) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    major = _tpu_mesh((4, 2), ("sp", "dp"))
    assert [ops.mesh_coordinate(major, "sp", r) for r in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    reversed_ring = jax.sharding.Mesh(_tpu_mesh((8,), ("sp",)).devices[::-1], ("sp",))
    assert [ops.mesh_coordinate(reversed_ring, "sp", r) for r in range(8)] == [7, 6, 5, 4, 3, 2, 1, 0]
    assert ops.mesh_coordinate(_cpu_mesh()) == 0  # this process's rank: 0 outside a distributed job
    with pytest.raises(ValueError, match=f"tokamax {OP}: rank 8 runs 0 of the mesh's devices"):
        ops.mesh_coordinate(minor, "sp", 8)
    with pytest.raises(ValueError, match=rf"tokamax {OP}: axis_name 'tp' is not an axis of the mesh \('dp', 'sp'\)"):
        ops.mesh_coordinate(minor, "tp", 0)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("load_balanced", [True, False])
def test_ring_layout_helpers_put_a_sequence_in_and_back(ops, load_balanced):
    """Rank r's shard of the laid-out sequence holds chunks r and 2N - 1 - r (head-tail) or slice r;
    `from_ring_layout` gives the original order back, on any dim."""
    tokens = torch.arange(2 * 3 * 48).reshape(2, 3, 48)
    laid = ops.to_ring_layout(tokens, 3, dim=2, load_balanced=load_balanced)
    shards = laid.chunk(3, dim=2)
    if load_balanced:  # chunks of 8: rank 1 holds chunks 1 and 4
        assert shards[1][0, 0].tolist() == list(range(8, 16)) + list(range(32, 40))
    else:
        assert shards[1][0, 0].tolist() == list(range(16, 32))
    assert torch.equal(ops.from_ring_layout(laid, 3, dim=2, load_balanced=load_balanced), tokens)
    assert torch.equal(ops.from_ring_layout(ops.to_ring_layout(tokens, 3, dim=-1), 3, dim=-1), tokens)
    with pytest.raises(ValueError, match="tokamax ring: a sequence of 48 tokens does not split into 2 x ring_size "
                                         "chunks"):
        ops.to_ring_layout(tokens, 5, dim=2)
