"""The recipe reader's checks and the import rewriter, on small inputs written here."""

from __future__ import annotations

import pytest

from tools.porter import imports
from tools.porter.errors import PortError
from tools.porter.globs import matches
from tools.porter.recipe import load_recipe

pytestmark = pytest.mark.kernels_ci

SHA = "0" * 64


def _recipe(tmp_path, body: str):
    path = tmp_path / "port.kdl"
    path.write_text("recipe version=1\n" + body)
    return load_recipe(path)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('frobnicate in="x"\n', "unknown op `frobnicate`"),
        ('replace in="x" find="a" with="b"\n', "missing properties ['count']"),
        ('replace in="x" find="a" with="b" count="1"\n', "property count must be int"),
        ('delete in="x" whence="y"\n', "unknown properties ['whence']"),
        ('expect in="x" count=0\n', "exactly one of find= or imports="),
        (f'source package="a" version="1" dist="egg" root="a" sha256="{SHA}"\n', "dist must be one of"),
        ('delete "x"\n', "takes properties only"),
        ('delete in="x"\n', "exactly one `source` step"),
    ],
)
def test_bad_recipes_fail_naming_the_step(tmp_path, body, message):
    with pytest.raises(PortError, match="step|source") as info:
        _recipe(tmp_path, body)
    assert message in str(info.value)


def test_header_and_syntax_are_checked(tmp_path):
    path = tmp_path / "port.kdl"
    path.write_text('recipe version=2\n')
    with pytest.raises(PortError, match="first node must be `recipe version=1`"):
        load_recipe(path)
    path.write_text('recipe version=1\ndelete in="x\n')
    with pytest.raises(PortError, match="not valid KDL"):
        load_recipe(path)


def test_globs_do_not_cross_directories():
    assert matches("_src/*.py", "_src/precision.py")
    assert not matches("_src/*.py", "_src/ops/x.py")
    assert matches("**/*.py", "a.py") and matches("**/*.py", "a/b/c.py")


def test_relativize_handles_from_nested_and_aliased_imports():
    src = (b"from tokamax._src import precision as p\n"
           b"def f():\n    from tokamax._src.ops.x import (\n        a,\n        b,\n    )\n"
           b"import tokamax._src.mosaic_tpu as common\n"
           b"s = 'from tokamax._src import not_an_import'\n")
    out, count = imports.relativize(src, "_src/ops/y/k.py", "tokamax")
    assert count == 3
    assert out == (b"from ... import precision as p\n"
                   b"def f():\n    from ..x import (\n        a,\n        b,\n    )\n"
                   b"from ... import mosaic_tpu as common\n"
                   b"s = 'from tokamax._src import not_an_import'\n")


def test_relativize_refuses_an_unaliased_dotted_import():
    with pytest.raises(PortError, match="cannot be made relative"):
        imports.relativize(b"import tokamax._src.x\n", "a.py", "tokamax")


def test_remap_module_keeps_the_bound_name():
    out, count = imports.remap_module(b"import qwix\nfrom qwix._src import core\nimport qwixy\n", "m.py", "qwix",
                                      "tokamax._vendor.qwix")
    assert count == 2
    assert out == b"from tokamax._vendor import qwix\nfrom tokamax._vendor.qwix._src import core\nimport qwixy\n"


def test_keep_definitions_keeps_named_defs_verbatim():
    src = b'"""Doc."""\nimport a\n\n@deco\nclass Op:\n    pass\n\nX = 1\n\ndef f():\n    return X\n'
    kept = imports.keep_definitions(src, "m.py", {"X", "f"})
    assert kept == b'"""Doc."""\nimport a\n\n\nX = 1\n\ndef f():\n    return X\n'
    with pytest.raises(PortError, match=r"no top-level definition of \['g'\]"):
        imports.keep_definitions(src, "m.py", {"g"})


def test_find_imports_sees_nested_and_submodule_imports():
    src = b"import os\ndef f():\n    import absl.flags\nfrom absl import app\nimport absl_like\n"
    assert imports.find_imports(src, "m.py", "absl") == [3, 4]
