"""The prefix KV cache: run the prompt's shared prefix once, and each text's own tokens against it.

Prompted strategies (slm-logits, slm-letters, slm-hidden-mlp) feed every text as
``prefix + text + suffix``, where the prefix (chat template system turn, instruction, class list) is
the same for every text and usually longer than the text itself. A causal model's hidden states for
the prefix do not depend on what follows it, so its keys and values can be computed once and reused:

* inference (eval mode, grad disabled): the prefix KV is computed once and kept until the body's
  parameters change (checked with their version counters and storage), the module switches mode
  (``train()`` after ``eval()`` or back; ``eval()`` on an eval-mode module keeps it), or
  :meth:`PrefixCachedBody.invalidate` is called;
* training (grad enabled): the prefix runs once per batch, as one row with grad, and its KV is
  expanded over the batch, so the prefix costs one row instead of B and gradients (LoRA adapters,
  trained blocks) still flow through it.

The body takes only the rest (text + suffix) of each item, right-padded, and returns the hidden states
of those tokens, equal (up to float rounding) to the same positions of the uncached full sequence.
:func:`strip_prefix` turns prompt items (prefix + text + suffix) into such rest-only items.

Parameter names equal HFBody's (``model.*``), so LoRA injection, regimes and saved weights are the same
with or without the cache.

Caveat: in training mode a dropout inside the body (e.g. LoRA dropout) draws one mask for the shared
prefix row instead of one per text; without dropout the gradients equal the uncached ones.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch

from headswap.nn.classifier import Classifier
from headswap.errors import ConfigError
from headswap.nn.heads import SlicedLMHead
from headswap.nn.hf import HFBody, _is_causal, base_of

__all__ = ["PrefixCachedBody", "strip_prefix", "supports_prefix_cache", "uncached_and_cached"]


def supports_prefix_cache(model: torch.nn.Module) -> bool:
    """Whether a Hugging Face base model can run against a cache of past keys/values: it is causal and
    a two-token probe, run as one token then one more against the first one's cache, gives the hidden
    state of the uncached pair. Tried, not read off the forward's signature: transformers renames the
    argument (``past_key_values`` became ``cache`` in 5.x) and wraps forwards in decorators."""
    return _is_causal(model) and cache_keyword(model) is not None


def cache_keyword(model: torch.nn.Module) -> str | None:
    """The forward's keyword for a key/value cache that reproduces the uncached hidden states
    (``cache`` or ``past_key_values``), or None when neither does. Probed once per model."""
    if "_headswap_cache_kw" in model.__dict__:
        return model.__dict__["_headswap_cache_kw"]
    try:
        signature = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        signature = {}
    # the name the forward lists first: a renamed argument still accepted under its old name warns
    names = sorted(_CACHE_KEYWORDS, key=lambda n: n not in signature)
    found = next((n for n in names if _probe(model, n)), None)
    model.__dict__["_headswap_cache_kw"] = found   # not a module attribute: state_dict and repr ignore it
    return found


_CACHE_KEYWORDS = ("cache", "past_key_values")


def _probe(model: torch.nn.Module, keyword: str) -> bool:
    """Run two tokens whole, and as one token plus one against the first one's cache; True when the
    second token's hidden states agree."""
    try:
        param = next(model.parameters())
    except StopIteration:
        return False
    ids = torch.tensor([[1, 2]], device=param.device)
    was_training = model.training
    model.eval()   # dropout off, so both runs compute the same function
    try:
        with torch.no_grad():
            whole = model(input_ids=ids, use_cache=False).last_hidden_state[:, 1]
            first = model(input_ids=ids[:, :1], use_cache=True)
            cache = returned_cache(first)
            if cache is None:
                return False
            second = model(input_ids=ids[:, 1:], position_ids=torch.tensor([[1]], device=param.device),
                           use_cache=True, **{keyword: cache}).last_hidden_state[:, 0]
    except (TypeError, ValueError, RuntimeError, AttributeError):
        return False
    finally:
        model.train(was_training)
    tol = 1e-4 if whole.dtype == torch.float32 else 2e-2
    return bool(torch.allclose(whole.float(), second.float(), atol=tol * max(1.0, whole.abs().max().item()),
                               rtol=tol))


def returned_cache(out):
    """The key/value cache a forward returned: ``out.cache`` (transformers 5.x) or ``out.past_key_values``."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def strip_prefix(items: list[dict], prefix: Sequence[int] | int) -> list[dict]:
    """Prompt items ``{"input_ids": prefix + text + suffix, ...}`` -> rest-only items (text + suffix).

    ``prefix`` is the prefix's token ids (each item is checked to start with them) or its length.
    Other keys (labels, ...) are kept. Raises ValueError when an item does not start with the prefix
    or has no tokens after it.
    """
    ids = None if isinstance(prefix, int) else list(prefix)
    n = prefix if ids is None else len(ids)
    out = []
    for i, item in enumerate(items):
        row = list(item["input_ids"])
        if ids is not None and row[:n] != ids:
            raise ValueError(f"item {i} does not start with the prompt prefix ({n} tokens)")
        if len(row) <= n:
            raise ValueError(f"item {i} has no tokens after the {n}-token prefix")
        out.append({**item, "input_ids": row[n:]})
    return out


class PrefixCachedBody(HFBody):
    """Runs the shared prompt prefix once and each text's own tokens (text + suffix) against its KV cache."""

    def __init__(self, body: HFBody, prefix_ids: Sequence[int]):
        model = body.model if isinstance(body, HFBody) else body
        super().__init__(model)
        if not supports_prefix_cache(model):
            raise ConfigError(
                f"{type(model).__name__} cannot run with a prefix cache: it is not a causal language model "
                "that reproduces its hidden states from a key/value cache. Turn the prefix cache off "
                "(prefix_cache=False).")
        self._cache_kw = cache_keyword(model)
        prefix = [int(t) for t in prefix_ids]
        if not prefix:
            raise ConfigError("the prefix cache needs a non-empty prompt prefix")
        self.register_buffer("prefix_ids", torch.tensor([prefix], dtype=torch.long), persistent=False)
        self._kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self._kv_key: tuple | None = None
        self.prefix_runs = 0  # how many times the prefix was run (for tests and benchmarks)
        self.training = model.training  # a wrapped eval-mode model stays in eval mode

    @property
    def prefix_len(self) -> int:
        return self.prefix_ids.shape[1]

    # ---- cache management ---------------------------------------------------------------------------
    def invalidate(self) -> None:
        """Forget the cached prefix KV (call after changing the model in ways not seen by its parameters,
        e.g. enabling/disabling adapters)."""
        self._kv, self._kv_key = None, None

    def train(self, mode: bool = True):
        if bool(mode) != self.training:  # a mode switch; eval() on an eval-mode body keeps the cache
            self.invalidate()
        return super().train(mode)

    def _state_key(self) -> tuple | None:
        """Identifies the body's weights: storage and in-place version of every parameter and buffer.
        None when it cannot be read (then nothing is cached)."""
        try:
            key = [(t.data_ptr(), t._version, t.dtype, t.device) for t in self.model.parameters()]
            key += [(t.data_ptr(), t.dtype, t.device) for t in self.model.buffers()]
        except RuntimeError:  # e.g. inference tensors have no version counter
            return None
        return tuple(key)

    def _run_prefix(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        out = self.model(input_ids=self.prefix_ids, use_cache=True)
        self.prefix_runs += 1
        return kv_pairs(returned_cache(out))

    def prefix_kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-layer (key, value) of the prefix, each (1, heads, prefix_len, head_dim)."""
        if self.training or torch.is_grad_enabled():
            return self._run_prefix()   # with grad: once per batch, through the current weights
        key = self._state_key()
        if self._kv is None or key is None or key != self._kv_key:
            self._kv, self._kv_key = self._run_prefix(), key
        return self._kv

    def _fresh_cache(self, kv: list[tuple[torch.Tensor, torch.Tensor]], batch: int):
        """A new cache object per batch holding the prefix KV expanded (not copied) over the batch; the
        stored tensors are never updated in place."""
        from transformers import DynamicCache

        pairs = [(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)) for k, v in kv]
        try:
            cache = DynamicCache(config=self.model.config)
        except TypeError:  # older transformers: no config argument
            cache = DynamicCache()
        layers = getattr(cache, "layers", None)
        if layers is None or len(layers) != len(pairs):
            return DynamicCache(pairs)
        try:
            from transformers.cache_utils import DynamicLayer
        except ImportError:  # pragma: no cover - transformers without per-layer caches
            DynamicLayer = None
        for layer, (k, v) in zip(layers, pairs):
            if DynamicLayer is not None and type(layer) is DynamicLayer and _lazy_init(layer, k, v):
                # Fast path: the layer's update() concatenates new keys after these, so the expanded
                # view is materialised once, with the text's keys, instead of twice.
                layer.keys, layer.values = k, v
            else:  # sliding-window or other layer types: let the layer store them its own way
                layer.update(k, v)
        return cache

    # ---- forward ------------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        """input_ids / attention_mask hold only the text + suffix tokens (right-padded); returns their
        (B, T_rest, D) hidden states."""
        if input_ids.ndim != 2 or input_ids.shape[1] == 0:
            raise ValueError(f"expected (batch, tokens) ids with at least one token, got shape {tuple(input_ids.shape)}")
        batch, rest = input_ids.shape
        n = self.prefix_len
        kv = self.prefix_kv()
        if kv[0][0].device != input_ids.device:
            raise ValueError(f"input ids are on {input_ids.device} but the model is on {kv[0][0].device}")
        cache = self._fresh_cache(kv, batch)
        mask = torch.cat([attention_mask.new_ones(batch, n), attention_mask], dim=1)
        positions = torch.arange(n, n + rest, device=input_ids.device).unsqueeze(0).expand(batch, -1)
        out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                         use_cache=True, **{self._cache_kw: cache}, **kwargs)
        return out.last_hidden_state


def _lazy_init(layer, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Initialise an empty DynamicLayer for these keys; False where its lazy_initialization has another
    signature (transformers 4.5x takes the keys alone), so the caller falls back to update()."""
    try:
        layer.lazy_initialization(k, v)
    except TypeError:
        return False
    return True


def kv_pairs(cache, layers: slice = slice(None)) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-layer (keys, values) from a returned cache, across transformers cache layouts; `layers` picks some
    (headswap.train.lower_cache reads the top blocks' of a run that went through those alone)."""
    if hasattr(cache, "layers"):                         # transformers >= 4.56 / 5.x
        pairs = [(layer.keys, layer.values) for layer in cache.layers]
    elif hasattr(cache, "key_cache"):                    # transformers 4.4x-4.55 DynamicCache
        pairs = list(zip(cache.key_cache, cache.value_cache))
    elif isinstance(cache, (tuple, list)):               # legacy tuples
        pairs = [(layer[0], layer[1]) for layer in cache]
    else:
        raise ConfigError(f"cannot read the prefix keys/values from a {type(cache).__name__}")
    pairs = pairs[layers]
    # an empty tensor: the placeholder older caches keep for a layer that was skipped
    if not pairs or any(k is None or v is None or k.numel() == 0 for k, v in pairs):
        raise ConfigError("the model returned no (or partial) keys/values for the prefix; "
                          "it cannot be used with the prefix cache")
    return pairs


def uncached_and_cached(causal_lm: torch.nn.Module, prefix_ids: Sequence[int],
                        token_ids: list[int]) -> tuple[Classifier, Classifier]:
    """Two slm-logits classifiers over one body and one sliced head, without and with the prefix cache (in
    eval mode): what the cache's tests and its speed benchmark compare. The uncached one takes whole prompt
    items; the cached one takes :func:`strip_prefix` items."""
    head = SlicedLMHead.from_model(causal_lm, token_ids)
    hidden, k = causal_lm.config.hidden_size, len(token_ids)
    body = HFBody(base_of(causal_lm))
    plain = Classifier(body, hidden, k, pooling="last", head=head).eval()
    cached = Classifier(PrefixCachedBody(body, prefix_ids), hidden, k, pooling="last", head=head).eval()
    return plain, cached
