"""`tokamax.distill.cost`, the distillation kernels' cost model: its figures counted from the definitions
(each array read once where its block index follows the outer grid axis, once per outer step and sweep
where it follows the inner one, overhanging blocks read whole; the matmuls' 2 m n k), and each
`pallas_call` declaring exactly the model's `pl.CostEstimate` in the lowered module."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest


def test_counts_follow_the_grid(kernel):
    distill = kernel.distill
    cost, blocks = distill.cost, distill.blocks.Blocks(256, 512)
    sizes = distill.blocks.Sizes(1000, 384, 640, 2000, 2, 2)  # 4 row blocks (the last overhangs), 4 vocabulary
    rows, vocab = 1024, 2048  # as read: whole blocks
    x = rows * (384 + 640) * 2
    w = vocab * ((384 + 640) * 2 + 2 * 4)
    vector = rows * 4
    jsd, kl = cost.costs(sizes, blocks, beta=0.5), cost.costs(sizes, blocks, beta=0.0, soft_caps=2)
    assert jsd["forward"].grid == (4, 8) and kl["forward"].grid == (4, 4) and jsd["backward_w"].grid == (4, 4)
    assert jsd["forward"].bytes_read == x + 2 * 4 * w and kl["forward"].bytes_read == x + 4 * w
    assert jsd["forward"].bytes_written == 5 * 1000 * 4
    assert jsd["backward_x"].bytes_read == x + 6 * vector + 4 * w
    assert jsd["backward_x"].bytes_written == 1000 * 384 * 2
    assert jsd["backward_w"].bytes_read == w + 4 * (x + 6 * vector)
    assert jsd["backward_w"].bytes_written == 2000 * (384 * 2 + 4)
    logits = rows * vocab
    assert jsd["forward"].flops == 2 * 2 * logits * (384 + 640) and kl["forward"].flops == 2 * logits * (384 + 640)
    assert jsd["backward_x"].flops == jsd["backward_w"].flops == 2 * logits * (384 + 640) + 2 * logits * 384
    assert kl["forward"].transcendentals == 4 * logits + 2 * rows * 4 + 4 * rows
    assert jsd["forward"].transcendentals == 6 * logits + 2 * rows * 4 + 4 * rows
    assert jsd["backward_x"].transcendentals == 4 * logits and kl["backward_w"].transcendentals == 4 * logits
    for name, k in jsd.items():
        assert k.vmem_bytes == blocks.kernel_vmem_bytes(name, sizes)
        assert k.estimate().bytes_accessed == k.bytes_read + k.bytes_written


def _declared(module: str) -> list[dict[str, int]]:
    """The cost_estimate of each Mosaic kernel in a lowered module."""
    return [{k: int(v) for k, v in re.findall(r"\\22(\w+)\\22:(\d+)", estimate)}
            for estimate in re.findall(r"\\22cost_estimate\\22: \{(.*?)\}", module)]


@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_each_kernel_declares_the_models_estimate(kernel, emulation, beta):
    distill = kernel.distill
    sd = jax.ShapeDtypeStruct
    rows, hs, ht, vocab = 700, 256, 384, 1500
    setting = distill.setting(beta, student_soft_cap=30.0)
    specs = [sd((rows, hs), jnp.bfloat16), sd((vocab, hs), jnp.bfloat16), sd((vocab,), jnp.float32),
             sd((rows, ht), jnp.bfloat16), sd((vocab, ht), jnp.bfloat16), sd((vocab,), jnp.float32)]
    row = sd((rows,), jnp.float32)

    def both(*a):  # noqa: ANN002, ANN202
        saved = distill.forward(*a[:6], setting)
        return distill.backward(*a[:6], setting, saved, a[6])

    with emulation.emulated_chip("v6e"), jax.sharding.use_abstract_mesh(emulation.tpu_mesh("v6e")):
        module = jax.jit(both).trace(*specs, row).lower(lowering_platforms=("tpu",)).as_text()
        from jax.experimental.pallas import tpu as pltpu

        sizes = distill.blocks.Sizes(rows, hs, ht, vocab)
        blocks = {k: distill.blocks.choose(sizes, pltpu.get_tpu_info().vmem_capacity_bytes, k)
                  for k in distill.blocks.KERNELS}
    declared = _declared(module)
    models = distill.cost.costs(sizes, blocks, beta=beta, soft_caps=1)
    want = [(m.flops, m.transcendentals, m.bytes_accessed) for m in models.values()]
    assert sorted((d["flops"], d["transcendentals"], d["bytes_accessed"]) for d in declared) == sorted(want)
