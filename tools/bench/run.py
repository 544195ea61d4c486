"""All benchmarks in one run, side by side: load, footprint, port, bridge, config choice, autotuning
machinery, attention
(window masks' module size, long-context lowering, decode reads, generate() exports, continuous batching's reads and
exports), test tiers.

    ./bench.sh [--runs 9] [--json build/benchmarks.json]

Run by bench.sh in the JAX tier's venv; it starts the other tiers' interpreters itself. Load
times are whole cold processes, the three contenders interleaved round by round so that a noisy
neighbour hits them alike. Prints a table and writes everything as JSON.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.bench import bench_port  # noqa: E402

PROBES = REPO / "tools/bench/probes"
VARIANT = REPO / "build/torch-tpu"


def tier_python(tier: str) -> str:
    """The interpreter of a tier's venv, set up by scripts/env.sh if needed."""
    result = subprocess.run(["bash", "-c", f'source "{REPO}/scripts/env.sh" && ensure_venv {tier}'],
                            capture_output=True, text=True, check=True)
    return result.stdout.strip().splitlines()[-1]


def stats(samples: list[float]) -> dict:
    """Median and spread."""
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "runs": len(samples)}


def _time_process(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


def load_times(runs: int, jax_python: str, upstream_python: str) -> dict:
    """Cold-process seconds: the kernel, the floor and `import tokamax`, interleaved."""
    contenders = {
        "kernel": [jax_python, str(PROBES / "load_kernel.py"), str(VARIANT)],
        "floor": [jax_python, str(PROBES / "floor.py")],
        "import_tokamax": [upstream_python, str(PROBES / "import_tokamax.py")],
    }
    for cmd in contenders.values():  # warm the OS file cache once; not counted
        _time_process(cmd)
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(runs):
        for name, cmd in contenders.items():
            samples[name].append(_time_process(cmd))
    out = {name: stats(s) for name, s in samples.items()}
    out["kernel_over_floor"] = out["kernel"]["median"] / out["floor"]["median"]
    out["tokamax_over_kernel"] = out["import_tokamax"]["median"] / out["kernel"]["median"]
    return out


def _closure(python: str, root: str, exclude_roots: tuple[str, ...]) -> dict:
    """Distributions `root` needs (by Requires-Dist, in that venv) beyond those `exclude_roots` need."""
    result = subprocess.run([python, str(PROBES / "closure.py"), root, *exclude_roots], capture_output=True,
                            text=True, check=True)
    return json.loads(result.stdout)


def footprint(upstream_python: str) -> dict:
    """What each needs beyond JAX: distributions and MiB installed."""
    tokamax = _closure(upstream_python, "tokamax", ("jax",))
    tokamax.update(distributions=tokamax["distributions"] + 1, mib=tokamax["mib"] + tokamax["root_mib"])  # + itself
    variant_bytes = sum(p.stat().st_size for p in VARIANT.rglob("*") if p.is_file())
    kernel_deps = json.loads((VARIANT / "metadata.json").read_text())["python-depends"]
    return {"tokamax": tokamax, "kernel": {"distributions": len(kernel_deps), "names": kernel_deps,
                                           "mib": 0.0, "bundle_mib": variant_bytes / 2**20}}


def bridge(torch_python: str, calls: int) -> dict:
    """Per-call overhead of the Torch bridge on CPU, small and large inputs."""
    result = subprocess.run([torch_python, str(PROBES / "bridge_overhead.py"), str(VARIANT), str(calls)],
                            capture_output=True, text=True, env={**_env(), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"})
    if result.returncode != 0:
        raise RuntimeError(f"bridge probe failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.splitlines()[-1])


def torch_ops_first_use(torch_python: str, runs: int) -> dict:
    """Cold processes: the first `torch_ops` access (every op family imported, its ops registered)."""
    samples = []
    for _ in range(runs):
        result = subprocess.run([torch_python, str(PROBES / "torch_ops_first_use.py"), str(VARIANT)],
                                capture_output=True, text=True, env={**_env(), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"})
        if result.returncode != 0:
            raise RuntimeError(f"torch_ops probe failed:\n{result.stderr[-3000:]}")
        samples.append(json.loads(result.stdout.splitlines()[-1]))
    ms = [s["torch_ops_ms"] for s in samples]
    return {"torch_ops_ms": stats(ms), "custom_ops": samples[0]["custom_ops"], "families": samples[0]["families"]}


def selection(jax_python: str, rounds: int) -> dict:
    """Trace-time cost of upstream's config choice (public op vs raw kernel), in milliseconds."""
    result = subprocess.run([jax_python, str(PROBES / "selection_cost.py"), str(VARIANT), str(rounds)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"selection probe failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def autotuning_first_use(jax_python: str, runs: int, rounds: int) -> dict:
    """Cold processes: the first use of `ops.autotune` after the Op layer, a result file read, and
    the trace of a public call inside a result against outside it."""
    samples = [_probe_json(jax_python, "autotuning_first_use.py", str(VARIANT), str(rounds)) for _ in range(runs)]
    out = {key: stats([s[key] for s in samples]) for key in ("import_ms", "load_ms", "trace_inside_ms",
                                                                "trace_outside_ms")}
    return {**out, "modules": samples[0]["modules"], "bytes": samples[0]["bytes"]}


def _probe_json(python: str, probe: str, *args: str, torch_tier: bool = False) -> dict:
    env = {**_env(), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"} if torch_tier else None
    result = subprocess.run([python, str(PROBES / probe), *args], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"{probe} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def attention(pythons: dict[str, str]) -> dict:
    """Counted, not timed: the lowered module of a window-128 splash call (ours against upstream's
    public call), KV slots a decode step reads, the exports and kernel calls of generate(); and timed:
    lowering a causal splash call at long context (ours against upstream's public call)."""
    return {"window_module": {"ours": _probe_json(pythons["jax-tier"], "window_module_size.py", "ours", str(VARIANT)),
                              "upstream": _probe_json(pythons["upstream"], "window_module_size.py", "upstream")},
            "long_context": _probe_json(pythons["jax-tier"], "long_context_lowering.py", str(VARIANT),
                                        pythons["upstream"]),
            "decode_reads": _probe_json(pythons["jax-tier"], "decode_reads.py", str(VARIANT)),
            "ring": _probe_json(pythons["jax-tier"], "ring_host_cost.py", str(VARIANT)),
            "generate": _probe_json(pythons["torch-tier"], "generate_exports.py", str(VARIANT), torch_tier=True),
            "fused_loss": _probe_json(pythons["torch-tier"], "fused_loss_memory.py", str(VARIANT), torch_tier=True),
            "trl_head": _probe_json(pythons["torch-tier"], "trl_head_memory.py", str(VARIANT), torch_tier=True),
            "lm_head_costs": _probe_json(pythons["jax-tier"], "lm_head_costs.py", str(VARIANT)),
            "labels_exports": _probe_json(pythons["torch-tier"], "labels_exports.py", str(VARIANT), torch_tier=True),
            "distill": _probe_json(pythons["torch-tier"], "distill_memory.py", str(VARIANT), torch_tier=True),
            "tuning": _probe_json(pythons["torch-tier"], "tuning_costs.py", str(VARIANT), torch_tier=True),
            "paged_serving": _probe_json(pythons["torch-tier"], "paged_serving.py", str(VARIANT), torch_tier=True),
            "compiled": _probe_json(pythons["torch-tier"], "tpu_compile_figures.py", str(VARIANT))}


def lm_head_cost_rows(costs: dict) -> list[tuple[str, str, str]]:
    """The LM head's cost model per chip: each kernel before and after per-kernel blocks, and the roofline
    of Liger's three-matmul scheme at the same step."""
    rows = []
    size = f"{costs['rows']:,} tokens, hidden {costs['hidden']}, bf16"
    for label, chips in costs["vocabs"].items():
        for chip, r in chips.items():
            ridge = costs["chips"][chip]["ridge"]
            for when in ("before", "after"):
                kernels = r[when]
                detail = "; ".join(f"{name} {k['blocks'][0]}x{k['blocks'][1]} {k['bytes'] / 1e9:.1f} GB "
                                   f"AI {k['intensity']:.0f} fill {k['fill']:.2f}" for name, k in kernels.items())
                total = sum(k["seconds"] for k in kernels.values()) * 1e3
                rows.append((f"LM head step cost model, {label}, {chip} (ridge {ridge:.0f} flops/B), {when} "
                             "per-kernel blocks: roofline ms", f"{total:.0f}", f"{size}; {detail}"))
            f = r["fused"]
            picked = f"picked, chunks of {f['chunk']}" if f["chunk"] else \
                f"not picked: {f['temp_bytes'] / 2**30:.1f} GiB at chunks of {f['at']}, over the HBM share " \
                f"{f['hbm_share'] / 2**30:.1f} GiB, or slower"
            rows.append((f"LM head step cost model, {label}, {chip}: the labels path's gradients from the forward, "
                         "Liger's 3-matmul scheme: roofline ms", f"{f['seconds'] * 1e3:.0f}",
                         f"{picked}; {f['bytes'] / 1e9:.0f} GB moved, {f['temp_bytes'] / 2**30:.1f} GiB temporaries"))
    return rows


def compiled_rows(compiled: dict) -> list[tuple[str, str, str]]:
    """The TPU compiler's figures: per-chip HBM of one LM-head training step three ways, named cases,
    compile time per op family (from the compile tier's last report)."""
    def gib(n: int) -> str:
        return f"{n / 2**30:.2f} GiB"

    rows = []
    for r in compiled["lm_head_step"]:
        m = r["memory"]
        rows.append((f"LM head step compiled for {r['chip']}, {r['model']} (hidden {r['hidden']}, "
                     f"vocab {r['vocab']:,}, {r['tokens']:,} tokens, bf16): {r['head']}", f"temp {gib(m['temp'])}",
                     f"arguments {gib(m['argument'])}, outputs {gib(m['output'])}; compiled in {r['seconds']:.0f} s"))
    for r in compiled.get("distill_step", []):
        m = r["memory"]
        rows.append((f"DistillationTrainer divergence step compiled for {r['chip']} (student hidden "
                     f"{r['student_hidden']}, teacher {r['teacher_hidden']}, vocab {r['vocab']:,}, {r['tokens']:,} "
                     f"tokens, bf16, JSD): {r['head']}", f"temp {gib(m['temp'])}",
                     f"arguments {gib(m['argument'])}, outputs {gib(m['output'])}; compiled in {r['seconds']:.0f} s"))
    for r in compiled["cases"]:
        m = r["memory"]
        rows.append((f"compiled {r['name']} ({r['model']})", f"temp {gib(m['temp'])}" if m else r["status"],
                     f"arguments {gib(m.get('argument', 0))}, collectives "
                     f"{sum(v for k, v in r['hlo'].items() if k != 'tpu_custom_call')}; {r['seconds']:.0f} s"))
    for family, f in sorted(compiled["families"].items()):
        rows.append((f"compile tier, {family}: {f['cases']} cases", f"{f['seconds']:.0f} s",
                     f"{f.get('compiled', 0)} compiled, {f.get('refused', 0)} refused by the kernel"))
    return rows


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("LOCAL_KERNELS", "PYTHONPATH")}


def test_tiers() -> dict:
    """Wall time of each tier's last run (./test.sh writes the JUnit reports)."""
    out = {}
    for report in sorted((REPO / "build/test-reports").glob("*.xml")):
        suite = ET.parse(report).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        out[report.stem] = {"seconds": float(suite.get("time")), "tests": int(suite.get("tests")),
                            "when": suite.get("timestamp")}
    return out


def long_context_rows(long_context: dict) -> list[tuple[str, str, str]]:
    """Table rows of the long-context probe: lowering a causal call, ours against upstream's public call."""
    def cost(r: dict) -> str:
        return (f"peak RSS +{r['peak_rss_growth_bytes'] / 2**20:.0f} MiB, modules "
                f"{sum(m['bytes'] for m in r['modules'].values()) / 1e6:.2f} MB")

    rows = []
    for length, ours in long_context["ours"].items():
        theirs = long_context["upstream"].get(length)
        label = f"causal splash at {length} tokens: lowering forward + backward (v6e, 8/2 heads of 128, bf16)"
        if "refused" in ours:
            built = ours["schedule"]
            value = f"refused in {ours['seconds']:.2f} s"
            note = (f"SMEM: {built['entries']:,} entries, {built['smem_bytes']:,} B > "
                    f"{built['smem_budget_bytes']:,} B; the schedules built unchecked: "
                    f"{built['seconds'] * 1e3:.0f} ms, {built['array_bytes'] / 2**20:.1f} MiB")
        else:
            value, note = f"{ours['seconds']:.2f} s", cost(ours)
        note += ("; upstream's public call not run (its mask processing takes minutes)" if theirs is None
                 else f"; upstream's public call {theirs['seconds']:.2f} s, {cost(theirs)}")
        rows.append((label, value, note))
    return rows


def table(results: dict) -> str:
    """The README table."""
    load, foot, port, br = results["load"], results["footprint"], results["port"], results["bridge"]
    rows = [
        ("load: kernel (get_local_kernel + ragged_dot.gmm)", f"{load['kernel']['median']:.2f} s",
         f"{load['kernel']['min']:.2f}–{load['kernel']['max']:.2f} s"),
        ("load: floor (import kernels, jax, pallas.tpu)", f"{load['floor']['median']:.2f} s",
         f"{load['floor']['min']:.2f}–{load['floor']['max']:.2f} s"),
        ("load: import tokamax 0.0.17", f"{load['import_tokamax']['median']:.2f} s",
         f"{load['import_tokamax']['min']:.2f}–{load['import_tokamax']['max']:.2f} s"),
        ("load: kernel / floor", f"{load['kernel_over_floor']:.3f}x", "goal <= 1.15x"),
        ("load: import tokamax / kernel", f"{load['tokamax_over_kernel']:.2f}x", ""),
        ("footprint beyond JAX: kernel", f"{foot['kernel']['distributions']} dists, 0 MiB",
         f"bundle itself {foot['kernel']['bundle_mib']:.1f} MiB"),
        ("footprint beyond JAX: pip install tokamax==0.0.17", f"{foot['tokamax']['distributions']} dists, "
         f"{foot['tokamax']['mib']:.0f} MiB", ""),
        ("port, warm artifact cache", f"{port['port_warm']['median_s']:.2f} s",
         f"{port['port_warm']['min_s']:.2f}–{port['port_warm']['max_s']:.2f} s"),
        ("port, cold cache (pip fetches 4 artifacts)", f"{port['port_cold']['median_s']:.2f} s",
         f"{port['port_cold']['min_s']:.2f}–{port['port_cold']['max_s']:.2f} s"),
    ]
    sel = results["selection"]
    rows.append(("trace ops.ragged_dot vs raw gmm (v6e, Mixtral table key)",
                 f"{sel['public'] - sel['raw']:+.1f} ms", f"{sel['public']:.1f} vs {sel['raw']:.1f} ms per trace"))
    rows.append(("first public call: import Op layer / read table + trace", f"{sel['import_ops']:.0f} ms",
                 f"then {sel['first_public']:.0f} ms"))
    tune = results["autotuning"]
    rows.append((f"first use of ops.autotune after the Op layer ({tune['modules']} modules)",
                 f"{tune['import_ms']['median']:.0f} ms",
                 f"{tune['import_ms']['min']:.0f}–{tune['import_ms']['max']:.0f} ms; the search not included"))
    rows.append((f"read a result file (tuning.load, 1 entry, {tune['bytes']} bytes)",
                 f"{tune['load_ms']['median']:.1f} ms",
                 f"{tune['load_ms']['min']:.1f}–{tune['load_ms']['max']:.1f} ms"))
    rows.append(("trace ops.ragged_dot inside a result vs outside (v6e, Mixtral key)",
                 f"{tune['trace_inside_ms']['median'] - tune['trace_outside_ms']['median']:+.1f} ms",
                 f"{tune['trace_inside_ms']['median']:.1f} vs {tune['trace_outside_ms']['median']:.1f} ms per trace"))
    first = results["torch_ops"]
    rows.append((f"first use of torch_ops ({first['families']} families, {first['custom_ops']} custom ops)",
                 f"{first['torch_ops_ms']['median']:.0f} ms",
                 f"{first['torch_ops_ms']['min']:.0f}–{first['torch_ops_ms']['max']:.0f} ms, after get_kernel"))
    for size in ("small", "large"):
        b = br[size]
        rows.append((f"bridge on CPU, {b['mib']:.2f} MiB input: Torch op vs jitted JAX",
                     f"{b['overhead_us']:+.0f} us", f"{b['torch_op_us']:.0f} vs {b['jax_jit_us']:.0f} us per call"))
    att = results["attention"]
    for length, ours in att["window_module"]["ours"].items():
        theirs = att["window_module"]["upstream"][length]
        rows.append((f"window-128 splash at {length} tokens: lowered module, ours vs upstream's public call",
                     f"{ours['bytes'] / 1e3:.0f} kB",
                     f"{theirs['bytes'] / 1e6:.1f} MB ({theirs['bytes'] / ours['bytes']:.0f}x); "
                     f"lowering {ours['lower_s']:.2f} vs {theirs['lower_s']:.2f} s"))
    rows += long_context_rows(att["long_context"])
    for name, layer in att["decode_reads"].items():
        reads = ", ".join(f"{n / 1e3:.1f}k at {fill}" for fill, n in layer["tokamax"].items())
        rows.append((f"decode step, 4096-slot static cache, {name}: KV slots read", reads,
                     f"dense: {layer['dense'] / 1e3:.1f}k; {layer['dense_repeated'] / 1e3:.0f}k with K/V repeated per "
                     "q head (transformers' sdpa with a cache mask)"))
    ring_cost = att["ring"]
    for tokens, sides in ring_cost["ours"].items():
        theirs = ring_cost["upstream"][tokens]
        if theirs.get("not_built"):
            gib = theirs["dense_mask_bytes"] / 2**30
            against = f"upstream's dense-mask ring: not built (its mask alone {gib:.0f} GiB)"
        else:
            against = f"upstream's dense-mask ring: {theirs['seconds']:.1f} s, {theirs['peak_mib']:.0f} MiB"
        for name, cost in sides.items():
            what = f"causal ring for {ring_cost['chips']} chips, {int(tokens) // 1024}k tokens, {name}: lower fwd + bwd"
            rows.append((what,
                         f"{cost['seconds']:.1f} s, {cost['peak_mib']:.0f} MiB",
                         f"modules {cost['module_bytes'][0] / 1e3:.0f} / {cost['module_bytes'][1] / 1e3:.0f} kB; "
                         + (against if name == "plain" else "")))
        busy = ring_cost["busiest_step"][tokens]
        rows.append((f"causal ring, {int(tokens) // 1024}k tokens: the busiest chip's non-empty KV blocks per step",
                     f"{busy['balanced']['max']} load-balanced",
                     f"{busy['plain']['max']} plain (1024-token blocks; every step waits on it); summed over the steps "
                     f"{sum(busy['plain']['per_step'])} vs {sum(busy['balanced']['per_step'])}"))
    gen = att["generate"]
    for cache in ("static", "dynamic"):
        exports = ", ".join(f"{op} {n}" for op, n in gen[cache].items())
        rows.append((f"generate() {gen['new_tokens']} tokens from {gen['prompt']}, {cache} cache: exports", exports,
                     f"{gen['kv_lengths_seen']} KV lengths seen"))
    rows.append(("attention kernel calls per layer, batch of 4", f"{gen['batch4_calls_per_layer']:.0f}",
                 "forward (backward: 1 more)"))
    loss = att["fused_loss"]
    size = f"hidden {loss['hidden']}, vocab {loss['vocab']}, {loss['tokens']} tokens, {loss['dtype']}"
    for name in ("transformers", "tokamax"):
        rows.append((f"LM loss step, peak activation bytes (traced), {name}",
                     f"{loss[name]['peak_bytes'] / 2**30:.1f} GiB",
                     f"{size}; largest {loss[name]['largest_shape']} {loss[name]['largest_bytes'] / 2**30:.1f} GiB"))
    head = att["trl_head"]
    size = f"hidden {head['hidden']}, vocab {head['vocab']}, {head['tokens']} tokens, {head['dtype']}"
    for name, label in (("trl", "TRL's own function (no Triton: torch tiles)"), ("tokamax", "this kernel")):
        rows.append((f"TRL's fused LM head, one training step: peak activation bytes / ops dispatched, {label}",
                     f"{head[name]['peak_bytes'] / 2**30:.2f} GiB / {head[name]['ops']}",
                     f"{size}; largest {head[name]['largest_shape']}; most {head[name]['most']}"))
    pair = att["distill"]
    size = (f"student hidden {pair['student_hidden']}, teacher {pair['teacher_hidden']}, vocab {pair['vocab']}, "
            f"{pair['tokens']} tokens, {pair['dtype']}, beta {pair['beta']}")
    for name, label in (("trl", "TRL's own function (no Triton: torch tiles)"), ("tokamax", "this kernel")):
        rows.append((f"DistillationTrainer's divergence, one training step: peak activation bytes / ops dispatched, "
                     f"{label}", f"{pair[name]['peak_bytes'] / 2**30:.2f} GiB / {pair[name]['ops']}",
                     f"{size}; largest {pair[name]['largest_shape']}; most {pair[name]['most']}"))
    costs = att["tuning"]
    rows.append(("tuning.tune: recording, per op call / binding a recorded call's Ops",
                 f"+{costs['recording_adds_us']:.1f} us / {costs['bind_ms']:.0f} ms",
                 f"{costs['call_us']:.1f} us per call without (gmm, meta tensors); one trace per distinct signature"))
    rows.append((f"a result file at an op's first call: read it whole / enter it ({costs['file_bytes']} bytes)",
                 f"{costs['load_ms']:.2f} ms / {costs['applied_ms']:.2f} ms", "once per file / once per export"))
    serving = att["paged_serving"]
    for name, layer in serving["reads"].items():
        fills = [label for label in layer if "mixed" not in label]
        ours = ", ".join(f"{layer[f]['batched_rpa']['bytes'] / 1e6:.1f}" for f in fills)
        theirs = ", ".join(f"{layer[f]['paged_eager_or_sdpa']['total'] / 1e6:.0f}" for f in fills)
        ratio = layer[fills[-1]]["paged_eager_or_sdpa"]["total"] / layer[fills[-1]]["batched_rpa"]["bytes"]
        rows.append((f"continuous batching decode step, {name}, {' / '.join(fills)}: K/V MB read, batched_rpa",
                     ours, f"paged|eager / sdpa: {theirs} MB ({ratio:.0f}x: whole-KV gather + K/V repeated per "
                     "q head)"))
    runs = {n: r for n, r in serving["exports"].items() if n != "bound"}
    rows.append(("generate_batch exports (batched_rpa), " + " / ".join(f"{n} requests" for n in runs),
                 ", ".join(str(r["exports"]) for r in runs.values()),
                 f"<= {serving['exports']['bound']} by the buckets; shapes without buckets: "
                 + ", ".join(str(r["shapes_without_buckets"]) for r in runs.values())))
    rows += lm_head_cost_rows(att["lm_head_costs"])
    ex = att["labels_exports"]
    for name in ("cross_entropy", "z_loss"):
        rows.append((f"fused loss labels path, {name}: torch-tpu exports over {ex['batches']} dynamically padded "
                     "batches (forward / backward)", " / ".join(str(n) for n in ex[name].values()),
                     f"{ex['buckets']} buckets; {ex['token_counts']} token counts (an export each without buckets)"))
    rows += compiled_rows(results["attention"]["compiled"])
    for tier, t in results["test_tiers"].items():
        rows.append((f"test tier {tier} (CPU, interpret mode), last ./test.sh", f"{t['seconds']:.0f} s",
                     f"{t['tests']} tests"))
    width = max(len(r[0]) for r in rows)
    lines = [f"| {'what'.ljust(width)} | median | spread / note |", f"|{'-' * (width + 2)}|---|---|"]
    lines += [f"| {a.ljust(width)} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9, help="cold processes per contender")
    parser.add_argument("--port-runs", type=int, default=7)
    parser.add_argument("--bridge-calls", type=int, default=200)
    parser.add_argument("--selection-rounds", type=int, default=21)
    parser.add_argument("--json", type=Path, default=REPO / "build/benchmarks.json")
    args = parser.parse_args()
    if not (VARIANT / "metadata.json").exists():
        raise SystemExit("bench: build the bundle first (./build.sh)")
    pythons = {tier: tier_python(tier) for tier in ("jax-tier", "upstream", "torch-tier")}
    results = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores, {platform.python_version()}",
        "kernels": metadata.version("kernels"),
        "load": load_times(args.runs, pythons["jax-tier"], pythons["upstream"]),
        "footprint": footprint(pythons["upstream"]),
        "port": bench_port.measure(args.port_runs, 1),
        "bridge": bridge(pythons["torch-tier"], args.bridge_calls),
        "torch_ops": torch_ops_first_use(pythons["torch-tier"], args.runs),
        "selection": selection(pythons["jax-tier"], args.selection_rounds),
        "autotuning": autotuning_first_use(pythons["jax-tier"], args.runs, args.selection_rounds),
        "attention": attention(pythons),
        "test_tiers": test_tiers(),
    }
    print(f"Benchmarks, {results['date']}, {results['machine']}\n")
    print(table(results))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
