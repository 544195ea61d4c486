"""A test kernel that depends on kernels-community/tokamax, the way other TPU kernels do."""

import kernels

# Only valid while this kernel's __init__ runs: kernels resolves it from metadata.json's kernel-depends.
tokamax = kernels.get_kernel_dep("kernels-community/tokamax")


def grouped_matmul(lhs, rhs, group_sizes):  # noqa: ANN001, ANN201
    """Torch tensors in and out: tokamax's ragged dot through its Torch op."""
    return tokamax.torch_ops.gmm(lhs, rhs, group_sizes)
