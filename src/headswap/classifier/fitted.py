"""What TextClassifier learns besides its weights, in one place that saves and loads itself.

TextClassifier exposes each field with scikit-learn's trailing underscore (labels_, classes_, history_, ...),
and the post-processing steps' state (headswap.decisions.postprocess) under the names it always had (temperature_,
thresholds_, reject_threshold_, oos_score_, oos_statistics_): headswap.classifier.attributes declares them. The
saved keys of headswap_config.json are those of the first saved format: a directory written by any earlier version
loads unchanged (tests/fixtures/format1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from headswap.classifier.reject_option import RejectOption
from headswap.decisions.postprocess import Balance, Temperature, Thresholds, oos_column
from headswap.saved.model_dir import CONFIG_FILE, label_classes


@dataclass
class Fitted:
    labels: list[str]                     # class names, as strings, in logit order
    classes: np.ndarray                   # the caller's label values (integer labels stay integers)
    descriptions: dict[str, str]          # {label: description}, what similarity and prompts read
    class_weight: dict | None = None      # {label: weight} used by the loss, whatever file or rule gave it
    # the post-processing steps, in the order they run on logits (headswap.decisions.postprocess)
    temperature_step: Temperature = field(default_factory=Temperature)
    balance_step: Balance = field(default_factory=Balance)
    thresholds_step: Thresholds = field(default_factory=Thresholds)
    reject_step: RejectOption = field(default_factory=RejectOption)
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
    distillation: dict | None = None      # a student's record of its teacher (headswap.jobs.distill); saved when set
    parent: dict | None = None            # the model it trained on from (headswap.classifier.init_from); saved when set
    validation_proba: np.ndarray | None = None   # predict_proba on the validation texts (in-scope), at fit; not saved
    validation_probas: list | None = None   # the same at each validation the kept weights were picked among; not saved

    SAVED = ("body_tuning", "history", "train_seconds", "evaluation", "chunk_aggregate")
    STEPS = ("temperature_step", "balance_step", "thresholds_step", "reject_step")

    def labels_config(self) -> dict:
        """The keys that come first in the saved config."""
        return {"labels": list(self.labels), "label_values": self.classes.tolist(), "descriptions": self.descriptions}

    def fit_config(self) -> dict:
        """The keys that come last in the saved config: what training and calibration produced."""
        out = {k: v for step in self.STEPS for k, v in getattr(self, step).config().items()}
        out.update({k: getattr(self, k) for k in self.SAVED})
        if self.distillation is not None:    # only a distilled student's config has the key
            out["distillation"] = self.distillation
        if self.parent is not None:
            out["parent"] = self.parent
        return out

    def save(self, path: Path) -> None:
        """The steps' files of their own, beside the config (the reject option's statistics)."""
        for step in self.STEPS:
            getattr(self, step).save(path)

    @classmethod
    def for_labels(cls, labels, descriptions: dict | None = None) -> "Fitted":
        """Nothing learnt yet, for these class names (each describing itself unless given): what a module is
        built for outside fit()."""
        return cls(list(labels), np.array(list(labels), dtype=object), descriptions or {lab: lab for lab in labels})

    @classmethod
    def from_config(cls, config: dict, target=None, path: Path | None = None) -> "Fitted":
        """What the saved model in `path` learnt; target: what a label is (headswap.decisions.targets)."""
        labels = list(config["labels"])
        classes = label_classes(CONFIG_FILE if path is None else path / CONFIG_FILE, config)
        weight = config["params"].get("class_weight")
        return cls(labels, classes, config["descriptions"], class_weight=weight if isinstance(weight, dict) else None,
                   temperature_step=Temperature.load(path, config, target),
                   balance_step=Balance.load(path, config, target),
                   thresholds_step=Thresholds.load(path, config, target),
                   reject_step=RejectOption.load(path, config,
                                                 oos_column(labels, config["params"].get("out_of_scope"))),
                   history=config.get("history") or [], train_seconds=config.get("train_seconds") or 0.0,
                   body_tuning=config.get("body_tuning"), evaluation=config.get("evaluation"),
                   chunk_aggregate=config.get("chunk_aggregate"), distillation=config.get("distillation"),
                   parent=config.get("parent"))

