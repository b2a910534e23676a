"""static: the base encoder distilled by model2vec into one vector per token, pooled, then a head.

Distillation (model2vec.distill: each vocabulary token through the encoder, PCA, Zipf weighting) runs once
per base model and vocabulary and is cached under HEADSWAP_CACHE/static; afterwards no transformer runs at
all, so prediction is a tokenizer plus a table lookup. The vocabulary is the encoder's own plus the training
texts' frequent words that it splits into pieces (`static_vocab_min_count`), each embedded whole: a table row
for "humiliated" rather than the mean of "hum", "##ili", "##ated". The distilled tokenizer is model2vec's (no
special tokens), not the base model's: it is the classifier's tokenizer_, which `headswap export` saves
beside the ONNX graph (table lookup, pooling and head). By default the table trains too (regime full) and a
learned attention pool weighs the words: on emotion these took macro F1 from 0.81 (mean pooling, frozen
table) to 0.85-0.86.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from pathlib import Path

from headswap.errors import ConfigError, HeadswapError
from headswap.strategies.base import Build, Strategy

log = logging.getLogger(__name__)

PCA_DIMS = 256          # model2vec's default; capped at the base model's hidden size
# Bump when the distillation recipe changes, so older caches are not reused.
_RECIPE = "1"


def _missing(distill: bool) -> str | None:
    """Why model2vec cannot run here (reading a cached table needs model2vec; distilling, its distiller too)."""
    try:
        import model2vec  # noqa: F401
        if distill:
            import model2vec.distill  # noqa: F401  (imports skeletoken)
    except ImportError as e:
        # model2vec[distill] pins transformers<5.4; skeletoken alone (--no-deps) distills with newer ones too.
        return (f"strategy 'static' needs model2vec{' and skeletoken' if distill else ''} ({e}); install with: "
                f"pip install 'headswap[static]'")
    return None


def _fingerprint(model, params: dict) -> str:
    """Hash of the base model's weights and config and the distillation settings: a changed model never
    reuses another's table."""
    import model2vec
    import torch
    h = hashlib.sha256(json.dumps({"recipe": _RECIPE, "model2vec": model2vec.__version__, **params},
                                  sort_keys=True).encode())
    h.update(model.config.to_json_string().encode())
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def cache_dir(model, name: str, vocabulary: list[str] | None = None) -> Path:
    """The folder the distilled table of `model` (with `vocabulary` added) lives in (it may not exist yet)."""
    from headswap.models import cache_root
    params = {"pca_dims": min(PCA_DIMS, model.config.hidden_size)}
    if vocabulary:
        params["vocabulary"] = hashlib.sha256("\n".join(vocabulary).encode()).hexdigest()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[-60:] or "model"
    return cache_root() / "static" / f"{safe}-{_fingerprint(model, params)}"


def table_name(model) -> str:
    """The name a base model's distilled tables are cached under: the last two parts of its folder."""
    return "-".join(Path(str(getattr(model, "name_or_path", "") or "encoder")).parts[-2:])


def training_vocabulary(tokenizer, texts, min_count: int) -> list[str]:
    """The words of `texts`, split as the encoder's tokenizer splits them (its normalizer, then its
    pre-tokenizer), seen at least `min_count` times and not already one token; most frequent first."""
    if not min_count or not texts:
        return []
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or backend.pre_tokenizer is None:
        return []     # a tokenizer without a word split (e.g. SentencePiece over raw text): nothing to add
    counts = Counter()
    for text in texts:
        text = backend.normalizer.normalize_str(text) if backend.normalizer else text
        counts.update(w for w, _ in backend.pre_tokenizer.pre_tokenize_str(text))
    known = tokenizer.get_vocab()
    return sorted((w for w, c in counts.items() if c >= min_count and w not in known),
                  key=lambda w: (-counts[w], w))


def distilled(model, tokenizer, name: str, vocabulary: list[str] | None = None):
    """The model2vec StaticModel of `model` with `vocabulary` added: read from the cache, or distilled once
    and written there."""
    reason = _missing(distill=False)
    if reason:
        raise ConfigError(reason)
    from model2vec import StaticModel
    target = cache_dir(model, name, vocabulary)
    if not (target / "model.safetensors").is_file():
        reason = _missing(distill=True)
        if reason:
            raise ConfigError(reason)
        from model2vec.distill import distill_from_model

        from headswap.models import building_in_cache, check_writable

        def unwritable(e: OSError) -> HeadswapError:
            return HeadswapError(f"cannot write the distilled static embeddings into the model cache "
                                 f"{target.parent} ({e.strerror}); set HEADSWAP_CACHE to a writable folder")
        try:
            check_writable(target.parent)     # before the distillation, not after it
        except OSError as e:
            raise unwritable(e) from None
        log.info("distilling %s into static embeddings once (cached in %s)", name, target)
        static = distill_from_model(model, tokenizer, vocabulary=vocabulary or None,
                                    pca_dims=min(PCA_DIMS, model.config.hidden_size), device="cpu",
                                    quantize_to="float32")
        try:
            with building_in_cache(target, "model.safetensors") as tmp:
                static.save_pretrained(tmp)
        except OSError as e:
            raise unwritable(e) from None
        return static
    return StaticModel.from_pretrained(str(target), normalize=True)


def text_tokenizer(static):
    """model2vec's own tokenizer (no special tokens; the training texts' words whole) as a transformers
    tokenizer: the one a TextEncoder runs, `headswap export` saves and an exported directory loads. Its pad
    token pads (masked out by the pooling) and its unknown token is left out of every text, as
    StaticModel.tokenize leaves it out."""
    from transformers import PreTrainedTokenizerFast
    backend = static.tokenizer
    pad = (backend.padding or {}).get("pad_token")
    unk = None if static.unk_token_id is None else backend.id_to_token(static.unk_token_id)
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=pad, unk_token=unk)


def _modules():
    import torch
    from torch import nn

    class StaticBody(nn.Module):
        """Token id -> its distilled vector (no context): (B, T) -> (B, T, D)."""

        def __init__(self, vectors):
            super().__init__()
            self.embeddings = nn.Embedding.from_pretrained(torch.as_tensor(vectors, dtype=torch.float32),
                                                           freeze=False)

        def forward(self, input_ids, attention_mask, **kw):
            return self.embeddings(input_ids)

    class NormalizedMean(nn.Module):
        """Mean over the text's tokens, then unit length (as model2vec encodes); an empty text is zeros."""

        def forward(self, hidden, mask):
            m = mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)
            return torch.nn.functional.normalize(mean, dim=-1)

    return StaticBody, NormalizedMean


class Static(Strategy):
    name = "static"
    description = ("model2vec static embeddings distilled once from the encoder (cached), with the training "
                   "texts' words added; the table trains, attention pooling, linear head; no transformer at "
                   "inference")
    encoder_only = True
    multi_label = True      # its head scores each label on its own like encoder-mlp's
    default_regime = "full"
    default_head = "linear"
    full_body_lr = 1e-2     # a lookup table, not a transformer: rows see few updates each (3e-3 to 3e-2 all did)
    exportable = True     # token ids -> table rows -> pool -> head: one small graph
    chunkable = True      # a plain TextEncoder (no special tokens): windows are slices of table rows

    def missing(self) -> str | None:
        return _missing(distill=False)

    def fits(self, kind: str) -> str | None:
        if kind != "encoder":
            return f"strategy {self.name!r} distills a bidirectional encoder; this model is a {kind}"
        return None

    def check(self, params) -> None:
        super().check(params)
        if params["regime"] in ("partial", "lora"):
            raise ConfigError(f"strategy 'static' has no transformer blocks for regime {params['regime']!r}; use "
                              f"head-only (the distilled table frozen) or full (the table trains too)")
        if params.get("instruction"):
            raise ConfigError("strategy 'static' takes no instruction: it embeds each token on its own")
        if params.get("pooling") in ("cls", "last"):
            raise ConfigError(f"strategy 'static' has no context in its token vectors, so pooling "
                              f"{params['pooling']!r} would read one word; use mean, max or attention")

    def text_encoder(self, b: Build):
        # Training builds the vocabulary from its texts; loading rebuilds the table the saved model was built on.
        vocabulary = b.restored.get("static_vocabulary") if b.texts is None else training_vocabulary(
            b.tokenizer, b.texts, b.params["static_vocab_min_count"])
        b.saved["static_vocabulary"] = vocabulary or []
        b.static = distilled(b.hf_model, b.tokenizer, table_name(b.hf_model), vocabulary)
        from headswap.text.encoding import TextEncoder
        # The whole list tokenized in one call of the Rust tokenizer (TextEncoder's path without special tokens).
        return TextEncoder(text_tokenizer(b.static), "plain", b.params["max_length"], special_tokens=False,
                           drop_unk=True, chunk_stride=b.params.get("chunk_stride"))

    def build(self, b: Build):
        from headswap.nn.classifier import Classifier
        from headswap.nn.heads import make_head
        from headswap.nn.pooling import make_pool
        StaticBody, NormalizedMean = _modules()
        body = StaticBody(b.static.embedding)
        dim = body.embeddings.embedding_dim
        k = len(b.labels)
        # attention learns which words carry the class; mean is model2vec's own encoding.
        name = b.pooling("attention")
        pooling = NormalizedMean() if name == "mean" else make_pool(name, dim)
        return Classifier(body, dim, k, pooling=pooling, head=make_head(b.params["head"], dim, k))
