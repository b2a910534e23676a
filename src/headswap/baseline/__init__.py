"""The TF-IDF baseline: a classifier of its own (tfidf), and a model blended with it (blend); both scored by
evaluate_probabilities, as TextClassifier.evaluate scores itself."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from headswap.errors import HeadswapError

if TYPE_CHECKING:
    from headswap.metrics import Metrics


def evaluate_probabilities(predict_proba, X, y, labels: list[str], adjust=None) -> Metrics:
    """Metrics of a classifier that gives probabilities (the TF-IDF model, a blend) on labelled texts X, y, with the
    timing and calibration TextClassifier.evaluate puts in extra (the parameter counts are the caller's). A label
    never seen in training is one error naming it. adjust(probs): scores whose argmax is the decision (default:
    the probabilities themselves)."""
    from headswap.decisions import calibration
    from headswap.metrics import metrics_from_predictions
    texts, index = list(X), {lab: k for k, lab in enumerate(labels)}
    unseen = sorted({str(v) for v in y} - set(index))
    if unseen:
        raise HeadswapError(f"evaluation labels never seen in training: {unseen}; known: {labels}")
    t0 = time.perf_counter()
    probs = predict_proba(texts)
    seconds = time.perf_counter() - t0
    target = np.array([index[str(v)] for v in y])
    m = metrics_from_predictions(target, (adjust or (lambda p: p))(probs).argmax(1), labels)
    logits = np.log(np.clip(probs, 1e-12, 1))    # softmax(log p) = p: calibration measured on p itself
    m.extra.update(eval_seconds=seconds, texts_per_second=len(texts) / seconds if seconds else 0.0,
                   calibration=calibration.report(logits, target, None))
    return m
