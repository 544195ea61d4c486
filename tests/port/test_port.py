"""The port end to end: determinism, the pinned lock, drift, tampering, and no half-written tree."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from tests.conftest import CACHE, LOCK, RECIPE
from tests.port.helpers import edit, unpack
from tools.porter import tree as tree_lib
from tools.porter.__main__ import main as port_main
from tools.porter.errors import PortError
from tools.porter.port import build, check_lock

pytestmark = pytest.mark.kernels_ci


@pytest.fixture(scope="session")
def tokamax_source(artifact_paths, tmp_path_factory) -> Path:
    """The tokamax sdist unpacked once; tests copy it before editing."""
    return unpack(artifact_paths["tokamax"], "sdist", tmp_path_factory.mktemp("tokamax-src"))


@pytest.fixture
def source_copy(tokamax_source, tmp_path) -> Path:
    return Path(shutil.copytree(tokamax_source, tmp_path / "tokamax-0.0.17"))


def _port(tmp_path: Path, *extra: str, out: Path | None = None, capsys=None) -> tuple[int, str]:
    out = out or tmp_path / "out"
    code = port_main(["--out", str(out), "--cache", str(CACHE), *extra])
    err = capsys.readouterr().err if capsys else ""
    return code, err


def test_two_runs_give_identical_bytes_and_the_pinned_digest(artifact_paths, tmp_path):
    first, second = build(RECIPE, CACHE), build(RECIPE, CACHE)
    assert first.tree == second.tree
    assert first.digest == json.loads(LOCK.read_text())["tree_digest"]
    check_lock(first, LOCK)
    assert port_main(["--out", str(tmp_path / "a"), "--cache", str(CACHE)]) == 0
    assert port_main(["--out", str(tmp_path / "b"), "--cache", str(CACHE)]) == 0
    assert tree_lib.read_tree(tmp_path / "a") == tree_lib.read_tree(tmp_path / "b") == first.tree


def test_provenance_names_recipe_artifacts_and_digest(artifact_paths):
    result = build(RECIPE, CACHE)
    record = json.loads(result.tree["PROVENANCE.json"])
    assert record["tree_digest"] == result.digest
    assert {(a["package"], a["version"], a["sha256"]) for a in record["artifacts"]} == {
        ("tokamax", "0.0.17", "1d20c3d6c5cae4ddf2f09245adf8b35fc5b3c26997b34a4e4b3322d597aa6271"),
        ("qwix", "0.1.8", "0f4686f7f10a1168787fac4fbaf4d9883bcb8f78a01f2ff1cd3834d39f859b12"),
        ("immutabledict", "4.3.1", "c9facdc0ff30fdb8e35bd16532026cac472a549e182c94fa201b51b25e4bf7bf"),
        ("einshape", "1.0", "42da4c2dea3a27f87ee45a7cee5072a636b97cb184bb07bf5d6412ba0ff7b965"),
    }


def test_offline_dir_mode_gives_the_same_tree(artifact_paths, tokamax_source, tmp_path):
    qwix = unpack(artifact_paths["qwix"], "wheel", tmp_path / "qwix")
    online = build(RECIPE, CACHE)
    offline = build(RECIPE, tmp_path / "empty-cache", {"tokamax": tokamax_source, "qwix": qwix,
                                                       "immutabledict": unpack(artifact_paths["immutabledict"],
                                                                               "wheel", tmp_path / "imd")})
    assert offline.digest == online.digest
    assert {p: d for p, d in offline.tree.items() if p != "PROVENANCE.json"} == {
        p: d for p, d in online.tree.items() if p != "PROVENANCE.json"}


def test_injected_dependency_import_fails_naming_op_file_and_pattern(source_copy, capsys, tmp_path):
    """pydantic, jaxtyping and absl (stand-ins), qwix, immutabledict and einshape (vendored) are
    remapped; any other package upstream needs stops the port."""
    reference = source_copy / "tokamax/_src/ops/topk/reference.py"
    edit(reference, "import functools\n", "import functools\nimport tqdm\n")
    code, err = _port(tmp_path, "--dir", f"tokamax={source_copy}", capsys=capsys)
    assert code == 1
    assert "`expect`" in err and "`tqdm`" in err
    assert "_src/ops/topk/reference.py:" in err


def test_changed_patched_line_fails_naming_op_file_and_pattern(source_copy, capsys, tmp_path):
    kernel = source_copy / "tokamax/_src/ops/gmm_v2/tgmm_v2.py"
    edit(kernel, "config.disable_multi_core_mode.value", "config.disable_multi_core.value")
    code, err = _port(tmp_path, "--dir", f"tokamax={source_copy}", capsys=capsys)
    assert code == 1
    assert "`replace`" in err and "'config.disable_multi_core_mode.value'" in err
    assert "found 2 times, the recipe pins 3" in err and "_src/ops/gmm_v2/tgmm_v2.py: 2" in err


def test_missing_kernel_file_fails_naming_the_glob(source_copy, capsys, tmp_path):
    (source_copy / "tokamax/_src/ops/mhc/post_kernel.py").unlink()
    code, err = _port(tmp_path, "--dir", f"tokamax={source_copy}", capsys=capsys)
    assert code == 1
    assert "`prune`" in err and "`_src/ops/mhc/post_kernel.py` matches no file" in err


def test_tampered_artifact_fails_on_its_hash_and_leaves_the_tree_alone(artifact_paths, capsys, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(CACHE, cache)
    out = tmp_path / "out"
    assert port_main(["--out", str(out), "--cache", str(cache)]) == 0
    before = tree_lib.read_tree(out)
    tampered = cache / artifact_paths["qwix"].name
    tampered.write_bytes(tampered.read_bytes() + b"\0")
    capsys.readouterr()
    assert port_main(["--out", str(out), "--cache", str(cache)]) == 1
    err = capsys.readouterr().err
    assert "qwix-0.1.8-py3-none-any.whl has sha256" in err and "the recipe pins 0f4686f7" in err
    assert tree_lib.read_tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "out"]  # no temp dirs left behind


def _evil_sdist(path: Path) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name in ("evil-1.0/evil/__init__.py", "evil-1.0/../../escaped.py"):
            data = b"x = 1\n"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_archive_member_outside_the_target_is_rejected(tmp_path, capsys):
    cache = tmp_path / "cache"
    cache.mkdir()
    _evil_sdist(cache / "evil-1.0.tar.gz")
    sha = tree_lib.hashlib.sha256((cache / "evil-1.0.tar.gz").read_bytes()).hexdigest()
    recipe = tmp_path / "port.kdl"
    recipe.write_text(f'recipe version=1\nsource package="evil" version="1.0" dist="sdist" root="evil" '
                      f'sha256="{sha}"\n')
    with pytest.raises(PortError, match=r"archive member 'evil-1.0/../../escaped.py'"):
        build(recipe, cache)
    assert not (tmp_path.parent / "escaped.py").exists()


def test_check_mode_names_every_file_that_differs(artifact_paths, capsys, tmp_path):
    out = tmp_path / "out"
    assert port_main(["--out", str(out), "--cache", str(CACHE)]) == 0
    (out / "ragged_dot.py").write_text("# edited by hand\n")
    (out / "_src/precision.py").unlink()
    capsys.readouterr()
    assert port_main(["--out", str(out), "--cache", str(CACHE), "--check"]) == 1
    err = capsys.readouterr().err
    assert "changed: ragged_dot.py" in err and "missing: _src/precision.py" in err
    assert (out / "ragged_dot.py").read_text() == "# edited by hand\n"  # check mode writes nothing


def test_tree_that_differs_from_the_lock_is_refused(artifact_paths, capsys, tmp_path):
    lock = json.loads(LOCK.read_text())
    lock["files"]["_src/ops/topk/reference.py"] = "0" * 64
    del lock["files"]["mhc.py"]
    altered = tmp_path / "lock.json"
    altered.write_text(json.dumps(lock))
    out = tmp_path / "out"
    assert port_main(["--out", str(out), "--cache", str(CACHE), "--lock", str(altered)]) == 1
    err = capsys.readouterr().err
    assert "changed: _src/ops/topk/reference.py" in err and "unexpected: mhc.py" in err
    assert not out.exists()
