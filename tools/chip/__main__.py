"""`python3 -m tools.chip {check,bench,sweep,tune,all} --out DIR [--commit SHA] [--only OP,...]`: see the package."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

from . import assigned

assigned.configure()  # before JAX starts its backend

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from . import load  # noqa: E402
from .measure import measure  # noqa: E402
from .results import ResultsFile, header  # noqa: E402

ZOO_BATCH = 36
"""The zoo's workloads compiled and timed this many at a time: a command cut at the host's time limit keeps every
batch it finished."""
ZOO_JOBS = 1
"""The zoo's compiles at a time by default: its first calls (`compile_s`) are a user's, whose program compiles alone.
Its first shard (6c78e5c) compiled six at a time, and the grouped matmul's forward and backward took 15.6-24.4 s there,
where the same programs compiled alone in 6.3-12.4 s on a loaded 2-core CPU host for the v5e: contention, not the
kernel's own time, made much of that. `TOKAMAX_ZOO_JOBS=6` compiles six at a time (the zoo in fewer commands, its first
calls overstated: `zoo.plan.JOBS`); the zoo takes its compiles at a time from there, not from `--jobs`, since its
shards are split by them."""


def _peaks(out: ResultsFile) -> float:
    """The chip's practical matmul peak (a bf16 8192-cube dot) and HBM bandwidth (a 2 GiB scaled copy)."""
    a = jnp.ones((8192, 8192), jnp.bfloat16)
    m = measure(lambda a: a @ a, (a,))
    flops = 2 * 8192**3 / m.median_s
    x = jnp.ones((1 << 30,), jnp.bfloat16)
    c = measure(lambda x: x * 2, (x,))
    bandwidth = 2 * x.nbytes / c.median_s
    out.set("peaks", {"matmul_flops": flops, "matmul_median_s": m.median_s, "hbm_bytes_per_s": bandwidth,
                      "copy_median_s": c.median_s})
    print(f"peaks: bf16 8192-cube matmul {flops / 1e12:.1f} TFLOP/s, HBM copy {bandwidth / 1e9:.0f} GB/s", flush=True)
    del a, x
    return flops


def _bench(tk, out: ResultsFile, modules: list, jobs: int, runs: int, impls: set[str], case: str = "",  # noqa: ANN001
           batch: int | None = None) -> None:
    from .run import run

    peak = _peaks(out)
    workloads = [w for module in modules for w in module.workloads(tk)
                 if (not impls or w.impl in impls) and case in w.case]

    def record(w, m, compile_s, error) -> None:  # noqa: ANN001
        r = {"op": w.op, "case": w.case, "impl": w.impl, "pass": w.pass_, "flops": w.flops,
             "compile_s": round(compile_s, 2)}
        if m is None:
            r |= {"median_s": None, "error": error}
            print(f"{w.op} | {w.case} | {w.impl} | {w.pass_}: {error}", flush=True)
        else:
            r |= {"median_s": m.median_s, "min_s": m.min_s, "max_s": m.max_s, "runs": m.runs,
                  "tflops": w.flops / m.median_s / 1e12, "peak_fraction": w.flops / m.median_s / peak,
                  "temp_bytes": m.temp_bytes, "peak_bytes": m.peak_bytes}
            if m.assigned_temp_bytes is not None:
                r["assigned_temp_bytes"] = m.assigned_temp_bytes
            if m.first_run_s is not None:
                r["first_run_s"] = m.first_run_s
            if m.pipelined_s is not None:
                r["pipelined_s"] = m.pipelined_s
            print(f"{w.op} | {w.case} | {w.impl} | {w.pass_}: {m.median_s * 1e3:.2f} ms "
                  f"({m.min_s * 1e3:.2f}-{m.max_s * 1e3:.2f}), {r['tflops']:.0f} TFLOP/s, "
                  f"{m.peak_bytes / 2**30:.2f} GiB, assigned temporaries "
                  f"{(m.assigned_temp_bytes or 0) / 2**30:.2f} GiB, compile {compile_s:.1f} s", flush=True)
        out.add(r)

    run(workloads, record, jobs=jobs, runs=runs, batch=batch)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tools.chip")
    parser.add_argument("what", choices=("check", "bench", "sweep", "tune", "all"))
    parser.add_argument("--out", type=Path, default=Path("build/chip"))
    parser.add_argument("--commit", default=os.environ.get("TOKAMAX_COMMIT", "unknown"))
    parser.add_argument("--only", default="", help="bench: comma-separated workload modules "
                        "(step,attention,moe,lm_head,lm_head_statistics,distill; zoo, the model zoo, alone: "
                        "DIR/zoo.json, its part named by TOKAMAX_ZOO_* (tools/chip/zoo/select.py)); check: "
                        "families (models and the JAX tier's case families: check.families()); "
                        "tune: expert shapes (models.EXPERTS' model names); sweep: \"uneven\" for "
                        "models.IMBALANCED, \"wide\" for the tiles past the default scoped VMEM only, at the raised "
                        "limit, \"ranked\" for the rule's first four, \"prefill\" for the forward at the zoo's "
                        "prefill rows beside lax.ragged_dot, \"changed\" for the training calls whose tiles the "
                        "lookahead term moved (zoo/gmm_tiles.py)")
    parser.add_argument("--impl", default="", help="bench: only the workloads of these impls (separated by commas "
                        "without a space, e.g. tokamax,xla: the package's own choice beside XLA's; a name's own "
                        "', ' stays in it)")
    parser.add_argument("--case", default="", help="bench, sweep: only the workloads whose case holds this text; "
                        "check: only the model shapes whose name holds it")
    parser.add_argument("--jobs", type=int, default=None, help="compiles at a time (default 6; the zoo "
                        "TOKAMAX_ZOO_JOBS's, default 1: its first calls are a user's, whose program compiles alone)")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=None, help="bench: compile and time this many workloads at a "
                        "time, so that a command cut at the host's limit keeps the batches it finished (default: "
                        f"all compiled first; the zoo {ZOO_BATCH})")
    parser.add_argument("--max-configs", type=int, default=None, help="tune: candidates timed per kernel call "
                        "(default tune.MAX_CONFIGS)")
    parser.add_argument("--bundle", type=Path, default=load.BUNDLE)
    args = parser.parse_args(argv)
    if jax.default_backend() != "tpu":
        print(f"tools.chip: JAX's backend is {jax.default_backend()!r}, not a TPU: the chip tier runs on a TPU host")
        return 2
    tk = load.package(args.bundle)
    status = 0
    if args.what in ("check", "all"):
        from .check import outcomes

        out = ResultsFile(args.out / "check.json", header(args.commit, "check"))
        counts: dict[str, int] = {}
        only = {n for n in args.only.split(",") if n} if args.what == "check" and args.only else None
        for o in outcomes(tk, only, args.case):
            counts[o.status] = counts.get(o.status, 0) + 1
            out.add({"name": o.name, "status": o.status, "detail": o.detail, "seconds": round(o.seconds, 2)})
            print(f"{o.status:8s} {o.name} ({o.seconds:.1f} s) {o.detail}", flush=True)
        out.set("summary", counts)
        print(f"chip check: {counts}", flush=True)
        status |= counts.get("failed", 0) > 0
    if args.what in ("bench", "all"):
        from .workloads import (
            attention,
            distill,
            lm_head,
            lm_head_columns,
            lm_head_statistics,
            lm_head_statistics_columns,
            lm_head_streamed,
            lm_head_vocab,
            moe,
            moe_padded,
            moe_uneven,
            step,
        )
        from .zoo import rows as lm_head_rows
        from .zoo import workloads as zoo

        chosen = {"step": step, "attention": attention, "moe": moe, "lm_head": lm_head,
                  "lm_head_statistics": lm_head_statistics, "distill": distill}
        extra = {"lm_head_columns": lm_head_columns,  # run when named only
                 "lm_head_statistics_columns": lm_head_statistics_columns, "lm_head_vocab": lm_head_vocab,
                 "lm_head_streamed": lm_head_streamed, "lm_head_rows": lm_head_rows,
                 "moe_uneven": moe_uneven, "moe_padded": moe_padded, "zoo": zoo}
        names = [n for n in args.only.split(",") if n] or list(chosen)
        if "zoo" in names and names != ["zoo"]:
            parser.error("--only zoo runs alone (its results go to DIR/zoo.json)")
        what = "zoo" if names == ["zoo"] else "bench"
        out = ResultsFile(args.out / f"{what}.json", header(args.commit, what))
        jobs = args.jobs or 6
        if what == "zoo":
            jobs = zoo.select.from_env().jobs
            if args.jobs not in (None, jobs):
                parser.error(f"--only zoo compiles {zoo.select.ENV_JOBS} ({jobs}) at a time: its shards are split "
                             f"by it; set that, not --jobs")
        if what == "zoo":  # the part of the plan this command runs, and what of it the plan skips and why
            out.set("zoo", zoo.header(case=args.case) | {"compiles_at_once": jobs})
        impls = {n.strip() for n in re.split(r",(?! )", args.impl) if n.strip()}  # names hold ", " themselves
        _bench(tk, out, [(chosen | extra)[n] for n in names], jobs, args.runs, impls, args.case,
               batch=args.batch or (ZOO_BATCH if what == "zoo" else None))
    args.jobs = args.jobs or 6
    if args.what == "tune":
        from . import tune

        only = {n for n in args.only.split(",") if n} or None
        status |= tune.main(tk, args.out / "tuning.json", args.max_configs or tune.MAX_CONFIGS, only)
    if args.what == "sweep":
        from . import sweep
        from .run import run

        out = ResultsFile(args.out / "sweep.json", header(args.commit, "sweep"))

        def record(w, m, compile_s, error) -> None:  # noqa: ANN001
            r = {"op": w.op, "case": w.case, "impl": w.impl, "pass": w.pass_, "compile_s": round(compile_s, 2),
                 "median_s": None if m is None else m.median_s,
                 "pipelined_s": None if m is None else m.pipelined_s}
            if m is None:
                r["error"] = error
            else:
                r["tflops"] = w.flops / m.median_s / 1e12
            said = r.get("error") or f"{r['median_s'] * 1e3:.3f} ms, {r['tflops']:.0f} TFLOP/s" + (
                "" if m.pipelined_s is None else f", back to back {m.pipelined_s * 1e3:.3f} ms")
            print(f"{w.op} | {w.case} | {w.impl}: {said}", flush=True)
            out.add(r)

        start = time.perf_counter()
        only = set(args.only.split(","))
        if only & {"prefill", "changed"}:  # its calls are short: back-to-back times over all `--runs`
            from .zoo import gmm_tiles
            found = [*(gmm_tiles.workloads(tk) if "prefill" in only else ()),
                     *(gmm_tiles.changed(tk) if "changed" in only else ())]
            runs = args.runs
        else:
            found, runs = sweep.workloads(tk, uneven="uneven" in only, wide="wide" in only,
                                          ranked=4 * ("ranked" in only)), min(args.runs, 5)
        chosen = [w for w in found if args.case in w.case]
        run(chosen, record, jobs=args.jobs, runs=runs, warmup=1)
        print(f"sweep: {time.perf_counter() - start:.0f} s", flush=True)
    return int(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
