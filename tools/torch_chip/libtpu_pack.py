"""`python3 -m tools.torch_chip.libtpu_pack`: the libtpu torch-tpu asks for, in parts that commands can carry.

torch-tpu 0.2.0 asks for libtpu >= 0.0.50; the chip host has 0.0.42.1, which `host.sh` gets past with a shim. The
bridge's ops run that way, but whole models abort in the compiler (docs/torch-chip.md). This downloads libtpu by
name and version (pip, CPython 3.11, manylinux x86-64), packs its package and dist-info as xz (libtpu.so is 467 MB),
and splits the file into parts of `PART_BYTES` beside a manifest of their sha256 (build/torch-chip/libtpu/). Each
command on a warm host carries one part and the manifest; `host.sh` gathers them in its folder and, once every part
is there, `join`s them (each part's and the whole's hash checked) and puts this libtpu first for the Torch process.

    python3 -m tools.torch_chip.libtpu_pack                 # here: build/torch-chip/libtpu/
    python3 -m tools.torch_chip.libtpu_pack join DIR OUT    # there: DIR's parts into OUT, or the reason not
"""

from __future__ import annotations

import hashlib
import json
import lzma
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "build/torch-chip/libtpu"
VERSION = "0.0.52"
NAME = "libtpu.tar.xz"
MANIFEST = "parts.json"
PART_BYTES = 44 * 2**20
"""A part and the working tree (~7 MB) stay well within one command's carry (64 MiB)."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def split(whole: Path, out: Path, part_bytes: int = PART_BYTES) -> dict:
    """`whole` cut into `out/<name>.NN` parts of at most `part_bytes`, and `out/parts.json` naming each part's and
    the whole's sha256. Written into a fresh folder that replaces `out` at the end: whole or not at all."""
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    parts = []
    with whole.open("rb") as f:
        for i in range(10**3):
            chunk = f.read(part_bytes)
            if not chunk:
                break
            part = staging / f"{whole.name}.{i:02d}"
            part.write_bytes(chunk)
            parts.append({"file": part.name, "sha256": hashlib.sha256(chunk).hexdigest(), "bytes": len(chunk)})
    manifest = {"whole": whole.name, "sha256": _sha256(whole), "bytes": whole.stat().st_size, "parts": parts}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    if out.exists():
        shutil.rmtree(out)
    staging.replace(out)
    return manifest


def join(parts: Path, out: Path) -> Path:
    """The parts in `parts` (with their manifest) joined into `out`, each part's hash and the whole's checked;
    refuses, naming what is missing or wrong, and leaves no `out` behind."""
    manifest = json.loads((parts / MANIFEST).read_text())
    missing = [p["file"] for p in manifest["parts"] if not (parts / p["file"]).exists()]
    if missing:
        raise FileNotFoundError(f"libtpu_pack join: {len(missing)} of {len(manifest['parts'])} parts not carried "
                                f"yet: {', '.join(missing)}")
    partial = out.with_name(out.name + ".part")
    with partial.open("wb") as whole:
        for p in manifest["parts"]:
            data = (parts / p["file"]).read_bytes()
            if hashlib.sha256(data).hexdigest() != p["sha256"]:
                partial.unlink()
                raise ValueError(f"libtpu_pack join: {p['file']} differs from the manifest's sha256")
            whole.write(data)
    if _sha256(partial) != manifest["sha256"]:
        partial.unlink()
        raise ValueError(f"libtpu_pack join: the joined {manifest['whole']} differs from the manifest's sha256")
    partial.replace(out)
    return out


def pack(out: Path = OUT) -> dict:
    """libtpu `VERSION`'s package and dist-info from its wheel, as xz, split into parts in `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                        "3.11", "--implementation", "cp", "--platform", "manylinux_2_31_x86_64", "-d", tmp,
                        f"libtpu=={VERSION}"], check=True)
        wheel = next(Path(tmp).glob("libtpu-*.whl"))
        whole = Path(tmp) / NAME
        with (zipfile.ZipFile(wheel) as z, lzma.open(whole, "wb", preset=6) as xz,
              tarfile.open(fileobj=xz, mode="w") as tar):
            for info in z.infolist():
                if info.is_dir():
                    continue
                entry = tarfile.TarInfo(info.filename)
                entry.size, entry.mode = info.file_size, 0o755 if info.filename.endswith(".so") else 0o644
                with z.open(info) as f:
                    tar.addfile(entry, f)
        return split(whole, out)


def main(argv: list[str]) -> int:
    if argv[:1] == ["join"]:
        try:
            print(join(Path(argv[1]), Path(argv[2])))
        except (FileNotFoundError, ValueError) as e:
            print(e, file=sys.stderr)
            return 1
        return 0
    manifest = pack()
    print(f"{OUT.relative_to(REPO)}: libtpu {VERSION}, {manifest['bytes'] / 2**20:.1f} MiB in "
          f"{len(manifest['parts'])} parts; carry one part and {MANIFEST} per command")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
