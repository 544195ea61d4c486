"""The model zoo (issue 72): every op family the package speeds up, at the shapes of 48 published models (dense and
MoE, 135M to a chip's shard of DeepSeek-V3) and at training (4k to 32k) and prefill (128 to 1,024) token counts, each
beside the best alternative a JAX user has, in one run; docs/zoo.md is generated from the runs' records.

- `models`: the models' config.json fields, and the one definition of a chip's shard of a large model.
- `params`: a model's parameter count from those fields (the check that they are the published ones).
- `shapes`: the calls a model makes per family at a token count (pure), the distillation pairs.
- `memory`: what each way of running a call holds in HBM, by the benchmark's measured boundaries.
- `plan`: each distinct (call, pass, way) once, with its models, the skips and their reasons, the estimated seconds,
  the split into commands.
- `select`: the part of the plan one command runs (`TOKAMAX_ZOO_MODELS`, `_TOKENS`, `_OPS`, `_SHARD`).
- `baselines`: the alternatives in plain JAX where the benchmark's own take no soft cap, sinks or logit transform.
- `workloads`: the plan as the benchmark's `Workload`s (`python3 -m tools.chip bench --only zoo`).
- `table`: docs/zoo.md's generated part.

How a full run is split (`python -m tools.chip.zoo` prints the commands): the plan holds 5,257 workloads that run
(2,392 groups of one call and pass: the package's way and each alternative; 388 alternatives skipped where they
would not fit the chip), estimated at 4.7 h on a v5e: compile seconds by family from the benchmark's records, at a
third (those compiled six at once; the zoo compiles one at a time, as a user's first call does), 12 calls each (22
under 50 ms) at the rate each way reached in the benchmark, the inputs made.
The chip host allows 600 s a command, so the plan is cut into 57 shards of about 300 s of estimated work (+90 s to
start JAX, load the bundle and measure the peaks), whole groups each, in the plan's order (token count by token
count, the prefill counts first):

    TOKAMAX_ZOO_SHARD=1/57 python3 -m tools.chip bench --only zoo --out build/chip/zoo-1   # ... to 57/57

`TOKAMAX_ZOO_JOBS=6` compiles six at a time instead (`python -m tools.chip.zoo --jobs 6` lists its fewer shards,
split by the estimate at six: `plan.JOBS`, `plan.SIX_AT_ONCE`); its first calls overstate a user's.

A part can be named instead (`TOKAMAX_ZOO_TOKENS=8192 TOKAMAX_ZOO_MODELS="Llama 3.1 8B,Qwen3-30B-A3B"`, then
`TOKAMAX_ZOO_SHARD` splits that part) and `--case TEXT` filters as for any module. The zoo's workloads are compiled
and timed 36 at a time (`tools.chip.__main__.ZOO_BATCH`), so a command cut at the limit keeps every batch it
finished. Each command writes DIR/zoo.json (records as the benchmark's, with `compile_s` and `first_run_s`: the first
call; the header's `zoo` the selection and its skips), committed as benchmarks/measured/<chip>-<date>-zoo-<part>-
<commit>.json.
"""
