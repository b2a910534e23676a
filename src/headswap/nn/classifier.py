"""Classifier modules: text batch -> (B, K) class logits. Classifier is body -> pool -> head; the body is any
module mapping (input_ids, attention_mask) to (B, T, D) hidden states (the tiny transformer, or a Hugging
Face model through HFBody). The strategies (headswap.strategies) assemble these from a loaded model."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from headswap.nn.inference import predict_logits, predict_logits_and_features
from headswap.nn.heads import PairScoreHead, make_head
from headswap.nn.pooling import make_pool
from headswap.text.encoding import label_tensor


class ClassifierModule(nn.Module):
    """The contract the training loop and TextClassifier rely on.

    forward(**batch) -> (B, K) logits; with computes_own_loss, forward(**batch, labels=y) returns the loss
    instead. Parameters under head_prefixes form the head: trained at the head learning rate and kept
    trainable in every regime. features(**batch) -> (B, D) is what the head sees; when feature_cacheable,
    head-only training computes it once per text and trains the head on the cache. logits(items, collate)
    is prediction, the same call as on headswap.classifier.runtime.OnnxRunner.
    """

    head_prefixes: tuple[str, ...] = ("head.",)
    computes_own_loss: bool = False
    saves_torch_weights: bool = True   # runtime.quantize_torch turns it off: int8 weights do not load back

    @property
    def feature_cacheable(self) -> bool:
        pool = getattr(self, "pool", None)
        return pool is not None and hasattr(self, "features") and not any(True for _ in pool.parameters())

    def start_predict(self) -> None:
        """Called before each prediction call (resets per-call counters)."""

    def logits(self, items: list, collate, batch_size: int = 64, progress: bool = False,
               desc: str = "predict") -> np.ndarray:
        """(N, K) float32 logits in the order of `items` (encoded texts; `collate` batches them)."""
        return predict_logits(self, items, collate, batch_size, progress=progress, desc=desc).numpy()

    def logits_and_features(self, items: list, collate, batch_size: int = 64, progress: bool = False,
                            desc: str = "predict") -> tuple[np.ndarray, np.ndarray]:
        """As logits(), with each item's pooled (N, D) features from the same pass (modules with with_features:
        what the out-of-scope scores of headswap.decisions.oos_scores read)."""
        logits, feats = predict_logits_and_features(self, items, collate, batch_size, progress=progress, desc=desc)
        return logits.numpy(), feats.numpy()


class Classifier(ClassifierModule):
    # A learned attention pool belongs to the head.
    head_prefixes = ("head.", "pool.")

    def __init__(self, body: nn.Module, hidden: int, num_classes: int, pooling: str | nn.Module = "mean",
                 head: str | nn.Module = "linear", **head_kwargs):
        super().__init__()
        self.body = body
        self.pool = make_pool(pooling, hidden) if isinstance(pooling, str) else pooling
        self.head = make_head(head, hidden, num_classes, **head_kwargs) if isinstance(head, str) else head

    def features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **body_kwargs) -> torch.Tensor:
        """The pooled (B, D) representation the head sees."""
        return self.pool(self.body(input_ids, attention_mask, **body_kwargs), attention_mask)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **body_kwargs) -> torch.Tensor:
        return self.head(self.features(input_ids, attention_mask, **body_kwargs))

    def with_features(self, input_ids, attention_mask, **body_kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        """((B, K) logits, (B, D) pooled features) from one pass of the body."""
        f = self.features(input_ids, attention_mask, **body_kwargs)
        return self.head(f), f


class SimilarityClassifier(ClassifierModule):
    """Bi-encoder: texts and class descriptions embedded by the same body; logits = scale * cosine.

    With use_prototypes (zero-shot, head-only) the class side is the head's stored prototypes. Otherwise
    the descriptions are re-embedded while the body trains, and embedded once for inference.
    """

    head_prefixes = ("head.", "pool.")

    def __init__(self, body: nn.Module, pool: nn.Module, head: nn.Module, desc_batch: dict, use_prototypes: bool):
        super().__init__()
        self.body, self.pool, self.head = body, pool, head
        self.use_prototypes = use_prototypes
        for k, v in desc_batch.items():
            self.register_buffer(f"desc_{k}", v, persistent=False)
        self._desc_keys = list(desc_batch)
        self._class_cache = None

    def features(self, input_ids, attention_mask, **kw):
        return self.pool(self.body(input_ids, attention_mask, **kw), attention_mask)

    def class_embeddings(self) -> torch.Tensor:
        if self.use_prototypes:
            return self.head.prototypes
        if self.training or torch.is_grad_enabled():
            self._class_cache = None
            batch = {k: getattr(self, f"desc_{k}") for k in self._desc_keys}
            return self.features(**batch)
        if self._class_cache is None:  # inference: embed the K descriptions once, not per batch
            batch = {k: getattr(self, f"desc_{k}") for k in self._desc_keys}
            self._class_cache = self.features(**batch)
        return self._class_cache

    def train(self, mode: bool = True):
        self._class_cache = None
        return super().train(mode)

    def forward(self, input_ids, attention_mask, **kw):
        return self.head.score(self.features(input_ids, attention_mask, **kw), self.class_embeddings())

    def with_features(self, input_ids, attention_mask, **kw):
        f = self.features(input_ids, attention_mask, **kw)
        return self.head.score(f, self.class_embeddings()), f

    @property
    def feature_cacheable(self) -> bool:
        return self.use_prototypes and super().feature_cacheable


class FixedClassEmbeddings(nn.Module):
    """A similarity classifier with its K class embeddings computed once and stored: what export traces, so
    that the exported graph embeds the texts only."""

    def __init__(self, classifier: SimilarityClassifier, classes: torch.Tensor):
        super().__init__()
        self.classifier = classifier
        self.register_buffer("classes", classes)

    def forward(self, input_ids, attention_mask, **kw):
        return self.classifier.head.score(self.classifier.features(input_ids, attention_mask, **kw), self.classes)

    def with_features(self, input_ids, attention_mask, **kw):
        f = self.classifier.features(input_ids, attention_mask, **kw)
        return self.classifier.head.score(f, self.classes), f


class CrossEncoderClassifier(ClassifierModule):
    """K passes per text: batch rows are (text, description) pairs, grouped K at a time."""

    head_prefixes = ("head.", "pool.")

    def __init__(self, body: nn.Module, pool: nn.Module, hidden: int, num_classes: int):
        super().__init__()
        self.body, self.pool = body, pool
        self.num_classes = num_classes
        self.head = PairScoreHead(hidden)

    def features(self, input_ids, attention_mask, **kw):
        pooled = self.pool(self.body(input_ids, attention_mask, **kw), attention_mask)
        return pooled.view(-1, self.num_classes, pooled.shape[-1])     # (B, K, D)

    def forward(self, input_ids, attention_mask, **kw):
        return self.head(self.features(input_ids, attention_mask, **kw))


class HeadOnFeatures(ClassifierModule):
    """The head alone, trained on cached body features (head-only regime: the frozen body runs once)."""

    head_prefixes = ("head.",)

    def __init__(self, head: nn.Module):
        super().__init__()
        self.head = head

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features)


def collate_features(items: list[dict]) -> dict:
    batch = {"features": torch.stack([it["features"] for it in items])}
    if "label" in items[0]:
        batch["labels"] = label_tensor([it["label"] for it in items])
    return batch


class PairCosine(ClassifierModule):
    """SetFit's contrastive phase on a classifier's body: the squared error between the cosine of two texts'
    pooled features and the pair's target (1 same class, 0 other class)."""

    head_prefixes = ()
    computes_own_loss = True

    def __init__(self, classifier: nn.Module):
        super().__init__()
        self.classifier = classifier

    def forward(self, input_ids, attention_mask, input_ids_b, attention_mask_b, labels):
        u = self.classifier.features(input_ids, attention_mask)
        v = self.classifier.features(input_ids_b, attention_mask_b)
        return F.mse_loss(F.cosine_similarity(u, v), labels.to(u.dtype))


def collate_text_pairs(items: list[dict], pad_id: int) -> dict:
    from headswap.text.encoding import pad
    a, a_mask = pad([it["a"] for it in items], pad_id)
    b, b_mask = pad([it["b"] for it in items], pad_id)
    return {"input_ids": a, "attention_mask": a_mask, "input_ids_b": b, "attention_mask_b": b_mask,
            "labels": torch.tensor([it["label"] for it in items], dtype=torch.float32)}
