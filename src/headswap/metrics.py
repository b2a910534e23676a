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
from headswap.settings import MULTI_LABEL_METRICS


# Up to this many classes a report prints the whole confusion matrix; above, the TOP_CONFUSIONS largest cells.
MATRIX_MAX_CLASSES, TOP_CONFUSIONS = 20, 10


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.zeros_like(num, dtype=float), where=den > 0)


class _JSON:
    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)


@dataclass
class Metrics(_JSON):
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

    def most_confused(self, top: int = TOP_CONFUSIONS) -> list[tuple[str, str, int]]:
        """The `top` largest off-diagonal cells as (true, predicted, count), largest first (ties in label order)."""
        off = self.confusion.copy()
        np.fill_diagonal(off, 0)
        cells = sorted(zip(*np.nonzero(off)), key=lambda ij: (-off[ij], ij))
        return [(self.labels[i], self.labels[j], int(off[i, j])) for i, j in cells[:top]]

    def report(self, chart: str | None = None) -> str:
        """The per-class table and, up to MATRIX_MAX_CLASSES classes, the confusion matrix; above that, the
        most-confused pairs and where the whole matrix is (`chart`: the confusion-matrix PNG, when one was
        drawn), since a 151-class matrix prints lines thousands of characters wide."""
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
        if len(self.labels) > MATRIX_MAX_CLASSES:
            pairs = self.most_confused()
            lines.append(f"the {len(pairs)} most confused pairs (true -> predicted: texts):" if pairs else
                         "no confusions: every text was predicted right")
            lines += [f"  {t} -> {p}: {n}" for t, p, n in pairs]
            lines.append(f"the whole confusion matrix: {chart}" if chart else
                         "the whole confusion matrix is in the metrics (confusion_matrix); headswap eval draws it")
            return "\n".join(lines)
        lines.append("confusion matrix (rows = true, columns = predicted):")
        cw = max(6, *(len(lab) for lab in self.labels))
        lines.append(f"{'':>{width}}  " + " ".join(f"{lab:>{cw}}" for lab in self.labels))
        for lab, row in zip(self.labels, self.confusion):
            lines.append(f"{lab:>{width}}  " + " ".join(f"{v:>{cw}d}" for v in row))
        return "\n".join(lines)


def class_list(labels, limit: int = MATRIX_MAX_CLASSES, first: int = 8) -> str:
    """The class names, comma-separated, or above `limit` the first few and the count (a line, not 120 KB)."""
    labels = [str(lab) for lab in labels]
    if len(labels) <= limit:
        return ", ".join(labels)
    return f"{', '.join(labels[:first])}, ... and {len(labels) - first} more"


def confusion_matrix(y_true, y_pred, num_classes: int) -> np.ndarray:
    """Rows truth, columns prediction; for 2-D y_true and y_pred (a row of texts per matrix, as a bootstrap draws
    them), a stack of matrices from one bincount."""
    y_true, y_pred = np.asarray(y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)
    k2 = num_classes ** 2
    if y_pred.ndim == 1:
        return np.bincount(y_true * num_classes + y_pred, minlength=k2).reshape(num_classes, num_classes)
    at = np.arange(len(y_pred))[:, None] * k2 + y_true * num_classes + y_pred
    return np.bincount(at.ravel(), minlength=len(y_pred) * k2).reshape(len(y_pred), num_classes, num_classes)


def macro_f1(confusion: np.ndarray) -> np.ndarray:
    """Macro F1 of a confusion matrix (rows truth, columns prediction) or of a stack of them: every label, 0 for one
    neither present nor predicted, as score_logits counts it."""
    c = np.asarray(confusion)
    hits = np.diagonal(c, axis1=-2, axis2=-1)
    return np.mean(2 * hits / np.maximum(c.sum(-1) + c.sum(-2), 1), axis=-1)


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


# ---- multi-label ---------------------------------------------------------------------------------------------

@dataclass
class MultiLabelMetrics(_JSON):
    """Scores of predicted label sets against true ones, from (N, K) indicator matrices (scikit-learn's
    definitions: micro, macro, weighted and samples averages; accuracy is subset accuracy)."""

    labels: list[str]
    y_true: np.ndarray
    y_pred: np.ndarray
    thresholds: list[float] | None = None
    extra: dict = field(default_factory=dict)

    def _prf(self, average):
        from sklearn.metrics import precision_recall_fscore_support
        p, r, f, s = precision_recall_fscore_support(self.y_true, self.y_pred, average=average, zero_division=0)
        return p, r, f, s

    @property
    def accuracy(self) -> float:
        return float((self.y_true == self.y_pred).all(axis=1).mean()) if len(self.y_true) else 0.0

    @property
    def hamming_loss(self) -> float:
        return float((self.y_true != self.y_pred).mean()) if self.y_true.size else 0.0

    def f1(self, average="macro") -> float:
        return float(self._prf(average)[2])

    def score(self, name: str) -> float:
        if name == "accuracy":
            return self.accuracy
        avg, _, what = name.partition("_")
        if avg in ("macro", "micro", "weighted", "samples") and what in ("f1", "precision", "recall"):
            return float(self._prf(avg)[("precision", "recall", "f1").index(what)])
        raise ConfigError(f"metric {name!r} does not apply to multi-label data; use one of "
                          f"{', '.join(MULTI_LABEL_METRICS)}")

    def to_dict(self) -> dict:
        p, r, f, s = self._prf(None)
        d = {"labels": list(self.labels), "n": int(len(self.y_true)), "multi_label": True,
             "subset_accuracy": self.accuracy, "accuracy": self.accuracy, "hamming_loss": self.hamming_loss}
        for avg in ("micro", "macro", "weighted", "samples"):
            ap, ar, af, _ = self._prf(avg)
            d[avg] = {"precision": float(ap), "recall": float(ar), "f1": float(af)}
        d["per_class"] = {lab: {"precision": float(a), "recall": float(b), "f1": float(c), "support": int(n),
                                "predicted": int(k)}
                          for lab, a, b, c, n, k in zip(self.labels, p, r, f, s, self.y_pred.sum(0))}
        if self.thresholds is not None:
            d["thresholds"] = dict(zip(self.labels, map(float, self.thresholds)))
        if self.extra:
            d["extra"] = self.extra
        return d

    def report(self, chart: str | None = None) -> str:
        """The per-label table (a multi-label model has no single confusion matrix: `chart` is not used)."""
        d = self.to_dict()
        width = max(12, *(len(lab) for lab in self.labels))
        lines = [f"{'':>{width}}  precision  recall     f1  support  predicted"
                 + ("  threshold" if self.thresholds is not None else "")]
        for i, lab in enumerate(self.labels):
            c = d["per_class"][lab]
            line = (f"{lab:>{width}}  {c['precision']:9.3f}  {c['recall']:6.3f}  {c['f1']:5.3f}  {c['support']:7d}"
                    f"  {c['predicted']:9d}")
            if self.thresholds is not None:
                line += f"  {self.thresholds[i]:9.2f}"
            lines.append(line)
        for avg in ("micro", "macro", "weighted", "samples"):
            a = d[avg]
            lines.append(f"{avg + ' avg':>{width}}  {a['precision']:9.3f}  {a['recall']:6.3f}  {a['f1']:5.3f}")
        lines.append(f"subset accuracy {self.accuracy:.3f}, Hamming loss {self.hamming_loss:.4f}, "
                     f"{len(self.y_true)} texts, {int(self.y_true.sum())} true labels, "
                     f"{int(self.y_pred.sum())} predicted")
        return "\n".join(lines)


def multi_label_metrics(logits, y_true, labels: list[str], thresholds=None) -> MultiLabelMetrics:
    """logits: (N, K) raw scores; y_true: (N, K) indicators. A label is predicted when its sigmoid reaches its
    threshold (default 0.5 for every label, i.e. logit >= 0)."""
    logits = torch.as_tensor(logits, dtype=torch.float32)
    y_true = np.asarray(y_true) > 0.5
    if logits.ndim != 2 or logits.shape[1] != len(labels) or y_true.shape != tuple(logits.shape):
        raise ValueError(f"logits and labels must both have shape (N, {len(labels)}), got {tuple(logits.shape)} "
                         f"and {y_true.shape}")
    t = torch.as_tensor(np.full(len(labels), 0.5) if thresholds is None else np.asarray(thresholds))
    y_pred = (torch.sigmoid(logits.double()) >= t).numpy()
    return MultiLabelMetrics(list(labels), y_true, y_pred, list(map(float, t)) if thresholds is not None else None)


def near_ties(predictions, y_true, num_classes: int, resamples: int = 1000, level: float = 0.95,
              seed: int = 0) -> list[int]:
    """Which of the candidates' predictions (each (N,) class indices) a paired bootstrap cannot tell from the best
    one's on macro F1: the texts drawn again with replacement `resamples` times, the same draw for every candidate,
    and candidate c near-tied when the best (highest macro F1 on all the texts; the earlier on a tie) scores higher
    than c in fewer than `level` of the draws. The best first, then the rest in order of their macro F1 (the
    earlier on a tie). On 30 validation texts a candidate two texts behind the best is one (the best wins ~86% of
    the draws); on 1,500 it is not."""
    y = np.asarray(y_true, dtype=np.int64)
    preds = [np.asarray(p, dtype=np.int64) for p in predictions]
    scores = [float(macro_f1(confusion_matrix(y, p, num_classes))) for p in preds]
    order = sorted(range(len(preds)), key=lambda i: (-scores[i], i))
    best, rng = order[0], np.random.default_rng(seed)
    wins = np.zeros(len(preds))
    chunk = max(1, min(resamples, 5_000_000 // max(len(y) + num_classes ** 2, 1)))   # a chunk's matrices: ~40 MB
    for start in range(0, resamples, chunk):
        draw = rng.integers(0, len(y), size=(min(chunk, resamples - start), len(y)))
        ours = macro_f1(confusion_matrix(y[draw], preds[best][draw], num_classes))
        for i in order[1:]:
            wins[i] += np.sum(ours > macro_f1(confusion_matrix(y[draw], preds[i][draw], num_classes)))
    return [i for i in order if i == best or wins[i] < level * resamples]
