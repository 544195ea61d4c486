"""How transformers' continuous-batching cache reaches `flash_paged`, on either side of transformers 5.24.

- transformers <= 5.23 (tested: 5.22.2): the forward's keyword arguments carry `cache` (the PagedAttentionCache)
  down to the attention function, which is expected to call `cache.update` itself (transformers' own flash, sdpa
  and paged|eager functions do). `flash_paged` takes the cache from there and never calls `update`.
- transformers >= 5.24 (tested: 5.25.0): every model's attention module calls
  `cache.update(key, value, layer_idx, kwargs=kwargs)` before the attention function, which no longer sees the
  cache. Off CUDA that `update` copies the new tokens into transformers' cache, gathers each sequence's whole KV
  back out and rewrites `kwargs["cu_seq_lens_k"]` / `["max_length_k"]` to this layer kind's entries.

So `PagedAttentionCache.update` is wrapped (on both sides: on <= 5.23 nothing calls it for a cache of ours): for
a cache whose model runs one of this copy's functions (`cache.config._attn_implementation` resolves to it by
identity) and whose allocators are exactly transformers' full-attention and sliding-window ones, it hands the
cache on in `kwargs` (updated in place, as `update`'s contract says) and returns the new tokens untouched;
`flash_paged` writes them into its own cache. Every other cache goes to transformers' own `update`. The decision
is kept per cache and implementation: transformers keeps a cache across `generate_batch` sessions
(`persistent_manager`, `keep_for_next_session`) and the model may switch implementations between them.

Such a switch cannot carry the keys and values over: the kernel keeps them in a cache of its own and releases
transformers' cache tensor (`binding`), and transformers' own attention keeps them in that tensor, where blocks
shared by prefix with the next session's requests stay. So the first call after a switch on a kept cache is
refused, naming the way out (`switched`): transformers' attention on a cache the kernel served (in `update`), the
kernel on a cache transformers' `update` wrote (in `checks.call`). (transformers' kept inputs do not follow the
switch either: the attention mask is allocated, or not, for the implementation the manager started with.)

The wrap rests on the structure it read at install: `update`'s parameters and the two allocator classes. If
those are not as expected, nothing is wrapped, and every continuous-batching call that comes without its cache
(so needed the hand-off) is refused naming why (`refusal`): with a "flash" name continuous batching builds no
mask, so falling back to transformers' own attention would attend across the packed sequences. A call that
carries the cache (transformers < 5.24) needs none and runs.
"""

from __future__ import annotations

import functools
import inspect
import logging
import weakref
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

TESTED = ("5.22.2", "5.25.0")  # the transformers releases this was tested on
UPDATE_PARAMETERS = ["self", "key_states", "value_states", "layer_idx", "kwargs"]
KINDS = {"FullAttentionCacheAllocator": "full_attention", "SlidingAttentionCacheAllocator": "sliding_attention"}
WAY_OUT = "use attn_implementation='paged|eager' or 'sdpa'"
SWITCH_WAY_OUT = ("call model.destroy_cached_continuous_batching_manager() before switching the attention "
                  "implementation (or generate without persistent_manager)")

state: dict[str, Any] = {"installed": False, "why": None}  # why: the structure did not match (no hand-off)
_decided: weakref.WeakKeyDictionary[Any, tuple[str | None, str | None]] = weakref.WeakKeyDictionary()
"""cache -> (the attention implementation it was decided for, None or why not): transformers keeps a cache across
`generate_batch` sessions (`keep_for_next_session`) and the implementation may change between them."""
_written: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()
"""cache -> the implementation whose calls had transformers' own `update` write into it."""


def version() -> str:
    """The transformers version, for messages."""
    try:
        import transformers
    except ImportError:
        return "(not installed)"
    return transformers.__version__


def implementation(cache: Any) -> str | None:
    """The attention implementation of the model `cache` serves (its config is the model's text config)."""
    return getattr(getattr(cache, "config", None), "_attn_implementation", None)


def _allocator_classes() -> dict[type, str] | str:
    """transformers' allocator classes by the layer kind each serves, or why they are not as expected."""
    try:
        from transformers.generation.continuous_batching import cache_allocators
    except ImportError as e:
        return f"its continuous-batching cache allocators do not import ({e})"
    classes = {}
    for name, kind in KINDS.items():
        cls = getattr(cache_allocators, name, None)
        if cls is None or getattr(cls, "layer_type", None) != kind:
            return f"its cache_allocators.{name} is missing or its layer_type is not {kind!r}"
        classes[cls] = kind
    return classes


def _structure() -> tuple[Any, dict[type, str]] | str:
    """transformers' PagedAttentionCache class and allocator classes, or why they are not the expected ones."""
    try:
        from transformers.generation.continuous_batching.cache import PagedAttentionCache
    except ImportError as e:
        return f"its PagedAttentionCache does not import ({e})"
    signature = inspect.signature(PagedAttentionCache.update)
    plain = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in signature.parameters.values())
    if list(signature.parameters) != UPDATE_PARAMETERS or not plain:
        return (f"its PagedAttentionCache.update{signature.replace(return_annotation=inspect.Signature.empty)} "
                f"does not take ({', '.join(UPDATE_PARAMETERS)})")
    classes = _allocator_classes()
    return classes if isinstance(classes, str) else (PagedAttentionCache, classes)


def install(served: Callable[[Any], bool]) -> None:
    """Wraps `PagedAttentionCache.update` once per copy of this kernel (`served`: whether a function is one of
    this copy's), or records why it cannot; warns once on a transformers release it was not tested on."""
    if state["installed"] or state["why"] is not None:
        return
    found = _structure()
    if isinstance(found, str):
        state["why"] = f"transformers {version()}: {found}"
        return
    cache_class, kinds = found
    original = cache_class.update

    def why_not(cache: Any, name: str | None) -> str | None:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        if name is None or not served(ALL_ATTENTION_FUNCTIONS.get(name)):
            return "not ours"
        for kind, allocator in cache.cache_allocators.items():
            if kinds.get(type(allocator)) != kind:
                return (f"its {kind!r} cache is a {type(allocator).__name__}, which flash_paged does not serve "
                        "(transformers' full-attention and sliding-window allocators only)")
        return None

    @functools.wraps(original)
    def update(self: Any, key_states: Any, value_states: Any, layer_idx: int, kwargs: dict) -> Any:
        name = implementation(self)
        decided = _decided.get(self)
        if decided is None or decided[0] != name:
            decided = _decided[self] = (name, why_not(self, name))
        if decided[1] is None:
            kwargs["cache"] = self  # flash_paged writes the new tokens into its own cache and reads only their pages
            return key_states, value_states
        released = getattr(self, "cache_tensor", None)
        if released is not None and released.numel() == 0:  # by the kernel's binding, which holds the keys and values
            raise NotImplementedError(switched(
                self, "served tokamax's kernel, which holds its keys and values in a cache of its own (transformers' "
                      "cache tensor released)"))
        _written[self] = name
        return original(self, key_states, value_states, layer_idx, kwargs)

    cache_class.update = update
    state["installed"] = True
    if version() not in TESTED:
        logger.warning("tokamax flash_paged: transformers %s is untested (tested: %s); continuous batching's "
                       "cache is taken from PagedAttentionCache.update", version(), ", ".join(TESTED))


def switched(cache: Any, what: str) -> str:
    """The refusal of a call after the attention implementation was switched on a kept cache: `what` happened to
    the cache in an earlier session."""
    return (f"tokamax flash_paged: this PagedAttentionCache, kept from an earlier continuous-batching session "
            f"(persistent_manager), {what}, so {implementation(cache)!r} cannot run on it; {SWITCH_WAY_OUT}")


def written_by_transformers(cache: Any) -> str | None:
    """The refusal for the kernel taking over a cache that transformers' own `update` wrote, or None."""
    if cache not in _written:
        return None
    return switched(cache, f"was written by transformers' own attention ({_written[cache]!r}), whose keys and values "
                           "(and the blocks its requests share by prefix) the kernel's own cache does not hold")


def refusal() -> str:
    """Why a continuous-batching call cannot run (what `checks.call` says): the structure did not match, or the
    call came without its cache."""
    if state["why"] is not None:
        return f"{state['why']}, so continuous batching's cache cannot be taken as tokamax expects; {WAY_OUT}"
    base = (f"transformers {version()} called the attention function from continuous batching without its "
            "PagedAttentionCache")
    reasons = sorted({why for _, why in _decided.values() if why not in (None, "not ours")})
    if reasons:
        return f"{base}: {'; '.join(reasons)}; {WAY_OUT}"
    return f"{base} (this model's attention module did not hand it on); {WAY_OUT}"
