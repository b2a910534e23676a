"""What a label is: one class per text (SingleLabel) or a set of classes (MultiLabel).

Each turns the caller's labels into training targets, and logits into probabilities, decisions, calibration and
metrics, so that TextClassifier carries no branch on the kind of labels. Targets are class indices (N,) for
single-label data and (N, K) 0/1 indicators for multi-label data: what the training loop's loss reads.
"""

from __future__ import annotations

import numpy as np
import torch

from headswap import settings
from headswap.data.load import (LabelledData, as_list, from_lists, load_class_weights, warn_lookalike_labels,
                                warn_weak_labels)
from headswap.data.multilabel import binarize, label_names, label_sets, read_label_sets, to_sets, tune_thresholds
from headswap.data.multilabel import warn_if_label_sets
from headswap.errors import ConfigError, HeadswapError



def integer_labels(y) -> bool:
    """Whether labels y are all integers (not bools): their classes_ stay integers, as scikit-learn's do."""
    return bool(y) and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in y)

class SingleLabel:
    """Each text has exactly one class: softmax over the K logits, argmax decides."""

    multi_label = False

    def check(self, params: dict) -> None:
        if params["metric"] in settings.MULTI_LABEL_ONLY_METRICS:
            raise ConfigError(f"metric {params['metric']!r} is for multi-label data (multi_label=True); use "
                              f"macro_f1, weighted_f1 or accuracy")

    def read(self, X, y, source: str) -> LabelledData:
        """Texts and labels checked (errors name the index); labels become strings."""
        return from_lists(X, [str(v) for v in as_list(y, source, "labels")], source)

    def classes(self, data: LabelledData, y: list) -> tuple[list[str], np.ndarray]:
        """(label names in logit order, classes_). Labels are strings inside (prompts, descriptions, saved
        config); classes_ keeps the caller's integer labels as integers, so that predict() output compares equal
        to y (scikit-learn's score)."""
        warn_lookalike_labels(data.labels, "training data")
        warn_if_label_sets(sorted(set(data.labels)), "training data")
        warn_weak_labels(data)
        numeric = integer_labels(y)
        names = sorted(set(data.labels), key=int if numeric else None)
        return names, np.array([int(s) for s in names]) if numeric else np.array(names, dtype=object)

    def names_in(self, labels) -> set[str]:
        return set(labels)

    def encode(self, labels, names: list[str]) -> list[int]:
        index = {lab: i for i, lab in enumerate(names)}
        return [index[v] for v in labels]

    def stratify_by(self, labels) -> list | None:
        return None

    def class_weight(self, spec, names: list[str], train_labels) -> dict | None:
        return load_class_weights(spec, names, train_labels)

    def probabilities(self, logits, temperature) -> np.ndarray:
        """Calibrated probabilities: the logits divided by the fitted temperature (one, or one per label)."""
        t = torch.as_tensor(temperature if temperature is not None else 1.0, dtype=torch.float64)
        return self._squash(torch.as_tensor(np.asarray(logits), dtype=torch.float64) / t).numpy()

    def _squash(self, scaled: torch.Tensor) -> torch.Tensor:
        return torch.softmax(scaled, -1)

    def fit_temperature(self, logits, y):
        from headswap.decisions import calibration
        return calibration.fit_temperature(logits, y)

    def thresholds(self, probs, y) -> None:
        return None

    def decide(self, probs, thresholds, classes: np.ndarray):
        """The class of each text (the temperature never changes the argmax)."""
        return classes[np.asarray(probs).argmax(axis=1)]

    def truth(self, y) -> list:
        return list(y)

    def metrics(self, logits, y, names, positive_label, calibrated, thresholds, balance=None):
        """(Metrics of the decisions, the calibration report); calibrated: the Temperature step (the probabilities
        predict_proba gives), balance: the Balance step predict applies."""
        from headswap.decisions import calibration
        from headswap.metrics import metrics_from_logits, metrics_from_predictions
        if balance is not None and balance.balance is not None:
            decided = balance.adjust(calibrated.apply(logits)).argmax(axis=1)
            m = metrics_from_predictions(np.asarray(y), decided, names, positive_label)
        else:
            m = metrics_from_logits(torch.from_numpy(np.asarray(logits)), y, names, positive_label)
        return m, calibration.report(logits, y, calibrated.temperature)


class MultiLabel(SingleLabel):
    """Each text has a set of classes ("a|b" in a CSV cell, a list in JSONL): one sigmoid per label, each
    against its own threshold (tuned on validation data), each with its own temperature."""

    multi_label = True

    def __init__(self, separator: str = "|"):
        self.separator = separator

    def check(self, params: dict) -> None:
        if params.get("out_of_scope") is not None:
            raise ConfigError("out_of_scope is for single-label data: a multi-label model already answers no label "
                              "when none reaches its threshold")
        if params["class_weight"] is not None:
            raise ConfigError("class_weight is for single-label data; multi-label training does not take it yet")
        if params["metric"] in settings.BINARY_METRICS:
            raise ConfigError(f"metric {params['metric']!r} scores the positive class of two-class data; for "
                              f"multi-label data use one of {', '.join(settings.MULTI_LABEL_METRICS)}")

    def read(self, X, y, source: str) -> LabelledData:
        """Texts and label sets checked; each label a tuple of names."""
        data = from_lists(X, None, source)
        data.labels = list(y)
        read_label_sets(data, self.separator, where=lambda i: f"{source}, index {i}")
        return data

    def classes(self, data: LabelledData, y: list) -> tuple[list[str], np.ndarray]:
        names = label_names(data.labels)
        warn_lookalike_labels(names, "training data")
        return names, np.array(names, dtype=object)

    def names_in(self, labels) -> set[str]:
        return set(label_names(labels))

    def encode(self, labels, names: list[str]) -> np.ndarray:
        return binarize(labels, names)

    def stratify_by(self, labels) -> list:
        # By the first label: label-set combinations are mostly unique.
        return [row[0] for row in labels]

    def class_weight(self, spec, names, train_labels) -> None:
        return None

    def _squash(self, scaled: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(scaled)

    def fit_temperature(self, logits, y):
        from headswap.decisions import calibration
        return calibration.fit_label_temperatures(logits, y)

    def thresholds(self, probs, y) -> list[float]:
        return tune_thresholds(probs, y).tolist()

    def chosen(self, probs, thresholds) -> np.ndarray:
        """(N, K) booleans: each label's probability against its threshold (0.5 untuned)."""
        probs = np.asarray(probs)
        return probs >= np.asarray(thresholds or [0.5] * probs.shape[1])

    def decide(self, probs, thresholds, classes: np.ndarray) -> list[tuple]:
        """A tuple per text of the labels whose probability reaches their threshold (possibly empty)."""
        return to_sets(self.chosen(probs, thresholds), list(classes))

    def truth(self, y) -> list[tuple]:
        return label_sets(list(y), self.separator)

    def metrics(self, logits, y, names, positive_label, calibrated, thresholds, balance=None):
        from headswap.decisions import calibration
        from headswap.metrics import MultiLabelMetrics
        probs = calibrated.apply(logits)
        m = MultiLabelMetrics(list(names), y > 0.5, self.chosen(probs, thresholds), thresholds)
        return m, calibration.report_multi_label(logits, y, calibrated.temperature)


def targets_for(multi_label: bool, separator: str = "|") -> SingleLabel:
    return MultiLabel(separator) if multi_label else SingleLabel()


def check_known(target: SingleLabel, labels, known: list[str], what: str) -> None:
    """Fail on labels that training never saw."""
    unseen = sorted(target.names_in(labels) - set(known))
    if unseen:
        raise HeadswapError(f"{what} labels never seen in training: {unseen}; known: {list(known)}")


def read_soft_labels(X, y, soft_labels, labels, multi_label: bool = False, out_of_scope: str | None = None):
    """What fit(X, soft_labels=, labels=) trains on: (texts, each text's most probable class name, (targets as an
    (N, K) float64 array, class names)) after checking soft_labels; every problem is one line naming it."""
    if y is not None:
        raise HeadswapError("fit takes labels y or soft_labels (with their class names in labels), not both")
    if multi_label:
        raise ConfigError("soft_labels are probabilities over single-label classes; multi_label=True does not "
                          "take them")
    if out_of_scope is not None:
        raise ConfigError("soft_labels do not combine with out_of_scope (the reject option is tuned on labelled "
                          "validation data); train on soft labels without it")
    if labels is None:
        raise HeadswapError("soft_labels need labels: the class name of each of their columns")
    names = [str(v) for v in as_list(labels, "soft_labels", "labels")]
    if len(set(names)) != len(names):
        raise HeadswapError(f"soft_labels' class names repeat: {sorted({n for n in names if names.count(n) > 1})}")
    texts = as_list(X, "training data")
    try:
        probs = np.asarray(soft_labels, dtype=np.float64)
    except (TypeError, ValueError):
        raise HeadswapError("soft_labels must be an (texts, labels) array of numbers") from None
    if probs.shape != (len(texts), len(names)):
        raise HeadswapError(f"soft_labels must be (texts, labels) = ({len(texts)}, {len(names)}), got shape "
                            f"{probs.shape}")
    bad = np.flatnonzero(~np.isfinite(probs).all(1))
    if bad.size:
        raise HeadswapError(f"soft_labels hold NaN or infinite values ({bad.size} rows, the first at index "
                            f"{bad[0]})")
    bad = np.flatnonzero((probs < 0).any(1))
    if bad.size:
        raise HeadswapError(f"soft_labels hold negative values ({bad.size} rows, the first at index {bad[0]})")
    sums = probs.sum(1)
    bad = np.flatnonzero(np.abs(sums - 1) > 1e-3)
    if bad.size:
        raise HeadswapError(f"soft_labels rows must sum to 1 ({bad.size} rows do not, the first at index {bad[0]}: "
                            f"{sums[bad[0]]:.6g})")
    probs = probs / sums[:, None]
    return texts, [names[k] for k in probs.argmax(1)], (probs, names)
