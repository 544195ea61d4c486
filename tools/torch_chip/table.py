"""`python -m tools.torch_chip.table`: docs/torch-chip.md's tables, rendered from the Torch-mode records
(benchmarks/measured/torch): the bridge beside the JAX path and torch-tpu's own way, the op families mirrored onto
the chip, and TRL's trainers. The page holds the rendering between its markers; a test holds the two equal."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from .bridge import SCALED, TWO_PROGRAMS, split_of
from .impls import GIVEN

REPO = Path(__file__).resolve().parents[2]
MEASURED = REPO / "benchmarks/measured/torch"
PAGE = REPO / "docs/torch-chip.md"
BEGIN = "<!-- BEGIN torch-chip tables: python -m tools.torch_chip.table -->"
END = "<!-- end of torch-chip tables -->"


def runs(what: str) -> list[dict[str, Any]]:
    """The committed runs of one kind ("bridge", "mirror", "trl", "steps"), oldest first."""
    files = sorted(MEASURED.glob(f"*-torch-{what}-*.json"))
    return sorted((json.loads(f.read_text()) | {"file": f.name} for f in files), key=lambda d: d["started"])


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.2f}"


def bridge(data: dict[str, Any]) -> list[str]:
    split = any(r["impl"] == TWO_PROGRAMS for r in data["jax_side"])
    given = split and any(r["impl"] == GIVEN for r in data["records"])
    lines = [f"Bridge (`{data['file']}`, commit {data['commit']}; Torch on {_libtpu(data)}, JAX on "
             f"{_jax_libtpu(data)}; medians of 10, ms; x: over the JAX path):", "",
             "| op | shape | pass | JAX path | tokamax from Torch | x | x pipelined | custom op alone | "
             "torch.compile | torch-tpu's own | numerics |" + (" JAX as two programs | x over it |" if split else "")
             + (" cotangent given (x over two programs) |" if given else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if split else "")
             + ("---|" if given else "")]
    rows: dict[tuple[str, str, str], dict[str, dict]] = defaultdict(dict)
    for r in data["jax_side"]:
        rows[(r["op"], r["case"], r["pass"])][r["impl"]] = r
    for r in data["records"]:
        rows[(r["op"], r["case"], r["pass"])][r["impl"]] = r
    for (op, case, pass_), by in rows.items():
        ours = by.get("tokamax (torch)", {})
        own = next((r | {"name": impl.split("(", 1)[1].rstrip(")")} for impl, r in by.items()
                    if impl.startswith("torch-tpu")), None)
        own_text = "-" if own is None else (f"{_ms(own['median_s'])} ({own['name']})" if own["median_s"] else
                                            f"fails ({own['name']}: {_reason(own.get('error', ''))})")
        ratio, piped = ours.get("ratio_to_jax"), ours.get("pipelined_ratio_to_jax")
        lines.append(f"| {op} | {case} | {pass_} | {_ms(by.get('jax', {}).get('median_s'))} | "
                     f"{_ms(ours.get('median_s'))} | {'-' if ratio is None else f'{ratio:.3f}'} | "
                     f"{'-' if piped is None else f'{piped:.3f}'} | "
                     f"{_ms(by.get('tokamax (torch, custom op alone)', {}).get('median_s'))} | "
                     f"{_ms(by.get('tokamax (torch.compile)', {}).get('median_s'))} | {own_text} | "
                     f"{ours.get('numerics', '-')} |" + (_two_programs(by.get(TWO_PROGRAMS) or by.get(SCALED), ours,
                                                                        by.get(GIVEN, {}) if given else None)
                                                         if split else ""))
    if split:
        lines += ["", "JAX as two programs: the JAX side's forward jitted alone, then its backward with the cotangent "
                  "an array, as Torch's autograd runs the op (the JAX path shares the two passes' work in one program "
                  "and folds the sum's cotangent into it); x over it, waited and pipelined: the bridge's own cost. "
                  "For the LM head, where a run has it: its loss over the rows under `jax.grad`, dW scaled by "
                  "a cotangent other than 1 and rounded once, the pass the Torch op's backward always makes."]
    if any("pipelined_s" in r for r in data["records"]):
        lines += ["", "x pipelined: the same ratio with 10 calls issued back to back and one wait at the end on each "
                  "side (as a training loop runs), so each call's launch and wait overlap the chip's work."]
    deferred = sorted({r["impl"] for r in data["records"] if "DEFER_AND_FUSE" in r["impl"]})
    if deferred:
        lines += ["", f"Not shown: {', '.join(deferred)}. Under torch-tpu's DEFER_AND_FUSE eager mode "
                  "`torch.accelerator.synchronize()` returns before the deferred work runs, so those records time "
                  "less than the work (their numerics, read afterwards, passed)."]
    return lines


def _jax_libtpu(data: dict[str, Any]) -> str:
    """The libtpu a bridge's JAX side ran on: its own record's (`jax_side_stack`), else that of the same commit's
    JAX side run alone last before it (a copy of the file the bridge read), else the host's."""
    if "jax_side_stack" in data:
        return f"libtpu {data['jax_side_stack'].get('libtpu', '?')}"
    alone = [j for j in runs("jaxside") if j["commit"] == data["commit"] and j["started"] < data["started"]]
    return f"libtpu {alone[-1]['stack'].get('libtpu', '?')}" if alone else "the host's libtpu (0.0.42)"


def jaxside(data: dict[str, Any]) -> list[str]:
    """A JAX side run alone (`python3 -m tools.torch_chip jax`), set beside the same commit's bridge, else the newest
    bridge before it."""
    bridges = ([b for b in runs("bridge") if b["commit"] == data["commit"]]
               or [b for b in runs("bridge") if b["started"] < data["started"]])
    torch_by = {r["case"]: r for r in (bridges[-1]["records"] if bridges else [])
                if r["impl"] == "tokamax (torch)" and r["pass"] == "fwd+bwd"}
    where = (f"the Torch op from `{bridges[-1]['file']}` (commit {bridges[-1]['commit']}, {_libtpu(bridges[-1])})"
             if bridges else "no Torch op run before it")
    lines = [f"The JAX side alone (`{data['file']}`, commit {data['commit']}, libtpu {data['stack'].get('libtpu')}; "
             "forward and backward, "
             "medians of 10, ms, "
             f"waited / pipelined), beside {where}:", "",
             "| shape | JAX, one program | JAX as autograd runs it | its backward takes | tokamax from Torch | "
             "x over it |",
             "|---|---|---|---|---|---|"]
    one = {r["case"]: r for r in data["records"] if r["impl"] == "jax" and r["pass"] == "fwd+bwd"}
    for r in data["records"]:
        if r["impl"] not in (TWO_PROGRAMS, SCALED) or r["median_s"] is None:
            continue
        ours, o = torch_by.get(r["case"], {}), one.get(r["case"], {})
        pair = (f"{ours['median_s'] / r['median_s']:.3f} / {ours['pipelined_s'] / r['pipelined_s']:.3f}"
                if ours.get("median_s") and ours.get("pipelined_s") else "-")
        lines.append(f"| {r['case']} | {_ms(o.get('median_s'))} / {_ms(o.get('pipelined_s'))} | "
                     f"{_ms(r['median_s'])} / {_ms(r['pipelined_s'])} | {split_of(r['op'], r)} | "
                     f"{_ms(ours.get('median_s'))} / {_ms(ours.get('pipelined_s'))} | {pair} |")
    return lines


def _two_programs(jax: dict | None, ours: dict, given: dict | None = None) -> str:
    if not jax or jax.get("median_s") is None or not ours.get("median_s"):
        return " - | - |" + (" - |" if given is not None else "")
    ratio = ours["median_s"] / jax["median_s"]
    piped = (f" / {ours['pipelined_s'] / jax['pipelined_s']:.3f}" if ours.get("pipelined_s") and jax.get("pipelined_s")
             else "")
    text = f" {_ms(jax['median_s'])} | {ratio:.3f}{piped} |"
    if given is not None:  # the Torch op with its cotangent given (torch_ways.GIVEN), over the same two programs
        g = given.get("median_s")
        text += (" - |" if not g else f" {_ms(g)} ({g / jax['median_s']:.3f}" + (
            f" / {given['pipelined_s'] / jax['pipelined_s']:.3f}" if given.get("pipelined_s") and
            jax.get("pipelined_s") else "") + ") |")
    return text


def traces(data: dict[str, Any]) -> list[str]:
    """The chip's own trace of each side: device time per call, and what Torch's side runs beside the kernel."""
    by = {(r["impl"], r["case"]): r["device"] for r in data["records"]}
    lines = [f"Device time per call, from the chip's traces (`{data['file']}`, commit {data['commit']}; "
             f"{data['records'][0]['calls']} calls traced per way, microseconds):", "",
             "| shape | pass | JAX path | tokamax from Torch | its custom ops | the rest (Torch's eager ops) |",
             "|---|---|---|---|---|---|"]
    for (side, case), dev in by.items():
        if side != "jax":
            continue
        shape, pass_ = case.rsplit("-fwd", 1)
        pass_ = "fwd" + pass_
        torch_dev = by.get(("torch", f"{shape}-tokamax-torch-{pass_}"))
        if torch_dev is None:
            continue
        modules = torch_dev.get("XLA Modules", {"us_per_call": 0.0, "top": []})
        kernels = sum(us for name, us in modules["top"] if "custom_kernel" in name)
        lines.append(f"| {shape} | {pass_.replace('-', '+')} | {dev['XLA Modules']['us_per_call']:.0f} | "
                     f"{modules['us_per_call']:.0f} | {kernels:.0f} | {modules['us_per_call'] - kernels:.0f} |")
    return lines


def steps(data: dict[str, Any]) -> list[str]:
    lines = [f"transformers' training steps (`{data['file']}`, commit {data['commit']}, {_libtpu(data)}; forward, "
             "backward and AdamW; step in ms, median after the first; MFU against the measured matmul peak):", "",
             "| model | tokens | impl | layers | step | tokens/s | MFU | first step | peak HBM | result |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["records"]:
        model, tokens = r["case"].split("/")
        tps, mfu, first = r.get("tokens_per_s"), r.get("mfu"), r.get("first_step_s")
        ran = r["median_s"] is not None
        peak = r.get("peak_hbm_bytes") if ran else None
        lines.append(f"| {model} | {tokens} | {r['impl']} | {r.get('layers', '-')} | {_ms(r['median_s'])} | "
                     f"{'-' if tps is None else f'{tps:,.0f}'} | {'-' if mfu is None else f'{mfu:.0%}'} | "
                     f"{'-' if first is None else f'{first:.1f} s'} | "
                     f"{'-' if peak is None else f'{peak / 2**30:.1f} GiB'} | "
                     f"{'ran' if ran else _step_reason(r)} |")
    return lines


def _libtpu(data: dict[str, Any]) -> str:
    """The libtpu torch-tpu ran on: the host's 0.0.42 behind the shim, or the 0.0.52 it asks for (libtpu_pack)."""
    version = data["stack"].get("libtpu", "?")
    return f"libtpu {version}" + (" behind the shim" if version.startswith("0.0.42") else "")


def _step_reason(r: dict) -> str:
    error = r.get("error", "")
    if "SIGABRT" in error:
        checks = [line.split("]", 1)[-1].strip() for line in r.get("log_key_lines", []) if "Check failed" in line]
        return f"XLA aborted compiling: {checks[0][:90] if checks else 'a check failed'}"
    return _reason(error)


def _reason(error: str) -> str:
    if "out of memory" in error or "RESOURCE_EXHAUSTED" in error:
        return "out of HBM"
    return error.split("|")[0].strip()[:80]


def mirror(data: dict[str, Any]) -> list[str]:
    by_op: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    notes: dict[str, str] = {}
    for r in data["records"]:
        by_op[r["op"]][r["status"]] += 1
        if r["status"] in ("failed", "error"):
            notes.setdefault(r["op"], (r.get("detail") or _reason(r.get("error", "")))[:110])
    lines = [f"Op families mirrored onto the chip (`{data['file']}`, commit {data['commit']}; each call of the Torch "
             "tier's op tests made again on torch-tpu tensors; pytest exit {}):".format(
                 data.get("summary", {}).get("pytest_exit", "cut at the command's limit")), "",
             "| op | passed | failed | ran (no CPU answer) | refused or failed to run | first failure or refusal |",
             "|---|---|---|---|---|---|"]
    for op in sorted(by_op):
        c = by_op[op]
        lines.append(f"| {op} | {c['passed']} | {c['failed']} | {c['ran (no CPU answer)']} | {c['error']} | "
                     f"{notes.get(op, '')} |")
    return lines


def trl(data: dict[str, Any]) -> list[str]:
    lines = [f"TRL's trainers (`{data['file']}`, commit {data['commit']}, {_libtpu(data)}; "
             f"{data.get('model', {}).get('config', '')} "
             f"with {data.get('model', {}).get('num_hidden_layers', '?')} layers, vocabulary "
             f"{data.get('model', {}).get('vocab_size', '?')}; seconds per step, median after the first):", "",
             "| trainer | TRL alone | with tokamax | x | first step (alone / tokamax) |", "|---|---|---|---|---|"]
    cases: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in data["records"]:
        cases[r["case"]][r["impl"]] = r
    for case, by in cases.items():
        a, b = by.get("trl", {}), by.get("tokamax", {})
        x = a["median_s"] / b["median_s"] if a.get("median_s") and b.get("median_s") else None
        lines.append(f"| {case} | {_s(a)} | {_s(b)} | {'-' if x is None else f'{x:.2f}'} | "
                     f"{_first(a)} / {_first(b)} |")
    compiled = [f"{r['case']} with {r['impl']}: {r['dynamo']['unique_graphs']} graphs compiled, "
                f"{r['dynamo']['graph_breaks']} breaks" for r in data["records"]
                if r.get("dynamo", {}).get("unique_graphs")]
    lines += ["", "torch.compile (dynamo's counters over the runs): " + "; ".join(compiled) + "."] if compiled else []
    return lines + (["", f"Run with: {data['note']}"] if data.get("note") else [])


def decode(data: dict[str, Any]) -> list[str]:
    model = data.get("model", {})
    lines = [f"A decode step's attention, call by call (`{data['file']}`, commit {data['commit']}, {_libtpu(data)}; "
             f"{model.get('heads')}/{model.get('kv_heads')} heads of {model.get('head_dim')}, batch "
             f"{model.get('batch')}, one new token against a dynamic cache, {model.get('layers')} layers a step; ms "
             "per layer call, waited / pipelined):", "",
             "| keys | tokamax | eager | sdpa | the op alone | one eager op | tokamax's numerics (max error / bound) |",
             "|---|---|---|---|---|---|---|"]
    fills: dict[int, dict[str, dict]] = defaultdict(dict)
    for r in data["records"]:
        fills[r["fill"] if "fill" in r else int(r["case"].split()[-1])][r["impl"]] = r

    def cell(r: dict | None) -> str:
        if not r or r.get("median_s") is None:
            return "-" if not r else f"fails ({_reason(r.get('error', ''))})"
        return f"{r['median_s'] * 1e3:.2f} / {r['pipelined_s'] * 1e3:.2f}"
    for fill, by in sorted(fills.items()):
        ours = by.get("tokamax", {})
        numerics = f"{ours.get('numerics', '-')} ({ours.get('max_abs_error', 0):.1e} / {ours.get('bound', 0):.1e})"
        lines.append(f"| {fill:,} | {cell(ours)} | {cell(by.get('eager'))} | {cell(by.get('sdpa'))} | "
                     f"{cell(by.get('op alone'))} | {cell(by.get('one eager op'))} | {numerics} |")
    return lines


def _first(r: dict) -> str:
    return "-" if r.get("first_step_s") is None else f"{r['first_step_s']:.2f}"


def _s(r: dict) -> str:
    if r.get("median_s") is not None:
        return f"{r['median_s']:.3f}"
    return f"not run ({_reason(r.get('error', 'no record'))})" if r else "no record"


def render() -> str:
    lines = [BEGIN, ""]
    for what, fn in (("bridge", bridge), ("jaxside", jaxside), ("traces", traces), ("mirror", mirror), ("trl", trl),
                     ("decode", decode), ("steps", steps)):
        for data in runs(what):
            lines += fn(data) + [""]
    return "\n".join(lines + [END])


def section(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def main() -> int:
    text = PAGE.read_text()
    PAGE.write_text(text.replace(section(text), render()))
    print(f"{PAGE.relative_to(REPO)}: tables rendered from {MEASURED.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
