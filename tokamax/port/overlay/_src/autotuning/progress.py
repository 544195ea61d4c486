"""The autotuner's progress bar: tqdm's where it is installed (`kernels` installs it), else none.

tqdm is imported on first use, so that nothing beyond JAX is needed to load or run the kernel.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any


def bar(iterable: Iterable[Any], **kwargs: Any) -> Iterable[Any]:
    """`tqdm.tqdm(iterable, **kwargs)`, or `iterable` itself when tqdm is not installed."""
    try:
        tqdm = importlib.import_module("tqdm")
    except ImportError:
        return iterable
    return tqdm.tqdm(iterable, **kwargs)
