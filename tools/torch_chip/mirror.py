"""A pytest plugin for the chip host: every call the Torch tier's op tests make to one of this build's custom ops
on CPU tensors (the JAX function in Pallas TPU interpret mode: the JAX path's answer) is made again on torch-tpu
tensors, and the two answers are compared, so each op family runs on the chip at the inputs its own tests use.

    TORCH_CHIP_MIRROR=DIR/mirror.json python3 -m pytest -p tools.torch_chip.mirror tests/torch/ops ...

- The inputs are copied to the TPU before the CPU call (an op that writes into an input sees the same input on both
  sides); the outputs are compared by relative (Frobenius) error against `tools.chip.check.RELATIVE`, the JAX chip
  check's bound; integer and boolean outputs must be equal.
- A call the CPU refuses (a kernel JAX's interpreter cannot run) is still made on the TPU: its outcome there
  (its figures, or the op's refusal, e.g. a kernel upstream runs on v7x only) is the record.
- At most `PER_OP` calls per op and argument shapes are mirrored (each is a compile on the chip); fake and meta
  tensors, and calls made while torch.compile traces, are left alone.
- The tests' own assertions still run against the CPU answers; the mirror's records are the chip's outcome.
- Where `kernels` is not installed (the chip host), the tests' `get_kernel` gets the bundle loaded as a plain
  package (`tools.chip.load`), which is what `kernels` would load from LOCAL_KERNELS.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # torch-tpu owns the chip; JAX exports for it

import inspect  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from tools.chip.check import RELATIVE  # noqa: E402
from tools.chip.load import BUNDLE, package  # noqa: E402

from .records import open_results, record  # noqa: E402

PER_OP = 3
NAMESPACE = "_tokamax_"  # every build's op namespace starts so (`_ops.add_op_namespace_prefix`)
DEVICE = os.environ.get("TORCH_CHIP_DEVICE", "tpu")  # "cpu": the plumbing checked on a host without a chip


def _kernels_or_bundle() -> None:
    """`kernels.get_kernel` for the tests: the real one, or the bundle as a plain package where it is missing."""
    try:
        import kernels  # noqa: F401
    except ImportError:
        shim = types.ModuleType("kernels")
        shim.get_kernel = lambda *_, **__: package(BUNDLE)  # type: ignore[attr-defined]
        shim.__doc__ = "tools.torch_chip.mirror: no `kernels` on this host; the bundle loaded as a plain package"
        sys.modules["kernels"] = shim


def _tensors(tree: Any) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for x in tree for t in _tensors(x)]
    if isinstance(tree, dict):
        return [t for x in tree.values() for t in _tensors(x)]
    return []


def _moved(tree: Any, device: str) -> Any:
    if isinstance(tree, torch.Tensor):
        return tree.detach().to(device)
    if isinstance(tree, (list, tuple)):
        return type(tree)(_moved(x, device) for x in tree)
    if isinstance(tree, dict):
        return {k: _moved(v, device) for k, v in tree.items()}
    return tree


def _signature(args: tuple, kwargs: dict) -> str:
    return ";".join(f"{tuple(t.shape)}:{str(t.dtype).removeprefix('torch.')}" for t in _tensors((args, kwargs)))


def _batched_rpa_live(args: tuple, outputs: list[torch.Tensor]) -> tuple[list[torch.Tensor], str]:
    """batched_rpa's output rows past the live tokens (`cu_q_lens[distribution[2]]`) are padding the op's contract
    leaves unspecified (upstream's kernel on the chip need not write them; its pure-JAX reference on the CPU does)
    (the JAX tier's case compares the live rows too); the updated cache is compared whole."""
    cu_q_lens, distribution = args[6], args[7]
    live = int(cu_q_lens[int(distribution[2])])
    return [outputs[0][:live], *outputs[1:]], f"out0's first {live} of {outputs[0].shape[0]} rows (the live tokens)"


DEFINED = {"batched_rpa": _batched_rpa_live}
"""Per op, the part of its outputs its contract defines, given the call's (CPU) arguments: what is compared."""


def compare(got: Any, want: Any, op: str = "", args: tuple = ()) -> tuple[bool, str]:
    """The TPU's outputs against the CPU's: (within the bound, a line of figures); where the op's contract leaves
    part of an output unspecified (`DEFINED`), the rest is compared and the line says so."""
    g, w = _tensors(got), _tensors(want)
    scope = ""
    if op in DEFINED and len(g) == len(w):
        (g, _), (w, scope) = DEFINED[op](args, g), DEFINED[op](args, w)
        scope = f"; compared: {scope}"
    if len(g) != len(w):
        return False, f"{len(g)} outputs on the TPU, {len(w)} on the CPU"
    ok, parts = True, []
    for i, (a, b) in enumerate(zip(g, w, strict=True)):
        if a.shape != b.shape:
            ok = False
            parts.append(f"out{i} shape {tuple(a.shape)} vs {tuple(b.shape)}")
        elif b.is_floating_point():
            a64, b64 = a.double(), b.double()
            finite = torch.isfinite(b64)
            same_rest = bool(((a64 == b64) | (a64.isnan() & b64.isnan()))[~finite].all())  # infs and NaNs alike
            a64, b64 = a64[finite], b64[finite]
            diff, size = float(torch.linalg.vector_norm(a64 - b64)), float(torch.linalg.vector_norm(b64))
            err = diff / max(size, 1e-30)
            ok &= same_rest and err <= RELATIVE  # a NaN where the CPU has a number fails (err is NaN)
            # past the bound, the norms too: a reference that is zero in exact arithmetic (a softmax over one key's
            # gradients) has a relative error of rounding noise, which the absolute figures show
            norms = "" if err <= RELATIVE else f" (|tpu - cpu| {diff:.1e}, |cpu| {size:.1e})"
            parts.append(f"out{i} {err:.1e}{norms}" + ("" if same_rest else " (non-finite values differ)"))
        else:
            same = float((a == b).double().mean()) if a.numel() else 1.0
            ok &= same == 1.0
            parts.append(f"out{i} equal {same:.4f}")
    return ok, ", ".join(parts) + f" (bound {RELATIVE:g}){scope}"


class Mirror(TorchDispatchMode):
    def __init__(self, namespace: str, results: Any, test: str) -> None:  # namespace: a prefix
        super().__init__()
        self.namespace, self.results, self.test = namespace, results, test

    def __torch_dispatch__(self, func: Any, types_: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if not str(getattr(func, "namespace", "")).startswith(self.namespace) or torch.compiler.is_compiling():
            return func(*args, **kwargs)
        tensors = _tensors((args, kwargs))
        if not tensors or any(t.device.type != "cpu" or type(t) is not torch.Tensor for t in tensors):
            return func(*args, **kwargs)
        name, sig = str(func.name()).split("::")[-1], _signature(args, kwargs)
        key = (name, sig)
        mirror = MIRRORED.get(key, 0) < PER_OP
        tpu_args = None
        if mirror:
            MIRRORED[key] = MIRRORED.get(key, 0) + 1
            tpu_args, tpu_kwargs = _moved(args, DEVICE), _moved(kwargs, DEVICE)
        cpu_error, out = None, None
        try:
            out = func(*args, **kwargs)
        except Exception as e:  # noqa: BLE001  (the TPU's outcome is recorded either way; re-raised below)
            cpu_error = e
        if mirror:
            self._tpu(func, name, sig, tpu_args, tpu_kwargs, out, cpu_error, args)
        if cpu_error is not None:
            raise cpu_error
        return out

    def _tpu(self, func: Any, name: str, sig: str, args: tuple, kwargs: dict, want: Any,
             cpu_error: Exception | None, cpu_args: tuple) -> None:
        start = time.perf_counter()
        try:
            got = _moved(func(*args, **kwargs), "cpu")
            seconds = time.perf_counter() - start
        except Exception as e:  # noqa: BLE001  (recorded: the chip's outcome for this op)
            text = f"{type(e).__name__}: {e}".splitlines()
            self.results.add(record(name, sig, f"torch-{DEVICE}", "mirror", None, status="error", test=self.test,
                                    error=" | ".join(text[:3])[:600], cpu=_cpu_text(cpu_error),
                                    where=traceback.format_exc(limit=-3)[-800:]))
            return
        if cpu_error is not None:
            status, detail = "ran (no CPU answer)", _cpu_text(cpu_error)
        else:
            ok, detail = compare(got, want, name, cpu_args)
            status = "passed" if ok else "failed"
        self.results.add(record(name, sig, f"torch-{DEVICE}", "mirror", None, status=status, test=self.test,
                                detail=detail, first_s=round(seconds, 3)))


def _cpu_text(error: Exception | None) -> str | None:
    return None if error is None else f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"


def _compiles(item: pytest.Item) -> bool:
    try:
        return "torch.compile" in inspect.getsource(item.function)  # type: ignore[attr-defined]
    except (OSError, TypeError, AttributeError):
        return False


UNMIRRORED = re.compile(r"compile|symbolic|fake|meta|export|trace")
MIRRORED: dict[tuple[str, str], int] = {}
_STATE: dict[str, Any] = {}


@pytest.fixture(scope="session")
def tokamax() -> types.ModuleType:
    """The bundle, for a run with `--noconftest` (the chip host lacks the repository tests' own needs, such as the
    port's KDL parser): what tests/torch/conftest.py's `get_kernel` loads."""
    return package(BUNDLE)


@pytest.fixture(scope="session")
def ops(tokamax: types.ModuleType) -> types.ModuleType:
    return tokamax.torch_ops


def pytest_configure(config: pytest.Config) -> None:
    _kernels_or_bundle()
    path = Path(os.environ.get("TORCH_CHIP_MIRROR", "build/torch-chip/mirror.json"))
    _STATE["results"] = open_results(path, "mirror", os.environ.get("TOKAMAX_COMMIT", "unknown"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    if UNMIRRORED.search(item.name) or _compiles(item):  # dynamo runs eagerly under a dispatch mode: not mirrored
        yield
        return
    with Mirror(NAMESPACE, _STATE["results"], item.nodeid):
        yield


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    results = _STATE.get("results")
    if results is None:
        return
    counts: dict[str, int] = {}
    for r in results.data["records"]:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    results.set("summary", {"statuses": counts, "ops": sorted({r["op"] for r in results.data["records"]}),
                            "pytest_exit": int(exitstatus)})
