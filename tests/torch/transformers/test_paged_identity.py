"""Mosaic identity of what `flash_paged` runs on a TPU: the Torch op's JAX function (`_batched_rpa_jax`, which
torch-tpu exports) at the arguments `flash_paged` hands it lowers, for the TPU chip, to the same whole module as
upstream's public `tokamax.ops.batched_ragged_paged_attention(..., implementation="mosaic_tpu")` (lowered in the
upstream venv) at the same arguments.

The arguments are captured from `flash_paged` itself over transformers' own paged cache (bfloat16, transformers'
default page size 256, 8 query heads on 2 KV heads of 128): a decode-heavy mix (seven decodes at 40 to 2000 cached
tokens and a chunk continuation) and a prefill mix (three fresh prompts). The comparison is the public identity
test's (tests/jax/public: `lower_public`, `normalise`, upstream's report runner); each chip of v5e, v6e and v7x
lowers one mix or both (each lowering takes seconds on each side).
"""

from __future__ import annotations

import importlib
import inspect
import json
import threading

import pytest
import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

from tests.jax.public import api as api_lib
from tests.jax.public.cases import PublicCase
from tests.jax.public.lowering import lower_public
from tests.jax.public.normalise import mosaic_count

from .cb_batches import Batches, Layer

MIXES = {  # name: (history steps that fill the cache, the captured step), as (request, new tokens)
    "decode-heavy": ([[("a", 300), ("b", 700), ("c", 1000), ("d", 40)], [("e", 1500), ("f", 90), ("g", 2000)],
                      [("h", 600)]],
                     [("a", 1), ("b", 1), ("c", 1), ("h", 57), ("d", 1), ("e", 1), ("f", 1), ("g", 1)]),
    "prefill": ([], [("p", 100), ("q", 37), ("r", 250)]),
}
CASES = [("decode-heavy", "v5e"), ("prefill", "v6e"), ("decode-heavy", "v7x")]  # every chip, every mix


class _Capture(TorchDispatchMode):
    """The arguments of this build's custom-op calls, which are not run (their outputs: zeros of their shapes)."""

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace, self.calls = namespace, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if func.namespace == self.namespace:
            self.calls.append((func.name().split("::")[1], args))
            return torch.zeros_like(args[0]), torch.zeros_like(args[3])
        return func(*args, **(kwargs or {}))


def _captured(tokamax, mix: str) -> tuple:  # noqa: ANN001
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=1024, num_hidden_layers=1, num_attention_heads=8,
                                      num_key_value_heads=2, head_dim=128)
    batches = Batches(config, page_size=256, num_blocks=48, dtype=torch.bfloat16)
    history, step = MIXES[mix]
    for work in history:
        batches.step(work)  # allocation and indices only: the cache's contents do not change the module
    kwargs, tokens = batches.step(step), sum(n for _, n in step)
    q = torch.zeros(1, 8, tokens, 128, dtype=torch.bfloat16)
    k = torch.zeros(1, 2, tokens, 128, dtype=torch.bfloat16)
    capture = _Capture(importlib.import_module(f"{tokamax.__name__}._ops")._OPS_NAME)
    with capture:
        tokamax.flash_paged(Layer(0), q, k, k, None, scaling=128**-0.5, **kwargs)
    [(name, args)] = capture.calls
    assert name == "batched_rpa" and args[-1] == ""  # the custom op's last argument: no autotuning result applied
    return args[:-1]


@pytest.fixture(scope="session")
def lowered(tokamax, tmp_path_factory):  # noqa: ANN001, ANN201
    """Per case id: (ours, upstream's) normalised modules (or errors), upstream's lowered meanwhile in its venv."""
    from tests.jax.conftest import upstream_report

    family = tokamax.torch_ops.families["batched_rpa"]
    names = list(inspect.signature(family._batched_rpa_jax).parameters)[8:]  # cp_rank and the options
    captured = {mix: _captured(tokamax, mix) for mix in MIXES}
    raw, ours_cases = [], {}
    for mix, chip in CASES:
        args = captured[mix]
        specs = tuple((tuple(t.shape), str(t.dtype).removeprefix("torch.")) for t in args[:8])
        options = dict(zip(names, args[8:], strict=True))
        raw.append({"id": mix, "chip": chip, "specs": specs, "options": options})
        ours_cases[f"{mix}@{chip}"] = PublicCase(mix, chip, specs, lambda api, o=args[8:]: (
            lambda *arrays: family._batched_rpa_jax(*arrays, *o)))
    tmp = tmp_path_factory.mktemp("paged-identity")
    (tmp / "cases.json").write_text(json.dumps(raw))
    theirs: dict = {}
    worker = threading.Thread(target=lambda: theirs.update(upstream_report(
        "tests/torch/transformers/paged_upstream_run.py", tmp / "out.json", tmp / "cases.json")))
    worker.start()
    api, ours = api_lib.ours(tokamax), {}
    for key, case in ours_cases.items():
        ours[key] = lower_public(case, api, tokamax.emulation)
    worker.join()
    assert "modules" in theirs, "the upstream run failed (see its stderr above)"
    return {key: (ours[key], theirs["modules"].get(key, theirs["errors"].get(key))) for key in ours}


@pytest.mark.parametrize(("mix", "chip"), CASES, ids=[f"{m}@{c}" for m, c in CASES])
def test_flash_paged_lowers_to_upstreams_public_call(lowered, mix, chip):
    ours, theirs = lowered[f"{mix}@{chip}"]
    assert ours == theirs, f"{mix}@{chip}: the module differs from upstream's (or upstream failed):\n{theirs[-2000:]}"
    assert mosaic_count(ours) >= 3, "expected the kernel's decode, prefill and mixed passes"
