"""`python3 -m tools.torch_chip {jax,jax-profile,bridge,profile,host,mirror,steps,trl,decode} --out DIR [--commit SHA]
[--tiny]`: see the package.

`jax` and `jax-profile` run with JAX on the chip (no torch imported); the others are Torch processes: JAX
there runs on the CPU (JAX_PLATFORMS=cpu, set here before JAX starts) and torch-tpu holds the chip."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

TORCH_MODES = ("bridge", "profile", "host", "mirror", "steps", "trl", "decode")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tools.torch_chip")
    parser.add_argument("what", choices=("jax", "jax-profile", *TORCH_MODES))
    parser.add_argument("--out", type=Path, default=Path("build/torch-chip/out"))
    parser.add_argument("--commit", default=os.environ.get("TOKAMAX_COMMIT", "unknown"))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tiny", action="store_true", help="small shapes on any device: the plumbing, not figures")
    parser.add_argument("--device", default="tpu", help="the Torch side's device (cpu: the plumbing on a CPU host)")
    parser.add_argument("--shapes", help="jax, jax-profile, bridge, profile, host: only the shapes whose case "
                        "starts with one of these comma-separated prefixes (e.g. causal,OLMoE)")
    args, rest = parser.parse_known_args(argv)  # the rest: mirror's pytest arguments, steps' and trl's own options
    args.rest = [a for a in rest if a != "--"]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.what in TORCH_MODES:
        os.environ["JAX_PLATFORMS"] = "cpu"
    if args.what == "mirror":
        env = {**os.environ, "TORCH_CHIP_MIRROR": str(args.out / "mirror.json"), "TORCH_CHIP_DEVICE": args.device,
               "TOKAMAX_COMMIT": args.commit}
        tests = args.rest or ["--noconftest", "tests/torch/ops", "--ignore=tests/torch/ops/test_ring_attention.py",
                              "--ignore=tests/torch/ops/test_coverage.py"]
        return subprocess.call([sys.executable, "-m", "pytest", "-p", "tools.torch_chip.mirror", "-q",
                                "-p", "no:cacheprovider", *tests], env=env)

    from tools.chip.load import package

    from . import bridge
    from .records import open_results

    shapes = bridge.TINY if args.tiny else bridge.SHAPES
    if args.shapes:
        shapes = bridge.named(shapes, args.shapes.split(","))
    if args.what == "jax":
        tk = package()
        bridge.jax_side(tk, open_results(args.out / "bridge-jax.json", "bridge", args.commit, side="jax"),
                        runs=args.runs, shapes=shapes)
        return 0
    if args.what == "jax-profile":
        from . import traces

        traces.jax_traces(package(), args.out / "profile", shapes)
        return 0
    if args.what == "profile":
        import torch  # noqa: F401  (loads torch-tpu before the bundle's Torch ops)

        from . import traces

        traces.torch_traces(package(), args.out / "profile", args.device, shapes)
        return 0
    if args.what == "host":
        import torch  # noqa: F401  (loads torch-tpu before the bundle's Torch ops)

        from . import host_times

        host_times.host_side(package(), open_results(args.out / "host.json", "host", args.commit), args.runs,
                             args.device, shapes)
        return 0
    if args.what == "bridge":
        import torch  # noqa: F401  (loads torch-tpu before the bundle's Torch ops)

        tk = package()
        out = open_results(args.out / "bridge.json", "bridge", args.commit)
        jax_records = bridge.read_jax(args.out / "bridge-jax.json")
        out.set("jax_side", jax_records)
        out.set("jax_side_stack", bridge.read_jax_stack(args.out / "bridge-jax.json"))  # its libtpu may differ
        bridge.torch_side(tk, out, jax_records, runs=args.runs, device=args.device, shapes=shapes)
        return 0
    if args.what == "decode":
        from . import decode_calls

        return decode_calls.main_decode(args)
    if args.what == "steps":
        from . import steps

        return steps.main_steps(args)
    from . import trl_steps

    return trl_steps.main_trl(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
