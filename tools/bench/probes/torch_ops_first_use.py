"""Probe (Torch tier): in a cold process, the cost of the first `tokamax.torch_ops` access, which imports
every op family and registers its custom ops, after `get_kernel` (which imports neither).

    python torch_ops_first_use.py VARIANT_DIR
Prints JSON: milliseconds for get_kernel and for the first torch_ops access, and the op count.
"""

import json
import os
import sys
import time

os.environ["LOCAL_KERNELS"] = f"kernels-community/tokamax={sys.argv[1]}"
import torch  # noqa: E402, F401  (torch-tpu loads with it; not part of either figure)

start = time.perf_counter()
import kernels  # noqa: E402

kernel = kernels.get_kernel("kernels-community/tokamax", version=1)
loaded = time.perf_counter()
ops = kernel.torch_ops
used = time.perf_counter()
print(json.dumps({"get_kernel_ms": (loaded - start) * 1e3, "torch_ops_ms": (used - loaded) * 1e3,
                  "custom_ops": sum(1 for name in ops.__all__ if name.endswith("_op")),
                  "families": len(ops.families)}))
