"""The model zoo (tools/chip/zoo, issue 72) without a chip: its models' fields against what is published of them
(parameter counts, the configs' own figures), the calls and the plan built from them (every family, the skips'
reasons, shards that fit a command), a small model's workloads traced for the v5e as they will run, and
docs/zoo.md as generated."""

from __future__ import annotations

import ast
import json
import re

import jax
import pytest

from tests.conftest import REPO
from tools.chip import zoo
from tools.chip.zoo import memory, models, params, plan, select, shapes, table
from tools.chip.zoo import workloads as zoo_workloads

pytestmark = pytest.mark.kernels_ci

PAGE = REPO / "docs/zoo.md"
PUBLISHED = {  # parameters as each model's card or paper gives them
    "Llama 3.2 1B": 1.24e9, "Llama 3.1 8B": 8.03e9, "Llama 3.1 70B": 70.6e9, "Qwen2.5 0.5B": 0.49e9,
    "Qwen2.5 7B": 7.61e9, "Qwen2.5 72B": 72.7e9, "Qwen3 0.6B": 0.6e9, "Qwen3 8B": 8.2e9, "Qwen3 32B": 32.8e9,
    "Qwen3-30B-A3B": 30.5e9, "Qwen3-235B-A22B": 235e9, "Qwen1.5-MoE-A2.7B": 14.3e9, "Qwen2-57B-A14B": 57.4e9,
    "Mixtral 8x7B": 46.7e9, "Mistral 7B": 7.24e9, "OLMoE 1B-7B": 6.92e9, "Gemma 2 2B": 2.61e9, "Gemma 2 9B": 9.24e9,
    "Gemma 2 27B": 27.2e9, "Phi-3-mini": 3.8e9, "Phi-4": 14.7e9, "Phi-3.5-MoE": 41.9e9, "SmolLM2 135M": 135e6,
    "SmolLM2 1.7B": 1.7e9, "DeepSeek-V2-Lite": 15.7e9, "DeepSeek-V3": 671e9, "gpt-oss-20b": 20.9e9,
    "gpt-oss-120b": 116.8e9,
}


def test_the_zoo_holds_at_least_30_published_models_dense_and_moe():
    names = [m.name for m in models.MODELS]
    assert len(names) >= 30 and len(set(names)) == len(names)
    assert len({m.hub for m in models.MODELS}) == len(names)
    assert all(re.fullmatch(r"[\w.-]+/[\w.-]+", m.hub) for m in models.MODELS)
    moe = [m for m in models.MODELS if m.moe]
    assert len(moe) >= 10 and len(names) - len(moe) >= 20
    for family in ("Llama 3", "Qwen2.5", "Qwen3", "Gemma 2", "Gemma 3", "Phi-3", "Phi-4", "Mistral", "Mixtral",
                   "DeepSeek-V2-Lite", "DeepSeek-V3", "OLMoE", "gpt-oss", "Granite", "SmolLM2"):
        assert any(n.startswith(family) for n in names), family


def test_the_fields_the_brief_quotes_are_the_published_configs():
    by = models.BY_NAME
    l1 = by["Llama 3.2 1B"]
    assert (l1.hidden_size, l1.num_attention_heads, l1.num_key_value_heads, l1.head_dim, l1.vocab_size) == \
        (2048, 32, 8, 64, 128256)
    q = by["Qwen2.5 0.5B"]
    assert (q.hidden_size, q.num_attention_heads, q.num_key_value_heads, q.head_dim, q.vocab_size) == \
        (896, 14, 2, 64, 151936)
    g = by["Gemma 2 2B"]
    assert (g.hidden_size, g.num_attention_heads, g.num_key_value_heads, g.head_dim, g.vocab_size, g.sliding_window,
            g.attn_logit_softcapping, g.final_logit_softcapping) == (2304, 8, 4, 256, 256000, 4096, 50.0, 30.0)
    big = by["Qwen3-235B-A22B"]
    assert (big.num_experts, big.num_experts_per_tok, big.moe_intermediate_size, big.hidden_size) == \
        (128, 8, 1536, 4096)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_from_the_fields_are_the_published_sizes(name):
    """A field written wrong (a width, a head count, the experts) moves the count past a few percent."""
    counted = params.parameters(models.BY_NAME[name])
    assert counted == pytest.approx(PUBLISHED[name], rel=0.03), f"{name}: {counted / 1e9:.3f}B"


def test_every_models_fields_are_consistent():
    for m in models.MODELS:
        s = models.shard(m)
        assert m.num_attention_heads % m.num_key_value_heads == 0, m.name
        assert s.heads * m.tensor_parallel == m.num_attention_heads, m.name
        assert s.heads % s.kv_heads == 0, m.name
        assert m.head_dim > 0 and m.vocab_size > 0 and m.num_hidden_layers > 0, m.name
        if m.moe:
            assert m.num_experts_per_tok and m.moe_intermediate_size, f"{m.name}: a MoE's fields are complete"
            assert m.num_experts_per_tok <= s.experts and s.experts * m.expert_parallel == m.num_experts, m.name
            assert m.dense_layers == 0 or m.intermediate_size, m.name
        else:
            assert m.intermediate_size and not (m.num_experts_per_tok or m.moe_intermediate_size or m.dense_layers or
                                                m.expert_parallel > 1), m.name
        assert m.global_every == 0 or m.sliding_window, f"{m.name}: a layer pattern only with a window"
        assert (m.attn_logit_softcapping is None) == (m.final_logit_softcapping is None) == \
            (not m.name.startswith("Gemma 2")), m.name
        assert m.sinks == m.name.startswith("gpt-oss") and (m.mla is not None) == m.name.startswith("DeepSeek")
        assert (m.logits_scaling is not None) == m.name.startswith("Granite"), m.name


def test_windows_are_only_where_the_config_has_them():
    for m in models.MODELS:
        for t in shapes.TOKENS:
            calls = shapes.attention(m, t)
            windows = {c.window for c in calls}
            if m.sliding_window is None or m.sliding_window >= t:
                assert windows == {None}, (m.name, t)
            else:  # every layer windowed, or some: their call beside the global layers'
                assert windows == ({None, m.sliding_window} if m.global_every else {m.sliding_window}), (m.name, t)
            assert all(c.soft_cap == m.attn_logit_softcapping and c.sinks == m.sinks for c in calls)


def test_the_shard_and_mla_shapes():
    """A chip's shard by the one rule; DeepSeek's MLA as multi-head attention of 192 (q, k) and 128 (v)."""
    v3 = models.BY_NAME["DeepSeek-V3"]
    assert models.shard(v3) == models.Shard(16, 16, 18432 // 8, 8)
    (attention,) = shapes.attention(v3, 4096)
    assert (attention.heads, attention.kv_heads, attention.head_dim, attention.v_head_dim) == (16, 16, 192, 128)
    gate_up, down = shapes.experts(v3, 4096)
    assert (gate_up.rows, gate_up.hidden, gate_up.out, gate_up.experts) == (4096 * 8, 7168, 4096, 8)
    assert (down.hidden, down.out) == (2048, 7168)
    assert models.shard(models.BY_NAME["Llama 3.1 70B"])[:2] == (8, 1)
    assert models.shard(models.BY_NAME["Qwen3-235B-A22B"]) == models.Shard(8, 1, 0, 16)


def test_every_family_appears_at_every_token_count():
    entries = plan.entries()
    running = [e for e in entries if not e.skipped]
    for family in shapes.FAMILIES:
        for t in shapes.TOKENS:
            assert any(e.family == family and e.tokens == t and e.way == "tokamax" for e in running), (family, t)
    assert {e.pass_ for e in running if e.op == "attention"} == set(shapes.PASSES)
    for m in models.MODELS:
        made = {c.op for c in shapes.calls(m, 4096)}
        assert {"attention", "lm_head_loss", "lm_head_statistics"} <= made, m.name
        assert ("grouped_matmul" in made) == m.moe, m.name
    for student, teacher in shapes.PAIRS:
        s, t = models.BY_NAME[student], models.BY_NAME[teacher]
        assert s.family == t.family and params.parameters(s) < params.parameters(t), (student, teacher)
        assert abs(s.vocab_size - t.vocab_size) <= 128, (student, teacher)  # one tokenizer, padded apart


def test_every_call_is_measured_against_an_alternative_and_every_skip_says_why():
    entries = plan.entries()
    for group in plan.groups(entries):
        ours = [e for e in group if e.way == "tokamax"]
        assert len(ours) == 1, group[0].key
        if ours[0].skipped:
            assert all(e.skipped for e in group)
            continue
        assert any(not e.skipped for e in group if e.way != "tokamax"), f"{group[0].key}: no alternative runs"
    skipped = [e for e in entries if e.skipped]
    assert skipped and all(len(e.skipped) > 20 and "GiB" in e.skipped for e in skipped)
    by_key = {e.key[:3] + (e.way,): e for e in entries}
    llama = "32/8 heads of 128, 32768 tokens, causal"
    assert "float32 logits [heads, tokens, tokens]" in by_key[("attention", llama, "fwd+bwd", "xla")].skipped
    assert "dq per KV block" in by_key[("attention", llama, "fwd+bwd", "jax splash fused")].skipped
    assert not by_key[("attention", llama, "fwd+bwd", "jax splash")].skipped  # its separate kernels instead
    assert not by_key[("attention", "32/8 heads of 128, 8192 tokens, causal", "fwd+bwd", "xla")].skipped
    head = "32768 tokens, hidden 4096, vocabulary 128256, plain logits"
    assert by_key[("lm_head_loss", head, "fwd+bwd", "xla")].skipped
    assert not by_key[("lm_head_loss", head, "fwd+bwd", "xla chunked")].skipped
    assert set(by_key[("attention", llama, "fwd", "tokamax")].models) >= {"Llama 3.1 8B", "Qwen3 8B"}  # one case
    near = [e for e in entries if e.way == "xla" and e.op not in ("attention", "grouped_matmul") and not e.skipped
            and memory.need(e.call, "xla", e.pass_) > memory.CHUNKED_FROM]
    assert near and all(not by_key[e.key[:3] + ("xla chunked",)].skipped for e in near)  # both, where near the chip


def test_the_memory_estimates_hold_what_the_chip_ran_and_refused():
    """docs/benchmarks.md's runs on the v5e: XLA's attention at 32 heads of 128 and 8,192 tokens ran forward and
    backward; JAX's fused splash backward at 32,768 ran out of HBM; XLA's statistics at Qwen3 8B's head and 8,192
    rows held 9.27 GiB of temporaries and ran; at Gemma 3 4B's they ran out."""
    llama = shapes.Attention(32, 8, 128, 128, 8192, None, None, False, 128 ** -0.5)
    assert memory.fits(llama, "xla", "fwd+bwd")
    assert not memory.fits(llama._replace(tokens=32768), "jax splash fused", "fwd+bwd")
    assert memory.fits(llama._replace(tokens=32768), "jax splash", "fwd+bwd")
    qwen = shapes.Head("lm_head_statistics", 8192, 4096, 151936, 1.0, None, False)
    assert memory.fits(qwen, "xla", "fwd+bwd")
    assert memory.need(qwen, "xla", "fwd+bwd") - memory.need(qwen, "tokamax", "fwd+bwd") + memory.SHARE == \
        pytest.approx(9.27 * memory.GiB, rel=0.01)
    assert not memory.fits(qwen._replace(hidden=2560, vocab=262208), "xla", "fwd+bwd")


def test_the_shards_cover_the_plan_and_fit_a_command():
    running = [e for e in plan.entries() if not e.skipped]
    n = plan.shards_needed(running)
    parts = plan.split(running, n)
    assert sorted(e.key for p in parts for e in p) == sorted(e.key for e in running)
    shard_of: dict[tuple, set[int]] = {}
    for i, p in enumerate(parts):
        assert p and plan.START_S + plan.seconds(p) <= plan.COMMAND_S, plan.seconds(p)
        for e in p:
            shard_of.setdefault((e.op, e.case, e.pass_), set()).add(i)
    assert all(len(s) == 1 for s in shard_of.values()), "a group (the package's way and its alternatives) is split"
    # the room's docstring states the plan's size and split
    doc = " ".join(zoo.__doc__.split())
    assert f"{len(running):,} workloads" in doc and f"into {n} shards" in doc and f"1/{n}" in doc, doc
    assert f"{len(models.MODELS)} published models" in doc


def test_six_compiles_at_a_time_split_the_plan_into_fewer_commands_that_fit():
    """`TOKAMAX_ZOO_JOBS=6`: the shards split by the estimate at six compiles at a time cover the plan, whole groups
    each, each within a command, in fewer commands than one at a time; the bench's selection splits the same way."""
    running = [e for e in plan.entries() if not e.skipped]
    n = plan.shards_needed(running, 6)
    assert n < plan.shards_needed(running)
    parts = plan.split(running, n, 6)
    assert sorted(e.key for p in parts for e in p) == sorted(e.key for e in running)
    assert all(p and plan.START_S + plan.seconds(p, 6) <= plan.COMMAND_S for p in parts)
    part = select.from_env({select.ENV_SHARD: f"2/{n}", select.ENV_JOBS: "6"})
    assert part.jobs == 6 and part.describe()["jobs"] == 6
    assert [e.key for e in select.chosen(plan.entries(), part)] == [e.key for e in plan.split(plan.entries(), n, 6)[1]]
    for bad in ("3", "0"):
        with pytest.raises(ValueError, match="TOKAMAX_ZOO_JOBS"):
            select.from_env({select.ENV_JOBS: bad})
    with pytest.raises(ValueError, match="compiles at a time"):
        running[0].seconds_at(2)


def test_a_command_selects_its_part_by_the_environment():
    entries = plan.entries()
    part = select.from_env({select.ENV_MODELS: "Llama 3.2 1B, Qwen3 8B", select.ENV_TOKENS: "128,8192",
                            select.ENV_OPS: "attention"})
    chosen = select.chosen(entries, part)
    assert chosen and all(e.op == "attention" and e.tokens in (128, 8192) for e in chosen)
    assert all({"Llama 3.2 1B", "Qwen3 8B"} & set(e.models) for e in chosen)
    whole = [e for e in entries if e.tokens == 128]
    shards = [select.chosen(entries, select.from_env({select.ENV_TOKENS: "128", select.ENV_SHARD: f"{i}/3"}))
              for i in (1, 2, 3)]
    assert sorted(e.key for s in shards for e in s) == sorted(e.key for e in whole)
    for bad in ({select.ENV_MODELS: "Llama 4"}, {select.ENV_OPS: "mlp"}, {select.ENV_SHARD: "4/3"}):
        with pytest.raises(ValueError):
            select.from_env(bad)
    assert select.from_env({}) == select.Selection()


def test_the_zoo_is_above_the_chip_tier_and_imports_no_cycle():
    """tools/chip/zoo may import tools/chip's modules, never the reverse (but the command line, which names it);
    within the room no module imports one that imports it back."""
    for path in [*(REPO / "tools/chip").glob("*.py"), *(REPO / "tools/chip/workloads").glob("*.py"),
                 *(REPO / "tools/chip/step").glob("*.py")]:
        if path.name != "__main__.py":
            nodes = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Import | ast.ImportFrom)]
            imported = [getattr(n, "module", None) or "" for n in nodes] + [a.name for n in nodes for a in n.names]
            assert not [i for i in imported if "zoo" in i], path
    room = REPO / "tools/chip/zoo"
    graph = {}
    for path in room.glob("*.py"):
        tree = ast.parse(path.read_text())
        graph[path.stem] = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1
                            and n.module is None for a in n.names} | {
            n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1
            and n.module}

    def reaches(start: str, goal: str, seen: set) -> bool:
        return any(m == goal or (m not in seen and reaches(m, goal, seen | {m})) for m in graph.get(start, ()))
    assert not [m for m in graph if reaches(m, m, set())], graph


def test_a_small_models_workloads_make_their_inputs_and_trace_for_the_v5e(kernel, emulation):
    """SmolLM2 135M (its distillation pair too) and OLMoE's experts at 128 tokens, Gemma 2's soft caps, gpt-oss's
    window and sinks and DeepSeek's MLA at 256: each workload's inputs made as shapes (`make_specs`, no array) and
    its function traced as the chip will run it (no compile)."""
    part = select.Selection(frozenset({"SmolLM2 135M", "OLMoE 1B-7B"}), frozenset({128}))
    options = select.Selection(frozenset({"Gemma 2 2B", "gpt-oss-20b", "DeepSeek-V2-Lite"}), frozenset({256}),
                               frozenset({"attention", "lm_head_statistics", "distillation"}))
    traced = []
    with emulation.emulated_chip("v5e"):
        for w in [*zoo_workloads.workloads(kernel, part), *zoo_workloads.workloads(kernel, options)]:
            fn, specs = w.make_specs()
            assert all(isinstance(s, jax.ShapeDtypeStruct) for s in jax.tree.leaves(specs))
            jax.jit(fn).trace(*specs)
            traced.append((w.op, w.impl, w.pass_, w.case))
    ops = {t[0] for t in traced}
    assert ops == set(select.OPS), ops
    assert ("attention", "xla", "fwd+bwd", "64/8 heads of 64, 256 tokens, causal, window 128, sinks") in traced
    assert ("attention", "tokamax", "fwd+bwd", "16/16 heads of 192 (v 128), 256 tokens, causal") in traced
    assert any(t[:2] == ("distillation", "tokamax") and "soft cap 30" in t[3] for t in traced)
    assert any(t[:2] == ("grouped_matmul", "tokamax") and t[3].startswith("down: 128 tokens x top-8") for t in traced)


def test_the_page_is_generated_from_the_records_and_the_plan():
    assert table.section(PAGE.read_text()) == table.section(table.render()), \
        "docs/zoo.md's tables differ from benchmarks/measured and the plan: regenerate (python -m tools.chip.zoo.table)"
    for f in table.zoo_files():
        data = json.loads(f.read_text())
        assert data["what"] == "zoo" and "zoo" in data and data["records"], f.name
        assert all("compile_s" in r for r in data["records"]), f.name


def test_the_tables_read_a_run(tmp_path):
    """A run's records: the speed-up over the fastest alternative, the worst with its models, first calls."""
    case = "32/8 heads of 128, 8192 tokens, causal"

    def record(impl: str, median: float | None, compile_s: float, first: float = 0.01) -> dict:
        r = {"op": "attention", "case": case, "impl": impl, "pass": "fwd", "median_s": median,
             "compile_s": compile_s, "flops": 1.0}
        return r | ({"first_run_s": first} if median else {"error": "RESOURCE_EXHAUSTED"})

    run = {"what": "zoo", "chip": "TPU v5 lite", "jax": "0.10.2", "commit": "0" * 40, "started": "2027-01-01",
           "zoo": {}, "records": [record("tokamax", 0.005, 12.0), record("jax splash (512 blocks, fused bwd)", 0.007,
                                                                        3.0),
                                  record("xla", 0.04, 2.0), record("xla (chunked)", None, 1.0)]}
    path = tmp_path / "v5e-2027-01-01-zoo-1-0000000.json"
    path.write_text(json.dumps(run))
    (row,) = table.compared([path])
    assert row.best["impl"].startswith("jax splash") and row.ratio == pytest.approx(1.4)
    text = table.render([path])
    line = next(t for t in text.splitlines() if t.startswith("| splash | fwd |"))
    assert "1.40x" in line and "Llama 3.1 8B" in line and "| 12.0, 12.0 | 1 | 1 |" in line, line
    assert "| Llama 3.1 8B | 1.40x (1) |" in text


def test_the_tables_compare_calls_issued_back_to_back_where_a_run_has_them(tmp_path):
    """At prefill sizes a waited call is mostly the host's dispatch and wait: where the records carry the calls issued
    back to back (`pipelined_s`), those are compared and pick the fastest alternative; older records compare medians."""
    case = "32/8 heads of 128, 256 tokens, causal"

    def record(impl: str, median: float, pipelined: float | None) -> dict:
        r = {"op": "attention", "case": case, "impl": impl, "pass": "fwd", "median_s": median, "compile_s": 1.0,
             "flops": 1.0, "first_run_s": 0.001}
        return r | ({"pipelined_s": pipelined} if pipelined else {})

    for pipelined, best, ratio in ((True, "xla", 0.2 / 0.1), (False, "jax splash", 0.55 / 0.6)):
        run = {"what": "zoo", "chip": "TPU v5 lite", "jax": "0.10.2", "commit": "0" * 40, "started": "2027-01-01",
               "zoo": {}, "records": [record("tokamax", 0.6, 0.1 if pipelined else None),
                                      record("jax splash (256 blocks, fused bwd)", 0.55, 0.3 if pipelined else None),
                                      record("xla", 0.58, 0.2 if pipelined else None)]}
        path = tmp_path / f"v5e-2027-01-01-zoo-{int(pipelined)}-0000000.json"
        path.write_text(json.dumps(run))
        (row,) = table.compared([path])
        assert row.best["impl"].startswith(best) and row.ratio == pytest.approx(ratio)
        assert f"{1 - int(pipelined)} of the runs predate" in table.render([path])
        assert "1 of the runs compiled six at once" in table.render([path])  # its header names no compiles_at_once


def test_a_batched_run_times_each_batch_after_compiling_it():
    """`run(..., batch=)` (the zoo's commands): every workload recorded in order, its first call timed."""
    import jax.numpy as jnp

    from tools.chip.run import run
    from tools.chip.workloads import Workload

    made = [Workload("op", f"case {i}", "impl", "fwd", lambda i=i: (lambda x: x * i, (jnp.ones(4),)), 1.0)
            for i in range(5)]
    seen = []
    measured = []
    run(made, lambda w, m, c, e: (seen.append((w.case, e, m.first_run_s)), measured.append(m)), jobs=2, runs=1,
        warmup=1, batch=2)
    assert [s[0] for s in seen] == [w.case for w in made]
    assert all(error is None and first is not None for _, error, first in seen)
    assert all(m.pipelined_s > 0 for m in measured)


def test_the_header_says_whether_first_calls_met_jaxs_persistent_cache(tmp_path):
    """A shard run twice with JAX_COMPILATION_CACHE_DIR set measures first calls cold, then from the cache: the
    records must say which (the directory and the entries already in it when the run started)."""
    assert "compilation_cache" in zoo_workloads.header(select.Selection(), "no such case")
    (tmp_path / "jit_f-0123-cache").write_bytes(b"x")
    (tmp_path / "other").write_bytes(b"x")
    assert zoo_workloads.compilation_cache(str(tmp_path)) == {
        "dir": str(tmp_path), "entries_at_start": 1,
        "min_compile_time_s": jax.config.jax_persistent_cache_min_compile_time_secs}
    assert zoo_workloads.compilation_cache(str(tmp_path / "not yet made"))["entries_at_start"] == 0
