"""What makes the vendored `QArray` take qwix's own.

Users of qwix (MaxText and others) hold weights quantized as `qwix.QArray`; upstream's ops take
them. The vendored class's `isinstance` also holds for qwix's own QArray (recognised by its class,
without importing qwix), so every op that takes a vendored QArray takes qwix's with the same fields
(qvalue, scale, zero_point, qtype) and the same pytree, and gives the same results."""

from __future__ import annotations

from typing import Any


class QwixQArrays(type):
    """Metaclass of the vendored QArray: instances of qwix's `QArray` count as its instances."""

    def __instancecheck__(cls, obj: Any) -> bool:
        if type.__instancecheck__(cls, obj):
            return True
        kind = type(obj)
        return kind.__name__ == "QArray" and kind.__module__.split(".")[0] == "qwix"
