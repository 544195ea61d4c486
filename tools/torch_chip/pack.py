"""`python3 -m tools.torch_chip.pack`: torch-tpu 0.2.0 for the chip host, as one file a command can carry.

Its wheel (96 MB) is larger than what one command takes to the host; it holds glue for torch 2.11 to 2.15, and the
host runs torch 2.13. This downloads the wheel by name and version (pip, for CPython 3.11 on manylinux x86-64),
keeps torch 2.13's glue and what every version shares, and writes build/torch-chip/torch_tpu.tar.xz (~41 MB; a few
minutes of xz), which `host.sh` unpacks there; and the one need of torch-tpu the host's index lacks (portpicker) in
build/torch-chip/tpu-deps."""

from __future__ import annotations

import lzma
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "build/torch-chip/torch_tpu.tar.xz"
DEPS = REPO / "build/torch-chip/tpu-deps"
NEEDS = ("portpicker==1.6.0",)
VERSION = "0.2.0"
TORCH = "2_13_0"
_GLUE = re.compile(r"_(2_\d+_0)(?=[._/])")


def kept(name: str) -> bool:
    """Whether a file of the wheel is needed beside torch 2.13: glue built for another torch is not."""
    versions = set(_GLUE.findall(name))
    return not versions or versions == {TORCH}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                        "3.11", "--implementation", "cp", "--platform", "manylinux_2_31_x86_64", "-d", tmp,
                        f"torch-tpu=={VERSION}"], check=True)
        wheel = next(Path(tmp).glob("torch_tpu-*.whl"))
        OUT.parent.mkdir(parents=True, exist_ok=True)
        part = OUT.with_suffix(".part")
        with (zipfile.ZipFile(wheel) as z, lzma.open(part, "wb", preset=9) as xz,
              tarfile.open(fileobj=xz, mode="w") as tar):
            for info in z.infolist():
                if info.is_dir() or not kept(info.filename):
                    continue
                entry = tarfile.TarInfo(info.filename)
                entry.size, entry.mode = info.file_size, 0o755 if info.filename.endswith(".so") else 0o644
                with z.open(info) as f:
                    tar.addfile(entry, f)
        part.replace(OUT)  # whole or not at all
    # torch-tpu's needs the host's index lacks (host.sh installs the rest from that index)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(DEPS),
                    *NEEDS], check=True)
    print(f"{OUT.relative_to(REPO)}: {OUT.stat().st_size / 2**20:.1f} MiB; {DEPS.relative_to(REPO)}: {NEEDS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
