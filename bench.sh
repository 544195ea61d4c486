#!/usr/bin/env bash
# Runs every benchmark side by side and prints the README's table (JSON in build/benchmarks.json).
# Sets up the venvs it needs (JAX tier, upstream tokamax, Torch tier) and builds the bundle first.
source "$(dirname "$0")/scripts/env.sh"
cd "$REPO"
python=$(ensure_venv jax-tier)
"$python" -m tools.bundle > /dev/null
exec "$python" tools/bench/run.py "$@"
