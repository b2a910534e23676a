"""Metrics from raw logits: softmax -> argmax -> confusion matrix -> precision/recall/F1.

Everything derives from the confusion matrix, with scikit-learn's conventions (a 0/0 ratio is 0;
weighted averages weight by support); tests check agreement with scikit-learn on random inputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import torch

from headswap.errors import ConfigError


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.zeros_like(num, dtype=float), where=den > 0)


@dataclass
class Metrics:
    labels: list[str]
    confusion: np.ndarray                     # rows = true class, columns = predicted class
    positive_label: str | None = None         # the class binary precision/recall/F1 is about
    extra: dict = field(default_factory=dict)  # timings, parameter counts, ...

    @property
    def support(self) -> np.ndarray:
        return self.confusion.sum(axis=1)

    @property
    def precision_per_class(self) -> np.ndarray:
        return _ratio(np.diag(self.confusion).astype(float), self.confusion.sum(axis=0).astype(float))

    @property
    def recall_per_class(self) -> np.ndarray:
        return _ratio(np.diag(self.confusion).astype(float), self.support.astype(float))

    @property
    def f1_per_class(self) -> np.ndarray:
        p, r = self.precision_per_class, self.recall_per_class
        return _ratio(2 * p * r, p + r)

    @property
    def accuracy(self) -> float:
        n = self.confusion.sum()
        return float(np.trace(self.confusion) / n) if n else 0.0

    def _avg(self, values: np.ndarray, average: str) -> float:
        if average == "macro":
            return float(values.mean())
        n = self.support.sum()
        return float((values * self.support).sum() / n) if n else 0.0

    def precision(self, average="macro"): return self._avg(self.precision_per_class, average)
    def recall(self, average="macro"): return self._avg(self.recall_per_class, average)
    def f1(self, average="macro"): return self._avg(self.f1_per_class, average)

    def binary(self) -> dict[str, float] | None:
        """Precision, recall and F1 of the positive class (None when there is no positive class)."""
        if self.positive_label is None:
            return None
        i = self.labels.index(self.positive_label)
        return {"precision": float(self.precision_per_class[i]), "recall": float(self.recall_per_class[i]),
                "f1": float(self.f1_per_class[i])}

    def score(self, name: str) -> float:
        """A single number by name, for model selection: accuracy, macro_f1, weighted_f1, f1 (binary)..."""
        if name == "accuracy":
            return self.accuracy
        if name in ("f1", "precision", "recall"):
            b = self.binary()
            if b is None:
                raise ConfigError(f"metric {name!r} needs a positive label; use macro_{name} for multiclass")
            return b[name]
        avg, _, what = name.partition("_")
        if avg in ("macro", "weighted") and what in ("f1", "precision", "recall"):
            return getattr(self, what)(avg)
        raise ConfigError(f"unknown metric {name!r}; use accuracy, f1, precision, recall, or "
                         "macro_/weighted_ + f1/precision/recall")

    def to_dict(self) -> dict:
        d = {
            "labels": list(self.labels),
            "n": int(self.confusion.sum()),
            "accuracy": self.accuracy,
            "macro": {"precision": self.precision("macro"), "recall": self.recall("macro"), "f1": self.f1("macro")},
            "weighted": {"precision": self.precision("weighted"), "recall": self.recall("weighted"),
                         "f1": self.f1("weighted")},
            "per_class": {lab: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
                          for lab, p, r, f, s in zip(self.labels, self.precision_per_class,
                                                     self.recall_per_class, self.f1_per_class, self.support)},
            "confusion_matrix": self.confusion.tolist(),
        }
        if self.positive_label is not None:
            d["binary"] = {"positive_label": self.positive_label, **self.binary()}
        if self.extra:
            d["extra"] = self.extra
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    def report(self) -> str:
        width = max(12, *(len(lab) for lab in self.labels))
        lines = [f"{'':>{width}}  precision  recall     f1  support"]
        for lab, p, r, f, s in zip(self.labels, self.precision_per_class, self.recall_per_class,
                                   self.f1_per_class, self.support):
            lines.append(f"{lab:>{width}}  {p:9.3f}  {r:6.3f}  {f:5.3f}  {s:7d}")
        n = int(self.support.sum())
        for avg in ("macro", "weighted"):
            lines.append(f"{avg + ' avg':>{width}}  {self.precision(avg):9.3f}  {self.recall(avg):6.3f}  "
                         f"{self.f1(avg):5.3f}  {n:7d}")
        lines.append(f"{'accuracy':>{width}}  {'':9}  {'':6}  {self.accuracy:5.3f}  {n:7d}")
        if self.positive_label is not None:
            b = self.binary()
            lines.append(f"binary ({self.positive_label!r} positive): precision {b['precision']:.3f}  "
                         f"recall {b['recall']:.3f}  F1 {b['f1']:.3f}")
        lines.append("confusion matrix (rows = true, columns = predicted):")
        cw = max(6, *(len(lab) for lab in self.labels))
        lines.append(f"{'':>{width}}  " + " ".join(f"{lab:>{cw}}" for lab in self.labels))
        for lab, row in zip(self.labels, self.confusion):
            lines.append(f"{lab:>{width}}  " + " ".join(f"{v:>{cw}d}" for v in row))
        return "\n".join(lines)


def confusion_matrix(y_true, y_pred, num_classes: int) -> np.ndarray:
    y_true, y_pred = np.asarray(y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)
    return np.bincount(y_true * num_classes + y_pred, minlength=num_classes ** 2).reshape(num_classes, num_classes)


def default_positive_label(labels: list[str]) -> str | None:
    """For two classes, the second in order (sorted ['ham', 'spam'] -> 'spam'), as scikit-learn's pos_label=1."""
    return labels[1] if len(labels) == 2 else None


def metrics_from_predictions(y_true, y_pred, labels: list[str], positive_label: str | None = "auto") -> Metrics:
    if positive_label == "auto":
        positive_label = default_positive_label(labels)
    if positive_label is not None and positive_label not in labels:
        raise ConfigError(f"positive label {positive_label!r} is not one of the classes {labels}")
    return Metrics(list(labels), confusion_matrix(y_true, y_pred, len(labels)), positive_label)


def metrics_from_logits(logits, y_true, labels: list[str], positive_label: str | None = "auto") -> Metrics:
    """logits: (N, K) raw scores; y_true: (N,) class indices into `labels`."""
    logits = torch.as_tensor(logits)
    if logits.ndim != 2 or logits.shape[1] != len(labels):
        raise ValueError(f"logits must have shape (N, {len(labels)}), got {tuple(logits.shape)}")
    pred = logits.argmax(dim=-1).cpu().numpy()  # argmax of softmax == argmax of logits
    return metrics_from_predictions(np.asarray(y_true), pred, labels, positive_label)
