"""Probe (Torch tier): torch-tpu exports of the fused loss's labels path (`use_fused_loss`, transformers'
`ForCausalLMLoss` on the kernel) over 20 dynamically padded batches (4 rows of 30 to 700 tokens, meta
tensors, bf16, hidden 128, vocabulary 384), forward and backward, counted with torch-tpu's own invocation
keys (tests/torch/export_probe.py), against the buckets those token counts fall in and the distinct
token counts (one export each without buckets). Plain cross-entropy and with z-loss (our LM-head
kernels). Prints JSON.

    python labels_exports.py VARIANT_DIR
"""

import importlib
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

BATCHES, HIDDEN, VOCAB = 20, 128, 384


def main() -> int:
    os.environ["LOCAL_KERNELS"] = f"kernels-community/tokamax={sys.argv[1]}"
    import kernels

    from tests.torch.export_probe import ExportProbe

    tokamax = kernels.get_kernel("kernels-community/tokamax", version=1)
    namespace = importlib.import_module(f"{tokamax.__name__}._ops")._OPS_NAME
    causal = importlib.import_module(f"{tokamax.__name__}.integrations.transformers.loss.causal_lm")
    r = np.random.default_rng(0)
    shapes = [(4, int(r.integers(30, 700))) for _ in range(BATCHES)]
    counts = {rows * length for rows, length in shapes}
    out = {"batches": BATCHES, "token_counts": len(counts), "buckets": len({tokamax.splash.bucket(n) for n in counts})}
    weight = torch.empty(VOCAB, HIDDEN, device="meta", dtype=torch.bfloat16, requires_grad=True)
    for name, options in (("cross_entropy", None), ("z_loss", causal.LossOptions(z_loss=1e-4))):
        with ExportProbe(namespace) as probe:
            for rows, length in shapes:
                hidden = torch.empty(rows, length, HIDDEN, device="meta", dtype=torch.bfloat16, requires_grad=True)
                labels = torch.zeros(rows, length, device="meta", dtype=torch.int64)
                causal.causal_lm_loss(hidden, weight, labels, options=options).backward()
        out[name] = probe.exports()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
