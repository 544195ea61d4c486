"""`tokamax.tuning.tune`'s files are written whole or not at all: a write that fails part way (here the
process's file-size limit, as a full disk would) leaves the file that was there, or none, never part of
the new one. Both writers: the result file (`tune_recording(out=...)`) and a saved recording."""

from __future__ import annotations

import contextlib
import resource
import signal
from collections.abc import Iterator

import pytest

LIMIT = 16  # bytes: shorter than either file, so the write stops part way


@contextlib.contextmanager
def _file_size_limit(limit: int) -> Iterator[None]:
    """Writes past `limit` bytes fail with EFBIG (SIGXFSZ ignored) within the block."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def _tune(kernel, out):  # noqa: ANN001, ANN202
    return kernel.tuning.tune_recording(kernel.tuning.Recording([]), out=out, chip="v6e", progress_bar=False)


def _save(kernel, out):  # noqa: ANN001, ANN202
    return kernel.tuning.Recording([]).save(out)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("write", [_tune, _save], ids=["result", "recording"])
def test_a_failed_write_leaves_the_old_file(kernel, tmp_path, write):
    path = tmp_path / "out.json"
    old = '{"the": "file that was there before"}'
    path.write_text(old)
    with _file_size_limit(LIMIT), pytest.raises(OSError, match=r"tokamax tuning: .*cannot write .*out\.json "
                                                               r"\(File too large\); the file there is unchanged"):
        write(kernel, path)
    assert path.read_text() == old
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary file left behind


@pytest.mark.kernels_ci
@pytest.mark.parametrize("write", [_tune, _save], ids=["result", "recording"])
def test_a_failed_write_leaves_no_file(kernel, tmp_path, write):
    with _file_size_limit(LIMIT), pytest.raises(OSError):
        write(kernel, tmp_path / "out.json")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.kernels_ci
@pytest.mark.parametrize("write", [_tune, _save], ids=["result", "recording"])
def test_a_write_that_succeeds_replaces_the_file(kernel, tmp_path, write):
    path = tmp_path / "out.json"
    path.write_text("old")
    write(kernel, path)
    assert path.read_text().startswith("{") and [p.name for p in tmp_path.iterdir()] == ["out.json"]
