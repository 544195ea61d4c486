# Sourced by build.sh and test.sh: finds each tier's interpreter and keeps its venv in step
# with its pinned requirements. Nothing here needs anything preinstalled but Python.
#
# Tiers (venv name: Python, requirements/NAME.txt). Each Python is found on PATH (pythonX.Y, then
# python3), then in pyenv; override it with TOKAMAX_PYTHON312 / TOKAMAX_PYTHON311 / TOKAMAX_PYTHON313.
#   jax-tier:         3.12  the JAX tier and the bundle build (jax 0.12)
#   torch-tier:       3.12  the main Torch tier: torch 2.13, torch-tpu 0.2.0, jax 0.12 (what TPU users install)
#   torch-tier-tf525: 3.12  the same stack on transformers 5.25 with kernels 0.19 (its transformers and TRL tests)
#   torch-tier-py311: 3.11  the Torch compatibility subset: torch 2.13 CPU, torch-tpu 0.2.0, jax 0.10.2
#   torch-tier-py313: 3.13  kernel-builder's torch 2.11 with torch-tpu 0.2.0 and jax 0.12
#   upstream:         3.12  tokamax 0.0.17 with all it drags in (comparisons, benchmarks)
#   upstream-suite:   3.12  upstream's own test suite against the port
#   jax-only:         3.12  jax 0.12 alone (the "nothing beyond JAX" import checks)
#   jax-only-py311:   3.11  jax 0.10.2 alone

set -euo pipefail

# On a host without TPU chips, torch-tpu's libtpu still starts its PJRT client the first time torch
# asks for the device count (e.g. autograd's first backward) and queries the GCP metadata server for
# the TPU topology; where something answers at that address but is no metadata server, it retries
# for minutes. No TPU here means no topology to ask for.
if ! ls /dev/accel* /dev/vfio/[0-9]* >/dev/null 2>&1; then
  export TPU_SKIP_MDS_QUERY="${TPU_SKIP_MDS_QUERY:-1}"
fi
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The venvs live in a per-user cache, one per tier and pin set (named by a hash of its frozen
# requirements and the interpreter's version), so that every clone and worktree with the same pins
# shares them, as pre-commit shares its environments; .venv/TIER in the clone links to the one in use.
# TOKAMAX_VENVS moves the cache (TOKAMAX_VENVS=$PWD/.venv-cache keeps everything in the clone).
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/kernels-community-tokamax"
VENVS="${TOKAMAX_VENVS:-$CACHE_ROOT/venvs}"

_tier_python_version() {
  case "$1" in
    jax-tier|torch-tier|torch-tier-tf525|upstream|upstream-suite|jax-only) echo 3.12 ;;
    torch-tier-py311|jax-only-py311) echo 3.11 ;;
    torch-tier-py313) echo 3.13 ;;
    *) echo "env.sh: unknown tier $1" >&2; return 2 ;;
  esac
}

# The variable that overrides the interpreter of Python X.Y: TOKAMAX_PYTHONXY.
_override_name() { echo "TOKAMAX_PYTHON${1/./}"; }

_is_version() {  # _is_version PYTHON X.Y
  "$1" -c "import sys; sys.exit(0 if '%d.%d' % sys.version_info[:2] == '$2' else 1)" 2>/dev/null
}

# find_python TIER: prints the interpreter for TIER (override, then PATH, then pyenv).
find_python() {
  local tier=$1 want override override_name candidate root
  want=$(_tier_python_version "$tier")
  override_name=$(_override_name "$want")
  override=${!override_name:-}
  if [ -n "$override" ]; then
    if _is_version "$override" "$want"; then echo "$override"; return 0; fi
    echo "env.sh: $override (from $override_name) is not Python $want, which the $tier tier needs" >&2
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
  echo "        Install Python $want, or point $override_name at one." >&2
  return 1
}

# ensure_venv TIER: the venv of TIER for the current pins, set up on first use (then kept); prints
# its python and links .venv/TIER to it. Holds the venv's lock meanwhile, so that two processes
# asking for the same venv (./test.sh's jobs and its prefetch, two clones) set it up once: the
# second waits, then finds it ready. A venv of the same tier for other pins, unused for 7 days, is removed.
ensure_venv() {
  local tier=$1 req="$REPO/requirements/$1.txt" python version key venv
  python=$(find_python "$tier")
  version=$("$python" -c 'import sys; print(sys.version.split()[0])')
  key=$( (cat "$req"; echo "$version") | sha256sum | cut -c1-12)
  venv="$VENVS/$tier-$key"
  mkdir -p "$VENVS"
  (
    flock 9
    if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
      echo "env.sh: setting up $venv from $req with $python" >&2
      rm -rf "$venv"
      "$python" -m venv "$venv"
      if ! "$venv/bin/python" -m pip install --disable-pip-version-check -r "$req" > "$venv/pip.log" 2>&1; then
        grep -v "^WARNING: Location" "$venv/pip.log" | tail -n 30 >&2
        echo "env.sh: installing $req into $venv failed (full log: $venv/pip.log)" >&2
        exit 1
      fi
      local other
      for other in "$VENVS/$tier"-????????????/; do  # this tier only: the key is 12 characters
        if [ "${other%/}" != "$venv" ] && [ -n "$(find "$other.complete" -mtime +7 2>/dev/null)" ]; then
          rm -rf "${other%/}" "${other%/}.lock"
        fi
      done
    fi
    touch "$venv/.complete"  # last used (the pruning above reads it)
  ) 9> "$venv.lock" || return 1
  local link="$REPO/.venv/$tier"
  if [ "$(readlink "$link" 2>/dev/null)" != "$venv" ]; then
    mkdir -p "$REPO/.venv"
    [ -L "$link" ] || rm -rf "$link"  # a venv of the old layout, inside the clone
    ln -sfn "$venv" "$link.$$" && mv -Tf "$link.$$" "$link"
  fi
  echo "$venv/bin/python"
}
