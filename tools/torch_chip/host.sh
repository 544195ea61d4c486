# Sourced on the chip host (bash): torch 2.13's CPU build from the host's wheel folder, torch-tpu from the package
# `python3 -m tools.torch_chip.pack` made (build/torch-chip/torch_tpu.tar.xz, carried), the wheels
# `python3 -m tools.torch_chip.wheels` fetched (build/torch-chip/wheels, carried, where a run needs them), and a
# libtpu version torch-tpu accepts (../shared/DESIGN.md §18 in the team's notes, docs/torch-chip.md here):
#
#   source tools/torch_chip/host.sh && python3 -m tools.torch_chip bridge --out $OUT/bridge
#
# - torch-tpu 0.2.0 asks for libtpu >= 0.0.50 and cannot parse the host's "0.0.42.1": a folder first on PYTHONPATH
#   holding only `libtpu-0.0.42.dist-info/METADATA` lets it load; it then runs on that libtpu's PJRT plugin.
# - Everything lands under $TORCH_CHIP_ROOT (default /tmp/torch-chip): a warm host keeps it between commands, so
#   a second `source` only sets the variables.
# - JAX keeps the host's own JAX first; what is installed here comes after it on PYTHONPATH.
TORCH_CHIP_ROOT=${TORCH_CHIP_ROOT:-/tmp/torch-chip}
_tc_repo=$(pwd)
_tc_index="file://${TORCH_CHIP_INDEX:-/opt/pypi/simple}"
mkdir -p "$TORCH_CHIP_ROOT"
if [ ! -d "$TORCH_CHIP_ROOT/site/torch" ]; then
  echo "torch-chip: torch 2.13.0 (CPU build) from ${TORCH_CHIP_WHEELS:-/opt/wheels}"
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-cache-dir --only-binary=:all: \
    --index-url "$_tc_index" --find-links "${TORCH_CHIP_WHEELS:-/opt/wheels}" --target "$TORCH_CHIP_ROOT/site" \
    torch==2.13.0 || echo "torch-chip: torch did not install" >&2
fi
if [ ! -f "$TORCH_CHIP_ROOT/deps/portpicker.py" ]; then  # a module, not a folder
  # torch-tpu's own needs: the index has all but portpicker (carried: build/torch-chip/tpu-deps, from pack.py)
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-cache-dir --only-binary=:all: \
    --index-url "$_tc_index" --target "$TORCH_CHIP_ROOT/deps" absl-py tensorboard frozendict immutabledict pyzmq \
    || echo "torch-chip: torch-tpu's needs did not install" >&2
  # portpicker: the index has all but portpicker (carried: build/torch-chip/tpu-deps, from pack.py)
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-cache-dir \
    --target "$TORCH_CHIP_ROOT/deps" "$_tc_repo"/build/torch-chip/tpu-deps/*.whl || echo "torch-chip: no portpicker" >&2
fi
if [ ! -d "$TORCH_CHIP_ROOT/torch-tpu/torch_tpu" ]; then
  if [ -f "$_tc_repo/build/torch-chip/torch_tpu.tar.xz" ]; then
    echo "torch-chip: torch-tpu from build/torch-chip/torch_tpu.tar.xz"
    mkdir -p "$TORCH_CHIP_ROOT/torch-tpu" && tar -xJf "$_tc_repo/build/torch-chip/torch_tpu.tar.xz" -C "$TORCH_CHIP_ROOT/torch-tpu"
  else
    echo "torch-chip: no build/torch-chip/torch_tpu.tar.xz (run python3 -m tools.torch_chip.pack here and carry it)" >&2
  fi
fi
mkdir -p "$TORCH_CHIP_ROOT/shim/libtpu-0.0.42.dist-info"
printf 'Metadata-Version: 2.1\nName: libtpu\nVersion: 0.0.42\n' > "$TORCH_CHIP_ROOT/shim/libtpu-0.0.42.dist-info/METADATA"
if [ -d "$_tc_repo/build/torch-chip/wheels" ] && [ ! -f "$TORCH_CHIP_ROOT/wheels.done" ]; then
  echo "torch-chip: the carried wheels"
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-cache-dir --index-url "$_tc_index" \
    --target "$TORCH_CHIP_ROOT/host-site" tokenizers safetensors regex pyyaml tqdm pandas pyarrow xxhash psutil jinja2 \
    requests || echo "torch-chip: some of the host index's packages did not install" >&2
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$TORCH_CHIP_ROOT/wheels-site" "$_tc_repo"/build/torch-chip/wheels/*.whl \
    && touch "$TORCH_CHIP_ROOT/wheels.done"
fi
# libtpu torch-tpu asks for (tools/torch_chip/libtpu_pack.py): its parts come one per command; once all are here,
# joined (hashes checked), unpacked, and first on the Torch process's path instead of the shim. TORCH_CHIP_LIBTPU=shim
# keeps the shim on the host's libtpu.
if [ -f "$_tc_repo/build/torch-chip/libtpu/parts.json" ]; then
  mkdir -p "$TORCH_CHIP_ROOT/libtpu-parts" && cp "$_tc_repo"/build/torch-chip/libtpu/* "$TORCH_CHIP_ROOT/libtpu-parts/"
fi
if [ ! -d "$TORCH_CHIP_ROOT/libtpu-new/libtpu" ] && [ -f "$TORCH_CHIP_ROOT/libtpu-parts/parts.json" ]; then
  if python3 -m tools.torch_chip.libtpu_pack join "$TORCH_CHIP_ROOT/libtpu-parts" "$TORCH_CHIP_ROOT/libtpu.tar.xz"; then
    mkdir -p "$TORCH_CHIP_ROOT/libtpu-new" && tar -xJf "$TORCH_CHIP_ROOT/libtpu.tar.xz" -C "$TORCH_CHIP_ROOT/libtpu-new" \
      && rm -f "$TORCH_CHIP_ROOT/libtpu.tar.xz" "$TORCH_CHIP_ROOT"/libtpu-parts/libtpu.tar.xz.*
  fi
fi
_tc_first="$TORCH_CHIP_ROOT/shim"
if [ "${TORCH_CHIP_LIBTPU:-}" != "shim" ] && [ -d "$TORCH_CHIP_ROOT/libtpu-new/libtpu" ]; then
  _tc_first="$TORCH_CHIP_ROOT/libtpu-new"
  echo "torch-chip: torch-tpu on $(ls -d "$_tc_first"/libtpu-*.dist-info | xargs -n1 basename)"
fi
export PYTHONPATH="$_tc_first:${PYTHONPATH}:$TORCH_CHIP_ROOT/torch-tpu:$TORCH_CHIP_ROOT/wheels-site:$TORCH_CHIP_ROOT/site:$TORCH_CHIP_ROOT/deps:$TORCH_CHIP_ROOT/host-site"
export PYTHONUNBUFFERED=1
unset _tc_repo _tc_index _tc_first
