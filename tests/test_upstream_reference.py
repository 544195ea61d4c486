"""The upstream side's reports are reused only while every file they depend on is unchanged."""

from __future__ import annotations

import json
import sys

import pytest

from tests import upstream_reference

pytestmark = pytest.mark.kernels_ci


@pytest.fixture()
def repo(tmp_path, monkeypatch):
    """A stand-in repo: a script importing a helper module, with a counter of its runs."""
    root = tmp_path / "repo"
    (root / "side").mkdir(parents=True)
    (root / "helpers.py").write_text("VALUE = 1\n")
    (root / "side/script.py").write_text(
        "import json, sys\nfrom pathlib import Path\nsys.path.insert(0, str(Path(__file__).parents[1]))\n"
        "import helpers\nruns = Path(sys.argv[1]); runs.write_text(runs.read_text() + 'x')\n"
        "Path(sys.argv[-1]).write_text(json.dumps({'value': helpers.VALUE, 'input': runs.read_text()[:0]}))\n")
    (root / "runs.txt").write_text("")
    monkeypatch.setattr(upstream_reference, "REPO", root)
    monkeypatch.setenv("TOKAMAX_REFERENCES", str(tmp_path / "cache"))
    return root


def _run(repo, tmp_path) -> tuple[bool, dict]:
    out = tmp_path / "out.json"
    reused = upstream_reference.run(sys.executable, "side/script.py", out, repo / "runs.txt")
    return reused, json.loads(out.read_text())


def test_reused_until_an_imported_file_changes(repo, tmp_path):
    assert _run(repo, tmp_path) == (False, {"value": 1, "input": ""})
    # The input's bytes are part of the key: the counter the script bumps makes each run a new key, so
    # reset it to the bytes the entry was made with.
    (repo / "runs.txt").write_text("")
    assert _run(repo, tmp_path) == (True, {"value": 1, "input": ""})
    assert (repo / "runs.txt").read_text() == "", "a reused report must not run the script"
    (repo / "helpers.py").write_text("VALUE = 2\n")
    assert _run(repo, tmp_path) == (False, {"value": 2, "input": ""})


def test_a_file_beside_the_script_is_a_dependency_too(repo, tmp_path):
    _run(repo, tmp_path)
    (repo / "runs.txt").write_text("")
    (repo / "side/cases.json").write_text("[]")
    assert _run(repo, tmp_path)[0] is False


def test_off_runs_every_time(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("TOKAMAX_REFERENCES", "off")
    for _ in range(2):
        (repo / "runs.txt").write_text("")
        assert _run(repo, tmp_path)[0] is False
    assert not (tmp_path / "cache").exists()


def test_a_failing_script_says_so_and_keeps_nothing(repo, tmp_path):
    (repo / "helpers.py").write_text("raise ValueError('upstream refused')\n")
    with pytest.raises(AssertionError, match="(?s)side/script.py failed in the upstream venv:.*upstream refused"):
        _run(repo, tmp_path)
    assert not list((tmp_path / "cache").glob("*.json"))
