"""Training on cached lower layers: the partial regime, or LoRA on the top blocks, with cache_lower.

The partial regime trains the last N blocks and the head (with LoRA and cache_lower: adapters on the last N
blocks only); the blocks below are frozen, so (without their dropout) they give each text the same output every
epoch. Here they run once per text: each training and validation item gets its hidden states after the last frozen
block, and training runs only the top blocks, the pooling and the head, from those. The top runs through the
Hugging Face model's own forward (its attention masks, position handling and norms), with the embedding module
swapped for one that returns the cached states and the block list for its top N, so the computation above the
cache is the uncached model's, which build_cache checks on a few texts.

Encoders (LowerCache) and prompted causal LMs behind the prompt's prefix cache (CausalLowerCache) differ in one
thing: in a causal LM the text attends to the prompt prefix in every block. The prefix's keys and values in the
frozen blocks never change, and its hidden states where the top begins are computed once; in the top blocks they
depend on the weights being trained, so the prefix runs through the top blocks once per batch, with grad, as the
uncached prefix runs through all of them.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

import torch
from torch import nn

from headswap.errors import ConfigError
from headswap.nn.inference import item_length
from headswap.nn.classifier import ClassifierModule
from headswap.nn.hf import HFBody, body_blocks
from headswap.nn.prefix_cache import PrefixCachedBody, kv_pairs, returned_cache
from headswap.text.encoding import label_tensor, pad

# Largest difference allowed between the cached and the uncached logits in the build-time check: float32
# rounding of a reordered computation, far below any change a trained weight makes.
TOLERANCE = 1e-4


def _owner(root: nn.Module, target: nn.Module) -> tuple[nn.Module, str]:
    """The module holding `target` as a direct child, and the child's name."""
    for module in root.modules():
        for name, child in module.named_children():
            if child is target:
                return module, name
    raise ConfigError(f"cannot find where {type(target).__name__} sits in {type(root).__name__}")


class _Given(nn.Module):
    """Stands in for the embedding module: returns the hidden states it is given, whatever it is called with."""

    def __init__(self):
        super().__init__()
        self.hidden = None

    def forward(self, *args, **kwargs):
        return self.hidden


class LowerCache:
    """Where the frozen lower blocks end in a Classifier on an encoder (HFBody over a model with an `embeddings`
    module, as BERT-family encoders have), and how to run above them."""

    def __init__(self, classifier: nn.Module, last_n: int):
        self.classifier = classifier
        self.model = model = self._model(classifier)
        self.blocks = body_blocks(model)
        if not 1 <= last_n < len(self.blocks):
            raise ConfigError(f"cache_lower: last_n must be between 1 and {len(self.blocks) - 1} (the body has "
                              f"{len(self.blocks)} blocks and at least one must stay below to cache), got {last_n}")
        self.split = len(self.blocks) - last_n
        self.top = nn.ModuleList(list(self.blocks)[self.split:])
        self.parent, self.name = _owner(model, self.blocks)

    @staticmethod
    def _model(classifier: nn.Module) -> nn.Module:
        """The Hugging Face model whose blocks are cut; ConfigError when this class cannot run above its cache."""
        body = getattr(classifier, "body", None)
        model = getattr(body, "model", None)
        if not isinstance(body, HFBody) or not isinstance(getattr(model, "embeddings", None), nn.Module):
            raise ConfigError("cache_lower caches the lower blocks of an encoder model (BERT-style embeddings and "
                              "blocks); this strategy's body is not one: train it without cache_lower")
        return model

    @torch.inference_mode()
    def lower(self, items: Sequence[dict], collate, batch_size: int) -> list[torch.Tensor]:
        """Each item's (tokens, D) hidden states after the last frozen block, in item order (eval mode)."""
        was = self.classifier.training
        self.classifier.eval()
        last = self.blocks[self.split - 1]
        captured = []

        class Stop(Exception):
            pass

        def hook(_module, _inputs, output):
            captured.append(output[0] if isinstance(output, tuple) else output)
            raise Stop    # the blocks above are not needed

        device = next(self.classifier.parameters()).device
        order = sorted(range(len(items)), key=lambda i: item_length(items[i]))
        out: list = [None] * len(items)
        handle = last.register_forward_hook(hook)
        try:
            for s in range(0, len(order), batch_size):
                idx = order[s:s + batch_size]
                batch = collate([items[i] for i in idx])
                captured.clear()
                try:
                    self.classifier.body(batch["input_ids"].to(device), batch["attention_mask"].to(device))
                except Stop:
                    pass
                hidden, lengths = captured[0].float(), batch["attention_mask"].sum(1).tolist()
                for j, i in enumerate(idx):
                    out[i] = hidden[j, :lengths[j]].cpu().clone()
        finally:
            handle.remove()
            self.classifier.train(was)
        return out

    @contextmanager
    def above(self, hidden: torch.Tensor):
        """Inside, the model's forward starts from `hidden` and runs only the top blocks."""
        given = _Given()
        given.hidden = hidden
        embeddings, blocks = self.model.embeddings, getattr(self.parent, self.name)
        self.model.embeddings = given
        setattr(self.parent, self.name, self.top)
        try:
            yield
        finally:
            self.model.embeddings = embeddings
            setattr(self.parent, self.name, blocks)


class CausalLowerCache(LowerCache):
    """Where the frozen lower blocks end in a prompted classifier on a causal LM (its body a PrefixCachedBody:
    slm-logits, slm-letters, slm-hidden-mlp), and how to run above them."""

    def __init__(self, classifier: nn.Module, last_n: int):
        super().__init__(classifier, last_n)
        self.body = classifier.body
        self.embed_parent, self.embed_name = _owner(self.model, self.model.get_input_embeddings())
        self._prefix: tuple[list, torch.Tensor] | None = None

    @staticmethod
    def _model(classifier: nn.Module) -> nn.Module:
        body = getattr(classifier, "body", None)
        if not isinstance(body, PrefixCachedBody):
            raise ConfigError("cache_lower on a causal language model caches the blocks below a prompted "
                              "strategy's prompt (slm-logits, slm-letters, slm-hidden-mlp with the prefix cache); "
                              "this strategy's body is not one: train it without cache_lower")
        return body.model

    def lower(self, items: Sequence[dict], collate, batch_size: int) -> list[torch.Tensor]:
        was = self.classifier.training
        self.classifier.eval()
        try:
            with torch.inference_mode():
                self.body.prefix_kv()    # kept in eval mode: the texts' pass below must not meet the prefix's
            return super().lower(items, collate, batch_size)
        finally:
            self.classifier.train(was)

    def prefix(self) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
        """The prefix's (keys, values) in the frozen blocks and its (1, P, D) hidden states after the last of
        them: one run of the frozen model, kept (the frozen blocks hold no trained weights)."""
        if self._prefix is None:
            captured = []
            handle = self.blocks[self.split - 1].register_forward_hook(
                lambda _m, _i, out: captured.append(out[0] if isinstance(out, tuple) else out))
            was = self.model.training
            self.model.eval()
            try:
                with torch.no_grad():
                    out = self.model(input_ids=self.body.prefix_ids, use_cache=True)
            finally:
                handle.remove()
                self.model.train(was)
            lower = [(k.clone(), v.clone()) for k, v in kv_pairs(returned_cache(out), slice(self.split))]
            self._prefix = lower, captured[0].float().clone()
        return self._prefix

    @contextmanager
    def above(self, hidden: torch.Tensor):
        """Inside, the body's forward takes the prefix's cached frozen-block keys/values plus its top-block ones
        (computed now, through the current weights) and runs the top blocks on `hidden`."""
        lower, prefix_hidden = self.prefix()
        given = _Given()
        body, model = self.body, self.model

        def prefix_kv():
            given.hidden = prefix_hidden.to(hidden.device)
            out = model(input_ids=body.prefix_ids, use_cache=True)    # the top blocks only
            given.hidden = hidden
            top = kv_pairs(returned_cache(out), slice(self.split, None))
            return [(k.to(hidden.device), v.to(hidden.device)) for k, v in lower] + top

        given.hidden = hidden
        embed, blocks = getattr(self.embed_parent, self.embed_name), getattr(self.parent, self.name)
        setattr(self.embed_parent, self.embed_name, given)
        setattr(self.parent, self.name, self.top)
        body.prefix_kv = prefix_kv     # an instance attribute: shadows the method until deleted
        try:
            yield
        finally:
            del body.prefix_kv
            setattr(self.embed_parent, self.embed_name, embed)
            setattr(self.parent, self.name, blocks)


class TopOnCache(ClassifierModule):
    """The classifier's top blocks, pooling and head, run on cached lower hidden states. Its parameters are the
    classifier's own (registered under `classifier.`), so training it trains the classifier."""

    def __init__(self, cache: LowerCache):
        super().__init__()
        self.classifier = cache.classifier
        self._cache = cache      # not a submodule: its modules are the classifier's
        self.head_prefixes = tuple("classifier." + p for p in getattr(cache.classifier, "head_prefixes", ("head.",)))

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        with self._cache.above(hidden):
            dummy = torch.zeros(attention_mask.shape, dtype=torch.long, device=attention_mask.device)
            return self.classifier(dummy, attention_mask)


def collate_hidden(items: list[dict]) -> dict:
    """Cached items -> a batch of (B, T, D) hidden states padded with zeros, and their mask."""
    width = max(len(it["hidden"]) for it in items)
    hidden = torch.zeros((len(items), width, items[0]["hidden"].shape[-1]), dtype=items[0]["hidden"].dtype)
    for i, it in enumerate(items):
        hidden[i, :len(it["hidden"])] = it["hidden"]
    _, mask = pad([[0] * len(it["hidden"]) for it in items], 0)
    batch = {"hidden": hidden, "attention_mask": mask}
    if "label" in items[0]:
        batch["labels"] = label_tensor([it["label"] for it in items])
    return batch


def build_cache(classifier: nn.Module, last_n: int, items: Sequence[dict], eval_items: Sequence[dict] | None,
                collate, batch_size: int, body_key: tuple | None = None):
    """(cached training items, cached validation items or None, the TopOnCache module, its collate). Cached items
    keep their token ids (what out-of-scope statistics and length grouping read) beside the hidden states. Raises
    ConfigError when the body is not one whose top can be run from a cache, or when the cached path's logits
    differ from the uncached ones on the first texts.

    body_key names the pretrained body and its text encoding; with it, inside an open inference.feature_cache(),
    fits on the same body and items share one pass of the lower blocks (auto's slices of an arm, and its
    learning-rate variants, each a fit of its own)."""
    from headswap.nn.inference import cached_features
    from headswap.train.checkpoint import data_digest

    cache = (CausalLowerCache if isinstance(getattr(classifier, "body", None), PrefixCachedBody) else LowerCache)(
        classifier, last_n)
    top = TopOnCache(cache)

    def cached(part):
        key = None if body_key is None else body_key + ("lower", cache.split, data_digest(
            [it["input_ids"] for it in part]))
        hidden = cached_features(key, lambda: cache.lower(part, collate, batch_size))
        return [{**it, "hidden": h} for it, h in zip(part, hidden)]
    train = cached(items)
    probe = list(items[:4])
    with torch.inference_mode():
        was = classifier.training
        classifier.eval()
        device = next(classifier.parameters()).device
        direct = classifier(**{k: v.to(device) for k, v in collate(probe).items() if k != "labels"})
        via = top(**{k: v.to(device) for k, v in collate_hidden(train[:4]).items() if k != "labels"})
        classifier.train(was)
    gap = float((direct - via).abs().max())
    if not gap <= TOLERANCE:
        raise ConfigError(f"cache_lower: this model's top blocks do not give the same logits when run from cached "
                          f"hidden states (largest difference {gap:.2g}); train it without cache_lower")
    return train, cached(eval_items) if eval_items else None, top, collate_hidden
