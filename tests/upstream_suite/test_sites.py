"""The port site: the ported tree as `tokamax` with upstream's tests beside it, built whole or not at all."""

from __future__ import annotations

import pytest

from tests.conftest import PORTED
from tools.upstream_suite import sdist, shims
from tools.upstream_suite.sites import SuiteError, build_port_site, load_selection

pytestmark = pytest.mark.kernels_ci


@pytest.fixture(scope="module")
def upstream_files():
    return sdist.upstream_package()


def test_the_selection_names_sdist_files_and_all_excludes_what_the_port_does_not_ship(upstream_files):
    ci = load_selection(upstream_files, everything=False)
    everything = load_selection(upstream_files, everything=True)
    assert set(ci.files) <= set(everything.files)
    assert not any(f.startswith("experimental/torch_tpu/") or "triton" in f for f in everything.files)
    assert len(everything.files) > 120  # the CPU-host files of 0.0.17: 133


def test_a_shim_resolves_into_the_port_and_names_what_the_port_lacks():
    source = "from tokamax._src.ops.ragged_dot import api as ragged_dot_api\nfrom tokamax._src.gone import thing\n"
    text = shims.shim_source("ops/__init__.py", source, {"_src/ops/ragged_dot/api.py"})
    assert "('tokamax._src.ops.ragged_dot.api', '', 'ragged_dot_api')" in text
    assert "('tokamax._src.gone', 'thing', 'thing')" in text
    namespace: dict = {}
    exec(shims.HELPER, namespace)
    module_globals: dict = {}
    namespace["reexport"]("tokamax.ops", module_globals, [("json", "dumps", "dumps"), ("no_such_mod", "x", "x")])
    assert module_globals["dumps"].__module__ == "json"
    with pytest.raises(AttributeError, match="'x'.*the port lacks it.*No module named 'no_such_mod'"):
        module_globals["__getattr__"]("x")


def test_a_helper_the_port_already_has_is_refused_and_no_site_is_left(upstream_files, tmp_path):
    selection = load_selection(upstream_files, everything=False)
    bad = selection.__class__(selection.tests, (), "", ("_src/ops/op.py",), (), ())  # a port module
    with pytest.raises(SuiteError, match="_src/ops/op.py: listed as a test file or helper, but the port tree has it"):
        build_port_site(PORTED, upstream_files, bad, tmp_path / "site")
    assert list(tmp_path.iterdir()) == []


def test_the_port_site_holds_the_port_and_upstreams_tests(upstream_files, tmp_path):
    selection = load_selection(upstream_files, everything=False)
    site = build_port_site(PORTED, upstream_files, selection, tmp_path / "site")
    package = site / "tokamax"
    assert (package / "_src/ops/op.py").read_bytes() == (PORTED / "_src/ops/op.py").read_bytes()
    assert (package / "_src/ad_test.py").read_bytes() == upstream_files["_src/ad_test.py"]
    assert "re-created over the port" in (package / "ops/__init__.py").read_text()
    assert (site / "wrappers/splash_kernel_interpret_test.py").exists()


def test_a_dropped_family_is_a_stub_that_raises_on_use_and_never_shadows_the_port(upstream_files, tmp_path):
    """Modules of the op families the port drops are importable in the port site (so test files that
    import them collect) and raise, naming why, on any use; a listed module the port has is refused."""
    import subprocess
    import sys

    selection = load_selection(upstream_files, everything=False)
    assert "_src/ops/normalization/api.py" in selection.dropped
    site = build_port_site(PORTED, upstream_files, selection, tmp_path / "site")
    probe = ("from tokamax._src.ops.normalization import api\n"
             "try:\n    from tokamax._src.ops.normalization import triton\n"
             "except ImportError:\n    print('no triton')\n"
             "try:\n    api.IMPLEMENTATIONS\nexcept AttributeError as e:\n    print(e)\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=site, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [
        "no triton", "tokamax._src.ops.normalization.api.IMPLEMENTATIONS: the port drops upstream's op family here "
                     "(a GPU or XLA-only family; this kernel ships the TPU ones)"]
    bad = selection.__class__(selection.tests, (), "", (), (), (), dropped=("_src/ops/ragged_dot/api.py",))
    with pytest.raises(SuiteError, match="_src/ops/ragged_dot/api.py: listed as a dropped module, but the port"):
        build_port_site(PORTED, upstream_files, bad, tmp_path / "site2")
    assert not (tmp_path / "site2").exists()
