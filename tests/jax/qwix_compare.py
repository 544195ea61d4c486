"""Run in the upstream venv (qwix 0.1.8 installed): `python qwix_compare.py VENDORED_QWIX_DIR OUT.json`.

Quantizes the same arrays with qwix 0.1.8 and with our vendored copy (flax replaced by a
frozen dataclass registered as a pytree) and records, per setting, whether the results are
bit-identical, eager and under jit, and whether the pytree structures agree.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import qwix

SETTINGS = [
    # (name, qtype, kwargs)
    ("int8-channelwise0", "int8", {"channelwise_axes": (0,)}),
    ("int8-channelwise1", "int8", {"channelwise_axes": (1,)}),
    ("int8-tiled1x128", "int8", {"tiled_axes": {1: 128}}),
    ("int8-tiled32x64-bf16-scale", "int8", {"tiled_axes": {0: 32, 1: 64}, "scale_dtype": "bfloat16"}),
    ("int8-minmax-zero-point", "int8", {"channelwise_axes": (0,), "calibration_method": "minmax"}),
    ("int4-tiled1x64", "int4", {"tiled_axes": {1: 64}}),
    ("fp8e4m3-channelwise0", "float8_e4m3fn", {"channelwise_axes": (0,)}),
    ("fp8e5m2-tiled16x128", "float8_e5m2", {"tiled_axes": {0: 16, 1: 128}}),
]


def load_vendored(path: Path):  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("vendored_qwix", path / "__init__.py",
                                                  submodule_search_locations=[str(path)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["vendored_qwix"] = module
    spec.loader.exec_module(module)
    return module


def _bits(x) -> bytes:  # noqa: ANN001
    return b"" if x is None else np.asarray(x).tobytes() + str(np.asarray(x).dtype).encode()


def _same(a, b) -> bool:  # noqa: ANN001
    fields = ("qvalue", "scale", "zero_point")
    return all(_bits(getattr(a, f)) == _bits(getattr(b, f)) for f in fields) and a.qtype == b.qtype


def _structure(q) -> dict:  # noqa: ANN001
    leaves, treedef = jax.tree_util.tree_flatten_with_path(q)
    return {"paths": [jax.tree_util.keystr(p) for p, _ in leaves], "leaves": treedef.num_leaves,
            "shapes": [list(np.shape(x)) for _, x in leaves]}


def main(vendored_dir: Path, out: Path) -> int:
    ours = load_vendored(vendored_dir)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((64, 256), np.float32) * 3)
    results = {}
    for name, qtype, kwargs in SETTINGS:
        kwargs = {k: (jnp.dtype(v) if k == "scale_dtype" else v) for k, v in kwargs.items()}
        upstream_q = qwix.quantize(x, jnp.dtype(qtype), **kwargs)
        ours_q = ours.quantize(x, jnp.dtype(qtype), **kwargs)
        jit_up = jax.jit(lambda a, kw=kwargs, q=qtype: qwix.quantize(a, jnp.dtype(q), **kw))(x)
        jit_ours = jax.jit(lambda a, kw=kwargs, q=qtype: ours.quantize(a, jnp.dtype(q), **kw))(x)
        results[name] = {
            "eager_identical": _same(upstream_q, ours_q),
            "jit_identical": _same(jit_up, jit_ours),
            "dequantize_identical": _bits(qwix.dequantize(upstream_q)) == _bits(ours.dequantize(ours_q)),
            "dequantize_jit_identical": _bits(jax.jit(qwix.dequantize)(upstream_q))
            == _bits(jax.jit(ours.dequantize)(ours_q)),
            "structure_upstream": _structure(upstream_q),
            "structure_ours": _structure(ours_q),
            "has_zero_point": upstream_q.zero_point is not None,
        }
    out.write_text(json.dumps({"qwix": qwix.__version__, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
