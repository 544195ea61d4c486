"""`tokamax.tuning.tune(step)`: autotune every tokamax op a step runs, in one call.

1. Record: run `step()` (a training step, a `generate()`, a `generate_batch`: anything that calls
   tokamax's Torch ops) once; every op call is recorded once per distinct signature, forward and
   backward, from any thread (`recorded.recording`). Its own cost: one dictionary probe
   per call, and the step itself.
2. Bind: trace each recorded call's JAX function, as it would be exported, without a result, and
   collect the bound arguments of every upstream Op whose config it asks for (upstream's
   `get_bound_args` reads the Ops' HLO payloads and misses the calls that pick a config without
   one, such as splash's); a shape seen twice is tuned once. Only the tuning thread's traces count
   (a recorder on `BoundArguments.default_config` keyed by context), and tunes run one at a time.
3. Tune: each with upstream's machinery (`BoundArguments.autotune`), on the chip the step runs on:
   JAX's TPU, or on a host without one the emulated chip in Pallas interpret mode (the timings then
   mean nothing; the machinery runs). An Op with one candidate only, or none, is listed as skipped,
   and so is a call that no upstream Op serves (this kernel's own LM-head kernels, the raw gmm_v2),
   and a call whose mask upstream's key holds by its shape only (splash's windows, causal offsets but
   0, run-time offsets: one entry, timed on a random mask, serves them all; the reason names them).
4. Write: one `AutotuningResult` file, whole or not at all, which `tuning.use(path)` or
   `TOKAMAX_AUTOTUNING_RESULT=path` then applies to the same model's calls.

On a TPU VM the chip belongs to torch-tpu while the step runs, and upstream's machinery times
candidates with JAX: `record(step)` saves the calls (`Recording.save`), and `tune_recording(path)`
tunes them in a process where JAX holds the chip and the Torch ops are loaded (`tokamax.torch_ops`:
`recorded.FUNCTIONS` binds the calls to them; this room never imports that one, which imports it).
A CPU host does it all in one call.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import importlib
import inspect
import itertools
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from .. import emulation, moe, roofline
from . import recorded
from .files import write_whole


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A recorded call not tuned, and why."""

    op: str
    reason: str


@dataclasses.dataclass
class Tuned:
    """What `tune` did: the result (an `AutotuningResult`), the file it wrote, the entries per op,
    what it skipped, the chip."""

    result: Any
    path: Path | None
    entries: dict[str, int]
    skipped: list[Skipped]
    device_kind: str
    calls: int


@dataclasses.dataclass
class Recording:
    """The distinct op calls a step made (`recorded.Call`s)."""

    calls: list[Any]

    def save(self, path: str | Path) -> Path:
        """The calls as JSON (op names and argument shapes), for `tune_recording` in another process."""
        def arg(a: Any) -> Any:
            if hasattr(a, "shape"):
                return {"shape": list(a.shape), "dtype": str(a.dtype)}
            return {"static": a}

        data = [{"op": c.op, "args": [arg(a) for a in c.args]} for c in self.calls]
        return write_whole(path, json.dumps({"tokamax_recording": 1, "calls": data}, indent=1),
                           "tokamax tuning: Recording.save")

    @classmethod
    def load(cls, path: str | Path) -> Recording:
        """A saved recording, its calls bound again to this process's Torch ops (`tokamax.torch_ops`, loaded
        before: they need torch and torch-tpu)."""
        import jax
        import jax.numpy as jnp

        raw = json.loads(Path(path).read_text())
        functions = recorded.FUNCTIONS
        calls = []
        for entry in raw["calls"]:
            if entry["op"] not in functions:
                if not functions:
                    raise RuntimeError(f"tokamax tuning: recording {path} holds Torch op calls, and no Torch op is "
                                       "loaded in this process: load them first (`tokamax.torch_ops`; on a TPU VM "
                                       "after JAX has taken the chip: jax.devices() first)")
                raise ValueError(f"tokamax tuning: recording {path} names op {entry['op']!r}, which this build lacks")
            args = tuple(jax.ShapeDtypeStruct(tuple(a["shape"]), jnp.dtype(a["dtype"])) if "shape" in a
                         else a["static"] for a in entry["args"])
            calls.append(recorded.Call(entry["op"], functions[entry["op"]], args))
        return cls(calls)


def record(step: Callable[[], Any]) -> Recording:
    """Runs `step()` once and returns the distinct tokamax op calls it made."""
    with recorded.recording() as calls:
        step()
    return Recording(list(calls.values()))


def _ops() -> Any:
    return importlib.import_module("..ops", __package__)


def _op_lib() -> Any:
    return importlib.import_module(".._ported._src.ops.op", __package__)


def _chip_context(chip: str, interpret: bool = True) -> Any:
    """Tracing and timing for `chip`: its abstract mesh, cross-compiling, and on a host without a TPU
    Pallas interpret mode as that chip (`interpret` False: the chip emulated for lowering only)."""
    import contextlib

    import jax

    stack = contextlib.ExitStack()
    stack.enter_context(_ops().config.cross_compile(True))
    if jax.default_backend() != "tpu":
        stack.enter_context(emulation.interpret_on_cpu(chip) if interpret else emulation.emulated_chip(chip))
    stack.enter_context(jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip)))
    return stack


# One tune at a time in a process: the chip context swaps process-wide state on a host without a TPU (the
# emulated chip, the interpreter's grid semantics), which two tunes at once would undo under each other.
_TUNING = threading.RLock()
_SEEN: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar("tokamax_tune_seen", default=None)


class _Recorder:
    """`BoundArguments.default_config` recording each bound arguments it is asked for into the list of the
    context that is tracing for `bound_arguments` (none elsewhere: other threads' traces are not recorded).
    Installed on the class while any `bound_arguments` runs, counted, and the class's own otherwise."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._original: Any = None

    def _config(self, ba: Any) -> Any:
        config = self._original.fget(ba)
        seen = _SEEN.get()
        if seen is not None:
            seen.append(ba)
        return config

    @contextlib.contextmanager
    def recording(self, cls: type) -> Iterator[list[Any]]:
        with self._lock:
            if self._count == 0:
                self._original = cls.__dict__["default_config"]
                cls.default_config = property(self._config)
            self._count += 1
        seen: list[Any] = []
        reset = _SEEN.set(seen)
        try:
            yield seen
        finally:
            _SEEN.reset(reset)
            with self._lock:
                self._count -= 1
                if self._count == 0:
                    cls.default_config = self._original


_RECORDER = _Recorder()


def bound_arguments(call: Any, chip: str) -> list[Any]:
    """The bound arguments of every upstream Op whose config `call` asks for when traced for `chip` (in this
    thread: what other threads trace meanwhile is not theirs)."""
    import jax

    op_lib = _op_lib()
    statics = tuple(i for i, a in enumerate(call.args) if not hasattr(a, "shape") and a is not None)
    with _TUNING, _RECORDER.recording(op_lib.BoundArguments) as seen, _chip_context(chip):
        # a function of its own: JAX's tracing cache would skip an earlier call's trace
        jax.jit(lambda *args: call.jax_fn(*args), static_argnums=statics).trace(*call.args)
    adapter = op_lib.BOUND_ARGS_ADAPTER
    out = []
    for ba in seen:  # as upstream writes them into the HLO: no config, no VJP, abstract arrays
        plain = op_lib.BoundArguments(ba.op.replace(config=None, vjp=None), op_lib._abstractify(dict(ba.arguments)))
        out.append(adapter.validate_json(adapter.dump_json(plain)))
    return out


def _mask_shape_only(ba: Any) -> tuple[int, ...] | None:
    """The shape of `ba`'s mask where upstream's key holds that shape only: a dense boolean mask (what
    splash attention binds for a window, a causal offset but 0, a run-time offset: `MaskSpec.stand_in`)."""
    bool_mask = getattr(ba.arguments.get("mask"), "bool_mask", None)
    return None if bool_mask is None else tuple(bool_mask.shape)


def _described(call: Any) -> str:
    """`op(name=value, ...)` of a recorded call's static arguments (its token left out)."""
    try:
        names = list(inspect.signature(call.jax_fn).parameters)[:len(call.args)]
    except (TypeError, ValueError):
        names = [f"arg{i}" for i in range(len(call.args))]
    statics = [f"{n}={a!r}" for n, a in zip(names, call.args, strict=False)
               if not hasattr(a, "shape") and a is not None and n != "autotuning"]
    return f"{call.op}({', '.join(statics)})"


def _shared_reason(key: tuple, ba: Any, own: str, calls: list[str]) -> str:
    shape = "x".join(map(str, _mask_shape_only(ba)))
    return (f"not timed on its own mask: {own}: {key[0]} keys its mask as a dense {shape} boolean mask, the shape "
            f"only (upstream's key), so the one entry written for that key was timed on a random mask of that "
            f"shape, and the file applies it to every call of that key: {'; '.join(dict.fromkeys(calls))}")


def _candidates(ba: Any, limit: int | None) -> set[Any]:
    """Upstream's candidates for `ba`, or where `limit` is below their number the heuristic's and the `limit - 1`
    first of `_ranked`."""
    configs = ba.autotuning_configs
    if limit is None or len(configs) <= limit:
        return configs
    heuristic = ba.heuristics_config  # `_ranked` may add the heuristic's tiles back (`_dividing`): timed once
    return {heuristic, *[c for c in _ranked(ba, [c for c in configs if c != heuristic]) if c != heuristic][:limit - 1]}


DEEPER_BUFFERS = 3
DEEPER_FIRST = 3
"""The grouped matmul's `DEEPER_FIRST` best-ranked tiles are also timed with `DEEPER_BUFFERS` input buffers, each
after its default-buffered self: on the v5e the rows' fetch two steps ahead ran OLMoE's and Qwen3-30B-A3B's gmm at
128 x 2048 x 1024 / 768 6% and 7% faster than at two buffers (tools/chip run of 9357b96, 20 timings each), where the
roofline, which counts bytes and not how far ahead they are fetched, cannot rank them."""


def _ranked(ba: Any, configs: list[Any]) -> list[Any]:
    """`configs` in the order to time them: for the grouped matmul, the tiles that fit the chip's scoped VMEM at
    upstream's default buffering, fastest first by the package's roofline (`moe.tiles.rank`: of upstream's ~700
    candidates per call most do not fit, and a chip's time is short), with the column tiles of whole lanes that
    divide a dimension added (`_dividing`) and the first few also at deeper buffering (`DEEPER_BUFFERS`); for
    other Ops a fixed order."""
    key = moe.measured.key_of(ba)
    if key is None:
        return sorted(configs, key=repr)
    tiles = moe.tiles
    plain = {tiles.Tiles(c.tile_m, c.tile_k, c.tile_n): c for c in sorted(configs, key=repr)
             if c.input_buffer_count == moe.measured.BUFFERS and not c.combine_scopes}
    if plain:
        like = next(iter(plain.values()))
        for t in _dividing(list(plain), key):
            plain.setdefault(t, dataclasses.replace(like, tile_m=t.tm, tile_k=t.tk, tile_n=t.tn))
    on = roofline.chip()
    order = [plain[t] for t in tiles.rank(key.kernel, key.m, key.k, key.n, key.groups, list(plain), on, key.itemsize)]
    deeper = [dataclasses.replace(c, input_buffer_count=DEEPER_BUFFERS) for c in order[:DEEPER_FIRST]
              if tiles.fits(key.kernel, tiles.Tiles(c.tile_m, c.tile_k, c.tile_n), on, key.itemsize, DEEPER_BUFFERS)]
    return [c for pair in itertools.zip_longest(order[:DEEPER_FIRST], deeper) for c in pair if c is not None] \
        + order[DEEPER_FIRST:]


def _dividing(tiles: list[Any], key: Any) -> list[Any]:
    """Upstream's tiles with a column tile replaced by a multiple of 128 that divides its dimension (upstream's
    space holds powers of two and halvings of the dimension rounded up to the lanes, so a dimension such as
    gpt-oss-20b's 5,760 = 45 x 128 has no tile that divides it but 128 and itself: every other one pads its last
    block; the v5e ran its gmm at 128 x 2880 x 1152 in 5.50 ms against 5.71 for the file's 128 x 2944 x 1024 in
    one run, benchmarks/measured/v5e-2026-12-04-gmm-tiles-9aff1ec.json)."""
    def divisors(size: int) -> list[int]:
        return [d for d in range(128, min(size, moe.tiles.COLUMNS[-1]) + 1, 128) if size % d == 0]

    out = []
    for t in tiles:
        out += [t._replace(tk=d) for d in divisors(key.k)] + [t._replace(tn=d) for d in divisors(key.n)]
    return out


def tune_recording(recording: Recording | str | Path, *, out: str | Path | None = None, chip: str | None = None,
                   max_configs: int | None = None, progress_bar: bool = True) -> Tuned:
    """Autotunes the calls of `recording` (or of a saved one) on `chip` (default: JAX's TPU, else the CPU
    host's emulated chip, `emulation.cpu_chip()`), each with at most `max_configs` candidates (all by
    default; the heuristic's always among them), and writes the result to `out` if given. Tunes started
    at the same time in one process run one after the other."""
    if not isinstance(recording, Recording):
        recording = Recording.load(recording)
    with _TUNING:  # a second tune at the same time waits for this one
        return _tune_recording(recording, out, chip or _chip_of_this_host(), max_configs, progress_bar)


def _tune_recording(recording: Recording, out: str | Path | None, chip: str, max_configs: int | None,
                    progress_bar: bool) -> Tuned:
    api = importlib.import_module(".._ported._src.autotuning.api", __package__)
    device_kind = emulation.CHIPS[chip][0]
    skipped: list[Skipped] = []
    pending: dict[tuple, tuple[str, Any]] = {}
    shape_keyed: dict[tuple, list[tuple[str, str]]] = {}  # key -> (op, call) a mask keyed by shape brought to it
    for call in recording.calls:
        pinned = getattr(call.jax_fn, "pinned_chip", None)
        if pinned is not None and pinned != chip:
            skipped.append(Skipped(call.op, f"upstream runs it on {pinned} only; this is tuning for {chip}"))
            continue
        found = bound_arguments(call, chip)
        if not found:
            skipped.append(Skipped(call.op, "no upstream Op picks a config for it (this kernel's own kernels, or a "
                                            "raw kernel call)"))
        for ba in found:
            key = (type(ba.op).__name__, ba.autotuning_cache_key)
            if _mask_shape_only(ba) is not None:
                shape_keyed.setdefault(key, []).append((call.op, _described(call)))
            if key in pending:
                continue
            with _chip_context(chip):
                configs = ba.autotuning_configs
            if len(configs) <= 1:
                skipped.append(Skipped(call.op, f"{type(ba.op).__name__} has no autotuning configs beyond its "
                                                "heuristic"))
                continue
            pending[key] = (call.op, ba)
    data, entries, written = [], {}, set()
    items: Iterable[Any] = pending.items()
    if progress_bar:  # upstream's bar (tqdm where installed, else none)
        progress = importlib.import_module(".._ported._src.autotuning.progress", __package__)
        items = progress.bar(list(items), desc="tokamax tuning", unit=" op calls")
    for key, (op, ba) in items:
        with _chip_context(chip):
            tuned = ba.autotune(_candidates(ba, max_configs), cache_results=False)
        failures = [v for v in tuned.values() if isinstance(v, BaseException)]
        if len(failures) == len(tuned):  # the kernel refuses these shapes (upstream then falls back to XLA)
            skipped.append(Skipped(op, f"{type(ba.op).__name__}: every candidate failed ({failures[0]})"))
            continue
        data.append((ba, tuned))
        entries[op] = entries.get(op, 0) + 1
        written.add(key)
    skipped += [Skipped(op, _shared_reason(key, pending[key][1], own, [c for _, c in shared]))
                for key, shared in shape_keyed.items() if key in written for op, own in dict.fromkeys(shared)]
    result = api.AutotuningResult(device_kind, tuple(data))
    path = None
    if out is not None:
        path = write_whole(out, result.dumps(prune_errors=True), "tokamax tuning: the result file")
    return Tuned(result, path, entries, skipped, device_kind, len(recording.calls))


def _chip_of_this_host() -> str:
    import jax

    if jax.default_backend() == "tpu":
        kind = jax.devices()[0].device_kind
        for chip, (name, _) in emulation.CHIPS.items():
            if name == kind:
                return chip
        raise ValueError(f"tokamax tuning: JAX runs on {kind!r}, which none of tokamax's chips names")
    attached = emulation.attached_chip()
    if attached is not None:
        raise RuntimeError(
            f"tokamax tuning: torch-tpu holds this host's TPU ({attached}) and upstream's autotuning times "
            "candidates with JAX, which sees none: save the calls with tokamax.tuning.record(step).save(path), "
            "then run tokamax.tuning.tune_recording(path, out=...) in a process where JAX takes the chip first "
            "(jax.devices() before anything loads torch-tpu), after loading the Torch ops there (tokamax.torch_ops), "
            "which the recording's calls are bound to")
    return emulation.cpu_chip()


@dataclasses.dataclass(frozen=True)
class FunctionCall:
    """A JAX function's call, tuned as a recorded Torch op call is (`tune_functions`)."""

    op: str  # a name for it in `Tuned.entries` and `Skipped`
    jax_fn: Callable[..., Any]
    args: tuple  # arrays or their ShapeDtypeStructs; anything without a shape is a static argument


def tune_functions(calls: Iterable[tuple[str, Callable[..., Any], tuple]], *, out: str | Path | None = None,
                   chip: str | None = None, max_configs: int | None = None, progress_bar: bool = True) -> Tuned:
    """JAX users' `tune`: every upstream Op that each `fn(*args)` asks a config for (the backward's too where `fn`
    takes gradients), autotuned on `chip` (default: JAX's TPU) and written to `out`. `calls` holds (name, fn,
    args); the args may be `jax.ShapeDtypeStruct`s, as nothing is run but the candidates."""
    import jax

    recorded = [FunctionCall(name, fn, tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) if hasattr(a, "shape") else a
                                             for a in args)) for name, fn, args in calls]
    return tune_recording(Recording(recorded), out=out, chip=chip, max_configs=max_configs, progress_bar=progress_bar)


def tune(step: Callable[[], Any], *, out: str | Path | None = None, chip: str | None = None,
         max_configs: int | None = None, progress_bar: bool = True) -> Tuned:
    """Records `step()` (`record`), then tunes its calls (`tune_recording`) and writes the result to `out`."""
    return tune_recording(record(step), out=out, chip=chip, max_configs=max_configs, progress_bar=progress_bar)
