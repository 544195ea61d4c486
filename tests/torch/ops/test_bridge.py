"""The bridge every Torch op shares: this build's namespace, meta and fake tensors, DLPack without copies."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode


@pytest.mark.kernels_ci
def test_ops_live_in_this_builds_namespace(tokamax, ops):
    # As kernel-builder's noarch _ops.py: _tokamax_<backend torch runs on>_<this build's id>. The kernel's
    # module name (its metadata id) always says tpu; on this CPU host the namespace says cpu.
    names = importlib.import_module(f"{tokamax.__name__}._ops")
    build_id = tokamax.__name__.removeprefix("_tokamax_tpu_")
    assert names._OPS_NAME == f"_tokamax_{names.get_backend()}_{build_id}" and build_id != tokamax.__name__
    for op in (ops.gmm_op, ops.tgmm_op, ops.splash_op, ops.gmm_v2_op):
        assert op._qualname.split("::")[0] == names._OPS_NAME


@pytest.mark.kernels_ci
def test_meta_and_fake_tensors_give_shapes_and_dtypes(ops):
    sizes = torch.empty(4, dtype=torch.int32, device="meta")
    out = ops.gmm(torch.empty(256, 128, device="meta", dtype=torch.bfloat16),
                  torch.empty(4, 128, 384, device="meta", dtype=torch.bfloat16), sizes)
    assert (out.shape, out.dtype, out.device.type) == ((256, 384), torch.bfloat16, "meta")
    with FakeTensorMode():
        q = torch.empty(2, 256, 128, dtype=torch.bfloat16)
        att = ops.splash_attention(q, torch.empty(256, 128, dtype=torch.bfloat16),
                                   torch.empty(256, 128, dtype=torch.bfloat16))
        grouped = ops.tgmm(torch.empty(256, 128), torch.empty(256, 256), torch.empty(3, dtype=torch.int32))
    assert (att.shape, att.dtype) == ((2, 256, 128), torch.bfloat16)
    assert (grouped.shape, grouped.dtype) == ((3, 128, 256), torch.float32)


@pytest.mark.kernels_ci
def test_dlpack_conversion_shares_memory(ops):
    tensor = torch.arange(4096, dtype=torch.float32).reshape(64, 64)
    array = ops.to_jax(tensor)
    assert array.unsafe_buffer_pointer() == tensor.data_ptr()
    back = ops.to_torch(array)
    assert back.data_ptr() == tensor.data_ptr()
    bf16 = tensor.to(torch.bfloat16)
    assert ops.to_jax(bf16).unsafe_buffer_pointer() == bf16.data_ptr()


