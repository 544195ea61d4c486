#!/usr/bin/env bash
# Builds the kernel bundle: port (from pinned artifacts), build/torch-tpu + CARD.md, import check.
# Sets up its own Python 3.12 venv (.venv/jax-tier) from requirements/jax-tier.txt on first run.
source "$(dirname "$0")/scripts/env.sh"
python=$(ensure_venv jax-tier)
cd "$REPO"
exec "$python" -m tools.bundle "$@"
