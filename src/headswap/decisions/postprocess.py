"""Post-processing: the steps that turn a classifier's logits into probabilities and decisions, in this order.

    logits -> Temperature -> probabilities -> Balance -> Thresholds -> decisions -> Reject -> decisions (out of scope)

Each step fits itself on validation data, applies itself on its own to numpy or torch logits, and saves and
loads itself: config() gives the keys it keeps in headswap_config.json (the keys models have always saved, so
older directories load unchanged), save(path) writes any file of its own, and load(path, config) reads both.

    t = Temperature().fit(val_logits, val_y)
    probs = t.apply(test_logits)
    Temperature.load(path, json.loads(json.dumps(t.config())))    # the same temperature, exactly
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from headswap.decisions import balance, oos_scores, reject
from headswap.decisions.earned import Earned
from headswap.errors import HeadswapError
from headswap.decisions.oos_scores import FEATURE_SCORES, STATS_FILE, OosStatistics
from headswap.decisions.targets import SingleLabel

log = logging.getLogger(__name__)


class _OneKey:
    """A step whose saved state is one key of headswap_config.json, named as its field; no file of its own."""

    KEY = ""

    def config(self) -> dict:
        return {self.KEY: getattr(self, self.KEY)}

    def save(self, path: Path) -> None:
        """Nothing beyond config()."""

    @classmethod
    def load(cls, path: Path | None, config: dict, target: SingleLabel | None = None):
        return cls(config.get(cls.KEY), target or SingleLabel())


@dataclass
class Temperature(_OneKey):
    """Temperature scaling (headswap.decisions.calibration): logits / T before the softmax, or for multi-label data each
    label's logit over its own T before its sigmoid. None: not fitted, T = 1. Then the probabilities are kept within
    the certainty the validation texts could check (headswap.decisions.earned; None: not clipped)."""

    temperature: float | list[float] | None = None
    target: SingleLabel = field(default_factory=SingleLabel)   # what a label is: softmax or per-label sigmoids
    earned: Earned | None = None
    KEY = "temperature"

    def fit(self, logits, y) -> "Temperature":
        self.temperature = self.target.fit_temperature(logits, y)
        log.info("calibration: temperature %s fitted on %d validation texts", np.round(self.temperature, 3), len(y))
        return self

    def checked_on(self, n: int) -> "Temperature":
        """Bound the probabilities by the n validation texts that checked them (before the later steps fit on
        them)."""
        self.earned = Earned.checked_on(n)
        return self

    def apply(self, logits) -> np.ndarray:
        """(N, K) float64 probabilities."""
        probs = self.target.probabilities(logits, self.temperature)
        return probs if self.earned is None else self.earned.clip(probs, self.target.multi_label)

    def config(self) -> dict:
        return {self.KEY: self.temperature, **(self.earned.config() if self.earned is not None else {})}

    @classmethod
    def load(cls, path: Path | None, config: dict, target: SingleLabel | None = None) -> "Temperature":
        return cls(config.get(cls.KEY), target or SingleLabel(), Earned.load(config))


@dataclass
class Balance(_OneKey):
    """Single-label decisions leaned toward the rarer classes for macro F1 (headswap.decisions.balance): argmax of
    log p - tau log prior. None: the plain argmax. Set by auto where validation's held-out folds prefer it; saved
    as {"tau": tau, "prior": [each label's share of the training texts]}, only when set."""

    balance: dict | None = None
    target: SingleLabel = field(default_factory=SingleLabel)
    KEY = "balance"

    def set(self, tau: float, prior) -> "Balance":
        self.balance = {"tau": float(tau), "prior": [float(v) for v in prior]} if tau else None
        return self

    def adjust(self, probs) -> np.ndarray:
        """Scores whose argmax is the balanced decision (probs itself when not set): p / prior^tau."""
        if self.balance is None:
            return probs
        return balance.scores(probs, self.balance["prior"], self.balance["tau"])

    def config(self) -> dict:
        return {} if self.balance is None else {self.KEY: self.balance}


@dataclass
class Thresholds(_OneKey):
    """The decision on probabilities: argmax for single-label data; for multi-label data each label whose
    probability reaches its threshold, tuned per label for F1 (0.5 until fitted)."""

    thresholds: list[float] | None = None
    target: SingleLabel = field(default_factory=SingleLabel)
    KEY = "thresholds"

    def fit(self, probs, y) -> "Thresholds":
        self.thresholds = self.target.thresholds(probs, y)
        return self

    def decide(self, probs, classes: np.ndarray):
        """Each row's class (from `classes`, in logit order); multi-label: a tuple of them per row."""
        return self.target.decide(probs, self.thresholds, classes)


@dataclass
class Reject:
    """The reject option (headswap.decisions.reject) on one out-of-scope score (headswap.decisions.oos_scores): a text is out of
    scope when a learned out-of-scope class wins, or when its score passes the tuned threshold.

    threshold is the softmax rule's (reject below that top probability; what models saved before there was a
    choice of score), entry the {"score", "threshold", "statistics", "validation", "expected"} saved as oos_score
    ("expected": what the validation texts promise for new ones, headswap.decisions.reject.expectation; models saved
    before it was recorded lack it), statistics what the feature scores read (saved as
    oos_statistics.safetensors)."""

    oos_index: int | None = None          # the logit column of an out-of-scope class learned in training
    threshold: float | None = None
    entry: dict | None = None
    statistics: OosStatistics | None = None

    @property
    def score_name(self) -> str:
        """The score it rejects by (softmax for models tuned before there was a choice)."""
        return (self.entry or {}).get("score") or "softmax"

    def available(self, features: bool = True) -> list[str]:
        """The scores it can compute: softmax and energy always; the feature scores given features and statistics."""
        return ["softmax", "energy"] + (list(FEATURE_SCORES) if features and self.statistics is not None else [])

    def fit_statistics(self, features, y, seed: int = 0) -> "Reject":
        """Fit what mahalanobis and knn read on training features (N, D) and their class indices y."""
        self.statistics = OosStatistics.fit(features, np.asarray(y), self.oos_index, seed=seed)
        log.info("out-of-scope statistics fitted on %d training features", len(features))
        return self

    def scores(self, probs, logits, features=None, names=None) -> dict[str, np.ndarray]:
        """{score: (N,) values} of `names` (default: every score it can compute from what is given)."""
        return {name: oos_scores.compute(name, probs, logits, features, self.statistics, self.oos_index)
                for name in (names or self.available(features is not None))}

    def fit(self, probs, logits, features, y, is_oos, score: str = "auto", metric: str = "in_scope_accuracy",
            target: float = 0.95) -> list[str]:
        """Pick the score (`score`, or auto: the best validation AUROC) and tune its threshold for `metric` to reach
        `target` at the lower end of its 95% interval on the validation counts (headswap.decisions.reject.tune),
        on validation rows: calibrated probs, logits, pooled features (None: no feature scores), class indices y and
        is_oos booleans. Returns the notes a user should see (the choice, a target the texts cannot support)."""
        is_oos = np.asarray(is_oos, dtype=bool)
        values = self.scores(probs, logits, features)
        figs = {n: oos_scores.figures(v, is_oos) for n, v in values.items()}
        note = None
        if score != "auto":
            name = score
        elif not is_oos.any():
            name, note = "softmax", ("reject_score auto: softmax, because the validation data has no out-of-scope "
                                     "texts to compare the scores on")
        else:
            name = oos_scores.pick({n: f["auroc"] for n, f in figs.items()})
            note = "reject_score auto: " + name + " (validation AUROC " + ", ".join(
                f"{n} {f['auroc']:.4f}" for n, f in figs.items()) + ")"
        value = None if name == "softmax" else values[name]
        threshold, warn = reject.tune(probs, y, is_oos, metric, target, self.oos_index, value, reject.CONFIDENCE)
        # softmax's 0.0 rejects nothing: saved as None, as models before the choice of score saved it
        self.threshold = (threshold or None) if name == "softmax" else None
        used = self.threshold if value is None else threshold
        self.entry = {"score": name, "threshold": None if name == "softmax" else threshold,
                      "statistics": STATS_FILE if self.statistics is not None else None, "validation": figs,
                      "expected": reject.expectation(probs, y, is_oos, used, metric, target, self.oos_index, value)}
        if note:
            log.info(note)
        if warn:
            log.warning(warn)
        log.info("reject option (%s) on %d validation texts: %s", name, len(y),
                 reject.describe(reject.scores(probs, y, is_oos, used, self.oos_index, value)))
        if self.entry["expected"]:
            log.info("reject option: expect %s", reject.describe_expectation(self.entry["expected"]))
        return [line for line in (note, warn) if line]

    def rejected(self, probs, score=None) -> np.ndarray:
        """(N,) booleans: the texts it turns away, from calibrated probabilities (and, when it rejects by another
        score than softmax, that score of each text)."""
        name = self.score_name
        if name == "softmax":
            return reject.rejected(probs, self.threshold, self.oos_index)
        if score is None:
            raise HeadswapError(f"this model rejects out-of-scope texts by its {name} score, which probabilities alone "
                                f"do not give: pass the scores from "
                                f"TextClassifier.predict_scored (or call predict)")
        return reject.rejected(probs, self.entry["threshold"], self.oos_index, score)

    def decide(self, decisions: np.ndarray, probs, score=None, value="oos") -> np.ndarray:
        """`decisions` (one class per row) with `value` where it rejects the text."""
        out = decisions.astype(object) if isinstance(value, str) else decisions.copy()   # integer classes, a word
        out[self.rejected(probs, score)] = value
        return out

    def report(self, probs, logits, features, y, is_oos) -> dict:
        """On rows with class indices y and is_oos booleans: the score in use, the decisions at the tuned
        threshold and without it (headswap.decisions.reject.scores), every computable score's AUROC and FPR@95TPR, and
        each score's histogram by kind of text."""
        values = self.scores(probs, logits, features)
        name = self.score_name
        value = values.get(name) if name != "softmax" else None
        threshold = self.threshold if name == "softmax" else (self.entry or {}).get("threshold")
        k = self.oos_index
        out = {"score": name, **reject.scores(probs, y, is_oos, threshold, k, value)}
        out["in_scope_accuracy_without_threshold"] = reject.scores(probs, y, is_oos, None, k)["in_scope_accuracy"]
        if (self.entry or {}).get("expected"):   # what validation promised, to read these figures against
            out["expected"] = self.entry["expected"]
        out["scores"] = {n: oos_scores.figures(v, is_oos) for n, v in values.items()}
        # Histograms, not the values: small enough for metrics.json, and all a distribution plot needs.
        out["distribution"] = {n: oos_scores.histogram(v, is_oos) for n, v in values.items()}
        return out

    def config(self) -> dict:
        return {"reject_threshold": self.threshold, "oos_score": self.entry}

    def save(self, path: Path) -> None:
        if self.statistics is not None:
            self.statistics.save(Path(path) / STATS_FILE)

    @classmethod
    def load(cls, path: Path | None, config: dict, oos_index: int | None = None) -> "Reject":
        """The saved threshold and score, with the statistics file the score's entry names read back exactly."""
        entry = config.get("oos_score")
        stats = None
        if (entry or {}).get("statistics"):
            from headswap.saved.model_dir import inside
            file = inside(Path(path), entry["statistics"], "oos_score.statistics")
            if not file.is_file():
                raise HeadswapError(f"{file} is missing; the model directory is incomplete (its out-of-scope score "
                                    f"{entry.get('score')!r} reads it)")
            stats = OosStatistics.load(file)
        return cls(oos_index, config.get("reject_threshold"), entry, stats)


def oos_column(labels, out_of_scope: str | None) -> int | None:
    """The logit column of the out-of-scope class, when training learned one."""
    return list(labels).index(out_of_scope) if out_of_scope is not None and out_of_scope in labels else None
