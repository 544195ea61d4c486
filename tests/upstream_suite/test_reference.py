"""Side "upstream"'s outcomes are kept whole, keyed by what they depend on, and read back as a run."""

from __future__ import annotations

import json

import pytest

from tools.upstream_suite import reference
from tools.upstream_suite.run import read_side

pytestmark = pytest.mark.kernels_ci


def _side(results, site):  # noqa: ANN001, ANN202 - what run_side leaves for side "upstream"
    results.mkdir(parents=True)
    (results / "upstream.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"tokamax": str(site / "tokamax/__init__.py")},
        {"id": "a_test.py::test_one", "outcome": "passed", "reason": ""},
        {"id": "a_test.py::test_two", "outcome": "skipped", "reason": "TPU only"}]))
    (results / "upstream.seconds").write_text("12.0\n")
    (results / "upstream.site").write_text(f"{site}\n")
    (results / "upstream.xml").write_text("<testsuites/>")
    (results / "port.jsonl").write_text("not side upstream's")


def test_a_kept_run_reads_back_in_another_clone(tmp_path):
    first, second = tmp_path / "clone1/results", tmp_path / "clone2/results"
    _side(first, tmp_path / "clone1/upstream-site")
    reference.store(tmp_path / "cache", "k1", first, "upstream")
    entry = reference.restore(tmp_path / "cache", "k1", second)
    assert entry is not None and not (second / "port.jsonl").exists()
    run = read_side("upstream", tmp_path / "clone2/upstream-site", second, wrappers=False)
    assert run.outcomes == {"a_test.py::test_one": ("passed", ""), "a_test.py::test_two": ("skipped", "TPU only")}
    assert run.seconds == 12.0
    assert reference.restore(tmp_path / "cache", "other-key", tmp_path / "clone3") is None


def test_an_unfinished_entry_is_not_read(tmp_path):
    entry = tmp_path / "cache/suite-upstream-k1"
    entry.mkdir(parents=True)
    (entry / "upstream.jsonl").write_text("")  # no "complete" marker: a store that did not finish
    assert reference.restore(tmp_path / "cache", "k1", tmp_path / "results") is None


def test_the_key_follows_the_sdist_the_venv_and_the_environment(monkeypatch):
    files = {"ops/a_test.py": b"def test(): pass\n"}
    base = reference.key("/usr/bin/python3", files, everything=False)
    assert base == reference.key("/usr/bin/python3", dict(files), everything=False)
    assert base != reference.key("/usr/bin/python3", {"ops/a_test.py": b"def test(): assert 0\n"}, everything=False)
    assert base != reference.key("/usr/bin/python3", files, everything=True)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    assert base != reference.key("/usr/bin/python3", files, everything=False)


def test_the_key_tells_venvs_of_one_python_apart(tmp_path):
    """Two venvs of one interpreter (other pins) link to the same base python: the key must not resolve it."""
    import sys

    keys = set()
    for name in ("upstream-aaaa", "upstream-bbbb"):
        (tmp_path / name / "bin").mkdir(parents=True)
        (tmp_path / name / "bin/python").symlink_to(sys.executable)
        keys.add(reference.key(str(tmp_path / name / "bin/python"), {}, everything=False))
    assert len(keys) == 2


def test_off_means_no_cache(monkeypatch):
    monkeypatch.setenv("TOKAMAX_REFERENCES", "off")
    assert reference.cache_dir() is None
