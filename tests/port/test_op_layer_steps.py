"""The two recipe ops the Op layer needs: PEP 695 rewriting and compact autotuning tables."""

from __future__ import annotations

import json

import pytest

from tools.porter import tables
from tools.porter.errors import PortError
from tools.porter.typeparams import strip_type_params

SOURCE = b'''"""Doc."""
import abc
from typing import Any, override

type Alias = list[int]


class Op[**P, T, K: int](abc.ABC):
    @override
    def f[U](self, x: U) -> T: ...


class Sub[C](Op[..., C, int]):
    pass


def g[*Ts](*args: *tuple[*Ts]) -> Any: ...
'''


@pytest.mark.kernels_ci
def test_pep695_becomes_python_311_that_still_subscripts():
    out, sites = strip_type_params(SOURCE, "m.py")
    assert sites == 8  # alias, import, f, g, and for Op and Sub: brackets out, Generic in
    text = out.decode()
    assert "class Op(abc.ABC, _typing_pep695.Generic[P, T, K]):" in text
    assert "class Sub(Op[..., C, int], _typing_pep695.Generic[C]):" in text
    assert "Alias = list[int]" in text and "type Alias" not in text
    assert "from typing import Any\n" in text
    namespace: dict = {}
    exec(compile(out, "m.py", "exec"), namespace)  # noqa: S102 - our own snippet
    assert namespace["Sub"][int] is not None and namespace["Alias"] == list[int]


@pytest.mark.kernels_ci
def test_a_type_parameter_shadowing_a_module_name_is_refused():
    with pytest.raises(PortError, match="shadows a module-level name"):
        strip_type_params(b"T = 1\nclass C[T]:\n    pass\n", "m.py")


@pytest.mark.kernels_ci
def test_compact_table_keeps_the_fastest_median_first_on_ties_and_empty_entries():
    key_a, key_b = json.dumps({"x": "bf16[8]"}), json.dumps({"x": "f32[8]"})
    table = {key_a: {json.dumps({"tile": 1}): {"evaluation_times_ms": [3.0, 1.0, 9.0]},
                     json.dumps({"tile": 2}): {"evaluation_times_ms": [2.0, 2.0, 2.0]},
                     json.dumps({"tile": 3}): {"evaluation_times_ms": [2.0, 1.0, 3.0]}},
             key_b: {}}
    out = json.loads(tables.compact(json.dumps(table).encode()))
    assert out["format"] == tables.FORMAT
    assert out["entries"] == [[{"x": "bf16[8]"}, {"tile": 2}, {"evaluation_times_ms": [2.0, 2.0, 2.0]}],
                              [{"x": "f32[8]"}, None, None]]


@pytest.mark.kernels_ci
def test_compact_table_refuses_what_is_not_a_table():
    with pytest.raises(KeyError):
        tables.compact(json.dumps({"{}": {"{}": {"times": [1]}}}).encode())


@pytest.mark.kernels_ci
def test_a_generic_type_alias_loses_its_parameters_and_declares_them():
    """`type Ret[T] = ...` (upstream's benchmarking) becomes a plain alias with T a module TypeVar."""
    text = b"import typing\ntype Ret[T] = T | tuple[T, int]\n"
    out, changed = strip_type_params(text, "m.py")
    assert changed and b"Ret = T | tuple[T, int]" in out and b'T = _typing_pep695.TypeVar("T")' in out
    namespace: dict = {}
    exec(compile(out, "m.py", "exec"), namespace)  # noqa: S102 - our own rewritten snippet
    assert namespace["Ret"].__args__[0] is namespace["T"]  # a real alias over the declared TypeVar
