"""Whole-module comparison of two lowerings: what is normalised, and nothing else.

Normalised: source locations (`loc(...)` and `#loc` lines, and the `debug_locations` a Mosaic
custom call carries as base64, all of which name source files and lines), and the
package path in the Op-class name upstream's profiling payload records (`tokamax._src...` there,
`<kernel id>._ported._src...` here). Each Mosaic body (base64 bytecode, tens of KiB) is replaced
by its sha256, so bodies are still compared, byte for byte, through their hashes. Everything else
(ops, shapes, constants, the custom calls' whole backend configs with VMEM limits, flags and cost
estimates, and the payload's config and arguments) must be equal.
"""

from __future__ import annotations

import hashlib
import re

_BODY = re.compile(r'(\\22body\\22: \\22)([A-Za-z0-9+/=]+)(\\22)')
_LOC_ATTR = re.compile(r" loc\((?:[^()]|\([^()]*\))*\)")
_LOC_LINE = re.compile(r"^#loc.*$\n?", re.M)
_DEBUG_LOCATIONS = re.compile(r'(\\22debug_locations\\22: \\22)[A-Za-z0-9+/=]*(\\22)')
_OP_TYPE = re.compile(r"(\\22__type\\22:\\22)[A-Za-z0-9_.]*?(_src\.)")


def normalise(stablehlo: str) -> str:
    """`stablehlo` with locations dropped, Op-class paths rooted at `_src.`, bodies as sha256."""
    text = _LOC_LINE.sub("", stablehlo)
    text = _LOC_ATTR.sub("", text)
    text = _OP_TYPE.sub(r"\1\2", text)
    text = _DEBUG_LOCATIONS.sub(r"\1(locations)\2", text)
    return _BODY.sub(lambda m: m.group(1) + "sha256:" + hashlib.sha256(m.group(2).encode()).hexdigest() + m.group(3),
                     text)


def mosaic_count(normalised: str) -> int:
    """How many Mosaic kernels a normalised module holds."""
    return normalised.count("\\22body\\22: \\22sha256:")
