"""The Strategy contract: everything one way of classifying knows, in one place.

A strategy is a small object with class attributes (what it needs, what it can do) and three methods:
`text_encoder` (text -> tokens), `build` (loaded model -> classifier module) and, optionally, `freeze`
and `extra_metrics`. The module it builds follows headswap.nn.classifier.ClassifierModule: forward(**batch)
returns (B, K) logits. Strategy files import torch only inside their methods, so that the command line can
list and check strategies without loading it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from headswap.errors import ConfigError

# Every registered strategy by name: filled and re-exported by headswap.strategies, and kept here so that a
# strategy's check can name the others without importing the package that imports it.
REGISTRY: dict[str, Strategy] = {}


@dataclass
class Build:
    """What a strategy builds from: the loaded model, the classes and the resolved settings."""

    params: dict[str, Any]        # the classifier's settings (headswap.settings), regime resolved
    hf_model: Any                 # the Hugging Face model as loaded (with its LM head when Strategy.lm_head)
    tokenizer: Any
    kind: str                     # "encoder" | "causal"
    labels: list[str]
    descriptions: dict[str, str]
    zero_shot: bool               # epochs == 0: nothing trains
    prompt: Any = None            # headswap.text.prompts.Prompt, set by prompted strategies
    encoder: Any = None           # the TextEncoder, set from Strategy.text_encoder before build()
    saved: dict = field(default_factory=dict)   # extra entries for the saved config (e.g. answer token ids)
    texts: list | None = None     # the training texts, when fitting (None when loading a saved model)
    restored: dict = field(default_factory=dict)   # a saved model's config, when loading it: what `saved` held

    @property
    def hidden(self) -> int:
        return self.hf_model.config.hidden_size

    @property
    def causal(self) -> bool:
        return self.kind == "causal"

    @property
    def regime(self) -> str:
        return self.params["regime"]

    def pooling(self, default: str | None = None) -> str:
        """The pooling setting, with 'auto' resolved: `default`, else last token for causal LMs, mean for
        encoders."""
        p = self.params["pooling"]
        return p if p != "auto" else (default or ("last" if self.causal else "mean"))

    def base_model(self):
        """The transformer under a *ForCausalLM wrapper, or the model itself."""
        from headswap.nn.hf import base_of
        return base_of(self.hf_model) if self.causal and hasattr(self.hf_model, "lm_head") else self.hf_model

    # ---- shared recipes ---------------------------------------------------------------------------
    def plain_encoder(self, instruction: bool = True):
        """Each text on its own (with an 'Instruct: ... Query:' prefix when an instruction is set)."""
        from headswap.text.encoding import TextEncoder
        text = self.params.get("instruction")
        prefix = f"Instruct: {text}\nQuery: " if (instruction and text) else ""
        return TextEncoder(self.tokenizer, "plain", self.params["max_length"], prefix=prefix,
                           append_eos=self.causal, chunk_stride=self.params.get("chunk_stride"))

    def prompt_encoder(self, letters: bool = False, cache: bool = True):
        """Each text inside the task prompt. With `cache` (and a model that supports it) the shared prefix
        is left out of the items: the body runs it once (headswap.nn.prefix_cache)."""
        from headswap.nn.prefix_cache import supports_prefix_cache
        from headswap.text.encoding import TextEncoder
        from headswap.text.prompts import build_prompt
        self.prompt = build_prompt(self.tokenizer, self.labels, self.descriptions, self.params.get("instruction"),
                                   letters=letters, multi_label=bool(self.params.get("multi_label")),
                                   language=self.prompt_language())
        cached = cache and self.params.get("prefix_cache", True) and supports_prefix_cache(self.base_model())
        return TextEncoder(self.tokenizer, "prompt", self.params["max_length"], prompt=self.prompt,
                           include_prefix=not cached)

    def prompt_language(self) -> str:
        """The prompt's language, 'auto' resolved: from the training texts when fitting (and saved), as saved
        when loading; English for a model saved before prompts had a language."""
        from headswap.text.prompts import prompt_language_of
        language = self.params.get("prompt_language", "auto")
        if language == "auto":
            language = (prompt_language_of(self.texts) if self.texts is not None
                        else self.restored.get("prompt_language", "en"))
        self.saved["prompt_language"] = language
        return language

    def body(self):
        """The body module: the base transformer's hidden states; for prompted encoders without the prefix
        in the items, the prefix-caching body."""
        from headswap.nn.hf import HFBody, strip_bert_pooler
        from headswap.nn.prefix_cache import PrefixCachedBody
        if self.encoder is not None and self.encoder.mode == "prompt":
            body = HFBody(self.base_model())
            return body if self.encoder.include_prefix else PrefixCachedBody(body, self.encoder.prefix_ids)
        return HFBody(strip_bert_pooler(self.base_model()))


class Strategy:
    """One way of turning a pretrained model into a classifier. Subclass, set the attributes, register."""

    name: str = ""
    description: str = ""
    needs_causal: bool = False      # runs on causal LMs only
    encoder_only: bool = False      # benchmarked on bidirectional encoders only
    zero_shot: bool = False         # predicts untrained (epochs=0): its head comes from the pretrained model
    prompted: bool = False          # the text goes inside a task prompt
    has_head: bool = True           # has a separate head that the head-only regime can train alone
    lm_head: bool = False           # loads the causal LM with its LM head
    default_regime: str = "full"    # the regime that 'auto' resolves to
    default_head: str = "mlp"       # the head that 'auto' resolves to
    full_body_lr: float | None = None   # body learning rate of the full regime when none is set (None: settings')
    multi_label: bool = False       # can score each label on its own (sigmoid per label) for multi-label data
    few_shot: bool = False          # made for a few texts per class; bench runs it only when named
    exportable: bool = False        # `headswap export` can write it as an ONNX graph (encoder bodies)
    chunkable: bool = True          # encodes each text on its own (Build.plain_encoder): chunk_stride applies
    frozen_features: bool = False   # head-only trains on the frozen body's pooled features (auto's cheap rungs)
    pooled_features: bool = True    # its module has with_features (one (D,) vector per text): mahalanobis, knn

    def missing(self) -> str | None:
        """Why this strategy cannot run here (a package it needs is not installed, with the command that installs
        it); None when it can. bench and auto skip it with this reason instead of failing its rung."""
        return None

    def fits(self, kind: str) -> str | None:
        """None when the strategy runs on a model of `kind` ('encoder' | 'causal'); otherwise why not."""
        if self.needs_causal and kind != "causal":
            return f"strategy {self.name!r} needs a causal language model; this model is an {kind}"
        return None

    def check(self, params: dict[str, Any]) -> None:
        """Raise ConfigError when the (regime-resolved) settings cannot work with this strategy."""
        if params["epochs"] == 0 and not self.zero_shot:
            raise ConfigError(f"strategy {self.name!r} starts with an untrained head and cannot run zero-shot "
                              f"(epochs=0)")
        if params.get("cache_lower") and params["regime"] not in ("partial", "lora"):
            raise ConfigError(f"cache_lower caches the frozen blocks below the trained ones: set regime partial or "
                              f"lora ({self.name} trains {params['regime']!r} by default)")
        if params["regime"] == "head-only" and not self.has_head:
            raise ConfigError(f"{self.name} has no separate head to train; use regime lora, partial or full")
        if params.get("multi_label") and not self.multi_label:
            able = ", ".join(s.name for s in REGISTRY.values() if s.multi_label)
            raise ConfigError(f"strategy {self.name!r} picks one class per text and cannot do multi-label; use one "
                              f"of {able}")
        if params.get("reject_score") in ("mahalanobis", "knn") and not self.pooled_features:
            raise ConfigError(f"strategy {self.name!r} has no pooled features per text, so reject_score "
                              f"{params['reject_score']!r} cannot be computed; it supports auto, softmax and energy")
        if params.get("chunk_stride") is not None and not self.chunkable:
            able = ", ".join(s.name for s in REGISTRY.values() if s.chunkable)
            raise ConfigError(f"strategy {self.name!r} does not encode each text on its own and cannot chunk long "
                              f"texts (chunk_stride); it truncates them. Chunking strategies: {able}")

    def text_encoder(self, b: Build):
        """The TextEncoder that turns this strategy's texts into batches."""
        return b.plain_encoder()

    def build(self, b: Build):
        """The classifier module (headswap.nn.classifier.ClassifierModule) on the loaded model."""
        raise NotImplementedError

    def freeze(self, module, regime: str) -> None:
        """After the regime is applied: freeze what must stay pretrained in this strategy."""

    def prepare_body(self, module, encoder, items: list[dict], targets: list, params: dict, cfg) -> dict | None:
        """Before the training loop: a phase of its own on the encoded training items (setfit's contrastive
        tuning); cfg is the loop's TrainConfig. Returns a summary for the model's history, or None when there
        is no such phase."""
        return None

    def extra_metrics(self, module, num_classes: int) -> dict:
        """Strategy-specific entries for Metrics.extra after an evaluation."""
        return {}

    def export_module(self, module):
        """What `headswap export` traces: a module mapping the encoder's batch tensors to (B, K) logits."""
        return module

    def passes_per_text(self, num_classes: int) -> str:
        """Forward passes per text at inference, as the benchmark reports it."""
        return "1"

    def __repr__(self) -> str:
        return f"<strategy {self.name}>"
