"""The chip tier: on a TPU host, the kernels compiled and run on the chip, checked against independent
references (`check`) and timed side by side with what a user would run instead (`bench`).

    python3 -m tools.chip check --out DIR          # pass/fail per kernel family, DIR/check.json
    python3 -m tools.chip bench --out DIR          # the side-by-side benchmark, DIR/bench.json
    python3 -m tools.chip all --out DIR            # both, in one process (one chip start)
    TOKAMAX_ZOO_SHARD=1/N python3 -m tools.chip bench --only zoo --out DIR   # the model zoo, a shard (`zoo`)

It needs JAX with a TPU backend and the built bundle (`./build.sh`: build/torch-tpu, loaded as a plain
package, so neither torch nor `kernels` is needed). CI has no chip: there the tier's pieces that need none
(the results' schema, the generated table) are tested, and the measured files are read by the cost model.
"""
