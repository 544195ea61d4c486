# Sourced by build.sh and test.sh: finds each tier's interpreter and keeps its venv in step
# with its pinned requirements. Nothing here needs anything preinstalled but Python.
#
# Tiers (name: Python, requirements):       override the interpreter with
#   jax-tier:   3.12, requirements/jax-tier.txt    TOKAMAX_PYTHON_JAX=/path/to/python3.12
#   torch-tier: 3.11, requirements/torch-tier.txt  TOKAMAX_PYTHON_TORCH=/path/to/python3.11
#   upstream:   3.12, requirements/upstream.txt    TOKAMAX_PYTHON_JAX (tokamax 0.0.17 for comparisons)
#   upstream-suite: 3.12, requirements/upstream-suite.txt  (upstream's test suite against the port)
#   jax-tier-py313: 3.13, requirements/jax-tier-py313.txt  TOKAMAX_PYTHON_PY313 (kernel-builder's TPU Python)
#   jax-only:        3.12, jax 0.12 alone   (the "nothing beyond JAX" import checks)
#   jax-only-py311:  3.11, jax 0.10.2 alone

set -euo pipefail

# On a host without TPU chips, torch-tpu's libtpu still starts its PJRT client the first time torch
# asks for the device count (e.g. autograd's first backward) and queries the GCP metadata server for
# the TPU topology; where something answers at that address but is no metadata server, it retries
# for minutes. No TPU here means no topology to ask for.
if ! ls /dev/accel* /dev/vfio/[0-9]* >/dev/null 2>&1; then
  export TPU_SKIP_MDS_QUERY="${TPU_SKIP_MDS_QUERY:-1}"
fi
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENVS="${TOKAMAX_VENVS:-$REPO/.venv}"

_tier_python_version() {
  case "$1" in
    jax-tier|upstream|upstream-suite|jax-only) echo 3.12 ;;
    torch-tier|jax-only-py311) echo 3.11 ;;
    jax-tier-py313) echo 3.13 ;;
    *) echo "env.sh: unknown tier $1" >&2; return 2 ;;
  esac
}

_tier_override() {
  case "$1" in
    jax-tier|upstream|upstream-suite|jax-only) echo "${TOKAMAX_PYTHON_JAX:-}" ;;
    torch-tier|jax-only-py311) echo "${TOKAMAX_PYTHON_TORCH:-}" ;;
    jax-tier-py313) echo "${TOKAMAX_PYTHON_PY313:-}" ;;
  esac
}

_tier_override_name() {
  case "$1" in
    torch-tier|jax-only-py311) echo TOKAMAX_PYTHON_TORCH ;;
    jax-tier-py313) echo TOKAMAX_PYTHON_PY313 ;;
    *) echo TOKAMAX_PYTHON_JAX ;;
  esac
}

_is_version() {  # _is_version PYTHON X.Y
  "$1" -c "import sys; sys.exit(0 if '%d.%d' % sys.version_info[:2] == '$2' else 1)" 2>/dev/null
}

# find_python TIER: prints the interpreter for TIER (override, then PATH, then pyenv).
find_python() {
  local tier=$1 want override candidate root
  want=$(_tier_python_version "$tier")
  override=$(_tier_override "$tier")
  if [ -n "$override" ]; then
    if _is_version "$override" "$want"; then echo "$override"; return 0; fi
    echo "env.sh: $override (from the override variable) is not Python $want, which the $tier tier needs" >&2
    return 1
  fi
  for candidate in "python$want" python3; do
    if command -v "$candidate" >/dev/null 2>&1 && _is_version "$(command -v "$candidate")" "$want"; then
      command -v "$candidate"; return 0
    fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    root=$(pyenv root)
    for candidate in $(ls -d "$root"/versions/"$want".*/bin/python"$want" 2>/dev/null | sort -V -r); do
      if _is_version "$candidate" "$want"; then echo "$candidate"; return 0; fi
    done
  fi
  echo "env.sh: no Python $want found for the $tier tier (looked on PATH for python$want and python3, then in pyenv)." >&2
  echo "        Install Python $want, or point $(_tier_override_name "$tier") at one." >&2
  return 1
}

# ensure_venv TIER: creates or refreshes $VENVS/TIER; prints its python.
ensure_venv() {
  local tier=$1 venv="$VENVS/$1" req="$REPO/requirements/$1.txt" python stamp want
  python=$(find_python "$tier")
  want="$(sha256sum "$req" | cut -d' ' -f1) $("$python" -c 'import sys; print(sys.version.split()[0])')"
  stamp="$venv/.requirements-stamp"
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "env.sh: setting up $venv from $req with $python" >&2
    rm -rf "$venv"
    "$python" -m venv "$venv"
    if ! "$venv/bin/python" -m pip install --disable-pip-version-check -r "$req" > "$venv/pip.log" 2>&1; then
      grep -v "^WARNING: Location" "$venv/pip.log" | tail -n 30 >&2
      echo "env.sh: installing $req into $venv failed (full log: $venv/pip.log)" >&2
      return 1
    fi
    echo "$want" > "$stamp"
  fi
  echo "$venv/bin/python"
}
