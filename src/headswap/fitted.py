"""What TextClassifier learns besides its weights, in one place that saves and loads itself.

TextClassifier exposes each field with scikit-learn's trailing underscore (labels_, classes_, temperature_,
...). The saved keys of headswap_config.json are those of the first saved format: a directory written by any
earlier version loads unchanged (tests/fixtures/format1).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np


@dataclass
class Fitted:
    labels: list[str]                     # class names, as strings, in logit order
    classes: np.ndarray                   # the caller's label values (integer labels stay integers)
    descriptions: dict[str, str]          # {label: description}, what similarity and prompts read
    class_weight: dict | None = None      # {label: weight} used by the loss, whatever file or rule gave it
    temperature: float | list[float] | None = None   # calibration: one, or one per label (multi-label)
    thresholds: list[float] | None = None            # multi-label decision thresholds, one per label
    reject_threshold: float | None = None            # out_of_scope: the top probability below which it rejects
    # out_of_scope: the score it rejects by and its threshold (headswap.oos), and the statistics that feature
    # scores read (headswap.oos_scores.OosStatistics, saved in a safetensors file of its own, not in the config)
    oos_score: dict | None = None
    oos_statistics: Any = None
    history: list[dict] = field(default_factory=list)   # one entry per epoch: loss, validation metrics
    best_epoch: int | None = None
    train_seconds: float = 0.0
    build_seconds: float = 0.0
    stopped: str | None = None            # why training ended before its last epoch (time_limit); not saved
    trainable_params: int | None = None
    body_tuning: dict | None = None       # what a strategy's prepare_body did (e.g. setfit's contrastive phase)
    evaluation: dict | None = None        # test metrics recorded by `headswap train --data DIR`
    notes: list[str] = field(default_factory=list)   # things a user should know about this run (truncation)
    chunk_aggregate: str | None = None    # how a chunked text's window logits are aggregated (mean, max); None: no chunking
    distillation: dict | None = None      # a student's record of its teacher (headswap.distill); saved when set

    SAVED = ("temperature", "thresholds", "reject_threshold", "oos_score", "body_tuning", "history", "train_seconds",
             "evaluation", "chunk_aggregate")

    def labels_config(self) -> dict:
        """The keys that come first in the saved config."""
        return {"labels": list(self.labels), "label_values": self.classes.tolist(), "descriptions": self.descriptions}

    def fit_config(self) -> dict:
        """The keys that come last in the saved config: what training and calibration produced."""
        out = {k: getattr(self, k) for k in self.SAVED}
        if self.distillation is not None:    # only a distilled student's config has the key
            out["distillation"] = self.distillation
        return out

    @classmethod
    def for_labels(cls, labels, descriptions: dict | None = None) -> "Fitted":
        """Nothing learnt yet, for these class names (each describing itself unless given): what a module is
        built for outside fit()."""
        return cls(list(labels), np.array(list(labels), dtype=object), descriptions or {lab: lab for lab in labels})

    @classmethod
    def from_config(cls, config: dict) -> "Fitted":
        labels = list(config["labels"])
        values = config.get("label_values") or labels
        classes = np.array(values) if all(isinstance(v, int) for v in values) else np.array(values, dtype=object)
        weight = config["params"].get("class_weight")
        return cls(labels, classes, config["descriptions"], class_weight=weight if isinstance(weight, dict) else None,
                   temperature=config.get("temperature"), thresholds=config.get("thresholds"),
                   reject_threshold=config.get("reject_threshold"), oos_score=config.get("oos_score"),
                   history=config.get("history") or [], train_seconds=config.get("train_seconds") or 0.0,
                   body_tuning=config.get("body_tuning"), evaluation=config.get("evaluation"),
                   chunk_aggregate=config.get("chunk_aggregate"), distillation=config.get("distillation"))


def expose(cls):
    """Class decorator: each Fitted field F as a read-write attribute F_ of cls, kept in cls's fitted_; an
    unfitted estimator has none of them (hasattr is False), as scikit-learn expects."""
    def attribute(name):
        return property(lambda self: getattr(self.__dict__.get("fitted_") or _unfitted(name), name),
                        lambda self, value: setattr(self.fitted_, name, value))
    for f in fields(Fitted):
        setattr(cls, f.name + "_", attribute(f.name))
    return cls


def _unfitted(name: str):
    raise AttributeError(f"{name}_: not fitted yet")
