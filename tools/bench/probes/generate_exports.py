"""Probe (Torch tier): what `generate()` with tokamax attention asks torch-tpu to export, and how
many attention kernel calls a layer makes for a batch.

    python generate_exports.py VARIANT_DIR
A tiny Qwen3-MoE (2 layers) built from a config: greedy generation of 64 tokens from a 100-token
prompt with the static and the dynamic cache, counted with torch-tpu's own invocation keys
(tests/torch/export_probe.py), against the distinct KV lengths the steps see (one export each
without buckets); and one forward of a batch of 4 x 200 tokens. Prints JSON.
"""

import importlib
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402


def main() -> int:
    os.environ["LOCAL_KERNELS"] = f"kernels-community/tokamax={sys.argv[1]}"
    import kernels

    from tests.torch.export_probe import ExportProbe
    from tests.torch.transformers.models import pair, tokens

    tokamax = kernels.get_kernel("kernels-community/tokamax", version=1)
    namespace = importlib.import_module(f"{tokamax.__name__}._ops")._OPS_NAME
    _, model = pair("qwen3_moe", tokamax, train=False)
    prompt, new = 100, 64
    out = {"prompt": prompt, "new_tokens": new, "kv_lengths_seen": new - 1}
    for cache in ("static", "dynamic"):
        with ExportProbe(namespace) as probe, torch.no_grad():
            model.generate(input_ids=tokens(1, prompt, seed=1), max_new_tokens=new, min_new_tokens=new,
                           do_sample=False, cache_implementation=cache, pad_token_id=0)
        out[cache] = {op: n for op, n in probe.exports().items() if op.startswith("splash")}
    with ExportProbe(namespace) as probe, torch.no_grad():
        model(input_ids=tokens(4, 200, seed=2))
    out["batch4_calls_per_layer"] = probe.count("splash_attention") / model.config.num_hidden_layers
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
