"""The temporaries a compiled call holds as the chip's compiler assigns its buffers (what the runtime reserves),
read from XLA's buffer-assignment dump: `memory_analysis()` can say more than that on the v5e (Gemma 3 4B's
stored statistics: 16.0 GiB there, 12.0 assigned, and the call ran on the chip's 15.75 GiB), so the benchmark
records both.

`configure()` must run before JAX starts its backend (it sets XLA_FLAGS); each call's function is compiled
under a name of its own (`named`) so that its module's dump is found and removed after reading."""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

_DUMP = Path(tempfile.gettempdir()) / f"tokamax-chip-dump-{os.getpid()}"
_TEMP = re.compile(r"^allocation \d+: size (\d+), preallocated-temp", re.M)


def configure() -> None:
    """Asks XLA to dump each module's buffer assignment (only that: no HLO passes) under a private folder."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "--xla_dump_to" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_dump_to={_DUMP} --xla_dump_hlo_pass_re=^$".strip()


def named(fn: Callable[..., Any], index: int) -> Callable[..., Any]:
    """`fn` under the name `chip_<index>`: its module is `jit_chip_<index>`."""
    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        return fn(*args)
    call.__name__ = call.__qualname__ = f"chip_{index}"
    return call


def temp_bytes(index: int) -> int | None:
    """The default memory space's preallocated temporaries of `named(..., index)`'s module (None where XLA dumped
    no buffer assignment for it), its dump files removed."""
    files = sorted(_DUMP.glob(f"*.jit_chip_{index}.*"))
    found = [f for f in files if f.name.endswith("buffer-assignment.txt")]
    total = sum(int(m) for m in _TEMP.findall(found[-1].read_text())) if found else None
    for f in files:
        shutil.rmtree(f) if f.is_dir() else f.unlink()
    return total
