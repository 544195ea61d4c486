"""The part of qwix 0.1.8 that Tokamax's kernels use, under the names `qwix` gives them."""

from .qarray import QArray, dequantize
from .qarray import quantize_api as quantize

__all__ = ["QArray", "dequantize", "quantize"]
