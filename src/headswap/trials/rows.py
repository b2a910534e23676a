"""What bench and auto record of a row in results.json: its metrics or its error, the TF-IDF baseline's out-of-scope
block, and results.json itself."""

from __future__ import annotations

import json
import traceback
from pathlib import Path


def metric_fields(m) -> dict:
    fields = {"macro_f1": m.f1("macro"), "weighted_f1": m.f1("weighted"), "accuracy": m.accuracy,
              "labels": list(m.labels), "f1_per_class": {lab: float(f) for lab, f in zip(m.labels, m.f1_per_class)},
              "confusion": m.confusion.tolist(), "n_test": int(m.confusion.sum())}
    if m.binary() is not None:
        fields["binary"] = {"positive_label": m.positive_label, **m.binary()}
    return fields


def error_fields(e: BaseException) -> dict:
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return {"status": "error", "error": f"{type(e).__name__}: {e}", "traceback": "".join(tb[-6:])}


def _jsonable(value):
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    return str(value)


def write_json(results: dict, path) -> Path:
    from headswap.saved.atomic import write_text
    return write_text(path, json.dumps(results, indent=2, default=_jsonable) + "\n")


def tfidf_reject_block(clf, validation, test, label: str, metric: str, target: float) -> dict:
    """A fitted TfidfClassifier's out-of-scope figures on `test` by the max-probability rule, its threshold tuned on
    `validation` (None: no threshold) as TextClassifier tunes one (headswap.classifier.reject_option.probability_block)."""
    from headswap.classifier.reject_option import probability_block
    val_probs, val_labels = ((clf.predict_proba(validation.texts), validation.labels) if validation is not None
                             else (None, None))
    return probability_block(clf.classes_, label, val_probs, val_labels, clf.predict_proba(test.texts),
                             test.labels, metric, target)
