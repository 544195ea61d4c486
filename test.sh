#!/usr/bin/env bash
# Runs every test: lint, the bundle build, the JAX tier (Python 3.12, jax 0.12), the Torch tier
# (Python 3.11, torch 2.13 CPU, torch-tpu 0.2.0, jax 0.10.2), the JAX side on Python 3.13 (the
# kernels_ci subset and the import check: kernel-builder's TPU stack runs 3.13) and upstream's own
# test suite against the port (tools/upstream_suite, its CI selection). Sets up each venv itself.
#   ./test.sh            all tests
#   ./test.sh --fast     only the kernels_ci subset (no upstream suite)
# A tier that fails, or runs no test, or skips every test it ran, fails the whole run.
source "$(dirname "$0")/scripts/env.sh"
cd "$REPO"
marker=()
[ "${1:-}" = "--fast" ] && marker=(-m kernels_ci)

# Tests load build/torch-tpu in-process: keep bytecode out of the bundle.
export PYTHONDONTWRITEBYTECODE=1

jax_python=$(ensure_venv jax-tier)
torch_python=$(ensure_venv torch-tier)
py313_python=$(ensure_venv jax-tier-py313)
reports="$REPO/build/test-reports"

echo "== lint (ruff)"
"$jax_python" -m ruff check --quiet .

echo "== bundle"
"$jax_python" -m tools.bundle
mkdir -p "$reports"
rm -f "$reports/kernels-benchmark.txt"

status=0
run_tier() {  # run_tier NAME PYTHON PYTEST-ARGS...
  local name=$1 python=$2; shift 2
  echo "== $name tier ($("$python" -c 'import sys; print(sys.version.split()[0])'))"
  "$python" -m pytest -p no:cacheprovider "${marker[@]}" --junitxml="$reports/$name.xml" "$@" || status=1
}
run_tier jax "$jax_python" tests --ignore=tests/torch
# tests/kernel (what kernel-builder's ci-test runs) also runs here, where torch is installed.
TORCH_DEVICE_BACKEND_AUTOLOAD=1 run_tier torch "$torch_python" tests/torch tests/kernel

echo "== import check on Python 3.13"
"$py313_python" -I tools/bundle/import_check.py build/torch-tpu || status=1
run_tier jax-py313 "$py313_python" -m kernels_ci tests --ignore=tests/torch

if [ ${#marker[@]} -eq 0 ]; then
  echo "== upstream suite (tokamax's own tests, on upstream and on the port)"
  rm -f "$reports/upstream-suite.txt"
  "$jax_python" -m tools.upstream_suite || status=1
  cp build/upstream-suite/report.txt "$reports/upstream-suite.txt" 2>/dev/null || true
fi

"$jax_python" scripts/tier_summary.py "$reports/jax.xml" "$reports/torch.xml" "$reports/jax-py313.xml" || status=1
[ -f "$reports/kernels-benchmark.txt" ] && cat "$reports/kernels-benchmark.txt"
[ -f "$reports/upstream-suite.txt" ] && grep -v "^  UNEXPLAINED" "$reports/upstream-suite.txt"
exit $status
