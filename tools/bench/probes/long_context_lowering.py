"""Probe: host cost of lowering one causal splash call at long context, ours against upstream's public
call, side by side: v6e, 8 query and 2 KV heads of 128, bf16, forward and backward.

    python long_context_lowering.py VARIANT_DIR UPSTREAM_PYTHON     (JAX tier: runs both sides, prints
                                                                      a table, then JSON)
    python long_context_lowering.py measure ours VARIANT_DIR LENGTH  (one measurement, one JSON line)
    python long_context_lowering.py measure upstream LENGTH          (in the upstream venv)

Ours is what the Torch op exports: `tokamax.splash.attend` and `attend_vjp`, two modules; upstream's
is `jax.value_and_grad` of `tokamax.ops.experimental.splash_attention` with its causal mask, one
module. Each measurement is a fresh process that first lowers the same call at 1024 tokens (imports
and first-use costs, not counted), then the call at LENGTH: host seconds (trace, lower, text) and the
growth of the process's peak RSS while doing it (numpy, JAX and MLIR alike). At 1048576 tokens ours
refuses the causal call (its schedule needs 6.8 MB of SMEM; a v6e core has 1 MiB): the time and memory
to refuse are reported, and what building its schedule (forward and dK/dV) costs on the host without
the check. Upstream at 1048576 is not run: its mask processing visits every (q block, kv block) pair
with numpy, 1024^2 chunks of 1024 x 1024, three times (upstream PR #1217 measured 755 s for its
forward alone at 512-token blocks).
"""

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

REPO = Path(__file__).resolve().parents[3]
OURS, UPSTREAM = (32768, 131072, 1 << 20), (32768, 131072)
HEADS, KV_HEADS, DIM, WARM_UP = 8, 2, 128, 1024


sys.path.insert(0, str(Path(__file__).parent))
from window_module_size import _emulation  # noqa: E402 - our standalone chip helpers, by path (also upstream's venv)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _ours(variant: Path):  # noqa: ANN202 - (length -> [(name, fn, shapes)], cross_compile, splash)
    import kernels

    tokamax = kernels.get_local_kernel(variant)
    splash, spec = tokamax.splash, tokamax.splash.MaskSpec("causal")

    def calls(length: int) -> list:
        q = jax.ShapeDtypeStruct((1, HEADS, length, DIM), jnp.bfloat16)
        kv = jax.ShapeDtypeStruct((1, KV_HEADS, length, DIM), jnp.bfloat16)
        rows = jax.ShapeDtypeStruct((1, HEADS, length), jnp.float32)
        forward = lambda q, k, v: splash.attend(q, k, v, None, None, None, spec=spec)  # noqa: E731
        backward = lambda q, k, v, o, m, lse, d: splash.attend_vjp(  # noqa: E731
            q, k, v, None, None, None, o, m, lse, d, spec=spec)
        return [("forward", forward, (q, kv, kv)), ("backward", backward, (q, kv, kv, q, rows, rows, q))]
    return calls, tokamax.ops.config.cross_compile, splash


def _upstream():  # noqa: ANN202
    from tokamax._src.ops.experimental.tpu.splash_attention import base

    import tokamax

    def calls(length: int) -> list:
        q = jax.ShapeDtypeStruct((HEADS, length, DIM), jnp.bfloat16)
        kv = jax.ShapeDtypeStruct((KV_HEADS, length, DIM), jnp.bfloat16)

        def step(q, k, v):  # noqa: ANN001, ANN202
            loss = lambda q, k, v: jnp.sum(tokamax.ops.experimental.splash_attention(  # noqa: E731
                q, k, v, base.CAUSAL_MASK, None, implementation="mosaic_tpu").astype(jnp.float32) ** 2)
            return jax.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v)
        return [("forward+backward", step, (q, kv, kv))]
    return calls, tokamax.config.cross_compile, None


def _lower(calls: list, cross_compile, emulation) -> dict:  # noqa: ANN001
    out = {"modules": {}, "seconds": 0.0}
    with cross_compile(True), emulation.emulated_chip("v6e"), jax.sharding.use_abstract_mesh(emulation.tpu_mesh("v6e")):
        for name, fn, shapes in calls:
            start = time.perf_counter()
            text = jax.jit(lambda *a, fn=fn: fn(*a)).trace(*shapes).lower(lowering_platforms=("tpu",)).as_text()
            out["seconds"] += time.perf_counter() - start
            out["modules"][name] = {"bytes": len(text), "mosaic_kernels": text.count("@tpu_custom_call(")}
    return out


def _schedule_cost(splash, length: int) -> dict:  # noqa: ANN001
    """Host seconds and array bytes of the causal call's forward and dK/dV schedules, built unchecked,
    and the forward's entries and SMEM bytes."""
    schedule = splash.schedule
    start, nbytes = time.perf_counter(), 0
    for is_dkv in (False, True):
        plan = schedule.Schedule.of(splash.MaskSpec("causal"), (length, length), 0, (1024, 1024), is_dkv=is_dkv)
        info, _ = plan.mask_info()
        nbytes += sum(x.nbytes for x in info if x is not None)
        if not is_dkv:
            entries, smem = plan.entries, plan.smem_bytes(False)
    return {"seconds": time.perf_counter() - start, "array_bytes": nbytes, "entries": entries, "smem_bytes": smem,
            "smem_budget_bytes": 1024 * 1024 - schedule.SMEM_RESERVE}


def measure(side: str, args: list[str]) -> dict:
    calls, cross_compile, splash = _ours(Path(args[0])) if side == "ours" else _upstream()
    length = int(args[-1])
    emulation = _emulation()
    _lower(calls(WARM_UP), cross_compile, emulation)
    before, start = _rss_bytes(), time.perf_counter()
    try:
        result = _lower(calls(length), cross_compile, emulation)
    except ValueError as e:  # ours refuses what SMEM cannot hold
        result = {"refused": str(e).split("; ")[0], "seconds": time.perf_counter() - start}
    result["peak_rss_growth_bytes"] = max(0, _peak_rss_bytes() - before)
    if "refused" in result and splash is not None:
        result["schedule"] = _schedule_cost(splash, length)
    return result


def _run(cmd: list[str]) -> dict:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cell(r: dict | None) -> str:
    if r is None:
        return "not run (minutes)"
    mib = r["peak_rss_growth_bytes"] / 2**20
    if "refused" in r:
        built = r["schedule"]
        return (f"refused (SMEM) after {r['seconds']:.2f} s, +{mib:.0f} MiB; its schedules built unchecked: "
                f"{built['seconds'] * 1e3:.0f} ms, {built['array_bytes'] / 2**20:.1f} MiB")
    size = sum(m["bytes"] for m in r["modules"].values()) / 1e6
    return f"{r['seconds']:.2f} s, +{mib:.0f} MiB, {size:.2f} MB"


def main() -> int:
    if sys.argv[1] == "measure":
        print(json.dumps(measure(sys.argv[2], sys.argv[3:])))
        return 0
    variant, upstream_python = sys.argv[1], sys.argv[2]
    me = str(Path(__file__).resolve())
    out = {"ours": {}, "upstream": {}}
    for length in OURS:
        out["ours"][length] = _run([sys.executable, me, "measure", "ours", variant, str(length)])
    for length in UPSTREAM:
        out["upstream"][length] = _run([upstream_python, me, "measure", "upstream", str(length)])
    print("tokens | ours (attend + attend_vjp): lowering, peak RSS growth, modules | upstream's public call "
          "(value_and_grad): the same")
    for length in OURS:
        print(f"{length} | {_cell(out['ours'][length])} | {_cell(out['upstream'].get(length))}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
