"""The wheels the chip host needs for `steps` and `trl_steps` that neither torch 2.13, torch-tpu, JAX nor the host's
own package index give it at known versions: transformers, huggingface_hub, TRL, PEFT, accelerate and datasets at
the Torch tiers' pins, and their pure-Python needs, downloaded for CPython 3.11 on manylinux x86_64 (`--no-deps`:
each need is named here) into build/torch-chip/wheels/. `kernels` is not among them: the scripts register the
bundle's attention with transformers themselves (`kernel.register_attention`).

    python3 -m tools.torch_chip.wheels            # here: the pure-Python set (18.3 MB, 21 wheels)
    python3 -m tools.torch_chip.wheels --binary   # also tokenizers, safetensors, regex, xxhash, psutil (about +6 MB)

The binary needs come from the host's index where it has them (its versions unknown: `--binary` carries ours, for a
host whose index is older than transformers 5.22.2 accepts). On the chip host, with build/torch-chip/wheels carried:

    PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --no-cache-dir --target /tmp/site-host \\
        --index-url file:///opt/pypi/simple tokenizers safetensors regex pyyaml tqdm numpy pandas pyarrow xxhash \\
        psutil jinja2 requests || echo "host index: some packages missing (see above)"
    PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile \\
        --no-cache-dir --upgrade --target /tmp/site build/torch-chip/wheels/*.whl || exit
    export PYTHONPATH=$PYTHONPATH:/tmp/site:/tmp/site-host   # ours first: transformers 5.22.2 over the host's
    python3 -c "import transformers, trl, peft, accelerate, datasets; print(transformers.__version__, trl.__version__)"

(JAX and torch stay the machine's: both folders come after them on the path, and neither holds them.)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "build/torch-chip/wheels"
# the pins: the 3.11 Torch tier's, then the 3.12 tier's (TRL, PEFT, accelerate and datasets are there only)
PIN_FILES = (REPO / "requirements/torch-tier-py311.txt", REPO / "requirements/torch-tier.txt")

PURE = (
    "transformers", "huggingface_hub", "trl", "peft", "accelerate", "datasets",
    # huggingface_hub's: its HTTP client (httpcore2 2.16 imports truststore) and CLI
    "httpx2", "httpcore2", "truststore", "h11", "anyio", "idna", "certifi", "click", "filelock", "fsspec",
    "typing_extensions",
    # transformers' CLI (typer), datasets' serialisation
    "typer", "shellingham", "annotated-doc", "dill", "multiprocess",
)
BINARY = ("tokenizers", "safetensors", "regex", "xxhash", "psutil")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
LIMIT_MB = 20.0


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    """name (normalised) -> version, the first pin file naming it winning."""
    out: dict[str, str] = {}
    for path in PIN_FILES:
        for line in path.read_text().splitlines():
            match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)", line)
            if match:
                out.setdefault(_normal(match.group(1)), match.group(2))
    return out


def download(names: tuple[str, ...], out: Path = OUT) -> list[Path]:
    """`names` at their pins into `out` (CPython 3.11, manylinux x86_64, wheels only, no dependencies)."""
    versions = pins()
    missing = [n for n in names if _normal(n) not in versions]
    if missing:
        raise SystemExit(f"tools.torch_chip.wheels: no pin for {missing} in {[str(p) for p in PIN_FILES]}")
    out.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
               "3.11", "--implementation", "cp", *platforms, "-d", str(out),
               *(f"{n}=={versions[_normal(n)]}" for n in names)]
    subprocess.run(command, check=True)
    return sorted(out.glob("*.whl"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools.torch_chip.wheels")
    parser.add_argument("--binary", action="store_true", help="also the compiled needs (tokenizers, safetensors, ...)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    for old in args.out.glob("*.whl") if args.out.exists() else ():
        old.unlink()  # one version of each: two stop the whole install there
    wheels = download(PURE + (BINARY if args.binary else ()), args.out)
    total = sum(w.stat().st_size for w in wheels) / 1e6
    for w in wheels:
        print(f"{w.stat().st_size / 1e6:7.2f} MB  {w.name}")
    print(f"{total:7.2f} MB  total in {args.out} ({len(wheels)} wheels; limit {LIMIT_MB:.0f} MB)")
    return 0 if total <= LIMIT_MB else 1


if __name__ == "__main__":
    sys.exit(main())
