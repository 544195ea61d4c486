"""The libtpu parts a chip command carries one at a time (`tools.torch_chip.libtpu_pack`): split and joined back
byte for byte, and a missing or altered part refused by name with nothing half-written left."""

from __future__ import annotations

import json
import os

import pytest

from tools.torch_chip import libtpu_pack


@pytest.fixture
def whole(tmp_path):
    path = tmp_path / "libtpu.tar.xz"
    path.write_bytes(os.urandom(1000))
    return path


@pytest.mark.kernels_ci
def test_the_parts_join_back_into_the_same_bytes(whole, tmp_path):
    manifest = libtpu_pack.split(whole, tmp_path / "parts", part_bytes=300)
    assert [p["bytes"] for p in manifest["parts"]] == [300, 300, 300, 100]
    assert json.loads((tmp_path / "parts" / libtpu_pack.MANIFEST).read_text()) == manifest
    joined = libtpu_pack.join(tmp_path / "parts", tmp_path / "joined")
    assert joined.read_bytes() == whole.read_bytes()


def _altered(part):  # noqa: ANN001, ANN202
    data = bytearray(part.read_bytes())
    data[7] ^= 1
    part.write_bytes(bytes(data))


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("name", "change", "error", "says"), [
    ("libtpu.tar.xz.02", lambda part: part.unlink(), FileNotFoundError,
     r"1 of 4 parts not carried yet: libtpu\.tar\.xz\.02"),
    ("libtpu.tar.xz.01", _altered, ValueError, r"libtpu\.tar\.xz\.01 differs"),
], ids=["missing", "altered"])
def test_a_missing_or_altered_part_is_named_and_nothing_is_written(whole, tmp_path, name, change, error, says):
    libtpu_pack.split(whole, tmp_path / "parts", part_bytes=300)
    change(tmp_path / "parts" / name)
    with pytest.raises(error, match=says):
        libtpu_pack.join(tmp_path / "parts", tmp_path / "joined")
    assert not list(tmp_path.glob("joined*"))


@pytest.mark.kernels_ci
def test_splitting_again_replaces_the_old_parts(whole, tmp_path):
    libtpu_pack.split(whole, tmp_path / "parts", part_bytes=100)
    libtpu_pack.split(whole, tmp_path / "parts", part_bytes=500)
    assert sorted(p.name for p in (tmp_path / "parts").iterdir()) == [
        "libtpu.tar.xz.00", "libtpu.tar.xz.01", libtpu_pack.MANIFEST]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left
