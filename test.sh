#!/usr/bin/env bash
# Runs every test: lint and the bundle build, then each tier in its own venv, two jobs at a time
# (TOKAMAX_TEST_JOBS). The venvs are set up on first use in a per-user cache shared by every clone
# (scripts/env.sh), in the background, in the order the jobs need them:
#   jax          Python 3.12, jax 0.12: tests/ but tests/torch
#   torch-py312  Python 3.12, torch 2.13, torch-tpu 0.2.0, jax 0.12 (the stack TPU users install):
#                tests/torch and tests/kernel, as two jobs (torch-py312-transformers: tests/torch/transformers)
#   torch-py312-tf525  the same stack on transformers 5.25.0 with kernels 0.19.1 (the newest transformers; the
#                main tier keeps 5.22.2): tests/torch/transformers and tests/torch/trl
#   tpu-compile  the Torch tier's venv (it has libtpu): tests/tpu_compile, every op family compiled by the TPU
#                compiler for v5e, v6e, v7x and pods at real models' shapes (tools/tpu_compile)
#   torch-py311  Python 3.11, torch 2.13 CPU, torch-tpu 0.2.0, jax 0.10.2: the kernels_ci subset and
#                the ops' refusals that name the jax they need (marker jax_floor)
#   torch-py313  Python 3.13, torch 2.11 (kernel-builder's), torch-tpu 0.2.0, jax 0.12: the bundle's
#                import check through kernels.get_kernel and the kernels_ci subset
#   upstream suite, side upstream / side port: upstream's own tests on tokamax 0.0.17 and on the
#                port (tools/upstream_suite), compared once both have run
#   ./test.sh            all of it
#   ./test.sh --fast     only the kernels_ci subset of each tier (no upstream suite)
#   ./test.sh --all      all of it, with the compile tier's whole grid of shapes and chips
# Each job's output is in build/test-logs/JOB.log and printed when the job ends. A tier that fails,
# runs no test or skips every test it ran fails the whole run (scripts/tier_summary.py).
source "$(dirname "$0")/scripts/env.sh"
cd "$REPO"
fast=0
case "${1:-}" in
  --fast) fast=1 ;;
  --all) export TOKAMAX_TPU_COMPILE=all ;;
  "") ;;
  *) echo "usage: ./test.sh [--fast | --all]" >&2; exit 2 ;;
esac

# Tests load build/torch-tpu in-process: keep bytecode out of the bundle.
export PYTHONDONTWRITEBYTECODE=1
# What repeats from run to run is kept per user, next to the venvs, each keyed by what it depends on:
# - XLA's compiled programs, in JAX's own persistent compilation cache (JAX keys each program on its HLO,
#   jax and jaxlib, flags and backend): interpret mode compiles large programs, and compiling them again
#   is much of a run. TOKAMAX_JAX_CACHE moves it, TOKAMAX_JAX_CACHE=off compiles everything afresh.
# - upstream's side of the comparisons (its lowerings, and its own suite's outcomes on tokamax 0.0.17),
#   reused while the upstream venv and every file they read are unchanged (tests/upstream_reference.py,
#   tools/upstream_suite/reference.py). TOKAMAX_REFERENCES moves it, TOKAMAX_REFERENCES=off runs it afresh.
# The code under test is never cached: every run lowers, compiles where the cache misses, and runs it.
jax_cache="${TOKAMAX_JAX_CACHE:-$CACHE_ROOT/jax-compilation}"
if [ "$jax_cache" != off ]; then
  export JAX_COMPILATION_CACHE_DIR="$jax_cache" JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0.1
  export JAX_COMPILATION_CACHE_MAX_SIZE=$((8 << 30))  # bytes; JAX drops the least recently used beyond
fi
export TOKAMAX_REFERENCES="${TOKAMAX_REFERENCES:-$CACHE_ROOT/references}"
reports="$REPO/build/test-reports"
logs="$REPO/build/test-logs"
rm -rf "$reports" "$logs" build/upstream-suite/results
mkdir -p "$reports" "$logs"

jax_python=$(ensure_venv jax-tier)
echo "== lint (ruff)"
"$jax_python" -m ruff check --quiet .
echo "== bundle"
"$jax_python" -m tools.bundle

# run_pytest REPORT PYTHON MARKER PYTEST-ARGS...: one tier's pytest, its JUnit report in build/test-reports.
run_pytest() {
  local report=$1 python=$2 marker=$3; shift 3
  [ $fast = 1 ] && marker=kernels_ci
  echo "== $report: $("$python" -c 'import sys; print(sys.version.split()[0])'), marker: ${marker:-none}"
  "$python" -m pytest -p no:cacheprovider ${marker:+-m "$marker"} --junitxml="$reports/$report.xml" "$@"
}

job_jax() {
  run_pytest jax-py312 "$jax_python" "" tests --ignore=tests/torch --ignore=tests/tpu_compile
}
job_torch_py312() {
  local python; python=$(ensure_venv torch-tier)
  TORCH_DEVICE_BACKEND_AUTOLOAD=1 run_pytest torch-py312 "$python" "" tests/torch tests/kernel \
    --ignore=tests/torch/transformers
}
job_torch_py312_transformers() {  # the same tier, its transformers tests as a job of their own (balance)
  local python; python=$(ensure_venv torch-tier)
  TORCH_DEVICE_BACKEND_AUTOLOAD=1 run_pytest torch-py312-transformers "$python" "" tests/torch/transformers
}
job_torch_py312_tf525() {  # the newest transformers, beside the main tier's 5.22.2
  local python; python=$(ensure_venv torch-tier-tf525)
  TORCH_DEVICE_BACKEND_AUTOLOAD=1 run_pytest torch-py312-tf525 "$python" "" tests/torch/transformers tests/torch/trl
}
job_tpu_compile() {  # libtpu comes with torch-tpu: the Torch tier's venv
  local python; python=$(ensure_venv torch-tier)
  run_pytest tpu-compile "$python" "" tests/tpu_compile
}
job_torch_py311() {
  local python; python=$(ensure_venv torch-tier-py311)
  TORCH_DEVICE_BACKEND_AUTOLOAD=1 run_pytest torch-py311 "$python" "kernels_ci or jax_floor" tests/torch tests/kernel
}
job_torch_py313() {
  local python; python=$(ensure_venv torch-tier-py313)
  echo "== import check on Python 3.13 (kernels.get_kernel, torch 2.11)"
  TORCH_DEVICE_BACKEND_AUTOLOAD=1 "$python" -I tools/bundle/import_check.py --get-kernel build/torch-tpu || return 1
  TORCH_DEVICE_BACKEND_AUTOLOAD=1 run_pytest torch-py313 "$python" kernels_ci tests/torch tests/kernel
}
job_suite_upstream() { "$jax_python" -m tools.upstream_suite --side upstream; }
job_suite_port() { "$jax_python" -m tools.upstream_suite --side port; }

status=0
declare -A job_of=() started_at=()
# finish_one: waits for the next job to end, prints its log and records a failure.
finish_one() {
  local pid rc=0 job
  wait -n -p pid "${!job_of[@]}" || rc=$?
  job=${job_of[$pid]}
  unset "job_of[$pid]"
  echo "== $job: $([ $rc = 0 ] && echo ok || echo "FAILED (exit $rc)") in $((SECONDS - ${started_at[$pid]})) s"
  sed 's/^/   | /' "$logs/$job.log"
  [ $rc = 0 ] || status=1
}
# run_jobs JOB...: runs job_JOB for each, at most TOKAMAX_TEST_JOBS (default 2) at once, in the order given.
run_jobs() {
  local job max=${TOKAMAX_TEST_JOBS:-2}
  for job in "$@"; do
    while [ ${#job_of[@]} -ge "$max" ]; do finish_one; done
    ("job_${job//-/_}") > "$logs/$job.log" 2>&1 &
    job_of[$!]=$job; started_at[$!]=$SECONDS
    echo "== $job: started"
  done
  while [ ${#job_of[@]} -gt 0 ]; do finish_one; done
}
# prefetch TIER...: sets up the venvs in this order in the background, so that downloading and unpacking
# them overlaps the tests; a job that asks for a venv still being set up waits for it (ensure_venv's lock)
# and reports any failure itself.
prefetch() {
  local tier
  renice -n 10 -p "$BASHPID" > /dev/null 2>&1 || true  # unpacking yields to the tests
  for tier in "$@"; do ensure_venv "$tier" > /dev/null || true; done
}

if [ $fast = 1 ]; then
  prefetch torch-tier jax-only jax-only-py311 torch-tier-tf525 torch-tier-py313 torch-tier-py311 \
    > "$logs/prefetch.log" 2>&1 &
  prefetch_pid=$!
  run_jobs jax torch-py312 torch-py312-transformers torch-py312-tf525 tpu-compile torch-py313 torch-py311
else
  prefetch upstream torch-tier jax-only jax-only-py311 torch-tier-tf525 upstream-suite torch-tier-py313 torch-tier-py311 \
    > "$logs/prefetch.log" 2>&1 &
  prefetch_pid=$!
  # Longest first, so that the two lanes end together (with the caches of an earlier run: jax ~17.5 min,
  # the Torch tier's transformers tests ~8.5, the rest of it ~10, transformers 5.25's ~12, side port ~8,
  # 3.13 ~3.5, 3.11 ~2.5)
  run_jobs jax torch-py312-transformers torch-py312 torch-py312-tf525 tpu-compile suite-upstream suite-port torch-py313 \
    torch-py311
  echo "== upstream suite (tokamax's own tests: upstream against the port)"
  "$jax_python" -m tools.upstream_suite --compare > "$logs/suite-compare.log" 2>&1 || status=1
  cat "$logs/suite-compare.log"
  cp build/upstream-suite/report.txt "$reports/upstream-suite.txt" 2>/dev/null || true
fi

wait "$prefetch_pid" || true
[ -f "$reports/kernels-benchmark.txt" ] && cat "$reports/kernels-benchmark.txt"
[ -f "$reports/tpu-compile.txt" ] && { echo "== compiled for TPU (build/test-reports/tpu-compile.txt)"; cat "$reports/tpu-compile.txt"; }
"$jax_python" scripts/tier_summary.py "$reports"/{jax-py312,torch-py312,torch-py312-transformers,torch-py312-tf525,tpu-compile,torch-py311,torch-py313}.xml \
  || status=1
exit $status
